"""Journal files read directly: systemd's on-disk format, vectorised with numpy and pyarrow.

python-systemd costs ~17 µs an entry (one `_next`, `_get_all`, `_get_cursor` per entry). This
reader maps the file, walks the global entry array chain once, gathers the entries' items and
their DATA objects with numpy (a chunk of entries at a time, so memory stays bounded), and hands
the fields `_records` needs out as whole columns (an arrow `take` over the mapped file), so no
Python code runs per entry. The mapped pages it read are released as it goes (they count in RSS).

Facts used (systemd docs/JOURNAL_FILE_FORMAT.md): little-endian, 8-byte aligned objects; a 16-byte
object header (type u8, flags u8, size u64 at 8); ENTRY: seqnum, realtime, monotonic at 16/24/32,
boot_id at 40, xor_hash at 56, items at 64 (regular: u64 offset + u64 hash; compact: u32 offset);
DATA: payload at 64 (compact: 72), compression in the object flags; ENTRY_ARRAY: next at 16,
items at 24 (u64; compact: u32). Keyed hashes only change the hash values, which are not needed.

Anything it is not sure of raises `Unreadable` (a short reason) before a single record is handed
out: an unknown incompatible flag, a file not cleanly closed (online), any offset, size, type or
order that fails a bounds check, a compressed field that does not decompress. The caller then
reads the file with python-systemd as before, and counts the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import lzma
import mmap
import os
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pdforensics.sources import Selection
from pdforensics.sources._journal_child import BLOCK, DONE, MATCH_FIELDS, RESUMED, Event, Unit
from pdforensics.sources._records import ENTRY_FIELDS, JOURNALD_UNIT, _selected, glob_regex

MAGIC = b"LPKSHHRH"
INCOMPATIBLE_XZ, INCOMPATIBLE_LZ4, INCOMPATIBLE_KEYED_HASH, INCOMPATIBLE_ZSTD, INCOMPATIBLE_COMPACT = (
    1, 2, 4, 8, 16,
)  # fmt: skip
KNOWN_INCOMPATIBLE = 31
OBJECT_DATA, OBJECT_ENTRY, OBJECT_ENTRY_ARRAY = 1, 3, 6
COMPRESSED_XZ, COMPRESSED_LZ4, COMPRESSED_ZSTD = 1, 2, 4
STATE_OFFLINE, STATE_ONLINE, STATE_ARCHIVED = 0, 1, 2
MIN_HEADER = 208  # every field up to n_data exists in every version of the format
# The file's index is held while it is read (~100 B an entry: 4 B a wanted field, the cursor
# parts); offsets are int32. journald rotates at 128 MiB by default; a larger file is read by
# python-systemd.
MAX_FILE = 256 << 20
# Entries indexed at a time: the per-item arrays of a chunk are a few MB (they were ~0.8x the file
# for the whole file at once, the reader's memory peak).
INDEX_CHUNK = 16_384
MAX_FIELD = 768 << 20  # a decompressed field larger than this is refused (sd_journal's own cap)
_PREFIX = 24  # bytes of a DATA payload compared against the wanted "NAME=" prefixes
_NAMES = tuple(f"{n}=".encode() for n in ENTRY_FIELDS)
assert max(len(n) for n in _NAMES) <= _PREFIX
MESSAGE = ENTRY_FIELDS.index("MESSAGE")


class Unreadable(Exception):
    """This reader cannot vouch for the file: python-systemd reads it instead. str() is the reason."""


@dataclass
class Header:
    compatible: int
    incompatible: int
    state: int
    seqnum_id: str  # hex, as in a cursor's s=
    header_size: int
    end: int  # header_size + arena_size
    n_entries: int
    entry_array_offset: int

    @property
    def compact(self) -> bool:
        return bool(self.incompatible & INCOMPATIBLE_COMPACT)


def parse_header(mm: mmap.mmap | bytes, size: int) -> Header:
    if size < MIN_HEADER or mm[:8] != MAGIC:
        raise Unreadable("not a journal file header")
    compatible, incompatible = struct.unpack_from("<II", mm, 8)
    state = mm[16]
    header_size, arena_size = struct.unpack_from("<QQ", mm, 88)
    n_entries = struct.unpack_from("<Q", mm, 152)[0]
    entry_array_offset = struct.unpack_from("<Q", mm, 176)[0]
    if incompatible & ~KNOWN_INCOMPATIBLE:
        raise Unreadable(f"unknown incompatible flags {incompatible & ~KNOWN_INCOMPATIBLE:#x}")
    if state not in (STATE_OFFLINE, STATE_ARCHIVED):
        raise Unreadable("file not closed cleanly (online)" if state == STATE_ONLINE else f"state {state}")
    end = header_size + arena_size
    if not (MIN_HEADER <= header_size <= 4096 and header_size % 8 == 0 and end <= size):
        raise Unreadable("truncated or bad header sizes")
    if end > MAX_FILE:
        raise Unreadable("larger than the direct reader's limit")
    return Header(
        compatible, incompatible, state, bytes(mm[72:88]).hex(), header_size, end, n_entries,
        entry_array_offset,
    )  # fmt: skip


@dataclass
class Columns:
    """One file's entries as arrays, and for each wanted field the DATA value each entry refers to."""

    seqnum: np.ndarray  # u64, strictly increasing
    realtime: np.ndarray
    monotonic: np.ndarray
    xor_hash: np.ndarray
    boot_id: np.ndarray  # (n, 16) u8
    # (n, len(ENTRY_FIELDS)) int32: the element of `values` holding the entry's value of that
    # field, for plain (uncompressed) DATA objects; -1: none.
    value: np.ndarray
    values: pa.LargeBinaryArray  # over the mapped file: even elements the values, odd the gaps
    message_extra: dict[int, list[int]]  # entry -> every MESSAGE value index (a repeated MESSAGE)
    # Compressed DATA objects: decompressed a block at a time, for the entries read only (a window,
    # a resumed read), so their field is known only then. Per object: flags, payload start, length;
    # per item naming one (in entry order): the entry and the object.
    packed_flags: np.ndarray
    packed_start: np.ndarray
    packed_len: np.ndarray
    packed_owner: np.ndarray
    packed_obj: np.ndarray


@dataclass
class _Refs:
    """What indexing keeps of each chunk of entries until the whole file is seen (`_gather`)."""

    n: int
    value: np.ndarray = dataclasses.field(init=False)  # as Columns.value, but DATA offsets
    # Per chunk, sorted by offset: every referenced DATA object (offset, size); the plain objects
    # of wanted fields (offset, field, size); the compressed ones (offset, flags, size).
    objects: list[tuple[np.ndarray, ...]] = dataclasses.field(default_factory=list)
    wanted: list[tuple[np.ndarray, ...]] = dataclasses.field(default_factory=list)
    packed: list[tuple[np.ndarray, ...]] = dataclasses.field(default_factory=list)
    # Per compressed item, in entry order: the entry and the object's offset.
    packed_owner: list[np.ndarray] = dataclasses.field(default_factory=list)
    packed_off: list[np.ndarray] = dataclasses.field(default_factory=list)
    message_extra: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # DATA offsets

    def __post_init__(self) -> None:
        self.value = np.full((self.n, len(ENTRY_FIELDS)), -1, dtype=np.int32)


@dataclass
class Block:
    """Consecutive entries with their compressed fields resolved: `value` as Columns.value (rows
    relative to `rows[0]`), elements >= len(Columns.values) are in `unpacked`."""

    rows: np.ndarray
    value: np.ndarray
    unpacked: pa.LargeBinaryArray


class JournalFile:
    """A journal file, checked and indexed on open (raises Unreadable); `frames` gives raw frames."""

    def __init__(self, path: Path | str, units: str | None = None) -> None:
        """`units`: the selection's unit regex (`_records.glob_regex`); when given, only the entries
        that can match it (their unit fields' DATA objects list them) have their fields indexed."""
        self.path = Path(path)
        self.indexed: np.ndarray | None = None  # per entry: fields indexed (None: every entry's)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < MIN_HEADER:
                raise Unreadable("shorter than a journal header")
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self.header = parse_header(self._mm, size)
            self._u8 = np.frombuffer(self._mm, dtype=np.uint8, count=self.header.end)
            self._u64 = self._u8[: self.header.end // 8 * 8].view("<u8")
            self.cols = self._index(units)
            self.release()
        except Unreadable:
            self.close()
            raise
        except (ValueError, IndexError, OverflowError, MemoryError) as e:  # a bound check missed
            self.close()
            raise Unreadable(f"inconsistent structure ({type(e).__name__})") from e

    def release(self) -> None:
        """Drop the mapped pages read so far from this process's memory (they count in its RSS:
        indexing touches every page of the file). The mapping stays valid: a page read again
        is mapped back from the page cache, as the file has not changed."""
        with contextlib.suppress(OSError, ValueError, AttributeError):  # madvise unsupported: no harm
            self._mm.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        for name in ("_u8", "_u64", "cols"):
            self.__dict__.pop(name, None)
        with contextlib.suppress(BufferError):  # arrow slices still refer to it: closed when they go
            self._mm.close()

    def __enter__(self) -> JournalFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def n_entries(self) -> int:
        return len(self.cols.seqnum)

    # -- indexing (once per file, vectorised) ---------------------------------------------------------

    def _index(self, units: str | None) -> Columns:
        """The entries and their items, a chunk of entries at a time: the per-item arrays (~25
        items an entry) never exist for the whole file at once, and the pages each chunk read
        are released before the next one (entry and DATA objects lie all over the file)."""
        entries = self._entry_offsets()
        refs = _Refs(len(entries))
        heads: list[tuple[np.ndarray, ...]] = []
        # Entries no unit of the selection can be named in keep their header (seqnum, time, the
        # cursor) but not their fields: they are counted and skipped like any other unselected one.
        unit_entries = self.unit_entries(units) if units is not None else None
        self.indexed = None if unit_entries is None else np.isin(entries, unit_entries, assume_unique=True)
        for a in range(0, len(entries), INDEX_CHUNK):
            chunk = entries[a : a + INDEX_CHUNK]
            *head, n_items = self._entries(chunk)
            heads.append(tuple(head))
            rows = np.arange(len(chunk), dtype=np.int32)
            if self.indexed is not None:
                rows = rows[self.indexed[a : a + INDEX_CHUNK]]
            owner, data = self._items(chunk[rows], n_items[rows])
            self._gather(rows[owner] + np.int32(a), data, refs)
            self.release()
        del entries
        seqnum, realtime, monotonic, xor_hash = (_concat([h[k] for h in heads], np.uint64) for k in range(4))
        if len(seqnum) and ((np.diff(seqnum.astype(np.int64)) <= 0).any() or seqnum[0] == 0):
            raise Unreadable("entry seqnums not strictly increasing")
        boot_id = np.concatenate([h[4] for h in heads]) if heads else np.zeros((0, 16), np.uint8)
        return self._columns(refs, seqnum, realtime, monotonic, xor_hash, boot_id)

    def _entry_offsets(self) -> np.ndarray:
        """The global entry array chain, in order: the offsets of the file's n_entries entries."""
        h, u64, u8 = self.header, self._u64, self._u8
        width = 4 if h.compact else 8
        parts: list[np.ndarray] = []
        got, off, last = 0, h.entry_array_offset, 0
        while off and got < h.n_entries:
            if off % 8 or off <= last or off < h.header_size or off + 24 > h.end:
                raise Unreadable("entry array offset out of bounds")
            size = int(u64[off // 8 + 1])
            if u8[off] != OBJECT_ENTRY_ARRAY or size < 24 or off + size > h.end:
                raise Unreadable("bad entry array object")
            n = (size - 24) // width
            raw = u8[off + 24 : off + 24 + n * width].view("<u4" if h.compact else "<u8")
            parts.append(raw[: h.n_entries - got].astype(np.int64))
            got += len(parts[-1])
            last, off = off, int(u64[off // 8 + 2])
        if got < h.n_entries:
            raise Unreadable("entry array chain shorter than the header's entry count")
        entries = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        if len(entries) and (
            (entries % 8).any()
            or entries[0] < h.header_size
            or entries[-1] + 64 > h.end
            or (np.diff(entries) <= 0).any()
        ):
            raise Unreadable("entry offsets out of bounds or out of order")
        return entries

    def _entries(self, entries: np.ndarray) -> tuple[np.ndarray, ...]:
        h, u64, u8 = self.header, self._u64, self._u8
        w = entries // 8
        size = u64[w + 1].astype(np.int64)
        stride = 4 if h.compact else 16
        if (
            (u8[entries] != OBJECT_ENTRY).any()
            or (size < 64).any()
            or (entries + size > h.end).any()
            or ((size - 64) % stride).any()
        ):
            raise Unreadable("bad entry object")
        seqnum, realtime, monotonic, xor_hash = u64[w + 2], u64[w + 3], u64[w + 4], u64[w + 7]
        boot_id = np.stack([u64[w + 5], u64[w + 6]], axis=1).view(np.uint8)  # (n, 16), file order
        return seqnum, realtime, monotonic, xor_hash, boot_id, (size - 64) // stride

    def _items(self, entries: np.ndarray, n_items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(entry index, DATA offset) of every entry item, in entry then item order."""
        h = self.header
        total = int(n_items.sum())
        # int32 where it fits (files are at most MAX_FILE bytes): a chunk's item arrays are its peak.
        owner = np.repeat(np.arange(len(entries), dtype=np.int32), n_items)
        first = (np.cumsum(n_items) - n_items).astype(np.int32)
        k = np.arange(total, dtype=np.int32) - np.repeat(first, n_items)
        if h.compact:
            pos = entries[owner] + 64 + 4 * k
            data = self._u64.view("<u4")[pos // 4].astype(np.int32)
        else:
            pos = entries[owner] + 64 + 16 * k
            data = np.minimum(self._u64[pos // 8], np.uint64(1 << 31)).astype(np.int32)
        if total and ((data % 8).any() or data.min() < h.header_size or int(data.max()) + 64 > h.end):
            raise Unreadable("entry item offset out of bounds")
        return owner, data

    def _gather(self, owner: np.ndarray, data: np.ndarray, refs: _Refs) -> None:
        """One chunk of entry items (entry index, DATA offset): its DATA objects checked and
        classified, the plain values of wanted fields noted by offset, the compressed ones kept
        for `block`; with each object what `_columns` needs of it, so that it reads no page."""
        h, u8, u64 = self.header, self._u8, self._u64
        offsets, item_obj = np.unique(data, return_inverse=True)
        at = offsets.astype(np.int64)
        size = u64[at // 8 + 1].astype(np.int64)
        head = 72 if h.compact else 64
        if (u8[at] != OBJECT_DATA).any() or (size < head).any() or (at + size > h.end).any():
            raise Unreadable("bad data object")
        if len(at) > 1 and (at[:-1] + size[:-1] > at[1:]).any():
            raise Unreadable("data objects overlap")
        flags = u8[at + 1] & 7
        plain = flags == 0
        field = np.full(len(at), -1, dtype=np.int64)
        field[plain] = _classify_aligned(u64, at[plain] + head, size[plain] - head)
        refs.objects.append((offsets, size.astype(np.int32)))
        wanted = field >= 0
        refs.wanted.append((offsets[wanted], field[wanted].astype(np.int8), size[wanted].astype(np.int32)))
        packed = ~plain
        refs.packed.append((offsets[packed], flags[packed], size[packed].astype(np.int32)))
        # Compressed objects (the large fields: most MESSAGEs of a busy server) wait for `block`.
        item_packed = packed[item_obj]
        refs.packed_owner.append(owner[item_packed])
        refs.packed_off.append(offsets[item_obj[item_packed]])
        item_field = field[item_obj]
        keep = item_field >= 0
        owner, item_field, item_off = owner[keep], item_field[keep], offsets[item_obj[keep]]
        refs.value[owner, item_field] = item_off  # a repeated field: fixed below, last value wins
        refs.message_extra.update(self._repeats(owner, item_field, item_off, refs.value))

    def _columns(self, refs: _Refs, *entry_cols: np.ndarray) -> Columns:
        """The file's Columns from the chunks' notes (no page of the file is read again): DATA
        offsets become elements of `values`, compressed objects get their rank."""
        head = 72 if self.header.compact else 64
        # No two of the file's referenced DATA objects overlap (each chunk checked its own).
        objects, (size,) = _merged(refs.objects, 1)
        if len(objects) > 1 and (objects[:-1] + size[:-1] > objects[1:]).any():
            raise Unreadable("data objects overlap")
        del objects, size
        wanted, (field, size) = _merged(refs.wanted, 2)
        values = _gapped(self._mm, wanted + head, size - head, field.astype(np.int64))
        value = refs.value
        for a in range(0, len(value), INDEX_CHUNK):  # offset -> element 2i of `values`, in place
            part = value[a : a + INDEX_CHUNK]
            hit = part >= 0
            part[hit] = np.searchsorted(wanted, part[hit]) * 2
        message_extra = {
            e: (np.searchsorted(wanted, np.array(offs, dtype=np.int64)) * 2).tolist()
            for e, offs in refs.message_extra.items()
        }
        packed, (flags, size) = _merged(refs.packed, 2)
        packed_obj = np.searchsorted(packed, _concat(refs.packed_off).astype(np.int64))
        seqnum, realtime, monotonic, xor_hash, boot_id = entry_cols
        return Columns(
            seqnum, realtime, monotonic, xor_hash, boot_id, value, values, message_extra,
            flags, packed + head, size - head, _concat(refs.packed_owner), packed_obj,
        )  # fmt: skip

    def block(self, a: int, b: int, rows: np.ndarray | None = None, objs: np.ndarray | None = None) -> Block:
        """Entries a..b-1, their compressed objects decompressed and classified (vectorised, but
        for one C call an object): all of them, or those of the entries `rows` marks (bool per
        entry of the block) or `objs` marks (bool per compressed object). A compressed value where
        the entry has another value of the same field (a repeated field split over plain and
        compressed objects, whose order the index does not keep) raises Unreadable: the caller
        reads on with python-systemd."""
        c = self.cols
        value = c.value[a:b].copy()
        lo, hi = np.searchsorted(c.packed_owner, [a, b])
        owner, obj = c.packed_owner[lo:hi] - a, c.packed_obj[lo:hi]
        if rows is not None or objs is not None:
            pick = np.zeros(len(obj), dtype=bool)
            if rows is not None:
                pick |= rows[owner]
            if objs is not None:
                pick |= objs[obj]
            owner, obj = owner[pick], obj[pick]
        block_rows = np.arange(a, b, dtype=np.int64)
        if not len(obj):
            return Block(block_rows, value, pa.array([], pa.large_binary()))
        objs, item_local = np.unique(obj, return_inverse=True)
        blob, sizes = self._decompress_all(c.packed_flags[objs], c.packed_start[objs], c.packed_len[objs])
        starts = np.cumsum(sizes) - sizes
        field = _classify(np.frombuffer(blob, np.uint8), starts, sizes)
        unpacked = _gapped(blob, starts, sizes, field)
        local = np.where(field >= 0, len(c.values) + np.cumsum(field >= 0) * 2 - 2, -1)
        item_field = field[item_local]
        want = item_field >= 0
        owner, item_field, item_value = owner[want], item_field[want], local[item_local[want]]
        clash = value[owner, item_field] >= 0
        key = owner * len(ENTRY_FIELDS) + item_field
        if clash.any() or (len(key) and np.bincount(key).max() > 1):
            raise Unreadable("a field repeated in compressed objects")
        value[owner, item_field] = item_value
        return Block(block_rows, value, unpacked)

    @functools.cached_property
    def unit_packed(self) -> np.ndarray | None:
        """Per compressed object: whether it may hold one of the fields the unit selection reads
        (its DATA object is on that field's chain, FIELD.head_data_offset -> DATA.next_field_offset,
        the chains `journalctl -u` matches on). None (every one may) when a chain fails a check.
        Lets a unit selection leave the compressed MESSAGEs of other units compressed."""
        try:
            found = self._field_chains({ENTRY_FIELDS[f].encode() for f in _UNIT_FIELDS})
        except (ValueError, IndexError):
            return None
        if found is None:
            return None
        head = 72 if self.header.compact else 64
        return np.isin(self.cols.packed_start - head, np.array(sorted(found), dtype=np.int64))

    def _field_chains(self, names: set[bytes]) -> set[int] | None:
        """Offsets of every DATA object of the fields `names`; None when a check fails."""
        h, mm, u8, u64 = self.header, self._mm, self._u8, self._u64
        table, size = struct.unpack_from("<QQ", mm, 120)
        budget = struct.unpack_from("<Q", mm, 144)[0]  # n_objects: no chain is longer
        if table % 8 or size % 16 or table < h.header_size or table + size > h.end:
            return None
        heads = []
        for fo in (int(x) for x in u64[table // 8 : (table + size) // 8 : 2] if x):
            while fo:
                budget -= 1
                if budget < 0 or fo % 8 or fo + 40 > h.end or u8[fo] != 2:  # OBJECT_FIELD
                    return None
                osize = int(u64[fo // 8 + 1])
                if osize < 40 or fo + osize > h.end:
                    return None
                if bytes(mm[fo + 40 : fo + osize]) in names:
                    heads.append(int(u64[fo // 8 + 4]))
                fo = int(u64[fo // 8 + 3])
        found: set[int] = set()
        for d in heads:
            while d:
                budget -= 1
                if budget < 0 or d % 8 or d + 64 > h.end or u8[d] != OBJECT_DATA or d in found:
                    return None
                found.add(d)
                d = int(u64[d // 8 + 4])
        return found

    def unit_entries(self, units: str) -> np.ndarray | None:
        """Offsets (sorted) of every entry a unit selection can keep: those referencing a DATA
        object of a unit field whose value matches `units` (the regex `_records._selected` applies),
        or journald's own (its "Suppressed N messages from UNIT" lines name the unit in MESSAGE).
        Each DATA object lists its entries (inline, then its entry array chain): what `journalctl
        -u` reads instead of every entry. None when a chain or a count fails a check (or a value
        does not decompress): then every entry is indexed, as without a selection."""
        h, u8, u64 = self.header, self._u8, self._u64
        try:
            found = self._field_chains({f.encode() for f in MATCH_FIELDS})
            if found is None:
                return None
            head = 72 if h.compact else 64
            objects = sorted(found)
            values = []
            for d in objects:
                size, flag = int(u64[d // 8 + 1]), int(u8[d + 1] & 7)
                if size < head or d + size > h.end:
                    return None
                payload = (
                    self._decompress(flag, d + head, size - head) if flag else self._mm[d + head : d + size]
                )
                name, _, value = bytes(payload).partition(b"=")
                values.append((name.decode("utf-8", "replace"), value.decode("utf-8", "replace")))
            frame = pl.DataFrame(values, schema={"field": pl.String, "value": pl.String}, orient="row")
            hit = (
                frame.select(
                    pl.col("value").str.contains(units)
                    | (pl.col("field") == "_SYSTEMD_UNIT") & (pl.col("value") == JOURNALD_UNIT)
                )
                .to_series()
                .to_numpy()
            )
            lists = [self._data_entries(d) for d, keep in zip(objects, hit, strict=True) if keep]
        except (ValueError, IndexError, OverflowError, Unreadable, pl.exceptions.PolarsError):
            return None  # never worse than no selection: every entry is indexed
        if any(e is None for e in lists):
            return None
        return np.unique(np.concatenate(lists)) if lists else np.zeros(0, np.int64)  # type: ignore[arg-type]

    def _data_entries(self, d: int) -> np.ndarray | None:
        """The offsets of the entries DATA object `d` lists (n_entries of them: the inline one, then
        its entry array chain); None when the chain is shorter than its count or out of bounds."""
        h, u8, u64 = self.header, self._u8, self._u64
        n = int(u64[d // 8 + 7])
        first, off = int(u64[d // 8 + 5]), int(u64[d // 8 + 6])
        if n == 0:
            return np.zeros(0, np.int64)
        parts, got, width = [np.array([first], np.int64)], 1, 4 if h.compact else 8
        budget = h.n_entries + 1  # no chain has more arrays than the file has entries
        while got < n and off:
            budget -= 1
            if (
                budget < 0
                or off % 8
                or off < h.header_size
                or off + 24 > h.end
                or u8[off] != OBJECT_ENTRY_ARRAY
            ):
                return None
            size = int(u64[off // 8 + 1])
            if size < 24 or off + size > h.end:
                return None
            items = u8[off + 24 : off + 24 + (size - 24) // width * width].view("<u4" if h.compact else "<u8")
            parts.append(items[: n - got].astype(np.int64))
            got += len(parts[-1])
            off = int(u64[off // 8 + 2])
        if got < n:
            return None
        out = np.concatenate(parts)
        return None if (out <= 0).any() else out

    def _decompress_all(
        self, flags: np.ndarray, start: np.ndarray, length: np.ndarray
    ) -> tuple[bytes, np.ndarray]:
        """The compressed objects' payloads, concatenated, and each one's length."""
        view = memoryview(self._mm)
        try:
            if len(flags) and (flags == COMPRESSED_ZSTD).all():
                import zstandard

                d = zstandard.ZstdDecompressor()
                # One C call an object, no Python per object beyond the comprehension (~2 µs each).
                out = [
                    d.decompress(view[a : a + n])
                    for a, n in zip(start.tolist(), length.tolist(), strict=True)
                ]
            else:
                out = [
                    self._decompress(f, a, n)
                    for f, a, n in zip(flags.tolist(), start.tolist(), length.tolist(), strict=True)
                ]
        except zstandard.ZstdError:  # no content size in a frame, or a damaged one: one by one
            out = [
                self._decompress(COMPRESSED_ZSTD, a, n)
                for a, n in zip(start.tolist(), length.tolist(), strict=True)
            ]
        finally:
            view.release()
        sizes = np.fromiter(map(len, out), dtype=np.int64, count=len(out))
        if len(out) and sizes.max() > MAX_FIELD:
            raise Unreadable("decompressed field too large")
        return b"".join(out), sizes

    @staticmethod
    def _repeats(
        owner: np.ndarray, item_field: np.ndarray, item_value: np.ndarray, value: np.ndarray
    ) -> dict[int, list[int]]:
        """A field repeated in one entry: the last value wins (as `_records` does), every MESSAGE
        value kept in item order (they are joined with "\\n"). `owner` is in entry order."""
        width = len(ENTRY_FIELDS)
        key = (owner - (owner[0] if len(owner) else 0)).astype(np.int64) * width + item_field
        if not len(key) or np.bincount(key).max() <= 1:
            return {}
        order = np.argsort(key, kind="stable")
        k = key[order]
        last = np.append(k[1:] != k[:-1], True)
        value[owner[order][last], item_field[order][last]] = item_value[order][last]
        extra: dict[int, list[int]] = {}
        for i in np.flatnonzero(item_field == MESSAGE).tolist():
            extra.setdefault(int(owner[i]), []).append(int(item_value[i]))
        return {e: v for e, v in extra.items() if len(v) > 1}

    def _decompress(self, flag: int, start: int, length: int) -> bytes:
        blob = self._mm[start : start + length]
        try:
            if flag == COMPRESSED_ZSTD:
                import zstandard

                out = zstandard.ZstdDecompressor().decompressobj().decompress(blob)
                if not out and blob:
                    raise Unreadable("compressed field does not decompress (empty)")
            elif flag == COMPRESSED_XZ:
                out = lzma.LZMADecompressor().decompress(blob, MAX_FIELD)
            elif flag == COMPRESSED_LZ4:
                import lz4.block

                (want,) = struct.unpack_from("<Q", blob, 0)  # systemd: le64 size, then an LZ4 block
                if want > MAX_FIELD:
                    raise Unreadable("lz4 field too large")
                out = lz4.block.decompress(blob[8:], uncompressed_size=want)
            else:
                raise Unreadable(f"data object with several compression flags ({flag})")
        except Unreadable:
            raise
        except Exception as e:  # zstd/lzma/lz4 errors: a damaged compressed field
            raise Unreadable(f"compressed field does not decompress ({type(e).__name__})") from e
        if len(out) > MAX_FIELD:
            raise Unreadable("decompressed field too large")
        return out

    # -- output -------------------------------------------------------------------------------------

    def cursors(self, rows: np.ndarray) -> pl.Series:
        """sd_journal cursors ("s=…;i=…;b=…;m=…;t=…;x=…", hex without leading zeros) for `rows`."""
        c = self.cols
        parts = [
            pl.lit("s=" + self.header.seqnum_id + ";i="),
            _hex(c.seqnum[rows]),
            pl.lit(";b="),
            pl.Series(_fixed(c.boot_id[rows], 16)).bin.encode("hex"),
            pl.lit(";m="),
            _hex(c.monotonic[rows]),
            pl.lit(";t="),
            _hex(c.realtime[rows]),
            pl.lit(";x="),
            _hex(c.xor_hash[rows]),
        ]
        return pl.select(pl.concat_str(parts).alias("__CURSOR")).to_series()

    def field(self, fid: int, blk: Block, at: np.ndarray | None = None) -> pl.Series:
        """One wanted field for the block's entries (`at`: positions in the block) as text (NULL
        where absent; invalid UTF-8 replaced)."""
        pos = np.arange(len(blk.rows)) if at is None else at
        taken = self._take(blk.value[pos, fid], blk.unpacked)
        if fid == MESSAGE and self.cols.message_extra:
            taken = self._joined_messages(taken, blk.rows[pos])
        return pl.Series(ENTRY_FIELDS[fid], _text(taken), dtype=pl.String)

    def _take(self, idx: np.ndarray, unpacked: pa.Array) -> pa.Array:
        base = len(self.cols.values)
        packed = idx >= base
        if not packed.any():
            return pc.take(self.cols.values, pa.array(idx, mask=idx < 0))
        from_packed = pc.take(unpacked, pa.array(idx - base, mask=~packed))
        if packed.all():
            return from_packed
        return pc.coalesce(pc.take(self.cols.values, pa.array(idx, mask=(idx < 0) | packed)), from_packed)

    def _joined_messages(self, taken: pa.Array, rows: np.ndarray) -> pa.Array:
        hit = [p for p, row in enumerate(rows.tolist()) if row in self.cols.message_extra]
        if not hit:
            return taken
        values = taken.to_pylist()  # only blocks holding a repeated MESSAGE (rare; plain objects)
        for p in hit:
            parts = self.cols.message_extra[int(rows[p])]
            values[p] = b"\n".join(self.cols.values[i].as_py() for i in parts)
        return pa.array(values, pa.large_binary())

    def frame(self, blk: Block, at: np.ndarray | None = None) -> pl.DataFrame:
        """The raw frame `_records.journal_records` takes: __CURSOR and the ENTRY_FIELDS."""
        rows = blk.rows if at is None else blk.rows[at]
        cols = [self.cursors(rows)] + [self.field(f, blk, at) for f in range(len(ENTRY_FIELDS))]
        return pl.DataFrame(cols)

    def find_cursor(self, cursor: str) -> int | None:
        """The row of the entry `cursor` names in this file, or None."""
        parts = dict(p.split("=", 1) for p in cursor.split(";") if "=" in p)
        if parts.get("s") != self.header.seqnum_id:
            return None
        try:
            seq = int(parts.get("i", ""), 16)
        except ValueError:
            return None
        row = int(np.searchsorted(self.cols.seqnum, seq))
        if row >= self.n_entries or int(self.cols.seqnum[row]) != seq:
            return None
        have = dict(p.split("=", 1) for p in self.cursors(np.array([row]))[0].split(";"))
        return row if all(have.get(k) == v for k, v in parts.items()) else None

    def blocks(self, start: int, stop: int, size: int) -> Iterator[Block]:
        for a in range(start, stop, size):
            yield self.block(a, min(a + size, stop))


def _concat(parts: list[np.ndarray], dtype: type = np.int32) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _merged(parts: list[tuple[np.ndarray, ...]], n_attrs: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Chunks' (offsets, *attributes) as one: the distinct offsets, sorted (int64), and each
    one's `n_attrs` attributes (an object met by several chunks has the same ones in each)."""
    if not parts:
        return np.zeros(0, np.int64), [np.zeros(0, np.int64) for _ in range(n_attrs)]
    offsets, first = np.unique(np.concatenate([p[0] for p in parts]), return_index=True)
    attrs = [np.concatenate([p[k] for p in parts])[first].astype(np.int64) for k in range(1, n_attrs + 1)]
    return offsets.astype(np.int64), attrs


def _classify(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Which wanted field each DATA payload holds (-1: another one), from its first bytes."""
    field = np.full(len(start), -1, dtype=np.int64)
    if not len(start):
        return field
    at = np.minimum(start[:, None] + np.arange(_PREFIX), len(buf) - 1)
    words = np.ascontiguousarray(buf[at]).view("<u8")  # (k, 3): compared as three words a name
    for fid, name in enumerate(_NAMES):
        pat = np.frombuffer(name.ljust(_PREFIX, b"\0"), dtype="<u8")
        msk = np.frombuffer((b"\xff" * len(name)).ljust(_PREFIX, b"\0"), dtype="<u8")
        hit = ((words & msk) == pat).all(axis=1) & (length >= len(name))
        field[hit] = fid
    return field


def _classify_aligned(u64: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """`_classify` for payloads at 8-byte aligned offsets of the file: three word loads, no byte gather."""
    field = np.full(len(start), -1, dtype=np.int64)
    if not len(start):
        return field
    w = np.minimum(start[:, None] // 8 + np.arange(_PREFIX // 8), len(u64) - 1)
    words = u64[w]
    for fid, name in enumerate(_NAMES):
        pat = np.frombuffer(name.ljust(_PREFIX, b"\0"), dtype="<u8")
        msk = np.frombuffer((b"\xff" * len(name)).ljust(_PREFIX, b"\0"), dtype="<u8")
        hit = ((words & msk) == pat).all(axis=1) & (length >= len(name))
        field[hit] = fid
    return field


def _gapped(buf: object, start: np.ndarray, length: np.ndarray, field: np.ndarray) -> pa.LargeBinaryArray:
    """The wanted values (after "NAME=") as one arrow array over `buf`, without a copy: value i is
    element 2i, the gap to the next one element 2i+1 (the payloads are sorted and do not overlap)."""
    name_len = np.array([len(x) for x in _NAMES], dtype=np.int64)
    want = field >= 0
    vstart = start[want] + name_len[field[want]]
    vend = start[want] + length[want]
    bounds = np.empty(2 * len(vstart) + 1, dtype=np.int64)
    bounds[0:-1:2], bounds[1:-1:2] = vstart, vend
    bounds[-1] = bounds[-2] if len(vstart) else 0
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), 2 * len(vstart), [None, pa.py_buffer(bounds), pa.py_buffer(buf)]
    )


def _hex(values: np.ndarray) -> pl.Series:
    """u64 -> lower-case hex without leading zeros ("0" for zero), as printf's %llx."""
    text = pl.Series(_fixed(values.astype(">u8").view(np.uint8).reshape(-1, 8), 8)).bin.encode("hex")
    stripped = text.str.strip_chars_start("0")
    return pl.select(pl.when(stripped == "").then(pl.lit("0")).otherwise(stripped)).to_series()


def _fixed(rows: np.ndarray, width: int) -> pa.Array:
    flat = np.ascontiguousarray(rows, dtype=np.uint8).reshape(-1)
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(flat) // width, [None, pa.py_buffer(flat)]
    )


def _text(values: pa.Array, chunk: int = 4096) -> pa.Array:
    """Binary -> text; invalid UTF-8 replaced as `bytes.decode("utf-8", "replace")` does (only the
    chunks that fail arrow's validation are decoded value by value)."""
    try:
        return values.cast(pa.large_string())
    except pa.ArrowInvalid:
        pass
    parts = []
    for a in range(0, len(values), chunk):
        part = values.slice(a, chunk)
        try:
            parts.append(part.cast(pa.large_string()))
        except pa.ArrowInvalid:
            text = [None if v is None else v.decode("utf-8", "replace") for v in part.to_pylist()]
            parts.append(pa.array(text, pa.large_string()))
    return pa.concat_arrays(parts) if parts else pa.array([], pa.large_string())


# -- the reader's events (what `_journal_child.IsolatedReader` yields), python-systemd as fallback --

ENV_READER = "PDFORENSICS_JOURNAL_READER"  # "python-systemd": never read files directly
_UNIT_FIELDS = tuple(ENTRY_FIELDS.index(n) for n in ("_PID", *MATCH_FIELDS))  # _PID: pid 1's lines
log = logging.getLogger(__name__)


@dataclass
class DirectNotes:
    """What the direct reader did, for the summary: files and entries it read, and why it left a
    file to python-systemd (reason -> files)."""

    files: int = 0
    entries: int = 0
    fallbacks: Counter[str] = dataclasses.field(default_factory=Counter)

    def fell_back(self, path: str, reason: str) -> None:
        self.fallbacks[reason] += 1
        log.info("%s: read by python-systemd (direct reader: %s)", path, reason)

    def describe(self) -> str | None:
        """One line for the ingest summary, None when no journal file was read: how many files
        the direct reader read, how many python-systemd read (whole, or the rest of) and why."""
        fell = sum(self.fallbacks.values())
        if not self.files and not fell:
            return None
        text = f"journal files: {self.files:,} read directly"
        if fell:
            why = "; ".join(f"{n:,}x {reason}" for reason, n in self.fallbacks.most_common())
            text += f", {fell:,} by python-systemd ({why})"
        return text


# (indices of consecutive requests, a replacement start for a single one) -> their events
Fallback = Callable[[list[int], Unit | None], Iterator[Event]]


def direct_events(
    requests: list[Unit],
    selection: Selection,
    block: int,
    stopped: Callable[[], bool],
    fallback: Fallback,
    notes: DirectNotes,
) -> Iterator[Event]:
    """Events for `requests` in order: each file read directly, or by `fallback` (python-systemd in
    a child; called with the indices of consecutive requests it must read) when it cannot be."""
    pending: list[int] = []
    for i, req in enumerate(requests):
        if stopped():
            return
        if _outside_window(req, selection.window.until_us):
            if pending:
                yield from fallback(pending, None)
                pending = []
            notes.files += 1  # read: nothing in it is inside the window (as a seek would find)
            yield Event(RESUMED, i, text="0")
            yield Event(DONE, i)
            continue
        jf = _open_direct(req, notes, glob_regex(selection.units))
        if jf is None:
            pending.append(i)
            continue
        if pending:
            yield from fallback(pending, None)
            pending = []
        with jf:
            yield from _read_direct(i, jf, req, selection, block, stopped, fallback, notes)
    if pending and not stopped():
        yield from fallback(pending, None)


def _outside_window(req: Unit, until_us: int | None) -> bool:
    """Whether a file's entries all lie outside the window by its header (first entry at or after
    the end, last one before the start), so that it need not be indexed. As sd_journal's seek, it
    takes the file's times as ordered. Never for a resumed read (its cursor is looked up)."""
    if req.files is None or len(req.files) != 1 or req.cursor or req.after or req.skip_at is not None:
        return False
    if req.since_us is None and until_us is None:
        return False
    if os.environ.get(ENV_READER, "") == "python-systemd":
        return False
    try:
        with open(req.files[0], "rb") as f:
            head = f.read(MIN_HEADER)
            h = parse_header(head, os.fstat(f.fileno()).st_size)
    except (OSError, Unreadable, struct.error):
        return False  # the reader decides (and counts why)
    if not h.n_entries:
        return False
    first, last = struct.unpack_from("<QQ", head, 184)
    return (req.since_us is not None and last < req.since_us) or (until_us is not None and first >= until_us)


def _open_direct(req: Unit, notes: DirectNotes, units: str | None = None) -> JournalFile | None:
    if req.files is None or len(req.files) != 1 or req.after is not None or req.skip_at is not None:
        return None  # the local journal (sd_journal interleaves its files), or a restart
    if os.environ.get(ENV_READER, "") == "python-systemd":
        notes.fell_back(req.files[0], f"{ENV_READER}=python-systemd")
        return None
    try:
        return JournalFile(req.files[0], units)
    except Unreadable as e:
        notes.fell_back(req.files[0], str(e))
    except OSError as e:
        notes.fell_back(req.files[0], f"cannot map the file ({e.strerror or e})")
    return None


def _read_direct(
    i: int,
    jf: JournalFile,
    req: Unit,
    selection: Selection,
    block: int,
    stopped: Callable[[], bool],
    fallback: Fallback,
    notes: DirectNotes,
) -> Iterator[Event]:
    start, resumed = _start_row(jf, req)
    stop = _stop_row(jf, start, selection.window.until_us)
    yield Event(RESUMED, i, text="1" if resumed else "0")
    last: str | None = None
    try:
        for a, b in _spans(jf, start, stop, block):
            if stopped():
                return
            keep = _prefilter(jf, a, b, selection)
            blk = jf.block(a, b, rows=None if keep.all() else keep)
            raw = jf.frame(blk, np.flatnonzero(keep))
            del blk
            jf.release()  # the block's pages: the frame holds copies
            last = raw["__CURSOR"][-1]
            yield Event(BLOCK, i, frame=raw, skipped=len(keep) - int(keep.sum()))
    except Exception as e:  # a bug here must cost speed, not the run: python-systemd reads the rest
        reason = f"failed while reading ({type(e).__name__}: {e})"
        notes.fell_back(str(jf.path), reason)
        yield from fallback([i], Unit(req.files, after=last) if last else req)
        return
    notes.files += 1
    notes.entries += stop - start
    yield Event(DONE, i)


# A unit selection's block spans up to this many blocks of entries, to hold `block` indexed ones.
MAX_SPAN_BLOCKS = 16


def _spans(jf: JournalFile, start: int, stop: int, block: int) -> Iterator[tuple[int, int]]:
    """Rows start..stop-1 in consecutive blocks of `block` entries; when only a unit selection's
    entries are indexed, of `block` indexed ones (the rest are skipped without a look), each
    spanning at most MAX_SPAN_BLOCKS blocks of rows (the block's copy of the index stays small)."""
    if jf.indexed is None:
        cuts = list(range(start, stop, block))
    else:
        indexed = np.flatnonzero(jf.indexed[start:stop]) + start
        cuts, a = [], start
        for nxt in [*indexed[block::block].tolist(), stop]:
            while a < nxt:
                cuts.append(a)
                a = min(nxt, a + block * MAX_SPAN_BLOCKS)
    yield from itertools.pairwise([*cuts, stop]) if cuts else ()


def _start_row(jf: JournalFile, req: Unit) -> tuple[int, bool]:
    """Where reading starts: `context` entries before a resume cursor found in this file, else the
    first entry at or after `since` (as sd_journal's seek_realtime, then reading on)."""
    if req.cursor:
        row = jf.find_cursor(req.cursor)
        if row is not None:
            return max(row - req.context, 0), True
    if req.since_us is not None:
        after = np.flatnonzero(jf.cols.realtime >= max(req.since_us, 0))
        return (int(after[0]) if len(after) else jf.n_entries), False
    return 0, False


def _stop_row(jf: JournalFile, start: int, until_us: int | None) -> int:
    """Reading stops at the first entry at or past the window's end (later ones are not visited)."""
    if until_us is None:
        return jf.n_entries
    past = np.flatnonzero(jf.cols.realtime[start:] >= max(until_us, 0))
    return start + int(past[0]) if len(past) else jf.n_entries


def _prefilter(jf: JournalFile, a: int, b: int, selection: Selection) -> np.ndarray:
    """Entries a..b-1 the unit globs can select, decided on the small unit fields before any other
    compressed field is decompressed or any message gathered; the block's first and last always go
    on, so resume marks see the block's bounds. `_records.journal_records` selects exactly after."""
    keep = np.ones(b - a, dtype=bool)
    if glob_regex(selection.units) is None or not len(keep):
        return keep
    # Only the entries indexed for the selection can be kept (the others name none of its units).
    at = np.flatnonzero(jf.indexed[a:b]) if jf.indexed is not None else np.arange(b - a)
    keep[:] = False
    if len(at):
        objs = jf.unit_packed
        blk = jf.block(a, b, objs=objs) if objs is not None else jf.block(a, b)
        small = pl.DataFrame([jf.field(f, blk, at) for f in _UNIT_FIELDS])
        journald = (small["_SYSTEMD_UNIT"] == JOURNALD_UNIT).fill_null(False).to_numpy()
        message = pl.Series("MESSAGE", [None] * len(at), dtype=pl.String)
        if journald.any():  # journald's "Suppressed N messages from UNIT" lines name the unit in MESSAGE
            rows = np.zeros(b - a, dtype=bool)
            rows[at[journald]] = True
            if objs is not None:  # their compressed objects too
                blk = jf.block(a, b, rows=rows, objs=objs)
            message = message.scatter(np.flatnonzero(journald), jf.field(MESSAGE, blk, at[journald]))
        c = pl.col
        pid1 = (c("_PID") == "1") | (c("_SYSTEMD_UNIT") == "init.scope")
        picked = small.with_columns(message).select(_selected(Selection(units=selection.units), pid1))
        keep[at] = picked.to_series().to_numpy().astype(bool)
    keep[0] = keep[-1] = True
    return keep
