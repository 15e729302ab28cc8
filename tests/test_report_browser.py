"""The report in a real browser: Debian's Chromium driven by Playwright, opening the file from disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_report import ingest_fixture  # tests/ is on sys.path (pytest rootdir conftest)

from pdforensics import store
from pdforensics.report import write_report
from pdforensics.report.screenshot import CHROMIUM, launch, screenshot, wait_rendered
from pdforensics.report.synth import HOSTILE_PROMPT, HOSTILE_REASON, HOSTILE_RID, Plan, write_db
from pdforensics.verdict import VerdictOptions

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api")
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)

OPTS = VerdictOptions(watchdog_timeout_s=60)
HOSTILE_ROOM = "4242424242424242424"


def _write(db: Path, out: Path, show_prompts: bool) -> Path:
    con = store.open_db(db, read_only=True)
    try:
        return write_report(con, out, OPTS, show_prompts=show_prompts)
    finally:
        con.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The demo incident, ingested as a user would."""
    return ingest_fixture("decode_restart_old_build", tmp_path_factory.mktemp("demo") / "demo.duckdb")


@pytest.fixture(scope="module")
def reports(demo: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("reports")
    # a synthetic window with hostile log text (script in a prompt, a rid, a reason) for the XSS test
    hostile = write_db(d / "hostile.duckdb", Plan(requests=200, minutes=8, seed=3))
    return {
        "redacted": _write(demo[0], d / "incident.html", False),
        "prompts": _write(hostile, d / "prompts.html", True),
    }


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


class Page:
    """A page on a report file that records console errors, dialogs and any network request."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.resolve().as_uri())
        wait_rendered(self.page)

    def _dialog(self, d: Any) -> None:
        self.dialogs.append(d.message)
        d.dismiss()

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def page(browser: Any, reports: dict[str, Path]) -> Iterator[Page]:
    p = Page(browser, reports["redacted"])
    yield p
    p.close()


def test_opens_from_disk_offline_with_verdict_and_plots(page: Page, demo: tuple[Path, dict]) -> None:
    pg = page.page
    assert pg.inner_text("#verdict-text") == demo[1]["verdict"] == "watchdog_missed"
    assert "silent_pin" in pg.inner_text("#verdict")
    assert pg.is_visible("#verdict-text")
    # both figures drawn by plotly: SVG with traces in it
    assert pg.locator("#fig-timeline .main-svg").count() > 0
    assert pg.locator("#fig-timeline .scatterlayer .trace").count() >= 7
    assert pg.locator("#fig-gantt .barlayer .point").count() > 0
    assert pg.locator("#tbl-requests tbody tr").count() > 0
    assert page.errors == []
    assert [u for u in page.requests if not u.startswith("file://")] == []


def test_clicking_a_request_shows_its_timeline_and_raw_lines(page: Page) -> None:
    pg = page.page
    row = pg.locator("#tbl-pins tbody tr.clickable").first
    room = row.get_attribute("data-room")
    assert room
    assert pg.is_hidden("#detail")
    row.click()
    assert pg.is_visible("#detail")
    assert room in pg.inner_text("#detail h3")
    pg.wait_for_selector("#detail-plot .main-svg")
    assert pg.locator("#detail-plot .barlayer .point").count() >= 1
    raw = pg.inner_text("#detail pre.raw")
    assert f"bootstrap_room={room}" in raw and "Receive:" in raw
    # a swimlane bar opens its request too
    bar = pg.locator("#fig-gantt .barlayer .point path").first
    box = bar.bounding_box()
    assert box
    pg.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    pg.wait_for_function("document.querySelector('#detail h3').textContent.includes('bootstrap_room=')")
    assert page.errors == []


def test_tables_filter_and_sort(page: Page) -> None:
    pg = page.page
    rows = pg.locator("#tbl-requests tbody tr")
    first_room = rows.first.get_attribute("data-room")
    assert first_room
    pg.fill("#tbl-requests input[type=search]", first_room)
    pg.wait_for_function("document.querySelectorAll('#tbl-requests tbody tr').length === 1")
    pg.fill("#tbl-requests input[type=search]", "")
    pg.wait_for_function("document.querySelectorAll('#tbl-requests tbody tr').length > 1")
    header = pg.locator("#tbl-requests th", has_text="first seen")
    header.click()
    header.click()  # descending
    times = pg.locator("#tbl-requests tbody tr td:nth-child(8)").all_inner_texts()
    assert times == sorted(times, reverse=True)


def test_hostile_log_lines_stay_inert(browser: Any, reports: dict[str, Path]) -> None:
    p = Page(browser, reports["prompts"])
    try:
        pg = p.page
        pg.evaluate(f"window.pdforensics.showRequest('{HOSTILE_ROOM}')")
        raw = pg.inner_text("#detail pre.raw")
        assert HOSTILE_PROMPT in raw and HOSTILE_RID in raw  # shown as text, not run
        # hover labels render plotly's HTML subset: move over the hostile request's markers
        for point in pg.locator("#detail-plot .scatterlayer .point").all():
            box = point.bounding_box()
            if box:
                pg.mouse.move(box["x"] + box["width"] / 2 + 1, box["y"] + box["height"] / 2)
                pg.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        pg.wait_for_function(
            "(document.querySelector('#detail-plot .hoverlayer').textContent || '').includes('onerror')"
        )
        assert "<img src=x onerror=" in (pg.text_content("#detail-plot .hoverlayer") or "")
        pg.fill("#tbl-failures input[type=search]", "onerror")
        pg.wait_for_function("document.querySelectorAll('#tbl-failures tbody tr').length === 1")
        assert "<img src=x onerror=" in pg.inner_text("#tbl-failures tbody")
        assert HOSTILE_REASON.split(" ")[0] in pg.inner_text("#tbl-failures tbody")
        assert pg.evaluate("typeof window.__pwned") == "undefined"
        assert pg.locator("img[src=x], svg[onload], #detail script").count() == 0
        assert p.dialogs == [] and p.errors == []
    finally:
        p.close()


def test_screenshot_helper_writes_a_png(browser: Any, reports: dict[str, Path], tmp_path: Path) -> None:
    out = screenshot(reports["redacted"], tmp_path / "report.png", height=900, browser=browser)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ any screen (issue 16)

SIZES = {"desktop": (1400, 1000), "phone": (390, 844)}
MIN_PLOT_PX = 300

# Each subplot's plot area is plotly's drag rectangle (`rect.nsewdrag`): its width is what is left
# for the data after margins and legends.
PLOT_AREAS = """() => Array.from(document.querySelectorAll('#fig-timeline .nsewdrag, #fig-gantt .nsewdrag'))
  .map(r => r.getBoundingClientRect().width)"""
LEGENDS = """() => Array.from(document.querySelectorAll('#fig-timeline .legend, #fig-gantt .legend'))
  .map(l => { const b = l.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; })"""


def _open(browser: Any, path: Path, size: str) -> Any:
    width, height = SIZES[size]
    page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
    page.goto(path.resolve().as_uri())
    wait_rendered(page)
    return page


@pytest.mark.parametrize("size", list(SIZES))
def test_the_report_is_usable_at_desktop_and_phone_size(
    browser: Any, reports: dict[str, Path], size: str, tmp_path: Path
) -> None:
    page = _open(browser, reports["redacted"], size)
    try:
        width = SIZES[size][0]
        shot = tmp_path / f"report-{size}.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        areas = page.evaluate(PLOT_AREAS)
        assert areas and min(areas) >= MIN_PLOT_PX, areas  # plots keep room for their data
        # the page never scrolls sideways; wide tables scroll inside their own box
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        boxes = page.evaluate(
            "() => Array.from(document.querySelectorAll('.tbl .scroll')).map(b => [b.clientWidth, b.scrollWidth])"
        )
        assert boxes and all(client <= width for client, _ in boxes)
        nav = page.evaluate("() => document.querySelector('nav.toc').getBoundingClientRect().right")
        assert nav <= width
        if size == "phone":
            assert any(scroll > client for client, scroll in boxes), (
                "no table wider than a phone: test is moot"
            )
            # legends below their plot, inside the page; swimlane labels shortened
            for left, _top, right, _bottom in page.evaluate(LEGENDS):
                assert left >= 0 and right <= width
            ticks = page.evaluate(
                "() => Array.from(document.querySelectorAll('#fig-gantt .ytick text')).map(t => t.textContent)"
            )
            assert ticks and max(len(t) for t in ticks) <= 12, ticks
    finally:
        page.close()


def test_an_empty_window_in_the_browser_names_what_to_check(browser: Any, tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    store.open_db(db).close()
    report = _write(db, tmp_path / "empty.html", False)
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.goto(report.resolve().as_uri())
        assert "nothing was ingested: check --unit / --since / journal access" in page.inner_text("#empty")
        assert page.locator(".chip").count() == 0
        assert page.inner_text("#js-error") == ""
    finally:
        page.close()


def test_a_fleet_row_shows_that_instances_requests(browser: Any, tmp_path: Path) -> None:
    """Two prefill instances: the fleet table lists them worst first; a row opens, and its button
    drills into the requests table, narrowed to that prefill host; its chip shows every request again."""
    from test_fleet_instances import healthy_and_pinned
    from verdict_helpers import Log

    log = Log(tmp_path / "fleet.duckdb")
    healthy_and_pinned(log)
    log.close()
    p = Page(browser, _write(tmp_path / "fleet.duckdb", tmp_path / "fleet.html", False))
    try:
        pg = p.page
        hosts = pg.locator("#tbl-instances tbody tr td:nth-child(1)").all_inner_texts()
        verdicts = pg.locator("#tbl-instances tbody tr td:nth-child(2)").all_inner_texts()
        assert list(zip(hosts, verdicts, strict=True)) == [
            ("gpu-c", "watchdog_missed"),
            ("gpu-a", "nothing_stuck"),
        ]
        every = pg.locator("#tbl-requests tbody tr").count()
        pg.locator("#tbl-instances tbody tr", has_text="gpu-c").click()
        pg.locator("#tbl-instances tr.expanded button.to-requests").click()
        pg.wait_for_function("document.querySelector('#tbl-requests .chip-exact').hidden === false")
        col = pg.locator("#tbl-requests th").all_inner_texts().index("prefill host") + 1
        shown = pg.locator(f"#tbl-requests tbody tr td:nth-child({col})").all_inner_texts()
        assert shown and set(shown) == {"gpu-c"} and len(shown) < every
        pg.locator("#tbl-requests .chip-exact").click()
        pg.wait_for_function(f"document.querySelectorAll('#tbl-requests tbody tr').length === {every}")
        assert not p.errors
    finally:
        p.close()


# ------------------------------------------------------------------ fleets an SRE can read (issue 28, items 3, 8)

# Every gauge trace plotly drew in the timeline's subplot `axis` (xy: prefill, x2y2: decode), by its
# trace's meta (d3 binds each drawn trace's data to its element).
DRAWN = """(axis) => Array.from(document.querySelectorAll(`#fig-timeline .subplot.${axis} .scatterlayer .trace`))
  .map(e => e.__data__ && e.__data__[0] && e.__data__[0].trace.meta).filter(m => m && m.host)"""
# The x extent of the timeline's last subplot and of the swimlanes' plot area
AXES = """() => ['#fig-timeline', '#fig-gantt'].map(f => {
  const r = Array.from(document.querySelectorAll(f + ' .nsewdrag')).pop().getBoundingClientRect();
  return [r.left, r.right]; })"""


@pytest.fixture(scope="module")
def fleet_report(scenario_db: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(
        scenario_db("json", "fleet_16_hosts"), tmp_path_factory.mktemp("fleet") / "fleet.html", False
    )


def _page_width(page: Any) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


@pytest.mark.parametrize("size", list(SIZES))
def test_a_fleet_row_is_one_line_and_opens_to_its_requests(
    browser: Any, fleet_report: Path, size: str
) -> None:
    width = SIZES[size][0]
    page = _open(browser, fleet_report, size)
    try:
        link = page.locator("nav.toc a[href='#fleet']")
        assert link.inner_text() == "Fleet" and link.is_visible()
        rows = page.locator("#tbl-instances tbody tr")
        heights = page.evaluate(
            "() => Array.from(document.querySelectorAll('#tbl-instances tbody tr')).map(r => r.getBoundingClientRect().height)"
        )
        line = page.evaluate(
            "parseFloat(getComputedStyle(document.querySelector('#tbl-instances td')).lineHeight)"
        )
        assert len(heights) == 8 and max(heights) < 2 * line, (heights, line)  # one line of text each
        rows.first.click()
        expansion = page.locator("#tbl-instances tr.expanded")
        expansion.wait_for()
        assert rows.first.get_attribute("aria-expanded") == "true"
        assert "held by the prefill longer than" in expansion.inner_text()  # its deciding reason
        rooms = [r.get_attribute("data-room") for r in expansion.locator("tbody tr").all()]
        # its own requests only (p-node-05's: the silent pin first), and the page still fits the screen
        hosts = page.evaluate(
            """(rooms) => { const t = JSON.parse(document.getElementById('pdf-data').textContent).tables
                .find(t => t.id === 'requests'); const k = t.columns.map(c => c.key);
              return rooms.map(r => t.rows.find(x => String(x[k.indexOf('room')]) === r)[k.indexOf('p_host')]); }""",
            rooms,
        )
        assert rooms and len(rooms) <= 12 and set(hosts) == {"p-node-05"}
        assert (
            page.locator("#tbl-instances tr.expanded tbody tr").first.inner_text().split()[1] == "silent_pin"
        )
        assert _page_width(page) <= width
        box = page.evaluate("() => document.querySelector('.expansion').getBoundingClientRect().right")
        assert box <= width
        # a request in it opens its detail; the Requests table narrows to the instance
        expansion.locator("tbody tr").first.click()
        page.wait_for_selector("#detail-plot .main-svg")
        assert rooms[0] in page.inner_text("#detail h3")
        assert _page_width(page) <= width
        expansion.locator("button.to-requests").click()
        page.wait_for_function("document.querySelector('#tbl-requests .chip-exact').hidden === false")
        col = page.locator("#tbl-requests th").all_inner_texts().index("prefill host") + 1
        assert set(page.locator(f"#tbl-requests tbody tr td:nth-child({col})").all_inner_texts()) == {
            "p-node-05"
        }
        rows.first.click()  # closes again
        page.wait_for_function("!document.querySelector('#tbl-instances tr.expanded')")
    finally:
        page.close()


@pytest.mark.parametrize("size", list(SIZES))
def test_a_fleets_timeline_draws_one_instance_per_engine(browser: Any, fleet_report: Path, size: str) -> None:
    page = _open(browser, fleet_report, size)
    try:
        prefill, decode = page.evaluate(DRAWN, "xy"), page.evaluate(DRAWN, "x2y2")
        assert {m["host"] for m in prefill} == {"p-node-05"} and {m["host"] for m in decode} == {"d-node-03"}
        # the floor, #bootstrap-req, #queue-req: the raw #inflight-req is listed, not drawn
        assert sorted(m["label"] for m in prefill) == ["#bootstrap-req", "#queue-req",
                                                       "inflight floor (#inflight-req − #new-seq)"]  # fmt: skip
        legend = page.locator("#fig-timeline .legendtext").all_text_contents()
        assert any("p-node-05 prefill raw #inflight-req" in t for t in legend)
        page.select_option("#pick-prefill", "p-node-08")
        page.wait_for_function(f"({DRAWN})('xy').every(m => m.host === 'p-node-08')")
        legend = " ".join(page.locator("#fig-timeline .legendtext").all_text_contents())
        assert "p-node-08 prefill inflight floor" in legend and "p-node-05" not in legend
        page.select_option("#pick-prefill", "*")
        page.wait_for_function(f"new Set(({DRAWN})('xy').map(m => m.host)).size === 8")
        assert len(page.evaluate(DRAWN, "xy")) == 3 * 8
        assert _page_width(page) <= SIZES[size][0]
        # d-node-03 restarted: each of its gauges is two stretches of line, none across the downtime
        paths = page.evaluate(
            """() => Array.from(document.querySelectorAll('#fig-timeline .subplot.x2y2 .scatterlayer .trace'))
              .filter(e => e.__data__[0].trace.meta.host === 'd-node-03')
              .map(e => Array.from(e.querySelectorAll('path.js-line'))
                .reduce((n, p) => n + (p.getAttribute('d').match(/M/g) || []).length, 0))"""
        )
        assert paths and all(n == 2 for n in paths), paths
    finally:
        page.close()


@pytest.mark.parametrize("size", list(SIZES))
def test_the_swimlanes_time_axis_lines_up_with_the_timeline(
    browser: Any, reports: dict[str, Path], fleet_report: Path, size: str
) -> None:
    for report in (reports["redacted"], fleet_report):
        page = _open(browser, report, size)
        try:
            (t_left, t_right), (g_left, g_right) = page.evaluate(AXES)
            assert abs(t_left - g_left) <= 1 and abs(t_right - g_right) <= 1, (
                t_left,
                t_right,
                g_left,
                g_right,
            )
        finally:
            page.close()


def test_a_requests_detail_keeps_the_phone_page_390_px_wide(browser: Any, reports: dict[str, Path]) -> None:
    page = _open(browser, reports["redacted"], "phone")
    try:
        assert page.evaluate("window.innerWidth") == 390
        page.locator("#tbl-pins tbody tr.clickable").first.click()
        page.wait_for_selector("#detail-plot .main-svg")
        assert page.locator("#detail table.events tbody tr").count() > 0
        assert _page_width(page) <= 390
        # the events table scrolls inside its own box instead
        client, scroll = page.evaluate(
            "() => { const b = document.querySelector('#detail .scroll'); return [b.clientWidth, b.scrollWidth]; }"
        )
        assert client <= 390 < scroll
    finally:
        page.close()
