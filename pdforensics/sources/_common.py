"""Helpers shared by the source readers: opening inputs, vectorised line splitting, batching, threads."""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, TypeVar

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pdforensics.errors import SourceError
from pdforensics.schema import REJECT_SCHEMA, empty_rejects
from pdforensics.sources import RecordBatch

T = TypeVar("T")

# Read size for file sources: big enough to amortise polars calls, small enough to stream.
CHUNK_BYTES = 16 << 20
HEAD_BYTES = 64 << 10  # what file identity (sha1) and format sniffing look at
GZIP_MAGIC = b"\x1f\x8b"
JOURNAL_MAGIC = b"LPKSHHRH"
BOM = b"\xef\xbb\xbf"
LINE_SCHEMA = {"line": pl.String(), "off": pl.Int64()}

# Bytes that never occur in text logs in practice; read_csv needs one absent from the chunk as its separator.
_SEPARATORS = tuple(bytes([c]) for c in (0x1F, 0x1E, 0x1D, 0x1C, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06))
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(32), 127]} | {9: "\\t", 10: "\\n", 13: "\\r"}
# polars read_csv decompresses a buffer that starts like gzip, zlib or zstd data ("x^..." is zlib to it):
# a chunk of text that happens to start so takes the exact path instead.
_LOOKS_COMPRESSED = (b"\x1f\x8b", b"x\x01", b"x^", b"x\x9c", b"x\xda", b"(\xb5/\xfd")


def check_file(path: Path) -> Path:
    """A readable regular file, else SourceError naming what is wrong."""
    try:
        return _check_file(path)
    except PermissionError as e:  # a folder on the way the user may not enter
        raise SourceError(f"{path}: permission denied") from e


def _check_file(path: Path) -> Path:
    if not path.exists():
        raise SourceError(f"{path}: no such file")
    if path.is_dir():
        raise SourceError(f"{path} is a directory (use --directory for a journal directory)")
    if not os.access(path, os.R_OK):
        raise SourceError(f"{path}: permission denied")
    if not path.is_file():
        # A pipe (`--file <(journalctl ...)`, /dev/stdin) can be read once only, and the readers
        # read a file's head (format, identity) before its body.
        raise SourceError(f"{path} is not a regular file (a pipe?); save it to a file first and pass that")
    return path


def open_stream(path: Path) -> BinaryIO:
    """The decompressed byte stream of a file; gzip is recognised by its magic, not its name."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except PermissionError as e:
        raise SourceError(f"{path}: permission denied") from e
    except OSError as e:
        raise SourceError(f"{path}: {e.strerror or e}") from e
    if f.read(2) == GZIP_MAGIC:
        f.seek(0)
        return GunzipStream(f)  # type: ignore[return-value]
    f.seek(0)
    return f


class GunzipStream:
    """gzip decompression that keeps every byte before damage (gzip.GzipFile loses its last read).

    A log.gz cut short (copied while being written, a full disk) or with a damaged block yields
    the text before the damage, then ends; `error` says what happened and `offset` where (in
    decompressed bytes), for the reader to report as a reject. Several members, and zero padding
    after the last, are read as gzip does. Output is produced 1 MiB at a time: a small, highly
    compressed file cannot inflate past that per read.
    """

    _IN = 64 << 10
    _OUT = 1 << 20

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.error: str | None = None
        self.offset = 0  # decompressed bytes handed out
        self._z = zlib.decompressobj(wbits=31)
        self._pending = b""  # compressed bytes not yet given to the decompressor
        self._in_member = False
        self._out: list[bytes] = []  # decompressed, not handed out yet (from _pos in the first)
        self._pos = 0
        self._have = 0
        self._done = False

    def read(self, n: int = -1) -> bytes:
        while (n < 0 or self._have < n) and not self._done:
            self._step()
        want = self._have if n < 0 else min(n, self._have)
        parts, got = [], 0
        while got < want:  # copy only what is handed out: small reads stay cheap
            piece = self._out[0]
            take = min(len(piece) - self._pos, want - got)
            parts.append(piece[self._pos : self._pos + take] if take < len(piece) else piece)
            self._pos += take
            if self._pos == len(piece):
                self._out.pop(0)
                self._pos = 0
            got += take
        self._have -= got
        self.offset += got
        return b"".join(parts)

    def _emit(self, data: bytes) -> None:
        if data:
            self._out.append(data)
            self._have += len(data)

    def _step(self) -> None:
        data = self._z.unconsumed_tail or self._pending or self.raw.read(self._IN)
        self._pending = b""
        if not data:
            if self._in_member:
                self._emit(self._z.flush())  # output zlib held back when the last read filled _OUT
                if not self._z.eof:
                    self.error = "compressed file ends before its end (truncated)"
            self._done = True
            return
        if not self._in_member:
            data = data.lstrip(b"\x00")  # zero padding after the last member is allowed
            if not data:
                return
            if not data.startswith(GZIP_MAGIC[: len(data)]):
                self.error = "data after the end of the compressed stream is not gzip"
                self._done = True
                return
            self._in_member = True
        before = self._z.copy()
        try:
            self._emit(self._z.decompress(data, self._OUT))
        except zlib.error as e:
            self._emit(_inflate_until_error(before, data, self._OUT))
            self.error = f"compressed data damaged ({e})"
            self._done = True
            return
        if self._z.eof:  # end of one member; the rest may be another member
            self._pending = self._z.unused_data
            self._z = zlib.decompressobj(wbits=31)
            self._in_member = False

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> GunzipStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _inflate_until_error(z: zlib._Decompress, data: bytes, limit: int, step: int = 256) -> bytes:
    """What `z` outputs for `data` fed a little at a time, up to the damage that stopped it."""
    out = bytearray()
    for i in range(0, len(data), step):
        try:
            out += z.decompress(data[i : i + step], max(limit - len(out), 1))
        except zlib.error:
            break
        if len(out) >= limit:
            break
    return bytes(out)


def stream_problem(stream: object, source: str) -> RecordBatch | None:
    """A reject for a compressed stream that ended at damage (see GunzipStream), else None."""
    error = getattr(stream, "error", None)
    if not error:
        return None
    offset = getattr(stream, "offset", 0)
    reason = f"{error}; the rest of the file is unreadable"
    return RecordBatch(rejects=rejects_frame([(source, f"byte {offset}", reason, "")]))


def read_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first n decompressed bytes (a damaged gzip yields what could be read)."""
    with open_stream(path) as s:
        try:
            return s.read(n)
        except (OSError, EOFError) as e:
            raise SourceError(f"{path}: cannot decompress: {e}") from e


def read_chunk(stream: BinaryIO, n: int, path: Path) -> bytes:
    try:
        return stream.read(n)
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise SourceError(f"{path}: read failed: {e}") from e


def file_key(head: bytes) -> str:
    """Dedup namespace of a file: the same content copied elsewhere is the same source."""
    return "file:" + hashlib.sha1(head).hexdigest()[:16]


def escape_sample(data: bytes | str, limit: int = 200) -> str:
    """First `limit` characters, control characters escaped so a reject sample is one printable line."""
    text = data[: limit * 4].decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text[:limit].translate(_ESCAPES)


def escape_expr(expr: pl.Expr) -> pl.Expr:
    """escape_sample's escaping as a polars expression."""
    chars = list(_ESCAPES)
    return expr.str.replace_many([chr(k) for k in chars], [_ESCAPES[k] for k in chars])


def rejects_frame(rows: Iterable[tuple[str, str, str, str]]) -> pl.DataFrame:
    rows = list(rows)
    if not rows:
        return empty_rejects()
    return pl.DataFrame(rows, schema=REJECT_SCHEMA, orient="row")


def split_lines(buf: bytes, base: int = 0) -> pl.DataFrame:
    """Split complete lines (the last may lack its newline) into `line` and `off` (byte offset).

    `line` is decoded as UTF-8 with replacement, a CR before LF dropped, and NULL for an empty line
    (cheaper than filling, and export parsing needs the blank lines marked anyway). Bulk path:
    polars read_csv with a separator byte absent from the chunk and no quoting, so one row per line;
    offsets come from the decoded lengths when those equal the raw ones, else from an arrow split.
    """
    if not buf:
        return pl.DataFrame(schema=LINE_SCHEMA)
    n_lines = buf.count(b"\n") + (not buf.endswith(b"\n"))
    sep = None if buf.startswith(_LOOKS_COMPRESSED) else next((s for s in _SEPARATORS if s not in buf), None)
    if sep is not None:
        try:
            frame = pl.read_csv(
                buf,
                has_header=False,
                separator=sep.decode(),
                quote_char=None,
                new_columns=["line"],
                infer_schema=False,
                encoding="utf8-lossy",
                raise_if_empty=False,
            )
        except (OSError, pl.exceptions.PolarsError):  # another sniffing surprise: the exact path below
            frame = pl.DataFrame(schema={"line": pl.String()})
        if frame.height == n_lines:
            lines = frame.to_series()
            if _lossless(buf):
                off = (lines.str.len_bytes().fill_null(0).cast(pl.Int64) + 1).cum_sum().shift(1, fill_value=0)
                return pl.DataFrame({"line": lines, "off": off + base})
            return pl.DataFrame({"line": lines, "off": _offsets_from_raw(_raw_lines(buf), base)})
    # Separator collision (binary garbage) or a row-count surprise: exact, slower path.
    raw = _raw_lines(buf)
    text = [b.decode("utf-8", "replace").removesuffix("\r") or None for b in raw.to_pylist()]
    return pl.DataFrame(
        {"line": pl.Series("line", text, dtype=pl.String), "off": _offsets_from_raw(raw, base)}
    )


def _lossless(buf: bytes) -> bool:
    """Whether read_csv's text has the raw byte lengths: no CR or BOM dropped, nothing replaced."""
    if b"\r" in buf or buf.startswith(BOM):
        return False
    try:
        buf.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _raw_lines(buf: bytes) -> pa.Array:
    body = buf[:-1] if buf.endswith(b"\n") else buf
    return pc.split_pattern(pa.array([body], pa.large_binary()), b"\n").flatten()


def _offsets_from_raw(raw: pa.Array, base: int) -> pl.Series:
    lengths = pl.Series(pc.binary_length(raw)).cast(pl.Int64)
    return ((lengths + 1).cum_sum().shift(1, fill_value=0) + base).alias("off")


def skip_bytes(stream: BinaryIO, n: int, path: Path) -> int:
    """Move `n` bytes into the stream (seek, or read and drop for a decompressed one); bytes moved."""
    if n <= 0:
        return 0
    if hasattr(stream, "seek") and hasattr(stream, "fileno"):
        return stream.seek(n)
    done = 0
    while done < n:
        got = len(read_chunk(stream, min(CHUNK_BYTES, n - done), path))
        if not got:
            break
        done += got
    return done


def line_chunks(
    stream: BinaryIO, path: Path, chunk_bytes: int, max_line: int, base: int = 0
) -> Iterator[tuple[bytes, int, list[tuple[int, bytes]]]]:
    """Cut a stream into (complete lines, offset of the first, over-long lines seen before them).

    A line that outgrows `max_line` without a newline is not buffered further: it is reported
    once as (offset, first bytes) and skipped up to its newline, so memory stays bounded.
    Lines under `max_line` but over the caller's own limit are the caller's to find.
    `base`: the stream's offset in the file (a reader that skipped what is already stored).
    """
    carry = b""
    long: list[tuple[int, bytes]] = []
    skipping: tuple[int, bytes] | None = None
    while True:
        chunk = read_chunk(stream, chunk_bytes, path)
        if not chunk:
            if skipping:
                long.append(skipping)
            if carry or long:
                yield carry, base, long
            return
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                base += len(chunk)
                continue
            long.append(skipping)
            skipping, base, chunk = None, base + nl + 1, chunk[nl + 1 :]
        buf = carry + chunk if carry else chunk
        cut = buf.rfind(b"\n") + 1
        if cut:
            yield buf[:cut], base, long
            long = []
            carry, base = buf[cut:], base + cut
        else:
            carry = buf
        if len(carry) > max_line:
            skipping, base, carry = (base, carry[:800]), base + len(carry), b""


def split_batch(batch: RecordBatch, size: int) -> Iterator[RecordBatch]:
    """At most `size` records per batch; counts and rejects ride on the first piece, marks on the last.

    A batch with no records but with rejects, counts or marks is still yielded (callers total them).
    """
    size = max(size, 1)
    if batch.records.height <= size:
        if batch.counted():
            yield batch
        return
    starts = range(0, batch.records.height, size)
    for start in starts:
        piece = RecordBatch(batch.records.slice(start, size))
        if start == 0:
            piece = replace(batch, records=piece.records, marks={})
        if start == starts[-1]:
            piece.marks = batch.marks
        yield piece


_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


# Batches a reader may run ahead of its consumer; 0 reads in the consumer's thread (for measuring
# the overlap, or debugging). Memory: at most READ_AHEAD + 2 batches exist at once. One is enough to
# keep the parse fed (a reader batch takes a fraction of its parse) and keeps a 16 MiB chunk less.
READ_AHEAD = 1


def in_background(produce: Callable[[Callable[[], bool]], Iterator[T]]) -> Iterator[T]:
    """Run `produce(stopped)` in a thread, handing its items over through a bounded queue.

    Reading (python-systemd's loop holds the GIL, but gzip, polars and DuckDB release it) then
    overlaps with the consumer's work on the previous batch. The producer polls `stopped()`, so an
    abandoned consumer does not leave it reading.
    """
    if READ_AHEAD <= 0:
        yield from produce(lambda: False)
        return
    q: queue.Queue[object] = queue.Queue(maxsize=READ_AHEAD)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        items = produce(stop.is_set)
        try:
            for item in items:
                if not put(item):
                    return
        except BaseException as e:  # handed to the consumer, which re-raises it
            put(_Failure(e))
            return
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # release files / kill journalctl now, not when garbage-collected
        put(_DONE)

    thread = threading.Thread(target=run, name="pdforensics-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        thread.join(timeout=10)
