"""Plain SGLang text logs (redirected stderr, --log-requests-target files, docker output; gzip too).

One record per line, blank lines included (they separate parts of a traceback). `seq` is the
byte offset of the line in the decompressed stream and `source_key` the file's identity (sha1 of
its first 64 KiB), so re-reading a file, or a copy of it, stores nothing twice. `ts_us` stays
NULL: parse takes the time from the line's own prefix, in the zone the user names.

Selection: the file was named by the user, so unit globs do not filter it, and the time window
cannot be applied before parse has read the prefixes; ingest applies it to the parsed lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl

from pdforensics.errors import SourceError
from pdforensics.schema import RECORD_SCHEMA
from pdforensics.sources import RecordBatch, Selection
from pdforensics.sources._common import (
    CHUNK_BYTES,
    check_file,
    escape_expr,
    escape_sample,
    file_key,
    in_background,
    line_chunks,
    open_stream,
    read_head,
    rejects_frame,
    split_batch,
    split_lines,
    stream_problem,
)

MAX_LINE_BYTES = 1 << 20
MAX_BINARY_SHARE = 0.30
# Not text: C0 controls other than tab, newlines, form feed and ESC (ANSI colour), DEL, and bytes
# that are not UTF-8 (decoded as U+FFFD).
_NON_TEXT = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f\ufffd]")
_LONG = "line longer than 1 MiB"


def unit_from_name(path: Path) -> str:
    """`prefill.log` -> `prefill`, `decode.log.1.gz` -> `decode`, `router.txt` -> `router`."""
    name = path.name.removesuffix(".gz")
    if ".log" in name:
        return name.split(".log", 1)[0] or name
    return Path(name).stem or name


def non_text_share(head: bytes) -> float:
    text = head.decode("utf-8", "replace")
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
        self.label = f"file:{self.path.resolve()}"
        # The machine reading a copied file is not the machine that wrote it, hence no hostname.
        self.host = host or "local"
        self.unit = unit or unit_from_name(self.path)
        self.chunk_bytes = chunk_bytes

    def batches(self, selection: Selection, batch_size: int = 100_000) -> Iterator[RecordBatch]:
        def produce(stopped: Callable[[], bool]) -> Iterator[RecordBatch]:
            with open_stream(self.path) as stream:
                for buf, base, long in line_chunks(stream, self.path, self.chunk_bytes, MAX_LINE_BYTES):
                    yield from split_batch(self._batch(buf, base, long), batch_size)
                    if stopped():
                        return
                if problem := stream_problem(stream, self.label):
                    yield problem

        return in_background(produce)

    def _batch(self, buf: bytes, base: int, long: list[tuple[int, bytes]]) -> RecordBatch:
        c = pl.col
        lines = split_lines(buf, base)
        # Raw length of each line (without its newline): distance to the next line's offset.
        end = base + len(buf) + (not buf.endswith(b"\n"))
        lines = lines.with_columns(size=c("off").shift(-1, fill_value=end) - c("off") - 1)
        too_long = c("size") > MAX_LINE_BYTES
        rejects = pl.concat(
            [
                rejects_frame((self.label, f"byte {off}", _LONG, escape_sample(head)) for off, head in long),
                lines.filter(too_long).select(
                    source=pl.lit(self.label),
                    position=pl.format("byte {}", c("off")),
                    reason=pl.lit(_LONG),
                    sample=escape_expr(c("line").str.slice(0, 200)),
                ),
            ]
        )
        records = lines.filter(~too_long).select(
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
            message=c("line").fill_null(""),
        )
        return RecordBatch(records.cast(RECORD_SCHEMA), rejects)  # type: ignore[arg-type]
