"""Perfetto / Chrome trace JSON (the Trace Event Format), for ui.perfetto.dev.

Layout:
* one process per engine instance (an engine on a host), plus one for the window;
* each request side is an async slice ("b"/"e", its own id) with its phases nested
  inside, so overlapping requests never share a stack; a side with no end in the logs
  is closed at the window end and marked open (name suffix, `open: true`);
* a flow (v2: `bind_id` + `flow_out`/`flow_in` on the async begins) links each
  room's prefill side to its decode side;
* counter tracks ("C") for the queue gauges of the stats lines (lowest logging TP rank);
* instants ("i") for watchdog firings, aborts, failures and lifecycle lines;
* engine incarnations as complete slices ("X") on a thread of their own (they never
  overlap); coverage holes as async slices (they may).
Timestamps are µs on the reference clock (`t_us`): clock offsets between hosts are
already removed. Events are written as they are read, one JSON object per line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import duckdb

from pdforensics import __version__
from pdforensics.exporters import requests as req
from pdforensics.exporters.common import Instance, events_rel, has_relation, instances, window_t
from pdforensics.store import dict_rows

# Threads inside each engine process (async slices need none).
TID_INCARNATIONS = 1
TID_LIFECYCLE = 2
TID_WATCHDOG = 3
TID_FAILURES = 4
THREADS = {
    TID_INCARNATIONS: "incarnations",
    TID_LIFECYCLE: "lifecycle",
    TID_WATCHDOG: "watchdog",
    TID_FAILURES: "aborts and failures",
}
WINDOW_PID = 10_000  # the window's own process (verdict, holes not tied to one engine)

COUNTERS = {
    "prefill": [("inflight_req", "#inflight-req"), ("floor", "inflight floor (#inflight-req - #new-seq)"),
                ("bootstrap_req", "#bootstrap-req"), ("queue_req", "#queue-req"), ("running_req", "#running-req")],
    "decode": [("running_req", "#running-req"), ("transfer_req", "#transfer-req"), ("prealloc_req", "#prealloc-req"),
               ("queue_req", "#queue-req"), ("retracted_req", "#retracted-req"), ("gen_throughput", "gen throughput (token/s)")],
}  # fmt: skip

LIFECYCLE = ("server_args", "server_ready", "unit_started", "sigterm", "graceful_exit", "unit_stopping",
             "unit_stopped", "unit_killed", "unit_failed", "engine_died", "health_check_failed",
             "scheduler_watchdog_timeout", "watchdog_armed")  # fmt: skip


class _Writer:
    """Streams `{"traceEvents": [...]}`: events encoded a batch at a time (one json.dumps call per
    batch costs a third of one call per event), commas handled here."""

    BATCH = 20_000

    def __init__(self, fh: TextIO) -> None:
        self.fh = fh
        self.first = True
        self.count = 0
        self.pending: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.pending.append(event)
        if len(self.pending) >= self.BATCH:
            self.flush()

    def texts(self, chunks: Iterator[list[str]]) -> None:
        """Events already encoded as JSON text, a chunk at a time."""
        self.flush()
        for chunk in chunks:
            self.fh.write(("\n" if self.first else ",\n") + ",\n".join(chunk))
            self.first = False
            self.count += len(chunk)

    def flush(self) -> None:
        if not self.pending:
            return
        text = json.dumps(self.pending, separators=(",", ":"), default=str)[1:-1]
        self.fh.write(("\n" if self.first else ",\n") + text)
        self.first = False
        self.count += len(self.pending)
        self.pending = []


def export(con: duckdb.DuckDBPyConnection, out: Path) -> Path:
    start, end = window_t(con)
    end = end if end is not None else 0
    procs = instances(con)
    with out.open("w", encoding="utf-8") as fh:
        fh.write('{"displayTimeUnit":"ms","traceEvents":[')
        emit = _Writer(fh)
        _metadata(emit, procs)
        for fn in (_incarnations, _lifecycle):
            for event in fn(con, procs):
                emit(event)
        emit.texts(_counters(con, procs))
        for event in _holes(con, procs):
            emit(event)
        if req.available(con):
            emit.texts(_requests(con, procs, end))
        for event in _window(con, start, end):
            emit(event)
        emit.flush()
        fh.write("\n],")
        fh.write(f'"otherData":{json.dumps({"generator": f"pdforensics {__version__}"})}}}\n')
    return out


# ------------------------------------------------------------------ processes and threads


def _metadata(emit: _Writer, procs: dict[tuple[str, str], Instance]) -> None:
    for inst in procs.values():
        emit({"ph": "M", "name": "process_name", "pid": inst.index, "tid": 0, "args": {"name": inst.name}})
        emit(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": inst.index,
                "tid": 0,
                "args": {"sort_index": inst.index},
            }
        )
        for tid, name in THREADS.items():
            emit({"ph": "M", "name": "thread_name", "pid": inst.index, "tid": tid, "args": {"name": name}})
    emit(
        {
            "ph": "M",
            "name": "process_name",
            "pid": WINDOW_PID,
            "tid": 0,
            "args": {"name": "pdforensics window"},
        }
    )
    emit({"ph": "M", "name": "process_sort_index", "pid": WINDOW_PID, "tid": 0, "args": {"sort_index": 0}})
    emit({"ph": "M", "name": "thread_name", "pid": WINDOW_PID, "tid": 1, "args": {"name": "verdict"}})


def _pid(procs: dict[tuple[str, str], Instance], host: str | None, engine: str | None) -> int:
    inst = procs.get((host or "", engine or ""))
    return inst.index if inst else WINDOW_PID


def _pids(procs: dict[tuple[str, str], Instance]) -> dict[str, list]:
    """The instances' trace pids as SQL list parameters, for a `pids` table of (host, engine, pid)."""
    keys = list(procs)
    return {
        "hosts": [k[0] for k in keys],
        "engines": [k[1] for k in keys],
        "pids": [procs[k].index for k in keys],
    }


def _json_chunks(cur: duckdb.DuckDBPyConnection) -> Iterator[list[str]]:
    """A query's one column of JSON texts, a chunk of rows at a time (for _Writer.texts)."""
    while chunk := cur.fetchmany(_Writer.BATCH):
        yield [row[0] for row in chunk]


def _clean(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if v is not None}


# ------------------------------------------------------------------ engine tracks


def _incarnations(con: duckdb.DuckDBPyConnection, procs: dict) -> Iterator[dict]:
    if not has_relation(con, "incarnations"):
        return
    rows = dict_rows(
        con,
        """SELECT *, lead(start_t) OVER (PARTITION BY host, engine ORDER BY start_t) AS next_t
           FROM incarnations ORDER BY host, engine, start_t""",
    )
    for r in rows:
        if r["start_t"] is None:
            continue
        end = r.get("last_t") or r.get("stop_t") or r["start_t"]
        if r["next_t"] is not None:
            end = min(end, r["next_t"])  # complete slices on one thread must not overlap
        yield {
            "ph": "X", "cat": "incarnation", "name": f"incarnation {r['incarnation']}",
            "pid": _pid(procs, r["host"], r["engine"]), "tid": TID_INCARNATIONS,
            "ts": r["start_t"], "dur": max(end - r["start_t"], 0),
            "args": _clean({"identity": r.get("identity"), "started_by": r.get("started_by"),
                            "ready_t": r.get("ready_t"), "stop_t": r.get("stop_t")}),
        }  # fmt: skip


def _lifecycle(con: duckdb.DuckDBPyConnection, procs: dict) -> Iterator[dict]:
    names = ", ".join(f"'{e}'" for e in LIFECYCLE)
    rows = dict_rows(
        con,
        f"""SELECT e.host, e.engine, e.event, e.t_us, e.pid, e.tp_rank, e.timeout_s, e.count, l.message
            FROM {events_rel(con)} AS e JOIN lines AS l USING (line_id)
            WHERE e.event IN ({names}) AND e.t_us IS NOT NULL
            ORDER BY e.t_us""",
    )
    for r in rows:
        yield {
            "ph": "i", "s": "t", "cat": "lifecycle", "name": r["event"], "ts": r["t_us"],
            "pid": _pid(procs, r["host"], r["engine"]), "tid": TID_LIFECYCLE,
            "args": _clean({"pid": r["pid"], "tp_rank": r["tp_rank"], "timeout_s": r["timeout_s"],
                            "count": r["count"], "message": r["message"]}),
        }  # fmt: skip


def _counters(con: duckdb.DuckDBPyConnection, procs: dict) -> Iterator[list[str]]:
    """One counter track per gauge, engine instance and DP rank; duplicate TP ranks are skipped.
    Encoded by DuckDB (a dict per event cost a third of a 100k-line export's time)."""
    gauges = [
        f"SELECT host, engine, dp_rank, t_us, {i} AS k, '{label}' AS label, to_json({column}) AS value "
        f"FROM s WHERE engine = '{engine}' AND {column} IS NOT NULL"
        for engine, columns in COUNTERS.items()
        for i, (column, label) in enumerate(columns)
    ]
    cur = con.execute(
        f"""WITH s AS (
                SELECT *, greatest(inflight_req - coalesce(new_seq, 0), 0) AS floor,
                       min(coalesce(tp_rank, 0)) OVER (PARTITION BY host, engine, dp_rank) AS lowest_tp
                FROM {events_rel(con)}
                WHERE event IN ('prefill_stats', 'decode_stats') AND t_us IS NOT NULL
                QUALIFY coalesce(tp_rank, 0) = lowest_tp
            ),
            pids AS (SELECT unnest($hosts) AS host, unnest($engines) AS engine, unnest($pids) AS pid),
            g AS ({" UNION ALL ".join(gauges)})
            SELECT to_json({{ph: 'C', cat: 'gauge',
                             name: label || coalesce(' [DP' || g.dp_rank || ']', ''),
                             pid: coalesce(pids.pid, {WINDOW_PID}), ts: t_us, args: {{value: value}}}})::VARCHAR
            FROM g LEFT JOIN pids ON pids.host = coalesce(g.host, '') AND pids.engine = g.engine
            ORDER BY t_us, g.host, g.engine, g.dp_rank, k""",
        _pids(procs),
    )
    return _json_chunks(cur)


def _holes(con: duckdb.DuckDBPyConnection, procs: dict) -> Iterator[dict]:
    relation = "coverage" if has_relation(con, "coverage") else "holes"
    if not has_relation(con, relation):
        return
    rows = dict_rows(
        con, f"SELECT * FROM {relation} WHERE from_t IS NOT NULL AND to_t IS NOT NULL ORDER BY from_t"
    )
    for i, r in enumerate(rows):
        pid = _pid(procs, r.get("host"), r.get("engine"))
        common = {"cat": "hole", "name": f"hole: {r['kind']}", "pid": pid, "id": f"hole:{pid}:{i}"}
        args = _clean({k: r.get(k) for k in ("detail", "covered", "decisive", "suspects", "n")})
        yield {**common, "ph": "b", "ts": r["from_t"], "args": args}
        yield {**common, "ph": "e", "ts": max(r["to_t"], r["from_t"])}


# ------------------------------------------------------------------ requests


# Each request side as an async slice with its phases nested inside and its marks as instants, as
# JSON text built by DuckDB (a Python dict per event cost most of a large export's time).
# json_merge_patch onto {} drops the keys whose value is NULL, as _clean does.
REQUEST_EVENTS_SQL = """
WITH spans AS ({spans}),
pids AS (SELECT unnest($hosts) AS host, unnest($engines) AS engine, unnest($pids) AS pid),
sides AS (  -- a phase row is drawn on its side's host
    SELECT *, first_value(host) OVER (PARTITION BY req_ord, engine ORDER BY span_ord) AS side_host,
           count(*) FILTER (WHERE span_ord = 0) OVER (PARTITION BY req_ord) AS n_sides
    FROM spans
),
s AS (
    SELECT sides.*, coalesce(pids.pid, {window_pid}) AS pid
    FROM sides LEFT JOIN pids ON pids.host = coalesce(sides.side_host, '') AND pids.engine = sides.engine
),
e AS (
    SELECT *, pid || ':' || bootstrap_room AS async_id,
           name || CASE WHEN open THEN ' [open]' ELSE '' END AS shown
    FROM s
)
SELECT json_merge_patch('{{}}', to_json({{
    cat: 'request', pid: pid, tid: 0, id: async_id, ph: 'b', name: shown, ts: start_t,
    args: CASE WHEN span_ord = 0 THEN to_json({{
              bootstrap_room: bootstrap_room::VARCHAR, rid: rid, class: class, open: open,
              abort_race: abort_race, abort_race_outcome: abort_race_outcome, across_restart: across_restart,
              one_sided: one_sided, dwell_s: dwell_s, dwell_basis: dwell_basis, evidence_level: evidence_level,
              reason: reason, lost_reason: lost_reason, holder_at_end: holder_at_end}})
          ELSE to_json({{phase: phase, open: open}}) END,
    bind_id: CASE WHEN span_ord = 0 AND n_sides = 2 THEN lower(hex(bootstrap_room)) END,
    flow_out: CASE WHEN span_ord = 0 AND n_sides = 2 AND engine = 'prefill' THEN true END,
    flow_in: CASE WHEN span_ord = 0 AND n_sides = 2 AND engine = 'decode' THEN true END
}}))::VARCHAR, req_ord, side_ord, span_ord, 0 AS k
FROM e
UNION ALL
SELECT to_json({{cat: 'request', pid: pid, tid: 0, id: async_id, ph: 'e', name: shown, ts: end_t}})::VARCHAR,
       req_ord, side_ord, CASE WHEN span_ord = 0 THEN 999 ELSE span_ord END, 1 AS k
FROM e
UNION ALL
SELECT json_merge_patch('{{}}', to_json({{
    ph: 'i', s: 't', cat: CASE WHEN m.event = 'watchdog_fired' THEN 'watchdog' ELSE 'failure' END,
    name: m.event || CASE WHEN m.state IS NOT NULL THEN ' (' || m.state || ')' ELSE '' END,
    pid: pid, tid: CASE WHEN m.event = 'watchdog_fired' THEN {tid_watchdog} ELSE {tid_failures} END, ts: m.t_us,
    args: {{bootstrap_room: bootstrap_room::VARCHAR, reason: m.reason, dwell_s: m.dwell_s,
           ranks: CASE WHEN len(m.ranks) > 0 THEN m.ranks END, message: m.message}}
}}))::VARCHAR, req_ord, side_ord, 1000, 2 AS k
FROM (SELECT *, unnest(marks) AS m FROM e WHERE span_ord = 0)
ORDER BY req_ord, side_ord, k = 2, span_ord, k
"""


def _requests(con: duckdb.DuckDBPyConnection, procs: dict, window_end: int) -> Iterator[list[str]]:
    sql = REQUEST_EVENTS_SQL.format(
        spans=req.spans_sql(), window_pid=WINDOW_PID, tid_watchdog=TID_WATCHDOG, tid_failures=TID_FAILURES
    )
    cur = con.execute(sql, {"window_end": window_end, **_pids(procs)})
    return _json_chunks(cur)


# ------------------------------------------------------------------ the window


def _window(con: duckdb.DuckDBPyConnection, start: int | None, end: int) -> Iterator[dict]:
    if start is None:
        return
    args: dict[str, Any] = {}
    if has_relation(con, "verdict"):
        row = next(dict_rows(con, "SELECT * FROM verdict"), None)
        args = _clean(row or {})
    name = f"window: {args['verdict']}" if "verdict" in args else "window"
    yield {"ph": "X", "cat": "window", "name": name, "pid": WINDOW_PID, "tid": 1, "ts": start,
           "dur": max(end - start, 0), "args": args}  # fmt: skip
