"""`ingest --since` on a deployment up for hours: the window is read with its context.

The operator's command is `ingest --since 6min`. The prefill armed the inflight watchdog when it
started, 5 h before that window; without that line the verdict falls back to a 300 s timeout and
cannot judge a 6-minute window. An ingest of a window therefore also stores each selected unit's
incarnation start (through the journal's own per-unit and per-invocation indexes) and the
`context_before_window_us` before `--since`, as context the verdict reads and never judges. Checked
here from a `.journal` file, a `-D` collection and the local journal path (a test journal bound over
/var/log/journal in a private mount namespace), against the verdict of the whole journal.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pdforensics import store
from pdforensics.api import run_ingest, run_simulate, run_verdict
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.sources import Selection, Window
from pdforensics.sources.journal import HEAD_ENTRIES, JournalSource
from pdforensics.timewindow import context_before_window_us
from pdforensics.verdict import VerdictOptions, compute_verdict, install_views
from tests.conftest import export_to_journal

SCENARIO = "long_running_watchdog_missed"
NOW = "2026-11-29T12:10:00Z"
WINDOW_S = 360  # the operator's --since 6min, at the incident's end


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("long_running")
    path = run_simulate(SCENARIO, out / "incident", NOW, 0, 1.0, now_us=0, journal_remote=out / "remote")
    expected = json.loads((path / "expected.json").read_text())
    journal = export_to_journal((path / "journal.export").read_bytes(), out / "system.journal")
    end = expected["window"]["until_us"]
    return {"out": out, "expected": expected, "journal": journal, "remote": out / "remote", "end_us": end}


def _ingest(db: Path, incident: dict[str, Any], since: str | None, **source: Any) -> Any:
    args = {"directories": None, "journal_files": None} | source
    summary, verdict = run_ingest(
        db, since, None, None, args["directories"], args["journal_files"], None, None, None, None, None,
        None, False, incident["end_us"],
    )  # fmt: skip
    return summary, verdict


def _since(incident: dict[str, Any]) -> str:
    return f"@{(incident['end_us'] - WINDOW_S * 1_000_000) / 1e6:.6f}"


def _silent(verdict: Any) -> set[int]:
    return {r["bootstrap_room"] for r in verdict.requests if r["class"] == "silent_pin"}


@pytest.fixture(scope="module")
def whole(incident: dict[str, Any]) -> tuple[Any, Any, int]:
    db = incident["out"] / "whole.duckdb"
    summary, verdict = _ingest(db, incident, None, journal_files=[incident["journal"]])
    return summary, verdict, summary.stored


def _same_as_whole(summary: Any, verdict: Any, whole: tuple[Any, Any, int], incident: dict[str, Any]) -> None:
    _, all_verdict, all_lines = whole
    assert all_verdict.verdict == incident["expected"]["verdict"] == "watchdog_missed"
    assert verdict.verdict == all_verdict.verdict, verdict.reasons
    assert (
        (verdict.timeout_s, verdict.timeout_source)
        == (all_verdict.timeout_s, "armed line")
        == (60.0, "armed line")
    )
    assert verdict.deployed is True
    pins = _silent(all_verdict)
    assert len(pins) == 3 and _silent(verdict) == pins
    # read through the indexes: the units' starts and the window's context, not the 5 hours between
    assert 0 < summary.head_lines <= 2 * HEAD_ENTRIES
    assert summary.stored < all_lines / 2, (summary.stored, all_lines)


def test_a_journal_file_window_gives_the_whole_journals_verdict(incident, whole, tmp_path):
    summary, verdict = _ingest(
        tmp_path / "w.duckdb", incident, _since(incident), journal_files=[incident["journal"]]
    )
    _same_as_whole(summary, verdict, whole, incident)


def test_a_journal_remote_collection_window_gives_the_whole_journals_verdict(incident, whole, tmp_path):
    summary, verdict = _ingest(
        tmp_path / "w.duckdb", incident, _since(incident), directories=[incident["remote"]]
    )
    _same_as_whole(summary, verdict, whole, incident)


def test_the_local_journal_window_gives_the_whole_journals_verdict(incident, whole, tmp_path):
    """The local journal path, with the test journal bound over /var/log/journal in a mount
    namespace of its own (the machine's journal is not touched)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot make a mount namespace here (needs root or user namespaces)")
    machine = Path("/etc/machine-id").read_text().strip() or "0" * 32
    local = tmp_path / "journal"
    (local / machine).mkdir(parents=True)
    shutil.copyfile(incident["journal"], local / machine / "system.journal")
    empty = tmp_path / "run-journal"
    empty.mkdir()
    db = tmp_path / "w.duckdb"
    code = (
        "import sys; from pathlib import Path; from pdforensics.api import run_ingest; "
        f"s, v = run_ingest(Path({str(db)!r}), {_since(incident)!r}, None, None, None, None, None, None, None, "
        f"None, None, None, False, {incident['end_us']}); "
        "import json; print(json.dumps({'verdict': v.verdict, 'timeout': [v.timeout_s, v.timeout_source], "
        "'pins': sorted(r['bootstrap_room'] for r in v.requests if r['class'] == 'silent_pin'), "
        "'heads': s.head_lines, 'stored': s.stored, 'window': [v.window_start_us, v.window_end_us]}))"
    )
    mounts = f"mount --bind {local} /var/log/journal"
    if Path("/run/log/journal").is_dir():
        mounts += f" && mount --bind {empty} /run/log/journal"
    res = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", f'{mounts} && exec "$0" -c "$1"', sys.executable, code],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    _, all_verdict, all_lines = whole
    assert got["verdict"] == all_verdict.verdict == "watchdog_missed"
    assert got["timeout"] == [60.0, "armed line"]
    assert set(got["pins"]) == _silent(all_verdict)
    assert got["heads"] > 0 and got["stored"] < all_lines / 2
    # The window the ingest judged is the one every later verdict judges: it ends where the reading
    # ended (issue 28: the ingest said 175 s and the next verdict 170 s)
    later = run_verdict(db, None, None, None, None, incident["end_us"] + 3_600_000_000)
    assert [later.window_start_us, later.window_end_us] == got["window"], (later.window_start_us, got)
    assert got["window"][1] >= incident["end_us"] and later.verdict == got["verdict"]


def test_without_the_units_starts_the_window_cannot_be_judged(incident, tmp_path):
    """What the heads earn: the same window and context without them has no armed line, so the
    timeout is unknown, and the reasons name the option that fixes it, not a longer window."""
    db = tmp_path / "w.duckdb"
    since = incident["end_us"] - WINDOW_S * 1_000_000
    selection = Selection(Window(since, None), context_us=context_before_window_us(None, None), heads=False)
    summary = ingest(db, [JournalSource("files", [incident["journal"]])], selection, load_catalog())
    assert summary.head_lines == 0 and summary.stored > 0
    con = duckdb.connect(str(db))
    install_views(con)
    verdict = compute_verdict(con, VerdictOptions(since_us=since))
    con.close()
    assert verdict.verdict == "inconclusive"
    assert verdict.timeout_source == "default"
    text = " ".join(verdict.reasons)
    assert "--watchdog-timeout" in text and "window of at least" not in text, verdict.reasons


def test_context_reaches_as_far_back_as_the_views_read(tmp_path):
    """The span an ingest reads before --since is the one the views read as context."""
    con = store.open_db(tmp_path / "empty.duckdb")
    install_views(con)
    con.execute("SET VARIABLE pdf_since_us = 1000000000000")
    for timeout, grace in ((None, None), (60.0, None), (600.0, 20.0), (1.0, 0.0)):
        for name, value in (("pdf_watchdog_timeout_s", timeout), ("pdf_grace_s", grace)):
            con.execute(f"SET VARIABLE {name} = {'NULL' if value is None else value}")
        row = con.execute("SELECT start_t - ctx_start_t FROM settings").fetchone()
        assert row is not None and row[0] == context_before_window_us(timeout, grace), (timeout, grace)
    con.close()


def test_every_host_of_a_collection_gets_its_units_start(incident, tmp_path):
    """A collection of several hosts runs the same units on each: each host's incarnation start
    is read (the unit's entry list per host), not only the one host's whose entry came last."""
    import re

    from pdforensics.simulate.remote import write_journal_remote

    one = (incident["out"] / "incident" / "journal.export").read_bytes()
    # a second deployment, as its own host with its own invocations (same length: binary fields keep)
    ids = set(re.findall(rb"INVOCATION_ID=([0-9a-f]{32})", one))
    other = one.replace(b"dsv4-node-31", b"dsv4-node-32")
    for inv in ids:
        other = other.replace(inv, inv[::-1])
    export = tmp_path / "two.export"
    export.write_bytes(one + (b"" if one.endswith(b"\n\n") else b"\n") + other)
    remote = tmp_path / "remote"
    assert len(write_journal_remote(export, remote)) == 2
    db = tmp_path / "w.duckdb"
    summary, _ = _ingest(db, incident, _since(incident), directories=[remote])
    assert summary.head_lines > 0
    con = duckdb.connect(str(db), read_only=True)
    armed = con.execute(
        "SELECT host, count(*) FROM events WHERE event = 'watchdog_armed' GROUP BY host ORDER BY host"
    ).fetchall()
    con.close()
    assert armed == [("dsv4-node-31", 1), ("dsv4-node-32", 1)]


def test_a_later_verdict_judges_the_window_not_its_context(incident, tmp_path):
    """`verdict` with no window options after `ingest --since` judges that run's window: the
    context stored before it is read, never judged (window, counts and reasons as at ingest)."""
    db = tmp_path / "w.duckdb"
    _, at_ingest = _ingest(db, incident, _since(incident), journal_files=[incident["journal"]])
    con = store.open_db(db, read_only=True)
    try:
        later = compute_verdict(con, VerdictOptions())
    finally:
        con.close()
    since = incident["end_us"] - WINDOW_S * 1_000_000
    assert later.window_start_us == at_ingest.window_start_us == since
    assert later.window_basis == "last ingest"
    assert (later.verdict, later.counts) == (at_ingest.verdict, at_ingest.counts)


def test_the_ingests_verdict_is_judged_under_its_memory_limit(incident, tmp_path, monkeypatch):
    """The verdict an ingest prints judges every request at once: under DuckDB's default limit (80 %
    of RAM) it was the 10M-line ingest's peak RSS (docs/benchmark.md). It runs under its own limit."""
    from pdforensics import verdict as verdict_module
    from pdforensics.ingest import VERDICT_MEMORY_LIMIT

    limits = []
    judge = verdict_module.compute_verdict

    def judged(con, opts):  # type: ignore[no-untyped-def]
        limits.append(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        return judge(con, opts)

    monkeypatch.setattr(verdict_module, "compute_verdict", judged)
    _, verdict = _ingest(tmp_path / "m.duckdb", incident, None, journal_files=[incident["journal"]])
    duck = duckdb.connect()
    duck.execute(f"SET memory_limit = '{VERDICT_MEMORY_LIMIT}'")
    assert limits == [duck.execute("SELECT current_setting('memory_limit')").fetchone()[0]]
    assert limits[0] != duckdb.connect().execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert verdict.verdict == incident["expected"]["verdict"] and len(_silent(verdict)) == 3
