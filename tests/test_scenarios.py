"""Every simulated incident gives its expected verdict, classes and flags — whatever the input format.

The fixtures' expected.json holds the simulator's ground truth; nothing here is hard-coded per
scenario. The same incident is read as a real .journal file (python-systemd), as `journalctl -o json`
lines, as Journal Export Format, and as the plain per-unit logs with each host's zone.

expected.json may add (see fixtures/README.md):
* `verdict_options.since_us`: the verdict's window starts inside the data (context lies before it);
* `by_input.plain`: what the plain files must give where they differ from the journal (they keep
  what journald dropped): `verdict`, `reasons_contain`, `anonymous_pins`, and the `requests` rows
  that differ (by room);
* `ingests`: the data is stored by separate `ingest --since/--until` runs, in order, each with the
  verdict of its own window; without window options the verdict must judge the last one's.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection, Window
from pdforensics.sources.detect import open_file_source
from pdforensics.sources.journal import JournalSource
from pdforensics.verdict import VerdictOptions, compute_verdict

SCENARIOS = sorted(p.name for p in fixtures_dir().iterdir() if (p / "expected.json").is_file())
FLAGS = ("abort_race", "across_restart", "one_sided")
# Plain logs hold what the process printed, including what journald dropped: no hole to see there.
# A scenario whose plain files must give their own answer says so in `by_input.plain` instead.
JOURNAL_ONLY = {"journald_suppression"}
# Classes whose count the verdict's `counts` must state exactly (each request in one class).
COUNTED = ("watchdog_fired", "silent_pin", "undecided")


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def expected_of(scenario: str, source: str = "journal") -> dict:
    """The ground truth for one kind of input: `by_input[source]` laid over the journal's."""
    exp = json.loads((fixtures_dir() / scenario / "expected.json").read_text())
    over = exp.get("by_input", {}).get(source)
    if over:
        rows = {r["bootstrap_room"]: r for r in exp["requests"]}
        rows.update({r["bootstrap_room"]: r for r in over.get("requests", [])})
        exp = exp | {k: v for k, v in over.items() if k != "requests"} | {"requests": list(rows.values())}
    return exp


def options(exp: dict, since_us: int | None = None, until_us: int | None = None) -> VerdictOptions:
    opts = exp.get("verdict_options", {})
    return VerdictOptions(
        watchdog_timeout_s=opts.get("watchdog_timeout_s"),
        since_us=opts.get("since_us") if since_us is None else since_us,
        until_us=opts.get("until_us") if until_us is None else until_us,
    )


def verdict_of(db: Path, opts: VerdictOptions):
    con = store.open_db(db, read_only=True)
    try:
        return compute_verdict(con, opts)
    finally:
        con.close()


def assert_matches(got: dict, exp: dict, label: str) -> None:
    assert got["verdict"] == exp["verdict"], (label, got["reasons"])
    assert got["evidence_level"] == exp["evidence_level"], label
    reasons = " | ".join(got["reasons"]).lower()
    for needle in exp["reasons_contain"]:
        assert needle.lower() in reasons, (label, needle, got["reasons"])
    if exp["watchdog"]["deployed"] is True:  # the lines say so: an armed line or a firing
        assert got["watchdog"]["deployed"] is True, (label, got["watchdog"])
        assert got["watchdog"]["timeout_s"] == exp["watchdog"]["timeout_s"], (label, got["watchdog"])
    assert got["counts"].get("anonymous_pins", 0) == exp["anonymous_pins"], label
    want_counts = Counter(r["class"] for r in exp["requests"])
    for cls in COUNTED:
        assert got["counts"].get(cls, 0) == want_counts[cls], (label, cls, got["counts"])
    found = {r["bootstrap_room"]: r for r in got["requests"]}
    for want in exp["requests"]:
        room = want["bootstrap_room"]
        if want["class"] == "completed":
            assert room not in found, (label, room, found.get(room))
            continue
        assert room in found, (label, room, want["class"])
        row = found[room]
        assert row["class"] == want["class"], (label, room, row, want)
        for flag in FLAGS:
            assert row[flag] == want[flag], (label, room, flag, row)
    listed = {r["bootstrap_room"] for r in exp["requests"] if r["class"] != "completed"}
    assert set(found) <= listed | {r["bootstrap_room"] for r in exp["requests"]}, label


def windows(exp: dict) -> list[Window]:
    """One Selection window per ingest run (one unbounded run when the scenario has none)."""
    return [Window(w["since_us"], w["until_us"]) for w in exp.get("ingests", [])] or [Window()]


def assert_ingests(db: Path, exp: dict, label: str) -> None:
    """With separate ingest runs: each window's own verdict, and the last run's window by default."""
    runs = exp.get("ingests", [])
    if not runs:
        return
    for run in runs:
        got = verdict_of(db, options(exp, run["since_us"], run["until_us"]))
        assert got.verdict == run["verdict"], (label, run, got.reasons)
    default = verdict_of(db, options(exp))
    last = runs[-1]
    assert default.window_start_us is not None and default.window_end_us is not None, label
    assert last["since_us"] <= default.window_start_us <= default.window_end_us <= last["until_us"], (
        label,
        default.window_start_us,
        default.window_end_us,
        last,
    )


def check(db: Path, exp: dict, label: str) -> None:
    assert_matches(verdict_of(db, options(exp)).to_json(), exp, label)
    assert_ingests(db, exp, label)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_journal_file(scenario: str, tmp_path: Path, catalog, make_journal) -> None:
    exp = expected_of(scenario)
    journal = make_journal((fixtures_dir() / scenario / "journal.export").read_bytes(), "incident.journal")
    db = tmp_path / "j.duckdb"
    for window in windows(exp):
        ingest(db, [JournalSource("files", [journal])], Selection(window=window), catalog)
    check(db, exp, f"{scenario} (.journal)")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_json_lines(scenario: str, tmp_path: Path, catalog) -> None:
    exp = expected_of(scenario)
    db = tmp_path / "json.duckdb"
    for window in windows(exp):
        source = open_file_source(fixtures_dir() / scenario / "journal.json")
        ingest(db, [source], Selection(window=window), catalog)
    check(db, exp, f"{scenario} (json)")


@pytest.mark.parametrize("scenario", sorted(set(SCENARIOS) - JOURNAL_ONLY))
def test_plain_logs(scenario: str, tmp_path: Path, catalog) -> None:
    exp = expected_of(scenario, "plain")
    db = tmp_path / "plain.duckdb"
    for window in windows(exp):
        for log in sorted((fixtures_dir() / scenario / "plain").glob("*.log")):
            host = next(h for h in exp["hosts"] if log.name.startswith(h + "-"))
            unit = log.stem[len(host) + 1 :]
            source = open_file_source(log, host=host, unit=unit)
            ingest(db, [source], Selection(window=window), catalog, tz=exp["hosts"][host]["tz"])
    check(db, exp, f"{scenario} (plain)")


def test_plain_overrides_only_where_the_input_differs() -> None:
    """`by_input.plain` exists only where journald dropped lines the plain files kept, and each of
    its rows really differs from the journal's row of that room."""
    seen = 0
    for scenario in SCENARIOS:
        exp = json.loads((fixtures_dir() / scenario / "expected.json").read_text())
        plain = exp.get("by_input", {}).get("plain")
        if plain is None:
            continue
        seen += 1
        assert "Suppressed " in (fixtures_dir() / scenario / "journal.json").read_text(), scenario
        journal_rows = {r["bootstrap_room"]: r for r in exp["requests"]}
        assert plain["verdict"] != exp["verdict"] or plain["requests"], scenario
        for row in plain["requests"]:
            assert journal_rows.get(row["bootstrap_room"]) != row, (scenario, row)
    assert seen, "no scenario has by_input.plain"


# Lines the new scenarios' answers rest on: each must be recognised (lines.event set), or the
# verdict cannot state what decided it. (`Caught signal 11` is UCX's own format, no SGLang prefix.)
DECISIVE_LINES = {
    "prefill_dies_no_restart": (
        "Caught signal 11 (Segmentation fault",
        "Main process exited, code=killed, status=11/SEGV",
        "Failed with result 'signal'.",
    ),
    "prefill_dies_scheduler_watchdog": (
        "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "Main process exited, code=killed, status=9/KILL",
    ),
    "hole_hides_firing": ("Suppressed 226 messages from", "Suppressed 40 messages from"),
    "window_starts_after_armed": ("inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s",),
}


@pytest.mark.parametrize("scenario", sorted(DECISIVE_LINES))
def test_decisive_lines_are_recognised(scenario: str, tmp_path: Path, catalog) -> None:
    db = tmp_path / "lines.duckdb"
    ingest(db, [open_file_source(fixtures_dir() / scenario / "journal.json")], Selection(), catalog)
    con = store.open_db(db, read_only=True)
    try:
        for needle in DECISIVE_LINES[scenario]:
            rows = con.execute("SELECT event FROM lines WHERE contains(message, ?)", [needle]).fetchall()
            assert rows, (scenario, needle, "not stored")
            assert all(event is not None for (event,) in rows), (scenario, needle, "not recognised")
    finally:
        con.close()
