"""Requests -> verdict: installs the classification views and assembles their answer.

The rules live in SQL (`queries/views/NN_name.sql`), so a user can read and query them; this
module sets their parameters (DuckDB session variables), materialises the heavy views so each is
computed a single time -- once per database state, window and options: the rows are kept beside
the database (`pdforensics.judgement`) and read back by every later command -- and turns the rows
into a `Verdict` / `Timeline`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from pdforensics import fleet, judgement, store
from pdforensics.errors import DatabaseError, UsageError
from pdforensics.paths import queries_dir, user_cache_dir

# The patch's scheduler loop polls the inflight queue every iteration, but an iteration can sit
# behind a multi-second prefill forward, and 1-second log prefixes blur each end by a second:
# 5 s for the poll loop plus 5 s of slack before "late" or "stuck".
DEFAULT_GRACE_S = 10.0

CLASSES = (
    "watchdog_fired", "silent_pin", "undecided", "transfer_failed", "retracted", "aborted", "lost", "completed",
    "in_flight",
)  # fmt: skip
VERDICTS = ("watchdog_missed", "watchdog_fired", "nothing_stuck", "inconclusive")
# Worst first: a fleet's verdict is the worst of its prefill instances' (the design's order of
# the first match: something missed outranks what cannot be told, which outranks a firing).
SEVERITY = ("watchdog_missed", "inconclusive", "watchdog_fired", "nothing_stuck")

# Views computed once per call (in dependency order) because several others read them. room_facts
# is not among them: `requests` computes it once itself (a MATERIALIZED step), and a temporary
# table of its million rows would cost more to write than to stream.
_MATERIALISE = ("context", "inflight_gauge", "requests", "verdict")
# The judgement cache's part each of them is kept in (pdforensics.judgement): the stack is what a
# verdict needs, `requests` is written when a reader first needs it.
_PART = {"context": "stack", "inflight_gauge": "stack", "verdict": "stack", "requests": "requests"}
# What `compute_verdict` needs: the verdict view reads `requests` once (its own MATERIALIZED step)
# and carries the requests not completed and the watchdog's firings, so a table of every request
# (the widest, most costly to write) is left to the callers that read it (report, sql).
_VERDICT_VIEWS = ("context", "inflight_gauge", "verdict")

VIEWS_KEY = "views_digest"  # meta key: views_digest() of the installed views

# The parameters the shadows were computed with, per connection (see `materialised`).
_SHADOW_PARAMS: dict[int, tuple[Any, ...]] = {}
# The shadows `materialised` has in place, per connection: name -> "table" (computed here) or
# "view" (a temporary view of a kept judgement's rows).
_SHADOWS: dict[int, dict[str, str]] = {}


@dataclass
class VerdictOptions:
    watchdog_timeout_s: float | None = None  # the operator's --watchdog-timeout; None = from the lines
    grace_s: float = DEFAULT_GRACE_S
    since_us: int | None = None  # window, UTC us; None = the last ingest's window
    until_us: int | None = None
    # the live host's prefill unit environment (pdforensics.environment): a configured timeout
    env_timeout_s: float | None = None
    env_unit: str | None = None


# ------------------------------------------------------------------ views


def view_files() -> list[Any]:
    return sorted((queries_dir() / "views").glob("*.sql"))


_VIEW_NAME = re.compile(r"CREATE\s+OR\s+REPLACE\s+(?:TEMP\s+)?VIEW\s+(\w+)", re.IGNORECASE)


def install_views(con: duckdb.DuckDBPyConnection, temporary: bool = False, record: bool = True) -> None:
    """Create (or replace) every classification view, in file-name order.

    DuckDB binds a new view against everything it references, recursively, so installing a deep
    stack of views one by one costs more with each layer. While installing, each new view is
    shadowed by an empty temporary table of its columns: the next views bind against that
    instead. The shadows are dropped at the end; the stored views are untouched by them.
    `record`: note their digest in `meta` (not where `meta` is read-only: the overlay).
    """
    catalog = _current_catalog(con)
    shadows: list[str] = []
    try:
        for path in view_files():
            sql = path.read_text(encoding="utf-8")
            if temporary:
                sql = re.sub(r"CREATE OR REPLACE (VIEW|MACRO)", r"CREATE OR REPLACE TEMP \1", sql)
            try:
                for stmt in con.extract_statements(sql):
                    con.execute(stmt.query)
                    name = _VIEW_NAME.search(stmt.query)
                    if name and not temporary:
                        view = name.group(1)
                        con.execute(
                            f'CREATE OR REPLACE TEMP TABLE "{view}" AS SELECT * FROM "{catalog}".main."{view}" LIMIT 0'
                        )
                        shadows.append(view)
            except duckdb.Error as exc:
                raise DatabaseError(
                    f"cannot install view file {path.name}: {str(exc).splitlines()[0]}"
                ) from None
    finally:
        for view in reversed(shadows):
            con.execute(f'DROP TABLE IF EXISTS temp.main."{view}"')
    if not temporary and record:
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [VIEWS_KEY, views_digest()])


@functools.cache
def views_digest() -> str:
    """Identifies the view definitions: stored in `meta` with them, so stale ones are noticed
    (computed once per process: every verdict, report and sql call checks it)."""
    digest = hashlib.sha256()
    for path in view_files():
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# A database whose views another pdforensics installed, opened read-only, gets this version's in an
# in-memory catalog put first on the connection's search path (the tables stay the file's). Not as
# temporary views: `materialised` shadows views with temporary tables of the same name, and a
# temporary view cannot be shadowed so (every reader of `context` recomputed it: ~35x slower at 1M).
OVERLAY = "pdf_views"
_OVERLAY_SCHEMA = f"{OVERLAY}.pdforensics"  # its bookkeeping: not among the relations a user sees (`main`)
_INSTALLED = f"{_OVERLAY_SCHEMA}.installed"  # the digest of the views there, and the data catalog


def ensure_views(con: duckdb.DuckDBPyConnection) -> None:
    """Make the views available: installed ones when they are this version's, else (re)installed,
    else this version's in the overlay catalog (read-only database, other views; see OVERLAY)."""
    if _current_catalog(con) == OVERLAY or (
        _has_relation(con, "verdict") and _installed_digest(con) == views_digest()
    ):
        return
    if _read_only(con):  # installing would fail at its first statement
        _use_overlay(con)
        return
    try:
        install_views(con)
    except DatabaseError:
        _use_overlay(con)


def prebuilt_database(db: Path) -> None:
    """A new database as a copy of an empty one with this version's schema and views, kept in the
    user's cache (creating the schema and binding ~140 views costs ~0.35 s of CPU; a copy ~0.03 s).
    Does nothing when `db` exists or the cache is off (PDFORENSICS_CACHE) or cannot be written: the
    caller creates it as before. The copy is linked into place, so a database another process
    created meanwhile is never replaced."""
    if db.exists() or not db.parent.is_dir() or not judgement.enabled():
        return
    try:
        template = _template()
        tmp = db.parent / f".{db.name}.{os.getpid()}.new"
        shutil.copyfile(template, tmp)
        try:
            os.link(tmp, db)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    except (OSError, duckdb.Error, DatabaseError):
        return


def _template() -> Path:
    """The empty database of this schema, these views and this DuckDB, built once per cache. Keyed
    by the code that creates the tables too: a table changed without a schema version bump (while
    developing) never meets an old template."""
    here = Path(__file__).parent
    key = hashlib.sha256(f"{views_digest()}|{duckdb.__version__}".encode())
    for name in ("store.py", "schema.py", "schema_version.py"):
        key.update((here / name).read_bytes())
    cache = user_cache_dir()
    path = cache / f"new-{key.hexdigest()[:20]}.duckdb"
    if path.is_file():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".{path.name}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    con = store.open_db(tmp)
    try:
        install_views(con)
    finally:
        con.close()
    os.replace(tmp, path)  # whole or not at all; another process's identical build may win
    for old in cache.glob("new-*.duckdb"):  # other versions' (a process still using one rebuilds it)
        if old != path:
            old.unlink(missing_ok=True)
    return path


def _read_only(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(
        "SELECT readonly FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    return bool(row and row[0])


def _use_overlay(con: duckdb.DuckDBPyConnection) -> None:
    """The overlay catalog as this connection's default, the database's tables behind it; its views
    installed once per database (the cursors of a connection share its catalogs). The overlay is
    a file of this version's views kept beside the database (`judgement.kept_views`: attaching it
    costs milliseconds, installing the views a second) when the folder allows, else in memory."""
    data = _current_catalog(con)
    attached = con.execute(
        "SELECT count(*) FROM duckdb_databases() WHERE database_name = ?", [OVERLAY]
    ).fetchone()
    if not (attached and attached[0]):
        kept = judgement.kept_views(con, data, views_digest(), functools.partial(_install_overlay, con, data))
        try:
            con.execute(
                f"ATTACH {store.sql_string(kept)} AS {OVERLAY} (READ_ONLY)"
                if kept is not None
                else f"ATTACH ':memory:' AS {OVERLAY} (READ_WRITE)"
            )
        except duckdb.Error:  # an unreadable file: this version's views in memory, as before
            con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {OVERLAY} (READ_WRITE)")
    _search_overlay(con, OVERLAY, data)
    if _overlay_digest(con) != views_digest():
        _install_overlay(con, data, OVERLAY)


def _search_overlay(con: duckdb.DuckDBPyConnection, overlay: str, data: str) -> None:
    con.execute(f"USE {overlay}")
    path = f"{overlay}.main,{_quoted(data)}.main"
    con.execute("SET search_path = '" + path.replace("'", "''") + "'")


def _overlay_digest(con: duckdb.DuckDBPyConnection) -> str | None:
    try:
        row = con.execute(f"SELECT max(digest) FROM {_INSTALLED}").fetchone()
    except duckdb.CatalogException:
        return None
    return row[0] if row else None


def _install_overlay(con: duckdb.DuckDBPyConnection, data: str, overlay: str) -> None:
    """This version's views into the catalog `overlay` (the in-memory overlay, or a file being kept),
    bound against the tables of `data`; the connection is left on `overlay`."""
    _search_overlay(con, overlay, data)
    try:
        install_views(con, record=False)
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {overlay}.pdforensics")
        con.execute(f"CREATE OR REPLACE TABLE {overlay}.pdforensics.installed AS SELECT ? AS digest, ? AS data",
                    [views_digest(), data])  # fmt: skip
    finally:
        if overlay != OVERLAY:  # a file being written: back to the data catalog until it is attached
            con.execute(f"USE {_quoted(data)}")
            con.execute("RESET search_path")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _current_catalog(con: duckdb.DuckDBPyConnection) -> str:
    row = con.execute("SELECT current_database()").fetchone()
    return row[0] if row else "main"


def data_catalog(con: duckdb.DuckDBPyConnection) -> str:
    """The catalog holding the database's tables (not the overlay's, when it is in use)."""
    current = _current_catalog(con)
    if current != OVERLAY:
        return current
    row = con.execute(f"SELECT max(data) FROM {_INSTALLED}").fetchone()
    return row[0] if row and row[0] else current


def _installed_digest(con: duckdb.DuckDBPyConnection) -> str | None:
    row = con.execute("SELECT max(value) FROM meta WHERE key = ?", [VIEWS_KEY]).fetchone()
    return row[0] if row else None


def _has_relation(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND NOT internal", [name]
    ).fetchone()
    return bool(row and row[0])


def apply_options(con: duckdb.DuckDBPyConnection, opts: VerdictOptions | None) -> None:
    """Set the views' session variables (unset ones are reset, so nothing leaks between calls)."""
    opts = opts or VerdictOptions()
    values: dict[str, float | int | str | None] = {
        "pdf_watchdog_timeout_s": opts.watchdog_timeout_s,
        "pdf_grace_s": opts.grace_s,
        "pdf_since_us": opts.since_us,
        "pdf_until_us": opts.until_us,
        "pdf_env_timeout_s": opts.env_timeout_s,
        "pdf_env_unit": opts.env_unit,
    }
    for name, value in values.items():
        if value is None:
            con.execute(f"RESET VARIABLE {name}")
        else:
            con.execute(f"SET VARIABLE {name} = ?", [value])


@contextmanager
def materialised(
    con: duckdb.DuckDBPyConnection, views: tuple[str, ...] = _MATERIALISE, cache: bool = True
) -> Iterator[None]:
    """Shadow the heavy views with their rows for the duration of one answer.

    Temporary relations win name resolution over views, so every later view reads the rows
    instead of recomputing them. The rows come from the judgement kept for this database state
    and these options (`pdforensics.judgement`: a temporary view of the kept table) when there is
    one; else they are computed into temporary tables here, and kept for the next reader when
    the connection may keep them (`cache`: False for a connection whose rows must not be kept).
    Works on read-only connections too. Nested calls reuse the outer call's shadows while the
    parameters (session variables) are the same, so a caller can wrap `compute_verdict` and its
    own queries in one `apply_options` + `materialised` and pay for the views once; with other
    parameters they are replaced (and kept for the outer call, whose session variables have
    changed too). `views`: which of them to shadow (in `_MATERIALISE` order); the verdict alone
    needs no table of `requests` (see `_VERDICT_VIEWS`).
    """
    catalog = _current_catalog(con)
    mine = _SHADOWS.setdefault(id(con), {})
    views_of = "SELECT view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal"
    installed = {r[0] for r in con.execute(views_of, [catalog]).fetchall()}
    # temporary views (the Spark path's, a user's) win over the installed ones and are used as
    # they are; those of kept judgements are this function's own shadows
    installed -= {r[0] for r in con.execute(views_of, ["temp"]).fetchall()} - mine.keys()
    shadowed = {
        r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
    } | mine.keys()
    names = [n for n in _MATERIALISE if n in installed and (n in views or n in shadowed)]
    params = _params(con) if names else ()
    outermost = not any(n in shadowed for n in names)
    # an outer call's shadows (or the caller's own tables, which are used as they are) are
    # replaced, in dependency order, only when the parameters changed
    stale = _SHADOW_PARAMS.get(id(con), params) != params
    todo = [n for n in names if n not in shadowed or stale]
    kept = judgement.entry(con, data_catalog(con), mine) if cache and todo else None
    made: list[str] = []
    computed: list[str] = []
    try:
        for name in todo:
            alias = kept.attach(con, _PART[name]) if kept is not None else None
            if alias is None or not _shadow_kept(con, name, alias):
                _shadow(con, catalog, name)
                computed.append(name)
            if name not in shadowed:
                made.append(name)
        if kept is not None and computed:
            _keep(con, kept, computed)
        if todo:
            _SHADOW_PARAMS[id(con)] = params
        yield
    finally:
        for name in reversed(made):
            kind = mine.pop(name, "table")
            con.execute(f'DROP {"VIEW" if kind == "view" else "TABLE"} IF EXISTS temp.main."{name}"')
        if outermost and made:
            _SHADOW_PARAMS.pop(id(con), None)
        if not mine:
            _SHADOWS.pop(id(con), None)


def is_shadowed(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether `name`'s rows are in place (a temporary table, or a kept judgement's view), so a
    reader can query it many times without recomputing it."""
    if name in _SHADOWS.get(id(con), {}):
        return True
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?", [name]
    ).fetchone()
    return bool(row and row[0])


def _shadow(con: duckdb.DuckDBPyConnection, catalog: str, name: str) -> None:
    # The rows' order is never relied on (every reader that needs one says ORDER BY), and writing
    # them unordered is ~15 % cheaper for `requests`; the session's own setting is put back.
    mine = _SHADOWS.setdefault(id(con), {})
    if mine.get(name) == "view":  # a kept judgement of other parameters
        con.execute(f'DROP VIEW IF EXISTS temp.main."{name}"')
    with store.setting(con, "preserve_insertion_order", "false"):
        con.execute(f'CREATE OR REPLACE TEMP TABLE "{name}" AS SELECT * FROM "{catalog}".main."{name}"')
    mine[name] = "table"


def _shadow_kept(con: duckdb.DuckDBPyConnection, name: str, alias: str) -> bool:
    """`name` shadowed by a view of the kept table; False (nothing changed) when it cannot be read."""
    mine = _SHADOWS.setdefault(id(con), {})
    try:
        con.execute(f'SELECT * FROM {alias}.{judgement.SCHEMA}."{name}" LIMIT 0')
    except duckdb.Error:  # not a judgement this version reads: computed instead
        return False
    if mine.get(name) != "view":  # a table computed for other parameters
        con.execute(f'DROP TABLE IF EXISTS temp.main."{name}"')
    con.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS SELECT * FROM {alias}.{judgement.SCHEMA}."{name}"')
    mine[name] = "view"
    return True


# Kept with the stack: the answer relations `verdict_from_relations` reads (thin views over
# `verdict` and `context`), so a kept verdict is read without the views.
def _keep(con: duckdb.DuckDBPyConnection, kept: judgement.Entry, computed: list[str]) -> None:
    """Keep the parts whose every relation was computed by this call (not read from a kept part)."""
    for part in ("stack", "requests"):
        names = [n for n in _MATERIALISE if _PART[n] == part]
        if not set(names) <= set(computed):
            continue
        extra = [n for n in ANSWER_RELATIONS if n not in names] if part == "stack" else []
        try:
            with judgement.writing(con, kept, part) as out:
                if out is None:
                    return  # the folder cannot be written: compute each time, as before
                with store.setting(con, "preserve_insertion_order", "false"):
                    for name in names:
                        con.execute(
                            f'CREATE TABLE {out}.{judgement.SCHEMA}."{name}" AS FROM temp.main."{name}"'
                        )
                    for name in extra:
                        con.execute(f'CREATE TABLE {out}.{judgement.SCHEMA}."{name}" AS FROM "{name}"')
        except duckdb.Error:
            continue  # e.g. the disk filled up: the answer does not depend on keeping it


def _params(con: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """The views' parameters as they stand (the `params` view reads the session variables)."""
    row = con.execute("SELECT * FROM params").fetchone()
    return tuple(row) if row else ()


# ------------------------------------------------------------------ verdict


def iso(t_us: int | None) -> str | None:
    if t_us is None:
        return None
    return datetime.fromtimestamp(t_us / 1e6, UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Verdict:
    verdict: str
    window_start_us: int | None
    window_end_us: int | None
    timeout_s: float | None
    timeout_source: str
    deployed: bool | None
    deployed_basis: str
    grace_s: float
    evidence_level: str
    counts: dict[str, int]
    requests: list[dict[str, Any]]
    reasons: list[str]
    firings: list[dict[str, Any]] = field(default_factory=list)
    holes: list[dict[str, Any]] = field(default_factory=list)
    anonymous_pins: list[dict[str, Any]] = field(default_factory=list)
    abort_storms: list[dict[str, Any]] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    host_offsets: list[dict[str, Any]] = field(default_factory=list)
    observed: list[dict[str, Any]] = field(default_factory=list)
    # prefill instances other lines name whose own lines are absent (design.md, "Exists")
    unobserved: list[dict[str, Any]] = field(default_factory=list)
    window_basis: str = "data"
    recovery: str | None = None  # "drained" | "wedged" | "undetermined"; None when nothing fired
    recovery_paths: list[dict[str, Any]] = field(default_factory=list)
    stuck_elsewhere: list[dict[str, Any]] = field(
        default_factory=list
    )  # frozen queues outside the watchdog's
    instances: list[dict[str, Any]] = field(default_factory=list)  # per prefill instance, worst first
    # a fleet whose builds differ: "4 of 8 prefill instances (p-node-01, ...)", the window's one
    # `deployed` being true of those only
    deployed_on: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The `--json` contract (keys documented in the issue); extra keys come after them."""
        return {
            "verdict": self.verdict,
            "window": {"start": iso(self.window_start_us), "end": iso(self.window_end_us)},
            "watchdog": {
                "timeout_s": self.timeout_s,
                "deployed": self.deployed,
                "timeout_source": self.timeout_source,
                "deployed_basis": self.deployed_basis,
                **({"deployed_on": self.deployed_on} if self.deployed_on else {}),
                "grace_s": self.grace_s,
                "firings": self.firings,
                "recovery": self.recovery,
                "recovery_paths": self.recovery_paths,
            },
            "evidence_level": self.evidence_level,
            "counts": self.counts,
            "requests": self.requests,
            "reasons": self.reasons,
            "holes": self.holes,
            "anonymous_pins": self.anonymous_pins,
            "abort_storms": self.abort_storms,
            "restarts": self.restarts,
            "host_offsets": self.host_offsets,
            "observed": self.observed,
            "stuck_elsewhere": self.stuck_elsewhere,
            "window_basis": self.window_basis,
            "instances": self.instances,
        }


# The keys of `verdict.watchdog_firing_rows` the JSON lists, in its order.
_FIRING_COLUMNS = (
    "bootstrap_room", "rid", "host", "fired_t", "dwell_s", "state", "timeout_s", "ranks", "all_ranks",
    "same_second", "late", "decode_host", "backpressure", "decode_running_req", "decode_prealloc_req",
    "decode_transfer_req", "decode_token_usage",
)  # fmt: skip


def _request_json(r: dict[str, Any]) -> dict[str, Any]:
    dwell = r["dwell_s"]
    return {
        "bootstrap_room": str(r["bootstrap_room"]),
        # a request is (deployment, room): set when two deployments' prefills logged the room
        "deployment": r.get("deployment"),
        "prefill_rid": r["prefill_rid"],
        "decode_rid": r["decode_rid"],
        "class": r["class"],
        "abort_race": bool(r["abort_race"]),
        "across_restart": bool(r["across_restart"]),
        "one_sided": bool(r["one_sided"]),
        "dwell_s": None if dwell is None else round(float(dwell), 3),
        "dwell_basis": r["dwell_basis"],
        "evidence_level": r["evidence_level"],
        "abort_race_outcome": r["abort_race_outcome"],
        "prefill_status": r["prefill_status"],
        "undecided_reason": r["undecided_reason"],
        "lost_reason": r["lost_reason"],
        "reason": r["reason"],
        "first_seen": iso(r["first_t"]),
        # a firing while its decode was saturated: likely backpressure (None: not a firing, or no load seen)
        "backpressure": r["backpressure"],
        "legs": r["legs"],  # requests sharing the room: a rebootstrap, n > 1, a duplicate room
        # each side's holder (design.md, "Held"): its prefill and decode host, and which side
        # still held it at the window end (None: neither)
        "prefill_host": r.get("p_host"),
        "decode_host": r.get("d_host"),
        "holder_at_end": r.get("holder_at_end"),
    }


def _times(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn *_t microsecond columns into ISO strings for JSON."""
    out = []
    for row in rows:
        item = {}
        for k, v in row.items():
            if k.endswith("_t") and isinstance(v, int):
                item[k[:-2]] = iso(v)
            elif isinstance(v, float):
                item[k] = round(v, 3)
            else:
                item[k] = v
        out.append(item)
    return out


def compute_verdict(con: duckdb.DuckDBPyConnection, options: VerdictOptions | None = None) -> Verdict:
    """The window's verdict, its reasons, counts and every request that did not complete; with
    several prefill instances, each one's own judgement and the worst of them as the verdict.

    Judged once per database state and options: a kept judgement (`pdforensics.judgement`) is read
    without the views; else the views compute it and it is kept for the next reader."""
    apply_options(con, options)
    kept = judgement.entry(con, data_catalog(con), _SHADOWS.get(id(con), {}))
    if kept is not None:
        if _SHADOWS.get(id(con)):  # inside a caller's `materialised`: its shadows follow the options
            ensure_views(con)
            with materialised(con, _VERDICT_VIEWS):
                found = _kept_verdict(con, kept, options)
        else:
            found = _kept_verdict(con, kept, options)
        if found is not None:
            return found
    ensure_views(con)
    with materialised(con, _VERDICT_VIEWS):
        whole = verdict_from_relations(con)
        hosts = fleet.prefill_instances(con)
        if kept is None or len(hosts) < 2:
            return judged_per_instance(whole, hosts, options, functools.partial(_judge_instance, con))
        with judgement.writing(con, kept, "instances") as out:
            judge = functools.partial(_judge_instance, con, keep=out)
            return judged_per_instance(whole, hosts, options, judge)


def whole_window_verdict(con: duckdb.DuckDBPyConnection, options: VerdictOptions | None = None) -> str:
    """The whole window's own verdict, without a fleet's per-instance judgements. The window's
    verdict (`compute_verdict`) is the worst of this and each instance's: never greener than it."""
    apply_options(con, options)
    ensure_views(con)
    with materialised(con, ("context", "verdict")):
        return con.execute("SELECT verdict FROM verdict").fetchone()[0]


def _kept_verdict(
    con: duckdb.DuckDBPyConnection, kept: judgement.Entry, options: VerdictOptions | None
) -> Verdict | None:
    """The verdict from a kept judgement's rows, assembled as from the views'; None when they are
    not all kept (a fleet's instances are kept apart: the stack may be there without them)."""
    stack = kept.attach(con, "stack")
    if stack is None:
        return None
    cur = con.cursor()  # its own search path: the kept tables under the views' names
    try:
        cur.execute(f"USE {stack}.{judgement.SCHEMA}")
        whole = verdict_from_relations(cur)
        hosts = fleet.prefill_instances(cur)
        rows: dict[str, dict[str, Any]] = {}
        if len(hosts) > 1:
            instances = kept.attach(con, "instances")
            if instances is None:
                return None
            for r in store.fetch_dicts(
                cur, f"SELECT * FROM {instances}.{judgement.SCHEMA}.instance_verdicts"
            ):
                rows[r.pop(_INSTANCE_HOST)] = r
            if not set(hosts) <= rows.keys():
                return None
    except duckdb.Error:
        return None
    finally:
        cur.close()
    return judged_per_instance(whole, hosts, options, lambda host, _opts, _vars: _verdict_of(rows[host]))


# Judges one prefill instance: (host, its options, the fleet's variables) -> its Verdict.
InstanceJudge = Callable[[str, VerdictOptions, dict[str, Any]], "Verdict"]


def judged_per_instance(
    whole: Verdict, hosts: list[str], options: VerdictOptions | None, judge: InstanceJudge
) -> Verdict:
    """The whole window's verdict with each prefill instance's own (`judge`, on whichever engine),
    the worst deciding. One prefill: the window's judgement is that instance's."""
    if len(hosts) < 2:
        whole.instances = [_instance_json(h, whole) for h in hosts] + whole.unobserved
        return whole
    offsets = {o["host"]: int(o["offset_us"] or 0) for o in whole.host_offsets}
    judged = [
        _instance_json(h, judge(h, *instance_options(whole, options, offsets.get(h, 0)))) for h in hosts
    ]
    judged += whole.unobserved
    return _worst_of(whole, sorted(judged, key=lambda i: (SEVERITY.index(i["verdict"]), i["host"])))


def instance_options(
    whole: Verdict, options: VerdictOptions | None, offset_us: int
) -> tuple[VerdictOptions, dict[str, Any]]:
    """An instance is judged in the whole window, its bounds moved onto the instance's clock (the
    reference clock of its scope); with no timeout of its own in its lines, held to the one the
    fleet's lines show (the extra session variables returned)."""
    opts = dataclasses.replace(
        options or VerdictOptions(),
        since_us=None if whole.window_start_us is None else whole.window_start_us + offset_us,
        until_us=None if whole.window_end_us is None else whole.window_end_us + offset_us,
    )
    # another engine's queue the whole window explained holds other instances' requests
    stuck = ";".join(f"{q['host']}|{q['engine']}|{q['queue']}" for q in whole.stuck_elsewhere)
    fleet_vars: dict[str, Any] = {"pdf_fleet_stuck_queues": stuck}
    if opts.watchdog_timeout_s is None and whole.timeout_source != "default":
        fleet_vars |= {
            "pdf_fleet_timeout_s": whole.timeout_s,
            "pdf_fleet_timeout_basis": f"{whole.timeout_source} elsewhere in the fleet",
        }
    return opts, fleet_vars


# The column naming the instance in a kept judgement's `instance_verdicts` (the rest: `verdict`'s).
_INSTANCE_HOST = "pdf_instance_host"


def _judge_instance(
    con: duckdb.DuckDBPyConnection, host: str, opts: VerdictOptions, fleet_vars: dict[str, Any],
    keep: str | None = None,
) -> Verdict:  # fmt: skip
    """One prefill instance judged by the same views over its scope (fleet.instance_scope); its
    `verdict` row also written to the catalog `keep` (a judgement being kept) when given."""
    with fleet.instance_scope(con, host, data_catalog(con), ensure_views) as cur:
        apply_options(cur, opts)
        for name, value in fleet_vars.items():
            cur.execute(f"SET VARIABLE {name} = ?", [value])
        # the scope's rows are not the file's: never kept as the file's judgement
        with materialised(cur, _VERDICT_VIEWS, cache=False):
            if keep is not None:
                table = f"{keep}.{judgement.SCHEMA}.instance_verdicts"
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {table} AS SELECT ''::VARCHAR AS {_INSTANCE_HOST}, * "
                    "FROM verdict LIMIT 0"
                )
                cur.execute(f"INSERT INTO {table} SELECT ?::VARCHAR, * FROM verdict", [host])
            return verdict_from_relations(cur)


def _unobserved_json(u: dict[str, Any]) -> dict[str, Any]:
    """A prefill instance only other lines name: in the universe, never judged healthy."""
    return {
        "host": u["address"],
        "engine": "prefill",
        "verdict": "inconclusive",
        "observed": False,
        "named_by": list(u["named_by"]),
        "lines_naming": int(u["n"]),
        "watchdog": {
            "deployed": None,
            "timeout_s": None,
            "timeout_source": None,
            "deployed_basis": "not observed",
            "firings": 0,
            "recovery": None,
        },
        "evidence_level": None,
        "counts": {},  # nothing of its own was read: no count can be stated
        "reasons": [
            f"no line of its own in the data; named by {int(u['n'])} line(s) or scrape(s) ({', '.join(u['named_by'])}): "
            "what it held is not observed"
        ],
    }


def _instance_json(host: str, v: Verdict) -> dict[str, Any]:
    return {
        "host": host,
        "engine": "prefill",
        "verdict": v.verdict,
        "watchdog": {
            "deployed": v.deployed,
            "timeout_s": v.timeout_s,
            "timeout_source": v.timeout_source,
            "deployed_basis": v.deployed_basis,
            "firings": len(v.firings),
            "recovery": v.recovery,
        },
        "evidence_level": v.evidence_level,
        "counts": v.counts,
        "reasons": v.reasons,
    }


def _worst_of(whole: Verdict, instances: list[dict[str, Any]]) -> Verdict:
    """The window's verdict: the worst of the instances' and the whole window's own judgement
    (which also holds what no instance claims). When an instance is worse, its deciding reason
    comes first; a line names every instance's verdict."""
    worst = min([whole.verdict, *(i["verdict"] for i in instances)], key=SEVERITY.index)
    by_verdict: dict[str, list[str]] = {}
    for i in instances:
        by_verdict.setdefault(i["verdict"], []).append(i["host"] or "?")
    summary = f"{len(instances)} prefill instances, the verdict is the worst: " + "; ".join(
        f"{verdict} on {len(hosts)} ({', '.join(hosts)})" for verdict, hosts in by_verdict.items()
    )
    by_build: dict[str, list[str]] = {}
    for i in instances:
        build = {True: "deployed", False: "not deployed"}.get(i["watchdog"]["deployed"], "unknown")
        by_build.setdefault(build, []).append(i["host"] or "?")
    deployed_on = None
    if len(by_build) > 1:  # builds differ: the window's one `deployed` does not hold for all
        summary += "; the watchdog " + "; ".join(
            f"{build} on {len(hosts)} ({', '.join(sorted(hosts))})"
            for build, hosts in sorted(by_build.items())
        )
        on = sorted(by_build.get("deployed", []))
        deployed_on = f"{len(on)} of {len(instances)} prefill instances ({', '.join(on)})"
    reasons = list(whole.reasons)
    if worst != whole.verdict:
        first = instances[0]
        reasons = [f"{first['host'] or '?'}: {r}" for r in first["reasons"][:1]] + reasons
    return dataclasses.replace(
        whole, verdict=worst, reasons=[*reasons[:1], summary, *reasons[1:]], instances=instances,
        deployed_on=deployed_on,
    )  # fmt: skip


# The relations `verdict_from_relations` reads: the views' answer, whichever engine computed it.
ANSWER_RELATIONS = (
    "verdict",
    "coverage",
    "anonymous_pins",
    "abort_storms",
    "engine_restarts",
    "host_offsets",
)


def verdict_from_relations(con: duckdb.DuckDBPyConnection) -> Verdict:
    """Assemble a `Verdict` from the rows of `ANSWER_RELATIONS` as `con` resolves them: the
    installed views, tables of another engine's results (the Spark path) under those names, or
    a kept judgement's tables (`pdforensics.judgement`)."""
    return _verdict_of(
        store.fetch_dicts(con, "SELECT * FROM verdict")[0],
        holes=store.fetch_dicts(
            con,
            "SELECT hole_id, kind, host, engine, from_t, to_t, detail, covered, suspects, decisive "
            "FROM coverage ORDER BY from_t",
        ),
        anon=store.fetch_dicts(con, "SELECT * FROM anonymous_pins ORDER BY host"),
        storms=store.fetch_dicts(con, "SELECT * FROM abort_storms ORDER BY from_t"),
        restarts=store.fetch_dicts(con, "SELECT * FROM engine_restarts ORDER BY stop_t"),
        offsets=store.fetch_dicts(con, "SELECT * FROM host_offsets ORDER BY host"),
    )


def _verdict_of(
    v: dict[str, Any],
    holes: list[dict[str, Any]] | None = None,
    anon: list[dict[str, Any]] | None = None,
    storms: list[dict[str, Any]] | None = None,
    restarts: list[dict[str, Any]] | None = None,
    offsets: list[dict[str, Any]] | None = None,
) -> Verdict:
    """A `Verdict` from the `verdict` row and the rows of the other answer relations (a fleet
    instance's kept judgement has its `verdict` row alone: what `_instance_json` reads)."""
    firings = [
        {k: w[k] for k in _FIRING_COLUMNS} | {"bootstrap_room": str(w["bootstrap_room"])}
        for w in v["watchdog_firing_rows"] or []
    ]
    counts = {c: int(v[c]) for c in CLASSES if c != "undecided"}
    counts["anonymous_pins"] = int(v["anonymous_pins"])
    counts["undecided"] = int(v["undecided"])  # requests of that class, like the others
    counts["requests"] = int(v["requests"])
    return Verdict(
        verdict=v["verdict"],
        window_start_us=v["window_start_t"],
        window_end_us=v["window_end_t"],
        timeout_s=v["timeout_s"],
        timeout_source=v["timeout_source"],
        deployed=v["deployed"],
        deployed_basis=v["deployed_basis"],
        grace_s=v["grace_s"],
        evidence_level=v["evidence_level"],
        counts=counts,
        requests=[_request_json(r) for r in v["not_completed"] or []],
        reasons=list(v["reasons"] or []),
        firings=_times(firings),
        holes=_times(holes or []),
        anonymous_pins=_times(anon or []),
        abort_storms=_times(storms or []),
        restarts=_times(restarts or []),
        host_offsets=offsets or [],
        observed=_with_metrics(
            [_observed_json(o) for o in v["observed"] or []], v.get("metric_observed") or []
        ),
        unobserved=[_unobserved_json(u) for u in v.get("unobserved_prefills") or []],
        window_basis=v["window_basis"],
        recovery=v["recovery"],
        recovery_paths=_recovery_json(v["recovery_rows"] or []),
        stuck_elsewhere=_times(v["frozen_queues"] or []),
    )


def _recovery_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per prefill -> decode path the watchdog fired on: whether it recovered, and the evidence."""
    keep = ("recovery", "firings", "first_fire_t", "last_fire_t", "completed_after_last", "stuck_after_first")
    return _times(
        [
            {"prefill_host": x["p_host"], "decode_host": x["d_host_eff"]} | {k: x[k] for k in keep}
            for x in rows
        ]
    )


_QUEUES = ("inflight", "bootstrap", "transfer", "prealloc", "waiting")


def _observed_json(o: dict[str, Any]) -> dict[str, Any]:
    """One host and engine: the queues its stats lines showed, how often, the longest stretch of
    the window it showed nothing (the edges included), and per incarnation which line shapes
    (catalog entries) carried which queue: a line without a queue's field does not observe it."""
    gap, inflight_gap = o["longest_gap_us"], o.get("inflight_gap_us")
    return {
        "host": o["host"],
        "engine": o["engine"],
        "queues": [q for q in _QUEUES if o[q]],
        "samples": int(o["samples"]),
        "request_lines": int(o["request_lines"]),
        "first_sample": iso(o["first_t"]),
        "last_sample": iso(o["last_t"]),
        "longest_gap_s": None if gap is None else round(gap / 1e6, 3),
        "inflight_gap_s": None if inflight_gap is None else round(inflight_gap / 1e6, 3),
        "incarnations": _line_shapes_json(o.get("line_shapes") or []),
    }


def _with_metrics(observed: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each prefill's `metrics`: the Prometheus inflight gauge read beside its lines, at scrape
    resolution (None when none was ingested)."""
    by_host = {m["host"]: m for m in metrics}
    for o in observed:
        m = by_host.get(o["host"]) if o["engine"] == "prefill" else None
        o["metrics"] = None if m is None else {
            "source": "prometheus",
            "queues": ["inflight"],
            "series": int(m["series"]),
            "scrapes": int(m["scrapes"]),
            "resolution_s": None if m["interval_us"] is None else round(m["interval_us"] / 1e6, 3),
            "first_scrape": iso(m["first_t"]),
            "last_scrape": iso(m["last_t"]),
        }  # fmt: skip
    return observed


def _line_shapes_json(shapes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per incarnation: each line shape, its lines, the queues it carried and those it lacked."""
    out: dict[int, list[dict[str, Any]]] = {}
    for x in shapes:
        carried = [q for q in _QUEUES if x[q]]
        out.setdefault(int(x["incarnation"]), []).append(
            {"entry": x["entry"], "lines": int(x["lines"]), "carries": carried}
        )
    return [
        {
            "incarnation": k,
            "queues": sorted({q for s in v for q in s["carries"]}, key=_QUEUES.index),
            "line_shapes": v,
        }
        for k, v in sorted(out.items())
    ]


def _deployed_text(v: Verdict) -> str:
    if v.deployed_on:
        return f"on {v.deployed_on}"
    return "unknown" if v.deployed is None else "yes" if v.deployed else "no"


def render_text(v: Verdict, max_requests: int = 200) -> str:
    """The verdict for a terminal: verdict, reasons, counts, then the requests that did not complete."""
    out = [
        f"verdict: {v.verdict}",
        f"window:  {iso(v.window_start_us)} .. {iso(v.window_end_us)}"
        if v.window_start_us is not None or v.window_end_us is not None
        else "window:  none (no line in the database, or none in the window asked for)",
        f"watchdog: timeout {v.timeout_s:g} s ({v.timeout_source}); deployed: "
        f"{_deployed_text(v)} ({v.deployed_basis})"
        if v.timeout_s is not None
        else "watchdog: unknown",
        f"evidence: {v.evidence_level}",
        "",
        "reasons:",
        *[f"  - {r}" for r in v.reasons],
        "",
        "counts: " + ", ".join(f"{k} {n:,}" for k, n in v.counts.items()),
    ]
    if len(v.instances) > 1:
        out += [
            "",
            f"prefill instances ({len(v.instances)}, worst first):",
            *map(_instance_line, v.instances),
        ]
    if v.requests:
        out += ["", f"requests not completed ({len(v.requests):,}):"]
        # the hosts first: on a fleet, which pair to look at (or restart) is the question
        hosts = [f"{r.get('prefill_host') or '-'} -> {r.get('decode_host') or '-'}" for r in v.requests]
        w = max(len("prefill -> decode host"), *map(len, hosts[:max_requests]))
        out.append(
            f"  {'bootstrap_room':<20} {'class':<16} {'flags':<30} {'dwell':>9}  "
            f"{'prefill -> decode host':<{w}}  prefill_rid / decode_rid"
        )
        for r, pair in zip(v.requests[:max_requests], hosts, strict=False):
            flags = ",".join(k for k in ("abort_race", "across_restart", "one_sided") if r[k]) or "-"
            dwell = "-" if r["dwell_s"] is None else f"{r['dwell_s']:.1f}s"
            out.append(
                f"  {r['bootstrap_room']:<20} {r['class']:<16} {flags:<30} {dwell:>9}  {pair:<{w}}  "
                f"{r['prefill_rid'] or '-'} / {r['decode_rid'] or '-'}"
            )
        if len(v.requests) > max_requests:
            out.append(f"  ... {len(v.requests) - max_requests:,} more (--json lists them all)")
    return "\n".join(out)


def _instance_line(i: dict[str, Any]) -> str:
    if i.get("observed") is False:
        return f"  {i['host'] or '?':<20} {i['verdict']:<16} not observed: {i['reasons'][0]}"
    wd, c = i["watchdog"], i["counts"]
    deployed = {True: "watchdog", False: "no watchdog"}.get(wd["deployed"], "watchdog unknown")
    timeout = "?" if wd["timeout_s"] is None else f"{wd['timeout_s']:g} s"
    return (
        f"  {i['host'] or '?':<20} {i['verdict']:<16} {deployed} ({timeout}), {c['requests']:,} requests: "
        f"{c['silent_pin']:,} silent pin, {c['watchdog_fired']:,} fired, {c['undecided']:,} undecided, "
        f"{c['anonymous_pins']:,} anonymous"
    )


# ------------------------------------------------------------------ timeline


@dataclass
class Timeline:
    bootstrap_room: str
    request: dict[str, Any]
    phases: list[dict[str, Any]]
    lines: list[dict[str, Any]]
    evidence: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "bootstrap_room": self.bootstrap_room,
            "request": _times([self.request])[0],
            "phases": _times(self.phases),
            "lines": _times(self.lines),
            "evidence": self.evidence,
        }


# Candidates listed when a prefix is ambiguous.
PREFIX_CANDIDATES = 8


def find_request(con: duckdb.DuckDBPyConnection, key: str) -> int:
    """The bootstrap_room a REQUEST argument names: a room or a rid (either engine's) as typed,
    else the one room or rid it is a unique prefix of (exports and reports name spans by a rid's
    first 8 characters: `prefill Req 495bb5cf`). `room_events` is read once, whatever the key."""
    key = key.strip()
    if not key:
        raise UsageError("REQUEST is empty: give a bootstrap_room or a rid (or a unique prefix of one)")
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _pdf_candidates AS
           SELECT bootstrap_room, rid, t_us FROM room_events
           WHERE starts_with(rid, $k) OR starts_with(CAST(bootstrap_room AS VARCHAR), $k)
              OR bootstrap_room = TRY_CAST($k AS UBIGINT)""",
        {"k": key},
    )
    try:
        return _pick_request(con, key)
    finally:
        con.execute("DROP TABLE IF EXISTS temp.main._pdf_candidates")


def _pick_request(con: duckdb.DuckDBPyConnection, key: str) -> int:
    # exact first: the room, then the rid (its first line), then a unique prefix of either
    room = "SELECT 1 FROM _pdf_candidates WHERE bootstrap_room = ?::UBIGINT LIMIT 1"
    if key.isdigit() and con.execute(room, [key]).fetchone():
        return int(key)
    row = con.execute(
        "SELECT bootstrap_room FROM _pdf_candidates WHERE rid = ? ORDER BY t_us LIMIT 1", [key]
    ).fetchone()
    if row:
        return int(row[0])
    rows = con.execute(
        """SELECT DISTINCT bootstrap_room, CASE WHEN starts_with(rid, $k) THEN rid END AS rid
           FROM _pdf_candidates
           WHERE starts_with(rid, $k) OR starts_with(CAST(bootstrap_room AS VARCHAR), $k)
           ORDER BY 1, 2 LIMIT 200""",
        {"k": key},
    ).fetchall()
    rooms = sorted({r[0] for r in rows})
    if len(rooms) == 1:
        return int(rooms[0])
    if not rooms:
        raise UsageError(
            f"no request with bootstrap_room or rid {key!r} (or starting with it) in the database"
        )
    names = [r[1] or str(r[0]) for r in rows]
    shown = ", ".join(dict.fromkeys(names[:PREFIX_CANDIDATES]))
    more = f", … ({len(rooms)} requests)" if len(rooms) > PREFIX_CANDIDATES else ""
    raise UsageError(f"{key!r} is the start of several requests: {shown}{more}; type more of it")


def request_timeline(
    con: duckdb.DuckDBPyConnection, room_or_rid: str, options: VerdictOptions | None = None
) -> Timeline:
    """One request's timeline: both engines' lines in reference-clock order, its phases and class.
    `room_or_rid`: as `find_request` takes it. The heavy views come from the kept judgement (or
    are computed once, for every query here); `room_events` is read twice: to find the request,
    then its lines."""
    ensure_views(con)
    apply_options(con, options)
    with materialised(con):
        room = find_request(con, room_or_rid)
        req = store.fetch_dicts(con, "SELECT * FROM requests WHERE bootstrap_room = ?::UBIGINT", [str(room)])
        if not req:
            raise UsageError(f"request {room_or_rid!r} is outside the window")
        phases = store.fetch_dicts(
            con,
            "SELECT phase, engine, t_us AS at_t, basis FROM request_phases "
            "WHERE bootstrap_room = ?::UBIGINT ORDER BY t_us, phase",
            [str(room)],
        )
        con.execute(
            """CREATE OR REPLACE TEMP TABLE _pdf_timeline_room AS
               SELECT line_id, host, engine, ts_us, t_us, event, tp_rank, rid FROM room_events
               WHERE bootstrap_room = ?::UBIGINT""",
            [str(room)],
        )
        try:
            lines = store.fetch_dicts(con, _TIMELINE_LINES)
        finally:
            con.execute("DROP TABLE IF EXISTS temp.main._pdf_timeline_room")
    r = req[0]
    return Timeline(
        bootstrap_room=str(room), request=r, phases=phases, lines=lines, evidence=evidence_text(r)
    )


# The request's lines (_pdf_timeline_room), the shutdown lines that name its rid, and the restarts
# around it, with their incarnation.
_TIMELINE_LINES = """
WITH mine AS (SELECT *, NULL AS note FROM _pdf_timeline_room),
shutdown AS (
    -- `Gracefully exiting ... remaining_rids=[...]` lines that list its decode rid
    SELECT e.line_id, e.host, e.engine, e.ts_us, e.t_us, e.event, e.tp_rank, NULL AS rid, NULL AS note
    FROM evt AS e
    WHERE e.event = 'graceful_exit' AND e.rids IS NOT NULL
      AND EXISTS (SELECT 1 FROM mine AS m WHERE m.engine = e.engine AND m.rid IS NOT NULL
                  AND position(m.rid IN e.rids) > 0)
),
restarts AS (
    SELECT NULL::BIGINT AS line_id, host, engine, NULL::BIGINT AS ts_us, stop_t AS t_us,
           'engine_' || kind AS event, NULL::SMALLINT AS tp_rank, NULL AS rid,
           format('{} {}: down from {} to {} ({})', engine, kind, pdf_ts(stop_t),
                  coalesce(pdf_ts(up_t), 'the window end'), how) AS note
    FROM engine_restarts
    WHERE stop_t BETWEEN (SELECT min(t_us) FROM mine) - 600000000 AND (SELECT max(t_us) FROM mine) + 600000000
),
allrows AS (SELECT * FROM mine UNION ALL SELECT * FROM shutdown UNION ALL SELECT * FROM restarts)
SELECT a.t_us AS at_t, a.ts_us AS host_clock_t, a.host, a.engine, i.incarnation, i.identity,
       a.tp_rank, a.event, coalesce(l.message, a.note, '') AS message
FROM allrows AS a
LEFT JOIN lines AS l ON l.line_id = a.line_id
ASOF LEFT JOIN incarnations AS i
  ON i.host = a.host AND i.engine = a.engine AND coalesce(a.ts_us, a.t_us) >= i.start_us
ORDER BY a.t_us, a.engine, a.tp_rank NULLS FIRST
"""


def _fmt_t(t_us: int | None) -> str:
    return iso(t_us) or "?"


def evidence_text(r: dict[str, Any]) -> list[str]:
    """Why the request got its class, in words."""
    out: list[str] = [f"class {r['class']} (evidence {r['evidence_level']})"]
    cls = r["class"]
    if cls == "watchdog_fired":
        out.append(
            f"the watchdog force-failed it at {_fmt_t(r['watchdog_fired_t'])} in {r['wd_state']} "
            f"after {r['wd_dwell_s']} s, ranks {r['wd_ranks']}"
        )
    elif cls == "silent_pin":
        out.append(
            f"held by the prefill from {_fmt_t(r['pinned_from_t'])} past its deadline "
            f"{_fmt_t(r['watchdog_deadline_t'])} (timeout + grace) with no watchdog line and no end"
        )
    elif cls in ("transfer_failed", "aborted", "retracted"):
        out.append(f"ended by {_fmt_t(r['failed_t'] or r['aborted_t'])}: {r['reason'] or 'no reason text'}")
    elif cls == "lost":
        out.append(r["lost_reason"] or "its engine went away while it was open")
    elif cls == "completed":
        out.append(f"finished at {_fmt_t(r['decode_finished_t'] or r['kv_done_t'])}")
    elif cls == "undecided":
        out.append(f"it may still be held, and the logs cannot tell: {r['undecided_reason']}")
    elif cls == "in_flight":
        out.append("still open at the window end, younger than the timeout")
    if r["dwell_s"] is not None:
        out.append(f"dwell {r['dwell_s']:.1f} s measured by {r['dwell_basis']}")
    if r["abort_race"]:
        out.append(f"abort race ({r['abort_race_outcome']}): {r['abort_evidence']}")
    if r["across_restart"]:
        out.append("its life spans a restart of the engine that was not holding it")
    if r["one_sided"]:
        out.append("seen on one engine only")
    if r["p_fail_ranks"]:
        out.append(f"prefill failure reported by TP ranks {r['p_fail_ranks']}")
    if r["d_fail_ranks"]:
        out.append(f"decode failure reported by TP ranks {r['d_fail_ranks']}")
    return out


def render_timeline(t: Timeline) -> str:
    r = t.request
    out = [
        f"bootstrap_room {t.bootstrap_room}: prefill rid {r['prefill_rid'] or '-'}, decode rid {r['decode_rid'] or '-'}",
        *[f"  {e}" for e in t.evidence],
        "",
        "phases:",
        *[f"  {_fmt_t(p['at_t'])}  {p['engine'] or '':<8} {p['phase']:<18} ({p['basis']})" for p in t.phases],
        "",
        "lines (reference clock; host clock in brackets when it differs):",
    ]
    for ln in t.lines:
        skew = ""
        if ln["host_clock_t"] is not None and ln["host_clock_t"] != ln["at_t"]:
            skew = f" [{_fmt_t(ln['host_clock_t'])}]"
        inc = f"#{ln['incarnation']}" if ln["incarnation"] is not None else ""
        rank = f" TP{ln['tp_rank']}" if ln["tp_rank"] is not None else ""
        out.append(
            f"  {_fmt_t(ln['at_t'])}{skew} {ln['engine']}{inc}@{ln['host'] or '?'}{rank} {ln['event']}: "
            f"{ln['message'][:200]}"
        )
    return "\n".join(out)
