"""The direct journal file reader (pdforensics/sources/journalfile.py) against `journalctl -o export`.

Entry for entry, field for field (the fields the reader produces: the cursor and ENTRY_FIELDS, in
the same order), on real files made by systemd-journal-remote from every fixture: compact and not,
keyed hash and not, with zstd-compressed fields, several boots, several seqnum ids. On damaged
copies (truncated at many offsets, bit flips, zeroed pages, damaged compressed fields) it either
refuses the file (`Unreadable`: python-systemd reads it) or reads exactly what journalctl prints.
"""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import polars as pl
import pytest
from conftest import JOURNAL_REMOTE, have_journalctl
from test_corrupt_journals import _with_long_messages, damaged_variants, layout

from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection, Window
from pdforensics.sources._records import ENTRY_FIELDS
from pdforensics.sources.journal import JournalSource, python_systemd_available
from pdforensics.sources.journalfile import (
    ENV_READER,
    INCOMPATIBLE_COMPACT,
    INCOMPATIBLE_KEYED_HASH,
    INCOMPATIBLE_ZSTD,
    JournalFile,
    Unreadable,
)

pytestmark = [
    pytest.mark.skipif(not have_journalctl(), reason="journalctl not installed"),
    pytest.mark.skipif(not JOURNAL_REMOTE.exists(), reason="systemd-journal-remote not installed"),
]
FIXTURES = sorted(p.parent.name for p in fixtures_dir().glob("*/journal.export"))


def make(export: bytes, out: Path, compact: bool = True, keyed: bool = True) -> Path:
    env = os.environ | {
        "SYSTEMD_JOURNAL_COMPACT": "1" if compact else "0",
        "SYSTEMD_JOURNAL_KEYED_HASH": "1" if keyed else "0",
    }
    subprocess.run(
        [str(JOURNAL_REMOTE), "-o", str(out), "-"], input=export, check=True, capture_output=True, env=env
    )
    return out


def flags(path: Path) -> int:
    return struct.unpack_from("<I", path.read_bytes()[:16], 12)[0]


def export_rows(path: Path) -> tuple[int, list[dict[str, str | None]]]:
    """(exit status, entries) of `journalctl --file F -o export`: the cursor and each ENTRY_FIELD
    (a repeated MESSAGE joined with "\\n", another repeated field's last value), as the reader gives."""
    proc = subprocess.run(
        ["journalctl", "--file", str(path), "-o", "export", "--all"], capture_output=True, timeout=60
    )
    data, pos, rows = proc.stdout, 0, []
    entry: dict[str, list[bytes]] = {}
    while pos < len(data):
        nl = data.find(b"\n", pos)
        nl = len(data) if nl < 0 else nl
        line = data[pos:nl]
        if not line:  # the blank line ending an entry
            if entry:
                rows.append(_row(entry))
            entry, pos = {}, nl + 1
            continue
        if b"=" in line:
            name, _, value = line.partition(b"=")
            pos = nl + 1
        else:  # NAME\n<le64 size><bytes>\n: a binary or multi-line value
            name = line
            if nl + 9 > len(data):
                break
            (size,) = struct.unpack_from("<Q", data, nl + 1)
            value = data[nl + 9 : nl + 9 + size]
            pos = nl + 9 + size + 1
        entry.setdefault(name.decode(), []).append(value)
    if entry and pos >= len(data):
        rows.append(_row(entry))
    return proc.returncode, rows


def _row(entry: dict[str, list[bytes]]) -> dict[str, str | None]:
    out: dict[str, str | None] = {"__CURSOR": entry["__CURSOR"][0].decode()}
    for name in ENTRY_FIELDS:
        values = entry.get(name)
        if values is None:
            out[name] = None
        else:
            raw = b"\n".join(values) if name == "MESSAGE" else values[-1]
            out[name] = raw.decode("utf-8", "replace")
    return out


def direct_rows(path: Path) -> list[dict[str, str | None]]:
    with JournalFile(path) as jf:
        blocks = [jf.frame(blk) for blk in jf.blocks(0, jf.n_entries, 64)]  # several blocks
        return pl.concat(blocks).select("__CURSOR", *ENTRY_FIELDS).to_dicts() if blocks else []


def assert_same_as_journalctl(path: Path) -> int:
    rc, expected = export_rows(path)
    assert rc == 0
    got = direct_rows(path)
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, f"{path.name} entry {i}"
    return len(got)


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_equals_journalctl_export(tmp_path: Path, name: str) -> None:
    export = (fixtures_dir() / name / "journal.export").read_bytes()
    path = make(export, tmp_path / f"{name}.journal")
    assert flags(path) & INCOMPATIBLE_COMPACT  # journal-remote 252's default
    assert assert_same_as_journalctl(path) > 0


@pytest.mark.parametrize(("compact", "keyed"), [(True, True), (False, True), (False, False), (True, False)])
def test_compact_and_regular_keyed_and_jenkins_with_compressed_fields(
    tmp_path: Path, compact: bool, keyed: bool
) -> None:
    export = _with_long_messages(
        (fixtures_dir() / "decode_restart_watchdog_fires" / "journal.export").read_bytes(), 2
    )
    path = make(export, tmp_path / "big.journal", compact, keyed)
    f = flags(path)
    assert bool(f & INCOMPATIBLE_COMPACT) == compact and bool(f & INCOMPATIBLE_KEYED_HASH) == keyed
    assert f & INCOMPATIBLE_ZSTD
    with JournalFile(path) as jf:
        assert len(jf.cols.packed_obj) > 20, "no compressed MESSAGE was read"
    assert_same_as_journalctl(path)


def test_large_compressed_fields_other_than_message_and_repeated_fields(tmp_path: Path) -> None:
    """A compressed _SYSTEMD_UNIT and SYSLOG_IDENTIFIER, a repeated MESSAGE and a repeated PRIORITY,
    a field with a newline (binary export form), invalid UTF-8."""
    long_unit = "sglang-" + "x" * 900 + ".service"
    entries = []
    for i in range(40):
        e = [
            f"__REALTIME_TIMESTAMP={1_700_000_000_000_000 + i}",
            f"__MONOTONIC_TIMESTAMP={1000 + i}",
            "_BOOT_ID=" + ("a" * 32 if i < 20 else "b" * 32),
            "_HOSTNAME=node1",
            f"_SYSTEMD_UNIT={long_unit if i % 3 == 0 else 'sglang-prefill.service'}",
            "SYSLOG_IDENTIFIER=" + "y" * 700,
            f"MESSAGE=line {i}",
        ]
        if i % 5 == 0:
            e += [f"MESSAGE=second {i}", "PRIORITY=3", "PRIORITY=6"]
        entries.append("\n".join(e).encode())
    binary = b"MESSAGE\n" + struct.pack("<Q", 9) + b"two\nli\xffes"
    entries.append(
        b"__REALTIME_TIMESTAMP=1700000000000999\n__MONOTONIC_TIMESTAMP=99\n_BOOT_ID="
        + b"b" * 32
        + b"\n"
        + binary
    )
    path = make(b"\n\n".join(entries) + b"\n\n", tmp_path / "odd.journal")
    assert assert_same_as_journalctl(path) == 41
    rows = direct_rows(path)
    assert rows[0]["MESSAGE"] == "line 0\nsecond 0" and rows[0]["PRIORITY"] == "6"
    assert rows[0]["_SYSTEMD_UNIT"] == long_unit
    assert rows[-1]["MESSAGE"] == "two\nli\ufffdes"


def test_several_files_seqnum_ids_and_boots_through_the_source(tmp_path: Path) -> None:
    """A directory of journals from several journal-remote runs (each its own seqnum id, the
    fixtures with several boots): the direct reader's records equal python-systemd's."""
    if not python_systemd_available():
        pytest.skip("python-systemd not installed")
    d = tmp_path / "remote"
    d.mkdir()
    for name in (
        "decode_restart_watchdog_fires",
        "multihost_skew",
        "two_incidents",
        "prefill_dies_no_restart",
    ):
        make(
            (fixtures_dir() / name / "journal.export").read_bytes(),
            d / f"{name}.journal",
            compact=name != "two_incidents",
        )
    boots = set()
    for p in d.iterdir():
        boots |= {r["_BOOT_ID"] for r in direct_rows(p)}
    assert len(boots) >= 3
    for units in (("*",), ("sglang*",)):
        for window in (Window(), Window(since_us=1, until_us=None)):
            sel = Selection(window=window, units=units)
            direct = _records(JournalSource("directory", [d]), sel)
            os.environ[ENV_READER] = "python-systemd"
            try:
                slow = _records(JournalSource("directory", [d]), sel)
            finally:
                del os.environ[ENV_READER]
            assert direct.height and direct.equals(slow), units


def _records(src: JournalSource, sel: Selection) -> pl.DataFrame:
    batches = list(src.batches(sel))
    if os.environ.get(ENV_READER) != "python-systemd":
        assert src.direct.files == len(src.files) and not src.direct.fallbacks
    return pl.concat([b.records for b in batches]).sort("source_key", "seq")


def test_unit_selection_prefilters_before_messages(tmp_path: Path) -> None:
    """--unit over a journal where the unit is a small share: the same records, the rest counted."""
    if not python_systemd_available():
        pytest.skip("python-systemd not installed")
    path = make((fixtures_dir() / "healthy" / "journal.export").read_bytes(), tmp_path / "h.journal")
    sel = Selection(units=("sglang-dsv4-decode*",))
    src = JournalSource("files", [path])
    batches = list(src.batches(sel))
    kept = sum(b.records.height for b in batches)
    skipped = sum(b.skipped for b in batches)
    with JournalFile(path) as jf:
        total = jf.n_entries
    assert 0 < kept < total and kept + skipped == total
    os.environ[ENV_READER] = "python-systemd"
    try:
        slow = list(JournalSource("files", [path]).batches(sel))
    finally:
        del os.environ[ENV_READER]
    assert pl.concat([b.records for b in batches]).equals(pl.concat([b.records for b in slow]))
    assert skipped == sum(b.skipped for b in slow)


def test_damaged_files_are_refused_or_read_exactly(tmp_path: Path) -> None:
    """Never an exception but Unreadable; a file it reads equals journalctl's export of it."""
    export = _with_long_messages(
        (fixtures_dir() / "decode_restart_watchdog_fires" / "journal.export").read_bytes()
    )
    src = make(export, tmp_path / "src.journal").read_bytes()
    small = make(
        (fixtures_dir() / "healthy" / "journal.export").read_bytes(), tmp_path / "s.journal"
    ).read_bytes()
    refused, read = 0, 0
    for seed, base in enumerate((small, src)):
        variants = damaged_variants(base, seed)
        for k in range(1, 40):  # and more cut points than the corpus has
            variants[f"cut-more{k}"] = base[: len(base) * k // 40]
        for name, data in variants.items():
            path = tmp_path / f"{seed}-{name}.journal"
            path.write_bytes(data)
            try:
                got = direct_rows(path)
            except Unreadable:
                refused += 1
                continue
            read += 1
            rc, expected = export_rows(path)
            assert got == expected, f"{path.name}: read differently from journalctl (rc {rc})"
    assert refused and read  # both outcomes happen on this corpus (else the test proves nothing)


def _both_readers(source: list[Path], sel: Selection) -> tuple[JournalSource, list, list]:
    fast_src = JournalSource("files", source)
    fast = list(fast_src.batches(sel))
    os.environ[ENV_READER] = "python-systemd"
    try:
        slow = list(JournalSource("files", source).batches(sel))
    finally:
        del os.environ[ENV_READER]
    return fast_src, fast, slow


def _stored(batches: list) -> pl.DataFrame:
    return pl.concat([b.records for b in batches])


def test_a_window_inside_the_file_reads_the_same_entries(tmp_path: Path) -> None:
    export = _with_long_messages(
        (fixtures_dir() / "decode_restart_watchdog_fires" / "journal.export").read_bytes(), 2
    )
    path = make(export, tmp_path / "w.journal")
    with JournalFile(path) as jf:
        rt = jf.cols.realtime
        since, until = int(rt[len(rt) // 3]), int(rt[2 * len(rt) // 3])
    sel = Selection(window=Window(since_us=since, until_us=until), units=("*",))
    src, fast, slow = _both_readers([path], sel)
    assert src.direct.files == 1
    assert 0 < _stored(fast).height < len(rt) and _stored(fast).equals(_stored(slow))


def test_a_block_it_cannot_resolve_is_read_on_by_python_systemd(tmp_path: Path) -> None:
    """A MESSAGE repeated over a plain and a compressed object (order not kept by the index): the
    direct reader hands over after its last entry; nothing lost, nothing twice, the reason counted."""
    entries = [
        f"__REALTIME_TIMESTAMP={1_700_000_000_000_000 + i}\n__MONOTONIC_TIMESTAMP={i + 1}\n_BOOT_ID={'c' * 32}\n"
        f"_SYSTEMD_UNIT=sglang-x.service\nMESSAGE=line {i}" + (f"\nMESSAGE={'z' * 900}" if i == 150 else "")
        for i in range(200)
    ]
    path = make(("\n\n".join(entries) + "\n\n").encode(), tmp_path / "r.journal")
    sel = Selection(units=("*",))
    src, fast, slow = _both_readers([path], sel)
    assert src.direct.fallbacks == {
        "failed while reading (Unreadable: a field repeated in compressed objects)": 1
    }
    got, want = _stored(fast), _stored(slow)
    assert got.height == 200 and got.equals(want)


def test_a_damaged_file_falls_back_with_its_reason_counted(tmp_path: Path) -> None:
    good = make((fixtures_dir() / "healthy" / "journal.export").read_bytes(), tmp_path / "g.journal")
    cut = tmp_path / "cut.journal"
    data = good.read_bytes()
    lay = layout(data)
    cut.write_bytes(data[: (lay.start + lay.end) // 2])  # inside the objects
    src = JournalSource("files", [good, cut])
    list(src.batches(Selection(units=("*",))))
    assert src.direct.files == 1 and sum(src.direct.fallbacks.values()) == 1, src.direct


def test_unit_selection_sees_a_compressed_unit_field_and_journald_lines(tmp_path: Path) -> None:
    """The unit prefilter leaves other units' compressed MESSAGEs compressed, but decompresses a
    compressed unit field (found on its FIELD chain) and journald's lines naming a unit."""
    long_unit = "sglang-" + "q" * 900 + ".service"
    entries = []
    for i in range(120):
        unit = long_unit if i % 4 == 0 else ("other.service" if i % 4 == 1 else "sglang-a.service")
        entries.append(
            f"__REALTIME_TIMESTAMP={1_700_000_000_000_000 + i}\n__MONOTONIC_TIMESTAMP={i + 1}\n"
            f"_BOOT_ID={'d' * 32}\n_SYSTEMD_UNIT={unit}\nMESSAGE=m{i} " + "w" * (700 if i % 2 else 10)
        )
    entries.append(
        f"__REALTIME_TIMESTAMP={1_700_000_000_000_500}\n__MONOTONIC_TIMESTAMP=600\n_BOOT_ID={'d' * 32}\n"
        f"_SYSTEMD_UNIT=systemd-journald.service\nMESSAGE=Suppressed 5 messages from {long_unit} " + "p" * 600
    )
    path = make(("\n\n".join(entries) + "\n\n").encode(), tmp_path / "u.journal")
    with JournalFile(path) as jf:
        assert jf.unit_packed is not None and jf.unit_packed.any() and not jf.unit_packed.all()
    for units in ((long_unit,), ("sglang-a*",), ("other*",)):
        src, fast, slow = _both_readers([path], Selection(units=units))
        assert src.direct.files == 1 and not src.direct.fallbacks
        got = _stored(fast)
        assert got.height and got.equals(_stored(slow)), units
        assert sum(b.skipped for b in fast) == sum(b.skipped for b in slow)
    assert (
        _stored(_both_readers([path], Selection(units=(long_unit,)))[1])["message"]
        .str.starts_with("Suppressed")
        .any()
    )


def test_a_file_wholly_outside_the_window_is_not_indexed(tmp_path: Path) -> None:
    entries = [
        e for e in (fixtures_dir() / "healthy" / "journal.export").read_bytes().split(b"\n\n") if e.strip()
    ]
    half = len(entries) // 2
    a = make(b"\n\n".join(entries[:half]) + b"\n\n", tmp_path / "a.journal")
    b = make(b"\n\n".join(entries[half:]) + b"\n\n", tmp_path / "b.journal")
    with JournalFile(a) as ja, JournalFile(b) as jb:
        assert int(ja.cols.realtime[-1]) <= int(jb.cols.realtime[0])
        since = int(jb.cols.realtime[jb.n_entries // 2])
        in_b, n_b = int((jb.cols.realtime >= since).sum()), jb.n_entries
    src, fast, slow = _both_readers([a, b], Selection(window=Window(since_us=since), units=("*",)))
    assert src.direct.files == 2 and src.direct.entries < n_b  # a: header only; b: from since
    assert _stored(fast).height == in_b and _stored(fast).equals(_stored(slow))


def _recompressed(path: Path, algorithm: str) -> int:
    """Rewrite the file's large MESSAGE objects (written uncompressed) compressed in place, as
    systemd stores them (xz: an .xz stream; lz4: le64 size + an LZ4 block), flags and header bit
    set: journal-remote 252 writes zstd only. Returns how many objects were rewritten."""
    import lzma

    import lz4.block

    data = bytearray(path.read_bytes())
    (header_size,) = struct.unpack_from("<Q", data, 88)
    (tail,) = struct.unpack_from("<Q", data, 136)
    head = 72 if flags(path) & INCOMPATIBLE_COMPACT else 64
    bit, flag = {"xz": (1, 1), "lz4": (2, 2)}[algorithm]
    p, done = header_size, 0
    while p <= tail:
        kind, (size,) = data[p], struct.unpack_from("<Q", data, p + 8)
        payload = bytes(data[p + head : p + size])
        if kind == 1 and data[p + 1] == 0 and len(payload) > 400 and payload.startswith(b"MESSAGE="):
            if algorithm == "xz":
                packed = lzma.compress(payload, format=lzma.FORMAT_XZ, check=lzma.CHECK_NONE)
            else:
                packed = struct.pack("<Q", len(payload)) + lz4.block.compress(payload, store_size=False)
            if len(packed) < len(payload):
                data[p + head : p + head + len(packed)] = packed
                data[p + 1] = flag
                struct.pack_into("<Q", data, p + 8, head + len(packed))
                done += 1
        p += (size + 7) & ~7
    struct.pack_into("<I", data, 12, struct.unpack_from("<I", data, 12)[0] | bit)
    path.write_bytes(bytes(data))
    return done


@pytest.mark.parametrize("algorithm", ["xz", "lz4"])
@pytest.mark.parametrize("compact", [True, False])
def test_xz_and_lz4_fields_equal_journalctl(tmp_path: Path, algorithm: str, compact: bool) -> None:
    export = _with_long_messages((fixtures_dir() / "healthy" / "journal.export").read_bytes(), 3)
    path = tmp_path / "x.journal"
    env = os.environ | {"SYSTEMD_JOURNAL_COMPACT": "1" if compact else "0"}
    cmd = [str(JOURNAL_REMOTE), "--compress=no", "-o", str(path), "-"]
    subprocess.run(cmd, input=export, check=True, capture_output=True, env=env)
    assert _recompressed(path, algorithm) > 20
    with JournalFile(path) as jf:
        assert len(jf.cols.packed_obj) > 20
    assert assert_same_as_journalctl(path) > 0


def _small_share_journal(tmp_path: Path) -> tuple[Path, int]:
    """A journal where sglang is a small share, named in every field a unit glob is matched
    against, and journald's lines (one naming an sglang unit); (path, entries naming sglang or
    journald's: what a `sglang*` selection must index)."""
    named = 0
    entries = []
    for i in range(3000):
        fields = {"_SYSTEMD_UNIT": "other.service", "_PID": "42"}
        if i % 50 == 0:
            fields = {"_SYSTEMD_UNIT": "sglang-p.service", "_PID": "7"}
        elif i % 50 == 1:  # pid 1 about an sglang unit
            fields = {"_SYSTEMD_UNIT": "init.scope", "_PID": "1", "UNIT": "sglang-d.service"}
        elif i % 50 == 2:
            fields = {"_SYSTEMD_USER_UNIT": "sglang-user.service", "_PID": "8"}
        elif i % 50 == 3:
            fields = {"_SYSTEMD_UNIT": "systemd-coredump.service", "COREDUMP_UNIT": "sglang-p.service"}
        elif i % 50 == 4:
            fields = {"_SYSTEMD_UNIT": "systemd-journald.service", "_PID": "3"}
            fields["MESSAGE"] = (
                "Suppressed 9 messages from sglang-p.service" if i % 100 == 4 else "Journal started"
            )
        elif i % 50 == 5:  # pid 1 about another unit
            fields = {"_SYSTEMD_UNIT": "init.scope", "_PID": "1", "UNIT": "cron.service"}
        named += i % 50 < 5
        fields.setdefault("MESSAGE", f"m{i} " + "w" * (700 if i % 3 else 5))  # some compressed
        entries.append(
            f"__REALTIME_TIMESTAMP={1_700_000_000_000_000 + i}\n__MONOTONIC_TIMESTAMP={i + 1}\n"
            f"_BOOT_ID={'e' * 32}\n" + "\n".join(f"{k}={v}" for k, v in fields.items())
        )
    return make(("\n\n".join(entries) + "\n\n").encode(), tmp_path / "mixed.journal"), named


def test_a_unit_selection_indexes_only_the_entries_naming_its_units(tmp_path: Path) -> None:
    """Like `journalctl -u`: the unit fields' DATA objects list the entries to index; the rest keep
    their header only, and are counted as skipped exactly as when every entry is indexed."""
    if not python_systemd_available():
        pytest.skip("python-systemd not installed")
    path, named = _small_share_journal(tmp_path)
    sel = Selection(units=("sglang*",))
    with JournalFile(path, "^(?:sglang.*)$") as jf:
        assert jf.indexed is not None and int(jf.indexed.sum()) == named < jf.n_entries
    src, fast, slow = _both_readers([path], sel)
    assert src.direct.files == 1 and not src.direct.fallbacks
    got = _stored(fast)
    assert got.height and got.equals(_stored(slow))
    assert got["message"].str.starts_with("Suppressed").sum() == 30  # journald's lines naming sglang
    assert sum(b.skipped for b in fast) == sum(b.skipped for b in slow) == 3000 - got.height
    every, _, _ = _both_readers([path], Selection(units=("*",)))  # no selection: every entry indexed
    assert every.direct.files == 1
    small = list(JournalSource("files", [path]).batches(sel, 7))  # many spans of 7 indexed entries
    assert _stored(small).equals(got) and sum(b.skipped for b in small) == 3000 - got.height


def test_spans_hold_a_block_of_indexed_entries_and_cover_every_row() -> None:
    from types import SimpleNamespace

    import numpy as np

    from pdforensics.sources.journalfile import MAX_SPAN_BLOCKS, _spans

    rng = np.random.default_rng(3)
    for indexed in (None, rng.random(5000) < 0.02, np.zeros(5000, bool), np.ones(5000, bool)):
        jf = SimpleNamespace(indexed=indexed)
        for start, stop, block in ((0, 5000, 16), (123, 4000, 5), (7, 7, 3)):
            spans = list(_spans(jf, start, stop, block))  # type: ignore[arg-type]
            assert [a for a, _ in spans[1:]] == [b for _, b in spans[:-1]]  # contiguous
            assert (spans[0][0], spans[-1][1]) == (start, stop) if spans else start == stop
            for a, b in spans:
                held = (b - a) if indexed is None else int(indexed[a:b].sum())
                assert 0 < b - a <= block * (1 if indexed is None else MAX_SPAN_BLOCKS) and held <= block


def test_a_unit_selection_on_a_journal_without_unit_fields_selects_nothing(tmp_path: Path) -> None:
    """No entry names a unit (the kernel's, say): nothing is indexed, every entry is skipped."""
    entries = [
        f"__REALTIME_TIMESTAMP={1_700_000_000_000_000 + i}\n__MONOTONIC_TIMESTAMP={i + 1}\n"
        f"_BOOT_ID={'f' * 32}\n_TRANSPORT=kernel\nMESSAGE=kernel line {i}"
        for i in range(50)
    ]
    path = make(("\n\n".join(entries) + "\n\n").encode(), tmp_path / "k.journal")
    with JournalFile(path, "^(?:sglang.*)$") as jf:
        assert jf.indexed is not None and not jf.indexed.any()
    src, fast, slow = _both_readers([path], Selection(units=("sglang*",)))
    assert src.direct.files == 1 and not src.direct.fallbacks
    assert sum(b.records.height for b in fast) == 0 and sum(b.skipped for b in fast) == 50
    assert sum(b.skipped for b in slow) == 50


def test_a_unit_chain_it_cannot_trust_indexes_every_entry(tmp_path: Path) -> None:
    """A DATA object of a unit field whose entry count exceeds its entry array chain: the selection's
    index is not trusted, every entry is indexed, and the records are the same."""
    if not python_systemd_available():
        pytest.skip("python-systemd not installed")
    path, _ = _small_share_journal(tmp_path)
    with JournalFile(path) as jf:
        unit_data = sorted(jf._field_chains({b"_SYSTEMD_UNIT"}) or ())
        target = next(
            d for d in unit_data if bytes(jf._mm[d + 72 : d + 72 + 20]).startswith(b"_SYSTEMD_UNIT=sglang")
        )
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack_from("<Q", data, target + 56)
    struct.pack_into("<Q", data, target + 56, n + 5)  # the chain lists n: 5 entries cannot be found
    path.write_bytes(bytes(data))
    with JournalFile(path, "^(?:sglang.*)$") as jf:
        assert jf.indexed is None
    src, fast, slow = _both_readers([path], Selection(units=("sglang*",)))
    assert src.direct.files == 1 and _stored(fast).height and _stored(fast).equals(_stored(slow))
