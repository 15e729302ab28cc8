"""The library entry points behind each CLI command (usable from Python as is).

Each imports what it needs when it runs: a `verdict` or `sql` never loads the catalog, the
parser or polars (reading a database needs DuckDB alone)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pdforensics import store
from pdforensics.errors import DatabaseError, SourceError, UsageError
from pdforensics.sources import Selection, Source, Window
from pdforensics.timewindow import context_before_window_us, parse_instant, parse_window

if TYPE_CHECKING:
    from pdforensics.compare import Comparison, Side
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
    return sources or [local_journal()]


def local_journal() -> Source:
    """The local journal. A host that keeps none (journald's Storage=none or volatile and not yet
    written, a container) is said at once, as journalctl says it, not read as an empty window."""
    from pdforensics.sources.journal import GROUP_HINT, JournalSource, journal_files, privileged

    if not any(journal_files(d) for d in LOCAL_JOURNAL_DIRS if d.is_dir()):
        seen = "" if privileged() else f"; if this host keeps one, {GROUP_HINT}"
        raise SourceError(
            f"no journal files were found in {' or '.join(map(str, LOCAL_JOURNAL_DIRS))}: no local "
            f"journal to read{seen}; read a collection with -D DIR, a file with --journal-file or a log with --file"
        )
    return JournalSource("local", [])


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
    watchdog_dialect: str | None = None,
    announce: Callable[[str], None] | None = None,
    date: str | None = None,
    prefix_files: list[Path] | None = None,
    jobs: int | None = None,
    parquet: Path | None = None,
) -> tuple[IngestSummary, Verdict | None]:
    """Ingest, then the window's verdict. `announce` gets one line saying what a whole-journal read
    is about to read (entries, from when); `progress` shows a bar on stderr. `jobs`: worker
    processes for a journal directory (None: one per core); `parquet`: also write the data there."""
    from pdforensics.catalog import load_catalog
    from pdforensics.ingest import ingest
    from pdforensics.progress import IngestProgress

    check_date(date)
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if parquet is not None and parquet.exists() and not parquet.is_dir():
        raise UsageError(f"--parquet {parquet}: not a directory")
    window = checked_window(since, until, now_us, tz)
    lock_wait_s = ingest_lock_wait_s()
    # A window is read with its context: the lines before it the verdict reads (requests still
    # open at its start) and each unit's incarnation start (the armed line, server_args).
    windowed = window.since_us is not None
    selection = Selection(
        window=window, units=tuple(units or ("sglang*",)),
        context_us=context_before_window_us(watchdog_timeout, grace) if windowed else 0, heads=windowed,
    )  # fmt: skip
    catalog = load_catalog(catalogs or [], watchdog=watchdog_dialect)
    sources = build_sources(directories, journal_files, files, host)
    extent = journal_extent(sources)
    if announce is not None and since is None and extent.entries:
        announce(extent.describe())
    from pdforensics.verdict import prebuilt_database

    prebuilt_database(db)  # a new database: a copy of the empty one with schema and views
    started = time.monotonic()  # a live journal is read to its end: now_us plus the time reading took
    con = store.open_db(db, wait_s=lock_wait_s)
    try:
        with IngestProgress(progress, extent.entries, input_files(sources)) as tick:
            summary = ingest(
                db, sources, selection, catalog, tz=tz, progress=tick, con=con, date=date,
                prefix_files=prefix_files or (), jobs=jobs, parquet=parquet,
                clock=lambda: now_us + int((time.monotonic() - started) * 1e6),
            )  # fmt: skip
        check_unit_globs(con, summary, selection, sources)
    finally:
        con.close()
    # Judged on a read-only connection once the writer has closed (and checkpointed): the
    # judgement is then kept for the file as every later reader finds it (pdforensics.judgement),
    # so the `verdict`, `report`, `timeline` that follow read it instead of recomputing it.
    verdict = _verdict_or_none(db, window.since_us, window.until_us, watchdog_timeout, grace, sources)
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


def _verdict_or_none(db, since_us, until_us, watchdog_timeout, grace, sources) -> Verdict | None:  # type: ignore[no-untyped-def]
    try:
        from pdforensics.verdict import compute_verdict
    except ImportError:
        return None
    from pdforensics.ingest import VERDICT_MEMORY_LIMIT

    # A live journal's window ends where its reading ended (the run's read_to_us), as it does for
    # every verdict after this one: not at now_us, when the ingest started.
    live = any(getattr(s, "kind", None) == "local" for s in sources)
    opts = verdict_options(since_us, until_us, watchdog_timeout, grace)
    try:
        con = store.open_db(db, read_only=True)
    except DatabaseError:  # another writer took the file the moment this one closed it
        return None
    try:
        con.execute(f"SET memory_limit = '{VERDICT_MEMORY_LIMIT}'")
        return compute_verdict(con, with_unit_environment(con, opts) if live else opts)
    finally:
        con.close()


# Instants the database and the views can hold: 0001-01-01 .. 9999-12-31 UTC. `--since 99999999999d`
# parses (it is a duration) but lies outside; DuckDB then failed on it with a cast error.
MIN_US, MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999


def checked_window(since: str | None, until: str | None, now_us: int, tz: str | None = None) -> Window:
    if tz is not None:  # checked before anything is read or any run is opened
        from pdforensics.parse import checked_zone

        checked_zone(tz)
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
        opts = with_unit_environment(con, verdict_options(since_us, until_us, watchdog_timeout, grace))
        return compute_verdict(con, opts)
    finally:
        con.close()


def window_range(option: str, text: str | None) -> tuple[str | None, str | None]:
    """`A..B` as (since, until); either end may be left out (`A..`: to the last line)."""
    if text is None:
        return None, None
    since, sep, until = text.partition("..")
    if not sep or not (since.strip() or until.strip()):
        raise UsageError(
            f"{option} {text!r}: give a window as WHEN..WHEN, e.g. '2026-11-29 10:00..2026-11-29 11:00'"
        )
    return since.strip() or None, until.strip() or None


def run_compare(
    db: Path, before: str | None, after: str | None, before_db: Path | None, after_db: Path | None,
    watchdog_timeout: float | None, grace: float | None, now_us: int,
) -> Comparison:  # fmt: skip
    """Two windows judged by the same options: of one database (`before`, `after`: WHEN..WHEN), or
    of two (`before_db`, `after_db`: each over its last ingest's window unless one is given)."""
    from pdforensics.compare import compare_sides

    if (before_db is None) != (after_db is None):
        raise UsageError("--before-db and --after-db go together: give both")
    if before_db is None and (before is None or after is None):
        raise UsageError("give --before and --after windows (WHEN..WHEN), or --before-db and --after-db")
    sides = [
        judge_path(path, *window_range(option, text), watchdog_timeout, grace, now_us)
        for option, text, path in (("--before", before, before_db or db), ("--after", after, after_db or db))
    ]
    return compare_sides(*sides)


def judge_path(
    db: Path, since: str | None, until: str | None, watchdog_timeout: float | None, grace: float | None,
    now_us: int,
) -> Side:  # fmt: skip
    """One side of a comparison: the window of `db` (its last ingest's when no bound is given)."""
    from pdforensics.compare import judge_side

    since_us, until_us = _window_us(since, until, now_us)
    con = store.open_db(db, read_only=True)
    try:
        opts = with_unit_environment(con, verdict_options(since_us, until_us, watchdog_timeout, grace))
        return judge_side(con, opts, db=str(db))
    finally:
        con.close()


ENGINES = ("duckdb", "spark")


def run_verdict_on(
    engine: str,
    parquet: Path | None,
    db: Path,
    since: str | None,
    until: str | None,
    watchdog_timeout: float | None,
    grace: float | None,
    now_us: int,
) -> Verdict:
    """The verdict by `engine` over a Parquet folder (`ingest --parquet`), or over `db`'s tables
    (exported to Parquet first for Spark). The live host's unit environment is not read: the
    tables may come from another machine."""
    import tempfile

    from pdforensics.spark import engine as spark_engine

    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: one of {', '.join(ENGINES)}")
    since_us, until_us = _window_us(since, until, now_us)
    opts = verdict_options(since_us, until_us, watchdog_timeout, grace)
    if engine == "duckdb":
        return (
            spark_engine.duckdb_verdict(parquet, opts)
            if parquet
            else run_verdict(db, since, until, watchdog_timeout, grace, now_us)
        )
    if parquet is not None:
        return spark_engine.spark_verdict(parquet, opts)
    with tempfile.TemporaryDirectory(prefix="pdforensics-spark-") as tmp:
        con = store.open_db(db, read_only=True)
        try:
            from pdforensics.spark import load

            load.export_parquet(con, Path(tmp))
        finally:
            con.close()
        return spark_engine.spark_verdict(Path(tmp), opts)


def with_unit_environment(con, opts: VerdictOptions) -> VerdictOptions:  # type: ignore[no-untyped-def]
    """Read from this host's journal: the timeout the prefill unit's environment sets counts as
    deployment evidence (below an armed line)."""
    from pdforensics.environment import unit_timeout

    found = unit_timeout(con)
    if found is not None:
        opts.env_timeout_s, opts.env_unit = found.timeout_s, found.unit
    return opts


def run_timeline(db: Path, request: str, watchdog_timeout: float | None, grace: float | None):  # type: ignore[no-untyped-def]
    from pdforensics.verdict import request_timeline

    con = store.open_db(db, read_only=True)
    try:
        return request_timeline(con, request, verdict_options(None, None, watchdog_timeout, grace))
    finally:
        con.close()


def resolve_request(con: Any, key: str) -> str:
    """A room or rid as typed, or the one room/rid it is a unique prefix of, as the room's number
    (`verdict.find_request`, which `request_timeline` calls itself)."""
    from pdforensics.verdict import find_request

    return str(find_request(con, key))


def run_simulate(
    scenario: str,
    out: Path,
    now: str | None,
    seed: int,
    scale: float,
    now_us: int,
    journal_remote: Path | None = None,
    tz: str | None = None,
) -> Path:
    """The incident as journal export + json + expected.json, and as plain logs in out/plain/;
    with `journal_remote`, also as a journal-remote collection there (remote-<host>.journal);
    with `tz`, every host's local time in that zone."""
    from pdforensics.simulate import SCENARIOS, simulate, simulate_plain
    from pdforensics.simulate.remote import write_journal_remote

    if scenario not in SCENARIOS:
        raise UsageError(f"unknown scenario {scenario!r}; one of: {', '.join(SCENARIOS)}")
    at = parse_instant(now, now_us) if now else now_us
    path = simulate(scenario, out, now_us=at, seed=seed, scale=scale, tz=tz)
    simulate_plain(scenario, out, now_us=at, seed=seed, scale=scale, tz=tz)
    if journal_remote is not None:
        write_journal_remote(path / "journal.export", journal_remote)
    return path


def next_commands(incident: Path, db: Path, journal_remote: Path | None = None) -> list[str]:
    """The commands that give a simulated incident's expected answer: its ingests (one per
    window when expected.json has several) and the verdict with every option it needs (the
    timeout the operator knows, the window)."""
    import json
    import shlex
    from datetime import UTC, datetime

    def when(us: int) -> str:
        return f"{datetime.fromtimestamp(us / 1e6, UTC):%Y-%m-%dT%H:%M:%SZ}"

    expected = json.loads((incident / "expected.json").read_text())
    source = (
        ["-D", str(journal_remote)]
        if journal_remote is not None
        else ["--file", str(incident / "journal.export")]
    )
    ingest = ["pdforensics", "ingest", "--db", str(db), *source]
    runs = [
        [*ingest, "--since", when(w["since_us"]), "--until", when(w["until_us"])]
        for w in expected.get("ingests") or []
    ]
    opts = expected.get("verdict_options") or {}
    verdict = ["pdforensics", "verdict", "--db", str(db)]
    if "watchdog_timeout_s" in opts:
        verdict += ["--watchdog-timeout", f"{opts['watchdog_timeout_s']:g}"]
    for name in ("since", "until"):
        if (us := opts.get(f"{name}_us")) is not None:
            verdict += [f"--{name}", when(us)]
    return [shlex.join(c) for c in (runs or [ingest])] + [shlex.join(verdict)]


def run_report(
    db: Path, out: Path, since: str | None, until: str | None, watchdog_timeout: float | None,
    grace: float | None, show_prompts: bool, now_us: int, compare: str | None = None,
    compare_db: Path | None = None,
) -> Path:  # fmt: skip
    """The report of the window; with `compare` (WHEN..WHEN) and/or `compare_db`, a section setting
    that window (the before side) beside this one (pdforensics.compare)."""
    from pdforensics.report import check_out, write_report

    since_us, until_us = _window_us(since, until, now_us)
    comparison = None
    if compare is not None or compare_db is not None:
        from pdforensics.compare import compare_sides

        check_out(out)  # before the work, as write_report does
        before = judge_path(
            compare_db or db, *window_range("--compare", compare), watchdog_timeout, grace, now_us
        )
        comparison = compare_sides(before, judge_path(db, since, until, watchdog_timeout, grace, now_us))
    con = store.open_db(db, read_only=True)
    try:
        opts = with_unit_environment(con, verdict_options(since_us, until_us, watchdog_timeout, grace))
        return write_report(con, out, opts, show_prompts=show_prompts, comparison=comparison)
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


def run_export(
    db: Path, fmt: str, out: Path, watchdog_timeout: float | None, grace: float | None,
    since: str | None = None, until: str | None = None, now_us: int | None = None,
) -> Path:  # fmt: skip
    from pdforensics.export import export

    since_us, until_us = _window_us(since, until, now_us if now_us is not None else time.time_ns() // 1000)
    con = store.open_db(db, read_only=True)
    try:
        return export(con, fmt, out, verdict_options(since_us, until_us, watchdog_timeout, grace))
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


def input_files(sources: list[Source]) -> list[Path]:
    """The plain/export/json files the sources read (journals are memory-mapped: not these)."""
    return [Path(s.path) for s in sources if getattr(s, "kind", None) is None and getattr(s, "path", None)]


# ------------------------------------------------------------------ what a journal holds


@dataclass
class JournalExtent:
    """What the journal files of the sources hold, from their headers (no entry is read)."""

    entries: int = 0
    files: int = 0
    nbytes: int = 0
    head_us: int | None = None

    def describe(self) -> str:
        from pdforensics.verdict import iso

        since = iso(self.head_us) if self.head_us else "its first entry"
        return (
            f"no --since: reading the whole journal, {self.entries:,} entries in {self.files} "
            f"file{'s' if self.files != 1 else ''} "
            f"({self.nbytes / 1e6:,.0f} MB) from {since}; --since 1h reads the last hour only"
        )


# Journal file header (systemd journal-def.h): n_entries and head_entry_realtime, little-endian u64.
_N_ENTRIES_AT, _HEAD_REALTIME_AT = 152, 184
LOCAL_JOURNAL_DIRS = (Path("/var/log/journal"), Path("/run/log/journal"))


def journal_extent(sources: list[Source]) -> JournalExtent:
    """Entries, files, bytes and first entry time of the journal files the sources will read."""
    files: list[Path] = []
    for src in sources:
        kind = getattr(src, "kind", None)
        if kind == "local":
            for d in LOCAL_JOURNAL_DIRS:
                try:
                    files += list(d.rglob("*.journal"))
                except OSError:
                    continue  # not ours to read: the reader names the systemd-journal group
        elif kind in ("directory", "files"):
            files += [Path(f) for f in getattr(src, "files", [])]
    extent = JournalExtent()
    for f in files:
        try:
            with open(f, "rb") as fh:
                header = fh.read(_HEAD_REALTIME_AT + 8)
            size = f.stat().st_size
        except OSError:
            continue  # unreadable here: the reader says so, or skips it as journalctl does
        if len(header) < _HEAD_REALTIME_AT + 8 or not header.startswith(b"LPKSHHRH"):
            continue
        extent.entries += int.from_bytes(header[_N_ENTRIES_AT : _N_ENTRIES_AT + 8], "little")
        head = int.from_bytes(header[_HEAD_REALTIME_AT : _HEAD_REALTIME_AT + 8], "little")
        if head and (extent.head_us is None or head < extent.head_us):
            extent.head_us = head
        extent.files += 1
        extent.nbytes += size
    return extent


# ------------------------------------------------------------------ unit globs that match nothing


def check_unit_globs(con: Any, summary: IngestSummary, selection: Selection, sources: list[Source]) -> None:
    """Fill summary.unmatched_units (globs no stored line matches) and summary.units_present."""
    from fnmatch import fnmatchcase

    from pdforensics.sources.plain import PlainFileSource

    filtered = [s for s in sources if not isinstance(s, PlainFileSource)]  # plain files: not filtered
    if not filtered or summary.records + summary.skipped == 0:  # nothing read: "nothing was read" says so
        return
    sources = filtered
    globs = [g for g in selection.units if g != "*"]
    seen = {u.unit for u in summary.units if u.unit}
    unmatched = [g for g in globs if not any(fnmatchcase(u, g) for u in seen)]
    if unmatched:  # maybe stored by an earlier ingest (a re-ingest stores nothing new)
        stored = {
            r[0] for r in con.execute("SELECT DISTINCT unit FROM lines WHERE unit IS NOT NULL").fetchall()
        }
        unmatched = [g for g in unmatched if not any(fnmatchcase(u, g) for u in stored)]
    if not unmatched:
        return
    summary.unmatched_units = unmatched
    summary.units_present = units_present(sources, selection)


def units_present(sources: list[Source], selection: Selection) -> list[str]:
    """The units the sources hold (failure path only): journals from their field index, files by
    reading them again with every unit selected."""
    units: set[str] = set()
    for src in sources:
        kind = getattr(src, "kind", None)
        if kind in ("local", "directory", "files"):
            units |= _journal_units(src)
            continue
        every = Selection(window=selection.window, units=("*",))
        for batch in src.batches(every, 65_536):
            units |= set(batch.records["unit"].drop_nulls().unique().to_list())
    return sorted(units)


def _journal_units(src: Source) -> set[str]:
    try:
        from systemd import journal
    except ImportError:
        return set()
    kind = getattr(src, "kind", None)
    paths = [str(p) for p in getattr(src, "paths", [])]
    try:
        if kind == "directory":
            reader = journal.Reader(path=paths[0])
        elif kind == "files":
            reader = journal.Reader(files=paths)
        else:
            reader = journal.Reader()
        with reader:
            return {str(u) for u in reader.query_unique("_SYSTEMD_UNIT")}
    except OSError:
        return set()
