"""Issue 15: export and JSON files that lie: lengths, nesting, times, format, headers.

Every case is stored or counted (never exit 70), memory stays bounded whatever a length field
claims, and the reader resynchronises after a bad record.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import export_to_journal

from pdforensics.paths import fixtures_dir
from pdforensics.sources import RecordBatch, Selection
from pdforensics.sources import export as export_mod
from pdforensics.sources.detect import open_file_source
from pdforensics.sources.journal import JournalSource, python_systemd_available

REPO = Path(__file__).resolve().parent.parent
ALL = Selection(units=("*",))
T0 = 1_764_410_000_000_000


def entry(i: int, *fields: bytes) -> bytes:
    head = b"__CURSOR=s=feed;i=%x\n__REALTIME_TIMESTAMP=%d\n_SYSTEMD_UNIT=sglang-p.service\n" % (i, T0 + i)
    return head + b"".join(fields) + b"MESSAGE=m%d\n\n" % i


def binary(name: bytes, data: bytes, size: int | None = None) -> bytes:
    return name + b"\n" + struct.pack("<Q", len(data) if size is None else size) + data + b"\n"


def read(path: Path) -> tuple[RecordBatch, str]:
    src = open_file_source(path)
    batches = list(src.batches(ALL, batch_size=1000))
    return RecordBatch(
        pl.concat([b.records for b in batches]), pl.concat([b.rejects for b in batches])
    ), src.reader


def test_a_length_without_nul_bytes_rejects_its_entry_only(tmp_path: Path) -> None:
    """2**64-1 (8 bytes 0xff, no NUL: not recognised as a binary field before) is no length."""
    data = b"".join(entry(i) for i in range(7)) + entry(7, binary(b"DATA", b"x=y", 2**64 - 1))
    data += b"".join(entry(i) for i in range(8, 15))
    (p := tmp_path / "f.export").write_bytes(data)
    got, _ = read(p)
    assert sorted(got.records["seq"]) == [i for i in range(15) if i != 7]
    assert got.rejects["reason"].to_list() == [
        "binary field DATA has an impossible length (no NUL in its length bytes)"
    ]


def test_a_length_that_swallows_the_next_entries_is_not_believed(tmp_path: Path) -> None:
    """A binary field claiming 700 MiB, followed by ordinary entries: it lies, they are kept."""
    data = (
        entry(0) + entry(1, binary(b"MESSAGE", b"abc", 700 << 20)) + b"".join(entry(i) for i in range(2, 500))
    )
    (p := tmp_path / "f.export").write_bytes(data)
    got, _ = read(p)
    assert sorted(got.records["seq"]) == [0, *range(2, 500)]
    assert got.rejects["reason"].to_list() == [
        f"binary field MESSAGE claims {700 << 20} bytes, but an entry starts inside them"
    ]


def test_a_long_binary_field_is_read_past_with_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real field longer than the parser holds (a coredump) is read past; its entry is kept."""
    monkeypatch.setattr(export_mod, "MAX_CARRY", 1 << 20)
    core = os.urandom(5 << 20).replace(b"\n\n", b"\n.")
    data = entry(0) + entry(1, binary(b"COREDUMP", core)) + entry(2) + entry(3)
    (p := tmp_path / "f.export").write_bytes(data)
    src = export_mod.ExportFileSource(p, chunk_bytes=256 << 10)
    batches = list(src.batches(ALL))
    records = pl.concat([b.records for b in batches])
    assert records["seq"].to_list() == [0, 1, 2, 3]
    assert records["message"].to_list() == ["m0", "m1", "m2", "m3"]
    assert sum(b.rejects.height for b in batches) == 0


def _read_peak_rss_mb(path: Path) -> tuple[int, int]:
    """(records read, peak RSS in MB) of a fresh process reading `path` with the detected reader."""
    code = (
        "import resource, sys\nfrom pathlib import Path\nfrom pdforensics.sources import Selection\n"
        "from pdforensics.sources.detect import open_file_source\n"
        "n = sum(b.records.height for b in open_file_source(Path(sys.argv[1])).batches(Selection(units=('*',))))\n"
        "print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    n, rss_mb = map(int, proc.stdout.split())
    return n, rss_mb


def test_a_huge_claim_keeps_memory_bounded(tmp_path: Path) -> None:
    """The issue's case at full size: 200k entries after a 700 MiB claim. The claim costs no memory:
    the peak RSS is that of reading the same entries with a real 1-byte field instead (the process's
    own footprint, polars and the batches, is the same in both)."""
    rest = b"".join(entry(i) for i in range(1, 200_000))
    (claim := tmp_path / "claim.export").write_bytes(entry(0, binary(b"MESSAGE", b"x", 700 << 20)) + rest)
    (plain := tmp_path / "plain.export").write_bytes(entry(0, binary(b"MESSAGE", b"x", 1)) + rest)
    n, rss_claim = _read_peak_rss_mb(claim)
    assert n == 199_999  # the entry that lies is a counted reject; every other one is read
    n_plain, rss_plain = _read_peak_rss_mb(plain)
    assert n_plain == 200_000
    assert rss_claim - rss_plain < 100, f"peak RSS {rss_claim} MB with the claim, {rss_plain} MB without"


def test_export_field_names_and_values_that_are_not_utf8(tmp_path: Path) -> None:
    data = (
        entry(0, b"X_\xff\xfe=v\n", b"_HOSTNAME=h\xffst\n")
        + entry(1, b"a line without an equals sign\n")
        + entry(2)
    )
    (p := tmp_path / "f.export").write_bytes(data)
    got, _ = read(p)
    assert got.records["seq"].to_list() == [0, 1, 2]
    assert got.records["host"][0] == "h\ufffdst"
    assert got.rejects["reason"].to_list() == ["export line without '='"]


def test_a_negative_time_is_not_a_time(tmp_path: Path) -> None:
    lines = [
        {
            "__CURSOR": f"s=feed;i={i:x}",
            "__REALTIME_TIMESTAMP": ts,
            "_SYSTEMD_UNIT": "sglang-p.service",
            "MESSAGE": "m",
        }
        for i, ts in enumerate(["-5", str(T0), "+5", " 7 "])
    ]
    (p := tmp_path / "f.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    got, _ = read(p)
    assert got.records["ts_us"].to_list() == [T0, 7]
    assert got.rejects["reason"].to_list() == ["entry has no valid __REALTIME_TIMESTAMP"] * 2


@pytest.mark.parametrize("depth", [50, 600, 990, 100_000])
def test_deeply_nested_json_is_a_counted_reject(tmp_path: Path, depth: int) -> None:
    good = {"__CURSOR": "s=feed;i=1", "__REALTIME_TIMESTAMP": str(T0), "MESSAGE": "ok"}
    arrays = "[" * depth + "]" * depth
    nested = json.dumps({"__CURSOR": "s=feed;i=2", "__REALTIME_TIMESTAMP": str(T0), "MESSAGE": None})
    nested = nested.replace("null", arrays)
    (p := tmp_path / "f.json").write_text(
        json.dumps(good) + "\n" + nested + "\n" + json.dumps(good | {"__CURSOR": "s=feed;i=3"}) + "\n"
    )
    got, reader = read(p)
    assert reader == "json"
    assert set(got.records["seq"]) >= {1, 3}
    assert got.records.height + got.rejects.height == 3


def test_a_json_export_whose_first_message_is_long_is_read_as_json(tmp_path: Path) -> None:
    """journalctl's key order varies: MESSAGE (1 MiB) before __CURSOR on the first line."""
    lines = (fixtures_dir() / "healthy" / "journal.json").read_text().splitlines()
    first = json.loads(lines[0])
    first = {"MESSAGE": "x" * (1 << 20)} | {k: v for k, v in first.items() if k != "MESSAGE"}
    (p := tmp_path / "f.json").write_text(json.dumps(first) + "\n" + "\n".join(lines[1:]) + "\n")
    got, reader = read(p)
    assert reader == "json"
    assert got.records.height == len(lines)
    assert got.records["ts_us"].null_count() == 0
    assert got.records["unit"].str.starts_with("sglang").any()


@pytest.mark.skipif(not python_systemd_available(), reason="python-systemd not installed")
def test_a_damaged_headers_entry_count_is_not_believed(tmp_path: Path) -> None:
    export = (fixtures_dir() / "short_window" / "journal.export").read_bytes()
    path = export_to_journal(export, tmp_path / "h.journal")
    data = bytearray(path.read_bytes())
    data[152:160] = b"00000000"  # n_entries = 3,472,328,296,227,680,304
    path.write_bytes(bytes(data))
    batches = list(JournalSource("files", [path]).batches(ALL))
    reasons = [r for b in batches for r in b.rejects["reason"].to_list()]
    assert sum(b.records.height for b in batches) > 100
    assert not any("unreadable" in r for r in reasons), reasons
