"""Screenshot of a report in headless Chromium (for the README), and the shared browser launcher.

    python -m pdforensics.report.screenshot REPORT.html|DB.duckdb OUT.png [--height 1800] [--watchdog-timeout 60]

Uses Debian's Chromium (`/usr/bin/chromium`, or $PDFORENSICS_CHROMIUM) through
Playwright (the `screenshots` extra); no browser is downloaded. Without either: one line, exit 5.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM = Path(os.environ.get("PDFORENSICS_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync",
]  # fmt: skip


def launch(playwright: Any) -> Any:
    """A headless Chromium from the system (never a downloaded one)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def wait_rendered(page: Any, timeout_ms: int = 60_000) -> None:
    page.wait_for_selector("#fig-timeline[data-rendered]", timeout=timeout_ms)
    page.wait_for_selector("#fig-gantt[data-rendered]", timeout=timeout_ms)


def screenshot(report: Path, out: Path, width: int = 1400, height: int = 1800, browser: Any = None) -> Path:
    """The top of the report (verdict banner, notes, timeline) as a PNG, at most `height` px tall.

    Runs in `browser` when given (a test's), else launches the system Chromium.
    """
    if browser is not None:
        page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
        try:
            page.goto(Path(report).resolve().as_uri())
            wait_rendered(page)
            # down to the end of the timeline section when it fits in `height`
            box = page.locator("#timeline").bounding_box()
            bottom = int(box["y"] + box["height"] + 12) if box else height
            clip = {"x": 0, "y": 0, "width": width, "height": min(bottom, height)}
            page.screenshot(path=str(out), full_page=True, clip=clip)
        finally:
            page.close()
        return out
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        own = launch(p)
        try:
            return screenshot(report, out, width, height, own)
        finally:
            own.close()


def _report_for(db: Path, html: Path, watchdog_timeout: float | None) -> Path:
    from pdforensics import store
    from pdforensics.report import write_report
    from pdforensics.verdict import VerdictOptions

    con = store.open_db(db, read_only=True)
    try:
        return write_report(con, html, VerdictOptions(watchdog_timeout_s=watchdog_timeout))
    finally:
        con.close()


EXIT_CANNOT_RUN = 5  # as `verdict --engine spark` without pyspark: what it needs is not installed


def missing() -> str | None:
    """None when a screenshot can be taken here, else what to install (one line)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: install pdforensics with its extra, pip install 'pdforensics[screenshots]'"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM}: apt-get install chromium (or set PDFORENSICS_CHROMIUM)"
    return None


def main() -> None:
    why = missing()
    if why:
        sys.stderr.write(f"pdforensics: screenshot: {why}\n")
        sys.exit(EXIT_CANNOT_RUN)
    ap = argparse.ArgumentParser(description="Screenshot a pdforensics report (or a database's report).")
    ap.add_argument("source", type=Path, help="a report .html, or a pdforensics database")
    ap.add_argument("out", type=Path)
    ap.add_argument("--height", type=int, default=1800)
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--watchdog-timeout", type=float, default=None)
    args = ap.parse_args()
    if args.source.suffix.lower() in (".html", ".htm"):
        screenshot(args.source, args.out, args.width, args.height)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            html = _report_for(args.source, Path(tmp) / "report.html", args.watchdog_timeout)
            screenshot(html, args.out, args.width, args.height)
    print(args.out)


if __name__ == "__main__":
    main()
