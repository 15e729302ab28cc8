"""Each request as spans: one per engine side, with its phases as children.

Both trace exporters (Perfetto, OTLP) draw requests from here, so they agree. The
`requests` and `request_phases` views give the times (reference clock, `t_us`); a
side with no end in the logs is closed at the window end and marked open: exactly
the span SGLang's own tracing never exports, because it never ends.

Phases within a side are made sequential and clipped to the side, so they always
nest: a child never outlives its parent, and siblings never overlap.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb

from pdforensics.exporters.common import dict_rows, has_relation

# A phase marker starts the named stretch on its side; terminal markers end the side.
PHASE_LABELS = {
    "received": "queued (bootstrap, waiting, forward)",
    "bootstrap_done": "waiting and forward",
    "inflight_entry": "inflight (KV transfer)",
    "pinned_from": "held past the waiting queue",
    "watchdog_deadline": "past the watchdog deadline",
}
DECODE_LABELS = {"received": "prealloc, transfer, decode"}

# Failure-like events worth a mark on the request (one per engine, event and reason: TP ranks merge).
MARK_SQL = """
    SELECT bootstrap_room, list(struct_pack(engine, host, event, reason, state, dwell_s, t_us, ranks, message)
                                ORDER BY t_us) AS marks
    FROM (
        SELECT e.bootstrap_room, e.engine, e.host, e.event, e.reason, min(e.state) AS state,
               max(e.dwell_s) AS dwell_s, min(e.t_us) AS t_us,
               list_sort(list(DISTINCT coalesce(e.rank, e.tp_rank)) FILTER (
                   WHERE coalesce(e.rank, e.tp_rank) IS NOT NULL)) AS ranks,
               arg_min(l.message, e.t_us) AS message
        FROM room_events AS e JOIN lines AS l USING (line_id)
        WHERE e.reason_kind IS NOT NULL OR e.event = 'watchdog_fired'
        GROUP BY ALL
    )
    GROUP BY bootstrap_room
"""


@dataclass
class Span:
    name: str
    start: int
    end: int
    open: bool = False
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Side:
    """One engine's part of a request."""

    engine: str
    host: str
    rid: str | None
    span: Span
    phases: list[Span]
    marks: list[dict[str, Any]]


@dataclass
class Request:
    room: int
    row: dict[str, Any]
    sides: list[Side]

    @property
    def start(self) -> int:
        return min(s.span.start for s in self.sides)

    @property
    def end(self) -> int:
        return max(s.span.end for s in self.sides)

    @property
    def open(self) -> bool:
        return any(s.span.open for s in self.sides)


def available(con: duckdb.DuckDBPyConnection) -> bool:
    return has_relation(con, "requests") and has_relation(con, "request_phases")


# The columns of `requests` the spans use (the others stay in the database: fetching 48 columns
# per request into Python would cost more than building the spans).
REQUEST_COLUMNS = (
    "bootstrap_room", "class", "prefill_rid", "decode_rid", "p_host", "d_host", "first_t",
    "prefill_received_t", "decode_received_t", "prefill_end_t", "decode_end_t", "p_gone_t", "d_gone_t",
    "abort_race", "abort_race_outcome", "across_restart", "one_sided", "dwell_s", "dwell_basis",
    "evidence_level", "reason", "lost_reason", "holder_at_end",
)  # fmt: skip


def iter_requests(con: duckdb.DuckDBPyConnection, window_end: int) -> Iterator[Request]:
    """Every request with at least one side, in order of first appearance; streamed from DuckDB.

    Nested lists come over as JSON text: DuckDB serialises them faster than its Python
    conversion builds dicts, and json.loads is quick.
    """
    marks = (
        MARK_SQL
        if has_relation(con, "room_events")
        else "SELECT NULL::UBIGINT AS bootstrap_room, [] AS marks"
    )
    present = {r[0] for r in con.execute("DESCRIBE requests").fetchall()}
    cols = ", ".join(f"r.{c}" for c in REQUEST_COLUMNS if c in present)
    sql = f"""
        WITH ph AS (
            SELECT bootstrap_room, list(struct_pack(phase, engine, t_us) ORDER BY t_us, phase) AS phases
            FROM request_phases GROUP BY bootstrap_room
        ),
        mk AS ({marks})
        SELECT {cols}, to_json(ph.phases)::VARCHAR AS phases, to_json(mk.marks)::VARCHAR AS marks
        FROM requests AS r
        LEFT JOIN ph USING (bootstrap_room)
        LEFT JOIN mk USING (bootstrap_room)
        ORDER BY r.first_t NULLS LAST, r.bootstrap_room
    """
    for row in dict_rows(con, sql):
        row["phases"] = json.loads(row["phases"]) if row["phases"] else []
        row["marks"] = json.loads(row["marks"]) if row["marks"] else []
        sides = [s for s in (_side(row, "prefill", window_end), _side(row, "decode", window_end)) if s]
        if sides:
            yield Request(int(row["bootstrap_room"]), row, sides)


def _side(row: dict[str, Any], engine: str, window_end: int) -> Side | None:
    p = "p" if engine == "prefill" else "d"
    phases = [m for m in row.get("phases") or [] if m["engine"] == engine]
    start = row.get(f"{engine}_received_t") or (phases[0]["t_us"] if phases else None)
    host = row.get(f"{p}_host")
    if start is None and host is None:
        return None
    if start is None:
        start = row.get("first_t")
    if start is None:
        return None
    end = row.get(f"{engine}_end_t") or row.get(f"{p}_gone_t")
    is_open = end is None
    if end is None:
        end = max(window_end, start)
    end = max(end, start)
    rid = row.get(f"{engine}_rid")
    name = f"{engine} Req {(rid or str(row['bootstrap_room']))[:8]}"
    span = Span(name, start, end, is_open, _side_args(row, engine, is_open))
    marks = [m for m in row.get("marks") or [] if m["engine"] == engine]
    return Side(engine, host or "", rid, span, _phases(phases, engine, span), marks)


def _side_args(row: dict[str, Any], engine: str, is_open: bool) -> dict[str, Any]:
    args = {
        "bootstrap_room": str(row["bootstrap_room"]),
        "rid": row.get(f"{engine}_rid"),
        "class": row.get("class"),
        "open": is_open,
    }
    for key in ("abort_race", "abort_race_outcome", "across_restart", "one_sided", "dwell_s", "dwell_basis",
                "evidence_level", "reason", "lost_reason", "holder_at_end"):  # fmt: skip
        if row.get(key) is not None:
            args[key] = row[key]
    return args


def _phases(markers: list[dict[str, Any]], engine: str, side: Span) -> list[Span]:
    """Stretches between the side's state-changing markers, sequential and inside the side.

    Markers are taken in their lifecycle order (PHASE_LABELS); a time that contradicts it
    (1-second prefixes, a dwell-estimated entry before the Receive) is moved up to the previous
    marker's, so siblings never overlap and always nest in the side.
    """
    labels = {**PHASE_LABELS, **(DECODE_LABELS if engine == "decode" else {})}
    order = list(PHASE_LABELS)
    starts: list[tuple[int, str]] = []
    for m in sorted(
        (m for m in markers if m["phase"] in labels and m["t_us"] is not None),
        key=lambda m: (order.index(m["phase"]), m["t_us"]),
    ):
        t = min(max(m["t_us"], side.start, starts[-1][0] if starts else side.start), side.end)
        if starts and starts[-1][1] == m["phase"]:
            continue  # two estimates of one marker: the first (lifecycle-earliest) stands
        starts.append((t, m["phase"]))
    spans = []
    for i, (t, phase) in enumerate(starts):
        last = i + 1 == len(starts)
        end = side.end if last else starts[i + 1][0]
        if end > t or last:
            spans.append(Span(labels[phase], t, end, side.open and last, {"phase": phase}))
    # A lone "received" stretch covering the whole side says nothing the side does not.
    if len(spans) == 1 and spans[0].args["phase"] == "received":
        return []
    return spans
