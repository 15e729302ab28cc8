"""`pdforensics drill` against the stand-in (`simulate --serve`): real HTTP on 127.0.0.1, real log
files, a real DuckDB. Each build gives its answer; each brake stops the drill when made true.
Bounded: at most 4 requests at once, a few rounds, a 2 s watchdog; every wait has a deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pdforensics.drill import ANSWERS, Brakes, Plan, drill, run_drill
from pdforensics.simulate.serve import Deployment, build_config

Standin = Callable[..., Deployment]


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Standin]:
    """Start a stand-in build on 127.0.0.1 (free ports); stopped at teardown."""
    started: list[Deployment] = []

    def start(build: str, **extra: object) -> Deployment:
        dep = Deployment(build_config(build, tmp_path / f"logs-{len(started)}", **extra)).start()
        started.append(dep)
        return dep

    yield start
    for dep in started:
        dep.stop()


def small_plan(dep: Deployment, **over: object) -> Plan:
    kw: dict = dict(
        router=dep.url(), concurrency=4, rounds=2, warmup=2, watchdog_timeout_s=2.0, grace_s=1.0, poll_s=0.1,
        prompt_tokens=50, max_new_tokens=8,
    )  # fmt: skip
    kw.update(over)
    return Plan(**kw)


def answer_of(dep: Deployment, tmp_path: Path, **over: object):  # type: ignore[no-untyped-def]
    plan = small_plan(dep, **over)
    return drill(plan, tmp_path / "drill.duckdb", files=dep.log_files, tz="UTC")


def most_open_at_once(sent: list) -> int:
    """The most connections the drill held open at one moment, from each one's send and close."""
    edges = sorted(
        [(s.sent_t, 1) for s in sent] + [(s.closed_t, -1) for s in sent], key=lambda e: (e[0], e[1])
    )
    open_now = peak = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    return peak


@pytest.mark.parametrize(
    ("build", "answer"),
    [
        ("race-pins-watchdog", "watchdog_proven"),
        ("race-pins-no-watchdog", "watchdog_missed"),
        ("fixed", "no_pin_under_race"),
        ("fast-transfer", "race_not_reproduced"),
    ],
)
def test_each_build_gives_its_answer(standin: Standin, tmp_path: Path, build: str, answer: str) -> None:
    dep = standin(build)
    a = answer_of(dep, tmp_path)
    c = a.counts
    assert a.answer == answer, (a.reasons, a.caveats)
    assert c["sent"] == 8 and c["aborted"] == 8 and c["errors"] == 0 and not a.brakes
    # never more than the planned concurrency open at once, counted on the drill's side: the
    # stand-in may still hold a connection the drill closed (it notices at its next write, later
    # on a busy machine), so its own count is not the drill's promise
    assert most_open_at_once(a.run.sent) <= 4
    if answer == "watchdog_proven":
        assert c["pinned"] == c["released_by_watchdog"] == c["raced"] == 8 and c["silent_pins"] == 0
        assert dep.state.watchdog_fired == 8 and a.run.final["inflight"] == a.run.baseline["inflight"] == 0
    elif answer == "watchdog_missed":
        assert c["silent_pins"] == 8 and c["released_by_watchdog"] == 0
        assert a.verdict is not None and a.verdict.verdict == "watchdog_missed"
    elif answer == "no_pin_under_race":
        assert c["raced"] == c["released_on_abort"] == 8 and c["pinned"] == 0
    else:
        assert c["raced"] == 0 and a.stronger  # says what would make the drill stronger
        assert a.verdict is not None and a.verdict.verdict == "nothing_stuck"


def test_first_token_aborts_cannot_test_the_watchdog(standin: Standin, tmp_path: Path) -> None:
    """The same racy build, aborted after the transfer: no race, and the answer says so."""
    a = answer_of(standin("race-pins-watchdog"), tmp_path, abort_at="first-token", rounds=1)
    assert a.answer == "race_not_reproduced" and a.counts["raced"] == 0
    assert any("--abort-at transfer" in s for s in a.stronger)


def _rounds_sent(run) -> int:  # type: ignore[no-untyped-def]
    return len([s for s in run.sent if s.round > 0])


@pytest.mark.parametrize(
    ("build", "brakes", "name"),
    [
        ("race-pins-no-watchdog", Brakes(max_inflight_rise=2), "inflight"),
        ("degrading-decode", Brakes(max_throughput_drop=0.5), "throughput"),
        ("failing-router", Brakes(max_errors=2), "errors"),
        ("small-queue", Brakes(max_queued_requests=4), "queue"),
        ("race-pins-watchdog", Brakes(max_duration_s=1.0), "duration"),
    ],
)
def test_each_brake_stops_the_drill(standin: Standin, build: str, brakes: Brakes, name: str) -> None:
    dep = standin(build)
    plan = small_plan(dep, rounds=6, brakes=brakes)
    run = run_drill(plan)
    assert [b["brake"] for b in run.brakes] == [name], run.brakes
    assert _rounds_sent(run) < plan.requests  # stopped before the plan's end
    assert most_open_at_once(run.sent) <= plan.concurrency
    # stopped at once: nothing the drill sent is still open on the stand-in
    deadline = time.monotonic() + 5
    while dep.state.active and time.monotonic() < deadline:
        time.sleep(0.02)
    assert dep.state.active == 0


def test_brakes_do_not_fire_on_a_healthy_drill(standin: Standin) -> None:
    dep = standin("fixed")
    run = run_drill(small_plan(dep, rounds=1, brakes=Brakes(max_inflight_rise=8, max_queued_requests=64)))
    assert run.brakes == [] and _rounds_sent(run) == 4 and run.baseline["throughput"]


def test_a_stop_midway_still_reports(standin: Standin, tmp_path: Path) -> None:
    """Ctrl-C (here: the stop the CLI's handler sets) ends the rounds; the answer still comes."""
    dep = standin("race-pins-watchdog")
    stop = threading.Event()
    timer = threading.Timer(3.0, stop.set)
    timer.start()
    try:
        a = drill(small_plan(dep, rounds=50), tmp_path / "d.duckdb", files=dep.log_files, tz="UTC", stop=stop)
    finally:
        timer.cancel()
    assert a.run.interrupted and a.counts["sent"] < 200 and a.answer in ANSWERS
    assert a.caveats[0].startswith("interrupted: the wait")


def run_cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PDFORENSICS_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "pdforensics", *args],
        capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_cli_plan_dry_run_and_refusal_off_a_terminal(standin: Standin, tmp_path: Path) -> None:
    dep = standin("fixed")
    proc = run_cli("drill", "--router", dep.url(), "--dry-run", "--concurrency", "4")
    assert proc.returncode == 0 and "4 concurrent request(s)" in proc.stdout and "brakes:" in proc.stdout
    assert dep.state.generate_calls == 0  # the plan alone sends nothing
    proc = run_cli("drill", "--router", dep.url(), "--db", str(tmp_path / "x.duckdb"))
    assert proc.returncode == 2 and "pass --yes" in proc.stderr.splitlines()[-1]
    assert dep.state.generate_calls == 0
    proc = run_cli("drill", "--router", "ftp://x", "--dry-run")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    proc = run_cli("drill", "--router", "http://127.0.0.1:9", "--yes", "--db", str(tmp_path / "y.duckdb"))
    assert proc.returncode == 3 and "cannot read the deployment's metrics" in proc.stderr.splitlines()[-1]


def test_cli_check_and_json(standin: Standin, tmp_path: Path) -> None:
    dep = standin("fixed")
    common = [
        "drill", "--router", dep.url(), "--yes", "--concurrency", "3", "--rounds", "1", "--warmup", "1",
        "--prompt-tokens", "50", "--max-new-tokens", "8", "--watchdog-timeout", "2", "--grace", "1",
        "--poll", "0.1", "--tz", "UTC", *(a for f in dep.log_files for a in ("--file", str(f))),
    ]  # fmt: skip
    proc = run_cli(*common, "--db", str(tmp_path / "a.duckdb"), "--check")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("OK - drill no_pin_under_race:") and "raced=3" in proc.stdout
    proc = run_cli(*common, "--db", str(tmp_path / "b.duckdb"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["answer"] == "no_pin_under_race" and out["counts"]["raced"] == 3
    assert out["verdict"]["verdict"] == "nothing_stuck" and out["brakes"] == []


def test_simulate_serve_answers_on_loopback(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdforensics", "simulate", "--serve", "--build", "fixed", "--port", "0",
         "--out", str(tmp_path / "logs")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("stand-in PD deployment: router http://127.0.0.1:"), first
        router = first.split("router ")[1].split(",")[0]
        assert "pdforensics drill --router" in proc.stdout.readline()
        prefill = first.split("prefill ")[1].split(",")[0]
        with urllib.request.urlopen(f"{router}/health", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"{prefill}/metrics", timeout=5) as r:
            assert "sglang:num_prefill_inflight_queue_reqs" in r.read().decode()
        assert (tmp_path / "logs" / "standin-sglang-prefill.log").read_text().count("ready to roll") == 1
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
