"""Journal Export Format (`journalctl -o export`, https://systemd.io/JOURNAL_EXPORT_FORMATS/).

Entries are `NAME=value` lines ended by an empty line; a value that is not printable UTF-8 is
written as `NAME\\n` + 64-bit little-endian length + raw bytes + `\\n`.

How it is parsed, per chunk of the (decompressed) stream:
* Text regions are vectorised: split into lines, entry id = running count of blank lines, split at
  the first `=`, pivot the wanted fields to columns.
* A binary field is found through its length: lengths are < 2**32, so its 8 length bytes hold NULs,
  which printable text never does. Only the entry holding it goes through the exact byte-level
  parser; the text regions before and after stay vectorised.
* Chunks are cut at the last entry boundary (never inside a binary field); the rest carries over.

An unterminated final entry is accepted when its last line is complete (the spec says entries are
*separated* by blank lines); a final line cut short, a binary length running past the end, or an
entry without `__REALTIME_TIMESTAMP` becomes a reject (position = byte offset), not an exception.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

import polars as pl

from pdforensics.sources import RecordBatch, Selection
from pdforensics.sources._common import (
    CHUNK_BYTES,
    check_file,
    escape_sample,
    file_key,
    in_background,
    open_stream,
    read_chunk,
    read_head,
    rejects_frame,
    split_batch,
    split_lines,
    stream_problem,
)
from pdforensics.sources._records import FIELDS, RAW_SCHEMA, ensure_raw, journal_records

_WANTED = frozenset(FIELDS)
_WANTED_LINE = "^(?:" + "|".join(FIELDS) + ")="
_NAME = re.compile(rb"[A-Za-z0-9_]+")
MAX_FIELD_BYTES = 768 << 20  # journald's DATA_SIZE_MAX: a larger length is corruption, not data
MAX_KEPT = 1 << 20  # of a wanted field longer than MAX_CARRY (read past, not held), its first bytes


class ExportParser:
    """Stream -> (raw frame, rejects) per chunk. Raw frames follow `_records.RAW_SCHEMA`."""

    def __init__(self, stream: BinaryIO, source: str, chunk_bytes: int = CHUNK_BYTES, name: str = "") -> None:
        self.stream = stream
        self.source = source
        self.chunk_bytes = chunk_bytes
        self.name = name or source
        self._skip: _Skip | None = None  # a binary field too long to hold, being read past
        self._resume: _Skip | None = None  # the entry that field belongs to, continued after it

    def __iter__(self) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
        carry, base = b"", 0
        self._skip = self._resume = None
        tail = b""  # the last bytes skipped: an entry start may straddle two chunks
        while True:
            chunk = read_chunk(self.stream, self.chunk_bytes, Path(self.name))
            eof = not chunk
            rejects: list[tuple[str, str, str, str]] = []
            if self._skip is not None:
                chunk, base, tail = self._skipping(chunk, base, tail, eof, rejects)
                if self._skip is not None:  # still inside the field
                    if rejects:
                        yield pl.DataFrame(schema=RAW_SCHEMA), rejects_frame(rejects)
                    if eof:
                        return
                    continue
            buf = carry + chunk if carry else chunk
            frames, exact, more_rejects, used = self._parse(buf, base, eof)
            rejects += more_rejects
            carry, base = buf[used:], base + used
            if self._skip is not None:  # everything after the field's start is being read past
                carry, tail = b"", buf[-_PATTERN_BYTES:]
            if exact:
                frames.append(pl.from_dicts(exact, schema=RAW_SCHEMA))
            if frames or rejects:
                raw = pl.concat(frames).sort("_off") if frames else pl.DataFrame(schema=RAW_SCHEMA)
                yield raw, rejects_frame(rejects)
            if eof:
                return

    def _skipping(
        self, chunk: bytes, base: int, tail: bytes, eof: bool, rejects: list[tuple[str, str, str, str]]
    ) -> tuple[bytes, int, bytes]:
        """Read past a long binary field: (what follows it to parse, its offset, tail of the skipped).

        Believed while none of its bytes starts an export entry; an entry start inside it means its
        length lies, and parsing goes on there. Memory stays bounded whatever the length says.
        """
        skip = self._skip
        assert skip is not None
        region, rbase = tail + chunk, base - len(tail)
        if eof:
            self._skip = None
            rejects.append(
                self._reject(skip.entry_off, f"binary field {skip.name} runs past end of input", b"")
            )
            return b"", base + len(chunk), b""
        hi = min(len(region), skip.data_end - rbase)
        at = _entry_start(region, 0, hi)
        if at >= 0:
            self._skip = None
            reason = f"binary field {skip.name} claims {skip.size} bytes, but an entry starts inside them"
            rejects.append(self._reject(skip.entry_off, reason, b""))
            return region[at + 2 :], rbase + at + 2, b""
        if skip.data_end >= rbase + len(region):
            keep = region[-_PATTERN_BYTES:]
            return b"", base + len(chunk), keep
        # The field ends in this chunk: what follows it continues its entry.
        self._skip = None
        rest = skip.data_end - rbase
        if region[rest] != 0x0A:
            rejects.append(
                self._reject(skip.entry_off, f"binary field {skip.name} is not followed by a newline", b"")
            )
            end = region.find(b"\n\n", rest)
            start = len(region) if end < 0 else end + 2
            return region[start:], rbase + start, b""
        self._resume = skip
        return region[rest + 1 :], rbase + rest + 1, b""

    def _parse(
        self, buf: bytes, base: int, eof: bool
    ) -> tuple[list[pl.DataFrame], list[dict[str, object]], list[tuple[str, str, str, str]], int]:
        """Text-region frames, exactly parsed entries, rejects, and how many bytes were consumed."""
        frames: list[pl.DataFrame] = []
        exact: list[dict[str, object]] = []
        rejects: list[tuple[str, str, str, str]] = []
        pos, n = 0, len(buf)
        if self._resume is not None:  # the rest of an entry whose long binary field was read past
            r = self._resume
            fields, end, problem = _parse_entry(buf, 0, eof, {k: list(v) for k, v in r.values.items()})
            if problem == "more" and n < MAX_CARRY:
                return frames, exact, rejects, 0
            self._resume = None
            if isinstance(fields, _Skip):  # another long field in the same entry
                self._skip = fields._replace(entry_off=r.entry_off, data_end=base + fields.data_end)
                return frames, exact, rejects, n
            if problem and problem != "more":
                rejects.append(self._reject(r.entry_off, problem, buf[:end]))
            elif problem == "more":
                rejects.append(self._reject(r.entry_off, "entry too long after a long binary field", b""))
                end = _resync(buf, 0)
            else:
                fields["_off"] = r.entry_off
                exact.append(fields)
            pos = end
        while pos < n:
            q = buf.find(b"\x00", pos)
            if q < 0:  # text only from here
                if eof:
                    end = n
                else:
                    # A binary header whose length has not fully arrived (no NUL yet to reveal it)
                    # starts at or after n - 5 and may hold "\n\n": only cut before that.
                    cut = buf.rfind(b"\n\n", pos, max(pos, n - 5))
                    if cut < 0:
                        break
                    end = cut + 2
                frames.append(self._text(buf[pos:end], base + pos, final=eof and end == n, rejects=rejects))
                pos = end
                break
            header = _binary_header(buf, pos, q)
            start = buf.rfind(b"\n\n", pos, header if header >= 0 else q)
            start = pos if start < 0 else start + 2
            if start > pos:
                frames.append(self._text(buf[pos:start], base + pos, final=False, rejects=rejects))
                pos = start  # emitted: a carry-over starts at the binary entry, not before it
            if header < 0:
                end = _resync(buf, q)
                if end == n and not eof and n - start < MAX_CARRY:
                    break  # where the damaged entry ends is in the next chunk: decide then
                rejects.append(self._reject(base + start, "NUL byte outside a binary field", buf[start:end]))
                pos = end
                continue
            fields, end, problem = _parse_entry(buf, start, eof)
            if problem == "more":
                break  # carry the entry over to the next chunk
            if isinstance(fields, _Skip):  # a binary field longer than we hold: read past it
                self._skip = fields._replace(entry_off=base + start, data_end=base + fields.data_end)
                return frames, exact, rejects, n
            if problem:
                rejects.append(self._reject(base + start, problem, buf[start:end]))
            else:
                fields["_off"] = base + start
                exact.append(fields)
            pos = end
        return frames, exact, rejects, pos

    def _reject(self, offset: int, reason: str, data: bytes) -> tuple[str, str, str, str]:
        return (self.source, f"byte {offset}", reason, escape_sample(data))

    def _text(
        self, region: bytes, base: int, *, final: bool, rejects: list[tuple[str, str, str, str]]
    ) -> pl.DataFrame:
        """Vectorised parse of whole text-only entries (the last may be unterminated when final)."""
        c = pl.col
        lines = split_lines(region, base).with_columns(eid=c("line").is_null().cum_sum())
        if not lines.height:
            return pl.DataFrame(schema=RAW_SCHEMA)
        starts = lines.filter(c("line").is_not_null() & c("line").shift(1).is_null()).select(
            "eid", _off="off"
        )
        # A line without '=' cannot be a field here (binary fields were split off): report, skip it.
        # A bare field name is a binary field whose 8 length bytes hold no NUL (a length >= 2**56):
        # its entry is damaged, and rejected whole.
        stray = lines.filter(c("line").is_not_null() & ~c("line").str.contains("=", literal=True))
        bare = stray.filter(c("line").str.contains(r"^[A-Za-z0-9_]+$"))
        damaged = pl.DataFrame(schema={"eid": pl.UInt32(), "line": pl.String()})
        kv = lines.filter(c("line").str.contains(_WANTED_LINE)).with_columns(
            eq=c("line").str.find("=", literal=True)
        )
        kv = kv.select("eid", key=c("line").str.slice(0, c("eq")), val=c("line").str.slice(c("eq") + 1))
        if final and not region.endswith(b"\n") and starts.height:
            # The input ends in the middle of a line: the last entry is incomplete.
            eid, off = starts.row(-1)
            tail = region[off - base :]
            rejects.append(
                (self.source, f"byte {off}", "truncated entry at end of input", escape_sample(tail))
            )
            starts, kv = starts.head(-1), kv.filter(c("eid") != eid)
        if bare.height:
            # (In an entry already rejected as cut at the end of input, it is just a line without '='.)
            for off, line in bare.join(starts, on="eid", how="anti").select("off", "line").iter_rows():
                rejects.append((self.source, f"byte {off}", "export line without '='", escape_sample(line)))
            damaged = (
                bare.join(starts.select("eid"), on="eid")
                .group_by("eid", maintain_order=True)
                .agg(c("line").first())
            )
            bad_starts = starts.join(damaged, on="eid", maintain_order="left")
            for _, off, name in bad_starts.select("eid", "_off", "line").iter_rows():
                reason = f"binary field {name} has an impossible length (no NUL in its length bytes)"
                rejects.append((self.source, f"byte {off}", reason, escape_sample(name)))
            starts = starts.join(damaged, on="eid", how="anti", maintain_order="left")
        # Other lines without '=' (those of a damaged entry went with it: its value's bytes).
        others = stray.filter(~c("line").str.contains(r"^[A-Za-z0-9_]+$"))
        others = others.join(damaged.select(c("eid").cast(others["eid"].dtype)), on="eid", how="anti")
        for off, line in others.select("off", "line").iter_rows():
            rejects.append((self.source, f"byte {off}", "export line without '='", escape_sample(line)))
        # MESSAGE values of one entry are joined, other repeated fields keep the last (see _records).
        wide = starts.join(
            kv.filter(c("key") == "MESSAGE").group_by("eid").agg(MESSAGE=c("val").str.join("\n")),
            on="eid",
            how="left",
        )
        rest = kv.filter(c("key") != "MESSAGE")
        if rest.height:
            pivot = rest.pivot(on="key", index="eid", values="val", aggregate_function="last")
            wide = wide.join(pivot, on="eid", how="left")
        return ensure_raw(wide)


def _binary_header(buf: bytes, pos: int, q: int) -> int:
    """Index of the newline ending the `NAME` line of the binary field whose length holds buf[q].

    The first NUL of a length (< 2**48) lies 1-7 bytes after that newline. The earliest newline in
    that span ending a bare field-name line is the header (text lines contain '=').
    """
    for c in range(max(pos, q - 8), q):
        if buf[c] != 0x0A:
            continue
        start = buf.rfind(b"\n", pos, c) + 1 or pos
        start = max(start, pos)
        if _NAME.fullmatch(buf, start, c):
            return c
    return -1


def _resync(buf: bytes, at: int) -> int:
    """Offset after the next entry boundary at or after `at` (end of buf if none)."""
    nxt = buf.find(b"\n\n", at)
    return len(buf) if nxt < 0 else nxt + 2


# A damaged entry is skipped up to the next entry boundary. When that boundary is not in the chunk
# yet, the entry is carried into the next chunk (so chunk sizes never change what is read), up to
# this size; past it the damage is rejected in pieces, keeping memory bounded.
MAX_CARRY = 4 * CHUNK_BYTES


class _Skip(NamedTuple):
    """A binary field longer than MAX_CARRY: where its entry starts and where its data ends."""

    name: str
    size: int
    entry_off: int
    data_end: int
    values: dict[str, list[bytes]]


# What starts an export entry (journalctl writes __CURSOR first; hand-made files the time).
_ENTRY_STARTS = (b"\n\n__CURSOR=", b"\n\n__REALTIME_TIMESTAMP=")
_PATTERN_BYTES = max(map(len, _ENTRY_STARTS))


def _entry_start(buf: bytes, lo: int, hi: int) -> int:
    """Index of the first entry start (its "\n\n") in buf[lo:hi], or -1."""
    found = [i for i in (buf.find(p, lo, hi + len(p) - 2) for p in _ENTRY_STARTS) if i >= 0]
    return min(found) if found else -1


def _parse_entry(
    buf: bytes, start: int, eof: bool, values: dict[str, list[bytes]] | None = None
) -> tuple[dict[str, object] | _Skip, int, str]:
    """Exact parse of one entry: (wanted fields, end offset, problem); problem "" = ok, "more" = need data.

    A binary field's length is believed only as far as its bytes hold no entry start; one longer
    than MAX_CARRY comes back as a _Skip (the caller reads past it without holding it).
    `values`: fields already read (an entry continued after a long field).
    """
    values = {} if values is None else values
    n, p = len(buf), start

    def damaged(at: int, problem: str) -> tuple[dict[str, object], int, str]:
        end = _resync(buf, at)
        if end == n and not eof and n - start < MAX_CARRY:
            return {}, n, "more"  # the entry's end is in the next chunk
        return {}, end, problem

    while True:
        nl = buf.find(b"\n", p)
        if nl < 0:
            if not eof:
                return {}, n, "more"
            if p == n and p > start:
                break  # unterminated final entry whose last line is complete
            return {}, n, "truncated entry at end of input"
        if nl == p:
            p += 1
            break
        eq = buf.find(b"=", p, nl)
        if eq >= 0:
            name, value, p = buf[p:eq], buf[eq + 1 : nl], nl + 1
        else:
            name = buf[p:nl]
            label = name.decode("ascii", "replace")
            if not _NAME.fullmatch(name):
                return damaged(p, "line without '=' that is not a field name")
            if nl + 9 > n:
                return {}, n, "more" if not eof else f"binary field {label} is cut off at end of input"
            (size,) = struct.unpack_from("<Q", buf, nl + 1)
            if size > MAX_FIELD_BYTES:
                return damaged(nl + 9, f"binary field {label} has an impossible length {size}")
            data_end = nl + 9 + size
            inside = _entry_start(buf, nl + 9, min(data_end, n))
            if inside >= 0:  # an entry starts within what the length claims: the length lies
                return (
                    {},
                    inside + 2,
                    f"binary field {label} claims {size} bytes, but an entry starts inside them",
                )
            if data_end >= n:
                if eof:
                    return {}, n, f"binary field {label} runs past end of input"
                if n - start < MAX_CARRY:
                    return {}, n, "more"
                kept = {**values}
                if label in _WANTED:
                    kept.setdefault(label, []).append(buf[nl + 9 : nl + 9 + MAX_KEPT])
                return _Skip(label, size, start, data_end, kept), n, ""
            if buf[data_end] != 0x0A:
                return damaged(data_end, f"binary field {label} is not followed by a newline")
            value, p = buf[nl + 9 : data_end], data_end + 1
        key = name.decode("ascii", "replace")
        if key in _WANTED:
            values.setdefault(key, []).append(value)
    fields: dict[str, object] = {
        k: (b"\n".join(v) if k == "MESSAGE" else v[-1]).decode("utf-8", "replace") for k, v in values.items()
    }
    return fields, p, ""


class ExportFileSource:
    """A Journal Export Format file (plain or gzip)."""

    reader = "export"

    def __init__(self, path: Path, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.path = check_file(Path(path))
        self.label = f"file:{self.path.resolve()}"
        self.chunk_bytes = chunk_bytes

    def batches(self, selection: Selection, batch_size: int = 100_000) -> Iterator[RecordBatch]:
        key = file_key(read_head(self.path))

        def produce(stopped: Callable[[], bool]) -> Iterator[RecordBatch]:
            with open_stream(self.path) as stream:
                parser = ExportParser(stream, self.label, self.chunk_bytes, str(self.path))
                yield from export_batches(parser, selection, batch_size, self.label, key, stopped)
                if not stopped() and (problem := stream_problem(stream, self.label)):
                    yield problem

        return in_background(produce)


def export_batches(
    parser: ExportParser,
    selection: Selection,
    batch_size: int,
    source: str,
    fallback_key: str | None,
    stopped: Callable[[], bool] = lambda: False,
) -> Iterator[RecordBatch]:
    """Parsed chunks -> selected RecordBatches of at most batch_size records."""
    for raw, parse_rejects in parser:
        batch = journal_records(raw, selection, source=source, fallback_key=fallback_key)
        batch.rejects = pl.concat([parse_rejects, batch.rejects])
        yield from split_batch(batch, batch_size)
        if stopped():
            return
