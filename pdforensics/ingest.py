"""Orchestrates source -> parse -> store, one transaction per batch, and sums up the run."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import duckdb
import polars as pl

from pdforensics import batches, store
from pdforensics.batches import (
    BATCH_SIZE,
    KEY,
    Context,
    Prepared,
    coalesce,
    drop_stored,
    prepare_batch,
)
from pdforensics.catalog import Catalog
from pdforensics.catalog.prefixes import load_prefixes
from pdforensics.errors import DatabaseError, is_interrupt
from pdforensics.ingest_jobs import collection_plan, read_collection
from pdforensics.parquet_store import ParquetMirror
from pdforensics.parse import (
    STATS_KEY,
    FileZone,
    Parsed,
    ParseOptions,
    StreamCarry,
    kept_stats,
)
from pdforensics.sources import FILE_MARK, RecordBatch, Selection, Source, Window
from pdforensics.sources._common import HEAD_BYTES
from pdforensics.sources.journal import JournalSource
from pdforensics.sources.plain import PlainFileSource, grown_key


@dataclass
class UnitCount:
    host: str | None
    unit: str | None
    engine: str | None
    lines: int
    recognised: int
    parse_errors: int


@dataclass
class SourceStats:
    """What the prefix and time passes made of one source's unit (store.source_stats)."""

    source: str | None
    host: str | None
    unit: str | None
    lines: int
    no_prefix: int  # first lines of records with no known prefix and no catalog entry
    no_time: int  # first lines of records with no time of their own (they inherit one, or none)
    inherited_time: int
    time_only: int  # time-only prefixes dated from other lines or --date
    joined: int  # lines joined into the record before them (CRI partial, LineMax, wrapped)
    date_from: str | None
    zone: str | None  # the zone its zone-less times were read in, and why
    engine_by_name: str | None
    engine_by_lines: str | None
    prefixes: str | None  # the prefix forms seen: "cri=300, rfc3339=2"
    read_to_us: int | None = None  # the latest time read (its lines' last, or a live journal's reading)


@dataclass
class IngestSummary:
    ingest_id: int
    db: str
    sources: list[str]
    readers: list[str]
    records: int = 0  # read from the sources and selected
    stored: int = 0  # new lines written
    duplicates: int = 0  # already in the database (re-ingest)
    skipped: int = 0  # outside the unit/time selection
    null_messages: int = 0  # MESSAGE was null in `journalctl -o json` input (export it with --all)
    rejected: int = 0  # not readable as a record
    unrecognised: int = 0  # stored, but no catalog entry matched
    parse_errors: int = 0  # a catalog anchor matched but its pattern did not
    elapsed_s: float = 0.0  # reading, parsing and storing
    views_s: float = 0.0  # (re)creating the classification views afterwards
    units: list[UnitCount] = field(default_factory=list)
    rejects_by_reason: dict[str, int] = field(default_factory=dict)
    # Filled by api.check_unit_globs: --unit globs no line matched, and the units the sources hold.
    unmatched_units: list[str] = field(default_factory=list)
    units_present: list[str] = field(default_factory=list)
    source_stats: list[SourceStats] = field(default_factory=list)
    # How sources read their input where that varies (journal files: direct reader or python-systemd, why)
    reading_notes: list[str] = field(default_factory=list)
    # Context read before the window (Selection.context_us, .heads): how far, and the lines stored
    # from the units' incarnation starts before it
    context_s: float = 0.0
    head_lines: int = 0

    @property
    def lines_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s else 0.0


# DuckDB's buffer pool otherwise keeps every block the ingest wrote (up to 80 % of RAM: 3.5 GB at
# 10M lines); written blocks can be evicted. 250 MB: the 10M-entry journal ingest peaked at 1,521 MB
# with 500 MB and at 1,287 MB with 250 MB, for ~6 % more CPU. The 10M-line plain ingest (peak RSS in
# KiB, one run each): 1,168,940 with 250 MB and two reader batches ahead (141 s); with one ahead,
# 1,045,324 with 150 MB (150 s), 1,007,676 with 100 MB (165 s). A batch of 3 KB lines (400 MB) still
# stores under 100 MB (DuckDB spills).
INGEST_MEMORY_LIMIT = "150MB"
# The verdict the ingest prints judges every request at once: under DuckDB's default limit (80 % of
# RAM) it was the 10M-line ingest's peak, 5.16 GB of 1.6M requests. 500 MB: measured 14.5 s against
# 5.8 s there (it spills to <db>.tmp), no slower at 1M lines; later readers read the kept judgement.
VERDICT_MEMORY_LIMIT = "500MB"


def _batches(sources: list[Source], selection: Selection, batch_size: int) -> Iterator[RecordBatch]:
    def read() -> Iterator[RecordBatch]:
        for src in sources:
            yield from src.batches(selection, batch_size)

    return coalesce(read(), batch_size)


def _plan_resume(con: duckdb.DuckDBPyConnection, src: Source, selection: Selection) -> None:
    """Skip what the database's resume marks say is stored.

    Plain file: one of the size it had when an ingest read it to its end is not read at all; a
    grown one is read from a little before its mark (the stored lines there are parse context for
    the new ones, see Context). Journal files: read from a little before the last entry the same
    selection stored (JournalSource.mark_key says when that is sound).
    """
    if isinstance(src, JournalSource):
        key = src.mark_key(selection)
        mark = store.get_mark(con, key) if key else None
        src.resume(mark[1] if mark else None, batches.CONTEXT_RECORDS)
        return
    if not isinstance(src, PlainFileSource):
        return
    src.resume(0, 0)
    src.key = _grown_from(con, src)
    if src.grows_key:
        store.note_file_head(con, src.key, src.head_len)
    mark = store.get_mark(con, FILE_MARK + src.key)
    if mark is None:
        return
    upto, detail = mark
    eof_size = None if detail == "-" else int(detail)
    size = src.raw_size()
    if eof_size is not None and eof_size == size:
        src.resume(None, store.stored_count(con, src.key))
    elif src.compressed or size >= upto:
        # A gzip file's raw size says nothing of its stream's length: it may resume past the end.
        start, unread = store.resume_point(con, src.key, upto, batches.CONTEXT_RECORDS)
        src.resume(start, unread)
    # Else the file shrank (rewritten, same head): read it whole.


def _file_zones(sources: list[Source], opts: ParseOptions) -> dict[str, FileZone]:
    """The offset each plain file to be read settles from its own head (PlainFileSource.zone), by
    source label: once per file, before any of its batches; no batch adds to it."""
    zones = {}
    for src in sources:
        if isinstance(src, PlainFileSource) and src.start is not None and (zone := src.zone(opts)):
            zones[src.label] = zone
    return zones


def _grown_from(con: duckdb.DuckDBPyConnection, src: PlainFileSource) -> str:
    """A file's identity while it grows (sources.plain.grown_key): a file stored when it was shorter
    than the head its key hashes keeps that key, so long as it still starts with the bytes stored then."""
    noted = store.file_heads_shorter_than(con, HEAD_BYTES + 1)
    return grown_key(src.key, src.head_len, noted, src.prefix_key)


def ingest(
    db: str | Path,
    sources: list[Source],
    selection: Selection,
    catalog: Catalog,
    tz: str | None = None,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
    views: bool = True,
    date: str | None = None,
    prefix_files: list[Path] | tuple[Path, ...] = (),
    jobs: int | None = None,
    parquet: Path | None = None,
    clock: Callable[[], int] | None = None,
) -> IngestSummary:
    """Read every source, store what is new, and return the run's accounting.

    `date` (YYYY-MM-DD) dates time-only prefixes no other line of their file dates; `prefix_files`
    add prefix forms to catalog/prefixes.toml. `jobs`: how many things run at once (None: one per
    core). 1: each batch read, parsed and stored in turn; 2: the parse of the next batch overlaps
    the store of this one; 3 or more, on a journal directory of several hosts: jobs - 1 worker
    processes read and parse its files while this one stores (see ingest_jobs; they are spawned, so
    a script calling this needs the usual `if __name__ == "__main__":` guard). DuckDB stores on one
    thread whatever `jobs` is: a batch is one row group.
    `parquet`: also write the data there (parquet_store). `clock`: now in µs, when a live journal
    was read to its end (default: the system clock)."""
    opts = ParseOptions(catalog=catalog, tz=tz, prefixes=load_prefixes(prefix_files), date=date)
    own = con is None
    if own and views:
        _prebuilt(Path(db))
    con = con or store.open_db(db)
    started = time.perf_counter()
    mirror = ParquetMirror(parquet) if parquet is not None else None
    run = _Run(batch_size, progress, views, jobs, mirror, clock or _now_us)
    try:
        return _ingest(con, db, sources, selection, opts, run, started)
    except (duckdb.Error, RuntimeError) as exc:
        if is_interrupt(exc):  # Ctrl-C inside a DuckDB call: an interruption, not a database fault
            raise KeyboardInterrupt from None
        if not isinstance(exc, _WRITE_FAILED):
            raise
        # Disk full ("Failed to commit: Could not write file"), I/O error: one line for the user;
        # every committed batch stays.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if _NOT_WRITABLE.search(first):  # a rerun meets the same wall: say what to change instead
            raise DatabaseError(
                f"writing {db} failed: {first}; the batches committed before this are kept; "
                f"{_not_writable_advice(Path(db))}"
            ) from None
        raise DatabaseError(
            f"writing {db} failed: {first}; the batches committed before this are kept, rerun to continue"
        ) from None
    finally:
        if own:
            con.close()


_NOT_WRITABLE = re.compile(r"Permission denied|Read-only file system|Operation not permitted", re.IGNORECASE)


def _not_writable_advice(db: Path) -> str:
    """What to do when the database cannot be written: rerunning as it is would fail again."""
    folder = db.parent if str(db.parent) else Path(".")
    if os.access(db, os.W_OK) and not os.access(folder, os.W_OK):
        return store.read_only_folder(db)
    return f"{db} or its folder {folder} is not writable: make both writable, or pass a --db in a writable folder"


_WRITE_FAILED = (
    duckdb.IOException,
    duckdb.FatalException,
    duckdb.OutOfMemoryException,
    duckdb.TransactionException,
)


@dataclass
class _Run:
    """How one ingest runs (ingest's options)."""

    batch_size: int
    progress: Callable[[int], None] | None
    views: bool
    jobs: int | None
    mirror: ParquetMirror | None
    clock: Callable[[], int]  # now in µs: when a live journal was read to its end


def _ingest(
    con: duckdb.DuckDBPyConnection,
    db: str | Path,
    sources: list[Source],
    selection: Selection,
    opts: ParseOptions,
    run: _Run,
    started: float,
) -> IngestSummary:
    units = ",".join(selection.units)
    labels = [s.label for s in sources]
    ingest_id = store.begin_ingest(
        con, "; ".join(labels), "", units, selection.window.since_us, selection.window.until_us
    )
    summary = IngestSummary(ingest_id=ingest_id, db=str(db), sources=labels, readers=[])
    carry = StreamCarry()
    context = Context()
    next_id = store.next_line_id(con)
    status = "interrupted"

    batch_size, progress, mirror = run.batch_size, run.progress, run.mirror
    read = selection.reading()  # the window and the context before it
    summary.context_s = selection.context_us / 1e6 if read is not selection else 0.0
    collection = collection_plan(sources, run.jobs)
    try:
        if mirror is not None:
            mirror.begin(con, ingest_id)
        # DuckDB on one thread whatever --jobs says: a batch is one row group, which one thread
        # writes and compresses; a second DuckDB thread only contends with the parse (measured at
        # 1M lines: 0.1-1.5 s less CPU, docs/benchmark.md "session 9").
        with store.bulk_load(con, INGEST_MEMORY_LIMIT, threads=1):
            next_id = _store_heads(con, ingest_id, sources, read, opts, next_id, summary, context, mirror)
            if collection is not None:
                commit = partial(_commit, con, ingest_id, summary=summary, context=context, remap={},
                                 progress=progress, mirror=mirror)  # fmt: skip
                read_collection(con, collection, read, opts, batch_size, next_id, commit)
            else:
                for src in sources:
                    _plan_resume(con, src, read)
                carry.file_zones.update(_file_zones(sources, opts))
                batches = _batches(sources, read, batch_size)
                _pipeline(
                    con, ingest_id, batches, read.window, opts, carry, next_id, summary, context,
                    progress, mirror, overlap=run.jobs != 1,
                )  # fmt: skip
        status = "complete"
    finally:
        summary.readers = sorted({s.reader for s in sources})
        summary.reading_notes = [
            n for s in sources if isinstance(s, JournalSource) and (n := s.reading_note())
        ]
        readers = "; ".join([",".join(summary.readers), *summary.reading_notes])  # ingests.readers
        # a live journal read to its end covers the time up to now, logged in or not
        read_at = run.clock()
        reached = {s.label: read_at for s in sources if isinstance(s, JournalSource) and s.kind == "local"}
        with suppress(pl.exceptions.PolarsError):  # the stats never cost the run its status
            _finish_stats(con, summary, context.stats_parts, reached if status == "complete" else {},
                          selection.window.until_us)  # fmt: skip
        try:
            store.finish_ingest(con, ingest_id, status, readers)
        except duckdb.Error:
            if status == "complete":
                raise
            # Already failing: keep that error. After a rollback of whatever the failure left open,
            # record the run as interrupted; if even that fails (disk full) it stays 'running' and
            # the next ingest marks it interrupted.
            with suppress(duckdb.Error):
                con.execute("ROLLBACK")
            with suppress(duckdb.Error):
                store.finish_ingest(con, ingest_id, status, readers)
    summary.elapsed_s = time.perf_counter() - started
    views_started = time.perf_counter()
    if run.views:
        _install_views(con)
    summary.views_s = time.perf_counter() - views_started
    if mirror is not None:  # last: `ingests` says 'complete', `meta` has the views' version
        mirror.finish(con)
    _fill_breakdown(con, summary)
    return summary


def _store_heads(
    con: duckdb.DuckDBPyConnection,
    ingest_id: int,
    sources: list[Source],
    read: Selection,
    opts: ParseOptions,
    next_id: int,
    summary: IngestSummary,
    context: Context,
    mirror: ParquetMirror | None,
) -> int:
    """Store the units' incarnation starts before the reading window (JournalSource.context_heads)
    ahead of the window's lines; returns the next free line_id. Parsed on their own (a fresh
    carry: no continuation links across the hours between them and the window)."""
    if read.window.since_us is None or not read.heads:
        return next_id
    journals = [s for s in sources if isinstance(s, JournalSource)]
    batches = (b for src in journals for b in src.context_heads(read))
    before = summary.stored
    _pipeline(
        con, ingest_id, batches, Window(None, read.window.since_us), opts, StreamCarry(), next_id,
        summary, context, None, mirror, overlap=False,
    )  # fmt: skip
    summary.head_lines = summary.stored - before
    context.records = context.ids = None  # parse context for the window is its own
    return store.next_line_id(con)


def _pipeline(
    con: duckdb.DuckDBPyConnection,
    ingest_id: int,
    batches: Iterator[RecordBatch],
    window: Window,
    opts: ParseOptions,
    carry: StreamCarry,
    next_id: int,
    summary: IngestSummary,
    context: Context,
    progress: Callable[[int], None] | None,
    mirror: ParquetMirror | None = None,
    overlap: bool = True,
) -> None:
    """Parse batch N+1 on a worker thread while batch N is stored (both cores busy).

    Sources read ahead on their own thread too. DuckDB's insert of one batch runs on one core and
    polars releases the GIL, so the parse of the next batch costs no wall time while it fits in the
    store's. Batches are stored in order, one transaction each, on this thread. `overlap` False
    (`--jobs 1`): each batch is parsed, then stored, on this thread (one job at a time)."""
    reader = con.cursor()  # its own connection: sees the committed batches, not the one being written
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pdforensics-parse") if overlap else None
    first_id = [next_id]  # only the worker reads and advances it: batches parse in order

    def ids(n: int) -> int:
        first_id[0] += n
        return first_id[0] - n

    def prepare(batch: RecordBatch) -> Prepared:
        return prepare_batch(partial(store.known_lines, reader), batch, window, opts, carry, ids, context)

    pending: Future[Prepared] | None = None
    remap: dict[int, int] = {}

    def _flush() -> None:
        """A source failed (or Ctrl-C) while the batch before was parsed: store that one first,
        as the run would have without the pipeline."""
        nonlocal pending
        if pending is not None:
            done, pending = pending, None
            _commit(con, ingest_id, done.result(), summary, context, remap, progress, mirror)

    try:
        if pool is None:
            for batch in batches:
                _commit(con, ingest_id, prepare(batch), summary, context, remap, progress, mirror)
            return
        for batch in _keeping(batches, _flush):
            ahead = pool.submit(prepare, batch)
            if pending is not None:
                _commit(con, ingest_id, pending.result(), summary, context, remap, progress, mirror)
            pending = ahead
        if pending is not None:
            _commit(con, ingest_id, pending.result(), summary, context, remap, progress, mirror)
            pending = None
    finally:
        if pending is not None:
            pending.cancel()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        reader.close()


def _keeping(batches: Iterator[RecordBatch], before_failing: Callable[[], None]) -> Iterator[RecordBatch]:
    """The batches; when reading one fails, `before_failing` runs before the error goes on."""
    it = iter(batches)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except BaseException:
            before_failing()
            raise
        yield batch


def _commit(
    con: duckdb.DuckDBPyConnection,
    ingest_id: int,
    prep: Prepared,
    summary: IngestSummary,
    context: Context,
    remap: dict[int, int],
    progress: Callable[[int], None] | None,
    mirror: ParquetMirror | None = None,
) -> None:
    """Store one prepared batch in its own transaction and add its counts to the run's (and, with
    `mirror`, append the stored lines and events to the Parquet copy)."""
    batch, parsed = prep.batch, prep.parsed
    parsed, late = (parsed, 0) if prep.unseen else _drop_stored_meanwhile(con, parsed, remap)
    if parsed.lines.height:  # the stats of what is stored (context and out-of-window lines dropped)
        same = parsed.lines.height == parsed.stats["lines"].sum()
        context.stats_parts.append(parsed.stats if same else kept_stats(parsed))
    unread = batch.known_unread + (store.stored_count(con, *batch.known_before) if batch.known_before else 0)
    counts = {
        # a plain file's lines outside the window are read, parsed, then counted as skipped only
        "records": prep.records - prep.outside + unread,
        "stored": parsed.lines.height,
        "duplicates": prep.records - prep.fresh + late + unread,
        "skipped": batch.skipped + prep.outside,
        "rejected": batch.rejects.height,
        "unrecognised": parsed.lines["event"].null_count(),
        "parse_errors": parsed.lines.height - parsed.lines["parse_error"].null_count(),
    }
    store.store_batch(con, ingest_id, parsed.lines, parsed.events, batch.rejects, counts, batch.marks)
    if mirror is not None and parsed.lines.height:
        mirror.batch(con, ingest_id, parsed.lines["line_id"].min(), parsed.lines["line_id"].max())  # type: ignore[arg-type]
    for key, value in counts.items():
        setattr(summary, key, getattr(summary, key) + value)
    summary.null_messages += batch.null_messages
    if progress:
        progress(prep.records + batch.skipped + batch.rejects.height)


def _drop_stored_meanwhile(
    con: duckdb.DuckDBPyConnection, parsed: Parsed, remap: dict[int, int]
) -> tuple[Parsed, int]:
    """Lines the batch before this one stored while this one was parsed (the same entry in two
    overlapping inputs, a batch apart) are dropped here; links to them point at the stored ids,
    in this batch and in every later one (`remap`)."""
    if remap and parsed.lines.height:
        old, new = list(remap), list(remap.values())
        parsed = replace(parsed, lines=parsed.lines.with_columns(pl.col("cont_of").replace(old, new)))
    if not parsed.lines.height:
        return parsed, 0
    ids = store.known_lines(con, parsed.lines.select(KEY))
    if not ids.height:
        return parsed, 0
    parsed, mapping = drop_stored(parsed, ids)
    remap.update(mapping)
    return parsed, ids.height


_COUNTS = ["lines", "no_prefix", "no_time", "inherited_time", "time_only", "joined"]


def _now_us() -> int:
    return time.time_ns() // 1000


def read_through(stats: pl.DataFrame, reached: dict[str, int], until_us: int | None) -> pl.DataFrame:
    """stats with read_to_us raised to the time each source in `reached` was read up to (a live
    journal read to its end: now), never past the window's --until."""
    if not reached:
        return stats
    upto = pl.col("source").replace_strict(reached, default=None, return_dtype=pl.Int64)
    if until_us is not None:
        upto = pl.min_horizontal(upto, pl.lit(until_us - 1))
    return stats.with_columns(pl.max_horizontal("read_to_us", upto).alias("read_to_us"))


def _finish_stats(
    con: duckdb.DuckDBPyConnection,
    summary: IngestSummary,
    parts_: list[pl.DataFrame],
    reached: dict[str, int],
    until_us: int | None,
) -> None:
    """The batches' per-unit stats summed up, stored (store.source_stats) and kept for the summary.
    `reached`: sources read up to a time their lines may not show (read_through). A failure to
    store them (disk full) leaves the run's own error as what the user sees."""
    if not parts_:
        return
    parts = pl.concat(parts_)
    forms = (
        parts.select(*STATS_KEY, pl.col("prefixes").str.split(", "))
        .explode("prefixes")
        .drop_nulls("prefixes")
        .with_columns(pl.col("prefixes").str.split_exact("=", 1).struct.rename_fields(["form", "n"]))
        .unnest("prefixes")
        .group_by([*STATS_KEY, "form"], maintain_order=True)
        .agg(pl.col("n").cast(pl.Int64).sum())
        .group_by(STATS_KEY, maintain_order=True)
        .agg(pl.format("{}={}", "form", "n").str.join(", ").alias("prefixes"))
    )
    total = parts.group_by(STATS_KEY, maintain_order=True).agg(
        *[pl.col(c).sum() for c in _COUNTS],
        *[pl.col(c).drop_nulls().first() for c in ("date_from", "zone", "engine_by_name")],
        pl.col("engine_by_lines").drop_nulls().last(),
        pl.col("read_to_us").max(),
    )
    total = total.join(forms, on=STATS_KEY, how="left", nulls_equal=True).sort(STATS_KEY, nulls_last=True)
    total = read_through(total, reached, until_us)
    summary.source_stats = [SourceStats(**row) for row in total.iter_rows(named=True)]
    with suppress(duckdb.Error):
        store.save_source_stats(con, summary.ingest_id, total)


def _install_views(con: duckdb.DuckDBPyConnection) -> None:
    """This version's views, unless they are installed already (views are bound when queried:
    new lines need no reinstall)."""
    try:
        from pdforensics.verdict import ensure_views
    except ImportError:  # the verdict stage is optional for a bare ingest
        return
    ensure_views(con)


def _prebuilt(db: Path) -> None:
    """A new database from the prebuilt empty one (verdict.prebuilt_database)."""
    try:
        from pdforensics.verdict import prebuilt_database
    except ImportError:
        return
    prebuilt_database(db)


def _fill_breakdown(con: duckdb.DuckDBPyConnection, summary: IngestSummary) -> None:
    rows = con.execute(
        """SELECT host, unit, mode(engine), count(*), count(event), count(parse_error)
           FROM lines WHERE ingest_id = ? GROUP BY host, unit ORDER BY host, unit""",
        [summary.ingest_id],
    ).fetchall()
    summary.units = [UnitCount(*r) for r in rows]
    reasons = con.execute(
        "SELECT reason, count(*) FROM rejects WHERE ingest_id = ? GROUP BY reason ORDER BY 2 DESC",
        [summary.ingest_id],
    ).fetchall()
    summary.rejects_by_reason = {r: n for r, n in reasons}
