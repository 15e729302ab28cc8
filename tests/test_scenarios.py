"""Every simulated incident gives its expected verdict, classes and flags — whatever the input format.

The fixtures' expected.json holds the simulator's ground truth; nothing here is hard-coded per
scenario. The same incident is read as a real .journal file (python-systemd), as `journalctl -o json`
lines, as Journal Export Format, and as the plain per-unit logs with each host's zone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source
from pdforensics.sources.journal import JournalSource
from pdforensics.verdict import VerdictOptions, compute_verdict

SCENARIOS = sorted(p.name for p in fixtures_dir().iterdir() if (p / "expected.json").is_file())
FLAGS = ("abort_race", "across_restart", "one_sided")
# Plain logs hold what the process printed, including what journald dropped: no hole to see there.
JOURNAL_ONLY = {"journald_suppression"}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def expected_of(scenario: str) -> dict:
    return json.loads((fixtures_dir() / scenario / "expected.json").read_text())


def options(exp: dict) -> VerdictOptions:
    return VerdictOptions(watchdog_timeout_s=exp.get("verdict_options", {}).get("watchdog_timeout_s"))


def verdict_of(db: Path, exp: dict) -> dict:
    con = store.open_db(db, read_only=True)
    try:
        return compute_verdict(con, options(exp)).to_json()
    finally:
        con.close()


def assert_matches(got: dict, exp: dict, label: str) -> None:
    assert got["verdict"] == exp["verdict"], (label, got["reasons"])
    assert got["evidence_level"] == exp["evidence_level"], label
    reasons = " | ".join(got["reasons"]).lower()
    for needle in exp["reasons_contain"]:
        assert needle.lower() in reasons, (label, needle, got["reasons"])
    assert got["counts"].get("anonymous_pins", 0) == exp["anonymous_pins"], label
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


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_journal_file(scenario: str, tmp_path: Path, catalog, make_journal) -> None:
    exp = expected_of(scenario)
    journal = make_journal((fixtures_dir() / scenario / "journal.export").read_bytes(), "incident.journal")
    db = tmp_path / "j.duckdb"
    ingest(db, [JournalSource("files", [journal])], Selection(), catalog)
    assert_matches(verdict_of(db, exp), exp, f"{scenario} (.journal)")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_json_lines(scenario: str, tmp_path: Path, catalog) -> None:
    exp = expected_of(scenario)
    db = tmp_path / "json.duckdb"
    ingest(db, [open_file_source(fixtures_dir() / scenario / "journal.json")], Selection(), catalog)
    assert_matches(verdict_of(db, exp), exp, f"{scenario} (json)")


@pytest.mark.parametrize("scenario", sorted(set(SCENARIOS) - JOURNAL_ONLY))
def test_plain_logs(scenario: str, tmp_path: Path, catalog) -> None:
    exp = expected_of(scenario)
    db = tmp_path / "plain.duckdb"
    for log in sorted((fixtures_dir() / scenario / "plain").glob("*.log")):
        host = next(h for h in exp["hosts"] if log.name.startswith(h + "-"))
        unit = log.stem[len(host) + 1 :]
        source = open_file_source(log, host=host, unit=unit)
        ingest(db, [source], Selection(), catalog, tz=exp["hosts"][host]["tz"])
    assert_matches(verdict_of(db, exp), exp, f"{scenario} (plain)")
