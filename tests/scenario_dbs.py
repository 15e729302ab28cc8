"""How the test files ingest the bundled scenarios (fixtures/*/), by name, so that each database is
built once per test run and shared (tests/conftest.py: `scenario_db(recipe, scenario)`).

* `json`: journal.json in one ingest run (`Selection()`, the bundled catalog): the Spark tests, the
  decisive-line checks;
* `json_runs`, `journal_runs`, `plain_runs`: the scenario as tests/test_scenarios.py reads it: one
  ingest run per `ingests` window of expected.json (one unbounded run when it has none), from
  journal.json, a real .journal file (systemd-journal-remote) or the plain per-unit logs with each
  host's zone. tests/test_verdict_property.py judges the `json_runs` database too.

A recipe that reads the same input the same way as another for this scenario uses that one's
database (`json_runs` of a scenario without `ingests` is `json`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection, Window
from pdforensics.sources.detect import open_file_source
from pdforensics.sources.journal import JournalSource


def expected(scenario: str) -> dict:
    return json.loads((fixtures_dir() / scenario / "expected.json").read_text())


def windows(exp: dict) -> list[Window]:
    """One Selection window per ingest run (one unbounded run when the scenario has none)."""
    return [Window(w["since_us"], w["until_us"]) for w in exp.get("ingests", [])] or [Window()]


def json_whole(scenario: str, db: Path) -> None:
    ingest(db, [open_file_source(fixtures_dir() / scenario / "journal.json")], Selection(), load_catalog())


def json_runs(scenario: str, db: Path) -> None:
    for window in windows(expected(scenario)):
        source = open_file_source(fixtures_dir() / scenario / "journal.json")
        ingest(db, [source], Selection(window=window), load_catalog())


def journal_runs(scenario: str, db: Path) -> None:
    from conftest import export_to_journal

    journal = export_to_journal(
        (fixtures_dir() / scenario / "journal.export").read_bytes(), db.parent / "incident.journal"
    )
    for window in windows(expected(scenario)):
        ingest(db, [JournalSource("files", [journal])], Selection(window=window), load_catalog())


def plain_runs(scenario: str, db: Path) -> None:
    from tests.test_scenarios import expected_of

    exp = expected_of(scenario, "plain")
    for window in windows(exp):
        for log in sorted((fixtures_dir() / scenario / "plain").glob("*.log")):
            host = next(h for h in exp["hosts"] if log.name.startswith(h + "-"))
            unit = log.stem[len(host) + 1 :]
            source = open_file_source(log, host=host, unit=unit)
            ingest(db, [source], Selection(window=window), load_catalog(), tz=exp["hosts"][host]["tz"])


RECIPES: dict[str, Callable[[str, Path], None]] = {
    "json": json_whole,
    "json_runs": json_runs,
    "journal_runs": journal_runs,
    "plain_runs": plain_runs,
}


def same_as(recipe: str, scenario: str) -> str:
    """The recipe whose database this one's is (the same input read the same way)."""
    if recipe == "json_runs" and "ingests" not in expected(scenario):
        return "json"
    return recipe
