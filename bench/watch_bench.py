"""How fast does `pdforensics watch` follow, how soon does it alert, and does its memory stay flat?

    python bench/watch_bench.py [--minutes 60] [--rate 10] [--out /tmp/watch-bench]

1. Throughput: an hour (by default) of a prefill log in log time — `--rate` requests a second
   (Receive: + Finish:), a `Prefill batch` line a second, one silent pin and one watchdog firing
   every 10 minutes — written as a plain file, then followed by an in-process `Watcher` in
   --once mode (read, parse, fold, alert, one write transaction per poll into DuckDB): lines/s,
   CPU seconds a line, the fold's open requests and the process's RSS at each quarter of the stream.
2. Sustained: a `watch` process follows a file while lines are appended at a fixed rate
   (`--live-rates`, lines/s, 15 s each): the watch's CPU (utime+stime from /proc) per wall second,
   i.e. its share of one core, how far behind it is at the end, and its last write transaction.
3. Alert latency, wall clock: a `watch` process follows a file at its default 1 s poll; a firing
   line is appended and the time until its alert is on stdout measured, five times.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from pdforensics.catalog import load_catalog
from pdforensics.follow import FileFollower
from pdforensics.watch import WatchConfig, Watcher

T0 = 1_796_000_000_000_000
S = 1_000_000


def _pre(t_us: int) -> str:
    return datetime.fromtimestamp(t_us / S, UTC).strftime("[%Y-%m-%d %H:%M:%S TP0]")


def _room(n: int) -> int:
    return 5_000_000_000_000_000_000 + n


def stream(seconds: int, rate: int, start_s: int = 0) -> list[str]:
    out: list[str] = []
    n = start_s * rate
    for s in range(start_s, start_s + seconds):
        t = T0 + s * S
        pin = s % 600 == 100  # a silent pin and, 300 s later, a request the watchdog releases at 65 s
        fire = s % 600 == 400
        for k in range(rate):
            n += 1
            out.append(f"{_pre(t)} Receive: obj=GenerateReqInput(rid='p{n}', bootstrap_host='10.0.0.5', "
                       f"bootstrap_port=8998, bootstrap_room={_room(n)})")  # fmt: skip
            if (pin or fire) and k == 0:
                continue
            out.append(f"{_pre(t)} Finish: obj=GenerateReqInput(rid='p{n}', bootstrap_room={_room(n)}), out={{"
                       "'meta_info': {'finish_reason': {'type': 'length', 'length': 0}, 'e2e_latency': 0.4}}")  # fmt: skip
        if s % 600 == 465:
            m = (s - 65) * rate + 1
            out.append(f"{_pre(t)} inflight watchdog: req.rid='p{m}' req.bootstrap_room={_room(m)} "
                       "stalled >60s in KVPoll.Transferring (dwell=65.0s); forcing Failed + release")  # fmt: skip
        # the floor counts what is held: every silent pin so far, and the request until it fires
        held = (s - 100) // 600 + 1 if s >= 100 else 0
        held += 1 if 400 <= s % 600 < 465 and s >= 400 else 0
        out.append(f"{_pre(t)} Prefill batch, #new-seq: {rate}, #new-token: 640, #cached-token: 0, token usage: "
                   f"0.01, #running-req: 0, #queue-req: 0, #pending-token: 0, #bootstrap-req: 0, #inflight-req: "
                   f"{rate + held}, cuda graph: False, input throughput (token/s): 100.00")  # fmt: skip
    return out


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def throughput(out: Path, minutes: int, rate: int) -> dict:
    log, db = out / "prefill.log", out / "bench.duckdb"
    for p in (log, db, out / "bench.duckdb.alerts.jsonl"):
        p.unlink(missing_ok=True)
    log.write_text("")
    follower = FileFollower(log, "gpu-a", "sglang-prefill")
    sink = io.StringIO()
    cfg = WatchConfig(db=db, followers=[follower], catalog=load_catalog([]), tz="UTC",
                      watchdog_timeout_s=60, poll_s=0, once=True, out=sink, json_out=True)  # fmt: skip
    w = Watcher(cfg)
    w.start()
    quarter = minutes * 60 // 4
    samples, lines, wall, cpu = [], 0, 0.0, 0.0
    for q in range(4):
        text = stream(quarter, rate, q * quarter)
        with open(log, "a") as f:
            f.write("\n".join(text) + "\n")
        lines += len(text)
        c0, t0 = time.process_time(), time.perf_counter()
        while w.poll():
            pass
        cpu += time.process_time() - c0
        wall += time.perf_counter() - t0
        samples.append({"log_minutes": (q + 1) * quarter / 60, "open_requests": len(w.fold.rooms),
                        "raised_kept": len(w.fold.raised), "rss_mb": round(rss_mb(), 1)})  # fmt: skip
    w.flush(wait_s=10, force=True)
    alerts = [json.loads(x) for x in sink.getvalue().splitlines()]
    lags = [(a["detected_us"] - a["at_us"]) / S for a in alerts if a["alert"] == "silent_pin"]
    return {
        "lines": lines, "wall_s": round(wall, 2), "lines_per_s": round(lines / wall),
        "cpu_us_per_line": round(cpu / lines * 1e6, 1), "cpu_share_of_a_core_at_rate": round(cpu / (minutes * 60), 4),
        "alerts": {k: sum(a["alert"] == k for a in alerts) for k in {a["alert"] for a in alerts}},
        "silent_pin_log_lag_s_max": max(lags) if lags else None, "memory": samples,
    }  # fmt: skip


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sustained(out: Path, rate: int, seconds: int = 15) -> dict:
    log, db, status = out / f"live-{rate}.log", out / f"live-{rate}.duckdb", out / f"live-{rate}.json"
    for p in (log, db, status, out / f"live-{rate}.duckdb.alerts.jsonl"):
        p.unlink(missing_ok=True)
    log.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdforensics", "watch", "--db", str(db), "--file", str(log), "--tz", "UTC",
         "--host", "gpu-a", "--json", "--watchdog-timeout", "60", "--status-file", str(status)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    # requests at rate/2.1 a second give ~rate lines a second (Receive + Finish + a batch line)
    text = stream(seconds + 5, max(int(rate / 2.1), 1))
    per_s = len(text) // (seconds + 5)
    try:
        while not status.exists():
            time.sleep(0.1)
        c0, t0 = _cpu_s(proc.pid), time.perf_counter()
        written = 0
        with open(log, "a") as f:
            for i in range(seconds):
                f.write("\n".join(text[i * per_s : (i + 1) * per_s]) + "\n")
                f.flush()
                written += per_s
                time.sleep(max(t0 + i + 1 - time.perf_counter(), 0))
        wall = time.perf_counter() - t0
        cpu = _cpu_s(proc.pid) - c0
        st = json.loads(status.read_text())
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"lines_per_s": round(written / wall), "cpu_share_of_a_core": round(cpu / wall, 3),
            "lines_behind_at_end": written - st["lines"], "last_write_ms": st["last_flush_ms"]}  # fmt: skip


def latency(out: Path, runs: int = 5) -> list[float]:
    log, db = out / "live.log", out / "live.duckdb"
    for p in (log, db, out / "live.duckdb.alerts.jsonl"):
        p.unlink(missing_ok=True)
    log.write_text("\n".join(stream(5, 2)) + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdforensics", "watch", "--db", str(db), "--file", str(log), "--tz", "UTC",
         "--host", "gpu-a", "--json", "--watchdog-timeout", "60"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    out_lat = []
    try:
        time.sleep(3)  # startup (imports, database) is not part of an alert's latency
        for i in range(runs):
            n = 900_000 + i
            line = (f"{_pre(T0 + (10 + i) * S)} inflight watchdog: req.rid='x{n}' req.bootstrap_room={_room(n)} "
                    "stalled >60s in KVPoll.Transferring (dwell=61.0s); forcing Failed + release")  # fmt: skip
            t0 = time.perf_counter()
            with open(log, "a") as f:
                f.write(line + "\n")
            alert = json.loads(proc.stdout.readline())
            out_lat.append(round(time.perf_counter() - t0, 3))
            assert alert["alert"] == "watchdog_fired"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return out_lat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--rate", type=int, default=10, help="requests per second of log time")
    ap.add_argument("--out", type=Path, default=Path("/tmp/watch-bench"))
    ap.add_argument("--live-rates", default="1000,5000", help="lines/s for the sustained phase")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = throughput(args.out, args.minutes, args.rate)
    result["sustained"] = [sustained(args.out, int(r)) for r in args.live_rates.split(",")]
    result["alert_latency_wall_s"] = latency(args.out)
    result["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    result["cores"] = os.cpu_count()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
