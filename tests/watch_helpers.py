"""Traffic for the watch tests: SGLang lines (the catalog's sample texts and the simulator's
watchdog line builders, re-timed) as Journal
Export entries appended to a real `.journal` by systemd-journal-remote, or as a plain log, and a
`watch` subprocess whose progress (its --status-file) the tests wait on, never a sleep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pdforensics.simulate import lines as sim_lines
from tests.conftest import JOURNAL_REMOTE, REPO

T0 = 1_796_000_000_000_000  # 2026-11-30 00:53:20 UTC, in µs
S = 1_000_000
WAIT_S = 60.0  # generous bound for the watch to report a marker; the tests never sleep-and-hope
BOOT = "0123456789abcdef0123456789abcdef"
UNITS = {
    "prefill": ("sglang-prefill.service", 1100, "a" * 32),
    "decode": ("sglang-decode.service", 2200, "b" * 32),
    "journald": ("systemd-journald.service", 300, "c" * 32),
}


def room(n: int) -> int:
    return 5_000_000_000_000_000_000 + n


def prefix(t_us: int) -> str:
    return datetime.fromtimestamp(t_us / S, UTC).strftime("[%Y-%m-%d %H:%M:%S TP0]")


def receive(n: int, side: str) -> str:
    return (f"Receive: obj=GenerateReqInput(rid='{side[0]}{n}', text='Hello', stream=True, "
            f"bootstrap_host='10.0.0.5', bootstrap_port=8998, bootstrap_room={room(n)})")  # fmt: skip


def finish(n: int, side: str) -> str:
    return (f"Finish: obj=GenerateReqInput(rid='{side[0]}{n}', bootstrap_host='10.0.0.5', bootstrap_port=8998, "
            f"bootstrap_room={room(n)}), out={{'text': '', 'meta_info': {{'id': '{side[0]}{n}', "
            f"'finish_reason': {{'type': 'length', 'length': 0}}, 'e2e_latency': 0.41}}}}")  # fmt: skip


def prefill_stats(inflight: int, new_seq: int = 0, queue: int = 0) -> str:
    return (f"Prefill batch, #new-seq: {new_seq}, #new-token: 64, #cached-token: 0, token usage: 0.01, "
            f"#running-req: 0, #queue-req: {queue}, #pending-token: 0, #bootstrap-req: 0, "
            f"#inflight-req: {inflight}, cuda graph: False, input throughput (token/s): 100.00")  # fmt: skip


def armed(timeout_s: int) -> str:
    return sim_lines.watchdog_armed(timeout_s)


def fired(n: int, timeout_s: int, dwell: float) -> str:
    return sim_lines.watchdog_fired(f"p{n}", room(n), timeout_s, "KVPoll.Transferring", dwell)


@dataclass
class Line:
    t_us: int
    engine: str  # prefill | decode | journald (journald's own line about gpu-a's units)
    text: str

    def plain(self) -> str:
        return self.text if self.engine == "journald" else f"{prefix(self.t_us)} {self.text}"

    def export(self, seq: int) -> str:
        unit, pid, inv = UNITS[self.engine]
        host = "gpu-b" if self.engine == "decode" else "gpu-a"
        ident = "systemd-journald" if self.engine == "journald" else "python3"
        return (f"__REALTIME_TIMESTAMP={self.t_us}\n__MONOTONIC_TIMESTAMP={self.t_us - T0 + 60 * S}\n_BOOT_ID={BOOT}\n"
                f"_HOSTNAME={host}\n_SYSTEMD_UNIT={unit}\n_PID={pid}\n_SYSTEMD_INVOCATION_ID={inv}\n"
                f"SYSLOG_IDENTIFIER={ident}\nPRIORITY=6\nMESSAGE={self.plain()}\n\n")  # fmt: skip


def traffic(seconds: int, start_s: int = 0, pin: int | None = None, fire_after_s: int | None = None,
            timeout_s: int = 5, every_s: int = 2) -> list[Line]:  # fmt: skip
    """A request every `every_s` seconds (Receive on both engines, Finish 1 s later), a prefill
    batch line each second. Request `pin` never finishes: with `fire_after_s` the watchdog
    releases it that long after its Receive; the gauge's floor counts it while it is held."""
    out: list[Line] = []
    held_from = held_to = None
    for s in range(start_s, start_s + seconds):
        t = T0 + s * S
        n = s
        if s % every_s == 0:
            out += [Line(t, "prefill", receive(n, "prefill")), Line(t + 1000, "decode", receive(n, "decode"))]
            if n == pin:
                held_from = s
                held_to = s + fire_after_s if fire_after_s is not None else None
        done = s - 1
        if done % every_s == 0 and done >= start_s and done != pin:
            out += [
                Line(t + 2000, "prefill", finish(done, "prefill")),
                Line(t + 3000, "decode", finish(done, "decode")),
            ]
        if pin is not None and held_to == s:
            out.append(Line(t + 4000, "prefill", fired(pin, timeout_s, fire_after_s or 0)))
        held = held_from is not None and held_from < s and (held_to is None or s <= held_to)
        out.append(Line(t + 500_000, "prefill", prefill_stats(1 if held else 0)))
    return out


def export_text(lines: list[Line]) -> str:
    return "".join(line.export(i) for i, line in enumerate(lines))


def append_journal(path: Path, lines: list[Line]) -> None:
    """systemd-journal-remote appends the entries to the (existing) journal file."""
    subprocess.run([str(JOURNAL_REMOTE), "-o", str(path), "-"], input=export_text(lines).encode(),
                   check=True, capture_output=True)  # fmt: skip


def append_plain(path: Path, lines: list[Line], engine: str = "prefill") -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(line.plain() + "\n" for line in lines if line.engine == engine))
        f.flush()


@dataclass
class WatchProc:
    proc: subprocess.Popen[str]
    status: Path
    out: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def state(self) -> dict[str, Any]:
        try:
            return json.loads(self.status.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def wait_for(self, what: str, pred: Any, timeout: float = WAIT_S) -> dict[str, Any]:
        """Until the watch's status satisfies `pred` (it reports after every poll)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = self.state()
            if st and pred(st):
                return st
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"watch exited {self.proc.returncode} waiting for {what}: {self.stderr()}"
                )
            time.sleep(0.05)
        raise AssertionError(f"watch did not report {what} within {timeout}s; status {self.state()}")

    def wait_lines(self, n: int) -> dict[str, Any]:
        """Until `n` lines (over every run on this database) are folded and written."""
        return self.wait_for(
            f"{n} lines", lambda st: st.get("lines", 0) >= n and st.get("pending_lines", 1) == 0
        )

    def alerts(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.out.read_text().splitlines() if x.startswith("{")]

    def stderr(self) -> str:
        return self.said() if self.proc.poll() is not None else ""

    def said(self) -> str:
        """What the watch has written on stderr so far (each line flushed as it is said)."""
        return (self.status.parent / (self.status.name + ".err")).read_text()

    def wait_said(self, needle: str, timeout: float = WAIT_S) -> str:
        """Until the watch has said a line containing `needle` on stderr; returns that line."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            exited = self.proc.poll() is not None  # before reading: a last line is still read
            line = next((x for x in self.said().splitlines() if needle in x), None)
            if line is not None:
                return line
            if exited:
                raise AssertionError(
                    f"watch exited {self.proc.returncode} before saying {needle!r}: {self.said()}"
                )
            time.sleep(0.05)
        raise AssertionError(f"watch did not say {needle!r} within {timeout}s: {self.said()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def start_watch(tmp: Path, db: Path, *args: str, name: str = "watch") -> WatchProc:
    status, out = tmp / f"{name}.status.json", tmp / f"{name}.out"
    status.unlink(missing_ok=True)
    err = open(tmp / f"{name}.status.json.err", "w")  # noqa: SIM115 - the child writes it
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdforensics", "watch", "--db", str(db), "--json", "--poll", "0.1", "--commit-interval", "0",
         "--status-file", str(status), *args],
        stdout=open(out, "a"), stderr=err, text=True, env=env, cwd=tmp,  # noqa: SIM115
    )  # fmt: skip
    return WatchProc(proc, status, out)
