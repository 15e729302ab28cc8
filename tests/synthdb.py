"""A small hand-made database for the sql/export tests: two engines, a decode restart, a
completed request, a watchdog firing, a silent pin, an abort race, gauges, noise.

Rows go straight into `lines`/`events` (the documented contract), so these tests do not
depend on the catalog or the parser; the ingested simulator fixtures are tested too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from pdforensics import store
from pdforensics.schema import EVENT_FIELDS

T0 = 1_796_000_000_000_000  # 2026-11-30 UTC, in µs
S = 1_000_000

PREFILL = {"host": "gpu-a", "unit": "sglang-dsv4-prefill.service", "engine": "prefill", "pid": 1100,
           "invocation_id": "inv-prefill-1"}  # fmt: skip
DECODE_1 = {"host": "gpu-b", "unit": "sglang-dsv4-decode.service", "engine": "decode", "pid": 2200,
            "invocation_id": "inv-decode-1"}  # fmt: skip
DECODE_2 = {**DECODE_1, "pid": 2300, "invocation_id": "inv-decode-2"}
INIT = {"host": "gpu-b", "unit": "sglang-dsv4-decode.service", "engine": "decode", "pid": 1,
        "invocation_id": None, "syslog_identifier": "systemd"}  # fmt: skip

ROOM_OK = 1111111111111111111
ROOM_FIRED = 4611300501895570458
ROOM_PINNED = 7561186998443553199
ROOM_RACE = 9000000000000000001  # above 2**63: only UBIGINT holds it
ROOMS = (ROOM_OK, ROOM_FIRED, ROOM_PINNED, ROOM_RACE)


def _ev(t: float, who: dict, message: str, event: str | None, **fields: Any) -> dict:
    return {"t": t, "who": who, "message": message, "event": event, "fields": fields}


def scenario() -> list[dict]:
    """(seconds after T0, engine, message, event, fields) in time order."""
    rows = [
        _ev(0, PREFILL, "inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s",
            "watchdog_armed", timeout_s=60.0, tp_rank=0),
        _ev(1, DECODE_1, "The server is fired up and ready to roll!", "server_ready"),
        _ev(2, PREFILL, "Receive: obj=GenerateReqInput(rid='p-ok', bootstrap_room=1111111111111111111)",
            "request_received", rid="p-ok", bootstrap_room=ROOM_OK),
        _ev(2, DECODE_1, "Receive: obj=GenerateReqInput(rid='d-ok', bootstrap_room=1111111111111111111)",
            "request_received", rid="d-ok", bootstrap_room=ROOM_OK),
        _ev(3, PREFILL, "Prefill batch, #new-seq: 1, #inflight-req: 1", "prefill_stats",
            new_seq=1, inflight_req=1, bootstrap_req=0, queue_req=0, running_req=0, tp_rank=0),
        _ev(4, PREFILL, "Finish: rid='p-ok' bootstrap_room=1111111111111111111", "request_finished",
            rid="p-ok", bootstrap_room=ROOM_OK, finish_type="length"),
        _ev(6, DECODE_1, "Finish: rid='d-ok' bootstrap_room=1111111111111111111", "request_finished",
            rid="d-ok", bootstrap_room=ROOM_OK, finish_type="length"),
        _ev(7, DECODE_1, "Decode batch, #running-req: 1, #transfer-req: 0", "decode_stats",
            running_req=1, transfer_req=0, prealloc_req=0, tp_rank=0),
        _ev(10, PREFILL, "Receive: obj=GenerateReqInput(rid='p-fired', bootstrap_room=4611300501895570458)",
            "request_received", rid="p-fired", bootstrap_room=ROOM_FIRED),
        _ev(10, DECODE_1, "Receive: obj=GenerateReqInput(rid='d-fired', bootstrap_room=4611300501895570458)",
            "request_received", rid="d-fired", bootstrap_room=ROOM_FIRED),
        _ev(11, PREFILL, "Receive: obj=GenerateReqInput(rid='p-pin', bootstrap_room=7561186998443553199)",
            "request_received", rid="p-pin", bootstrap_room=ROOM_PINNED),
        _ev(11, DECODE_1, "Receive: obj=GenerateReqInput(rid='d-pin', bootstrap_room=7561186998443553199)",
            "request_received", rid="d-pin", bootstrap_room=ROOM_PINNED),
        _ev(12, PREFILL, "Prefill batch, #new-seq: 2, #inflight-req: 2", "prefill_stats",
            new_seq=2, inflight_req=2, bootstrap_req=0, queue_req=0, running_req=0, tp_rank=0),
        _ev(13, DECODE_1, "SIGTERM received. signum=None frame=None.", "sigterm"),
        _ev(14, DECODE_1, "Gracefully exiting... Remaining number of requests 2.", "graceful_exit", count=2),
        _ev(15, INIT, "sglang-dsv4-decode.service: Main process exited, code=killed, status=9/KILL",
            "unit_killed"),
        _ev(20, PREFILL, "Receive: obj=GenerateReqInput(rid='p-race', bootstrap_room=9000000000000000001)",
            "request_received", rid="p-race", bootstrap_room=ROOM_RACE),
        _ev(21, PREFILL, "Prefill transfer failed for request rank=0 req.rid='p-race' "
            "req.bootstrap_room=9000000000000000001 with exception KVTransferError(bootstrap_room="
            "9000000000000000001): Aborted by AbortReq.", "prefill_transfer_failed",
            rid="p-race", bootstrap_room=ROOM_RACE, rank=0, reason="Aborted by AbortReq."),
        _ev(30, DECODE_2, "The server is fired up and ready to roll!", "server_ready"),
        _ev(35, PREFILL, "Prefill batch, #new-seq: 1, #inflight-req: 3", "prefill_stats",
            new_seq=1, inflight_req=3, bootstrap_req=1, queue_req=0, running_req=1, tp_rank=0),
        _ev(36, PREFILL, "some library warning nobody catalogued", None),
        _ev(37, PREFILL, "Prefill batch, #new-seq: garbled", None, parse_error="prefill_batch_0_5_23"),
        _ev(70, PREFILL, "inflight watchdog: req.rid='p-fired' req.bootstrap_room=4611300501895570458 "
            "stalled >60s in KVPoll.Transferring (dwell=60.4s); forcing Failed + release",
            "watchdog_fired", rid="p-fired", bootstrap_room=ROOM_FIRED, timeout_s=60.0,
            state="KVPoll.Transferring", dwell_s=60.4, tp_rank=0),
        _ev(70, PREFILL, "Prefill transfer failed for request rank=0 req.rid='p-fired' "
            "req.bootstrap_room=4611300501895570458 with exception KVTransferError(bootstrap_room="
            "4611300501895570458): inflight watchdog: stalled >60s in KVPoll.Transferring",
            "prefill_transfer_failed", rid="p-fired", bootstrap_room=ROOM_FIRED, rank=0,
            reason="inflight watchdog: stalled >60s in KVPoll.Transferring", state="KVPoll.Transferring"),
        _ev(75, PREFILL, "Prefill batch, #new-seq: 1, #inflight-req: 2", "prefill_stats",
            new_seq=1, inflight_req=2, bootstrap_req=0, queue_req=0, running_req=1, tp_rank=0),
        _ev(200, PREFILL, "Prefill batch, #new-seq: 1, #inflight-req: 2", "prefill_stats",
            new_seq=1, inflight_req=2, bootstrap_req=0, queue_req=0, running_req=1, tp_rank=0),
    ]  # fmt: skip
    return rows


def build(path: Path) -> Path:
    """Write the scenario into a fresh pdforensics database at `path`, views installed as ingest does."""
    from pdforensics.verdict import install_views

    con = store.open_db(path)
    try:
        con.execute(
            "INSERT INTO ingests (ingest_id, started_at, sources, status) VALUES (1, now(), 'synthetic', 'ok')"
        )
        for i, row in enumerate(scenario(), start=1):
            _insert(con, i, row)
        install_views(con)
    finally:
        con.close()
    return path


def _insert(con: duckdb.DuckDBPyConnection, line_id: int, row: dict) -> None:
    who = dict(row["who"])
    fields = dict(row["fields"])
    tp_rank = fields.pop("tp_rank", None)
    parse_error = fields.pop("parse_error", None)
    ts = T0 + int(row["t"] * S)
    line = {
        "line_id": line_id, "ingest_id": 1, "source": "synthetic", "source_key": "synthetic",
        "seq": line_id, "cursor": None, "host": who["host"], "unit": who["unit"], "engine": who["engine"],
        "pid": who["pid"], "boot_id": "boot-" + who["host"], "invocation_id": who.get("invocation_id"),
        "syslog_identifier": who.get("syslog_identifier", "python3"), "priority": 6, "ts_us": ts,
        "app_ts_us": ts // S * S, "ts_origin": "journal", "app_ts_precision_us": S, "dp_rank": None,
        "tp_rank": tp_rank, "pp_rank": None, "ep_rank": None, "message": row["message"],
        "event": row["event"], "entry": row["event"], "parse_error": parse_error, "cont_of": None,
    }  # fmt: skip
    cols = ", ".join(line)
    con.execute(f"INSERT INTO lines ({cols}) VALUES ({', '.join('?' * len(line))})", list(line.values()))
    if row["event"] is None:
        return
    unknown = set(fields) - set(EVENT_FIELDS)
    assert not unknown, unknown
    event = {k: line[k] for k in ("line_id", "ts_us", "app_ts_us", "host", "unit", "engine", "pid",
                                  "invocation_id", "boot_id", "dp_rank", "tp_rank", "event", "entry")}  # fmt: skip
    event.update(fields)
    event["extra"] = json.dumps({})
    cols = ", ".join(event)
    con.execute(f"INSERT INTO events ({cols}) VALUES ({', '.join('?' * len(event))})", list(event.values()))
