"""The verdict end to end: every simulator scenario, read the way a user reads it (a real `.journal`
file, `journalctl -o json` output, plain SGLang logs), must give its expected verdict and the
expected class and flags for every request; the real logs must give sensible requests.
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
from pdforensics.sources.journal import JournalSource
from tests.conftest import export_to_journal

SCENARIOS = sorted(p.name for p in fixtures_dir().iterdir() if (p / "expected.json").exists())
# fixtures/README.md: every scenario was generated with this window end (`now`)
FIXTURE_NOW_US = int(datetime(2026, 11, 29, 12, 10, tzinfo=UTC).timestamp() * 1_000_000)
FLAGS = ("class", "abort_race", "across_restart", "one_sided", "prefill_rid", "decode_rid")


def _zone(tz_min: int) -> str:
    hours, rest = divmod(tz_min, 60)
    assert rest == 0
    return "UTC" if hours == 0 else f"Etc/GMT{'-' if hours > 0 else '+'}{abs(hours)}"


def _plain_sources(name: str) -> list[tuple[object, str]]:
    """Each plain log with its host and that host's zone (plain prefixes are zone-less local time)."""
    from pdforensics.simulate.run import run_world

    _, _, built = run_world(name, FIXTURE_NOW_US, 0, 1.0)
    engines = (built.pre, built.dec) if built.fleet is None else (*built.fleet.pres, *built.fleet.decs)
    hosts = {e.host.name: e.host for e in engines}
    out = []
    for f in sorted((fixtures_dir() / name / "plain").glob("*.log")):
        host = next(h for h in sorted(hosts, key=len, reverse=True) if f.name.startswith(h + "-"))
        out.append((open_file_source(f, host=host), _zone(hosts[host].tz_min)))
    return out


@pytest.fixture(scope="module")
def ingested(built):
    """(scenario, form) -> database path, each ingested once per test run (shared: read it only)."""

    def _build(name: str, form: str, work: Path) -> None:
        db = work / "db.duckdb"
        folder = fixtures_dir() / name
        if form == "journal":
            path = export_to_journal((folder / "journal.export").read_bytes(), work / "system.journal")
            batches = [([JournalSource("files", [path])], None)]
        elif form == "json":
            batches = [([open_file_source(folder / "journal.json")], None)]
        else:
            batches = [([src], tz) for src, tz in _plain_sources(name)]
        con = store.open_db(db)
        try:
            for sources, tz in batches:
                ingest(
                    db, sources, Selection(window=Window(), units=("*",)), load_catalog([]), tz=tz, con=con
                )
        finally:
            con.close()

    def _get(name: str, form: str) -> Path:
        return built(f"verdict-{form}-{name}", lambda work: _build(name, form, work)) / "db.duckdb"

    return _get


def _expected(name: str, form: str) -> dict:
    exp = json.loads((fixtures_dir() / name / "expected.json").read_text())
    plain = exp.get("by_input", {}).get("plain")
    if form == "plain" and plain:
        # what the plain files (which keep what journald dropped) must give instead
        rows = {r["bootstrap_room"]: r for r in plain["requests"]}
        exp = {**exp, **{k: plain[k] for k in ("verdict", "reasons_contain", "anonymous_pins")}}
        exp["requests"] = [rows.pop(r["bootstrap_room"], r) for r in exp["requests"]] + list(rows.values())
    if form == "plain" and name == "journald_suppression":
        # The plain files hold every line the prefill wrote, including the 30 s journald dropped
        # (fixtures/README.md): no hole, so the three pins are proven and the two requests routed
        # during the hole are seen on both engines.
        exp["verdict"] = "watchdog_missed"
        exp["reasons_contain"] = ["silent_pin"]
        for r in exp["requests"]:
            if r["class"] == "undecided":  # no hole in the files: their end is known not to be there
                r["class"] = "silent_pin"
            if r["prefill_rid"] is None:
                r["one_sided"] = False
                r["prefill_rid"] = "*"
    return exp


@pytest.mark.parametrize("form", ["journal", "json", "plain"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_verdict_and_classes(name: str, form: str, ingested) -> None:
    exp = _expected(name, form)
    if "ingests" in exp:
        pytest.skip("judged per ingest run: tests/test_scenarios.py ingests it run by run")
    db = ingested(name, form)
    # plain prefixes are truncated to the second: their first line may fall before the journal's
    since = exp["window"]["since_us"] if form != "plain" else None
    options = {"since_us": since, "until_us": FIXTURE_NOW_US} | exp.get("verdict_options", {})
    opts = verdict.VerdictOptions(**options)
    con = store.open_db(db, read_only=True)
    try:
        v = verdict.compute_verdict(con, opts)
        verdict.apply_options(con, opts)
        with verdict.materialised(con):
            cur = con.execute(f"SELECT room, {', '.join(FLAGS)} FROM requests")
            got = {row[0]: dict(zip(FLAGS, row[1:], strict=True)) for row in cur.fetchall()}
    finally:
        con.close()
    doc = v.to_json()
    assert doc["verdict"] == exp["verdict"], doc["reasons"]
    assert doc["evidence_level"] == exp["evidence_level"]
    assert doc["watchdog"]["timeout_s"] == exp["watchdog"]["timeout_s"]
    assert doc["watchdog"]["deployed"] == exp["watchdog"]["deployed"]
    assert doc["counts"]["anonymous_pins"] == exp["anonymous_pins"]
    for text in exp["reasons_contain"]:
        assert any(text in r for r in doc["reasons"]), (text, doc["reasons"])
    assert set(got) == {r["bootstrap_room"] for r in exp["requests"]}
    for want in exp["requests"]:
        have = got[want["bootstrap_room"]]
        if want["prefill_rid"] == "*":
            want = {**want, "prefill_rid": have["prefill_rid"]}
            assert have["prefill_rid"]
        assert {k: have[k] for k in FLAGS} == {k: want[k] for k in FLAGS}, want["bootstrap_room"]
    # the JSON lists exactly the requests that did not complete, in the contract's shape
    not_completed = {r["bootstrap_room"] for r in exp["requests"] if r["class"] != "completed"}
    assert {r["bootstrap_room"] for r in doc["requests"]} == not_completed
    for r in doc["requests"]:
        assert r["class"] == got[r["bootstrap_room"]]["class"]
        assert r["dwell_s"] is None or r["dwell_s"] >= 0


def test_the_demo_story(ingested) -> None:
    """decode_restart_old_build, as design.md's worked example tells it (without the watchdog)."""
    exp = _expected("decode_restart_old_build", "journal")
    con = store.open_db(ingested("decode_restart_old_build", "journal"), read_only=True)
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


def test_multihost_clock_offset_is_estimated(ingested) -> None:
    con = store.open_db(ingested("multihost_skew", "journal"), read_only=True)
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


def test_nested_materialised_reuses_tables_and_follows_options(ingested) -> None:
    """`compute_verdict` inside a caller's `materialised()` (the report's way to pay for the views
    once) gives the same answer as on its own, and recomputes the tables when the options differ."""
    con = store.open_db(ingested("decode_restart_old_build", "journal"), read_only=True)
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
    ingested, tmp_path: Path
) -> None:
    """A database another pdforensics wrote (its stored views differ), opened read-only: this
    version's views answer, from the overlay catalog, and `materialised` still shadows the heavy
    ones with their rows: tables, or views of a kept judgement's tables (as temporary views of
    the views they could not be: every reader recomputed them)."""
    fresh = ingested("wedge_after_decode_restart", "json")
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


def test_the_views_rank_classes_in_the_order_of_verdict_classes(ingested) -> None:
    """`pdf_class_rank` (the views' and saved queries' sort by class) is `verdict.CLASSES`' order."""
    con = store.open_db(ingested("decode_restart_old_build", "journal"), read_only=True)
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
