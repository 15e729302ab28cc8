"""The library entry points behind each CLI command (usable from Python as is)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.errors import UsageError
from pdforensics.sources import Selection, Source, Window
from pdforensics.timewindow import parse_instant, parse_window

if TYPE_CHECKING:
    from pdforensics.ingest import IngestSummary
    from pdforensics.verdict import Verdict, VerdictOptions


def build_sources(
    directories: list[Path] | None,
    journal_files: list[Path] | None,
    files: list[Path] | None,
    host: str | None,
) -> list[Source]:
    """What to read: the given directories/files, or the local journal when none is given."""
    from pdforensics.sources.detect import open_file_source
    from pdforensics.sources.journal import JournalSource

    sources: list[Source] = []
    for d in directories or []:
        sources.append(JournalSource("directory", [Path(d)]))
    if journal_files:
        sources.append(JournalSource("files", [Path(f) for f in journal_files]))
    for f in files or []:
        sources.append(open_file_source(Path(f), host=host))
    return sources or [JournalSource("local", [])]


def verdict_options(
    since_us: int | None, until_us: int | None, watchdog_timeout: float | None, grace: float | None
) -> VerdictOptions:
    from pdforensics.verdict import VerdictOptions

    opts = VerdictOptions(watchdog_timeout_s=watchdog_timeout, since_us=since_us, until_us=until_us)
    if grace is not None:
        if grace < 0:
            raise UsageError("--grace must be >= 0")
        opts.grace_s = grace
    if watchdog_timeout is not None and watchdog_timeout <= 0:
        raise UsageError("--watchdog-timeout must be > 0")
    return opts


def run_ingest(
    db: Path,
    since: str | None,
    until: str | None,
    units: list[str] | None,
    directories: list[Path] | None,
    journal_files: list[Path] | None,
    files: list[Path] | None,
    tz: str | None,
    host: str | None,
    catalogs: list[Path] | None,
    watchdog_timeout: float | None,
    grace: float | None,
    progress: bool,
    now_us: int,
    date: str | None = None,
    prefix_files: list[Path] | None = None,
) -> tuple[IngestSummary, Verdict | None]:
    from pdforensics.ingest import ingest

    check_date(date)
    window = checked_window(since, until, now_us, tz)
    lock_wait_s = ingest_lock_wait_s()
    selection = Selection(window=window, units=tuple(units or ("sglang*",)))
    catalog = load_catalog(catalogs or [])
    sources = build_sources(directories, journal_files, files, host)
    con = store.open_db(db, wait_s=lock_wait_s)
    try:
        with _progress(progress) as tick:
            summary = ingest(
                db, sources, selection, catalog, tz=tz, progress=tick, con=con, date=date,
                prefix_files=prefix_files or (),
            )  # fmt: skip
        verdict = _verdict_or_none(
            con, window.since_us, window.until_us, watchdog_timeout, grace, sources, now_us
        )
    finally:
        con.close()
    return summary, verdict


def check_date(date: str | None) -> None:
    """--date is a calendar date, YYYY-MM-DD (it dates time-only prefixes)."""
    if date is None:
        return
    import datetime as dt

    try:
        dt.date.fromisoformat(date)
    except ValueError:
        raise UsageError(f"--date {date!r}: give a date as YYYY-MM-DD") from None
    if len(date) != 10:
        raise UsageError(f"--date {date!r}: give a date as YYYY-MM-DD")


# An ingest that finds the database in use waits this long for it (cron and a manual run
# overlapping is the common case) before failing with one line; env PDFORENSICS_LOCK_WAIT (seconds).
INGEST_LOCK_WAIT_S = 10.0


def ingest_lock_wait_s() -> float:
    text = os.environ.get("PDFORENSICS_LOCK_WAIT", "").strip()
    if not text:
        return INGEST_LOCK_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also rejects nan
        raise UsageError(f"PDFORENSICS_LOCK_WAIT must be a number of seconds >= 0, not {text!r}")
    return value


def _verdict_or_none(con, since_us, until_us, watchdog_timeout, grace, sources, now_us) -> Verdict | None:  # type: ignore[no-untyped-def]
    try:
        from pdforensics.verdict import compute_verdict
    except ImportError:
        return None
    live = any(getattr(s, "kind", None) == "local" for s in sources)
    opts = verdict_options(
        since_us, until_us if until_us is not None or not live else now_us, watchdog_timeout, grace
    )
    return compute_verdict(con, opts)


class _progress:
    """A rich progress counter on stderr (only when asked and on a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __enter__(self) -> Callable[[int], None] | None:
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._p = Progress(
            SpinnerColumn(), TextColumn("ingesting {task.completed:,} records"), TimeElapsedColumn(),
            console=Console(stderr=True), transient=True,
        )  # fmt: skip
        self._p.__enter__()
        task = self._p.add_task("ingest", total=None)
        return lambda n: self._p.advance(task, n)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._p.__exit__(None, None, None)


# Instants the database and the views can hold: 0001-01-01 .. 9999-12-31 UTC. `--since 99999999999d`
# parses (it is a duration) but lies outside; DuckDB then failed on it with a cast error.
MIN_US, MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999


def checked_window(since: str | None, until: str | None, now_us: int, tz: str | None = None) -> Window:
    window = parse_window(since, until, now_us, tz)
    for option, value in (("--since", window.since_us), ("--until", window.until_us)):
        if value is not None and not MIN_US <= value <= MAX_US:
            raise UsageError(f"{option} is out of range: it must fall between the years 1 and 9999")
    return window


def _window_us(since: str | None, until: str | None, now_us: int) -> tuple[int | None, int | None]:
    w = checked_window(since, until, now_us, None)
    return w.since_us, w.until_us


def run_verdict(
    db: Path,
    since: str | None,
    until: str | None,
    watchdog_timeout: float | None,
    grace: float | None,
    now_us: int,
) -> Verdict:
    from pdforensics.verdict import compute_verdict

    since_us, until_us = _window_us(since, until, now_us)
    con = store.open_db(db, read_only=True)
    try:
        return compute_verdict(con, verdict_options(since_us, until_us, watchdog_timeout, grace))
    finally:
        con.close()


def run_timeline(db: Path, request: str, watchdog_timeout: float | None, grace: float | None):  # type: ignore[no-untyped-def]
    from pdforensics.verdict import request_timeline

    con = store.open_db(db, read_only=True)
    try:
        return request_timeline(con, request, verdict_options(None, None, watchdog_timeout, grace))
    finally:
        con.close()


def run_simulate(scenario: str, out: Path, now: str | None, seed: int, scale: float, now_us: int) -> Path:
    from pdforensics.simulate import SCENARIOS, simulate

    if scenario not in SCENARIOS:
        raise UsageError(f"unknown scenario {scenario!r}; one of: {', '.join(SCENARIOS)}")
    at = parse_instant(now, now_us) if now else now_us
    return simulate(scenario, out, now_us=at, seed=seed, scale=scale)


def run_report(
    db: Path, out: Path, since: str | None, until: str | None, watchdog_timeout: float | None,
    grace: float | None, show_prompts: bool, now_us: int,
) -> Path:  # fmt: skip
    from pdforensics.report import write_report

    since_us, until_us = _window_us(since, until, now_us)
    con = store.open_db(db, read_only=True)
    try:
        opts = verdict_options(since_us, until_us, watchdog_timeout, grace)
        return write_report(con, out, opts, show_prompts=show_prompts)
    finally:
        con.close()


def run_sql(
    db: Path, query: str | None, fmt: str, list_: bool, watchdog_timeout: float | None, grace: float | None,
    out: TextIO,
) -> None:  # fmt: skip
    from pdforensics.query import list_saved, run_query

    if list_ or query is None:
        list_saved(out)
        return
    run_query(db, query, fmt, verdict_options(None, None, watchdog_timeout, grace), out)


def run_export(db: Path, fmt: str, out: Path, watchdog_timeout: float | None, grace: float | None) -> Path:
    from pdforensics.export import export

    con = store.open_db(db, read_only=True)
    try:
        return export(con, fmt, out, verdict_options(None, None, watchdog_timeout, grace))
    finally:
        con.close()


DEMO_SCENARIO = "decode_restart_old_build"


def run_demo(out: Path, now_us: int) -> None:
    """The README's first command: simulate, ingest, verdict, report."""
    from pdforensics.render import print_ingest_summary, print_verdict

    out.mkdir(parents=True, exist_ok=True)
    incident = run_simulate(DEMO_SCENARIO, out / "incident", None, 0, 1.0, now_us)
    db = out / "demo.duckdb"
    if db.exists():
        db.unlink()
    summary, verdict = run_ingest(
        db=db, since=None, until=None, units=None, directories=None, journal_files=None,
        files=[incident / "journal.export"], tz=None, host=None, catalogs=None, watchdog_timeout=60,
        grace=None, progress=False, now_us=now_us,
    )  # fmt: skip
    print_ingest_summary(summary)
    if verdict is not None:
        print_verdict(verdict, as_json=False)
    report = run_report(db, out / "incident.html", None, None, 60, None, False, now_us)
    print(f"\nreport: {report}\nquery:  pdforensics sql --db {db} stuck_requests")
