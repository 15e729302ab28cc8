"""What the record readers must do with any bytes at all: the check the fuzzers run.

`check(data)` writes `data` to a file and reads it with one reader (chosen by the first byte),
at a chunk size chosen by the second byte, then asserts the readers' contract:

* nothing but `SourceError` (a one-line message for the user) ever escapes;
* records and rejects have exactly the schema's columns and types;
* journal-shaped readers never store a record without a time or a dedup key, and no two
  records share `(source_key, seq)`;
* nothing is lost: every line of a plain log is a record or a reject, every non-blank line of
  a JSON file is a record or a reject;
* the chunk size never changes what is read (a chunk boundary is not evidence).

Used by `fuzz/fuzz_readers.py` (atheris, coverage-guided) and `tests/test_fuzz.py` (hypothesis).
"""

from __future__ import annotations

import gzip
import tempfile
from collections.abc import Callable
from pathlib import Path

import polars as pl

from pdforensics.errors import SourceError
from pdforensics.schema import RECORD_SCHEMA, REJECT_SCHEMA
from pdforensics.sources import RecordBatch, Selection, Source, _common
from pdforensics.sources.detect import open_file_source
from pdforensics.sources.export import ExportFileSource
from pdforensics.sources.jsonlines import JsonLinesSource
from pdforensics.sources.plain import PlainFileSource

ALL = Selection(units=("*",))
CHUNKS = (1, 7, 64, 4096, 1 << 16)
READERS = ("detect", "export", "json", "plain", "gzip", "gzip-cut")


def _make(reader: str, path: Path, chunk: int) -> Source:
    if reader == "export":
        return ExportFileSource(path, chunk_bytes=chunk)
    if reader == "json":
        return JsonLinesSource(path, chunk_bytes=chunk)
    if reader == "plain":
        return PlainFileSource(path, chunk_bytes=chunk)
    return open_file_source(path)  # detect, gzip, gzip-cut: the reader the content asks for


def _read(make: Callable[[], Source]) -> tuple[RecordBatch, str] | None:
    """Everything one reader yields as one batch, and which reader ran; None when it refused the input."""
    try:
        source = make()
        batches = list(source.batches(ALL, batch_size=5))
    except SourceError as e:
        assert "\n" not in str(e), f"multi-line SourceError: {e!r}"
        return None
    records = [b.records for b in batches]
    rejects = [b.rejects for b in batches]
    for frame, schema in [(f, RECORD_SCHEMA) for f in records] + [(f, REJECT_SCHEMA) for f in rejects]:
        assert dict(frame.schema) == schema, frame.schema
    batch = RecordBatch(
        pl.concat(records) if records else pl.DataFrame(schema=RECORD_SCHEMA),
        pl.concat(rejects) if rejects else pl.DataFrame(schema=REJECT_SCHEMA),
        skipped=sum(b.skipped for b in batches),
        null_messages=sum(b.null_messages for b in batches),
    )
    return batch, source.reader


def _lines(data: bytes) -> list[bytes]:
    if not data:
        return []
    return (data[:-1] if data.endswith(b"\n") else data).split(b"\n")


def check_reader(reader: str, chunk: int, content: bytes, folder: Path) -> None:
    """Read `content` with `reader` at `chunk` bytes per read and assert the contract (see module doc)."""
    # Read in the caller's thread: exceptions surface where they happen, no thread per input.
    saved, _common.READ_AHEAD = _common.READ_AHEAD, 0
    try:
        _check_reader(reader, chunk, content, folder)
    finally:
        _common.READ_AHEAD = saved


def _check_reader(reader: str, chunk: int, content: bytes, folder: Path) -> None:
    path = folder / "input"
    if reader == "gzip":
        path.write_bytes(gzip.compress(content, 1))
    elif reader == "gzip-cut":  # a log.gz cut short: what was compressed before the cut must come back
        packed = gzip.compress(content, 1)
        path.write_bytes(packed[: max(len(packed) - 1 - len(content) % 17, 10)])
    else:
        path.write_bytes(content)
    got = _read(lambda: _make(reader, path, chunk))
    if got is None:
        return
    batch, kind = got
    recs, rejects = batch.records, batch.rejects
    assert batch.skipped == 0, "nothing is outside a select-all selection"
    assert recs.select("source_key", "seq").is_unique().all(), "two records share (source_key, seq)"
    if kind in ("export", "json", "python-systemd", "journalctl-export"):
        for col in ("source_key", "seq", "ts_us"):
            assert recs[col].null_count() == 0, f"a journal record without {col}"
    if reader == "gzip-cut":
        # The cut is reported, not silently dropped, and every line before it comes back as it
        # does from the whole file (the last one read may itself be cut).
        assert rejects["reason"].str.contains("compressed").any(), rejects
        if kind == "plain" and recs.height > 1:
            full = folder / "full"
            full.write_bytes(gzip.compress(content, 1))
            whole = _read(lambda: _make("gzip", full, chunk))
            assert whole is not None
            kept = recs["message"].to_list()[:-1]
            assert whole[0].records["message"].to_list()[: len(kept)] == kept
        return
    if content.startswith(_common.GZIP_MAGIC):
        return  # the readers see what it decompresses to, not these bytes: nothing to count against
    if kind == "plain":
        n = len(_lines(content))
        assert recs.height + rejects.height == n, (recs.height, rejects.height, n)
    if kind == "json":
        rejected_lines = rejects.filter(pl.col("position").str.starts_with("line ")).height
        lines = _lines(content.removeprefix(b"\xef\xbb\xbf"))  # a BOM is not part of the first line
        blank = sum(1 for line in lines if not line.decode("utf-8", "replace").strip())
        assert recs.height + rejected_lines == len(lines) - blank, (
            recs.height,
            rejected_lines,
            len(lines),
            blank,
        )
    if reader in ("export", "json", "plain") and chunk != _common.CHUNK_BYTES:
        whole = _read(lambda: _make(reader, path, _common.CHUNK_BYTES))
        assert whole is not None
        assert whole[0].records.equals(recs), "the chunk size changed the records read"


def check(data: bytes) -> None:
    """The fuzz entry: byte 0 picks the reader, byte 1 the chunk size, the rest is the file."""
    if len(data) < 2:
        return
    reader = READERS[data[0] % len(READERS)]
    chunk = CHUNKS[data[1] % len(CHUNKS)]
    with tempfile.TemporaryDirectory(prefix="pdforensics-fuzz-") as folder:
        check_reader(reader, chunk, data[2:], Path(folder))


def seed_inputs(fixtures: Path, size: int = 1500) -> list[bytes]:
    """Starting points for the fuzzers: the head of each fixture format, for each reader."""
    heads = []
    scenario = fixtures / "decode_restart_watchdog_fires"
    for name in ("journal.export", "journal.json"):
        heads.append((scenario / name).read_bytes()[:size])
    heads += [p.read_bytes()[:size] for p in sorted((scenario / "plain").glob("*.log"))[:1]]
    return [bytes([r, c]) + head for head in heads for r in range(len(READERS)) for c in (1, 3)]
