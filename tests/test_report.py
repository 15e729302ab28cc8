"""The HTML report: one self-contained file, escaped and redacted, bounded in size, true to the verdict."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from html import escape
from pathlib import Path

import pytest

from pdforensics import api, store
from pdforensics.paths import fixtures_dir
from pdforensics.report import Limits, write_report
from pdforensics.report.html import safe_json
from pdforensics.report.redact import redact
from pdforensics.report.synth import (
    HOSTILE_PROMPT,
    HOSTILE_REASON,
    HOSTILE_RID,
    HOSTILE_SAMPLE,
    Plan,
    write_db,
)
from pdforensics.verdict import VerdictOptions, compute_verdict
from tests.test_scenarios import SCENARIOS, expected_of, options

OPTS = VerdictOptions(watchdog_timeout_s=60)


# ------------------------------------------------------------------ redaction


def test_redacts_prompt_text_and_token_ids_in_receive_lines() -> None:
    line = (
        "[2026-11-29 10:00:00] Receive: obj=GenerateReqInput(rid='ab12', text='tell me, (a) secret: \\'x\\' [1]', "
        "input_ids=[[1, 2, 3], [4]], sampling_params={'max_new_tokens': 8}, bootstrap_room=42)"
    )
    out = redact(line)
    assert "secret" not in out and "[1, 2, 3]" not in out
    assert "text=[redacted 32 chars]" in out
    assert "input_ids=[redacted 16 chars]" in out
    # identity and everything the analysis needs stays
    assert "rid='ab12'" in out and "bootstrap_room=42" in out and "'max_new_tokens': 8" in out


def test_redacts_the_response_text_and_json_request_logs() -> None:
    finish = "Finish: obj=GenerateReqInput(rid='r'), out={'text': 'the answer is 42', 'output_ids': [5, 6], 'meta_info': {'id': 'r'}}"
    out = redact(finish)
    assert "the answer" not in out and "[5, 6]" not in out and "'meta_info': {'id': 'r'}" in out
    js = '{"event": "request.received", "rid": "r1", "obj": {"text": "hi \\"there\\"", "bootstrap_room": 7}}'
    out = redact(js)
    assert "there" not in out and '"text": [redacted 14 chars]' in out and '"bootstrap_room": 7' in out


def test_redaction_leaves_other_fields_and_handles_truncated_lines() -> None:
    assert redact("context_text='keep' text=None rid='x'") == "context_text='keep' text=None rid='x'"
    assert redact("Prefill batch, #new-seq: 1") == "Prefill batch, #new-seq: 1"
    truncated = "Receive: obj=GenerateReqInput(rid='x', text='a prompt cut off by the log wrapper"
    assert redact(truncated).endswith("text=[redacted 36 chars]")


# ------------------------------------------------------------------ escaping


def test_safe_json_cannot_close_its_script_block() -> None:
    value = {"m": "</script><script>alert(1)</script> & \u2028 <!--"}
    text = safe_json(value)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value


# ------------------------------------------------------------------ the report


@pytest.fixture(scope="module")
def synth_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_db(tmp_path_factory.mktemp("synth") / "synth.duckdb", Plan(requests=600, minutes=12))


@pytest.fixture(scope="module")
def report(synth_db: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("report") / "incident.html"
    con = store.open_db(synth_db, read_only=True)
    try:
        assert write_report(con, out, OPTS) == out
    finally:
        con.close()
    return out.read_text(encoding="utf-8")


def _data_block(page: str, block: str = "pdf-data") -> dict:
    m = re.search(rf'<script type="application/json" id="{block}">(.*?)</script>', page, re.S)
    assert m, block
    return json.loads(m.group(1))


def test_report_is_one_offline_file_with_plotly_inlined_once(report: str) -> None:
    assert report.count("plotly.js v") == 1  # the bundle's header comment
    assert '<script src="https://cdn.plot.ly' not in report
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)=["']?(https?:)?//""", report)
    assert "default-src 'none'" in report  # CSP: nothing may be fetched


def test_banner_tells_the_verdict_of_the_views(report: str, synth_db: Path) -> None:
    con = store.open_db(synth_db, read_only=True)
    try:
        v = compute_verdict(con, OPTS).to_json()
    finally:
        con.close()
    banner = re.search(r'<section id="verdict".*?</section>', report, re.S)
    assert banner
    text = banner.group(0)
    assert f'<div class="verdict" id="verdict-text">{v["verdict"]}</div>' in text
    assert "Would be certain with:" in text and "--enable-request-time-stats-logging" in text
    assert "timeout 60 s" in text and "deployed" in text
    for reason in v["reasons"]:
        assert f"<li>{escape(reason)}</li>" in text


def test_log_text_is_escaped_and_prompts_redacted(report: str) -> None:
    for hostile in (HOSTILE_PROMPT, HOSTILE_RID, HOSTILE_REASON, HOSTILE_SAMPLE, "<script>window.__pwned"):
        assert hostile not in report
    assert "secret prompt" not in report  # the prompt is not even escaped: it is gone
    data = _data_block(report)
    lines = [ln["message"] for d in data["requests"].values() for ln in d["lines"]]
    assert any("text=[redacted" in m for m in lines)
    # the hostile rid and reason survive as data (JSON-escaped), for textContent to show
    assert any(HOSTILE_RID in m for m in lines)
    assert any(HOSTILE_REASON.split(" ")[0] in str(t["rows"]) for t in data["tables"])


def test_show_prompts_keeps_the_prompt_as_escaped_data(synth_db: Path, tmp_path: Path) -> None:
    con = store.open_db(synth_db, read_only=True)
    try:
        page = write_report(con, tmp_path / "r.html", OPTS, show_prompts=True).read_text()
    finally:
        con.close()
    assert HOSTILE_PROMPT not in page
    lines = [ln["message"] for d in _data_block(page)["requests"].values() for ln in d["lines"]]
    assert any(HOSTILE_PROMPT in m for m in lines)


def test_tables_and_details_match_the_request_classes(report: str, synth_db: Path) -> None:
    data = _data_block(report)
    tables = {t["id"]: t for t in data["tables"]}
    assert {"pins", "firings", "abort_races", "failures", "holes", "requests", "units", "rejects"} <= set(
        tables
    )
    con = store.open_db(synth_db, read_only=True)
    try:
        v = compute_verdict(con, OPTS).to_json()
    finally:
        con.close()
    pins = tables["pins"]
    cls = [c["key"] for c in pins["columns"]].index("class")
    assert sum(r[cls] == "silent_pin" for r in pins["rows"]) == v["counts"]["silent_pin"]
    assert sum(r[cls] == "watchdog_fired" for r in pins["rows"]) == v["counts"]["watchdog_fired"]
    assert len(tables["firings"]["rows"]) == v["counts"]["watchdog_fired"]
    # every request that did not complete is listed, and its details are embedded
    listed = {r[0] for r in tables["requests"]["rows"]}
    assert {r["bootstrap_room"] for r in v["requests"]} <= listed
    assert {r["bootstrap_room"] for r in v["requests"]} <= set(data["requests"])
    # per host and unit: lines ingested and recognised add up to the database's
    units = tables["units"]
    cols = [c["key"] for c in units["columns"]]
    con = store.open_db(synth_db, read_only=True)
    try:
        lines, recognised = con.execute("SELECT count(*), count(event) FROM lines").fetchone() or (0, 0)
    finally:
        con.close()
    assert sum(r[cols.index("lines")] for r in units["rows"]) == lines
    assert sum(r[cols.index("recognised")] for r in units["rows"]) == recognised


def test_figures_hold_gauges_markers_and_swimlanes(report: str) -> None:
    timeline = _data_block(report, "pdf-fig-timeline")
    names = {t.get("name") for t in timeline["data"]}
    for gauge in (
        "#inflight-req",
        "#bootstrap-req",
        "#queue-req",
        "#running-req",
        "#transfer-req",
        "#prealloc-req",
    ):
        assert any(n and n.endswith(gauge) for n in names), gauge
    assert any(n and "gen throughput" in n for n in names)
    assert {"watchdog firings", "aborts", "engine lifecycle", "watchdog deadline"} <= names
    assert timeline["layout"]["shapes"], "restart / hole spans"
    gantt = _data_block(report, "pdf-fig-gantt")
    bars = [t for t in gantt["data"] if t["type"] == "bar"]
    assert bars and all(t["customdata"] for t in bars)
    assert any("/" in t["marker"]["pattern"]["shape"] for t in bars), "open spans are hatched"


def test_small_limits_sample_and_say_so(synth_db: Path, tmp_path: Path) -> None:
    limits = Limits(gantt_lanes=10, gantt_completed=2, table_requests=20, table_completed=5, detail_bytes=20_000,
                    gauge_points=50, markers=5, deadline_lanes=1)  # fmt: skip
    con = store.open_db(synth_db, read_only=True)
    try:
        page = write_report(con, tmp_path / "r.html", OPTS, limits=limits).read_text()
    finally:
        con.close()
    notes = re.search(r'<div class="notes" id="sampling">(.*?)</div>', page, re.S)
    assert notes
    for said in ("Gauges:", "Swimlanes:", "Requests table:", "Request details", "Markers:", "Timeline:"):
        assert said in notes.group(1), said
    data = _data_block(page)
    rows = next(t for t in data["tables"] if t["id"] == "requests")["rows"]
    assert sum(r[1] == "completed" for r in rows) == 5 and sum(r[1] != "completed" for r in rows) <= 20
    assert len(json.dumps(data["requests"])) < 20_000 * 1.1
    gantt = _data_block(page, "pdf-fig-gantt")
    assert len(gantt["layout"]["yaxis"]["categoryarray"]) == 10


def test_views_are_computed_once_for_the_verdict_and_the_report(
    synth_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pdforensics import judgement, verdict

    made: list[str] = []
    shadow = verdict._shadow
    monkeypatch.setattr(
        verdict, "_shadow", lambda con, cat, name: (made.append(name), shadow(con, cat, name))
    )
    shutil.rmtree(judgement.folder_of(synth_db), ignore_errors=True)  # judged by an earlier test

    def report() -> set[str]:
        con = store.open_db(synth_db, read_only=True)
        try:
            write_report(con, tmp_path / "r.html", OPTS)
            return {
                r[0]
                for r in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE temporary UNION ALL "
                    "SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal"
                ).fetchall()
            }
        finally:
            con.close()

    left = report()
    assert sorted(made) == sorted(set(made)) and "requests" in made  # each heavy view once
    assert not left  # no temp table (shadow or report copy) outlives the report
    made.clear()
    assert not report() and made == [], "the next report reads the kept judgement: nothing computed"


def test_capped_tables_say_how_many_rows_they_embed(synth_db: Path, tmp_path: Path) -> None:
    con = store.open_db(synth_db, read_only=True)
    try:
        page = write_report(con, tmp_path / "r.html", OPTS, limits=Limits(table_rows=1)).read_text()
    finally:
        con.close()
    notes = re.search(r'<div class="notes" id="sampling">(.*?)</div>', page, re.S)
    assert notes
    cut = [t for t in _data_block(page)["tables"] if t["total"] is not None and t["total"] > len(t["rows"])]
    assert cut  # the synthetic window has more than one row in some capped table
    for t in cut:
        if t["id"] != "requests":
            assert len(t["rows"]) == 1
            assert escape(f"{t['title']} table: the first 1 of {t['total']:,} rows") in notes.group(1), t[
                "id"
            ]


def test_an_empty_window_still_reports_why_it_cannot_decide(tmp_path: Path) -> None:
    from pdforensics.verdict import install_views

    con = store.open_db(tmp_path / "empty.duckdb")
    try:
        install_views(con)
        page = write_report(con, tmp_path / "r.html", VerdictOptions()).read_text()
    finally:
        con.close()
    assert 'id="verdict-text">inconclusive<' in page
    assert "no lines in the window" in page


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("PDFORENSICS_SLOW"), reason="set PDFORENSICS_SLOW=1 (minutes)")
def test_100k_requests_make_a_report_under_15_mb(tmp_path: Path) -> None:
    db = write_db(tmp_path / "big.duckdb", Plan(requests=100_000, minutes=60))
    con = store.open_db(db, read_only=True)
    try:
        started = time.perf_counter()
        out = write_report(con, tmp_path / "big.html", OPTS)
        elapsed = time.perf_counter() - started
    finally:
        con.close()
    size = out.stat().st_size
    print(f"100k requests: {size / 1e6:.1f} MB in {elapsed:.1f} s")
    assert size < 15_000_000


# ------------------------------------------------------------------ the demo incident, through ingest


def ingest_fixture(name: str, db: Path) -> tuple[Path, dict]:
    """A bundled scenario ingested the way a user would; returns the database and its ground truth."""
    folder = fixtures_dir() / name
    expected = json.loads((folder / "expected.json").read_text())
    timeout = (expected.get("verdict_options") or {}).get("watchdog_timeout_s")
    api.run_ingest(
        db=db, since=None, until=None, units=["*"], directories=None, journal_files=None,
        files=[folder / "journal.export"], tz=None, host=None, catalogs=None, watchdog_timeout=timeout,
        grace=None, progress=False, now_us=0,
    )  # fmt: skip
    return db, expected


def test_demo_incident_report_shows_the_ground_truth(tmp_path: Path) -> None:
    db, expected = ingest_fixture("decode_restart_old_build", tmp_path / "demo.duckdb")
    opts = VerdictOptions(watchdog_timeout_s=expected["verdict_options"]["watchdog_timeout_s"])
    con = store.open_db(db, read_only=True)
    try:
        page = write_report(con, tmp_path / "incident.html", opts).read_text()
    finally:
        con.close()
    assert f'id="verdict-text">{expected["verdict"]}<' in page
    assert "not deployed" in page  # the old build has no watchdog
    data = _data_block(page)
    tables = {t["id"]: t for t in data["tables"]}
    pins = tables["pins"]
    keys = [c["key"] for c in pins["columns"]]
    pinned = {r[keys.index("room")] for r in pins["rows"] if r[keys.index("class")] == "silent_pin"}
    assert pinned == {r["bootstrap_room"] for r in expected["requests"] if r["class"] == "silent_pin"}
    listed = {r[0]: r[1] for r in tables["requests"]["rows"]}
    assert listed == {r["bootstrap_room"]: r["class"] for r in expected["requests"]}
    assert len(tables["restarts"]["rows"]) == 1
    # each pinned room: an open prefill span drawn to the window end, and its raw lines embedded
    for room in pinned:
        detail = data["requests"][room]
        assert any(p["open"] and p["engine"] == "prefill" for p in detail["phases"])
        assert any("Receive:" in ln["message"] for ln in detail["lines"])
    units = tables["units"]
    engine = [c["key"] for c in units["columns"]].index("engine")
    assert {r[engine] for r in units["rows"]} >= {"prefill", "decode"}


# ------------------------------------------------------------------ the operator's 3 a.m. (issue 16)


def _prefill_gauges(page: str) -> list[dict]:
    timeline = _data_block(page, "pdf-fig-timeline")
    return [t for t in timeline["data"] if t.get("legendgroup") and (t.get("yaxis") in (None, "y"))]


def test_the_inflight_floor_is_the_main_prefill_line_and_matches_the_view(
    report: str, synth_db: Path
) -> None:
    from pdforensics.verdict import apply_options, ensure_views

    gauges = _prefill_gauges(report)
    floor = [t for t in gauges if t["legendgroup"] == "inflight_floor"]
    assert floor, [t["name"] for t in gauges]
    assert "#inflight-req − #new-seq" in floor[0]["name"]
    assert floor[0]["line"]["width"] == max(t["line"]["width"] for t in gauges)
    con = store.open_db(synth_db, read_only=True)
    try:
        ensure_views(con)
        apply_options(con, OPTS)
        view = [r[0] for r in con.execute(
            "SELECT floor FROM inflight_gauge WHERE tp_rank = (SELECT min(tp_rank) FROM inflight_gauge) ORDER BY t_us"
        ).fetchall()]  # fmt: skip
    finally:
        con.close()
    assert sorted(v for t in floor for v in t["y"]) == sorted(view)


def test_count_axes_have_whole_number_ticks_and_gauges_fixed_colours(report: str, tmp_path: Path) -> None:
    from pdforensics.report.figures import GAUGE_STYLE, count_dtick

    layout = _data_block(report, "pdf-fig-timeline")["layout"]
    for axis in ("yaxis", "yaxis2"):  # prefill and decode queues: counts of requests
        assert layout[axis]["tickformat"] == ",d" and isinstance(layout[axis]["dtick"], int), layout[axis]
    assert [count_dtick(n) for n in (0, 1, 6, 7, 13, 30, 31, 290, 5000)] == [1, 1, 1, 2, 5, 5, 10, 50, 1000]
    db, _ = ingest_fixture("decode_restart_old_build", tmp_path / "demo.duckdb")
    con = store.open_db(db, read_only=True)
    try:
        other = write_report(con, tmp_path / "other.html", OPTS).read_text()
    finally:
        con.close()
    for page in (report, other):  # the same gauge has the same colour in every report
        for t in _data_block(page, "pdf-fig-timeline")["data"]:
            if t.get("legendgroup") in GAUGE_STYLE:
                assert t["line"]["color"] == GAUGE_STYLE[t["legendgroup"]][0]


def test_dp_streams_share_one_legend_entry_per_gauge() -> None:
    from pdforensics.report import figures

    gauges = [
        {"engine": "prefill", "stream": f"p0 prefill DP{dp}", "metric": metric, "label": label,
         "x_us": [0, 1_000_000], "y": [dp, 0], "agg": None}
        for dp in range(24)
        for metric, label in (("inflight_floor", "inflight floor"), ("inflight_req", "#inflight-req"),
                              ("bootstrap_req", "#bootstrap-req"), ("queue_req", "#queue-req"))
    ]  # fmt: skip
    fig = figures.timeline(gauges, [], [], [], [], [], [], (0, 2_000_000), 60.0, 10.0)
    entries = [t["name"] for t in fig["data"] if t.get("showlegend") is not False]
    assert len([t for t in fig["data"] if t.get("legendgroup")]) == 96
    assert entries == ["inflight floor (24 streams)", "#inflight-req (24 streams)", "#bootstrap-req (24 streams)",
                       "#queue-req (24 streams)"]  # fmt: skip
    assert fig["layout"]["yaxis"]["dtick"] == 5  # peak 23: whole ticks 0, 5, 10, 15, 20


def test_deadline_and_deadline_plus_grace_are_two_marks(tmp_path: Path) -> None:
    db, _ = ingest_fixture("decode_restart_old_build", tmp_path / "demo.duckdb")
    con = store.open_db(db, read_only=True)
    try:
        page = write_report(
            con, tmp_path / "r.html", VerdictOptions(watchdog_timeout_s=60, grace_s=10)
        ).read_text()
    finally:
        con.close()
    traces = {t.get("name"): t for t in _data_block(page, "pdf-fig-timeline")["data"]}
    deadline, graced = traces["watchdog deadline"], traces["deadline + grace"]
    assert deadline["x"] and [g - d for d, g in zip(deadline["x"], graced["x"], strict=True)] == [
        10_000
    ] * len(deadline["x"])
    assert "60 s after it was pinned" in deadline["hovertext"][0]
    assert "deadline + grace (60 s + 10 s" in graced["hovertext"][0]
    points = [p["what"] for d in _data_block(page)["requests"].values() for p in d["points"]]
    assert "watchdog deadline" in points and "deadline + grace" in points


def _empty_report(db: Path, out: Path, opts: VerdictOptions) -> str:
    con = store.open_db(db, read_only=True)
    try:
        return write_report(con, out, opts).read_text()
    finally:
        con.close()


def test_lines_with_no_time_are_not_called_nothing_ingested(tmp_path: Path) -> None:
    """300 lines stored whose prefix gives no time (issue 29, item 10): the report and the
    verdict say they were stored and what to check, not "nothing was ingested"."""
    from pdforensics.catalog import load_catalog
    from pdforensics.ingest import ingest
    from pdforensics.sources import Selection
    from pdforensics.sources.plain import PlainFileSource

    log = tmp_path / "sglang-prefill.log"
    log.write_text("".join(f"<7>worker {k}: Prefill batch, #new-seq: 1\n" for k in range(300)))
    db = tmp_path / "untimed.duckdb"
    ingest(db, [PlainFileSource(log)], Selection(), load_catalog(), tz="UTC")
    page = _empty_report(db, tmp_path / "u.html", OPTS)
    assert "300 line(s) stored, none with a time I know" in page and "nothing was ingested" not in page
    con = store.open_db(db, read_only=True)
    try:
        reasons = compute_verdict(con, OPTS).reasons
    finally:
        con.close()
    assert any("300 line(s) stored, none with a time I know" in r for r in reasons), reasons


def test_an_empty_window_says_what_to_check_instead_of_empty_panels(synth_db: Path, tmp_path: Path) -> None:
    empty_db = tmp_path / "empty.duckdb"
    store.open_db(empty_db).close()
    page = _empty_report(empty_db, tmp_path / "e.html", OPTS)
    assert "nothing was ingested: check --unit / --since / journal access" in page
    assert 'id="fig-timeline"' not in page and 'class="chip"' not in page
    elsewhere = VerdictOptions(
        watchdog_timeout_s=60, since_us=1_000_000_000_000_000, until_us=1_000_000_100_000_000
    )
    page = _empty_report(synth_db, tmp_path / "w.html", elsewhere)
    assert "no line in this window; the database holds lines from" in page
    assert "undecided" not in re.search(r'<section id="verdict".*?</section>', page, re.S).group(0)  # type: ignore[union-attr]


# Sentences the report itself writes (notes, table titles and descriptions, gantt note): no doubled
# or stacked parentheses, no "x:;". (Sentences built by the SQL views are the views' business.)
BAD_SENTENCE = re.compile(r"\(\(|\)\)|\) \(|:;|;;| ,|\(\s|\s\)")


def test_the_reports_own_sentences_read_cleanly(report: str) -> None:
    data = _data_block(report)
    texts = [t["title"] for t in data["tables"]] + [t.get("description") or "" for t in data["tables"]]
    texts += re.findall(r'<div class="muted">(.*?)</div>', report) + re.findall(r"<li>(.*?)</li>", report)
    own = [s for s in texts if "watchdog deployed" not in s and "request(s)" not in s]  # (SQL-built reasons)
    assert own and [s for s in own if BAD_SENTENCE.search(s)] == []


# ------------------------------------------------------------------ fleets an SRE can read (issue 28, items 3, 8)


@pytest.fixture(scope="module")
def fleet_page(scenario_db, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    """The 16-host fleet's report and its verdict (the shared database, read-only)."""
    db = scenario_db("json", "fleet_16_hosts")
    con = store.open_db(db, read_only=True)
    try:
        v = compute_verdict(con, OPTS).to_json()
        page = write_report(con, tmp_path_factory.mktemp("fleet") / "fleet.html", OPTS).read_text()
    finally:
        con.close()
    return page, v


def test_a_fleet_has_a_fleet_section_in_the_navigation_with_compact_rows(
    fleet_page: tuple[str, dict],
) -> None:
    page, v = fleet_page
    nav = re.search(r'<nav class="toc">(.*?)</nav>', page, re.S)
    assert nav and '<a href="#fleet">Fleet</a>' in nav.group(1)
    assert '<section id="fleet"><h2>Fleet</h2>' in page
    inst = next(t for t in _data_block(page)["tables"] if t["id"] == "instances")
    # no column that wraps (a row 5 lines tall): the reasons are in the row's expansion instead
    assert [c["type"] for c in inst["columns"] if c["type"] == "wrap"] == []
    hosts = [r[0] for r in inst["rows"]]
    assert hosts == [i["host"] for i in v["instances"]] and len(hosts) == 8
    assert [e["reasons"] for e in inst["expand"]] == [i["reasons"] for i in v["instances"]]


def test_a_single_prefill_has_no_fleet_link(report: str) -> None:
    assert 'href="#fleet"' not in report and 'id="tl-pick"' not in report


def test_a_fleets_timeline_starts_on_the_worst_prefill_and_its_decode(fleet_page: tuple[str, dict]) -> None:
    page, v = fleet_page
    fleet = _data_block(page)["fleet"]
    assert fleet["hosts"]["prefill"] == [i["host"] for i in v["instances"]]
    assert len(fleet["hosts"]["decode"]) == 8
    worst = v["instances"][0]["host"]
    stuck = [
        r["decode_host"] for r in v["requests"] if r["prefill_host"] == worst and r["class"] == "silent_pin"
    ]
    assert fleet["default"] == {"prefill": worst, "decode": stuck[0]}
    assert fleet["default"] == {"prefill": "p-node-05", "decode": "d-node-03"}
    gauges = [t for t in _data_block(page, "pdf-fig-timeline")["data"] if t.get("meta")]
    every = set(fleet["hosts"]["prefill"]) | set(fleet["hosts"]["decode"])
    assert {t["meta"]["host"] for t in gauges} == every
    assert 'id="tl-pick"' in page


def test_a_gauge_line_stops_while_its_engine_is_down(fleet_page: tuple[str, dict], scenario_db) -> None:
    page, _ = fleet_page
    con = store.open_db(scenario_db("json", "fleet_16_hosts"), read_only=True)
    try:
        from pdforensics.verdict import apply_options, ensure_views

        ensure_views(con)
        apply_options(con, OPTS)
        restarts = con.execute("SELECT host, gone_t, up_t FROM engine_restarts").fetchall()
    finally:
        con.close()
    assert len(restarts) == 1 and restarts[0][0] == "d-node-03"
    host, gone, up = restarts[0]
    gauges = [t for t in _data_block(page, "pdf-fig-timeline")["data"] if t.get("meta")]
    decode = [t for t in gauges if t["meta"]["engine"] == "decode"]
    for t in decode:
        xy = list(zip(t["x"], t["y"], strict=True))
        if t["meta"]["host"] != host:
            assert None not in t["y"], t["meta"]
            continue
        cut = t["y"].index(None)
        # held to the old process's last line, then no line until the new one's first batch line
        assert xy[cut - 1][0] == xy[cut][0] == gone / 1000
        assert xy[cut + 1][0] >= up / 1000, t["meta"]
        assert not any(gone / 1000 < x < up / 1000 for x, y in xy if y is not None)


def test_the_healthy_timeline_draws_the_floor_the_verdict_reads(scenario_db, tmp_path: Path) -> None:
    con = store.open_db(scenario_db("json", "healthy"), read_only=True)
    try:
        page = write_report(con, tmp_path / "h.html", OPTS).read_text()
    finally:
        con.close()
    gauges = {t["legendgroup"]: t for t in _prefill_gauges(page)}
    floor, raw = gauges["inflight_floor"], gauges["inflight_req"]
    assert max(raw["y"]) > max(floor["y"]) == 0, "the raw gauge is above the floor: the test is not moot"
    assert floor.get("visible") is True and raw["visible"] == "legendonly"  # listed, drawn on a click
    assert raw["name"].endswith("raw #inflight-req") and "the verdict reads the floor" in raw["hovertemplate"]


def test_the_swimlanes_share_the_timelines_plot_margins(report: str) -> None:
    timeline = _data_block(report, "pdf-fig-timeline")["layout"]["margin"]
    gantt = _data_block(report, "pdf-fig-gantt")["layout"]["margin"]
    assert (timeline["l"], timeline["r"]) == (gantt["l"], gantt["r"])


def test_the_prometheus_gauge_is_drawn_beside_the_floor_and_says_its_source(tmp_path: Path) -> None:
    """Issue 31: the metric series SGLang exported, labelled by source and step, on the prefill's
    axis beside the lines' floor, one value per scrape."""
    from tests.test_metric_verdict import idle_after_traffic, scrapes
    from tests.verdict_helpers import Log

    log = Log(tmp_path / "db.duckdb")
    idle_after_traffic(log)
    scrapes(log, 120, 390, 1)
    log.close()
    con = store.open_db(tmp_path / "db.duckdb", read_only=True)
    try:
        page = write_report(con, tmp_path / "r.html", OPTS).read_text()
    finally:
        con.close()
    gauges = _prefill_gauges(page)
    metric = [t for t in gauges if t["legendgroup"] == "metric_inflight"]
    assert len(metric) == 1 and "inflight gauge (Prometheus), every 10 s" in metric[0]["name"], metric
    assert metric[0]["y"] == [1] * 28
    assert any(t["legendgroup"] == "inflight_floor" for t in gauges)


def test_a_prometheus_series_longer_than_the_gauge_points_keeps_each_buckets_maximum(tmp_path: Path) -> None:
    """Past `gauge_points` scrapes (1,500 by default: ~6 h of a 15 s scrape) a series is drawn as
    each time bucket's maximum, said in the hover and the notes. The report once stopped there with
    an internal error (a DuplicateError in the bucketing)."""
    from tests.test_metric_verdict import idle_after_traffic, scrapes
    from tests.verdict_helpers import Log

    log = Log(tmp_path / "db.duckdb")
    idle_after_traffic(log)
    scrapes(log, 120, 390, 1)
    scrapes(log, 255, 255, 4, every=1)  # one scrape reads 4 between the others' 1s: a bucket keeps it
    log.close()
    con = store.open_db(tmp_path / "db.duckdb", read_only=True)
    try:
        page = write_report(con, tmp_path / "r.html", OPTS, limits=Limits(gauge_points=5)).read_text()
    finally:
        con.close()
    (metric,) = [t for t in _prefill_gauges(page) if t["legendgroup"] == "metric_inflight"]
    assert 2 <= len(metric["y"]) <= 6 and sorted(metric["y"]) == [1] * (len(metric["y"]) - 1) + [4]
    assert metric["x"] == sorted(metric["x"]) and "(max of its time bucket)" in metric["hovertemplate"]
    assert "Prometheus gauge: up to 29 scrapes per series were cut into" in page


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_bundled_incident_has_a_report_with_its_verdict(
    scenario: str, scenario_db, tmp_path: Path
) -> None:
    """No incident the simulator knows breaks the report (a server that is not PD-disaggregated,
    engine `unified`, once stopped it with an internal error); its banner is the ground truth's."""
    exp = expected_of(scenario)
    con = store.open_db(scenario_db("json_runs", scenario), read_only=True)
    try:
        page = write_report(con, tmp_path / "r.html", options(exp)).read_text()
    finally:
        con.close()
    assert f'<div class="verdict" id="verdict-text">{exp["verdict"]}</div>' in page


def test_a_server_that_is_not_pd_disaggregated_has_its_queues_named_for_its_engine(
    scenario_db, tmp_path: Path
) -> None:
    """A `unified` engine's gauges are drawn on the second row, which says so (it said "decode")."""
    exp = expected_of("non_pd_prefill_name")
    con = store.open_db(scenario_db("json_runs", "non_pd_prefill_name"), read_only=True)
    try:
        page = write_report(con, tmp_path / "r.html", options(exp)).read_text()
    finally:
        con.close()
    titles = [a["text"] for a in _data_block(page, "pdf-fig-timeline")["layout"]["annotations"]]
    assert titles[:2] == ["prefill queues (requests)", "unified queues (requests)"]
    on_second = [t for t in _data_block(page, "pdf-fig-timeline")["data"] if t.get("yaxis") == "y2"]
    assert on_second and all(t["meta"]["engine"] == "unified" for t in on_second)


def test_a_pd_servers_second_row_is_its_decodes(report: str) -> None:
    titles = [a["text"] for a in _data_block(report, "pdf-fig-timeline")["layout"]["annotations"]]
    assert titles[:2] == ["prefill queues (requests)", "decode queues (requests)"]


@pytest.mark.parametrize("cut", [None, (4, 9)], ids=["every-request", "a-sample"])
def test_sampled_requests_follow_one_order_that_breaks_ties_by_the_requests_identity(
    cut: tuple[int, int] | None, scenario_db, tmp_path: Path
) -> None:
    """Rooms collide across deployments (two requests, one room, one hash): which of them a sample
    keeps, and in which order, is the documented order with ties broken by the request's identity,
    not how DuckDB happened to run the query (two ways of fetching it once gave two samples)."""
    from pdforensics import verdict
    from pdforensics.report.data import CLASS_ORDER

    scenario = "two_deployments_colliding_rooms"
    db, opts = scenario_db("json_runs", scenario), options(expected_of(scenario))
    con = store.open_db(db, read_only=True)
    try:
        limits = Limits() if cut is None else Limits(table_requests=cut[0], table_completed=cut[1])
        page = write_report(con, tmp_path / "r.html", opts, limits=limits).read_text()
        verdict.apply_options(con, opts)
        with verdict.materialised(con):
            every = store.fetch_dicts(con, "SELECT *, hash(bootstrap_room) AS h FROM requests")
    finally:
        con.close()

    def last_if_null(*values: object) -> tuple:
        return tuple((v is None, v) for v in values)

    def identity(r: dict) -> tuple:
        return last_if_null(
            r["bootstrap_room"], r["first_t"], r["prefill_rid"], r["decode_rid"], r["p_host"], r["d_host"]
        )

    def rank(c: str) -> int:
        return CLASS_ORDER.index(c) if c in CLASS_ORDER else len(CLASS_ORDER)

    open_ = sorted((r for r in every if r["class"] != "completed"),
                   key=lambda r: (rank(r["class"]), *last_if_null(r["first_t"]), *identity(r)))  # fmt: skip
    done = sorted((r for r in every if r["class"] == "completed"), key=lambda r: (r["h"], *identity(r)))
    kept = open_ + done if cut is None else open_[: cut[0]] + done[: cut[1]]
    want = [(str(r["bootstrap_room"]), r["prefill_rid"], r["p_host"]) for r in kept]
    rows = next(t for t in _data_block(page)["tables"] if t["id"] == "requests")["rows"]
    assert [(r[0], r[3], r[5]) for r in rows] == want
    assert len({w[0] for w in want}) < len(want), "no two sampled requests share a room: nothing tested"
