"""Each request as spans: one per engine side, with its phases as children.

Both trace exporters (Perfetto, OTLP) draw requests from one query,
queries/exports/request_spans.sql, so they agree. The `requests` and `request_phases`
views give the times (reference clock, `t_us`); a side with no end in the logs is closed
at the window end and marked open: exactly the span SGLang's own tracing never exports,
because it never ends. Phases within a side are sequential and clipped to the side, so
they always nest: a child never outlives its parent, and siblings never overlap.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import duckdb

from pdforensics.exporters.common import has_relation
from pdforensics.paths import queries_dir
from pdforensics.store import dict_rows

# The columns of `requests` a trace carries on its sides (and OTLP on its room span).
SIDE_ARGS = (
    "class", "abort_race", "abort_race_outcome", "across_restart", "one_sided", "dwell_s", "dwell_basis",
    "evidence_level", "reason", "lost_reason", "holder_at_end",
)  # fmt: skip


@cache
def spans_sql() -> str:
    """One row per span (a side, then its phases), in drawing order; parameter `$window_end`."""
    return (queries_dir() / "exports" / "request_spans.sql").read_text()


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
    ord: int = 0  # its place in the trace (first appearance)

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
    return (
        has_relation(con, "requests")
        and has_relation(con, "request_phases")
        and has_relation(con, "room_events")
    )


def iter_requests(con: duckdb.DuckDBPyConnection, window_end: int) -> Iterator[Request]:
    """Every request with at least one side, in order of first appearance; streamed from DuckDB.
    The marks come over as JSON text: DuckDB serialises them faster than its Python conversion
    builds dicts."""
    sql = f"SELECT * REPLACE (to_json(marks)::VARCHAR AS marks) FROM ({spans_sql()})"
    current: Request | None = None
    side: Side | None = None
    for row in dict_rows(con, sql, {"window_end": window_end}):
        span = Span(row["name"], row["start_t"], row["end_t"], row["open"])
        if row["phase"] is not None:
            span.args = {"phase": row["phase"]}
            if side is not None:
                side.phases.append(span)
            continue
        if current is None or current.ord != row["req_ord"]:
            if current is not None:
                yield current
            current = Request(int(row["bootstrap_room"]), {k: row[k] for k in SIDE_ARGS}, [], row["req_ord"])
        span.args = _side_args(row)
        marks = json.loads(row["marks"]) if row["marks"] else []
        side = Side(row["engine"], row["host"] or "", row["rid"], span, [], marks)
        current.sides.append(side)
    if current is not None:
        yield current


def _side_args(row: dict[str, Any]) -> dict[str, Any]:
    args = {"bootstrap_room": str(row["bootstrap_room"]), "rid": row["rid"], "class": row["class"],
            "open": row["open"]}  # fmt: skip
    for key in SIDE_ARGS[1:]:
        if row[key] is not None:
            args[key] = row[key]
    return args
