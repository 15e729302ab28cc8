"""File sources: Journal Export Format, `journalctl -o json` lines, plain text logs, format detection."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ingest import all_lines
from test_sources_journal import as_unprivileged, read
from test_sources_journal import entry as journal_entry

from pdforensics.errors import SourceError
from pdforensics.sources import Selection, Window
from pdforensics.sources.detect import open_file_source, sniff
from pdforensics.sources.export import ExportFileSource, ExportParser
from pdforensics.sources.journal import JournalSource, python_systemd_available
from pdforensics.sources.jsonlines import JsonLinesSource
from pdforensics.sources.plain import PlainFileSource, unit_from_name

T0 = 1_764_410_000_123_457
FAR = 2**53 + 1  # beyond exact floats
needs_journalctl = pytest.mark.skipif(shutil.which("journalctl") is None, reason="journalctl not installed")


def entry(
    ts: int | None, message: str | bytes | list[str | bytes], **fields: str | bytes | list[str | bytes]
) -> bytes:
    return journal_entry(ts, message, **({"_SYSTEMD_UNIT": "sglang-p.service", "_PID": "42"} | fields))


QUIRKS = b"".join(
    [
        entry(T0, "[2026-11-29 10:00:00 TP0] plain line"),
        entry(T0 + 1, b"\x1b[33mWARN\x1b[0m \xff colour"),
        entry(T0 + 2, ["part one", b"part\n\ntwo \x00 with blank line and NUL"], FOO=["a", "b"]),
        entry(
            T0 + 3, "Started sglang-d.service.", _SYSTEMD_UNIT="init.scope", _PID="1", UNIT="sglang-d.service"
        ),
        entry(
            T0 + 4, "Suppressed 5 messages from sglang-x.service", _SYSTEMD_UNIT="systemd-journald.service"
        ),
        entry(T0 + 5, "ssh login", _SYSTEMD_UNIT="sshd.service"),
        entry(T0 + 6, "x" * 5000),  # over journalctl -o json's 4096-byte threshold
        entry(FAR, "far future"),
    ]
)


def gz(path: Path) -> Path:
    out = path.with_name(path.name + ".gz")
    out.write_bytes(gzip.compress(path.read_bytes()))
    return out


@pytest.fixture
def journal_dump(make_journal, tmp_path: Path):
    """(journal file, its -o export text, its -o json --all text, its -o json text) from real journalctl."""
    if shutil.which("journalctl") is None:
        pytest.skip("journalctl not installed")
    journal = make_journal(QUIRKS)

    def jctl(*args: str) -> bytes:
        cmd = ["journalctl", "--utc", "--no-pager", "--file", str(journal), *args]
        return subprocess.run(cmd, check=True, capture_output=True).stdout

    return journal, jctl("--all", "-o", "export"), jctl("--all", "-o", "json"), jctl("-o", "json")


# -- the same journal through every reader -----------------------------------------------------------


@needs_journalctl
@pytest.mark.parametrize("units", [("*",), ("sglang*",)])
def test_export_and_json_files_match_the_journal_reader(journal_dump, tmp_path: Path, units) -> None:
    journal, export, json_all, _ = journal_dump
    (tmp_path / "j.export").write_bytes(export)
    (tmp_path / "j.json").write_bytes(json_all)
    sel = Selection(units=units)
    reference = read(JournalSource("files", [journal], force_journalctl=not python_systemd_available()), sel)
    assert reference.records.height >= 6
    for source in (ExportFileSource(tmp_path / "j.export"), JsonLinesSource(tmp_path / "j.json")):
        got = read(source, sel)
        assert got.records.drop("source").equals(reference.records.drop("source")), source.reader
        assert (got.skipped, got.rejects.height) == (reference.skipped, 0)


@needs_journalctl
def test_json_without_all_nulls_large_fields_record_kept_and_counted(journal_dump, tmp_path: Path) -> None:
    *_, json_default = journal_dump
    assert b'"MESSAGE":null' in json_default  # journalctl really does this
    (tmp_path / "j.json").write_bytes(json_default)
    got = read(JsonLinesSource(tmp_path / "j.json"))
    row = got.records.filter(pl.col("ts_us") == T0 + 6).to_dicts()
    assert len(row) == 1 and row[0]["message"] == ""
    assert got.null_messages == 1
    assert got.records.height == 8


# -- export format -----------------------------------------------------------------------------------


def test_export_quirks(tmp_path: Path) -> None:
    (tmp_path / "q.export").write_bytes(QUIRKS)
    got = read(ExportFileSource(tmp_path / "q.export"))
    msgs = dict(zip(got.records["ts_us"], got.records["message"], strict=True))
    assert msgs[T0 + 1] == "\x1b[33mWARN\x1b[0m \ufffd colour"
    assert msgs[T0 + 2] == "part one\npart\n\ntwo \x00 with blank line and NUL"
    assert msgs[FAR] == "far future"
    assert got.records.filter(pl.col("ts_us") == T0 + 3)["unit"].to_list() == ["sglang-d.service"]


def test_export_without_cursor_keys_by_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "q.export"
    path.write_bytes(QUIRKS)
    got = read(ExportFileSource(path)).records
    key = "file:" + hashlib.sha1(QUIRKS[: 64 << 10]).hexdigest()[:16]
    assert set(got["source_key"]) == {key}
    for seq, ts in zip(got["seq"], got["ts_us"], strict=True):
        assert QUIRKS[seq:].startswith(f"__REALTIME_TIMESTAMP={ts}\n".encode())


@pytest.mark.parametrize("chunk", [1, 5, 16, 100])
def test_export_chunk_boundaries_never_change_the_result(tmp_path: Path, chunk: int) -> None:
    # Binary values with "\n\n" and NULs, lengths whose bytes are newlines (10, 2570 = 0x0a0a),
    # and a length whose first byte is NUL (256): every cut position inside headers and lengths.
    text = b"".join(
        [
            entry(T0, b"\x1b[0m \xff"),
            entry(T0 + 1, b"a" * 10),
            entry(T0 + 2, "text between"),
            entry(T0 + 3, b"\n" * 2570),
            entry(T0 + 4, ["x", b"b" * 256, b"y\x00z"]),
            entry(T0 + 5, "tail"),
        ]
    )
    path = tmp_path / "c.export"
    path.write_bytes(text)
    whole = read(ExportFileSource(path))
    assert whole.records.height == 6 and whole.rejects.height == 0
    assert whole.records["message"][3] == "\n" * 2570
    assert read(ExportFileSource(path, chunk_bytes=chunk)).records.equals(whole.records)


def holds_no_entry_start(m: str | bytes) -> bool:
    """The reader takes an entry start inside a binary field's claimed bytes as proof that its length
    lies (a damaged file); a message holding one is rejected with that reason instead (below)."""
    data = m.encode() if isinstance(m, str) else m
    return not any(p in data for p in (b"\n\n__CURSOR=", b"\n\n__REALTIME_TIMESTAMP="))


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    derandomize=True,  # the same examples each run (as tests/test_fuzz.py): CI never meets a new find by chance
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    messages=st.lists(
        st.one_of(st.text(max_size=40), st.binary(max_size=40)).filter(holds_no_entry_start),
        min_size=1,
        max_size=8,
    ),
    chunk=st.integers(min_value=1, max_value=300),
)
def test_export_round_trips_any_message(tmp_path: Path, messages: list[str | bytes], chunk: int) -> None:
    def as_field(m: str | bytes) -> str | bytes:
        # Text the export format can carry as NAME=value; anything else goes binary.
        if isinstance(m, str) and m.isprintable() and m:
            return m
        return m.encode() if isinstance(m, str) else m

    path = tmp_path / "h.export"
    path.write_bytes(b"".join(entry(T0 + i, as_field(m)) for i, m in enumerate(messages)))
    got = read(ExportFileSource(path, chunk_bytes=chunk))
    expected = [m.decode("utf-8", "replace") if isinstance(m, bytes) else m for m in messages]
    assert got.records["message"].to_list() == expected
    assert got.rejects.height == 0


@pytest.mark.parametrize("chunk", [1, 7, 300])
def test_a_binary_message_holding_an_entry_start_is_a_counted_rejection(tmp_path: Path, chunk: int) -> None:
    """Hypothesis found it (it mines the code's own byte strings): a message that quotes an export
    entry start looks exactly like a binary field whose length lies. The reader sides with damage,
    which fails loudly (a rejection with its reason), over believing the length, which on a damaged
    file would swallow the entries after it unseen; the entries around it are read."""
    path = tmp_path / "quoted.export"
    path.write_bytes(
        entry(T0, "before") + entry(T0 + 1, b"\n\n__REALTIME_TIMESTAMP=") + entry(T0 + 2, "after")
    )
    got = read(ExportFileSource(path, chunk_bytes=chunk))
    assert got.records["message"].to_list() == ["before", "after"]
    assert got.rejects["reason"].str.contains("an entry starts inside them").any(), got.rejects


def test_export_many_chunk_sizes(tmp_path: Path) -> None:
    # Cuts everywhere around text entries followed by binary ones (found by the property test above:
    # the text region before a binary entry that needed more data was emitted twice).
    messages: list[str | bytes] = [b"", b"", "0", b"", "a", b"\n\n\x00", "b", b"\x1b[0m"]
    text = b"".join(
        f"__REALTIME_TIMESTAMP={T0 + i}\n".encode()
        + (b"MESSAGE\n" + struct.pack("<Q", len(m)) + m if isinstance(m, bytes) else f"MESSAGE={m}".encode())
        + b"\n\n"
        for i, m in enumerate(messages)
    )
    expected = [m.decode() if isinstance(m, bytes) else m for m in messages]
    for chunk in [*range(1, 49), len(text) - 1, len(text), len(text) + 1]:
        with io.BytesIO(text) as f:
            raws = [raw for raw, rejects in ExportParser(f, "t", chunk_bytes=chunk) if not rejects.height]
        assert pl.concat(raws)["MESSAGE"].to_list() == expected, chunk


def test_export_truncated_final_entry_is_a_reject(tmp_path: Path) -> None:
    text = QUIRKS + entry(T0 + 9, "this entry is cut")[:-12]
    path = tmp_path / "t.export"
    path.write_bytes(text)
    got = read(ExportFileSource(path))
    assert got.records.height == 8
    assert got.rejects.height == 1
    assert got.rejects["reason"][0] == "truncated entry at end of input"
    assert got.rejects["position"][0] == f"byte {len(QUIRKS)}"


def test_export_binary_length_past_eof_is_a_reject(tmp_path: Path) -> None:
    text = QUIRKS + entry(T0 + 9, b"binary \x1b value")[:-6]
    path = tmp_path / "b.export"
    path.write_bytes(text)
    got = read(ExportFileSource(path, chunk_bytes=64))
    assert got.records.height == 8
    assert got.rejects["reason"].to_list() == ["binary field MESSAGE runs past end of input"]
    assert got.rejects["position"][0] == f"byte {len(QUIRKS)}"


def test_export_impossible_binary_length_resyncs(tmp_path: Path) -> None:
    broken = b"__REALTIME_TIMESTAMP=5\nMESSAGE\n" + struct.pack("<Q", 2**40) + b"junk\n\n"
    path = tmp_path / "x.export"
    path.write_bytes(entry(T0, "before") + broken + entry(T0 + 2, "after"))
    got = read(ExportFileSource(path))
    assert got.records["message"].to_list() == ["before", "after"]
    assert "impossible length" in got.rejects["reason"][0]


def test_export_entry_without_timestamp_is_a_reject(tmp_path: Path) -> None:
    path = tmp_path / "n.export"
    path.write_bytes(entry(T0, "ok") + entry(None, "no time") + entry(T0 + 1, "ok too"))
    got = read(ExportFileSource(path))
    assert got.records["message"].to_list() == ["ok", "ok too"]
    assert got.rejects.select("position", "reason", "sample").row(0) == (
        f"byte {len(entry(T0, 'ok'))}",
        "entry has no valid __REALTIME_TIMESTAMP",
        "no time",
    )


def test_export_unterminated_final_entry_with_complete_lines_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "u.export"
    path.write_bytes(entry(T0, "a") + entry(T0 + 1, "b")[:-1])  # no blank line after the last entry
    assert read(ExportFileSource(path)).records["message"].to_list() == ["a", "b"]


def test_export_window_and_units(tmp_path: Path) -> None:
    path = tmp_path / "w.export"
    path.write_bytes(QUIRKS)
    got = read(ExportFileSource(path), Selection(window=Window(T0 + 1, T0 + 5)))
    assert got.records["ts_us"].to_list() == [T0 + 1, T0 + 2, T0 + 3, T0 + 4]
    assert got.skipped == 4


def test_export_parser_streams_in_bounded_chunks(tmp_path: Path) -> None:
    text = b"".join(entry(T0 + i, f"m{i}") for i in range(2000))
    path = tmp_path / "s.export"
    path.write_bytes(text)
    with open(path, "rb") as f:
        chunks = list(ExportParser(f, "s", chunk_bytes=16 << 10))
    assert len(chunks) > 10  # parsed piecewise, not after reading the whole file
    assert sum(raw.height for raw, _ in chunks) == 2000


# -- JSON lines --------------------------------------------------------------------------------------


def jline(ts: int | str, message: object, **fields: object) -> str:
    obj = {"__CURSOR": f"s=abc;i={int(ts) % 10**6:x};b=0;m=0;t=0;x=0", "__REALTIME_TIMESTAMP": str(ts)}
    obj |= {"_SYSTEMD_UNIT": "sglang-p.service", "_PID": "42", **fields, "MESSAGE": message}
    return json.dumps(obj, separators=(",", ":"))


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_json_message_byte_array_is_decoded_not_stored_as_numbers(tmp_path: Path) -> None:
    ansi = list(b"\x1b[31mred\x1b[0m \xff end")
    got = read(JsonLinesSource(write_lines(tmp_path / "a.json", [jline(T0, ansi)])))
    assert got.records["message"].to_list() == ["\x1b[31mred\x1b[0m \ufffd end"]
    assert "[27" not in got.records["message"][0]


def test_json_repeated_fields_arrays(tmp_path: Path) -> None:
    line = jline(T0, ["m1", list(b"m2 \x1b[0m")], _SYSTEMD_UNIT=["x.service", "sglang-q.service"])
    got = read(JsonLinesSource(write_lines(tmp_path / "r.json", [line])))
    assert got.records.select("message", "unit").row(0) == ("m1\nm2 \x1b[0m", "sglang-q.service")


def test_json_null_message_keeps_the_record(tmp_path: Path) -> None:
    got = read(JsonLinesSource(write_lines(tmp_path / "n.json", [jline(T0, None), jline(T0 + 1, "x")])))
    assert got.records["message"].to_list() == ["", "x"]
    assert got.null_messages == 1


def test_json_exact_integer_microseconds(tmp_path: Path) -> None:
    lines = [jline(T0, "a"), jline(FAR, "b"), json.dumps({"__REALTIME_TIMESTAMP": FAR + 2, "MESSAGE": "c"})]
    got = read(JsonLinesSource(write_lines(tmp_path / "e.json", lines)))
    assert got.records["ts_us"].to_list() == [T0, FAR, FAR + 2]


def test_json_malformed_lines_are_rejects_with_line_numbers(tmp_path: Path) -> None:
    lines = [jline(T0, "ok"), "", "{not json", jline(T0 + 1, "ok2"), "[1, 2]", jline(T0 + 2, "cut")[:30]]
    got = read(JsonLinesSource(write_lines(tmp_path / "m.json", lines)))
    assert got.records["message"].to_list() == ["ok", "ok2"]
    rejects = dict(zip(got.rejects["position"], got.rejects["reason"], strict=True))
    assert set(rejects) == {"line 3", "line 5", "line 6"}
    assert rejects["line 3"].startswith("malformed JSON")
    assert rejects["line 5"] == "JSON line is not an object"


def test_json_line_numbers_count_skipped_over_long_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pdforensics.sources.jsonlines as jsonlines

    monkeypatch.setattr(jsonlines, "MAX_LINE_BYTES", 1000)  # instead of writing 256 MiB
    lines = [jline(T0, "a"), jline(T0 + 1, "b" * 5000), jline(T0 + 2, "c"), "{broken"]
    got = read(JsonLinesSource(write_lines(tmp_path / "l.json", lines), chunk_bytes=400))
    assert got.records["message"].to_list() == ["a", "c"]
    assert dict(zip(got.rejects["position"], got.rejects["reason"], strict=True)) == {
        "line 2": "line longer than 256 MiB",
        "line 4": "malformed JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    }


def test_json_chunk_boundaries(tmp_path: Path) -> None:
    lines = [jline(T0 + i, f"message {i}" if i % 3 else list(f"bin {i}\x1b".encode())) for i in range(100)]
    path = write_lines(tmp_path / "c.json", lines)
    whole = read(JsonLinesSource(path))
    assert whole.records.height == 100
    assert read(JsonLinesSource(path, chunk_bytes=211)).records.equals(whole.records)


# -- plain text logs ---------------------------------------------------------------------------------


def test_a_zero_filled_start_is_one_counted_reject_and_the_text_after_it_is_read(tmp_path: Path) -> None:
    """Issue 29, item 5: what copytruncate without O_APPEND (or a crash) leaves: the file starts
    with zero bytes up to where the writer was, then its new lines. It was "not text" (exit 3)."""
    from pdforensics.catalog import load_catalog
    from pdforensics.ingest import ingest

    healthy = (
        Path(__file__).parent.parent
        / "fixtures"
        / "healthy"
        / "plain"
        / "dsv4-node-01-sglang-dsv4-prefill.log"
    )
    text = healthy.read_bytes()
    log = tmp_path / "prefill.log"
    log.write_bytes(b"\x00" * 200_000 + text + b"\x00" * 10 + b"\n")
    got = read(PlainFileSource(log))
    records, rejects = got.records, got.rejects
    assert records["message"].to_list() == text.decode().splitlines()
    assert rejects.select("position", "reason", "sample").rows() == [
        ("byte 0", "zero bytes skipped (a zero-filled stretch: copytruncate without O_APPEND, or a crash)",
         "200000 zero bytes"),
        (f"byte {200_000 + len(text)}",
         "zero bytes skipped (a zero-filled stretch: copytruncate without O_APPEND, or a crash)", "10 zero bytes"),
    ]  # fmt: skip
    db = tmp_path / "z.duckdb"
    summary = ingest(db, [open_file_source(log)], Selection(), load_catalog(), tz="UTC")
    assert summary.rejected == 2 and summary.stored == len(text.splitlines())


def test_plain_records_offsets_and_identity(tmp_path: Path) -> None:
    data = b"[2026-11-29 10:00:00 TP0] first\r\n\r\nTraceback (most recent call last):\n  caf\xc3\xa9 \xff\x00end\nlast"
    path = tmp_path / "prefill.log"
    path.write_bytes(data)
    got = read(PlainFileSource(path)).records
    assert got["message"].to_list() == [
        "[2026-11-29 10:00:00 TP0] first",
        "",
        "Traceback (most recent call last):",
        "  café \ufffd\x00end",
        "last",
    ]
    assert got["seq"].to_list() == [0, 33, 35, 70, 84]
    assert set(got["source_key"]) == {"file:" + hashlib.sha1(data).hexdigest()[:16]}
    assert set(got["unit"]) == {"prefill"} and set(got["host"]) == {"local"}
    assert got["ts_us"].null_count() == got.height and got["cursor"].null_count() == got.height
    assert got["source"][0] == f"file:{path.resolve()}"


def test_plain_gzip_is_the_same_source(tmp_path: Path) -> None:
    path = tmp_path / "decode.log"
    path.write_text("".join(f"[2026-11-29 10:00:{i % 60:02d}] line {i}\n" for i in range(1000)))
    a, b = read(PlainFileSource(path)), read(PlainFileSource(gz(path)))
    assert a.records.height == 1000
    assert a.records.drop("source").equals(b.records.drop("source"))


@pytest.mark.parametrize("chunk", [7, 1000])
def test_plain_chunk_boundaries(tmp_path: Path, chunk: int) -> None:
    rng = random.Random(7)
    data = b"".join(rng.choice([b"", b"short", b"caf\xc3\xa9 " * 9, b"x\r"]) + b"\n" for _ in range(400))
    path = tmp_path / "c.log"
    path.write_bytes(data)
    whole = read(PlainFileSource(path))
    assert whole.records.height == 400
    assert read(PlainFileSource(path, chunk_bytes=chunk)).records.equals(whole.records)
    for seq, msg in zip(whole.records["seq"], whole.records["message"], strict=True):
        assert data[seq:].startswith(msg.encode())


def test_plain_line_longer_than_1_mib_is_a_reject(tmp_path: Path) -> None:
    long = b"L" * ((1 << 20) + 10)
    data = b"before\n" + long + b"\nafter\n" + long  # the last one has no newline
    path = tmp_path / "l.log"
    path.write_bytes(data)
    for chunk in (16 << 20, 256 << 10):  # inside one chunk, and spanning chunks
        got = read(PlainFileSource(path, chunk_bytes=chunk))
        assert got.records["message"].to_list() == ["before", "after"]
        assert got.rejects["reason"].to_list() == ["line longer than 1 MiB"] * 2
        assert got.rejects["position"].to_list() == ["byte 7", f"byte {7 + len(long) + 7}"]
        assert got.rejects["sample"][0] == "L" * 200


def test_plain_empty_file_gives_no_records(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    got = read(PlainFileSource(path))
    assert got.records.height == 0 and got.rejects.height == 0


def test_plain_mostly_binary_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "random.log"
    path.write_bytes(random.Random(1).randbytes(100_000))
    with pytest.raises(SourceError, match="not a text log"):
        PlainFileSource(path)


def test_plain_unit_and_host_options(tmp_path: Path) -> None:
    path = tmp_path / "node3_0.log.2026-11-29_10.gz"
    path.write_bytes(gzip.compress(b"hello\n"))
    assert unit_from_name(path) == "node3_0"
    assert unit_from_name(Path("router.txt")) == "router"
    got = read(PlainFileSource(path, host="gpu-7", unit="sglang-prefill")).records
    assert got.select("host", "unit", "message").row(0) == ("gpu-7", "sglang-prefill", "hello")


def test_plain_host_and_unit_from_a_host_unit_file_name(tmp_path: Path) -> None:
    """Issue 28 item 5: `b200-07-sglang-dsv4-prefill.log` names its host before `local`; --host and
    --unit still win; a name that is not `<host>-sglang…` keeps `local` and its own unit."""
    named = tmp_path / "b200-07-sglang-dsv4-prefill.log.1.gz"
    named.write_bytes(gzip.compress(b"hello\n"))
    got = read(PlainFileSource(named)).records
    assert got.select("host", "unit").row(0) == ("b200-07", "sglang-dsv4-prefill")
    assert read(PlainFileSource(named, host="gpu-7")).records.select("host", "unit").row(0) == (
        "gpu-7", "sglang-dsv4-prefill")  # fmt: skip
    for name, unit in (("prefill.log", "prefill"), ("sglang-decode.log", "sglang-decode")):
        plain = tmp_path / name
        plain.write_text("hello\n")
        assert read(PlainFileSource(plain)).records.select("host", "unit").row(0) == ("local", unit)


_BATCH_LINE = (
    "Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.00, #running-req: 0, "
    "#queue-req: 0, #bootstrap-req: 0, #inflight-req: 0, input throughput (token/s): 0.00"
)
_UCX_LINE = "[{:.6f}] [b200-07:4242:0]    ucp_worker.c:1783 UCX  ERROR transport failed"
_T0 = 1_795_946_400  # 2026-11-29 10:00:00 UTC


def _zoned_log(lines: int, offsets_h: dict[int, float]) -> tuple[bytes, dict[int, int]]:
    """A prefill log of a host in UTC+8: `lines` SGLang lines 2 s apart (zone-less local time, a
    traceback after each 50th), and after line k of `offsets_h` a UCX line stamped in UTC as a host
    in UTC+offset would stamp it, half a second later. Also the true UTC us of each SGLang line, by
    byte offset."""
    from datetime import UTC, datetime, timedelta

    out, truth, at = [], {}, 0
    for k in range(lines):
        t = datetime.fromtimestamp(_T0 + 2 * k, UTC)
        text = [f"[{t + timedelta(hours=8):%Y-%m-%d %H:%M:%S} TP0] {_BATCH_LINE}"]
        truth[at] = (_T0 + 2 * k) * 1_000_000
        if k % 50 == 49:
            text += ["Traceback (most recent call last):", '  File "x.py", line 1', "RuntimeError: boom"]
        if k in offsets_h:
            text.append(_UCX_LINE.format(_T0 + 2 * k + 0.5 - (offsets_h[k] - 8) * 3600))
        for line in text:
            out.append(line.encode() + b"\n")
            at += len(out[-1])
    return b"".join(out), truth


def test_plain_utc_stamped_lines_settle_the_zone_once_per_file(tmp_path: Path) -> None:
    """Issue 28, item 5: a host in UTC+8 whose SGLang prefixes carry no zone; a few UCX lines near
    the file's start are stamped in epoch seconds. They settle the offset from the file's head, once,
    before any batch: one ingest, small batches, and an ingest resumed after the file grew (its
    first new batch far from the UCX lines) store the same rows, at their true UTC times. --tz wins."""
    from pdforensics.catalog import load_catalog
    from pdforensics.ingest import ingest

    text, truth = _zoned_log(3000, {10: 8, 20: 8, 30: 8})
    cut = text.index(b"\n", len(text) * 5 // 6) + 1  # more than the 2,000 lines a resume re-reads
    whole = tmp_path / "whole" / "b200-07-sglang-dsv4-prefill.log"
    grown = tmp_path / "grown" / "b200-07-sglang-dsv4-prefill.log"
    for p in (whole, grown):
        p.parent.mkdir()
    whole.write_bytes(text)
    grown.write_bytes(text[:cut])
    cat = load_catalog()

    def run(db: str, path: Path, batch_size: int = 100_000, chunk: int = 16 << 20, tz: str | None = None):  # type: ignore[no-untyped-def]
        return ingest(tmp_path / db, [PlainFileSource(path, chunk_bytes=chunk)], Selection(), cat, tz=tz,
                      batch_size=batch_size, views=False)  # fmt: skip

    one = run("one.duckdb", whole)
    assert one.source_stats[0].zone == (
        "UTC+08:00, inferred from its UTC-stamped lines (UCX's [epoch]) and the zone-less times beside them (6 pairs)"
    )
    rows = all_lines(tmp_path / "one.duckdb")
    own = rows.filter(pl.col("message").str.starts_with("[2026"))
    assert dict(zip(own["seq"], own["ts_us"], strict=True)) == truth
    run("batches.duckdb", whole, batch_size=97, chunk=4096)
    first = run("grown.duckdb", grown)
    with open(grown, "ab") as f:
        f.write(text[cut:])
    again = run("grown.duckdb", grown, batch_size=500)
    assert first.stored + again.stored == one.stored and again.stored < one.stored // 5
    for db in ("batches.duckdb", "grown.duckdb"):
        got = all_lines(tmp_path / db)
        assert got.drop("source").equals(rows.drop("source")), db
    told = run("tz.duckdb", whole, tz="UTC")
    assert told.source_stats[0].zone == "UTC, from --tz"
    utc = all_lines(tmp_path / "tz.duckdb").filter(pl.col("message").str.starts_with("[2026"))
    assert (utc["ts_us"] - own["ts_us"]).unique().to_list() == [8 * 3600 * 1_000_000]


def test_plain_utc_stamped_lines_that_disagree_settle_nothing_and_say_so(tmp_path: Path) -> None:
    """Pairs that round to different offsets (+08:00 twice, +09:00 twice) are not voted on: the
    file is read as without them (this machine's zone) and the ingest summary says why. A file
    whose own prefixes pair UTC and zone-less times (CRI's) leaves it to them."""
    from pdforensics.catalog import load_catalog
    from pdforensics.ingest import ingest
    from pdforensics.parse import LOCAL_TZ, ParseOptions, file_zone, records_of
    from pdforensics.render import source_notes

    text, _ = _zoned_log(200, {10: 8, 20: 9})
    log = tmp_path / "b200-07-sglang-dsv4-prefill.log"
    log.write_bytes(text)
    cat = load_catalog()
    summary = ingest(tmp_path / "a.duckdb", [PlainFileSource(log)], Selection(), cat, views=False)
    zone = summary.source_stats[0].zone
    assert zone == (
        f"{LOCAL_TZ}, this machine's zone: its UTC-stamped lines (UCX's [epoch]) and the zone-less times "
        "beside them disagree on its offset (+08:00 from 2 pairs, +09:00 from 2 pairs), so none was "
        "inferred: pass --tz"
    )
    assert [n for n in source_notes(summary) if n.startswith(f"zone-less times read as {zone}: ")]
    ingest(tmp_path / "local.duckdb", [PlainFileSource(log)], Selection(), cat, tz=LOCAL_TZ, views=False)
    assert all_lines(tmp_path / "a.duckdb")["ts_us"].equals(all_lines(tmp_path / "local.duckdb")["ts_us"])
    cri = [
        f"2026-11-29T02:00:0{k}.000000000Z stdout F [2026-11-29 10:00:0{k} TP0] {_BATCH_LINE}"
        for k in range(3)
    ]
    cri.insert(1, "2026-11-29T02:00:00.600000000Z stdout F " + _UCX_LINE.format(_T0 + 3600.5))
    assert file_zone(records_of(cri), ParseOptions(catalog=cat)) is None  # CRI's own pairs: +08:00


def test_plain_ignores_unit_globs(tmp_path: Path) -> None:
    path = tmp_path / "prefill.log"
    path.write_text("a\nb\n")
    assert read(PlainFileSource(path), Selection(units=("sglang*",))).records.height == 2


def test_plain_real_logs(real_logs_dir: Path) -> None:
    for path in sorted(real_logs_dir.glob("*.log")):
        data = path.read_bytes()
        got = read(PlainFileSource(path)).records
        assert got.height == data.count(b"\n") + (not data.endswith(b"\n")), path.name
        assert got["message"].to_list() == data.decode().splitlines(), path.name


def test_unreadable_file() -> None:
    d = Path(tempfile.mkdtemp(prefix="pdf-perm-"))  # tmp_path's parents are closed to other users
    try:
        d.chmod(0o755)
        (d / "ok.log").write_text("fine\n")
        (d / "locked.log").write_text("secret\n")
        (d / "locked.log").chmod(0)

        def probe() -> str:
            open_file_source(d / "ok.log")  # control: a readable file opens for this user
            open_file_source(d / "locked.log")
            return "no error"

        assert as_unprivileged(probe) == f"SourceError: {d / 'locked.log'}: permission denied"
    finally:
        shutil.rmtree(d)


# -- detection ---------------------------------------------------------------------------------------


def test_detect_each_format(make_journal, tmp_path: Path) -> None:
    (tmp_path / "a.export").write_bytes(QUIRKS)
    (tmp_path / "b").write_text(jline(T0, "x") + "\n")
    (tmp_path / "c.log").write_text("[2026-11-29 10:00:00] hello\n")
    (tmp_path / "d.log").write_bytes(b"")
    journal = make_journal(QUIRKS, "e.journal")
    assert isinstance(open_file_source(tmp_path / "a.export"), ExportFileSource)
    assert isinstance(open_file_source(gz(tmp_path / "a.export")), ExportFileSource)
    assert isinstance(open_file_source(tmp_path / "b"), JsonLinesSource)
    assert isinstance(open_file_source(gz(tmp_path / "b")), JsonLinesSource)
    assert isinstance(open_file_source(tmp_path / "c.log", host="h", unit="u"), PlainFileSource)
    assert isinstance(open_file_source(tmp_path / "d.log"), PlainFileSource)
    src = open_file_source(journal)
    assert isinstance(src, JournalSource) and src.kind == "files"


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b'{"__CURSOR":"s=1","MESSAGE":"x"}\n', "json"),
        (b'\xef\xbb\xbf  {"MESSAGE":"x","__REALTIME_TIMESTAMP":"1"}', "json"),
        (b'{"__REALTIME_TIMESTAMP":"1","MESSAGE":"cut by the head lim', "json"),
        (b'{"level": "info", "msg": "a JSON app log"}\n', "plain"),
        (b"_BOOT_ID=x\n__REALTIME_TIMESTAMP=1\nMESSAGE=x\n\n", "export"),
        (b"__CURSOR=s=1\n", "export"),
        (b"[2026-11-29 10:00:00] __REALTIME_TIMESTAMP=1 in a log line\n", "plain"),
        (b"", "plain"),
    ],
)
def test_sniff(head: bytes, kind: str) -> None:
    assert sniff(head) == kind


def test_detect_compressed_journal_file(make_journal) -> None:
    with pytest.raises(SourceError, match="compressed journal file"):
        open_file_source(gz(make_journal(QUIRKS)))


def test_detect_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        open_file_source(tmp_path / "missing.log")
    with pytest.raises(SourceError, match="--directory"):
        open_file_source(tmp_path)
    (tmp_path / "random.bin").write_bytes(random.Random(2).randbytes(4096))
    with pytest.raises(SourceError, match="not a text log"):
        open_file_source(tmp_path / "random.bin")
