"""Judged once, read many times: the classification's rows kept beside the database.

The views (`queries/views/*.sql`) are the rules. Computing their heavy steps costs a second or
more whatever the size of the data (DuckDB plans a deep stack of views), and every command used
to pay it again. A judgement -- the rows those steps return for one database state, window and
set of options -- is now written once into a folder beside the database, `<db>.judgements/`, and
every later reader (`verdict`, `timeline`, `report`, `sql`, `export`, a fleet's per-instance
judgements) reads those rows instead of recomputing them. The cache holds rows the views
returned, never a rule: the views stay the single definition.

The key is `<state>-<judged>`, so a stale entry cannot be found (keyed, not timed):

* `state`: the database as this connection sees it -- the file's and its WAL's identity (device,
  inode, size, mtime, ctime) and a digest of what every write by pdforensics changes (the
  `ingests` and `meta` rows, the line, event, reject, source-stats and metric-sample counts, the
  last line id);
* `judged`: what the rows were computed by and with -- the view files, this module, `verdict.py`
  and `fleet.py`, DuckDB's version, `FORMAT`, and every session variable set on the connection
  (the verdict options, the window, a query's own leading `SET VARIABLE`s) and the time zone.

Only a read-only connection to a database file goes through the cache: DuckDB's file lock keeps
every writer out while it is open, so the state read when a judgement starts holds until it is
written. A writer's connection, an in-memory database and a fleet instance's scoped cursor (its
temporary `lines` / `events`) compute as before.

Each part is one DuckDB file, `<key>.<part>.duckdb`, tables in schema `judged`:

* `stack`: `context`, `inflight_gauge` and `verdict` (the views `verdict.materialised` shadows),
  and the answer relations `verdict.verdict_from_relations` reads (coverage, anonymous_pins, ...);
* `requests`: `requests` (the widest; written when a reader first needs it);
* `instances`: each prefill instance's `verdict` row, with its host (a fleet only).

A part is written whole into a temporary file in the folder and renamed into place, so a reader
finds a complete file or none; concurrent writers of one key write the same rows, the last rename
wins. A folder that cannot be written (or `PDFORENSICS_CACHE=off`) means computing every time.
After a write, the entries of other database states (which can never be read again) are removed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import duckdb

from pdforensics.store import sql_string

# Bump when what a part holds changes in a way the digested files do not show.
FORMAT = 1
ENV = "PDFORENSICS_CACHE"  # "off" (or 0/no/false): never read or write judgements
SUFFIX = ".judgements"  # the folder beside the database: <db>.judgements/
SCHEMA = "judged"
ENTRY_TABLE = "entry"  # one row: the key and part the file was written for (checked on read)
# Entries of the current state kept per folder (windows and options asked for); older go first.
KEEP = 48
_STALE_TMP_S = 600.0  # a temporary file this old belongs to a writer that died
# Tables that, shadowed by temporary ones, scope a connection to something else than the file
# (fleet.instance_scope): such a connection is never judged through the cache.
_BASE_TABLES = (
    "lines",
    "events",
    "meta",
    "ingests",
    "rooms",
    "line_seconds",
    "event_seconds",
    "metric_samples",
)
# Files whose code decides what the cached rows are (beside the views).
_CODE = ("judgement.py", "verdict.py", "fleet.py")


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() not in ("off", "0", "no", "false")


def folder_of(db: Path) -> Path:
    return db.parent / (db.name + SUFFIX)


@functools.cache
def rules_digest() -> str:
    """The view files, the code that runs them, DuckDB's version and FORMAT (once per process)."""
    from pdforensics.paths import queries_dir

    digest = hashlib.sha256(f"{FORMAT}|{duckdb.__version__}".encode())
    for path in sorted((queries_dir() / "views").glob("*.sql")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    here = Path(__file__).parent
    for name in _CODE:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Entry:
    """Where one judgement's parts are (or would be) kept."""

    folder: Path
    state: str
    judged: str

    @property
    def key(self) -> str:
        return f"{self.state}-{self.judged}"

    def path(self, part: str) -> Path:
        return self.folder / f"{self.key}.{part}.duckdb"

    def has(self, part: str) -> bool:
        return self.path(part).is_file()

    def attach(self, con: duckdb.DuckDBPyConnection, part: str) -> str | None:
        """The part attached read-only (its catalog name), or None when it is absent or unreadable.
        Attached databases are shared by a connection's cursors and stay attached with it."""
        if not self.has(part):
            return None
        alias = f"pdf_judged_{part}_{self.key.replace('-', '_')}"
        try:
            con.execute(f"ATTACH IF NOT EXISTS {sql_string(self.path(part))} AS {alias} (READ_ONLY)")
            row = con.execute(f"SELECT max(key) FROM {alias}.{SCHEMA}.{ENTRY_TABLE}").fetchone()
        except duckdb.Error:
            row = None
        if row and row[0] == f"{self.key}.{part}":
            return alias
        with suppress(duckdb.Error):  # not this entry's file: never read, and not left attached
            con.execute(f"DETACH DATABASE IF EXISTS {alias}")
        return None


def entry(con: duckdb.DuckDBPyConnection, catalog: str, own: Iterable[str] = ()) -> Entry | None:
    """The cache entry for what `con` would judge now, or None when it must compute: the cache is
    off, `con` is not a read-only connection to a database file, or a temporary relation of the
    caller's hides a table or a view (a fleet instance's scope, a caller's own rows): the rows
    would not be the file's. `own`: temporary relations that are this judgement's own shadows."""
    db = _read_only_file(con, catalog)
    if db is None:
        return None
    try:
        hidden = con.execute(_HIDDEN_SQL, [list(own), list(_BASE_TABLES)]).fetchone()
        if hidden and hidden[0]:
            return None
        content = con.execute(_content_sql(catalog)).fetchone()
        try:
            variables = con.execute(_VARIABLES_SQL).fetchall()
        except duckdb.Error:  # no time zone setting (DuckDB without ICU): nothing depends on one
            variables = con.execute(
                "SELECT name, value, type FROM duckdb_variables() ORDER BY ALL"
            ).fetchall()
    except duckdb.Error:
        return None
    state = hashlib.sha256(repr((_identity(db), _identity(Path(f"{db}.wal")), content)).encode())
    judged = hashlib.sha256(repr((rules_digest(), variables)).encode())
    return Entry(folder_of(db), state.hexdigest()[:20], judged.hexdigest()[:20])


# Temporary relations (not `own`) named as a base table or as a view of any catalog.
_HIDDEN_SQL = """
SELECT count(*) FROM (
    SELECT table_name AS name FROM duckdb_tables() WHERE temporary
    UNION ALL SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal
) AS t
WHERE NOT list_contains(?::VARCHAR[], t.name)
  AND (list_contains(?::VARCHAR[], t.name)
       OR t.name IN (SELECT view_name FROM duckdb_views() WHERE NOT temporary AND NOT internal))"""


# The session's variables (the views' parameters), and the settings a view's output could depend
# on (current_setting: duckdb_settings() lists them all, ten times the cost).
_VARIABLES_SQL = """
SELECT 'variable' AS kind, name, value, type FROM duckdb_variables()
UNION ALL SELECT 'setting', 'TimeZone', current_setting('TimeZone'), NULL
UNION ALL SELECT 'setting', 'Calendar', current_setting('Calendar'), NULL
ORDER BY ALL"""


def _identity(path: Path) -> tuple[int, ...] | None:
    try:
        s = path.stat()
    except OSError:
        return None
    return (s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)


def _content_sql(catalog: str) -> str:
    c = '"' + catalog.replace('"', '""') + '".main'
    return f"""SELECT
        (SELECT count(*) FROM {c}.lines), (SELECT max(line_id) FROM {c}.lines),
        (SELECT count(*) FROM {c}.events), (SELECT count(*) FROM {c}.rejects),
        (SELECT count(*) FROM {c}.source_stats), (SELECT count(*) FROM {c}.metric_samples),
        (SELECT md5(coalesce(string_agg(i::VARCHAR, '|' ORDER BY i.ingest_id), '')) FROM {c}.ingests AS i),
        (SELECT md5(coalesce(string_agg(m.key || '=' || coalesce(m.value, ''), '|' ORDER BY m.key), ''))
         FROM {c}.meta AS m)"""


@contextmanager
def writing(con: duckdb.DuckDBPyConnection, at: Entry, part: str) -> Iterator[str | None]:
    """A fresh catalog to create the part's tables in (schema `judged`; any cursor of `con` may
    write there), published under the entry's name when the block ends without an error; None
    when the folder cannot be written (the caller computes as it would without a cache)."""
    with _writing(con, at.path(part), f"{at.key}.{part}") as alias:
        yield alias
    if at.has(part):
        prune(at.folder, at.state)


@contextmanager
def _writing(con: duckdb.DuckDBPyConnection, final: Path, label: str) -> Iterator[str | None]:
    stamp = f"{os.getpid()}_{time.monotonic_ns()}"
    tmp = final.parent / f".{final.name}.{stamp}.tmp"
    alias = f"pdf_judging_{stamp}"
    try:
        final.parent.mkdir(exist_ok=True)
        # 16 kB blocks: a judgement is mostly small tables (256 kB blocks made 2 MB files of 50 kB);
        # no WAL: the rows are written once, at the checkpoint DETACH makes (-13 % CPU at 1M
        # requests), and a file a crash leaves half-written is never renamed into place
        con.execute(
            f"ATTACH {sql_string(tmp)} AS {alias} (READ_WRITE, BLOCK_SIZE 16384, RECOVERY_MODE no_wal_writes)"
        )
    except (OSError, duckdb.Error):
        _remove(tmp)
        alias = None
    if alias is None:
        yield None
        return
    published = False
    try:
        con.execute(f"CREATE SCHEMA {alias}.{SCHEMA}")
        yield alias
        con.execute(
            f"CREATE TABLE {alias}.{SCHEMA}.{ENTRY_TABLE} AS SELECT ?::VARCHAR AS key, now() AS written",
            [label],
        )
        con.execute(f"DETACH DATABASE {alias}")
        alias = None
        if not Path(f"{tmp}.wal").exists():  # DETACH checkpoints: the file alone holds every row
            os.replace(tmp, final)
            published = True
    finally:
        if alias is not None:
            with suppress(duckdb.Error):
                con.execute(f"DETACH DATABASE IF EXISTS {alias}")
        if not published:
            _remove(tmp)


# ------------------------------------------------------------------ the views, for another version's file

VIEWS_PREFIX = "views-"
KEEP_VIEWS = 4  # view sets kept per folder (versions reading one database)


def kept_views(
    con: duckdb.DuckDBPyConnection, catalog: str, digest: str, install: Callable[[str], None]
) -> Path | None:
    """A DuckDB file holding this version's views (and macros), for a read-only database whose
    stored views are another version's: attached, it replaces installing them in memory (about a
    second: DuckDB binds each new view). Keyed by the views' digest, the catalog's name and its
    tables' columns (what the views were bound against). `install(alias)` installs the views into
    the catalog `alias` when the file is missing. None: compute as before (no file, cache off)."""
    db = _read_only_file(con, catalog)
    if db is None:
        return None
    try:
        columns = con.execute(
            """SELECT c.table_name, c.column_name, c.data_type
               FROM information_schema.columns AS c JOIN information_schema.tables AS t
                 ON t.table_catalog = c.table_catalog AND t.table_schema = c.table_schema
                AND t.table_name = c.table_name
               WHERE c.table_catalog = ? AND c.table_schema = 'main' AND t.table_type = 'BASE TABLE'
               ORDER BY ALL""",
            [catalog],
        ).fetchall()
    except duckdb.Error:
        return None
    key = hashlib.sha256(repr((FORMAT, duckdb.__version__, digest, catalog, columns)).encode())
    path = folder_of(db) / f"{VIEWS_PREFIX}{key.hexdigest()[:20]}.duckdb"
    if path.is_file():
        return path
    with _writing(con, path, path.stem) as alias:
        if alias is None:
            return None
        install(alias)
    if not path.is_file():
        return None
    prune(path.parent, None)
    return path


def _read_only_file(con: duckdb.DuckDBPyConnection, catalog: str) -> Path | None:
    if not enabled():
        return None
    try:
        row = con.execute(
            "SELECT path, readonly FROM duckdb_databases() WHERE database_name = ?", [catalog]
        ).fetchone()
    except duckdb.Error:
        return None
    return Path(row[0]) if row and row[0] and row[1] else None


def _remove(tmp: Path) -> None:
    for path in (tmp, Path(f"{tmp}.wal")):
        with suppress(OSError):
            path.unlink()


def prune(folder: Path, state: str | None) -> None:
    """Remove what can never be read again: entries of other database states than `state` (None:
    leave entries alone), temporary files of writers that died; beyond KEEP entries of this state
    and KEEP_VIEWS view sets, the least recently written."""
    try:
        files = list(folder.iterdir())
    except OSError:
        return
    now = time.time()
    current: list[tuple[float, Path]] = []
    views: list[tuple[float, Path]] = []
    for path in files:
        name = path.name
        try:
            if name.startswith(".") and name.endswith((".tmp", ".tmp.wal")):
                if now - path.stat().st_mtime > _STALE_TMP_S:
                    path.unlink()
            elif name.startswith(VIEWS_PREFIX) and name.endswith(".duckdb"):
                views.append((path.stat().st_mtime, path))
            elif state is not None and name.endswith(".duckdb"):
                if name.startswith(state + "-"):
                    current.append((path.stat().st_mtime, path))
                else:
                    path.unlink()
        except OSError:
            continue
    for kept, limit in ((current, KEEP), (views, KEEP_VIEWS)):
        for _, path in sorted(kept, reverse=True)[limit:]:
            with suppress(OSError):
                path.unlink()
