"""Plain SGLang text logs (redirected stderr, --log-requests-target files, docker output; gzip too).

One record per line, blank lines included (they separate parts of a traceback). `seq` is the
byte offset of the line in the decompressed stream and `source_key` the file's identity (sha1 of
its first 64 KiB), so re-reading a file, or a copy of it, stores nothing twice. `ts_us` stays
NULL: parse takes the time from the line's own prefix, in the zone the user names, else in the
offset the file's own UTC-stamped lines settle (`zone`: from its head, once, before its batches).

Selection: the file was named by the user, so unit globs do not filter it, and the time window
cannot be applied before parse has read the prefixes; ingest applies it to the parsed lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import polars as pl

from pdforensics.errors import SourceError
from pdforensics.parse import FileZone, ParseOptions, file_zone
from pdforensics.schema import RECORD_SCHEMA
from pdforensics.sources import FILE_MARK, RecordBatch, Selection
from pdforensics.sources._common import (
    CHUNK_BYTES,
    GZIP_MAGIC,
    HEAD_BYTES,
    GunzipStream,
    check_file,
    escape_expr,
    escape_sample,
    file_key,
    in_background,
    line_chunks,
    open_stream,
    read_head,
    rejects_frame,
    skip_bytes,
    split_batch,
    split_lines,
    stream_problem,
)

MAX_LINE_BYTES = 1 << 20
# What `zone` reads of a file: its first MiB (a few thousand lines, a UCX warning of the engine's
# start among them), whole lines only. Read again by each ingest, whatever it resumes from.
ZONE_HEAD_BYTES = 1 << 20
MAX_BINARY_SHARE = 0.30
# Not text: C0 controls other than tab, newlines, form feed and ESC (ANSI colour), DEL, and bytes
# that are not UTF-8 (decoded as U+FFFD).
_NON_TEXT = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f\ufffd]")
_LONG = "line longer than 1 MiB"
_ZEROS = "zero bytes skipped (a zero-filled stretch: copytruncate without O_APPEND, or a crash)"


def unit_from_name(path: Path) -> str:
    """`prefill.log` -> `prefill`, `decode.log.1.gz` -> `decode`, `router.txt` -> `router`."""
    name = path.name.removesuffix(".gz")
    if ".log" in name:
        return name.split(".log", 1)[0] or name
    return Path(name).stem or name


# `<host>-sglang…` (as `journalctl -u` exports and collection scripts name a host's unit log):
# b200-07-sglang-dsv4-prefill.log is host b200-07, unit sglang-dsv4-prefill
_HOST_UNIT = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*?)[-_](?P<unit>sglang[^/]*)$")


def host_unit_from_name(path: Path) -> tuple[str, str] | None:
    """(host, unit) of a file named `<host>-<unit starting with sglang>.log`; None for other names."""
    m = _HOST_UNIT.match(unit_from_name(path))
    return (m["host"], m["unit"]) if m else None


# Kubernetes container logs: /var/log/pods/<ns>_<pod>_<uid>/<container>/N.log and the
# /var/log/containers/<pod>_<ns>_<container>-<64 hex id>.log links to them.
_POD_LOG = re.compile(
    r"(?:^|/)pods/(?P<ns>[^_/]+)_(?P<pod>[^_/]+)_[0-9a-f-]+/(?P<container>[^/]+)/\d+\.log(?:\.gz|\.\d+.*)?$"
)
_CONTAINER_LOG = re.compile(
    r"(?:^|/)containers/(?P<pod>[^_/]+)_(?P<ns>[^_/]+)_(?P<container>.+)-[0-9a-f]{64}\.log$"
)


def pod_from_path(path: Path) -> tuple[str, str] | None:
    """(pod, container) of a Kubernetes container log file, from its path; None for other files."""
    text = str(path)
    m = _POD_LOG.search(text) or _CONTAINER_LOG.search(text)
    return (m["pod"], m["container"]) if m else None


def non_text_share(head: bytes) -> float:
    """The share of the head that is not text, zero bytes aside: a zero-filled stretch (what
    copytruncate without O_APPEND or a crash leaves) is skipped and counted by the reader."""
    text = head.replace(b"\x00", b"").decode("utf-8", "replace")
    return len(_NON_TEXT.findall(text)) / len(text) if text else 0.0


class PlainFileSource:
    reader = "plain"

    def __init__(
        self, path: Path, host: str | None = None, unit: str | None = None, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        self.path = check_file(Path(path))
        head = read_head(self.path)
        share = non_text_share(head)
        if share > MAX_BINARY_SHARE:
            raise SourceError(f"{self.path}: not a text log ({share:.0%} of its first 64 KiB is not text)")
        self.key = file_key(head)
        self.head_len = len(head)
        # the head is the whole file: its key changes as it grows (ingest keeps the first one)
        self.grows_key = 0 < len(head) < HEAD_BYTES
        self.label = f"file:{self.path.resolve()}"
        # The machine reading a copied file is not the machine that wrote it, hence no hostname;
        # a Kubernetes container log names its pod (host) and container (unit) in its path.
        pod = pod_from_path(self.path.resolve()) or pod_from_path(self.path)
        named = pod or host_unit_from_name(self.path)
        self.host = host or (named[0] if named else "local")
        self.unit = unit or (named[1] if named else unit_from_name(self.path))
        self.chunk_bytes = chunk_bytes
        with open(self.path, "rb") as f:
            self.compressed = f.read(2) == GZIP_MAGIC
        # Set by ingest from the database's file marks (see `resume`): where to start reading.
        self.start: int | None = 0
        self.known_unread = 0

    def prefix_key(self, n: int) -> str:
        """The key this file had when it was `n` bytes long (its first `n` bytes are its head)."""
        return file_key(read_head(self.path, n))

    def raw_size(self) -> int:
        return self.path.stat().st_size

    def resume(self, start: int | None, known_unread: int) -> None:
        """Read from byte `start` of the stream (None: not at all); the `known_unread` records
        before it are stored already and are counted, not read."""
        self.start, self.known_unread = start, known_unread

    def zone(self, opts: ParseOptions) -> FileZone | None:
        """The UTC offset the file's own head settles (parse.file_zone), found before any batch
        is parsed and the same whichever byte a resumed ingest reads from. A file shorter than
        ZONE_HEAD_BYTES whose first UTC-stamped line comes later is read without it until then."""
        if opts.tz is not None:
            return None
        head = read_head(self.path, ZONE_HEAD_BYTES)
        head = head[: head.rfind(b"\n") + 1]
        return file_zone(self.chunk_records(head, 0, []).records, opts) if head else None

    def batches(self, selection: Selection, batch_size: int = 100_000) -> Iterator[RecordBatch]:
        def produce(stopped: Callable[[], bool]) -> Iterator[RecordBatch]:
            if self.known_unread:
                yield RecordBatch(known_unread=self.known_unread)
            if self.start is None:
                return
            # A mark says "every line before here is stored": true only when no window left lines out.
            w = selection.window
            mark = FILE_MARK + self.key if w.since_us is None and w.until_us is None else None
            with open_stream(self.path) as stream:
                end = start = skip_bytes(stream, self.start, self.path)
                for buf, base, long in line_chunks(
                    stream, self.path, self.chunk_bytes, MAX_LINE_BYTES, start
                ):
                    end = base + len(buf)
                    batch = self._batch(buf, base, long)
                    batch.marks = {mark: (end, "-")} if mark else {}
                    yield from split_batch(batch, batch_size)
                    if stopped():
                        return
                if problem := stream_problem(stream, self.label):
                    yield problem
                else:  # read to its end: the file is stored whole while its raw size stays this
                    raw = stream.raw if isinstance(stream, GunzipStream) else stream
                    if mark:
                        yield RecordBatch(marks={mark: (end, str(raw.tell()))})

        return in_background(produce)

    def _batch(self, buf: bytes, base: int, long: list[tuple[int, bytes]]) -> RecordBatch:
        """A chunk of the file's body, read at byte `base` by `batches`."""
        return self.chunk_records(buf, base, long)

    def chunk_records(self, buf: bytes, base: int, long: list[tuple[int, bytes]]) -> RecordBatch:
        """The records (and rejects) of `buf`, the file's bytes from `base`; `long`: the lines over
        MAX_LINE_BYTES line_chunks cut out of it."""
        c = pl.col
        lines = split_lines(buf, base)
        # Raw length of each line (without its newline): distance to the next line's offset.
        end = base + len(buf) + (not buf.endswith(b"\n"))
        lines = lines.with_columns(size=c("off").shift(-1, fill_value=end) - c("off") - 1)
        too_long = c("size") > MAX_LINE_BYTES
        # Zero bytes that open a line (what copytruncate without O_APPEND, or a crash, leaves before
        # the next text) are a piece of their own: a reject; the text after them is the line.
        zeros = c("line").str.starts_with("\x00").fill_null(False)
        after = c("line").str.strip_chars_start("\x00")
        lead = c("line").str.len_bytes() - after.str.len_bytes()
        # (pl.concat_str, not pl.format: polars 2.1's format panics on some frames split_lines makes)
        position = pl.concat_str(pl.lit("byte "), c("off").cast(pl.String))
        rejects = pl.concat(
            [
                rejects_frame((self.label, f"byte {off}", _LONG, escape_sample(head)) for off, head in long),
                lines.filter(too_long).select(
                    source=pl.lit(self.label),
                    position=position,
                    reason=pl.lit(_LONG),
                    sample=escape_expr(c("line").str.slice(0, 200)),
                ),
                lines.filter(~too_long & zeros).select(
                    source=pl.lit(self.label),
                    position=position,
                    reason=pl.lit(_ZEROS),
                    sample=pl.concat_str(lead.cast(pl.String), pl.lit(" zero bytes")),
                ),
            ]
        )
        records = lines.filter(~too_long & ~(zeros & (after == ""))).select(
            source=pl.lit(self.label),
            source_key=pl.lit(self.key),
            seq=c("off"),
            cursor=pl.lit(None, pl.String),
            ts_us=pl.lit(None, pl.Int64),
            host=pl.lit(self.host),
            unit=pl.lit(self.unit),
            pid=pl.lit(None, pl.Int64),
            boot_id=pl.lit(None, pl.String),
            invocation_id=pl.lit(None, pl.String),
            syslog_identifier=pl.lit(None, pl.String),
            priority=pl.lit(None, pl.Int8),
            message=after.fill_null(""),  # a line that opens with no zero byte is itself
        )
        return RecordBatch(records.cast(RECORD_SCHEMA), rejects)  # type: ignore[arg-type]


def grown_key(
    key: str, length: int, noted: Iterable[tuple[str, int]], prefix_key: Callable[[int], str]
) -> str:
    """A file's identity while it grows, for `ingest` and `watch` alike: the key (`file_key` of its
    first `length` bytes, at most HEAD_BYTES) unless a key noted when it was shorter
    (`noted`: (key, bytes), store.file_heads_shorter_than) is that of its first bytes then
    (`prefix_key(n)`). An appended file keeps its first key; a rewritten or rotated one differs."""
    noted = sorted(noted, key=lambda kn: -kn[1])
    if any(k == key for k, _ in noted):
        return key
    for k, n in noted:
        if n < length and prefix_key(n) == k:
            return k
    return key
