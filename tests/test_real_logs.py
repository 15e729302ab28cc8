"""The real lines from public bug reports: every failed room becomes a request, never `completed`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source
from pdforensics.verdict import VerdictOptions, compute_verdict

FAILURE = re.compile(
    r"(?:failed for request|timed out after|transfer worker error for room).*?(?:bootstrap_room=|room )(\d+)"
)


@pytest.fixture(scope="module")
def verdict(real_logs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    db = tmp_path_factory.mktemp("real") / "real.duckdb"
    files = sorted(real_logs_dir.glob("*.log"))
    ingest(db, [open_file_source(f) for f in files], Selection(), load_catalog())
    con = store.open_db(db, read_only=True)
    try:
        return compute_verdict(con, VerdictOptions()).to_json()
    finally:
        con.close()


def failed_rooms(real_logs_dir: Path) -> set[str]:
    rooms = set()
    for f in real_logs_dir.glob("*.log"):
        for line in f.read_text().splitlines():
            if not line.startswith("#") and (m := FAILURE.search(line)):
                rooms.add(m.group(1))
    return rooms


def test_every_failed_room_is_a_request_and_not_completed(verdict: dict, real_logs_dir: Path) -> None:
    rooms = failed_rooms(real_logs_dir)
    assert len(rooms) >= 8
    found = {r["bootstrap_room"]: r for r in verdict["requests"]}
    missing = rooms - set(found)
    assert not missing, missing
    assert all(found[room]["class"] != "completed" for room in rooms)


def test_aborts_and_timeouts_get_their_classes(verdict: dict) -> None:
    found = {r["bootstrap_room"]: r for r in verdict["requests"]}
    assert found["3567418963971016156"]["class"] == "aborted"  # Prefill bootstrap failed ... AbortReq
    # the decode's WaitingForInput timeout: the prefill never sent, and no prefill-side timeout
    # covers that state (sglang-log-reference §3), so the prefill may hold it still; no prefill
    # line of that deployment says which prefill, or whether it does (another report's prefill,
    # from another day, is not it)
    waiting = found["8360203925601259718"]
    assert waiting["class"] == "undecided" and waiting["holder_at_end"] == "prefill"
    assert waiting["prefill_status"] == "no_prefill"
    assert waiting["reason"].startswith("upstream_timeout (waiting_timeout)")
    assert found["5975098084415727586"]["class"] == "transfer_failed"  # Bootstrapping timeout, no prefix
    assert found["4793981895866140836"]["abort_race"]  # Decode transfer failed ... AbortReq


def test_no_dwell_is_invented(verdict: dict) -> None:
    # No Receive: line and no start in these excerpts: a dwell would be made up.
    assert all(r["dwell_s"] is None or r["dwell_s"] < 3600 for r in verdict["requests"])


def test_verdict_is_honest_about_level_zero(verdict: dict) -> None:
    assert verdict["evidence_level"] == "L0"
    assert verdict["verdict"] in ("inconclusive", "watchdog_missed")
