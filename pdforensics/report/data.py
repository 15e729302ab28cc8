"""Queries behind the report: the classification views and tables → plain dicts and lists.

Every time is on the reference clock (`t_us`, see queries/views/02_clock.sql) in
UTC microseconds. The heavy views (`requests` among them) are read from the rows
`verdict.materialised` puts in their place (a kept judgement's, else computed once
for the verdict and every report part), so a dozen slices of `requests` do not redo
the classification.

Everything here is bounded by `Limits` so a 100,000-request window still makes a
small file; whatever is cut is said in `notes`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import duckdb

from pdforensics.report.redact import redact
from pdforensics.store import fetch_dicts

US = 1_000_000


@dataclass(frozen=True)
class Limits:
    gantt_lanes: int = 150  # requests drawn in the swimlane figure
    gantt_completed: int = 15  # completed requests among them, for contrast
    deadline_lanes: int = 60  # open requests whose watchdog deadline is drawn on the timeline
    table_requests: int = 4000  # rows of the requests table (every non-completed first)
    table_completed: int = 300  # completed requests in that table (a sample)
    table_rows: int = 5000  # any other table
    detail_bytes: int = 4_500_000  # JSON budget for per-request timelines and raw lines
    events_per_request: int = 120
    lines_per_request: int = 40
    line_chars: int = 3000
    gauge_points: int = 1500  # per series; above it, per-bucket max (and min for the inflight floor)
    markers: int = 1500  # per marker kind; above it, counts per bucket


# Class order of the swimlane and tables: what the operator must look at first.
CLASS_ORDER = [
    "silent_pin",
    "watchdog_fired",
    "undecided",
    "in_flight",
    "transfer_failed",
    "aborted",
    "lost",
    "completed",
]

# The inflight floor first: #inflight-req minus the batch's #new-seq (`pdf_floor`, the `floor` of
# the `inflight_gauge` view), the number the verdict reads; the raw gauges follow.
FLOOR = ("inflight_floor", "inflight floor (#inflight-req − #new-seq)")
PREFILL_GAUGES = [
    FLOOR,
    ("inflight_req", "raw #inflight-req"),  # counts the batch's new requests: not what the verdict reads
    ("bootstrap_req", "#bootstrap-req"),
    ("queue_req", "#queue-req"),
]
DECODE_GAUGES = [
    ("running_req", "#running-req"),
    ("transfer_req", "#transfer-req"),
    ("prealloc_req", "#prealloc-req"),
]
THROUGHPUT = ("gen_throughput", "gen throughput (token/s)")

REQUEST_COPY = "_rpt_requests"  # only when `requests` is not already a table (see open_ctx)


@dataclass
class Ctx:
    """What every query needs: the connection, the window on the reference clock, the limits."""

    con: duckdb.DuckDBPyConnection
    start_t: int
    end_t: int
    timeout_s: float
    grace_s: float
    limits: Limits
    show_prompts: bool = False
    notes: list[str] = field(default_factory=list)
    cut_lines: int = 0  # raw lines cut at limits.line_chars
    req: str = "requests"  # the relation the report reads the requests from
    host_window: tuple[int, int] | None = None  # `time_window`, read once (see _host_window)

    def rows(self, sql: str, params: list | None = None) -> list[dict[str, Any]]:
        return fetch_dicts(self.con, sql, params)


def _bucket_us(ctx: Ctx, points: int) -> int:
    """The width of the time buckets that draw the window in at most `points` points: whole seconds."""
    return max(US, math.ceil((ctx.end_t - ctx.start_t) / points / US) * US)


def open_ctx(
    con: duckdb.DuckDBPyConnection, limits: Limits, show_prompts: bool, fallback: tuple[int, int]
) -> Ctx:
    """Reads `settings` once and finds the rows of `requests` for the rest of the report.

    Inside `verdict.materialised` (as `build_model` calls it) `requests` is a temporary table, or
    a view of a kept judgement's table, and is read as it is; otherwise (its views installed as
    temporary ones, which it does not shadow) it is copied once, so a dozen slices do not redo the
    classification each.
    `fallback` is the window to draw when the data has none (no line in it at all).
    """
    s = fetch_dicts(con, "SELECT * FROM settings")[0]
    req = "requests"
    from pdforensics.verdict import is_shadowed

    if not is_shadowed(con, "requests"):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {REQUEST_COPY} AS SELECT * FROM requests")
        req = REQUEST_COPY
    con.execute("CREATE OR REPLACE TEMP TABLE _rpt_offsets AS SELECT * FROM host_offsets")
    start = s["start_t"] if s["start_t"] is not None else fallback[0]
    end = s["end_t"] if s["end_t"] is not None else max(fallback[1], start + US)
    return Ctx(
        con, int(start), int(end), float(s["timeout_s"]), float(s["grace_s"]), limits, show_prompts, req=req
    )


def close_ctx(ctx: Ctx) -> None:
    for name in (REQUEST_COPY, "_rpt_offsets"):
        ctx.con.execute(f"DROP TABLE IF EXISTS {name}")


def _class_rank() -> str:
    cases = " ".join(f"WHEN '{c}' THEN {i}" for i, c in enumerate(CLASS_ORDER))
    return f"CASE class {cases} ELSE {len(CLASS_ORDER)} END"


# ------------------------------------------------------------------ overview


def class_counts(ctx: Ctx) -> dict[str, int]:
    rows = ctx.rows(f"SELECT class, count(*) AS n FROM {ctx.req} GROUP BY class ORDER BY {_class_rank()}")
    return {r["class"]: int(r["n"]) for r in rows}


def _host_window(ctx: Ctx) -> tuple[int, int]:
    """The window on the hosts' own clocks (`time_window`: it reads the lines, so once per report)."""
    if ctx.host_window is None:
        r = ctx.rows("SELECT start_us, end_us FROM time_window")[0]
        if r["start_us"] is None or r["end_us"] is None:  # no line at all: an empty range
            ctx.host_window = (0, -1)
        else:
            ctx.host_window = (int(r["start_us"]), int(r["end_us"]))
    return ctx.host_window


# ------------------------------------------------------------------ gauges


def gauge_series(ctx: Ctx) -> list[dict[str, Any]]:
    """One series per engine host (and DP rank) and gauge, from the first stats-logging TP rank.

    TP ranks print the same batch line, so one rank per stream is kept. Above
    `limits.gauge_points` samples a series is cut into time buckets: max per
    bucket, and for the inflight gauge also the min (a pin is a floor that never
    returns to 0; the max alone would hide a drain).
    """
    lo, hi = _host_window(ctx)
    metrics = [m for m, _ in PREFILL_GAUGES + DECODE_GAUGES] + [THROUGHPUT[0]]
    cols = ", ".join(
        "pdf_floor(e.inflight_req, e.new_seq, e.entry) AS inflight_floor" if m == FLOOR[0] else m
        for m in metrics
    )
    ctx.con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _rpt_stats AS
        WITH s AS (
            SELECT coalesce(e.host, '') AS host, e.engine, coalesce(e.dp_rank, -1) AS dp,
                   coalesce(e.tp_rank, -1) AS tp, e.ts_us - coalesce(o.offset_us, 0) AS t_us, {cols}
            FROM events AS e LEFT JOIN _rpt_offsets AS o ON o.host = coalesce(e.host, '')
            WHERE e.event IN ('prefill_stats', 'decode_stats') AND e.ts_us BETWEEN ? AND ?
        )
        SELECT s.* FROM s
        JOIN (SELECT host, engine, dp, min(tp) AS tp FROM s GROUP BY ALL) AS m USING (host, engine, dp, tp)""",
        [lo, hi],
    )
    n_max = ctx.con.execute(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM _rpt_stats GROUP BY host, engine, dp)"
    ).fetchone()
    bucket_us = 0
    if n_max and n_max[0] > ctx.limits.gauge_points:
        bucket_us = _bucket_us(ctx, ctx.limits.gauge_points)
        ctx.notes.append(
            f"Gauges: up to {n_max[0]:,} batch lines per engine were cut into {bucket_us // US} s buckets "
            "(maximum per bucket; the inflight floor shows the minimum, since a pin is a floor that stays up)."
        )
    stats = _stats_rows(ctx, metrics, bucket_us)
    ctx.con.execute("DROP TABLE IF EXISTS _rpt_stats")
    return _series_from(stats, bucket_us > 0) + metric_series(ctx)


METRIC_INFLIGHT = ("metric_inflight", "inflight gauge (Prometheus)")


def metric_series(ctx: Ctx) -> list[dict[str, Any]]:
    """SGLang's Prometheus inflight gauge (the `metric_inflight` view) beside the lines' floor, one
    series per scrape target, labelled by its source and step: what a scrape read, which may be
    the last batch line's count (docs/prometheus.md). Above `limits.gauge_points` scrapes a series
    keeps each bucket's maximum (a held count is what the verdict reads from it)."""
    bucket = _bucket_us(ctx, ctx.limits.gauge_points)
    # a series of more than `gauge_points` scrapes: each bucket's first time and maximum value
    rows = ctx.rows(
        """WITH m AS (
            SELECT host, series, t_us, value, median(step_us) OVER w AS step_us, count(*) OVER w AS n,
                   CASE WHEN n > ? THEN (t_us - ?) // ? ELSE row_number() OVER w END AS point
            FROM metric_inflight WINDOW w AS (PARTITION BY series)
        )
        SELECT host, series, any_value(step_us) AS step_us, any_value(n) AS n, min(t_us) AS t_us,
               max(value) AS value
        FROM m GROUP BY host, series, point ORDER BY host, series, t_us""",
        [ctx.limits.gauge_points, ctx.start_t, bucket],
    )
    out: list[dict[str, Any]] = []
    for (host, _), group in itertools.groupby(rows, key=lambda r: (r["host"], r["series"])):
        part = list(group)
        step, cut = part[0]["step_us"], part[0]["n"] > ctx.limits.gauge_points
        every = f", every {step / US:.0f} s" if step else ""
        out.append({"engine": "prefill", "host": host or "?", "stream": f"{host or '?'} prefill",
                    "metric": METRIC_INFLIGHT[0], "label": f"{METRIC_INFLIGHT[1]}{every}",
                    "x_us": [r["t_us"] for r in part], "y": [r["value"] for r in part],
                    "agg": "max" if cut else None})  # fmt: skip
    most = max((r["n"] for r in rows), default=0)
    if most > ctx.limits.gauge_points:
        ctx.notes.append(
            f"Prometheus gauge: up to {most:,} scrapes per series were cut into {bucket // US} s buckets "
            "(maximum per bucket: a held count is what the verdict reads)."
        )
    return out


def _stats_rows(ctx: Ctx, metrics: list[str], bucket_us: int) -> list[dict[str, Any]]:
    if not bucket_us:
        return ctx.rows("SELECT * FROM _rpt_stats ORDER BY host, engine, dp, t_us")
    # per bucket the maximum, but the floor's minimum: a pin is a floor that never returns to 0
    aggs = ", ".join(f"{'min' if m == FLOOR[0] else 'max'}({m}) AS {m}" for m in metrics)
    return ctx.rows(
        f"""SELECT host, engine, dp, ? + ((t_us - ?) // ?) * ? + ? // 2 AS t_us, {aggs}
        FROM _rpt_stats GROUP BY ALL ORDER BY host, engine, dp, t_us""",
        [ctx.start_t, ctx.start_t, bucket_us, bucket_us, bucket_us],
    )


def _series_from(rows: list[dict[str, Any]], bucketed: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for (host, engine, dp), group in itertools.groupby(rows, key=lambda r: (r["host"], r["engine"], r["dp"])):
        part = list(group)
        stream = f"{host or '?'} {engine}" + (f" DP{dp}" if dp is not None and dp >= 0 else "")
        gauges = PREFILL_GAUGES if engine == "prefill" else [*DECODE_GAUGES, THROUGHPUT]
        x = [r["t_us"] for r in part]
        for metric, label in gauges:
            y = [r[metric] for r in part]
            if all(v is None for v in y):
                continue
            agg = ("min" if metric == FLOOR[0] else "max") if bucketed else None
            out.append({"engine": engine, "host": host or "?", "stream": stream, "metric": metric, "label": label,
                        "x_us": x, "y": y, "agg": agg})  # fmt: skip
    return out


def break_at_downtime(series: list[dict[str, Any]], restarts: list[dict[str, Any]]) -> None:
    """Ends each gauge line where its engine's process was gone (its last line → up again, or for
    good), in place: a step line would otherwise hold the last value flat through the downtime, a
    queue that looks full while nothing was running. The old process's draining lines are kept."""
    down: dict[tuple[str, str], list[int]] = {}  # (no sample lies inside a span: its process was gone)
    for r in restarts:
        start = r.get("gone_t") or r.get("stop_t")
        if start is not None:
            down.setdefault((r.get("host") or "?", r["engine"]), []).append(int(start))
    for s in series:
        for start in down.get((s["host"], s["engine"]), []):
            x, y = s["x_us"], s["y"]
            before = [i for i, t in enumerate(x) if t is not None and t <= start]
            if not before:
                continue
            i = before[-1]
            if i + 1 < len(x) and y[i + 1] is None:  # already broken (two spans at one point)
                continue
            # hold the last value to the moment the process was gone, then no line until it is back
            # (new lists: a stream's gauges share one list of times)
            s["x_us"] = [*x[: i + 1], start, start, *x[i + 1 :]]
            s["y"] = [*y[: i + 1], y[i], None, *y[i + 1 :]]


# ------------------------------------------------------------------ markers


def restarts(ctx: Ctx) -> list[dict[str, Any]]:
    return ctx.rows("SELECT * FROM engine_restarts ORDER BY stop_t")


LIFECYCLE = ("server_args", "server_ready", "unit_started", "sigterm", "graceful_exit", "unit_stopping",
             "unit_stopped", "unit_killed", "unit_failed", "engine_died")  # fmt: skip


def lifecycle_points(ctx: Ctx) -> list[dict[str, Any]]:
    """Engine starts, stops and crashes (systemd's lines and SGLang's own)."""
    cap = ctx.limits.markers
    rows = ctx.rows(
        f"""SELECT t_us, host, engine, event FROM evt
        WHERE engine IN ('prefill', 'decode') AND event IN {LIFECYCLE} ORDER BY t_us LIMIT ?""",
        [cap + 1],
    )
    if len(rows) > cap:
        ctx.notes.append(
            f"Timeline: the first {cap:,} engine start/stop/crash markers drawn; later ones are not."
        )
    return rows[:cap]


def holes(ctx: Ctx) -> list[dict[str, Any]]:
    """Every hole with what it means for the verdict (`coverage`: suspects overlapped, decisive or not)."""
    rows, _ = _capped(ctx, "SELECT * FROM coverage ORDER BY from_t, hole_id", "Coverage holes")
    return rows


def abort_storms(ctx: Ctx) -> list[dict[str, Any]]:
    return ctx.rows("SELECT * FROM abort_storms ORDER BY from_t")


def point_markers(ctx: Ctx, kind: str) -> dict[str, Any]:
    """Times (and rooms) of one marker kind; counts per bucket when there are too many to draw."""
    sql = {
        "watchdog": "SELECT fired_t AS t_us, room, state AS what FROM watchdog_firings",
        "abort": f"SELECT aborted_t AS t_us, room, class AS what FROM {ctx.req} WHERE aborted_t IS NOT NULL",
        "failure": f"""SELECT failed_t AS t_us, room, reason AS what FROM {ctx.req}
                       WHERE failed_t IS NOT NULL AND class = 'transfer_failed'""",
    }[kind]
    n = ctx.con.execute(f"SELECT count(*) FROM ({sql})").fetchone()
    total = int(n[0]) if n else 0
    if total <= ctx.limits.markers:
        rows = ctx.rows(f"{sql} ORDER BY 1")
        return {"kind": kind, "total": total, "points": rows, "buckets": None}
    bucket = _bucket_us(ctx, ctx.limits.markers)
    rows = ctx.rows(
        f"SELECT ? + ((t_us - ?) // ?) * ? + ? // 2 AS t_us, count(*) AS n FROM ({sql}) GROUP BY 1 ORDER BY 1",
        [ctx.start_t, ctx.start_t, bucket, bucket, bucket],
    )
    ctx.notes.append(f"Markers: {total:,} {kind} markers drawn as counts per {bucket // US} s.")
    return {"kind": kind, "total": total, "points": None, "buckets": rows, "bucket_s": bucket / US}


def open_deadlines(ctx: Ctx) -> tuple[list[dict[str, Any]], int]:
    """Requests still open at the window end (or pinned), with their watchdog deadline."""
    where = "(holder_at_end IS NOT NULL OR class IN ('silent_pin', 'undecided', 'in_flight')) AND watchdog_deadline_t IS NOT NULL"
    n = ctx.con.execute(f"SELECT count(*) FROM {ctx.req} WHERE {where}").fetchone()
    total = int(n[0]) if n else 0
    step = max(1, math.ceil(total / ctx.limits.deadline_lanes))
    # evenly over time, so a long window's early and late pins both show
    rows = ctx.rows(
        f"""SELECT room, class, prefill_rid, pinned_from_t, watchdog_deadline_t, last_t, holder_at_end
        FROM {ctx.req} WHERE {where}
        QUALIFY (row_number() OVER (ORDER BY watchdog_deadline_t, room) - 1) % ? = 0
        ORDER BY watchdog_deadline_t, room""",
        [step],
    )
    if total > len(rows):
        ctx.notes.append(
            f"Timeline: watchdog deadlines drawn for {len(rows):,} of {total:,} open requests "
            f"(every {step}th by deadline); the Pins and Requests tables list them all."
        )
    return rows, total


# ------------------------------------------------------------------ swimlanes


# A request's identity, to break ties: rooms collide across deployments (and a hash of equal rooms
# is equal), and without it which of two tied requests a LIMIT keeps, and in which order the parts
# of a UNION ALL come back, is up to DuckDB's execution (two ways of fetching the same query once
# gave two different samples of the same data).
_REQUEST_IDENTITY = "bootstrap_room, first_t, prefill_rid, decode_rid, p_host, d_host"


def _open_then_sample(ctx: Ctx, worst_first: str, take: int, completed: int) -> list[dict[str, Any]]:
    """Up to `take` requests that did not complete, in `worst_first` order, then a sample of
    `completed` completed ones (by a hash of the room): one total order, the same on every run."""
    open_order = f"{worst_first}, {_REQUEST_IDENTITY}"
    sample_order = f"hash(bootstrap_room), {_REQUEST_IDENTITY}"
    return ctx.rows(
        f"""WITH open AS (SELECT * FROM {ctx.req} WHERE class <> 'completed' ORDER BY {open_order} LIMIT ?),
             sample AS (SELECT * FROM {ctx.req} WHERE class = 'completed' ORDER BY {sample_order} LIMIT ?)
        SELECT * EXCLUDE (_part, _pos) FROM (
            SELECT *, 0 AS _part, row_number() OVER (ORDER BY {open_order}) AS _pos FROM open
            UNION ALL
            SELECT *, 1 AS _part, row_number() OVER (ORDER BY {sample_order}) AS _pos FROM sample
        ) ORDER BY _part, _pos""",
        [take, completed],
    )


def gantt_requests(ctx: Ctx) -> tuple[list[dict[str, Any]], int]:
    """Every request that is not completed (up to the lane cap, worst first) and a few completed ones."""
    lim = ctx.limits
    n = ctx.con.execute(f"SELECT count(*) FROM {ctx.req} WHERE class <> 'completed'").fetchone()
    not_done = int(n[0]) if n else 0
    take = min(not_done, lim.gantt_lanes - lim.gantt_completed)
    rows = _open_then_sample(ctx, f"{_class_rank()}, abort_race DESC, first_t", take, lim.gantt_completed)
    if not_done > take:
        ctx.notes.append(
            f"Swimlanes: {take:,} of {not_done:,} requests that did not complete are drawn "
            "(silent pins, watchdog firings and open requests first); the Requests table lists more."
        )
    return rows, not_done


def spans(r: dict[str, Any], end_t: int) -> list[dict[str, Any]]:
    """A request's phases per engine as [start, end) spans; an open span runs to its last evidence."""
    out: list[dict[str, Any]] = []
    open_until = r.get("last_t") or end_t
    p_start = r.get("prefill_received_t")
    p_end = r.get("prefill_end_t") or r.get("p_gone_t")
    inflight = r.get("inflight_entry_t") or r.get("pinned_from_t")
    p_open = p_end is None and (r.get("holder_at_end") == "prefill" or r["class"] == "silent_pin")
    if p_start is not None:
        split = inflight if inflight and inflight > p_start else None
        first_end = split or p_end or (open_until if p_open else r.get("kv_done_t"))
        if first_end:
            name = "prefill: bootstrap+queue+forward" if split else "prefill"
            out.append(_span("prefill", name, p_start, first_end, p_open and not split, "Receive: line"))
    if inflight is not None:
        stop = p_end or (
            open_until if p_open or r["class"] in ("silent_pin", "undecided", "in_flight") else None
        )
        if stop:
            basis = "time stats" if r.get("inflight_entry_t") else "surely past the waiting queue from here"
            out.append(
                _span("prefill", "prefill: inflight (KV transfer)", inflight, stop, p_end is None, basis)
            )
    d_start = r.get("decode_received_t")
    if d_start is not None:
        d_end = r.get("decode_end_t") or r.get("d_gone_t")
        d_open = d_end is None and r.get("holder_at_end") == "decode"
        stop = d_end or (open_until if d_open else r.get("last_t"))
        if stop:
            out.append(_span("decode", "decode", d_start, stop, d_end is None, "Receive: → Finish:/failure"))
    return out


def _span(engine: str, phase: str, start: int, end: int, is_open: bool, basis: str) -> dict[str, Any]:
    return {"engine": engine, "phase": phase, "start_us": int(start), "end_us": int(max(end, start)),
            "open": bool(is_open), "basis": basis}  # fmt: skip


# Point phases of a request (the columns of queries/views/09_phases.sql's request_phases).
# `watchdog_deadline_t` is pinned_from + timeout + grace: the "deadline + grace" mark; the watchdog
# deadline itself (pinned_from + timeout) is drawn `grace` before it (see `points`).
DEADLINE = "watchdog deadline"
DEADLINE_GRACE = "deadline + grace"
POINTS = [
    ("watchdog_deadline_t", DEADLINE_GRACE, "prefill"),
    ("watchdog_fired_t", "watchdog fired", "prefill"),
    ("kv_done_t", "KV sent (prefill Finish)", "prefill"),
    ("failed_t", "failed", None),
    ("aborted_t", "aborted", None),
    ("decode_finished_t", "decode finished", "decode"),
    ("p_gone_t", "prefill process gone", "prefill"),
    ("d_gone_t", "decode process gone", "decode"),
]


def points(r: dict[str, Any], grace_s: float) -> list[dict[str, Any]]:
    """A request's instants worth a marker; failures/aborts sit on the engine that logged them first."""
    out = []
    if r.get("watchdog_deadline_t") is not None:
        out.append(
            {"what": DEADLINE, "engine": "prefill", "t_us": int(r["watchdog_deadline_t"] - grace_s * US)}
        )
    for key, label, engine in POINTS:
        t = r.get(key)
        if t is None:
            continue
        if engine is None:  # the side whose failure line came first
            engine = "prefill" if r.get("p_fail_ranks") or r.get("prefill_received_t") else "decode"
            if r.get("d_fail_ranks") and not r.get("p_fail_ranks"):
                engine = "decode"
        out.append({"what": label, "engine": engine, "t_us": int(t)})
    return out


# ------------------------------------------------------------------ tables


def table(tid: str, title: str, columns: list[tuple[str, str, str]], rows: list[dict[str, Any]],
          room: str | None = "room", total: int | None = None, description: str = "") -> dict[str, Any]:  # fmt: skip
    """A table for the page: columns are (key, label, type); rows become lists in column order."""
    return {
        "id": tid, "title": title, "description": description, "room": room, "total": total,
        "columns": [{"key": k, "label": label, "type": t} for k, label, t in columns],
        "rows": [[_plain(r.get(k)) for k, _, _ in columns] for r in rows],
    }  # fmt: skip


def _plain(v: Any) -> Any:
    """JSON-safe cell: big ints (rooms) as text, NaN as null, lists as lists."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**53:
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def _capped(
    ctx: Ctx, sql: str, title: str, params: list | None = None, cap: int | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The first `limits.table_rows` (or `cap`) rows of `sql` and how many it has, from one run of
    the query (its rows kept in DuckDB, which may have a million of them); a cut is said in the notes."""
    cap = ctx.limits.table_rows if cap is None else cap
    ctx.con.execute(f"CREATE OR REPLACE TEMP TABLE _rpt_capped AS {sql}", params or [])
    try:
        n = ctx.con.execute("SELECT count(*) FROM _rpt_capped").fetchone()
        total = int(n[0]) if n else 0
        # rowid is the insertion order, which is the query's ORDER BY
        rows = ctx.rows("SELECT * FROM _rpt_capped ORDER BY rowid LIMIT ?", [cap])
    finally:
        ctx.con.execute("DROP TABLE IF EXISTS _rpt_capped")
    if total > cap:
        ctx.notes.append(
            f"{title} table: the first {cap:,} of {total:,} rows embedded; `pdforensics sql` lists them all."
        )
    return rows, total


def _flags(r: dict[str, Any]) -> str:
    flags = [f for f in ("abort_race", "across_restart", "one_sided") if r.get(f)]
    return ", ".join(flags)


def pins_table(ctx: Ctx) -> dict[str, Any]:
    """Every pin (`pins` view): silent pins, watchdog releases, undecided requests, anonymous gauge pins."""
    rows, total = _capped(
        ctx,
        """SELECT * FROM pins ORDER BY CASE WHEN class = 'silent_pin' OR kind = 'anonymous' THEN 0
               WHEN class = 'watchdog_fired' THEN 2 ELSE 1 END, dwell_s DESC NULLS LAST""",
        "Pins",
    )
    for r in rows:
        r["flags"] = _flags(r)
    cols = [("room", "bootstrap_room", "text"), ("kind", "kind", "text"), ("class", "class", "class"),
            ("outcome", "outcome", "wrap"), ("n", "requests", "num"), ("host", "prefill host", "text"),
            ("since_t", "pinned since", "time"), ("dwell_s", "dwell", "dur"), ("dwell_basis", "dwell basis", "text"),
            ("flags", "flags", "text"), ("prefill_rid", "prefill rid", "text"), ("decode_rid", "decode rid", "text")]  # fmt: skip
    return table("pins", "Pins", cols, rows, total=total,
                 description="Requests held in the prefill inflight queue past the timeout: silent (no watchdog "
                 "line), released by the watchdog, or undecided; and anonymous pins seen only in the "
                 "#inflight-req floor.")  # fmt: skip


def gauge_floor_table(ctx: Ctx) -> dict[str, Any]:
    rows = ctx.rows("SELECT * FROM host_gauge ORDER BY host, incarnation")
    cols = [("host", "prefill host", "text"), ("incarnation", "incarnation", "num"),
            ("pinned_floor", "pinned floor (anonymous pins)", "num"), ("pinned_since", "pinned since", "time"),
            ("open_floor", "open floor (younger)", "num"), ("last_floor", "last floor", "num"),
            ("last_empty_t", "last seen empty", "time"), ("peak_floor", "peak floor", "num"),
            ("samples", "batch lines", "num")]  # fmt: skip
    return table("floors", "Inflight gauge floors", cols, rows, room=None,
                 description="#inflight-req minus the batch's #new-seq: a floor that never returns to 0 for "
                 "longer than the timeout is a pin even without per-request lines (L0).")  # fmt: skip


def firings_table(ctx: Ctx) -> dict[str, Any]:
    rows, total = _capped(ctx, "SELECT * FROM watchdog_firings ORDER BY fired_t", "Watchdog firings")
    cols = [("room", "bootstrap_room", "text"), ("rid", "rid", "text"), ("host", "host", "text"),
            ("fired_t", "fired at", "time"), ("dwell_s", "dwell", "dur"), ("state", "state", "text"),
            ("timeout_s", "timeout (s)", "num"), ("ranks", "TP ranks", "list"), ("all_ranks", "all ranks", "bool"),
            ("same_second", "same second", "bool"), ("late", "late", "bool"),
            ("backpressure", "decode saturated", "bool"), ("decode_token_usage", "decode token usage", "num"),
            ("decode_prealloc_req", "decode #prealloc-req", "num"),
            ("decode_transfer_req", "decode #transfer-req", "num")]  # fmt: skip
    return table("firings", "Watchdog firings", cols, rows, total=total,
                 description="One row per request the watchdog force-failed; every TP rank should fire in the "
                 "same second. Decode saturated: the decode's load at the firing (token usage >= 0.95, or "
                 "prealloc + transfer queues of 4 or more not shrinking): likely backpressure, not a dead peer.")  # fmt: skip


def abort_races_table(ctx: Ctx) -> dict[str, Any]:
    rows, total = _capped(ctx, "SELECT * FROM abort_races ORDER BY aborted_t", "Abort races")
    cols = [("room", "bootstrap_room", "text"), ("prefill_rid", "prefill rid", "text"),
            ("decode_rid", "decode rid", "text"), ("class", "class", "class"), ("outcome", "outcome", "text"),
            ("aborted_t", "aborted at", "time"), ("prefill_end_t", "prefill released at", "time"),
            ("dwell_s", "dwell", "dur"), ("evidence", "evidence", "wrap")]  # fmt: skip
    return table("abort_races", "Abort races", cols, rows, total=total,
                 description="An abort landed while the prefill side was in the inflight queue: released, "
                 "or left pinned.")  # fmt: skip


def storms_table(ctx: Ctx, storms: list[dict[str, Any]]) -> dict[str, Any]:
    cols = [("from_t", "from", "time"), ("to_t", "to", "time"), ("duration_s", "duration", "dur"),
            ("aborts", "aborts", "num"), ("released_races", "released races", "num"),
            ("open_races", "open races", "num"), ("pinned", "pinned", "num"),
            ("peak_inflight", "peak #inflight-req", "num"), ("drained_t", "floor drained at", "time"),
            ("decode_generating_t", "decode generating at", "time"), ("judgement", "judgement", "wrap")]  # fmt: skip
    return table("storms", "Abort storms", cols, storms, room=None,
                 description="Many aborts within seconds: did the inflight gauge drain back, and did decode "
                 "keep generating?")  # fmt: skip


def failures_table(ctx: Ctx) -> dict[str, Any]:
    # Ids and numbers vary per line; the reason's words group them (the chain of
    # queries/saved/failures_by_reason.sql: ids become <rid>/<room>/<addr>, numbers N). The rows with a
    # reason_kind are exactly pdf_room_lines(true), room_events' rare lines: reading those alone
    # skips the millions of Receive/Finish lines (~0.5 s at 1M requests).
    rows, total = _capped(
        ctx,
        r"""SELECT engine, event, reason_kind,
               regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
            coalesce(reason, '(no reason)'),
            '''[^'']*''', '''…''', 'g'),
            '\b0x[0-9a-fA-F]+\b', '<hex>', 'g'),
            '\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b', '<addr>', 'g'),
            '\b\d{8,}\b', '<room>', 'g'),
            '\b[0-9a-fA-F]{8,}\b', '<rid>', 'g'),
            '\d+(\.\d+)?', 'N', 'g') AS reason,
               count(*) AS lines, count(DISTINCT bootstrap_room) AS requests,
               min(t_us) AS first_t, max(t_us) AS last_t,
               min(bootstrap_room)::VARCHAR AS room
        FROM pdf_room_lines(true) WHERE reason_kind IS NOT NULL
        GROUP BY ALL ORDER BY requests DESC, lines DESC, engine, event, reason""",
        "Failures by reason",
    )
    cols = [("reason", "reason (ids as <rid>/<room>, numbers as N)", "wrap"), ("reason_kind", "kind", "text"),
            ("engine", "engine", "text"), ("event", "event", "text"), ("requests", "requests", "num"),
            ("lines", "lines", "num"), ("first_t", "first", "time"), ("last_t", "last", "time"),
            ("room", "example room", "text")]  # fmt: skip
    return table("failures", "Failures by reason", cols, rows, total=total,
                 description="Failure and abort lines grouped by reason; click a row for an example request.")  # fmt: skip


def holes_table(ctx: Ctx, rows: list[dict[str, Any]]) -> dict[str, Any]:
    for r in rows:
        r["duration_s"] = (r["to_t"] - r["from_t"]) / US if r.get("to_t") and r.get("from_t") else None
    cols = [("hole_id", "#", "num"), ("kind", "kind", "text"), ("host", "host", "text"),
            ("engine", "engine", "text"), ("from_t", "from", "time"), ("to_t", "to", "time"),
            ("duration_s", "length", "dur"), ("n", "lines", "num"), ("covered", "covered later", "bool"),
            ("suspects", "suspects overlapped", "num"), ("decisive", "makes it inconclusive", "bool"),
            ("detail", "detail", "wrap"), ("suspect_rooms", "suspect rooms", "list")]  # fmt: skip
    return table("holes", "Coverage holes", cols, rows, room=None,
                 description="Stretches where lines may be missing or unreadable. A hole is covered when prefill "
                 "evidence exists a full timeout + grace after it; it decides the verdict (inconclusive) "
                 "when it overlaps a request that might be stuck and nothing covers it.")  # fmt: skip


def restarts_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    cols = [("host", "host", "text"), ("engine", "engine", "text"), ("kind", "kind", "text"),
            ("stop_t", "stopped", "time"), ("gone_t", "last line of old process", "time"),
            ("up_t", "up again", "time"), ("how", "how", "wrap")]  # fmt: skip
    return table("restarts", "Engine restarts", cols, rows, room=None)


def instances_table(verdict: dict[str, Any]) -> dict[str, Any] | None:
    """A fleet: one compact row per prefill instance, worst first (the verdict's `instances`); a row
    expands to its reasons and its requests (`expand`, in row order; the requests come from the
    requests table's rows, `drill`: its `p_host` column). None for a single prefill."""
    instances = verdict.get("instances") or []
    if len(instances) < 2:
        return None
    rows, expand = [], []
    for i in instances:
        wd, counts = i["watchdog"], i["counts"]
        rows.append({
            "host": i["host"] or "?", "verdict": i["verdict"],
            "deployed": {True: "yes", False: "no"}.get(wd["deployed"], "unknown"),
            "timeout_s": wd["timeout_s"], "firings": wd["firings"],
            "recovery": wd["recovery"], **{k: counts.get(k, 0) for k in _INSTANCE_COUNTS},
        })  # fmt: skip
        # long text (reasons, where the timeout came from) wraps: it would make every row 5 lines tall
        expand.append({"reasons": i["reasons"] or [], "timeout_source": wd["timeout_source"]})
    cols = [("host", "prefill host", "text"), ("verdict", "verdict", "verdict"), ("deployed", "watchdog", "text"),
            ("timeout_s", "timeout s", "num"), ("firings", "firings", "num"), ("recovery", "recovery", "text"),
            *((k, k.replace("_", " "), "num") for k in _INSTANCE_COUNTS)]  # fmt: skip
    spec = table("instances", "Prefill instances", cols, rows, room=None,
                 description="Each prefill instance judged on its own lines and requests, worst first; the "
                 "window's verdict is the worst of them. Click a row for its reasons and requests.")  # fmt: skip
    spec["expand"] = expand
    spec["drill"] = {"table": "requests", "key": "host", "column": "p_host"}
    return spec


def fleet_view(verdict: dict[str, Any], gauges: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The instances the timeline can show one at a time, and which it shows first: the worst
    prefill, and the decode most of the requests that did not complete went to (most of its own
    first). None when no engine has gauges from more than one host (nothing is drawn over another)."""
    hosts: dict[str, list[str]] = {"prefill": [], "decode": []}
    for s in gauges:  # a server that is not PD-disaggregated (`unified`) has neither side
        side = hosts.get(s["engine"])
        if side is not None and s["host"] not in side:
            side.append(s["host"])
    if max(len(h) for h in hosts.values()) < 2:
        return None
    order = [i["host"] or "?" for i in verdict.get("instances") or []]
    hosts["prefill"].sort(key=lambda h: (order.index(h) if h in order else len(order), h))
    hosts["decode"].sort()
    worst = hosts["prefill"][0] if hosts["prefill"] else None
    reqs = verdict.get("requests") or []
    mine = [r for r in reqs if r.get("prefill_host") == worst] or reqs
    votes = [r["decode_host"] for r in mine if r.get("decode_host") in hosts["decode"]]
    decode = max(dict.fromkeys(votes), key=votes.count) if votes else (hosts["decode"] or [None])[0]
    verdicts = {i["host"] or "?": i["verdict"] for i in verdict.get("instances") or []}
    return {"hosts": hosts, "default": {"prefill": worst, "decode": decode}, "verdicts": verdicts}


_INSTANCE_COUNTS = ("silent_pin", "undecided", "watchdog_fired", "anonymous_pins", "completed", "requests")


def requests_table(ctx: Ctx) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lim = ctx.limits
    n = ctx.con.execute(f"SELECT count(*) FROM {ctx.req}").fetchone()
    total = int(n[0]) if n else 0
    rows = _open_then_sample(ctx, f"{_class_rank()}, first_t", lim.table_requests, lim.table_completed)
    for r in rows:
        r["flags"] = _flags(r)
    if total > len(rows):
        ctx.notes.append(
            f"Requests table: {len(rows):,} of {total:,} requests embedded (every request that did not "
            f"complete, up to {lim.table_requests:,}, and a sample of {lim.table_completed:,} completed ones); "
            "`pdforensics sql` lists them all."
        )
    cols = [("room", "bootstrap_room", "text"), ("class", "class", "class"), ("flags", "flags", "text"),
            ("prefill_rid", "prefill rid", "text"), ("decode_rid", "decode rid", "text"),
            ("p_host", "prefill host", "text"), ("d_host", "decode host", "text"),
            ("first_t", "first seen", "time"), ("last_t", "last seen", "time"), ("dwell_s", "dwell", "dur"),
            ("evidence_level", "evidence", "text"), ("undecided_reason", "undecided because", "text"),
            ("reason", "reason", "wrap")]  # fmt: skip
    return table("requests", "All requests", cols, rows, total=total), rows


def units_table(ctx: Ctx) -> dict[str, Any]:
    lo, hi = _host_window(ctx)
    rows = ctx.rows(
        """SELECT coalesce(host, '') AS host, coalesce(unit, '') AS unit, engine, count(*) AS lines,
               count(event) AS recognised, count(parse_error) AS parse_errors,
               count(*) FILTER (WHERE event IS NULL AND parse_error IS NULL AND cont_of IS NULL) AS unrecognised,
               count(cont_of) AS continuation, min(ts_us) AS first_us, max(ts_us) AS last_us
        FROM lines WHERE ts_us BETWEEN ? AND ? OR ts_us IS NULL
        GROUP BY ALL ORDER BY host, unit""",
        [lo, hi],
    )
    cols = [("host", "host", "text"), ("unit", "unit", "text"), ("engine", "engine", "text"),
            ("lines", "lines ingested", "num"), ("recognised", "recognised", "num"),
            ("parse_errors", "recognised, failed to parse", "num"), ("unrecognised", "not SGLang's", "num"),
            ("continuation", "continuation lines", "num"), ("first_us", "first line", "time"),
            ("last_us", "last line", "time")]  # fmt: skip
    return table("units", "Lines per host and unit", cols, rows, room=None,
                 description="Times on each host's own clock. Unrecognised lines are kept and counted; they "
                 "are not parse failures.")  # fmt: skip


def rejects_table(ctx: Ctx) -> dict[str, Any]:
    rows, total = _capped(
        ctx,
        """SELECT source, reason, count(*) AS n, min(position) AS position, min(sample) AS sample
        FROM rejects GROUP BY ALL ORDER BY n DESC, source, reason""",
        "Rejected input",
        cap=min(500, ctx.limits.table_rows),  # a reject kind per row, each with its sample
    )
    cols = [("source", "source", "text"), ("reason", "reason", "text"), ("n", "rejected", "num"),
            ("position", "first position", "text"), ("sample", "sample", "wrap")]  # fmt: skip
    return table("rejects", "Rejected input", cols, rows, room=None, total=total,
                 description="Input that could not be read as a log record at all, per source (every ingest run; a rejected record has no host or unit).")  # fmt: skip


# ------------------------------------------------------------------ request details


FACTS = [
    ("class", "class"), ("prefill_rid", "prefill rid"), ("decode_rid", "decode rid"), ("p_host", "prefill host"),
    ("d_host", "decode host"), ("evidence_level", "evidence"), ("dwell_s", "dwell (s)"), ("dwell_basis", "dwell basis"),
    ("prefill_status", "prefill status"), ("holder_at_end", "held at the window end by"),
    ("undecided_reason", "undecided because"), ("lost_reason", "lost because"),
    ("abort_race_outcome", "abort race"), ("abort_evidence", "abort evidence"), ("wd_state", "watchdog state"),
    ("wd_ranks", "watchdog ranks"), ("reason", "reason"),
]  # fmt: skip


def request_details(ctx: Ctx, ordered: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    """Timeline, facts and raw lines for requests in `ordered` until the byte budget is spent."""
    lim = ctx.limits
    rooms = list(dict.fromkeys(str(r["room"]) for r in ordered))
    events = _room_events(ctx, rooms)
    lines = _room_lines(ctx, events)
    out: dict[str, Any] = {}
    spent = 0
    for r in ordered:
        room = str(r["room"])
        if room in out:
            continue
        evs = events.get(room, [])
        lns = lines.get(room, [])
        detail = {
            "why": _why(r),
            "facts": _facts(r),
            "phases": spans(r, ctx.end_t),
            "points": points(r, ctx.grace_s),
            "events": evs[: lim.events_per_request],
            "lines": lns[: lim.lines_per_request],
            "lines_total": max(len(lns), len(evs)),  # lines were fetched for the first events only
            "deadline_us": r.get("watchdog_deadline_t")
            if r["class"] in ("silent_pin", "undecided", "in_flight")
            else None,
        }
        size = _approx_size(detail)
        if spent + size > lim.detail_bytes:
            break
        spent += size
        out[room] = detail
    return out, spent


def _why(r: dict[str, Any]) -> list[str]:
    """Why the request got its class, in the verdict module's words."""
    from pdforensics import verdict

    return [str(x) for x in verdict.evidence_text(r)]


def _facts(r: dict[str, Any]) -> list[list[Any]]:
    facts = []
    flags = _flags(r)
    if flags:
        facts.append(["flags", flags])
    for key, label in FACTS:
        v = r.get(key)
        if v is None or v == [] or v is False:
            continue
        if isinstance(v, list):
            v = ", ".join(map(str, v))
        elif isinstance(v, float):
            v = round(v, 3)
        facts.append([label, _plain(v)])
    return facts


def _approx_size(obj: Any) -> int:
    import json

    return len(json.dumps(obj, default=str))


def _room_events(ctx: Ctx, rooms: list[str]) -> dict[str, list[dict[str, Any]]]:
    if not rooms:
        return {}
    # joined on the number, not its text: a filter on the column itself reaches the events scan
    rows = ctx.rows(
        """SELECT e.bootstrap_room::VARCHAR AS room, e.t_us, e.engine, e.host, e.tp_rank, e.event,
               e.state, e.reason, e.line_id
        FROM room_events AS e
        WHERE e.bootstrap_room IN (SELECT unnest(?::UBIGINT[]))
        ORDER BY e.bootstrap_room, e.t_us, e.line_id""",
        [[int(r) for r in rooms]],
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r.pop("room"), []).append(r)
    return out


def _room_lines(ctx: Ctx, events: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The raw lines behind each room's events (and their continuation lines), redacted and capped."""
    pairs = [
        (room, e["line_id"]) for room, evs in events.items() for e in evs[: ctx.limits.lines_per_request]
    ]
    if not pairs:
        return {}
    rows = ctx.rows(
        """SELECT x.room, l.line_id, l.ts_us, l.host, l.unit, l.engine, l.message,
               l.ts_us - coalesce(o.offset_us, 0) AS t_us
        FROM (SELECT unnest(?::VARCHAR[]) AS room, unnest(?::BIGINT[]) AS line_id) AS x
        JOIN (SELECT *, line_id AS head FROM lines
              UNION ALL BY NAME
              SELECT *, cont_of AS head FROM lines WHERE cont_of IS NOT NULL) AS l ON l.head = x.line_id
        LEFT JOIN _rpt_offsets AS o ON o.host = coalesce(l.host, '')
        ORDER BY x.room, l.ts_us, l.line_id""",
        [[p[0] for p in pairs], [p[1] for p in pairs]],
    )
    out: dict[str, list[dict[str, Any]]] = {}
    cap = ctx.limits.line_chars
    for r in rows:
        msg = r["message"] or ""
        if not ctx.show_prompts:
            msg = redact(msg)
        if len(msg) > cap:
            ctx.cut_lines += 1
            msg = msg[:cap] + f" … [{len(msg) - cap:,} more chars not shown]"
        room = r.pop("room")
        r["message"] = msg
        out.setdefault(room, []).append(r)
    return out
