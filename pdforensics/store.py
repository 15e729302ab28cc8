"""The DuckDB file: schema, versioning, locking and batch loading.

Every batch is one transaction, so a killed ingest leaves whole batches only;
`(source_key, seq)` identifies a record, so re-reading input adds nothing.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from pdforensics import fold
from pdforensics.errors import DatabaseError
from pdforensics.schema_version import SCHEMA_VERSION

if TYPE_CHECKING:
    import polars as pl

# polars (and schema.py, which needs it) are imported by the functions that write or return
# frames: a reader that opens the database for a verdict or a query does not load them.

DEFAULT_DB = "pdforensics.duckdb"


def _duck_type(dtype: object) -> str:
    import polars as pl

    return {
        pl.String: "VARCHAR",
        pl.Int8: "TINYINT",
        pl.Int16: "SMALLINT",
        pl.Int32: "INTEGER",
        pl.Int64: "BIGINT",
        pl.UInt64: "UBIGINT",
        pl.Float64: "DOUBLE",
        pl.Boolean: "BOOLEAN",
    }[type(dtype)]


# Text unique per line (message, cursor, rid) is stored zstd-compressed: DuckDB's default string
# compression (dictionary + FSST, chosen at checkpoint) cost 60 % of the 1M-line store and made the
# file 6x larger; zstd blocks insert ~4x faster and scan as fast (measured in docs/benchmark.md).
LINES_DDL = """
CREATE TABLE IF NOT EXISTS lines (
    line_id BIGINT NOT NULL,          -- unique across the database, in ingest order
    ingest_id INTEGER NOT NULL,       -- the run that stored it (ingests.ingest_id)
    source VARCHAR,                   -- where it came from: journal, file:/path, ...
    source_key VARCHAR NOT NULL,      -- dedup namespace: journal seqnum id or file identity
    seq BIGINT NOT NULL,              -- position in source_key: journal seqnum or byte offset
    cursor VARCHAR USING COMPRESSION zstd,  -- journal cursor (NULL for files)
    host VARCHAR,
    unit VARCHAR,
    engine VARCHAR,                   -- prefill | decode | router | other
    pid BIGINT,
    boot_id VARCHAR,
    invocation_id VARCHAR,            -- systemd invocation id: one per service start
    syslog_identifier VARCHAR,
    priority TINYINT,
    ts_us BIGINT,                     -- best UTC time (us): journal receive time, else the line's prefix
    app_ts_us BIGINT,                 -- the line's own prefix converted to UTC (us)
    ts_origin VARCHAR,                -- journal | app | app_fold1 | app_fold2 | inherited | none
    app_ts_precision_us INTEGER,      -- 1000000 for the 1-second SGLang prefix, 1000 with SGLANG_LOG_MS
    dp_rank SMALLINT,
    tp_rank SMALLINT,
    pp_rank SMALLINT,
    ep_rank SMALLINT,
    message VARCHAR USING COMPRESSION zstd,  -- the text as logged (ANSI codes kept)
    event VARCHAR,                    -- catalog event name; NULL when no entry matched
    entry VARCHAR,                    -- catalog entry name
    parse_error VARCHAR,              -- entry whose anchor matched but whose pattern did not
    cont_of BIGINT                    -- continuation line: line_id of its record's first line
)"""

META_DDL = [
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    """CREATE TABLE IF NOT EXISTS rejects (
        ingest_id INTEGER, source VARCHAR, position VARCHAR, reason VARCHAR, sample VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS ingests (
        ingest_id INTEGER PRIMARY KEY, started_at TIMESTAMPTZ, finished_at TIMESTAMPTZ,
        sources VARCHAR, readers VARCHAR, units VARCHAR, since_us BIGINT, until_us BIGINT,
        records BIGINT DEFAULT 0, stored BIGINT DEFAULT 0, duplicates BIGINT DEFAULT 0,
        skipped BIGINT DEFAULT 0, rejected BIGINT DEFAULT 0, unrecognised BIGINT DEFAULT 0,
        parse_errors BIGINT DEFAULT 0, status VARCHAR)""",
    # Per ingest, source and unit: what the prefix and time passes made of its lines (parse.py
    # _source_stats). Additive: a database without it gets it at the next open for writing.
    """CREATE TABLE IF NOT EXISTS source_stats (
        ingest_id INTEGER, source VARCHAR, host VARCHAR, unit VARCHAR,
        lines BIGINT,           -- lines stored
        no_prefix BIGINT,       -- first lines of records with no known prefix and no catalog entry
        no_time BIGINT,         -- first lines of records with no time of their own (inherited or none)
        inherited_time BIGINT,  -- lines whose ts_us came from an earlier line of the file
        time_only BIGINT,       -- time-only prefixes dated from other lines or --date
        joined BIGINT,          -- lines joined into the record before them (CRI partial, LineMax, wrap)
        date_from VARCHAR,      -- where the time-only prefixes' date came from
        zone VARCHAR,           -- zone the zone-less times were read in, and why; NULL: none read so
        engine_by_name VARCHAR, -- engine the unit/file name suggests (NULL: none)
        engine_by_lines VARCHAR,-- engine its lines showed (NULL: no evidence); the lines win
        prefixes VARCHAR,       -- prefix forms seen, "cri=300, rfc3339=2"
        read_to_us BIGINT)""",  # the latest time read: the window never ends before it
    # Prometheus samples (ingest --prometheus / --openmetrics; pdforensics/metric_ingest.py): one
    # row per scrape of a series, as the server stored it. (series, ts_us) identifies a sample.
    """CREATE TABLE IF NOT EXISTS metric_samples (
        ingest_id INTEGER,      -- the run that stored it
        source VARCHAR,         -- prometheus:URL or openmetrics:/path
        series VARCHAR,         -- name{label="value",...}, labels sorted: the series' identity
        metric VARCHAR,         -- the sample's name (sglang:num_running_reqs, up, ..._total)
        labels JSON,            -- every label but the name
        job VARCHAR, instance VARCHAR,  -- the scrape target's labels
        engine_type VARCHAR,    -- SGLang's own label: prefill | decode | unified (NULL: none)
        dp_rank SMALLINT,       -- SGLang's dp_rank (older builds: dp) label
        host VARCHAR,           -- the host of the logs the target is (NULL: unmatched)
        engine VARCHAR,         -- prefill | decode | unified (NULL: unknown)
        matched_by VARCHAR,     -- how host was found: map | name | address (NULL: unmatched)
        ts_us BIGINT,           -- the scrape's time (UTC us; Prometheus keeps milliseconds)
        value DOUBLE)""",
]


_UNIQUE_TEXT = {"rid", "rids"}


def _events_ddl() -> str:
    from pdforensics.schema import EVENT_BASE_COLUMNS, EVENT_FIELDS

    base_types = {
        "line_id": "BIGINT NOT NULL", "ts_us": "BIGINT", "app_ts_us": "BIGINT", "host": "VARCHAR",
        "unit": "VARCHAR", "engine": "VARCHAR", "pid": "BIGINT", "invocation_id": "VARCHAR",
        "boot_id": "VARCHAR", "dp_rank": "SMALLINT", "tp_rank": "SMALLINT", "event": "VARCHAR NOT NULL",
        "entry": "VARCHAR",
    }  # fmt: skip
    cols = [f"{c} {base_types[c]}" for c in EVENT_BASE_COLUMNS]
    cols += [
        f"{name} {_duck_type(dtype)}" + (" USING COMPRESSION zstd" if name in _UNIQUE_TEXT else "")
        for name, dtype in EVENT_FIELDS.items()
    ]
    cols.append("extra JSON USING COMPRESSION zstd")
    return "CREATE TABLE IF NOT EXISTS events (\n    " + ",\n    ".join(cols) + "\n)"


# ------------------------------------------------------------------ opening


_LOCK_RETRY_S = 0.2
# A read-only open that meets a writer's lock retries this long before failing with one line:
# `pdforensics watch` holds the file only for its short write transactions (see watch.py).
READ_LOCK_WAIT_S = 3.0
_CREATING = re.compile(r"\.([^/\"']+)\.creating-\d+-\d+")


def _is_lock_error(exc: duckdb.Error) -> bool:
    return "could not set lock" in str(exc).lower()


def _friendly(exc: duckdb.Error, path: Path, read_only: bool = False, waited_s: float = 0.0) -> DatabaseError:
    text = _CREATING.sub(r"\1", str(exc))  # the user named `path`, not open_db's temporary name for it
    if "replaying WAL" in text or "Corrupt WAL" in text:
        # The file is fine up to its last checkpoint; only the log of later commits is damaged, and
        # DuckDB replays it on every open: nothing opens the database until it is moved aside.
        wal = Path(f"{path}.wal")
        return DatabaseError(
            f"{wal}, the log of {path.name}'s commits since its last checkpoint, is damaged "
            f"({_wal_problem(text)}); move it aside (mv {wal} {wal}.damaged) to open the database as of "
            "that checkpoint: the batches only the log held are lost, and a rerun of the ingest stores them again"
        )
    if "not a valid DuckDB database" in text or "corrupt" in text.lower():
        return DatabaseError(
            f"{path} is not a readable pdforensics database (corrupt or not DuckDB): {text.splitlines()[0]}"
        )
    # a word: DuckDB's corruption messages say "block"
    if _is_lock_error(exc) or re.search(r"\block\b", text, re.IGNORECASE):
        pid = re.search(r"PID (\d+)", text)
        if read_only:
            # Readers share the lock, so whoever blocks a reader is writing.
            who = f"PID {pid.group(1)}" if pid else "another process"
            return DatabaseError(
                f"database {path} is being written by {who} (an ingest?); try again when it finishes"
            )
        who = f" (PID {pid.group(1)})" if pid else ""
        waited = f", waited {waited_s:.0f}s" if waited_s >= 1 else ""
        return DatabaseError(
            f"database {path} is in use by another process{who}, another ingest or a reader such as "
            f"`pdforensics sql`{waited}; try again when it finishes or use another --db"
        )
    if "Permission denied" in text or "Read-only file system" in text or "read-only" in text:
        if read_only:
            return DatabaseError(f"cannot read {path}: permission denied")
        return DatabaseError(f"cannot write {path}: permission denied (choose a writable --db path)")
    return DatabaseError(f"cannot open database {path}: {text.splitlines()[0]}")


def _wal_problem(text: str) -> str:
    """DuckDB's reason, without its 'Failure while replaying WAL file "..."' preamble."""
    first = text.strip().splitlines()[0] if text.strip() else "unreadable"
    return re.sub(r'^.*?Failure while replaying WAL file "[^"]*":\s*', "", first)


def open_db(
    path: str | Path, read_only: bool = False, wait_s: float | None = None
) -> duckdb.DuckDBPyConnection:
    """Open (and for writers, create and migrate) the database; errors become one-line messages.

    `wait_s`: how long to keep retrying while another process holds the database's lock
    (an ingest waits a little for a concurrent one instead of failing at once). Default: 0 for
    writers, READ_LOCK_WAIT_S for readers.
    """
    path = Path(path)
    if wait_s is None:
        wait_s = READ_LOCK_WAIT_S if read_only else 0.0
    try:
        _check_path(path, read_only)
    except PermissionError:  # a folder on the way the user may not enter
        if read_only:
            raise DatabaseError(f"cannot read {path}: permission denied") from None
        raise DatabaseError(f"cannot write {path}: permission denied (choose a writable --db path)") from None
    started = time.monotonic()
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.Error as exc:
            waited = time.monotonic() - started
            if _is_lock_error(exc) and waited < wait_s:
                time.sleep(min(_LOCK_RETRY_S, wait_s - waited))
                continue
            raise _friendly(exc, path, read_only, waited) from None
    plan_views_fast(con)
    try:
        if read_only:
            check_version(con, path)
        else:
            create_schema(con, path)
    except duckdb.Error as exc:
        con.close()
        raise _friendly(exc, path, read_only) from None
    except DatabaseError:
        con.close()
        raise
    return con


# DuckDB 2.0's projection pull-up and placement passes grow steeply with the depth of a plan: on
# the verdict's view stack over 60 lines they took 16 of a query's 18 s of planning (profiled with
# PRAGMA profiling_mode='detailed'); without them the same query plans in 3 s, the verdict on the
# 16-host fleet computes in 3.6 s instead of 4.8, and at 1M requests it runs no slower. Dropping an
# optimizer pass never changes a result. docs/reference.md tells a user's own session to do the same.
SLOW_PLANNER_PASSES = ("projection_pullup", "projection_placement")


def plan_views_fast(con: duckdb.DuckDBPyConnection) -> None:
    """Turn off the optimizer passes that make planning the view stack slow (where DuckDB has them)."""
    known = {r[0] for r in con.execute("SELECT name FROM duckdb_optimizers()").fetchall()}
    passes = [p for p in SLOW_PLANNER_PASSES if p in known]
    if passes:
        con.execute(f"SET disabled_optimizers = '{','.join(passes)}'")


def _check_path(path: Path, read_only: bool) -> None:
    """Clear messages before DuckDB's own; a writer creates a missing (or empty) database."""
    if read_only:
        if not path.exists():
            raise DatabaseError(f"no database at {path}; run `pdforensics ingest` first (or pass --db)")
        if not os.access(path, os.R_OK):
            raise DatabaseError(f"cannot read {path}: permission denied")
        if path.is_file() and path.stat().st_size == 0:
            raise DatabaseError(f"{path} holds no pdforensics data yet; run `pdforensics ingest` first")
        return
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise DatabaseError(f"cannot create {path}: folder {parent} does not exist")
    if (path.exists() and not os.access(path, os.W_OK)) or (
        not path.exists() and not os.access(parent, os.W_OK)
    ):
        raise DatabaseError(f"cannot write {path}: permission denied (choose a writable --db path)")
    if not os.access(parent, os.W_OK):
        # DuckDB writes every transaction to `<db>.wal` beside the file first: with the file
        # writable and its folder not, the first commit failed, and no rerun could do better.
        raise DatabaseError(f"cannot write {path}: {read_only_folder(path)}")
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        _create_atomically(path)


def read_only_folder(path: Path) -> str:
    """Why a database whose file is writable cannot be written (its folder, where its .wal goes,
    is not), and what to do: a rerun would fail the same way."""
    parent = path.parent if str(path.parent) else Path(".")
    return (
        f"its folder {parent} is read-only and every write goes through {path.name}.wal beside it; "
        "make the folder writable, or copy the database to a writable folder and pass that --db"
    )


def _create_atomically(path: Path) -> None:
    """Create a new database beside `path` and move it into place with its schema.

    DuckDB writes a new file in several steps; an ingest killed among them used to leave an
    empty or headerless file that no later run could open. Built aside and renamed, `path` is
    either absent or a complete database. An empty file (such a leftover, or `touch`) holds no
    evidence and is replaced. The folder's flock keeps two pdforensics processes from doing this
    at once (flock, not fcntl: it cannot release DuckDB's own locks on the file).
    """
    parent = path.parent if str(path.parent) else Path(".")
    tmp = parent / f".{path.name}.creating-{os.getpid()}-{time.monotonic_ns()}"
    with _folder_lock(parent):
        if path.exists() and not (path.is_file() and path.stat().st_size == 0):
            return  # another process created it meanwhile
        try:
            con = duckdb.connect(str(tmp))
            try:
                create_schema(con, path)
            finally:
                con.close()
            os.replace(tmp, path)
        except duckdb.Error as exc:
            raise _friendly(exc, path) from None
        except OSError as exc:
            raise DatabaseError(f"cannot create {path}: {exc.strerror or exc}") from None
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                with suppress(OSError):
                    leftover.unlink()


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield  # best effort: a folder we cannot open for locking (rare) is created without it
        return
    try:
        with suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def stored_version(con: duckdb.DuckDBPyConnection) -> int | None:
    has_meta = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta' AND table_schema = 'main'"
    ).fetchone()
    if not has_meta or not has_meta[0]:
        return None
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if not row:
        return None
    try:
        return int(row[0])
    except (TypeError, ValueError):
        raise DatabaseError(f"unreadable schema version {row[0]!r} in the database's meta table") from None


def _migratable(version: int) -> bool:
    return all(v in MIGRATIONS for v in range(version, SCHEMA_VERSION))


def _too_old(path: Path | str, version: int) -> DatabaseError:
    return DatabaseError(
        f"{path} was written by an older pdforensics (schema {version}, this is {SCHEMA_VERSION}) "
        "that this version cannot migrate; ingest the logs again into a new --db"
    )


def check_version(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    version = stored_version(con)
    if version is None:
        tables = con.execute("SELECT count(*) FROM information_schema.tables").fetchone()
        if tables and tables[0]:
            raise DatabaseError(f"{path} is a DuckDB file but not a pdforensics database")
        raise DatabaseError(f"{path} holds no pdforensics data yet; run `pdforensics ingest` first")
    if version > SCHEMA_VERSION:
        raise DatabaseError(
            f"{path} was written by a newer pdforensics (schema {version}, this is {SCHEMA_VERSION}); upgrade"
        )
    if version < SCHEMA_VERSION:
        if not _migratable(version):
            raise _too_old(path, version)
        raise DatabaseError(
            f"{path} has schema {version}; run `pdforensics ingest --db {path}` once to migrate it"
        )


# Migrations from an older schema version to the next: {from_version: [sql, ...]}. A version with
# no path to SCHEMA_VERSION here is refused with a message, never half-migrated.
MIGRATIONS: dict[int, list[str]] = {
    1: fold.rebuild_statements(),  # 2: the summary tables (created above), filled from the lines
    # 3: rooms count each side's legs (Receive: lines) and keep its last Receive: / end, refilled
    2: [
        f"ALTER TABLE rooms ADD COLUMN IF NOT EXISTS {name} {typ}"
        for name, typ, _, _ in fold.COLUMNS
        if name.endswith(("_recvs", "_last_recv_ts", "_last_done_ts"))
    ]
    + fold.rebuild_statements(),
    # 4: source_stats.read_to_us (older runs keep NULL: their window ends at their lines, as before)
    3: ["ALTER TABLE source_stats ADD COLUMN IF NOT EXISTS read_to_us BIGINT"],
    # 5: metric_samples (created empty by META_DDL above, as every open for writing does)
    4: [],
}


def _add_new_event_fields(con: duckdb.DuckDBPyConnection) -> None:
    """schema.EVENT_FIELDS only grows: a database made before a field existed gets its column (NULL)."""
    from pdforensics.schema import EVENT_FIELDS

    have = {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'events' AND table_schema = 'main'"
    ).fetchall()}  # fmt: skip
    for name, dtype in EVENT_FIELDS.items():
        if name not in have:
            con.execute(f"ALTER TABLE events ADD COLUMN {name} {_duck_type(dtype)}")


def create_schema(con: duckdb.DuckDBPyConnection, path: Path | str = "") -> None:
    version = stored_version(con)
    if version is None:
        tables = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchone()
        if tables and tables[0]:
            raise DatabaseError(f"{path} is a DuckDB file but not a pdforensics database; use another --db")
    elif version > SCHEMA_VERSION:
        raise DatabaseError(
            f"{path} was written by a newer pdforensics (schema {version}, this is {SCHEMA_VERSION}); upgrade"
        )
    elif version < SCHEMA_VERSION and not _migratable(version):
        raise _too_old(path, version)
    # One transaction: a migration that fails (or is killed) leaves the old schema as it was.
    with transaction(con):
        for ddl in [*META_DDL, LINES_DDL, _events_ddl(), *fold.DDL]:
            con.execute(ddl)
        _add_new_event_fields(con)
        while version is not None and version < SCHEMA_VERSION:
            for sql in MIGRATIONS[version]:
                con.execute(sql)
            version += 1
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])


# ------------------------------------------------------------------ loading


def next_line_id(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT coalesce(max(line_id), 0) + 1 FROM lines").fetchone()
    return int(row[0]) if row else 1


def begin_ingest(con: duckdb.DuckDBPyConnection, sources: str, readers: str, units: str,
                 since_us: int | None, until_us: int | None) -> int:  # fmt: skip
    # This connection holds the database's write lock, so a run still marked 'running' is one
    # that was killed (kill -9, power loss): say so instead of leaving it running forever.
    con.execute("UPDATE ingests SET status = 'interrupted' WHERE status = 'running'")
    if not fold.is_current(con):  # lines stored around store_batch: fold them all in again
        with transaction(con):
            fold.rebuild(con)
    row = con.execute("SELECT coalesce(max(ingest_id), 0) + 1 FROM ingests").fetchone()
    ingest_id = int(row[0]) if row else 1
    con.execute(
        "INSERT INTO ingests (ingest_id, started_at, sources, readers, units, since_us, until_us, status) "
        "VALUES (?, now(), ?, ?, ?, ?, ?, 'running')",
        [ingest_id, sources, readers, units, since_us, until_us],
    )
    return ingest_id


def finish_ingest(con: duckdb.DuckDBPyConnection, ingest_id: int, status: str, readers: str) -> None:
    con.execute(
        "UPDATE ingests SET finished_at = now(), status = ?, readers = ? WHERE ingest_id = ?",
        [status, readers, ingest_id],
    )


def drop_known(con: duckdb.DuckDBPyConnection, records: pl.DataFrame) -> pl.DataFrame:
    """Records not stored yet."""
    known = known_lines(con, records)
    if not known.height:
        return records
    return records.join(known, on=["source_key", "seq"], how="anti", maintain_order="left")


def known_lines(con: duckdb.DuckDBPyConnection, records: pl.DataFrame) -> pl.DataFrame:
    """`source_key, seq, line_id` of the records already stored.

    Looks up only each source's seq range, so zone maps keep it cheap."""
    import polars as pl

    empty = pl.DataFrame(schema={"source_key": pl.String(), "seq": pl.Int64(), "line_id": pl.Int64()})
    if records.height == 0:
        return empty
    ranges = records.group_by("source_key").agg(
        pl.col("seq").min().alias("lo"), pl.col("seq").max().alias("hi")
    )
    known = []
    for key, lo, hi in ranges.iter_rows():
        got = query_pl(
            con,
            "SELECT source_key, seq, line_id FROM lines WHERE source_key = ? AND seq BETWEEN ? AND ?",
            [key, lo, hi],
        )
        if got.height:
            known.append(got)
    if not known:
        return empty
    found = pl.concat(known).cast(empty.schema)  # type: ignore[arg-type]
    return found.join(records.select("source_key", "seq"), on=["source_key", "seq"], how="semi")


CHUNK_ROWS = 20_000  # rows fetched at a time by the streaming readers


def dict_rows(
    con: duckdb.DuckDBPyConnection, sql: str, params: list | dict | None = None
) -> Iterator[dict[str, Any]]:
    """A query's rows as dicts by column name, fetched in chunks so a large result never sits in
    Python whole; for readers that need neither polars nor pyarrow (their imports cost a read
    command ~0.2 s)."""
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description or []]
    while chunk := cur.fetchmany(CHUNK_ROWS):
        for row in chunk:
            yield dict(zip(names, row, strict=True))


def fetch_dicts(
    con: duckdb.DuckDBPyConnection, sql: str, params: list | dict | None = None
) -> list[dict[str, Any]]:
    """`dict_rows`, all of them: the connection is free for the next query when it returns."""
    return list(dict_rows(con, sql, params))


def query_pl(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pl.DataFrame:
    """A query's result as a polars frame (duckdb 2.x: connection results have no `.pl()`)."""
    con.complete()  # duckdb 2.x: finish a half-read execute() result before the relation API runs
    return con.sql(sql, params=params or None).pl()


@contextmanager
def bulk_load(con: duckdb.DuckDBPyConnection, limit: str, threads: int | None = None) -> Iterator[None]:
    """Settings for an ingest: `memory_limit`, no insertion-order bookkeeping, and `threads` (None:
    DuckDB's own choice, one per core).

    store_batch hands DuckDB each table as one Arrow chunk, which one thread scans in order, so the
    rows still land in line_id order; DuckDB's order-preserving insert machinery costs ~25 % of the
    insert CPU (measured on a 500k-line batch of the benchmark's input) and buys nothing here."""
    with (
        setting(con, "memory_limit", f"'{limit}'"),
        setting(con, "preserve_insertion_order", "false"),
        setting(con, "threads", str(threads)) if threads else nullcontext(),
    ):
        yield


@contextmanager
def setting(con: duckdb.DuckDBPyConnection, name: str, value: str) -> Iterator[None]:
    """DuckDB setting `name` set to the SQL literal `value` while the block runs, then restored."""
    row = con.execute(f"SELECT current_setting('{name}')").fetchone()
    con.execute(f"SET {name} = {value}")
    try:
        yield
    finally:
        if row:
            with suppress(duckdb.Error):
                con.execute(f"SET {name} = {_sql_literal(row[0])}")


def _sql_literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return sql_string(value)


def sql_string(value: object) -> str:
    """`value` as an SQL string literal (a path in COPY or ATTACH, a setting's value)."""
    return "'" + str(value).replace("'", "''") + "'"


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    con.execute("BEGIN")
    try:
        yield
    except BaseException:
        # A rollback that fails in turn (Ctrl-C left the transaction aborted) must not hide why.
        with suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


# Resume marks live in `meta` as "<key>" = "<position> <detail>" (see sources.FILE_MARK/JOURNAL_MARK),
# written in the same transaction as the records they cover.


def get_mark(con: duckdb.DuckDBPyConnection, key: str) -> tuple[int, str] | None:
    row = con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    if not row:
        return None
    position, _, detail = str(row[0]).partition(" ")
    return int(position), detail


def _set_mark(con: duckdb.DuckDBPyConnection, key: str, position: int, detail: str) -> None:
    old = get_mark(con, key)
    if old is not None and old[0] > position:
        return  # a resumed read starts before the old mark: never move a mark back
    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, f"{position} {detail}"])


# A plain file read while shorter than the head its key hashes (sources.plain): its key and how
# long it was, as "file_head:<key>" = "<bytes>", so that the file, grown, is known by that key.
FILE_HEAD = "file_head:"


def note_file_head(con: duckdb.DuckDBPyConnection, key: str, length: int) -> None:
    """The first length noted for a key stays: it is the length the key hashes."""
    con.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", [FILE_HEAD + key, str(length)])


def file_heads_shorter_than(con: duckdb.DuckDBPyConnection, length: int) -> list[tuple[str, int]]:
    """(key, bytes) of the files noted shorter than `length`, the longest first."""
    rows = con.execute(
        "SELECT key, n FROM (SELECT key, TRY_CAST(value AS BIGINT) AS n FROM meta WHERE starts_with(key, ?)) WHERE n < ? ORDER BY n DESC",
        [FILE_HEAD, length],
    ).fetchall()
    return [(str(k)[len(FILE_HEAD) :], int(n)) for k, n in rows]


def stored_count(con: duckdb.DuckDBPyConnection, source_key: str, before: int | None = None) -> int:
    """Lines stored from `source_key` (only those with seq < `before` when given)."""
    sql, params = "SELECT count(*) FROM lines WHERE source_key = ?", [source_key]
    if before is not None:  # a plain predicate, so the scan keeps its zone-map pruning
        sql, params = sql + " AND seq < ?", [source_key, before]
    row = con.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


def resume_point(con: duckdb.DuckDBPyConnection, source_key: str, upto: int, context: int) -> tuple[int, int]:
    """Where to re-read a stream stored up to `upto`: (offset of the stored line `context` lines
    before it, else 0; stored lines before that offset)."""
    row = con.execute(
        """SELECT coalesce(max(seq) FILTER (WHERE rank > ?), 0), count(*) FILTER (WHERE rank > ?)
           FROM (SELECT seq, row_number() OVER (ORDER BY seq DESC) AS rank
                 FROM lines WHERE source_key = ? AND seq < ?)""",
        [context, context, source_key, upto],
    ).fetchone()
    if not row or not row[1]:
        return 0, 0
    # The stored line at `start` is re-read as context, so only the lines before it stay unread.
    start = int(row[0])
    return start, int(row[1]) - 1


SOURCE_STATS_COLUMNS = [
    "source", "host", "unit", "lines", "no_prefix", "no_time", "inherited_time", "time_only", "joined",
    "date_from", "zone", "engine_by_name", "engine_by_lines", "prefixes", "read_to_us",
]  # fmt: skip


def save_source_stats(con: duckdb.DuckDBPyConnection, ingest_id: int, stats: pl.DataFrame) -> None:
    import polars as pl

    frame = stats.select(pl.lit(ingest_id, pl.Int32).alias("ingest_id"), *SOURCE_STATS_COLUMNS)
    with transaction(con):
        con.register("_source_stats", frame.to_arrow())
        try:
            con.execute("DELETE FROM source_stats WHERE ingest_id = ?", [ingest_id])
            con.execute(f"INSERT INTO source_stats (ingest_id, {', '.join(SOURCE_STATS_COLUMNS)}) "
                        "SELECT * FROM _source_stats")  # fmt: skip
        finally:
            with suppress(duckdb.Error):
                con.unregister("_source_stats")


def store_batch(
    con: duckdb.DuckDBPyConnection,
    ingest_id: int,
    lines: pl.DataFrame,
    events: pl.DataFrame,
    rejects: pl.DataFrame,
    counts: dict[str, int],
    marks: dict[str, tuple[int, str]] | None = None,
    also: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> None:
    """One transaction: the batch's lines, events and rejects, the run's counters and resume marks,
    and the batch folded into the summaries (fold.py); `also` writes more in the same transaction."""
    import polars as pl

    from pdforensics.schema import LINE_COLUMNS

    lines = lines.with_columns(pl.lit(ingest_id, pl.Int32).alias("ingest_id")).select(LINE_COLUMNS)
    rejects = rejects.with_columns(pl.lit(ingest_id, pl.Int32).alias("ingest_id")).select(
        "ingest_id", "source", "position", "reason", "sample"
    )
    # Arrow string views are polars' own layout: handed over without copying the text (the default,
    # large_string, copies every message; measured: the store's CPU -25 %).
    newest = pl.CompatLevel.newest()
    # One chunk each: scanned by one thread, in order (see bulk_load).
    lines, events = lines.rechunk(), events.rechunk()
    with transaction(con):
        con.register("_batch_lines", lines.to_arrow(compat_level=newest))
        con.register("_batch_events", events.to_arrow(compat_level=newest))
        con.register("_batch_rejects", rejects.to_arrow(compat_level=newest))
        try:
            con.execute(f"INSERT INTO lines ({', '.join(LINE_COLUMNS)}) SELECT * FROM _batch_lines")
            cols = ", ".join(events.columns)
            con.execute(f"INSERT INTO events ({cols}) SELECT * FROM _batch_events")
            con.execute("INSERT INTO rejects SELECT * FROM _batch_rejects")
            if lines.height:
                fold.fold_batch(con, lines["line_id"].min(), lines["line_id"].max())  # type: ignore[arg-type]
            sets = ", ".join(f"{k} = {k} + ?" for k in counts)
            con.execute(f"UPDATE ingests SET {sets} WHERE ingest_id = ?", [*counts.values(), ingest_id])
            for key, (position, detail) in (marks or {}).items():
                _set_mark(con, key, position, detail)
            if also is not None:
                also(con)
        finally:
            for name in ("_batch_lines", "_batch_events", "_batch_rejects"):
                # After Ctrl-C the transaction is aborted and unregister fails too: let the
                # interruption, not that, be what the caller sees (register replaces a leftover).
                with suppress(duckdb.Error):
                    con.unregister(name)
