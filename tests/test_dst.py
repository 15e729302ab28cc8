"""Plain logs in local time across the autumn DST change (issue 29, item 1).

Europe/Berlin repeats 02:00-03:00 on 2026-10-25 (CEST +02:00, then CET +01:00). A zone-less
time in that hour names two instants; the file's order says which: a step back of about an hour
inside the hour is the clock going back, so lines after it are the hour's second pass. Where the
order cannot say (no step: the other pass logged nothing), the lines are marked and the verdict
is inconclusive, naming them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.sources import Selection
from pdforensics.sources.plain import PlainFileSource
from pdforensics.verdict import VerdictOptions, compute_verdict, install_views

BERLIN = ZoneInfo("Europe/Berlin")
UTC0 = datetime(2026, 10, 24, 23, 30)  # 01:30 CEST: 90 min before the clock goes back at 03:00 CEST
BATCH = "Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, #bootstrap-req: 0, #inflight-req: 0, input throughput (token/s): 0.00"


def local_line(utc: datetime, text: str = BATCH) -> str:
    wall = utc.replace(tzinfo=ZoneInfo("UTC")).astimezone(BERLIN)
    return f"[{wall:%Y-%m-%d %H:%M:%S}] {text}"


DECODE = "Decode batch, #running-req: 0, #token: 0, token usage: 0.00, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 0.00, #queue-req: 0"


def stored_times(
    tmp_path: Path, lines: list[str], batch_size: int, decode: Sequence[str] = ()
) -> list[tuple[int, str]]:
    """The prefill's `lines` (and the decode's) ingested from plain files read in Berlin time:
    each prefill line's stored time and its origin."""
    path = tmp_path / "node-1-sglang-prefill.log"
    path.write_text("\n".join(lines) + "\n")
    paths = [path]
    if decode:
        paths.append(tmp_path / "node-1-sglang-decode.log")
        paths[-1].write_text("\n".join(decode) + "\n")
    db = tmp_path / f"b{batch_size}.duckdb"
    ingest(db, [PlainFileSource(p) for p in paths], Selection(), load_catalog(), tz="Europe/Berlin", views=False,
           batch_size=batch_size)  # fmt: skip
    con = store.open_db(db, read_only=True)
    try:
        return con.execute(
            "SELECT ts_us, ts_origin FROM lines WHERE source LIKE '%prefill%' ORDER BY line_id"
        ).fetchall()
    finally:
        con.close()


def utc_us(utc: datetime) -> int:
    return int(utc.replace(tzinfo=ZoneInfo("UTC")).timestamp() * 1_000_000)


@pytest.mark.parametrize("batch_size", [1000, 7])
def test_the_repeated_hour_is_read_in_file_order(tmp_path: Path, batch_size: int) -> None:
    """A line every 20 s for 3 h of real time: every stored time is the instant it was logged,
    in both passes of the repeated hour, whatever the batch boundaries."""
    instants = [UTC0 + timedelta(seconds=20 * k) for k in range(3 * 180)]
    got = stored_times(tmp_path, [local_line(t) for t in instants], batch_size)
    assert [t for t, _ in got] == [utc_us(t) for t in instants]
    fold = [o for _, o in got if o != "app"]
    assert fold[:1] == ["app_fold1"] and fold[-1] == "app_fold2" and len(fold) == 2 * 180


def test_a_pass_with_no_line_is_unsettled(tmp_path: Path) -> None:
    """Lines only in the second pass (the first logged nothing): the order cannot say which pass
    they are: read as the first and marked so; lines outside the hour are not."""
    before = [UTC0 + timedelta(seconds=20 * k) for k in range(3)]  # 01:30 CEST
    second = [datetime(2026, 10, 25, 1, 10) + timedelta(seconds=20 * k) for k in range(3)]  # 02:10 CET
    after = [datetime(2026, 10, 25, 2, 30)]  # 03:30 CET
    got = stored_times(tmp_path, [local_line(t) for t in before + second + after], 1000)
    assert [o for _, o in got] == ["app"] * 3 + ["app_fold1"] * 3 + ["app"]


def test_an_unsettled_hour_makes_the_window_inconclusive(tmp_path: Path) -> None:
    """The verdict names the hour it could not place; with both passes logged it does not."""

    def judged(lines: list[str], name: str) -> tuple[str, list[str]]:
        sub = tmp_path / name
        sub.mkdir()
        # the decode logged through both passes: only the prefill's file may be unsure
        stored_times(sub, lines, 1000, [local_line(t, DECODE) for t in both])
        con = store.open_db(sub / "b1000.duckdb")
        try:
            install_views(con)
            v = compute_verdict(con, VerdictOptions(watchdog_timeout_s=60))
        finally:
            con.close()
        return v.verdict, v.reasons

    both = [UTC0 + timedelta(seconds=20 * k) for k in range(3 * 180)]
    second_only = [t for t in both if not datetime(2026, 10, 25, 0, 0) <= t < datetime(2026, 10, 25, 1, 0)]
    verdict, reasons = judged([local_line(t) for t in both], "both")
    assert verdict == "nothing_stuck" and not [r for r in reasons if "repeated" in r]
    verdict, reasons = judged([local_line(t) for t in second_only], "second")
    unsettled = [r for r in reasons if "repeated" in r]
    assert verdict == "inconclusive" and len(unsettled) == 1 and unsettled[0].startswith("180 line(s) of ")


def test_a_timeless_line_inside_the_hour_keeps_its_pass(tmp_path: Path) -> None:
    """A line with no time of its own (a traceback line) in the hour's second pass neither ends
    the pass nor starts the first one again: the timed lines after it stay in the second pass."""
    first = [UTC0 + timedelta(minutes=60 + k) for k in range(25, 30)]  # 02:55-02:59 CEST
    second = [datetime(2026, 10, 25, 1, 0) + timedelta(minutes=k) for k in range(6)]  # 02:00-02:05 CET
    lines = [local_line(t) for t in first + second[:3]] + ["Traceback (most recent call last):"]
    lines += [local_line(t) for t in second[3:]]
    got = stored_times(tmp_path, lines, 1000)
    timed = [(t, o) for t, o in got if o != "inherited"]
    assert [t for t, _ in timed] == [utc_us(t) for t in first + second]
    assert [o for _, o in timed] == ["app_fold1"] * 5 + ["app_fold2"] * 6


SIMULATED_CHANGE = "2026-10-25T01:03:00Z"  # 3 min after 03:00 CEST became 02:00 CET (Europe/Berlin)


@pytest.mark.parametrize("scenario", ["decode_restart_old_build", "healthy"])
def test_a_simulated_incident_across_the_change_reads_as_its_journal(tmp_path: Path, scenario: str) -> None:
    """`simulate --tz Europe/Berlin` across the autumn change: the plain files (local time, the
    hour shown twice, a decode restart inside it) read with --tz give the journal's verdict and
    the same silent pins."""
    import json

    from pdforensics.simulate import simulate, simulate_plain
    from pdforensics.timewindow import parse_instant

    now = parse_instant(SIMULATED_CHANGE, 0)
    out = simulate(scenario, tmp_path / "sim", now_us=now, tz="Europe/Berlin")
    simulate_plain(scenario, out, now_us=now, tz="Europe/Berlin")
    expected = json.loads((out / "expected.json").read_text())
    assert {h["tz"] for h in expected["hosts"].values()} == {"Europe/Berlin"}
    walls = [p.read_text() for p in (out / "plain").glob("*.log")]
    assert any("[2026-10-25 02:59:" in w and "[2026-10-25 02:00:" in w for w in walls)  # both passes
    db = tmp_path / "plain.duckdb"
    ingest(db, [PlainFileSource(p) for p in sorted((out / "plain").glob("*.log"))], Selection(),
           load_catalog(), tz="Europe/Berlin")  # fmt: skip
    con = store.open_db(db, read_only=True)
    try:
        opts = expected.get("verdict_options") or {}
        v = compute_verdict(con, VerdictOptions(watchdog_timeout_s=opts.get("watchdog_timeout_s")))
    finally:
        con.close()
    assert v.verdict == expected["verdict"], v.reasons
    # every line at its instant: the window starts where the journal's does, give or take the
    # systemd lines only the journal holds (an hour off if a pass were misread)
    assert (
        v.window_start_us is not None and abs(expected["window"]["since_us"] - v.window_start_us) < 10_000_000
    )
    pins = {r["bootstrap_room"] for r in expected["requests"] if r["class"] == "silent_pin"}
    assert {str(r["bootstrap_room"]) for r in v.requests if r["class"] == "silent_pin"} == pins


def test_simulate_tz_writes_the_change_and_refuses_an_unknown_zone(tmp_path: Path) -> None:
    """`pdforensics simulate --tz ZONE --now` across the change (the DST fixture on demand), and a
    misspelt zone is one line naming the closest (exit 2), before anything is written."""
    from tests.test_cli import assert_one_line_error, run

    out = tmp_path / "inc"
    proc = run("simulate", "decode_restart_old_build", "--tz", "Europe/Berlin", "--now", SIMULATED_CHANGE,
               "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    prefill = next((out / "plain").glob("*prefill*.log")).read_text()
    assert prefill.index("[2026-10-25 02:59:") < prefill.index("[2026-10-25 02:00:")  # the hour twice
    bad = run("simulate", "healthy", "--tz", "Europe/Berln", "--out", str(tmp_path / "bad"))
    assert_one_line_error(bad, 2, "did you mean Europe/Berlin?")
    assert not (tmp_path / "bad").exists()
