"""Record batches between the readers and the store: cut to a row group's size (`coalesce`), then
prepared for it (`prepare_batch`: what the database already holds dropped, the rest parsed after the
stored records that precede it, the window applied). The ingest's own pipeline and the collection
workers (ingest_jobs) prepare batches alike, so both take them from here."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import polars as pl

from pdforensics.parse import Parsed, ParseOptions, StreamCarry, parse_records
from pdforensics.sources import RecordBatch, Window

# Records per store transaction: one DuckDB row group (122,880 rows). A transaction of at least a
# row group is written straight to the database file; a smaller one goes through the WAL and is
# written again at checkpoint (measured: 30k-row batches cost 2x the store CPU of 122,880-row ones).
BATCH_SIZE = 122_880
# ... and at most this many bytes of line text per transaction: a batch is parsed whole, and its
# parse holds several copies of the text at once. Ordinary lines (~150 B) fill a row group with
# ~18 MB. 130k lines of 3 KB (long prompts): one batch of 370 MB, peak RSS 1.58 GB (13.9 s); under
# 64 MiB, 1.05 GB (20.9 s: smaller transactions go through the WAL); under 32 MiB 1.02 GB (22.4 s).
BATCH_BYTES = 64 * 1024 * 1024


def coalesce(
    batches: Iterable[RecordBatch], size: int, max_bytes: int | None = BATCH_BYTES
) -> Iterator[RecordBatch]:
    """Merge consecutive batches into batches of exactly `size` records (the last may be smaller),
    or fewer where their line text reaches `max_bytes` (a batch of long lines: the cut is after the
    record that reaches it; None: no cap).

    Readers cut their input where it suits them (a 16 MiB chunk of a plain file is ~30,000 lines,
    a python-systemd block 16,384 entries); the store wants row-group-sized transactions. Order is
    kept, so a killed ingest still leaves a prefix of whole batches. Counts and rejects go out with
    the first output batch that holds any of their reader batch; marks with the one holding its end.
    """
    size = max(size, 1)
    cap = math.inf if max_bytes is None else max(max_bytes, 1)
    pending: list[RecordBatch] = []
    held = held_bytes = 0
    for batch in batches:
        pending.append(batch)
        held += batch.records.height
        held_bytes += _text_bytes(batch.records)
        while held >= size or held_bytes >= cap:
            # Until the last batch arrived fewer than `size` records and `cap` bytes were held:
            # the cut is in it.
            last = pending[-1]
            merged = _merge(pending)
            cut = size if held_bytes < cap else min(size, _records_up_to(merged.records, cap))
            rest = merged.records.slice(cut)
            out = RecordBatch(
                merged.records.head(cut), merged.rejects, merged.skipped, merged.null_messages,
                merged.known_unread, merged.known_before,
                _merge_marks(pending[:-1]) if rest.height else merged.marks,
            )  # fmt: skip
            pending = [RecordBatch(rest, marks=last.marks)] if rest.height else []
            held = rest.height
            held_bytes = _text_bytes(rest)
            yield out
    if pending:
        merged = _merge(pending)
        if merged.counted():
            yield merged


def _text_bytes(records: pl.DataFrame) -> int:
    return int(records["message"].str.len_bytes().sum() or 0) if records.height else 0


def _records_up_to(records: pl.DataFrame, cap: float) -> int:
    """How many leading records it takes for their text to reach `cap` bytes (all, if it never does)."""
    reached = (records["message"].str.len_bytes().fill_null(0).cum_sum() >= cap).arg_true()
    return int(reached[0]) + 1 if reached.len() else records.height


def _merge_marks(batches: list[RecordBatch]) -> dict[str, tuple[int, str]]:
    marks: dict[str, tuple[int, str]] = {}
    for b in batches:
        marks.update(b.marks)
    return marks


def _merge(batches: list[RecordBatch]) -> RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return RecordBatch(
        records=pl.concat([b.records for b in batches], rechunk=False),
        rejects=pl.concat([b.rejects for b in batches]),
        skipped=sum(b.skipped for b in batches),
        null_messages=sum(b.null_messages for b in batches),
        known_unread=sum(b.known_unread for b in batches),
        known_before=next((b.known_before for b in batches if b.known_before), None),
        marks=_merge_marks(batches),
    )


# Stored records kept as parse context for new records that follow them (see Context).
CONTEXT_RECORDS = 2_000
KEY = ["source_key", "seq"]


@dataclass
class Context:
    """Already-stored records held back as parse context for new records that may follow them.

    A resumed ingest (after a kill, or a window overlapping the previous run) meets its first
    new lines right after records stored before. Parsed alone, a traceback line there would lose
    the head it continues (cont_of) and the time it inherits from it; parsed after its stored
    predecessors it gets both, as in a clean run. A batch with nothing new is not parsed at all,
    so re-reading what is stored stays cheap.
    """

    records: pl.DataFrame | None = None
    ids: pl.DataFrame | None = None  # their source_key, seq, line_id
    stats_parts: list[pl.DataFrame] = field(default_factory=list)  # each batch's parse.STATS_SCHEMA


@dataclass
class Prepared:
    """A batch parsed and ready to store (what _commit needs)."""

    batch: RecordBatch
    parsed: Parsed
    fresh: int  # records not stored before this run's previous batch
    outside: int  # lines dropped as outside the window
    parsed_records: int  # records parsed (context included): the line_ids they took
    records: int = 0  # records the batch held (its frame may be dropped once parsed: ingest_jobs)
    unseen: bool = False  # its reader vouches none of its lines is stored (ingest_jobs): no lookup


def prepare_batch(
    known_of: Callable[[pl.DataFrame], pl.DataFrame],
    batch: RecordBatch,
    window: Window,
    opts: ParseOptions,
    carry: StreamCarry,
    ids: Callable[[int], int],
    context: Context,
) -> Prepared:
    """Drop what the database already holds (`known_of(records)`: their source_key, seq, line_id, as
    of the batches committed so far) and parse the rest; `ids(n)` reserves n line_ids, the first
    returned."""
    # One entry twice in the input (overlapping exports concatenated) is one line, stored once.
    records = _unique_records(batch.records)
    known = known_of(records)
    fresh = records.height - known.height
    todo = records.head(0)
    if fresh:
        todo, stored = records, known
        if context.records is not None and context.ids is not None:
            todo, stored = pl.concat([context.records, records]), pl.concat([context.ids, known])
        context.records = context.ids = None
        parsed = parse_records(todo, opts, line_id_base=ids(todo.height), carry=carry)
        if stored.height:
            parsed = _without_known(parsed, stored, carry)
    else:
        if records.height:
            context.records, context.ids = records.tail(CONTEXT_RECORDS), known
            # The records skipped here break the chain the carry holds: it must not leap over them.
            carry.last_ts.clear()
            carry.last_head.clear()
        parsed = parse_records(todo, opts, line_id_base=ids(0), carry=carry)
    parsed, outside = _inside_window(parsed, window)
    return Prepared(batch, parsed, fresh, outside, todo.height, batch.records.height)


def _unique_records(records: pl.DataFrame) -> pl.DataFrame:
    """Each (source_key, seq) once. A batch of one source whose seq only grows (a file's byte
    offsets, one journal's seqnums) has no repeat: checked in a vectorised pass, not hashed."""
    if records.height < 2:
        return records
    keys, seq = records["source_key"], records["seq"]
    if keys.null_count() == 0 and (keys == keys[0]).all() and (seq.diff().drop_nulls() > 0).all():
        return records
    return records.unique(KEY, keep="first", maintain_order=True)


def _without_known(parsed: Parsed, ids: pl.DataFrame, carry: StreamCarry) -> Parsed:
    """Drop the lines parsed only as context; links to them point at their stored line_ids."""
    parsed, mapping = drop_stored(parsed, ids)
    for stream, head in carry.last_head.items():
        carry.last_head[stream] = mapping.get(head, head)
    return parsed


def drop_stored(parsed: Parsed, ids: pl.DataFrame) -> tuple[Parsed, dict[int, int]]:
    """`parsed` without the lines `ids` (source_key, seq, line_id) says are stored, continuation
    links to them repointed at the stored line_ids; and that mapping, parsed id -> stored id."""
    pairs = parsed.lines.select("line_id", *KEY).join(ids.rename({"line_id": "stored_id"}), on=KEY)
    old, new = pairs["line_id"], pairs["stored_id"]
    lines = parsed.lines.join(ids.select(KEY), on=KEY, how="anti", maintain_order="left")
    lines = lines.with_columns(pl.col("cont_of").replace(old, new))
    events = parsed.events.join(lines.select("line_id"), on="line_id", how="semi", maintain_order="left")
    mapping = dict(zip(old.to_list(), new.to_list(), strict=True))
    return Parsed(lines=lines, events=events, stats=parsed.stats, odd=parsed.odd), mapping


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
    return Parsed(lines=lines, events=events, stats=parsed.stats, odd=parsed.odd), outside
