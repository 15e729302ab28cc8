"""OTLP JSON lines: one ExportTraceServiceRequest per line, one trace per bootstrap room.

What SGLang's own tracing cannot show: a span that never ends is never exported, so a
request pinned in the inflight queue is invisible there. Here every request side is a
span, and one with no end in the logs ends at the window end with `pdforensics.open =
true` (status ERROR when it is a silent pin), so a trace backend shows it.

Shape (OTLP/JSON rules: trace and span ids as hex, 64-bit integers as decimal strings,
enums as integers):
  resource pdforensics      span "Bootstrap Room 0x…" (the room's whole life)
  resource sglang-prefill   span "prefill Req <rid[:8]>" (SGLang's own naming) + phase spans
  resource sglang-decode    span "decode Req <rid[:8]>" + phase spans
Failure lines, aborts and watchdog firings are span events on the side that logged them.
The file is what the OpenTelemetry Collector's `otlpjsonfile` receiver reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import duckdb

from pdforensics import __version__
from pdforensics.exporters import requests as req
from pdforensics.exporters.common import window_t

SPAN_KIND_INTERNAL = 1
SPAN_KIND_SERVER = 2
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2
INT64_MAX = 2**63 - 1

# Classes that mean the request did not end well: the root span's status is ERROR.
ERROR_CLASSES = {"watchdog_fired", "silent_pin", "transfer_failed", "aborted", "lost"}


@functools.lru_cache(maxsize=4)  # each room's spans ask for it in turn
def trace_id(room: int) -> str:
    """32 hex digits; the low 64 bits are the room itself, so a trace id names its room."""
    return hashlib.sha256(f"pdforensics-room:{room}".encode()).hexdigest()[:16] + f"{room:016x}"


def span_id(room: int, *path: str) -> str:
    digest = hashlib.sha256(("/".join([str(room), *path])).encode()).hexdigest()[:16]
    return digest if digest != "0" * 16 else "0" * 15 + "1"  # all-zero ids are invalid


def _ns(t_us: int) -> str:
    return str(int(t_us) * 1000)


def attr(key: str, value: Any) -> dict[str, Any] | None:
    """One OTLP KeyValue; int64 as a decimal string, larger integers as text."""
    if value is None:
        return None
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        if -(2**63) <= value <= INT64_MAX:
            return {"key": key, "value": {"intValue": str(value)}}
        return {"key": key, "value": {"stringValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    if isinstance(value, list | tuple):
        values = [a["value"] for a in (attr(key, v) for v in value) if a]
        return {"key": key, "value": {"arrayValue": {"values": values}}}
    return {"key": key, "value": {"stringValue": str(value)}}


def attrs(items: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in (attr(k, v) for k, v in items.items()) if a is not None]


def _status(error: str | None) -> dict[str, Any]:
    # The spec allows a status message only with ERROR.
    return {"code": STATUS_ERROR, "message": error} if error else {"code": STATUS_UNSET}


def _root_error(cls: str | None, reason: str | None) -> str | None:
    return (f"{cls}" + (f": {reason}" if reason else "")) if cls in ERROR_CLASSES else None


def _side_error(side: req.Side, cls: str | None) -> str | None:
    if side.marks:
        m = side.marks[0]
        return f"{m['event']}: {m['reason']}" if m.get("reason") else m["event"]
    if side.span.open and cls == "silent_pin" and side.engine == "prefill":
        return "silent_pin: held past the watchdog timeout with no end in the logs"
    return None


def _span(room: int, sid: str, parent: str | None, name: str, kind: int, span: req.Span,
          attributes: dict[str, Any], status: dict[str, Any], events: list[dict] | None = None) -> dict:  # fmt: skip
    out: dict[str, Any] = {"traceId": trace_id(room), "spanId": sid}
    if parent:
        out["parentSpanId"] = parent
    out.update(
        name=name, kind=kind, startTimeUnixNano=_ns(span.start), endTimeUnixNano=_ns(span.end),
        attributes=attrs({**attributes, "pdforensics.open": span.open}), status=status,
    )  # fmt: skip
    if events:
        out["events"] = events
    return out


def _scope(spans: list[dict], resource: dict[str, Any]) -> dict[str, Any]:
    return {
        "resource": {"attributes": attrs(resource)},
        "scopeSpans": [{"scope": {"name": "pdforensics", "version": __version__}, "spans": spans}],
    }


def room_trace(r: req.Request) -> dict[str, Any]:
    """One room's ExportTraceServiceRequest."""
    row = r.row
    root_id = span_id(r.room, "room")
    cls = row.get("class")
    root = _span(
        r.room, root_id, None, f"Bootstrap Room {hex(r.room)}", SPAN_KIND_INTERNAL,
        req.Span("room", r.start, r.end, r.open),
        {
            "bootstrap_room": hex(r.room), "pdforensics.bootstrap_room": r.room,
            "pdforensics.class": cls, "pdforensics.abort_race": row.get("abort_race"),
            "pdforensics.abort_race_outcome": row.get("abort_race_outcome"),
            "pdforensics.across_restart": row.get("across_restart"), "pdforensics.one_sided": row.get("one_sided"),
            "pdforensics.dwell_s": row.get("dwell_s"), "pdforensics.dwell_basis": row.get("dwell_basis"),
            "pdforensics.evidence_level": row.get("evidence_level"), "pdforensics.lost_reason": row.get("lost_reason"),
            "pdforensics.holder_at_end": row.get("holder_at_end"),
        },
        _status(_root_error(cls, row.get("reason"))),
    )  # fmt: skip
    resources = [_scope([root], {"service.name": "pdforensics", "service.version": __version__})]
    for side in r.sides:
        side_id = span_id(r.room, side.engine)
        events = [_event(m) for m in side.marks]
        spans = [
            _span(
                r.room, side_id, root_id, side.span.name, SPAN_KIND_SERVER, side.span,
                {"rid": side.rid, "module": "sglang::request", "bootstrap_room": hex(r.room),
                 "pdforensics.engine": side.engine},
                _status(_side_error(side, cls)),
                events,
            )
        ]  # fmt: skip
        for i, ph in enumerate(side.phases):
            spans.append(
                _span(r.room, span_id(r.room, side.engine, str(i), ph.args.get("phase", "")), side_id, ph.name,
                      SPAN_KIND_INTERNAL, ph, {"pdforensics.phase": ph.args.get("phase")},
                      _status(None))
            )  # fmt: skip
        resources.append(
            _scope(spans, {"service.name": f"sglang-{side.engine}", "host.name": side.host,
                           "sglang.engine": side.engine})
        )  # fmt: skip
    return {"resourceSpans": resources}


def _event(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "timeUnixNano": _ns(m["t_us"]),
        "name": m["event"],
        "attributes": attrs({
            "reason": m.get("reason"), "state": m.get("state"), "dwell_s": m.get("dwell_s"),
            "tp_ranks": list(m["ranks"]) if m.get("ranks") else None, "log.message": m.get("message"),
        }),
    }  # fmt: skip


def export(con: duckdb.DuckDBPyConnection, out: Path) -> Path:
    _, end = window_t(con)
    with out.open("w", encoding="utf-8") as fh:
        if req.available(con):
            for r in req.iter_requests(con, end or 0):
                fh.write(json.dumps(room_trace(r), separators=(",", ":")) + "\n")
    return out
