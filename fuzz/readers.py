"""What the record readers must do with any bytes at all: the check the fuzzers run.

`check(data)` writes `data` to a file and reads it with one reader (chosen by the first byte),
at a chunk size chosen by the second byte, then asserts the readers' contract (for the journal
reader, `data` says how to damage a real `.journal` file made from the fixtures: see `damage`):

* nothing but `SourceError` (a one-line message for the user) ever escapes;
* records and rejects have exactly the schema's columns and types;
* journal-shaped readers never store a record without a time or a dedup key, and no two
  records share `(source_key, seq)`;
* nothing is lost: every line of a plain log is a record or a reject (zero bytes that open it
  a reject of their own, the text after them a record), every non-blank line of a JSON file is a record
  or a reject;
* the chunk size never changes what is read (a chunk boundary is not evidence);
* a damaged journal file never takes the process down (libsystemd may abort: the reader runs
  in a child), and yields at least the entries `journalctl --file` prints.

Used by `fuzz/fuzz_readers.py` (atheris, coverage-guided) and `tests/test_fuzz.py` (hypothesis).
"""

from __future__ import annotations

import functools
import gzip
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import polars as pl

from pdforensics.errors import SourceError
from pdforensics.schema import RECORD_SCHEMA, REJECT_SCHEMA
from pdforensics.sources import RecordBatch, Selection, Source, _common
from pdforensics.sources.detect import open_file_source
from pdforensics.sources.export import ExportFileSource
from pdforensics.sources.journal import JournalSource, python_systemd_available
from pdforensics.sources.jsonlines import JsonLinesSource
from pdforensics.sources.plain import PlainFileSource

ALL = Selection(units=("*",))
CHUNKS = (1, 7, 64, 4096, 1 << 16)
READERS = ("detect", "export", "json", "plain", "gzip", "gzip-cut", "journal")
JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


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
    if reader == "journal":
        check_journal(content, folder)
        return
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
        lines = _lines(content)
        # zero bytes that open a line are a piece of their own (a reject), the text after them a record
        split = sum(1 for ln in lines if ln.startswith(b"\x00") and ln.removesuffix(b"\r").lstrip(b"\x00"))
        assert recs.height + rejects.height == len(lines) + split, (
            recs.height,
            rejects.height,
            len(lines),
            split,
        )
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


@functools.cache
def base_journal() -> bytes | None:
    """A small real journal file (journal-remote, fields over 512 bytes compressed), or None."""
    if not JOURNAL_REMOTE.exists() or not python_systemd_available() or shutil.which("journalctl") is None:
        return None
    entries = (FIXTURES / "healthy" / "journal.export").read_bytes().split(b"\n\n")[:40]
    for i in range(0, len(entries), 3):  # long enough for journal-remote to compress
        entries[i] = entries[i].replace(b"\nMESSAGE=", b"\nMESSAGE=" + b"long %d " % i * 100, 1)
    with tempfile.TemporaryDirectory(prefix="pdforensics-fuzz-journal-") as d:
        out = Path(d) / "base.journal"
        subprocess.run([str(JOURNAL_REMOTE), "-o", str(out), "-"], input=b"\n\n".join(entries) + b"\n\n",
                       check=True, capture_output=True)  # fmt: skip
        return out.read_bytes()


def damage(base: bytes, spec: bytes) -> bytes:
    """`base` damaged as `spec` says: byte 0 < 64 cuts the file at byte 1's fraction of its length;
    then each 3 bytes XOR byte 2 into the object area at the fraction bytes 0-1 give (a 4th of them
    land in the header instead)."""
    data = bytearray(base)
    (header_size,) = struct.unpack_from("<Q", base, 88)
    (tail,) = struct.unpack_from("<Q", base, 136)
    end = min(tail + 4096, len(data))
    for i in range(2 if spec[:1] and spec[0] < 64 else 0, len(spec) - 2, 3):
        frac, xor = int.from_bytes(spec[i : i + 2], "little"), spec[i + 2]
        if frac % 4 == 0:
            at = frac * header_size // 65536
        else:
            at = header_size + frac * (end - header_size) // 65536
        data[at] ^= xor or 1
    if len(spec) >= 2 and spec[0] < 64:
        data = data[: max(spec[1] * len(data) // 256, 1)]
    return bytes(data)


def journalctl_entries(path: Path) -> int:
    proc = subprocess.run(["journalctl", "--file", str(path), "-o", "export", "--all"], capture_output=True,
                          timeout=60)  # fmt: skip
    text = b"\n" + proc.stdout
    return text.count(b"\n\n__CURSOR=") + text.startswith(b"\n__CURSOR=")


def check_journal(spec: bytes, folder: Path) -> None:
    """The journal-file reader on a damaged real journal file (see `damage`)."""
    base = base_journal()
    if base is None:
        return
    path = folder / "damaged.journal"
    path.write_bytes(damage(base, spec))
    got = _read(lambda: JournalSource("files", [path]))
    expected = journalctl_entries(path)
    if got is None:  # refused with one line: only when journalctl reads nothing either
        assert expected == 0, f"refused, but journalctl reads {expected} entries"
        return
    recs, rejects = got[0].records, got[0].rejects
    assert recs.select("source_key", "seq").is_unique().all(), "two records share (source_key, seq)"
    for col in ("source_key", "seq", "ts_us"):
        assert recs[col].null_count() == 0, f"a journal record without {col}"
    # An entry whose seqnum a flip made equal to another's is a counted reject, not a duplicate.
    repeats = rejects.filter(pl.col("reason").str.contains("repeats seqnum")).height
    assert recs.height + repeats >= expected, (recs.height, repeats, expected, rejects["reason"].to_list())


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
    seeds = [bytes([r, c]) + head for head in heads for r in range(len(READERS) - 1) for c in (1, 3)]
    journal = READERS.index("journal")
    damages = [b"", b"\x10\x80", b"\x01\x40\xff", bytes(range(100, 160)), b"\xff\x20" * 12]
    return seeds + [bytes([journal, 0]) + d for d in damages]
