"""Stored lines folded, batch by batch, into the summaries the verdict reads instead of them.

* `rooms`: one row per bootstrap_room. `room_facts` (queries/views/04_room_facts.sql) needs, for
  every request, the first Receive:, Finish: and time-stats line on each engine; aggregating
  millions of room lines into those rows was most of a verdict's time. One MERGE per batch.
* `line_seconds` / `event_seconds`: the `context` view's per-second counts of lines (per host,
  engine, process) and events, appended per batch (sums, minima and maxima add up).

Everything is folded in the batch's own transaction and holds each host's own clock (`ts_us`):
the clock offsets and the window are the verdict's, applied when it reads them. What a summary
cannot answer exactly is recomputed from the lines there: a room whose side has lines from two
hosts, a line without a time, a room or a second the window cuts, and every line stored after
`meta.folded_upto` (the last line_id folded in). The summaries are a cache that can only make the
verdict faster, never different (tests/test_fold.py).
"""

from __future__ import annotations

import duckdb

UPTO_KEY = "folded_upto"

# The lines a request's facts come from: those `room_events` keeps (not health checks).
_ROOM_LINE = """bootstrap_room IS NOT NULL AND bootstrap_room <> 0
    AND coalesce(bootstrap_host, '') <> '2.2.2.2' AND NOT starts_with(coalesce(rid, ''), 'HEALTH_CHECK')"""

# k: 1 Receive:, 2 Finish: that is not an abort, 4 ReqTimeStats; 0 any other room line.
_KIND = """CASE event WHEN 'request_received' THEN 1 WHEN 'req_time_stats' THEN 4
        WHEN 'request_finished' THEN CASE WHEN coalesce(finish_type, '') <> 'abort' THEN 2 ELSE 0 END
        ELSE 0 END"""

_INFLIGHT_ENTRY = "entry_time_us + ((coalesce(bootstrap_ms, 0) + coalesce(queue_ms, 0) + coalesce(forward_ms, 0)) * 1000)::BIGINT"
_BOOTSTRAP_DONE = "entry_time_us + (coalesce(bootstrap_ms, 0) * 1000)::BIGINT"


def _side(s: str, is_side: str) -> list[tuple[str, str, str, str]]:
    """(column, type, aggregate over one side's lines, how a stored value and a new one combine)."""
    w = f"FILTER (WHERE {is_side}"
    return [
        (f"{s}_host_lo", "VARCHAR", f"min(host) {w})", "least"),
        (f"{s}_host_hi", "VARCHAR", f"max(host) {w})", "greatest"),
        (f"{s}_first_ts", "BIGINT", f"min(ts_us) {w})", "least"),
        (f"{s}_last_ts", "BIGINT", f"max(ts_us) {w})", "greatest"),
        (f"{s}_recv_ts", "BIGINT", f"min(ts_us) {w} AND k = 1)", "least"),
        (f"{s}_done_ts", "BIGINT", f"min(ts_us) {w} AND k = 2)", "least"),
        (f"{s}_stats_ts", "BIGINT", f"min(ts_us) {w} AND k = 4)", "least"),
        (f"{s}_common_last_ts", "BIGINT", f"max(ts_us) {w} AND k > 0)", "greatest"),
        (f"{s}_rid", "VARCHAR", f"any_value(rid) {w} AND k > 0)", "coalesce"),
        # legs: a room can be several requests (a DeepSeek-V4 rebootstrap, n > 1, a duplicate room)
        (f"{s}_recvs", "BIGINT", f"count(*) {w} AND k = 1)", "sum"),
        (f"{s}_last_recv_ts", "BIGINT", f"max(ts_us) {w} AND k = 1)", "greatest"),
        (f"{s}_last_done_ts", "BIGINT", f"max(ts_us) {w} AND k IN (2, 4))", "greatest"),
    ]


COLUMNS: list[tuple[str, str, str, str]] = [
    *_side("p", "NOT is_d"),
    ("p_inflight_entry_ts", "BIGINT", f"min({_INFLIGHT_ENTRY}) FILTER (WHERE NOT is_d AND k = 4)", "least"),
    ("p_bootstrap_done_ts", "BIGINT", f"min({_BOOTSTRAP_DONE}) FILTER (WHERE NOT is_d AND k = 4)", "least"),
    *_side("d", "is_d"),
    ("untimed", "BOOLEAN", "bool_or(ts_us IS NULL)", "or"),
]

# The `context` view's per-second grouping of lines and events (01_context.sql, line_secs and
# event_secs, computes the same from the lines it cannot take from here).
_LINE_SECONDS = """
SELECT coalesce(l.host, '') AS host, l.engine, l.ts_us // 1000000 AS sec,
    l.invocation_id, CASE WHEN l.invocation_id IS NULL THEN l.pid END AS pid,
    CASE
        WHEN l.invocation_id IS NULL AND l.pid IS NULL THEN false
        WHEN l.pid = 1 THEN false
        WHEN l.syslog_identifier IN ('systemd', 'systemd-journald', 'init') THEN false
        WHEN l.event IN ('unit_started', 'unit_stopping', 'unit_stopped', 'unit_killed', 'unit_failed',
                         'journal_suppressed') THEN false
        ELSE true
    END AS own,
    min(l.ts_us) AS lo_us, max(l.ts_us) AS hi_us, count(*) AS n_lines,
    count(*) FILTER (WHERE l.event IS NOT NULL) AS n_recognised,
    count(*) FILTER (WHERE l.parse_error IS NOT NULL) AS n_parse_errors,
    count(*) FILTER (WHERE l.event IS NULL AND l.parse_error IS NULL AND l.cont_of IS NULL) AS n_other_lines,
    count(*) FILTER (WHERE l.cont_of IS NOT NULL) AS n_continuation
FROM lines AS l
WHERE ({where}) AND l.ts_us IS NOT NULL
GROUP BY ALL"""

_EVENT_SECONDS = """
SELECT coalesce(e.host, '') AS host, e.engine, e.event, e.ts_us // 1000000 AS sec,
    max(e.ts_us) AS hi_us,
    count(*) FILTER (WHERE e.event = 'request_received' AND e.bootstrap_room <> 0
                       AND coalesce(e.bootstrap_host, '') <> '2.2.2.2') AS n_received
FROM events AS e
WHERE ({where}) AND e.ts_us IS NOT NULL
GROUP BY ALL"""

DDL = [
    "CREATE TABLE IF NOT EXISTS rooms (\n    bootstrap_room UBIGINT NOT NULL,\n    "
    + ",\n    ".join(f"{name} {typ}" for name, typ, _, _ in COLUMNS)
    + "\n)",
    """CREATE TABLE IF NOT EXISTS line_seconds (
    host VARCHAR, engine VARCHAR, sec BIGINT, invocation_id VARCHAR, pid BIGINT, own BOOLEAN,
    lo_us BIGINT, hi_us BIGINT, n_lines BIGINT, n_recognised BIGINT, n_parse_errors BIGINT,
    n_other_lines BIGINT, n_continuation BIGINT)""",
    """CREATE TABLE IF NOT EXISTS event_seconds (
    host VARCHAR, engine VARCHAR, event VARCHAR, sec BIGINT, hi_us BIGINT, n_received BIGINT)""",
]


def _summary(where: str) -> str:
    """One row per room of the `events` rows matching `where`."""
    aggs = ",\n    ".join(f"{agg} AS {name}" for name, _, agg, _ in COLUMNS)
    return f"""
SELECT bootstrap_room,
    {aggs}
FROM (
    SELECT bootstrap_room, coalesce(host, '') AS host, coalesce(engine = 'decode', false) AS is_d,
        ts_us, rid, entry_time_us, bootstrap_ms, queue_ms, forward_ms, {_KIND} AS k
    FROM events
    WHERE ({where}) AND {_ROOM_LINE}
)
GROUP BY bootstrap_room"""


def _combine(name: str, how: str) -> str:
    old, new = f"rooms.{name}", f"s.{name}"
    if how == "or":
        return f"{old} OR {new}"
    if how == "coalesce":
        return f"coalesce({old}, {new})"
    if how == "sum":
        return f"coalesce({old}, 0) + coalesce({new}, 0)"
    return f"{how}({old}, {new})"  # least/greatest skip NULLs


def _merge(where: str) -> str:
    names = ["bootstrap_room", *(c[0] for c in COLUMNS)]
    sets = ", ".join(f"{name} = {_combine(name, how)}" for name, _, _, how in COLUMNS)
    return f"""
MERGE INTO rooms USING ({_summary(where)}) AS s ON rooms.bootstrap_room = s.bootstrap_room
WHEN MATCHED THEN UPDATE SET {sets}
WHEN NOT MATCHED THEN INSERT ({", ".join(names)}) VALUES ({", ".join("s." + n for n in names)})"""


def fold_batch(con: duckdb.DuckDBPyConnection, first_line_id: int, last_line_id: int) -> None:
    """Fold the lines just stored (line_id in [first, last]) into the summaries, in the caller's
    transaction. Line ids only grow, so the range selects exactly the batch (its row groups)."""
    batch = "line_id BETWEEN $first AND $last"
    ids = {"first": first_line_id, "last": last_line_id}
    con.execute(_merge(batch), ids)
    con.execute(f"INSERT INTO line_seconds {_LINE_SECONDS.format(where=batch)}", ids)
    con.execute(f"INSERT INTO event_seconds {_EVENT_SECONDS.format(where=batch)}", ids)
    _set_upto(con, last_line_id)


def rebuild_statements() -> list[str]:
    """Recompute the summaries from every stored line (a migration, or lines stored some other way)."""
    return [
        "DELETE FROM rooms",
        f"INSERT INTO rooms {_summary('true')}",
        "DELETE FROM line_seconds",
        f"INSERT INTO line_seconds {_LINE_SECONDS.format(where='true')}",
        "DELETE FROM event_seconds",
        f"INSERT INTO event_seconds {_EVENT_SECONDS.format(where='true')}",
        f"""INSERT OR REPLACE INTO meta SELECT '{UPTO_KEY}', greatest(
            (SELECT coalesce(max(line_id), 0) FROM lines), (SELECT coalesce(max(line_id), 0) FROM events))::VARCHAR""",
    ]


def rebuild(con: duckdb.DuckDBPyConnection) -> None:
    for sql in rebuild_statements():
        con.execute(sql)


def is_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Every stored line is folded in (rows written around `fold_batch`, e.g. by hand, are not)."""
    row = con.execute(
        "SELECT greatest((SELECT coalesce(max(line_id), 0) FROM lines), "
        "(SELECT coalesce(max(line_id), 0) FROM events)) <= "
        "(SELECT coalesce(max(TRY_CAST(value AS BIGINT)), -1) FROM meta WHERE key = ?)",
        [UPTO_KEY],
    ).fetchone()
    return bool(row and row[0])


def _set_upto(con: duckdb.DuckDBPyConnection, line_id: int) -> None:
    con.execute(
        "INSERT OR REPLACE INTO meta VALUES "
        "(?, greatest(?, coalesce((SELECT max(TRY_CAST(value AS BIGINT)) FROM meta WHERE key = ?), 0))::VARCHAR)",
        [UPTO_KEY, line_id, UPTO_KEY],
    )
