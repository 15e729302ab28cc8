"""`pdforensics watch` following a real journal (systemd-journal-remote appending to a .journal
file) and a plain log being written and rotated; alerts in log time, once each, across SIGKILL."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from pdforensics.catalog import load_catalog
from pdforensics.watch import WatchConfig, Watcher, build_followers, human
from tests.conftest import JOURNAL_REMOTE, REPO
from tests.watch_helpers import (
    T0,
    Line,
    S,
    append_journal,
    append_plain,
    armed,
    fired,
    prefill_stats,
    receive,
    room,
    start_watch,
    traffic,
)

pytestmark = pytest.mark.skipif(not JOURNAL_REMOTE.exists(), reason="systemd-journal-remote is not installed")

TIMEOUT_S, GRACE_S = 5, 10
PIN = 4  # the request (seconds after T0 of its Receive) that the scenarios hold
ARGS = ("--watchdog-timeout", str(TIMEOUT_S))


def feed(watch, journal: Path, lines: list[Line], chunk_s: int = 5) -> None:  # type: ignore[no-untyped-def]
    """Append `lines` a few seconds of log time at a time, each chunk consumed before the next."""
    total = watch.state().get("lines", 0)
    start = lines[0].t_us
    while lines:
        cut = [x for x in lines if x.t_us < start + chunk_s * S]
        lines = lines[len(cut) :]
        start += chunk_s * S
        if cut:
            append_journal(journal, cut)
            total += len(cut)
            watch.wait_for(f"{total} lines", lambda st, n=total: st.get("lines", 0) >= n)


def db_rows(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("scenario", ["silent_pin", "fired", "healthy"])
def test_journal_follow_alerts_in_log_time(tmp_path: Path, scenario: str) -> None:
    # a systemd-journal-remote collection: a directory with the .journal file it appends to
    (tmp_path / "remote").mkdir()
    journal, db = tmp_path / "remote" / "remote-gpu-a.journal", tmp_path / "w.duckdb"
    kw = {"silent_pin": {"pin": PIN}, "fired": {"pin": PIN, "fire_after_s": 6}, "healthy": {}}[scenario]
    lines = traffic(40, timeout_s=TIMEOUT_S, **kw)  # type: ignore[arg-type]
    append_journal(journal, lines[:3])  # the file exists before the watch starts
    hook = tmp_path / "hook.jsonl"
    watch = start_watch(tmp_path, db, "-D", str(tmp_path / "remote"), *ARGS,
                        "--exec", f"sh -c 'cat >> {hook}; echo >> {hook}'")  # fmt: skip
    try:
        watch.wait_for("3 lines", lambda st: st.get("lines", 0) >= 3)
        feed(watch, journal, lines[3:])
        watch.wait_lines(len(lines))
    finally:
        assert watch.stop() == 0
    alerts = watch.alerts()
    pin_start = T0 + PIN * S
    if scenario == "silent_pin":
        assert [a["alert"] for a in alerts] == ["silent_pin"]
        a = alerts[0]
        assert a["bootstrap_room"] == str(room(PIN)) and a["rid"] == "p4" and a["decode_rid"] == "d4"
        assert a["host"] == "gpu-a" and a["evidence_level"] == "L1" and a["dwell_s"] >= TIMEOUT_S + GRACE_S
        assert a["detected_us"] - pin_start <= (TIMEOUT_S + GRACE_S + 5) * S
    elif scenario == "fired":
        assert [a["alert"] for a in alerts] == ["watchdog_fired"]
        line = next(x for x in lines if "inflight watchdog:" in x.text)
        a = alerts[0]
        assert (
            a["bootstrap_room"] == str(room(PIN))
            and a["state"] == "KVPoll.Transferring"
            and a["ranks"] == [0]
        )
        assert 0 <= a["detected_us"] - line.t_us <= 5 * S
    else:
        assert alerts == []
    hooked = [x for x in hook.read_text().splitlines() if x.strip()] if hook.exists() else []
    assert len(hooked) == len(alerts)  # --exec ran once per alert, the alert on its stdin
    # every line stored once, and the database answers like the watch
    assert db_rows(db, "SELECT count(*), count(DISTINCT (source_key, seq)) FROM lines") == [(len(lines),) * 2]
    verdict = subprocess.run(
        [sys.executable, "-m", "pdforensics", "verdict", "--db", str(db), *ARGS, "--check"],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert verdict.returncode == {"silent_pin": 2, "fired": 1, "healthy": 0}[scenario], verdict.stdout


def test_sigkill_and_restart_neither_lose_nor_repeat(tmp_path: Path) -> None:
    journal, db = tmp_path / "remote.journal", tmp_path / "w.duckdb"
    first = traffic(24, pin=PIN)  # the silent pin becomes true at ~19.5 s
    second = traffic(30, start_s=24, pin=30, fire_after_s=6, timeout_s=TIMEOUT_S)  # then a firing
    append_journal(journal, first[:2])
    watch = start_watch(tmp_path, db, "--journal-file", str(journal), *ARGS)
    watch.wait_for("2 lines", lambda st: st.get("lines", 0) >= 2)
    feed(watch, journal, first[2:])
    watch.wait_for("the silent pin", lambda st: st.get("alerts", 0) >= 1 and st.get("pending_lines") == 0)
    watch.kill()  # SIGKILL: no chance to flush or say goodbye
    down = [x for x in second if x.t_us < T0 + 40 * S]  # written while no watch runs: the firing too
    assert any("inflight watchdog:" in x.text for x in down)
    append_journal(journal, down)
    watch = start_watch(tmp_path, db, "--journal-file", str(journal), *ARGS)
    watch.wait_for("the lines written meanwhile", lambda st: st.get("lines", 0) >= len(first) + len(down))
    feed(watch, journal, second[len(down) :])
    watch.wait_lines(len(first) + len(second))
    assert watch.stop() == 0
    alerts = watch.alerts()  # both runs appended to the same output
    assert sorted(a["id"] for a in alerts) == sorted({a["id"] for a in alerts})  # none repeated
    assert {(a["alert"], a["bootstrap_room"]) for a in alerts} == {
        ("silent_pin", str(room(PIN))), ("watchdog_fired", str(room(30)))
    }  # fmt: skip
    total = len(first) + len(second)
    assert db_rows(db, "SELECT count(*), count(DISTINCT (source_key, seq)) FROM lines") == [(total, total)]


def test_plain_file_followed_across_rotation(tmp_path: Path) -> None:
    log, db = tmp_path / "prefill.log", tmp_path / "w.duckdb"
    lines = [x for x in traffic(40, pin=PIN) if x.engine == "prefill"]
    log.write_text("")
    watch = start_watch(tmp_path, db, "--file", str(log), "--tz", "UTC", "--host", "gpu-a", *ARGS)
    try:
        half = len(lines) // 2
        append_plain(log, lines[:half])
        watch.wait_lines(half)
        log.rename(tmp_path / "prefill.log.1")  # logrotate: rename, then a new file
        with open(tmp_path / "prefill.log.1", "a") as old:  # the writer still holds the old one
            old.write(lines[half].plain() + "\n")
        append_plain(log, lines[half + 1 :])
        watch.wait_lines(len(lines))
    finally:
        assert watch.stop() == 0
    assert [a["alert"] for a in watch.alerts()] == ["silent_pin"]
    assert db_rows(
        db, "SELECT count(*), count(DISTINCT (source_key, seq)), count(DISTINCT source_key) FROM lines"
    ) == [(len(lines), len(lines), 2)]


def test_verdict_sql_report_beside_a_writing_watch(tmp_path: Path) -> None:
    journal, db = tmp_path / "remote.journal", tmp_path / "w.duckdb"
    lines = traffic(60, pin=PIN)
    append_journal(journal, lines[:20])
    watch = start_watch(tmp_path, db, "--journal-file", str(journal), *ARGS)
    try:
        watch.wait_lines(20)
        rest = lines[20:]
        writer = threading.Thread(target=feed, args=(watch, journal, rest, 2))
        writer.start()  # the watch writes a transaction per poll while the readers run
        cli = [sys.executable, "-m", "pdforensics"]
        runs = [
            [*cli, "verdict", "--db", str(db), *ARGS],
            [*cli, "sql", "--db", str(db), "--format", "csv", "SELECT count(*) AS n FROM lines"],
            [*cli, "report", "--db", str(db), *ARGS, "--out", str(tmp_path / "r.html")],
        ]
        results = [subprocess.run(r, capture_output=True, text=True, cwd=REPO, check=False) for r in runs]
        writer.join()
        watch.wait_lines(len(lines))
    finally:
        assert watch.stop() == 0
    for r in results:
        assert r.returncode == 0, r.stderr
    assert "verdict:" in results[0].stdout
    assert results[1].stdout.splitlines()[0] == "n" and int(results[1].stdout.splitlines()[1]) >= 20
    assert (tmp_path / "r.html").stat().st_size > 0


@pytest.mark.parametrize(("kw", "code"), [({"pin": PIN}, 2), ({"pin": PIN, "fire_after_s": 6}, 1), ({}, 0)])
def test_once_exits_with_the_check_codes(tmp_path: Path, kw: dict, code: int) -> None:
    journal = tmp_path / "j.journal"
    append_journal(journal, traffic(40, timeout_s=TIMEOUT_S, **kw))
    proc = subprocess.run(
        [sys.executable, "-m", "pdforensics", "watch", "--db", str(tmp_path / "w.duckdb"), "--journal-file",
         str(journal), *ARGS, "--once", "--json"], capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode == code, proc.stderr
    assert len(proc.stdout.splitlines()) == (0 if code == 0 else 1)


def test_an_alert_log_on_a_full_disk_does_not_stop_the_watch(tmp_path: Path, full_folder: Path) -> None:
    """Issue 29, item 6: the alert is delivered, the watch goes on to its verdict (exit 2 for the
    pin, not 70), and stderr says once that the alert log cannot be written."""
    journal = tmp_path / "j.journal"
    append_journal(journal, traffic(40, timeout_s=TIMEOUT_S, pin=PIN))
    proc = subprocess.run(
        [sys.executable, "-m", "pdforensics", "watch", "--db", str(tmp_path / "w.duckdb"), "--journal-file",
         str(journal), *ARGS, "--once", "--json", "--alert-log", str(full_folder / "alerts.jsonl")],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stdout.splitlines()) == 1, "the alert was delivered"
    assert proc.stderr.count("cannot write the alert log") == 1, proc.stderr


SYSTEMD_DIR = REPO / "contrib" / "systemd"


def test_service_files_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    units = sorted(SYSTEMD_DIR.glob("pdforensics-*"))
    assert {u.name for u in units} == {
        "pdforensics-watch.service", "pdforensics-check.service", "pdforensics-check.timer"
    }  # fmt: skip
    # ExecStart must name an existing binary for verify: point it at this checkout's entry point
    exe = Path(sys.executable).parent / "pdforensics"
    for u in units:
        (tmp_path / u.name).write_text(u.read_text().replace("/usr/local/bin/pdforensics", str(exe)))
    proc = subprocess.run([analyze, "verify", *[str(tmp_path / u.name) for u in units]],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if "System has not been booted with systemd" in proc.stderr or "Failed to connect" in proc.stderr:
        pytest.skip(f"systemd-analyze cannot run here: {proc.stderr.strip().splitlines()[0]}")
    assert proc.returncode == 0, proc.stderr
    service = (SYSTEMD_DIR / "pdforensics-watch.service").read_text()
    for needed in (
        "DynamicUser=yes",
        "SupplementaryGroups=systemd-journal",
        "StateDirectory=",
        "ProtectSystem=strict",
    ):
        assert needed in service


def _once_alerts(tmp_path: Path, lines: list[Line], args: tuple[str, ...] = ARGS) -> list[dict]:
    journal = tmp_path / "j.journal"
    append_journal(journal, sorted(lines, key=lambda x: x.t_us))
    proc = subprocess.run(
        [sys.executable, "-m", "pdforensics", "watch", "--db", str(tmp_path / "w.duckdb"), "--journal-file",
         str(journal), *args, "--once", "--json"], capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1, 2, 3), proc.stderr
    return [json.loads(x) for x in proc.stdout.splitlines()]


def test_holes_and_engines_alert_once(tmp_path: Path) -> None:
    # the decode stops logging at 10 s while p4 is held; journald drops prefill lines at 12 s
    lines = [x for x in traffic(40, pin=PIN) if not (x.engine == "decode" and x.t_us > T0 + 10 * S)]
    lines.append(Line(T0 + 12 * S, "journald", "Suppressed 1234 messages from sglang-prefill.service"))
    alerts = _once_alerts(tmp_path, lines)
    kinds = [a["alert"] for a in alerts]
    assert sorted(kinds) == ["engine_silent", "journald_suppression", "silent_pin"]
    by = {a["alert"]: a for a in alerts}
    assert by["journald_suppression"]["suppressed"] == 1234 and by["journald_suppression"]["host"] == "gpu-a"
    assert by["engine_silent"]["engine"] == "decode" and by["engine_silent"]["host"] == "gpu-b"
    assert by["silent_pin"]["possibly_hidden"] is True  # the hole is after its start: its end may be in it


def test_engine_down_while_requests_are_open(tmp_path: Path) -> None:
    lines = [x for x in traffic(40, pin=PIN) if not (x.engine == "decode" and x.t_us > T0 + 10 * S)]
    lines.append(
        Line(
            T0 + 10 * S + 5000,
            "decode",
            "SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
        )
    )
    alerts = [a for a in _once_alerts(tmp_path, lines) if a["alert"].startswith("engine_")]
    assert [(a["alert"], a["engine"]) for a in alerts] == [("engine_down", "decode")]
    assert alerts[0]["since"] == "2026-11-30T00:53:30.005000Z"


def test_anonymous_pins_at_l0(tmp_path: Path) -> None:
    # gauge lines only (default INFO logging): the floor is 1 from 3 s on and never drains
    stats = [x for x in traffic(40) if "Prefill batch" in x.text]
    lines = [Line(x.t_us, "prefill", prefill_stats(1 if x.t_us > T0 + 3 * S else 0)) for x in stats]
    alerts = _once_alerts(tmp_path, lines)
    assert [(a["alert"], a["floor"], a["anonymous"], a["evidence_level"]) for a in alerts] == [
        ("anonymous_pin", 1, 1, "L0")
    ]
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    assert _once_alerts(healthy, [Line(x.t_us, "prefill", prefill_stats(0)) for x in stats]) == []


def test_wall_clock_calls_a_pin_when_the_logs_go_quiet(tmp_path: Path) -> None:
    """Live, "now" is also the wall clock (injected here): a prefill that stops logging after a
    request arrived still gets its pin called at the deadline, not at its next line."""
    journal = tmp_path / "j.journal"
    append_journal(journal, [x for x in traffic(8, pin=PIN) if x.t_us <= T0 + 5 * S])
    now = [T0 + 6 * S]
    sink = io.StringIO()
    cfg = WatchConfig(
        db=tmp_path / "w.duckdb", followers=build_followers(None, [journal], None, ("sglang*",), None, None),
        catalog=load_catalog([]), watchdog_timeout_s=TIMEOUT_S, wall_clock=True, json_out=True, out=sink,
        clock=lambda: now[0],
    )  # fmt: skip
    w = Watcher(cfg)
    w.start()
    w.poll()
    assert sink.getvalue() == ""
    now[0] = T0 + PIN * S + (TIMEOUT_S + GRACE_S) * S - 1  # just before the deadline: nothing yet
    w.poll()
    assert sink.getvalue() == ""
    now[0] += 2 * S
    w.poll()
    alerts = [json.loads(x) for x in sink.getvalue().splitlines()]
    (alert,) = [a for a in alerts if a["alert"] == "silent_pin"]
    assert alert["bootstrap_room"] == str(room(PIN)) and alert["detected_us"] == now[0]
    # and both engines have now been silent longer than timeout + grace with a request open
    assert sorted((a["alert"], a["engine"]) for a in alerts if a["alert"] != "silent_pin") == [
        ("engine_silent", "decode"), ("engine_silent", "prefill")
    ]  # fmt: skip
    w.flush(wait_s=10, force=True)


def test_plain_file_restart_resumes_at_its_offset(tmp_path: Path) -> None:
    log, db = tmp_path / "prefill.log", tmp_path / "w.duckdb"
    lines = [x for x in traffic(40, pin=PIN) if x.engine == "prefill"]
    half = len(lines) // 2
    append_plain(log, lines[:half])
    with open(log, "a") as f:
        f.write(lines[half].plain()[:30])  # a line still being written: not taken before its newline
    args = ("--file", str(log), "--tz", "UTC", "--host", "gpu-a", *ARGS)
    watch = start_watch(tmp_path, db, *args)
    watch.wait_lines(half)
    watch.kill()
    with open(log, "a") as f:
        f.write(lines[half].plain()[30:] + "\n")
    append_plain(log, lines[half + 1 :])
    watch = start_watch(tmp_path, db, *args)
    watch.wait_lines(len(lines))
    assert watch.stop() == 0
    assert db_rows(db, "SELECT count(*), count(DISTINCT seq) FROM lines") == [(len(lines), len(lines))]
    assert db_rows(db, "SELECT count(*) FROM lines WHERE message = ?", [lines[half].plain()]) == [(1,)]
    assert [a["alert"] for a in watch.alerts()] == ["silent_pin"]


def _ingest_file(db: Path, log: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "pdforensics", "ingest", "--db", str(db), "--file", str(log), "--tz", "UTC",
         "--host", "gpu-a", "--quiet"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert res.returncode in (0, 1), res.stderr  # 1: the verdict's exit for what it found


def _stored_once(db: Path, lines: list[Line]) -> None:
    want = [x.plain() for x in lines]
    assert db_rows(db, "SELECT count(*), count(DISTINCT source_key) FROM lines") == [(len(want), 1)]
    assert sorted(m for (m,) in db_rows(db, "SELECT message FROM lines")) == sorted(want)


def test_a_small_file_watched_then_ingested_grown_is_stored_once(tmp_path: Path) -> None:
    """One identity for a plain file in `watch` and `ingest`, stable while it grows: a file under
    64 KiB watched, then grown and ingested, adds only its new lines (issue 29, item 2)."""
    log, db = tmp_path / "prefill.log", tmp_path / "w.duckdb"
    lines = [x for x in traffic(40, pin=PIN) if x.engine == "prefill"]
    half = len(lines) // 2
    append_plain(log, lines[:half])
    watch = start_watch(tmp_path, db, "--file", str(log), "--tz", "UTC", "--host", "gpu-a", *ARGS)
    watch.wait_lines(half)
    assert watch.stop() == 0
    append_plain(log, lines[half:])
    assert log.stat().st_size < 64 << 10  # its content key changes with every append
    _ingest_file(db, log)
    _stored_once(db, lines)


def test_a_small_file_ingested_then_watched_grown_is_stored_once(tmp_path: Path) -> None:
    log, db = tmp_path / "prefill.log", tmp_path / "w.duckdb"
    lines = [x for x in traffic(40, pin=PIN) if x.engine == "prefill"]
    half = len(lines) // 2
    append_plain(log, lines[:half])
    _ingest_file(db, log)
    append_plain(log, lines[half:])
    watch = start_watch(tmp_path, db, "--file", str(log), "--tz", "UTC", "--host", "gpu-a", *ARGS)
    watch.wait_lines(len(lines))
    assert watch.stop() == 0
    _stored_once(db, lines)


def test_timeout_from_the_armed_line(tmp_path: Path) -> None:
    """No --watchdog-timeout: the `inflight watchdog armed` line's 5 s rules (not the default 300 s)."""
    lines = [Line(T0 - S, "prefill", armed(TIMEOUT_S)), *traffic(40, pin=PIN)]
    (alert,) = _once_alerts(tmp_path, lines, args=())
    assert alert["alert"] == "silent_pin" and alert["timeout_s"] == TIMEOUT_S
    assert alert["timeout_source"] == "armed line"
    other = tmp_path / "default"
    other.mkdir()
    assert _once_alerts(other, traffic(40, pin=PIN), args=()) == []  # 300 s: not yet a pin


def decode_stats(usage: float, prealloc: int, transfer: int) -> str:
    return (f"Decode batch, #running-req: 8, #token: 1000, token usage: {usage:.2f}, #prealloc-req: {prealloc}, "
            f"#transfer-req: {transfer}, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 10.00, "
            f"#queue-req: 0")  # fmt: skip


def test_a_wedge_is_alerted_once_and_firings_carry_the_decode_load(tmp_path: Path) -> None:
    """Every new request fires and nothing completes after the first firing: `wedged`, once; the
    decode was saturated at the firings (token usage 0.97): `backpressure` on each."""
    lines = [Line(T0 + s * S + 200_000, "decode", decode_stats(0.97, 6, 2)) for s in range(0, 60)]
    for k in range(4):
        n = 10 + k * 10
        lines += [
            Line(T0 + n * S, "prefill", receive(n, "prefill")),
            Line(T0 + n * S + 1000, "decode", receive(n, "decode")),
        ]
        lines.append(Line(T0 + (n + 6) * S, "prefill", fired(n, 5, 6.0)))
    lines += [Line(T0 + s * S + 500_000, "prefill", prefill_stats(0)) for s in range(0, 60)]
    alerts = _once_alerts(tmp_path, lines)
    kinds = [a["alert"] for a in alerts]
    assert kinds.count("watchdog_fired") == 4 and kinds.count("wedged") == 1
    wedge = next(a for a in alerts if a["alert"] == "wedged")
    assert wedge["host"] == "gpu-a" and wedge["firings"] == 2  # raised at the second firing
    fired_alerts = [a for a in alerts if a["alert"] == "watchdog_fired"]
    assert all(a["backpressure"] is True and a["decode_token_usage"] == 0.97 for a in fired_alerts)


def test_firings_with_traffic_flowing_between_them_are_no_wedge(tmp_path: Path) -> None:
    lines = traffic(40, pin=PIN, fire_after_s=6) + traffic(40, start_s=41, pin=61, fire_after_s=6)
    alerts = _once_alerts(tmp_path, lines)
    assert [a["alert"] for a in alerts if a["alert"] != "watchdog_fired"] == []
    assert all(a["backpressure"] is None for a in alerts)  # no decode batch line: load unknown


def test_an_alert_line_shows_control_sequences_instead_of_sending_them(tmp_path: Path) -> None:
    """Issue 29, item 7: a rid from a log line carrying OSC 52 and CSI 2J is printed as `\\x1b`
    by the human alert line; the alert log keeps the JSON (escaped by JSON itself)."""
    sink = io.StringIO()
    cfg = WatchConfig(db=tmp_path / "w.duckdb", followers=[], catalog=load_catalog([]), out=sink)
    w = Watcher(cfg)
    evil = "evil\x1b]52;c;aGk=\x07\x1b[2J"
    alert = {
        "id": "a1", "alert": "silent_pin", "host": "gpu-\x1b[31ma", "at": "2026-11-29T12:00:00Z",
        "detected": "2026-11-29T12:01:10Z", "bootstrap_room": "1", "rid": evil, "decode_rid": None,
        "dwell_s": 70.0, "timeout_s": 60.0, "grace_s": 10.0, "evidence_level": "L1", "possibly_hidden": False,
    }  # fmt: skip
    w._deliver(alert)
    out = sink.getvalue()
    assert "\x1b" not in out and "\x07" not in out
    assert "rid=evil\\x1b]52;c;aGk=\\x07\\x1b[2J" in out and "host=gpu-\\x1b[31ma" in out
    logged = json.loads(w.alert_log.read_text().splitlines()[0])
    assert logged["rid"] == evil


def test_a_silent_pin_alert_without_a_decode_rid_does_not_print_none() -> None:
    """Issue 28 item 4: a pin the decode never named has no decode rid; the line says nothing of it."""
    alert = {
        "alert": "silent_pin", "host": "gpu-a", "at": "2026-11-29T12:00:00Z", "detected": "2026-11-29T12:01:10Z",
        "bootstrap_room": "1", "rid": "p1", "decode_rid": None, "dwell_s": 70.0, "timeout_s": 60.0,
        "grace_s": 10.0, "evidence_level": "L1", "possibly_hidden": False,
    }  # fmt: skip
    assert "decode_rid" not in human(alert) and "None" not in human(alert)
    assert "rid=p1 decode_rid=d1 dwell=70.0s" in human({**alert, "decode_rid": "d1"})


# ------------------------------------------------------------------ a watch that talks (issue 28 item 4)


def _once(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pdforensics", "watch", "--db", str(tmp_path / "w.duckdb"), *args, "--once", "--json"],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip


def test_the_first_line_says_what_from_where_timeout_clock_and_metrics(tmp_path: Path) -> None:
    journal = tmp_path / "j.journal"
    append_journal(journal, traffic(20))
    args = ("--journal-file", str(journal), "--listen", "127.0.0.1:0", "--textfile", str(tmp_path / "w.prom"))
    first = _once(tmp_path, *args, *ARGS)
    assert first.returncode in (0, 3), first.stderr
    line = first.stderr.splitlines()[0]
    assert line.startswith(
        f"pdforensics watch: following the journal file {journal}, units sglang*, from its start; "
    )
    assert f"into {tmp_path / 'w.duckdb'}; timeout 5 s (--watchdog-timeout), grace 10 s; " in line
    assert "clock: log (the newest line's time); " in line
    assert re.search(
        rf"metrics: http://127\.0\.0\.1:\d+/metrics, textfile {re.escape(str(tmp_path))}/w\.prom$", line
    )
    again = _once(tmp_path, *args, *ARGS)  # a restart: from the stored position
    assert ", units sglang*, from where the last run stopped; " in again.stderr.splitlines()[0], again.stderr
    (tmp_path / "x").mkdir()
    wall = _once(tmp_path / "x", "--journal-file", str(journal), "--clock", "wall", "--since", "@1796000000")
    line = wall.stderr.splitlines()[0]
    assert ", from 2026-11-30T00:53:20Z; " in line and "clock: wall" in line, wall.stderr
    assert "metrics: none (--listen, --textfile)" in line


def test_a_timeout_the_logs_give_is_said_when_it_replaces_the_default(tmp_path: Path) -> None:
    journal = tmp_path / "j.journal"
    append_journal(journal, [Line(T0 - S, "prefill", armed(TIMEOUT_S)), *traffic(20)])
    proc = _once(tmp_path, "--journal-file", str(journal))
    said = proc.stderr.splitlines()
    assert "timeout 300 s (the default until an armed or a firing line gives the deployment's)" in said[0]
    assert said[1] == "pdforensics watch: timeout now 5 s (the logs' `inflight watchdog armed` line)", said
    restarted = _once(tmp_path, "--journal-file", str(journal))  # the fold's stored state knows it
    assert "timeout 5 s (the logs' `inflight watchdog armed` line)" in restarted.stderr.splitlines()[0]
    assert "timeout now" not in restarted.stderr


def test_a_file_not_there_yet_is_waited_for_and_said(tmp_path: Path) -> None:
    log, db = tmp_path / "prefill.log", tmp_path / "w.duckdb"
    lines = [x for x in traffic(40, pin=PIN) if x.engine == "prefill"]
    watch = start_watch(tmp_path, db, "--file", str(log), "--tz", "UTC", "--host", "gpu-a", *ARGS)
    try:
        assert f"following {log} (not there yet: waiting for it); " in watch.wait_said("following")
        append_plain(log, lines)
        watch.wait_lines(len(lines))
        assert watch.wait_said("appeared") == f"pdforensics watch: {log} appeared: following it"
    finally:
        assert watch.stop() == 0
    assert [a["alert"] for a in watch.alerts()] == ["silent_pin"]


def test_an_empty_journal_remote_collection_is_waited_on_until_its_first_file(tmp_path: Path) -> None:
    """A new journal-remote collection starts empty: the watch says it waits for the first file
    (it exited 3 before), then follows the file journal-remote creates there."""
    remote, db = tmp_path / "remote", tmp_path / "w.duckdb"
    remote.mkdir()
    lines = traffic(40, pin=PIN)
    watch = start_watch(tmp_path, db, "-D", str(remote), *ARGS)
    try:
        said = watch.wait_said("following")
        assert f"the journal directory {remote} (no journal file in it yet: waiting for the first)" in said
        watch.wait_for("a poll of the empty directory", lambda st: st.get("polls", 0) >= 2)
        append_journal(remote / "remote-gpu-a.journal", lines)
        watch.wait_lines(len(lines))
        assert watch.wait_said("appeared") == (
            f"pdforensics watch: {remote}: its first journal file appeared (remote-gpu-a.journal): following it"
        )
    finally:
        assert watch.stop() == 0
    assert [a["alert"] for a in watch.alerts()] == ["silent_pin"]
    assert db_rows(db, "SELECT count(*) FROM lines") == [(len(lines),)]


def test_no_local_journal_is_one_line_and_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from pdforensics import follow
    from pdforensics.cli import app

    empty = tmp_path / "var-log-journal"
    (empty / "0123456789abcdef").mkdir(parents=True)  # journald's machine-id folder, no file in it
    monkeypatch.setattr(follow, "LOCAL_DIRS", (empty, tmp_path / "run-log-journal"))
    db = tmp_path / "w.duckdb"
    # --once: a watch that did not check would run its pass and exit, not follow forever
    res = CliRunner().invoke(app, ["watch", "--db", str(db), "--once"], env={"PDFORENSICS_DEBUG": ""})
    assert res.exit_code == 3, res.output
    assert res.stderr.splitlines() == [
        f"pdforensics: no local journal: no journal file in {empty} or {tmp_path / 'run-log-journal'}; "
        "follow a collection with -D DIR, a file with --journal-file or a log with --file"
    ]
    assert not db.exists()  # said before anything was opened
    append_journal(empty / "0123456789abcdef" / "system.journal", traffic(2))  # now there is one
    (local,) = build_followers(None, None, None, ("sglang*",), None, None)
    assert local.describe() == "the local journal, units sglang*, from its start"
