"""The verdict on worked examples: the demo's story, clock offsets, the materialised views, another
version's database, the real logs and a bulk run. (Every scenario's verdict, classes and flags in
every input form: tests/test_scenarios.py.)
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from pdforensics import report, store, verdict
from pdforensics.catalog import load_catalog
from pdforensics.exporters.common import relations
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection, Window
from pdforensics.sources.detect import open_file_source

# fixtures/README.md: every scenario was generated with this window end (`now`)
FIXTURE_NOW_US = int(datetime(2026, 11, 29, 12, 10, tzinfo=UTC).timestamp() * 1_000_000)


def test_the_demo_story(scenario_db) -> None:
    """decode_restart_old_build, as design.md's worked example tells it (without the watchdog)."""
    exp = json.loads((fixtures_dir() / "decode_restart_old_build" / "expected.json").read_text())
    con = store.open_db(scenario_db("journal_runs", "decode_restart_old_build"), read_only=True)
    try:
        opts = verdict.VerdictOptions(watchdog_timeout_s=60, until_us=FIXTURE_NOW_US)
        v = verdict.compute_verdict(con, opts)
        pins = [r for r in v.requests if r["class"] == "silent_pin"]
        assert len(pins) == 3 and all(r["across_restart"] and r["dwell_s"] > 100 for r in pins)
        timeline = verdict.request_timeline(con, pins[0]["bootstrap_room"], opts)
    finally:
        con.close()
    assert v.deployed is False and "not deployed" in " ".join(v.reasons)
    assert {ln["engine"] for ln in timeline.lines} >= {"prefill", "decode"}
    assert any(ln["event"] == "engine_restart" for ln in timeline.lines)
    assert timeline.request["prefill_rid"] == pins[0]["prefill_rid"]
    text = verdict.render_text(v)
    assert text.startswith("verdict: watchdog_missed") and pins[0]["bootstrap_room"] in text
    assert exp["verdict"] == v.verdict


def test_multihost_clock_offset_is_estimated(scenario_db) -> None:
    con = store.open_db(scenario_db("journal_runs", "multihost_skew"), read_only=True)
    try:
        v = verdict.compute_verdict(
            con, verdict.VerdictOptions(watchdog_timeout_s=60, until_us=FIXTURE_NOW_US)
        )
    finally:
        con.close()
    offsets = {o["host"]: o for o in v.host_offsets}
    # fixtures/README.md: the decode's clock runs 2.5 s ahead of the prefill's
    assert offsets["d-node-01"]["offset_us"] == pytest.approx(2_500_000, abs=50_000)
    assert offsets["p-node-01"]["method"] == "reference"


def test_nested_materialised_reuses_tables_and_follows_options(scenario_db) -> None:
    """`compute_verdict` inside a caller's `materialised()` (the report's way to pay for the views
    once) gives the same answer as on its own, and recomputes the tables when the options differ."""
    con = store.open_db(scenario_db("journal_runs", "decode_restart_old_build"), read_only=True)
    try:
        opts = verdict.VerdictOptions(watchdog_timeout_s=60)
        alone = verdict.compute_verdict(con, opts).to_json()
        alone_default = verdict.compute_verdict(con, verdict.VerdictOptions()).to_json()
        assert alone["watchdog"]["timeout_s"] == 60 and alone_default["watchdog"]["timeout_s"] == 300
        verdict.apply_options(con, opts)
        with verdict.materialised(con):
            assert verdict.compute_verdict(con, opts).to_json() == alone
            assert verdict.compute_verdict(con, verdict.VerdictOptions()).to_json() == alone_default
            # the caller's tables follow the session's options, which the inner call changed
            assert con.execute("SELECT timeout_s FROM verdict").fetchone() == (300,)
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone() == (0,)
    finally:
        con.close()


def test_a_read_only_database_with_another_versions_views_gets_this_versions_fast(
    scenario_db, tmp_path: Path
) -> None:
    """A database another pdforensics wrote (its stored views differ), opened read-only: this
    version's views answer, from the overlay catalog, and `materialised` still shadows the heavy
    ones with their rows: tables, or views of a kept judgement's tables (as temporary views of
    the views they could not be: every reader recomputed them)."""
    fresh = scenario_db("json", "wedge_after_decode_restart")
    con = store.open_db(fresh, read_only=True)
    try:
        want = verdict.compute_verdict(con, verdict.VerdictOptions()).to_json()
    finally:
        con.close()
    old = tmp_path / "old.duckdb"
    shutil.copy(fresh, old)
    con = duckdb.connect(str(old))
    con.execute("CREATE OR REPLACE VIEW context AS SELECT 'another version' AS x")  # would break the stack
    con.execute("UPDATE meta SET value = 'other' WHERE key = ?", [verdict.VIEWS_KEY])
    con.close()
    con = store.open_db(old, read_only=True)
    try:
        assert verdict.compute_verdict(con, verdict.VerdictOptions()).to_json() == want
        verdict.apply_options(con, verdict.VerdictOptions())
        with verdict.materialised(con):
            heavy = ("context", "inflight_gauge", "requests", "verdict")
            assert all(verdict.is_shadowed(con, name) for name in heavy)
        assert con.execute("SELECT count(*) FROM lines").fetchone()[0] > 0, "the tables are the file's"
        assert verdict.data_catalog(con) == "old"
        assert report._meta(con, (0, 1), False)["db"] == "old.duckdb", "the report names the file"
        assert "installed" not in {name for name, _ in relations(con)}, (
            "the overlay's bookkeeping is not data"
        )
        cur = con.cursor()  # a cursor (a fleet instance's) finds the same views
        verdict.ensure_views(cur)
        assert cur.execute("SELECT verdict FROM verdict").fetchone() == (want["verdict"],)
    finally:
        con.close()
    con = duckdb.connect(str(old), read_only=True)
    try:  # the file is untouched
        assert con.execute("SELECT x FROM context").fetchone() == ("another version",)
    finally:
        con.close()


def test_the_views_rank_classes_in_the_order_of_verdict_classes(scenario_db) -> None:
    """`pdf_class_rank` (the views' and saved queries' sort by class) is `verdict.CLASSES`' order."""
    con = store.open_db(scenario_db("journal_runs", "decode_restart_old_build"), read_only=True)
    try:
        ranks = [con.execute("SELECT pdf_class_rank(?)", [c]).fetchone() for c in verdict.CLASSES]
        assert ranks == [(i,) for i in range(1, len(verdict.CLASSES) + 1)]
    finally:
        con.close()


def test_real_logs_give_sensible_requests(real_logs_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "real.duckdb"
    con = store.open_db(db)
    try:
        # one run: excerpts of unrelated incidents on different days, judged together (run by run, the
        # default window would be the last one's)
        sources = [open_file_source(f, host=f.name[:2]) for f in sorted(real_logs_dir.glob("*.log"))]
        ingest(db, sources, Selection(window=Window(), units=("*",)), load_catalog([]), tz="UTC", con=con)
        v = verdict.compute_verdict(con, verdict.VerdictOptions())
    finally:
        con.close()
    classes = {r["bootstrap_room"]: r["class"] for r in v.requests}
    assert v.counts["completed"] == 0  # nothing in these excerpts finished
    aborted = {"3567418963971016156", "7561186998443553199", "806626514800541158"}
    failed = {
        "5975098084415727586",  # timed out after 300.0s in KVPoll.Bootstrapping (05)
        "7565920894338751174",  # Decode handshake failed (08)
        "6721395813317762539",  # Failed to send kv chunk (09)
        "1788380104266545413",  # Unexpected transfer worker error (15)
    }  # fmt: skip
    assert {r for r, c in classes.items() if c == "aborted"} == aborted
    assert {r for r, c in classes.items() if c == "transfer_failed"} == failed
    by_room = {r["bootstrap_room"]: r for r in v.requests}
    # decode past its handshake, the abort raced the transfer, and no prefill line says whether a
    # prefill still holds it: undecided, not aborted
    assert by_room["4793981895866140836"]["abort_race"] and classes["4793981895866140836"] == "undecided"
    assert not by_room["7561186998443553199"]["abort_race"]  # hit the bootstrap queue
    # SGLang's own waiting timeout on the decode (07): the decode gave up after it had sent its
    # metadata, and no prefill line says whether the prefill still holds the KV transfer
    for room in ("8360203925601259718", "4699239566385471430"):
        assert classes[room] == "undecided"
        assert by_room[room]["reason"].startswith("upstream_timeout (waiting_timeout): ")
    # the decode-only rooms cannot say whether a prefill still holds them: never nothing_stuck
    assert v.verdict == "inconclusive" and v.counts["undecided"] >= 1


@pytest.mark.slow
def test_fifty_thousand_requests(tmp_path: Path) -> None:
    """The 1M benchmark's generator at a test-sized scale: the classes come out right in bulk."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import verdict_1m  # type: ignore[import-not-found]

    db = tmp_path / "bulk.duckdb"
    verdict_1m.build(db, 50_000)
    con = store.open_db(db, read_only=True)
    try:
        v = verdict.compute_verdict(con, verdict.VerdictOptions())
    finally:
        con.close()
    c = v.counts
    assert c["requests"] == 50_000 and c["aborted"] == 500 and c["silent_pin"] == 1
    assert c["in_flight"] + c["completed"] + c["aborted"] + c["silent_pin"] == 50_000
    assert v.verdict == "watchdog_missed" and v.timeout_s == 60.0
    offsets = {o["host"]: o["offset_us"] for o in v.host_offsets}
    assert offsets["d-node"] == pytest.approx(verdict_1m.SKEW_US, abs=10_000)
