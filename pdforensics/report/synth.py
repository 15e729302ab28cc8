"""A synthetic incident database written straight into `lines`/`events`, for report scale tests.

The simulator (`pdforensics simulate`) writes journals that go through the real
parser; this writes the stored rows directly, so a 100,000-request window takes
seconds, not minutes. The rows look like what ingest stores for the same lines
(same events, fields and messages), including a hostile prompt.

    python -m pdforensics.report.synth OUT.duckdb --requests 100000 [--minutes 60]
"""

from __future__ import annotations

import argparse
import bisect
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pdforensics import store
from pdforensics.schema import EVENT_BASE_COLUMNS, EVENT_FIELDS, LINE_COLUMNS

US = 1_000_000
START_US = 1_796_000_000 * US  # 2026-11-29 (a fixed, recognisable day)
PREFILL = ("p1", "sglang-dsv4-prefill.service", "prefill")
DECODE = ("d1", "sglang-dsv4-decode.service", "decode")
HOSTILE_PROMPT = "</script><script>window.__pwned=1</script><img src=x onerror=alert(1)> secret prompt"
# Log text is untrusted: a rid, a failure reason and a reject sample that try to run script.
HOSTILE_RID = "<script>window.__pwned=2</script>"
HOSTILE_REASON = '<img src=x onerror="window.__pwned=3"> \u2028 </script> & friends'
HOSTILE_SAMPLE = "<svg onload=window.__pwned=4>"


@dataclass
class Builder:
    """Collects lines (and their events) in any order; `frames()` sorts and numbers them."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, ts_us: int, where: tuple[str, str, str], message: str, event: str | None = None,
            tp: int | None = None, pid: int = 100, inv: str = "inv-1", **fields: Any) -> None:  # fmt: skip
        host, unit, engine = where
        stamp = _stamp(ts_us)
        prefix = f"[{stamp} TP{tp}] " if tp is not None else f"[{stamp}] "
        self.rows.append(
            {"ts_us": ts_us, "host": host, "unit": unit, "engine": engine, "pid": pid, "inv": inv,
             "tp_rank": tp, "message": prefix + message, "event": event, "fields": fields}
        )  # fmt: skip

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        self.rows.sort(key=lambda r: r["ts_us"])
        lines = pl.DataFrame(
            {
                "line_id": range(1, len(self.rows) + 1),
                "source": "synthetic",
                "source_key": "synthetic",
                "seq": range(len(self.rows)),
                "ts_us": [r["ts_us"] for r in self.rows],
                "app_ts_us": [r["ts_us"] // US * US for r in self.rows],
                "host": [r["host"] for r in self.rows],
                "unit": [r["unit"] for r in self.rows],
                "engine": [r["engine"] for r in self.rows],
                "pid": [r["pid"] for r in self.rows],
                "invocation_id": [r["inv"] for r in self.rows],
                "tp_rank": [r["tp_rank"] for r in self.rows],
                "message": [r["message"] for r in self.rows],
                "event": [r["event"] for r in self.rows],
            },
            schema_overrides={"tp_rank": pl.Int16, "line_id": pl.Int64, "seq": pl.Int64},
        )
        lines = lines.with_columns(
            pl.col("event").alias("entry"),
            pl.lit("journal").alias("ts_origin"),
            pl.lit(US, pl.Int32).alias("app_ts_precision_us"),
        )
        lines = lines.with_columns(
            [pl.lit(None).alias(c) for c in LINE_COLUMNS if c not in lines.columns and c != "ingest_id"]
        )
        events = self._events(lines)
        return lines, events

    def _events(self, lines: pl.DataFrame) -> pl.DataFrame:
        with_event = [(i, r) for i, r in enumerate(self.rows) if r["event"]]
        schema = dict(EVENT_FIELDS)
        fields = pl.from_dicts([r["fields"] for _, r in with_event], schema=schema)
        base = lines[[i for i, _ in with_event]].select([c for c in EVENT_BASE_COLUMNS if c in lines.columns])
        return pl.concat([base, fields], how="horizontal").with_columns(
            pl.lit(None, pl.String).alias("extra")
        )


def _stamp(ts_us: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts_us // US, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _hex(rng: random.Random) -> str:
    return f"{rng.getrandbits(128):032x}"


def _receive(rid: str, room: int, prompt: str) -> str:
    return (
        f"Receive: obj=GenerateReqInput(rid='{rid}', text={prompt!r}, input_ids=None, "
        "sampling_params={'temperature': 0.7, 'max_new_tokens': 256}, stream=True, "
        f"bootstrap_host='10.0.0.5', bootstrap_port=8998, bootstrap_room={room}, data_parallel_rank=None)"
    )


def _finish(rid: str, room: int, reply: str, kind: str, latency: float) -> str:
    return (
        f"Finish: obj=GenerateReqInput(rid='{rid}', text='[...]', bootstrap_room={room}), "
        f"out={{'text': {reply!r}, 'output_ids': [1, 2, 3], 'meta_info': {{'id': '{rid}', "
        f"'finish_reason': {{'type': '{kind}'}}, 'e2e_latency': {latency:.3f}}}}}"
    )


@dataclass
class Plan:
    requests: int
    minutes: float
    seed: int = 0
    pin_rate: float = 0.004
    fired_rate: float = 0.002
    abort_rate: float = 0.003
    failed_rate: float = 0.002


def build(plan: Plan) -> Builder:
    """Requests with a mix of outcomes, a decode restart at 40 %, gauges every second."""
    rng = random.Random(plan.seed)
    b = Builder()
    span_us = int(plan.minutes * 60 * US)
    end_us = START_US + span_us
    restart_us = START_US + span_us * 2 // 5
    b.add(START_US, PREFILL, "inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s",
          "watchdog_armed", tp=0, timeout_s=60.0)  # fmt: skip
    _restart(b, restart_us)
    inflight: list[tuple[int, int]] = []  # (enter, leave) on prefill's inflight queue
    running: list[tuple[int, int]] = []
    down = (restart_us, restart_us + 60 * US)
    for i in range(plan.requests):
        t = START_US + rng.randrange(span_us - 90 * US)
        while down[0] - 10 * US <= t < down[1]:  # the router sends nothing while the decode is down
            t = START_US + rng.randrange(span_us - 90 * US)
        _request(b, rng, plan, i, t, end_us, restart_us, inflight, running)
    _gauges(b, rng, START_US, end_us, restart_us, inflight, running)
    b.add(START_US + span_us // 3, PREFILL, "Suppressed 1234 messages from sglang-dsv4-prefill.service",
          "journal_suppressed", count=1234)  # fmt: skip
    _hostile(b, START_US + span_us // 5)
    return b


def _hostile(b: Builder, t: int) -> None:
    room = 4242424242424242424
    b.add(t, PREFILL, _receive(HOSTILE_RID, room, HOSTILE_PROMPT), "request_received", rid=HOSTILE_RID,
          bootstrap_room=room, bootstrap_host="10.0.0.5")  # fmt: skip
    _failed(b, t + 2 * US, "prefill_transfer_failed", 0, HOSTILE_RID, room, HOSTILE_REASON, None)


def _restart(b: Builder, t: int) -> None:
    b.add(t, DECODE, "SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
          "sigterm", tp=None)  # fmt: skip
    b.add(
        t + 5 * US, DECODE, "Gracefully exiting... Remaining number of requests 3.", "graceful_exit", count=3
    )
    b.add(t + 20 * US, ("d1", "sglang-dsv4-decode.service", "decode"),
          "sglang-dsv4-decode.service: Main process exited, code=killed, status=9/KILL", "unit_stopped")  # fmt: skip
    b.add(t + 21 * US, DECODE, "Started sglang-dsv4-decode.service.", "unit_started", inv="inv-2", pid=200)
    b.add(
        t + 56 * US, DECODE, "The server is fired up and ready to roll!", "server_ready", inv="inv-2", pid=200
    )


def _request(b: Builder, rng: random.Random, plan: Plan, i: int, t: int, end_us: int, restart_us: int,
             inflight: list, running: list) -> None:  # fmt: skip
    room = rng.getrandbits(63)
    prid, drid = _hex(rng), _hex(rng)
    prompt = HOSTILE_PROMPT if i == 0 else f"user question number {i} about the weather"
    dec_inv, dec_pid = ("inv-1", 100) if t < restart_us else ("inv-2", 200)
    lost = t < restart_us < t + 8 * US  # on the decode when it was killed: gone with the old process
    b.add(t, PREFILL, _receive(prid, room, prompt), "request_received", rid=prid, bootstrap_room=room,
          bootstrap_host="10.0.0.5")  # fmt: skip
    b.add(t + 4000, DECODE, _receive(drid, room, prompt), "request_received", rid=drid, bootstrap_room=room,
          bootstrap_host="10.0.0.5", inv=dec_inv, pid=dec_pid)  # fmt: skip
    enter = t + 150_000
    roll = rng.random()
    if roll < plan.pin_rate or i == 0:
        inflight.append((enter, end_us + 1))  # never leaves: a silent pin
        return
    roll -= plan.pin_rate
    if roll < plan.fired_rate:
        fire = enter + 60_400_000
        inflight.append((enter, fire))
        for tp in range(4):
            b.add(fire + tp * 1000, PREFILL,
                  f"inflight watchdog: req.rid='{prid}' req.bootstrap_room={room} stalled >60s in "
                  "KVPoll.Transferring (dwell=60.4s); forcing Failed + release", "watchdog_fired", tp=tp,
                  rid=prid, bootstrap_room=room, timeout_s=60.0, state="KVPoll.Transferring", dwell_s=60.4)  # fmt: skip
            _failed(b, fire + tp * 1000 + 500, "prefill_transfer_failed", tp, prid, room,
                    "inflight watchdog: stalled >60s in KVPoll.Transferring", "KVPoll.Transferring")  # fmt: skip
        return
    roll -= plan.fired_rate
    if roll < plan.abort_rate:
        leave = enter + rng.randrange(50_000, 400_000)
        inflight.append((enter, leave))
        _failed(b, leave, "prefill_transfer_failed", 0, prid, room, "Aborted by AbortReq.", None)
        return
    roll -= plan.abort_rate
    if roll < plan.failed_rate:
        leave = t + 300 * US
        _failed(b, min(leave, end_us - 1), "prefill_bootstrap_failed", 0, prid, room,
                f"Request {room} timed out after 300.0s in KVPoll.Bootstrapping", "KVPoll.Bootstrapping")  # fmt: skip
        return
    leave = enter + rng.randrange(100_000, 600_000)
    inflight.append((enter, leave))
    b.add(leave, PREFILL, _finish(prid, room, "", "length", (leave - t) / US), "request_finished", rid=prid,
          bootstrap_room=room, finish_type="length", e2e_latency_s=(leave - t) / US)  # fmt: skip
    done = leave + rng.randrange(1 * US, 6 * US)
    if lost:
        return
    running.append((leave, done))
    b.add(done, DECODE, _finish(drid, room, f"sunny, {i}", "stop", (done - t) / US), "request_finished",
          rid=drid, bootstrap_room=room, finish_type="stop", e2e_latency_s=(done - t) / US, inv=dec_inv,
          pid=dec_pid)  # fmt: skip


def _failed(b: Builder, ts: int, event: str, tp: int, rid: str, room: int, reason: str,
            state: str | None) -> None:  # fmt: skip
    what = "transfer" if "transfer" in event else "bootstrap"
    b.add(ts, PREFILL,
          f"Prefill {what} failed for request rank={tp} req.rid='{rid}' req.bootstrap_room={room} with "
          f"exception KVTransferError(bootstrap_room={room}): {reason}", event, tp=tp, rank=tp, rid=rid,
          bootstrap_room=room, reason=reason, state=state)  # fmt: skip


def _count_open(spans: list[tuple[int, int]]) -> Any:
    enters = sorted(s for s, _ in spans)
    leaves = sorted(e for _, e in spans)
    return lambda t: bisect.bisect_right(enters, t) - bisect.bisect_right(leaves, t)


def _gauges(b: Builder, rng: random.Random, start: int, end: int, restart_us: int, inflight: list,
            running: list) -> None:  # fmt: skip
    n_inflight, n_running = _count_open(inflight), _count_open(running)
    for t in range(start + US, end, US):
        f = n_inflight(t)
        b.add(t, PREFILL,
              f"Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.01, "
              f"#running-req: 0, #queue-req: {rng.randrange(3)}, #bootstrap-req: {rng.randrange(2)}, "
              f"#inflight-req: {f}, input throughput (token/s): 1234.5, cuda graph: False", "prefill_stats",
              tp=0, new_seq=1, new_token=512, running_req=0, queue_req=0, bootstrap_req=0, inflight_req=f)  # fmt: skip
        if restart_us + 5 * US <= t < restart_us + 56 * US:
            continue  # the decode is down: no batch lines
        r = n_running(t)
        inv = "inv-1" if t < restart_us + 21 * US else "inv-2"
        b.add(t, DECODE,
              f"Decode batch, #running-req: {r}, #token: {r * 300}, token usage: 0.05, #prealloc-req: 0, "
              f"#transfer-req: 1, #retracted-req: 0, cuda graph: True, gen throughput (token/s): {r * 31.5:.2f}, "
              "#queue-req: 0", "decode_stats", tp=0, running_req=r, num_token=r * 300, prealloc_req=0,
              transfer_req=1, gen_throughput=r * 31.5, queue_req=0, inv=inv)  # fmt: skip


def write_db(path: Path, plan: Plan) -> Path:
    """A fresh database at `path` holding the synthetic window."""
    if path.exists():
        path.unlink()
    lines, events = build(plan).frames()
    con = store.open_db(path)
    try:
        ingest_id = store.begin_ingest(con, "synthetic", "synthetic", "*", None, None)
        counts = {"records": lines.height, "stored": lines.height}
        rejects = pl.DataFrame(
            {
                "source": ["synthetic"],
                "position": ["line 1"],
                "reason": ["not a log record"],
                "sample": [HOSTILE_SAMPLE],
            }
        )
        store.store_batch(con, ingest_id, lines, events, rejects, counts | {"rejected": 1})
        store.finish_ingest(con, ingest_id, "complete", "synthetic")
        from pdforensics.verdict import install_views  # as ingest does

        install_views(con)
    finally:
        con.close()
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    write_db(args.db, Plan(requests=args.requests, minutes=args.minutes, seed=args.seed))
    print(args.db)


if __name__ == "__main__":
    main()
