"""Orchestrates source -> parse -> store, one transaction per batch, and sums up the run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from pdforensics import store
from pdforensics.catalog import Catalog
from pdforensics.parse import Parsed, ParseOptions, StreamCarry, parse_records
from pdforensics.sources import RecordBatch, Selection, Source, Window


@dataclass
class UnitCount:
    host: str | None
    unit: str | None
    engine: str | None
    lines: int
    recognised: int
    parse_errors: int


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

    @property
    def lines_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s else 0.0


def _batches(sources: list[Source], selection: Selection, batch_size: int) -> Iterator[RecordBatch]:
    for src in sources:
        yield from src.batches(selection, batch_size)


def ingest(
    db: str | Path,
    sources: list[Source],
    selection: Selection,
    catalog: Catalog,
    tz: str | None = None,
    batch_size: int = 100_000,
    progress: Callable[[int], None] | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
    views: bool = True,
) -> IngestSummary:
    """Read every source, store what is new, and return the run's accounting."""
    own = con is None
    con = con or store.open_db(db)
    started = time.perf_counter()
    try:
        units = ",".join(selection.units)
        labels = [s.label for s in sources]
        ingest_id = store.begin_ingest(
            con, "; ".join(labels), "", units, selection.window.since_us, selection.window.until_us
        )
        summary = IngestSummary(ingest_id=ingest_id, db=str(db), sources=labels, readers=[])
        opts = ParseOptions(catalog=catalog, tz=tz)
        carry = StreamCarry()
        next_id = store.next_line_id(con)
        status = "interrupted"
        try:
            # Sources read ahead on their own thread; parsing here overlaps with it.
            for batch in _batches(sources, selection, batch_size):
                next_id = _store_one(con, ingest_id, batch, selection.window, opts, carry, next_id, summary)
                if progress:
                    progress(batch.records.height + batch.skipped + batch.rejects.height)
            status = "complete"
        finally:
            summary.readers = sorted({s.reader for s in sources})
            store.finish_ingest(con, ingest_id, status, ",".join(summary.readers))
        summary.elapsed_s = time.perf_counter() - started
        views_started = time.perf_counter()
        if views:
            _install_views(con)
        summary.views_s = time.perf_counter() - views_started
        _fill_breakdown(con, summary)
        return summary
    finally:
        if own:
            con.close()


def _store_one(
    con: duckdb.DuckDBPyConnection,
    ingest_id: int,
    batch: RecordBatch,
    window: Window,
    opts: ParseOptions,
    carry: StreamCarry,
    next_id: int,
    summary: IngestSummary,
) -> int:
    fresh = store.drop_known(con, batch.records)
    parsed = parse_records(fresh, opts, line_id_base=next_id, carry=carry)
    parsed, outside = _inside_window(parsed, window)
    counts = {
        "records": batch.records.height,
        "stored": parsed.lines.height,
        "duplicates": batch.records.height - fresh.height,
        "skipped": batch.skipped + outside,
        "rejected": batch.rejects.height,
        "unrecognised": parsed.lines["event"].null_count(),
        "parse_errors": parsed.lines.height - parsed.lines["parse_error"].null_count(),
    }
    store.store_batch(con, ingest_id, parsed.lines, parsed.events, batch.rejects, counts)
    for key, value in counts.items():
        setattr(summary, key, getattr(summary, key) + value)
    summary.null_messages += batch.null_messages
    return next_id + fresh.height


def _inside_window(parsed: Parsed, window: Window) -> tuple[Parsed, int]:
    """Plain files carry their time in the text, so their window applies only after parsing.

    Lines with no time at all are kept: leaving them out would lose them silently."""
    ts = pl.col("ts_us")
    keep = pl.lit(True)
    if window.since_us is not None:
        keep = keep & (ts.is_null() | (ts >= window.since_us))
    if window.until_us is not None:
        keep = keep & (ts.is_null() | (ts < window.until_us))
    lines = parsed.lines.filter(keep)
    outside = parsed.lines.height - lines.height
    if outside == 0:
        return parsed, 0
    events = parsed.events.join(lines.select("line_id"), on="line_id", how="semi")
    return Parsed(lines=lines, events=events), outside


def _install_views(con: duckdb.DuckDBPyConnection) -> None:
    try:
        from pdforensics.verdict import install_views
    except ImportError:  # the verdict stage is optional for a bare ingest
        return
    install_views(con)


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
