"""JournalSource on real .journal files (systemd-journal-remote): python-systemd and journalctl readers."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import struct
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from pdforensics.errors import SourceError
from pdforensics.schema import RECORD_SCHEMA
from pdforensics.sources import RecordBatch, Selection, Window
from pdforensics.sources import journal as journal_mod
from pdforensics.sources._journal_child import _open as _open_reader
from pdforensics.sources._records import ENTRY_FIELDS, FIELDS
from pdforensics.sources.journal import JournalSource, python_systemd_available

T0 = 1_764_410_000_123_457  # not representable exactly as a float of seconds
BOOT = "0123456789abcdef0123456789abcdef"
INV_P = "11111111111111111111111111111111"
INV_D = "22222222222222222222222222222222"

needs_journalctl = pytest.mark.skipif(shutil.which("journalctl") is None, reason="journalctl not installed")
needs_python_systemd = pytest.mark.skipif(
    not python_systemd_available(), reason="python-systemd not installed"
)
READERS = [
    pytest.param(False, marks=needs_python_systemd, id="python-systemd"),
    pytest.param(True, marks=needs_journalctl, id="journalctl"),
]


def entry(
    ts: int | None, message: str | bytes | list[str | bytes], **fields: str | bytes | list[str | bytes]
) -> bytes:
    """One Journal Export Format entry (ts None: no timestamp); bytes values become binary fields."""
    out = (
        []
        if ts is None
        else [f"__REALTIME_TIMESTAMP={ts}\n__MONOTONIC_TIMESTAMP={ts % 10**9 + 1}\n".encode()]
    )
    defaults = {"_BOOT_ID": BOOT, "_HOSTNAME": "gpu-1", "PRIORITY": "6", "SYSLOG_IDENTIFIER": "python3"}
    for name, value in {**defaults, **fields, "MESSAGE": message}.items():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, bytes):
                out.append(name.encode() + b"\n" + struct.pack("<Q", len(v)) + v + b"\n")
            else:
                out.append(f"{name}={v}\n".encode())
    return b"".join(out) + b"\n"


def svc(unit: str, pid: str = "4242", inv: str = INV_P) -> dict[str, str]:
    return {"_SYSTEMD_UNIT": unit, "_PID": pid, "_SYSTEMD_INVOCATION_ID": inv}


PID1 = {"_SYSTEMD_UNIT": "init.scope", "_PID": "1", "SYSLOG_IDENTIFIER": "systemd"}
JOURNALD = {
    "_SYSTEMD_UNIT": "systemd-journald.service",
    "_PID": "300",
    "SYSLOG_IDENTIFIER": "systemd-journald",
}

# One entry per quirk, in time order (systemd-journal-remote needs that).
ENTRIES = [
    entry(T0, "[2026-11-29 10:00:00 TP0] Prefill batch, #new-seq: 1", **svc("sglang-prefill.service")),
    entry(T0 + 1, b"\x1b[31mred\x1b[0m \xff\xfe not utf-8", **svc("sglang-prefill.service")),
    entry(T0 + 2, ["first part", "second part"], **svc("sglang-decode.service", inv=INV_D), FOO=["a", "b"]),
    entry(
        T0 + 3, "Started sglang-decode.service.", **PID1, UNIT="sglang-decode.service", INVOCATION_ID=INV_D
    ),
    entry(T0 + 4, "Suppressed 1234 messages from sglang-x.service", **JOURNALD),
    entry(T0 + 5, "Suppressed 9 messages from sshd.service", **JOURNALD),
    entry(T0 + 6, "Accepted publickey for root", **svc("sshd.service", pid="77")),
    entry(T0 + 7, "Started sshd.service.", **PID1, UNIT="sshd.service"),
    entry(
        T0 + 8,
        "Process 4242 (python3) dumped core.",
        **svc("systemd-coredump@0.service", pid="99"),
        COREDUMP_UNIT="sglang-decode.service",
    ),
    entry(
        T0 + 9,
        "[2026-11-29 10:00:09] Receive: obj=GenerateReqInput(rid='r1', bootstrap_room=7)",
        **svc("sglang-router.service", pid="5"),
    ),
]
EXPORT = b"".join(ENTRIES)


@pytest.fixture
def journal(make_journal) -> Path:
    return make_journal(EXPORT)


def read(source, selection: Selection | None = None, batch_size: int = 100_000) -> RecordBatch:
    """All batches of a source merged into one, in the order read."""
    batches = list(source.batches(selection or Selection(units=("*",)), batch_size))
    return RecordBatch(
        pl.concat([b.records for b in batches]) if batches else pl.DataFrame(schema=RECORD_SCHEMA),
        pl.concat([b.rejects for b in batches]) if batches else RecordBatch().rejects,
        sum(b.skipped for b in batches),
        sum(b.null_messages for b in batches),
    )


def by_ts(batch: RecordBatch) -> dict[int, dict]:
    return {r["ts_us"]: r for r in batch.records.to_dicts()}


# -- the two readers ---------------------------------------------------------------------------------


@needs_python_systemd
@needs_journalctl
@pytest.mark.parametrize("units", [("*",), ("sglang*",), ("sshd*",)])
def test_python_systemd_and_journalctl_give_identical_records(journal: Path, units: tuple[str, ...]) -> None:
    fast = JournalSource("files", [journal])
    slow = JournalSource("files", [journal], force_journalctl=True)
    assert (fast.reader, slow.reader) == ("python-systemd", "journalctl-export")
    a, b = read(fast, Selection(units=units)), read(slow, Selection(units=units))
    assert a.records.height > 0
    assert a.records.schema == pl.Schema(RECORD_SCHEMA)
    assert a.records.equals(b.records)
    assert (
        (a.skipped, a.rejects.height) == (b.skipped, b.rejects.height) == (len(ENTRIES) - a.records.height, 0)
    )


@needs_python_systemd
@needs_journalctl
def test_readers_identical_on_a_larger_journal_with_small_batches(make_journal) -> None:
    units = ["sglang-prefill.service", "sglang-decode.service", "sshd.service"]
    text = b"".join(
        entry(T0 + i * 997, f"line {i} " + "x" * (i % 50), **svc(units[i % 3])) for i in range(3000)
    )
    path = make_journal(text)
    fast = read(JournalSource("files", [path]), Selection(), batch_size=700)
    slow = read(JournalSource("files", [path], force_journalctl=True), Selection(), batch_size=700)
    assert fast.records.height == 2000
    assert fast.records.equals(slow.records)
    assert fast.skipped == slow.skipped == 1000


def test_entry_fields_order_matches_unrolled_loop() -> None:
    # _journal_child.read_entries unpacks ENTRY_FIELDS into 15 names: a changed field list must fail loudly here.
    assert len(ENTRY_FIELDS) == 15
    assert set(ENTRY_FIELDS) == {f for f in FIELDS if not f.startswith("__")}


# -- quirks, each on both readers --------------------------------------------------------------------


@pytest.mark.parametrize("force", READERS)
def test_exact_integer_microseconds(make_journal, force: bool) -> None:
    # 2**53 + 1 µs (year 2255) is where a float of µs, let alone of seconds, loses the last digit.
    far = 2**53 + 1
    assert float(far) != far
    path = make_journal(EXPORT + entry(far, "far future", **svc("sglang-p.service")))
    got = read(JournalSource("files", [path], force_journalctl=force))
    assert got.records["ts_us"].to_list() == [T0 + i for i in range(len(ENTRIES))] + [far]
    assert got.records["ts_us"][0] == 1_764_410_000_123_457


@pytest.mark.parametrize("force", READERS)
def test_dedup_key_comes_from_the_cursor(journal: Path, force: bool) -> None:
    got = read(JournalSource("files", [journal], force_journalctl=force)).records
    first = got.row(0, named=True)
    parts = dict(p.split("=", 1) for p in first["cursor"].split(";"))
    assert first["source_key"] == parts["s"]
    assert first["seq"] == int(parts["i"], 16) == 1
    assert got["seq"].to_list() == list(range(1, len(ENTRIES) + 1))
    assert first["boot_id"] == BOOT and first["host"] == "gpu-1" and first["pid"] == 4242
    assert first["priority"] == 6 and first["syslog_identifier"] == "python3"
    assert first["source"] == f"journal:{journal.resolve()}"


@pytest.mark.parametrize("force", READERS)
def test_binary_message_non_utf8_and_ansi_colour(journal: Path, force: bool) -> None:
    msg = by_ts(read(JournalSource("files", [journal], force_journalctl=force)))[T0 + 1]["message"]
    assert msg == "\x1b[31mred\x1b[0m \ufffd\ufffd not utf-8"  # colour codes kept, bad bytes replaced


@pytest.mark.parametrize("force", READERS)
def test_repeated_fields_message_joined_scalars_last(make_journal, force: bool) -> None:
    text = entry(
        T0, ["first part", b"second \xff"], _SYSTEMD_UNIT=["x.service", "sglang-a.service"], _PID="5"
    )
    got = read(JournalSource("files", [make_journal(text)], force_journalctl=force), Selection())
    (row,) = got.records.to_dicts()
    assert row["message"] == "first part\nsecond \ufffd"
    assert row["unit"] == "sglang-a.service"  # last value, so the entry is selected by sglang*


@pytest.mark.parametrize("force", READERS)
def test_pid1_unit_lines_selected_and_attributed(journal: Path, force: bool) -> None:
    got = by_ts(
        read(JournalSource("files", [journal], force_journalctl=force), Selection(units=("sglang*",)))
    )
    started = got[T0 + 3]
    assert started["unit"] == "sglang-decode.service"
    assert started["invocation_id"] == INV_D  # the unit's invocation, not init.scope's
    assert started["pid"] == 1
    assert T0 + 7 not in got  # pid 1 about sshd: not selected


@pytest.mark.parametrize("force", READERS)
def test_journald_suppressed_line_selected_by_named_unit(journal: Path, force: bool) -> None:
    got = by_ts(
        read(JournalSource("files", [journal], force_journalctl=force), Selection(units=("sglang*",)))
    )
    assert got[T0 + 4]["unit"] == "systemd-journald.service"  # parse re-assigns it
    assert got[T0 + 4]["message"] == "Suppressed 1234 messages from sglang-x.service"
    assert T0 + 5 not in got  # names sshd


@pytest.mark.parametrize("force", READERS)
def test_coredump_of_a_selected_unit(journal: Path, force: bool) -> None:
    got = by_ts(
        read(JournalSource("files", [journal], force_journalctl=force), Selection(units=("sglang-d*",)))
    )
    assert got[T0 + 8]["unit"] == "sglang-decode.service"
    assert set(got) == {T0 + 2, T0 + 3, T0 + 8}


@pytest.mark.parametrize("force", READERS)
@pytest.mark.parametrize(
    ("units", "expected"),
    [
        (("*",), set(range(10))),
        (("sglang*",), {0, 1, 2, 3, 4, 8, 9}),
        (("sglang-prefill",), {0, 1}),  # no suffix: also matches .service, like journalctl -u
        (("sglang-[dp]*",), {0, 1, 2, 3, 8}),
        (("sglang-?outer.service", "sshd.service"), {5, 6, 7, 9}),
        (("nothing*",), set()),
    ],
)
def test_unit_globs(journal: Path, force: bool, units: tuple[str, ...], expected: set[int]) -> None:
    got = read(JournalSource("files", [journal], force_journalctl=force), Selection(units=units))
    assert {ts - T0 for ts in got.records["ts_us"]} == expected
    assert got.skipped == len(ENTRIES) - len(expected)


def _child_read(path: Path, selection: Selection, units: str | None) -> tuple[pl.DataFrame, int]:
    """What python-systemd in its child reads of `path` (restricted to `units` or not), selected
    as the source does: (records, entries the child returned)."""
    from pdforensics.sources._journal_child import BLOCK, IsolatedReader, Unit
    from pdforensics.sources._records import journal_records

    frames = [
        journal_mod._raw_frame(*ev.block)
        for ev in IsolatedReader(
            [Unit([str(path)], units=units)], ENTRY_FIELDS, None, 64, 1024, lambda: False
        )
        if ev.kind == BLOCK and ev.block is not None and ev.block[0]
    ]
    raw = pl.concat(frames)
    return journal_records(raw, selection, source="j").records, raw.height


@needs_python_systemd
@pytest.mark.parametrize(
    "units",
    [
        ("sglang*",),
        ("sglang-prefill",),
        ("sglang-?outer.service", "sshd.service"),
        ("*journald*",),
        ("nothing*",),
    ],
)
def test_the_local_journal_is_read_through_the_units_entry_lists(
    make_journal, units: tuple[str, ...]
) -> None:
    """The local journal is read by python-systemd restricted to the entries whose unit fields can
    match (each value's entry list, as `journalctl -u`): the same records as reading every entry,
    without visiting the other units' entries. A glob no unit matches restricts nothing, so the
    units that were there can still be listed. (A file stands in for the local journal here.)"""
    from pdforensics.sources._records import glob_regex

    noise = b"".join(entry(T0 + 100 + i, f"noise {i}", **svc("other.service", pid="55")) for i in range(400))
    path = make_journal(EXPORT + noise)
    sel = Selection(units=units)
    every, n_every = _child_read(path, sel, None)
    only, n_only = _child_read(path, sel, glob_regex(units))
    assert only.equals(every) and n_every == len(ENTRIES) + 400
    if units == ("nothing*",):
        assert every.height == 0 and n_only == n_every
    else:
        assert every.height and n_only <= len(ENTRIES)  # journald's and the selected units' entries


def test_only_the_local_journal_with_plain_globs_is_restricted() -> None:
    """Journal files go to the direct reader (and a damaged one's header count is compared with the
    entries read); a glob with a [class] is matched by polars alone."""
    from types import SimpleNamespace

    from pdforensics.sources._records import glob_regex

    def matches(kind: str, units: tuple[str, ...]) -> str | None:
        return JournalSource._unit_matches(SimpleNamespace(kind=kind), Selection(units=units))  # type: ignore[arg-type]

    assert matches("local", ("sglang*",)) == glob_regex(("sglang*",))
    assert matches("local", ("*",)) is None  # everything: nothing to restrict
    assert matches("local", ("sglang-[dp]*",)) is None
    assert matches("files", ("sglang*",)) is None and matches("directory", ("sglang*",)) is None


@pytest.mark.parametrize("force", READERS)
@pytest.mark.parametrize(
    ("since", "until", "expected"),
    [
        (T0 + 2, T0 + 5, {2, 3, 4}),  # half-open: until excluded
        (T0 + 8, None, {8, 9}),
        (None, T0 + 1, {0}),
        (T0 + 3, T0 + 3, set()),
        (T0 - 10**9, T0 + 10**9, set(range(10))),
    ],
)
def test_since_until_window(
    journal: Path, force: bool, since: int | None, until: int | None, expected: set[int]
) -> None:
    sel = Selection(window=Window(since, until), units=("*",))
    got = read(JournalSource("files", [journal], force_journalctl=force), sel)
    assert {ts - T0 for ts in got.records["ts_us"]} == expected


@needs_python_systemd
def test_reading_stops_after_the_window_end(make_journal, monkeypatch: pytest.MonkeyPatch) -> None:
    # 5000 entries, window covers the first 100: the reader seeks and stops, not reads everything.
    text = b"".join(entry(T0 + i, f"m{i}", **svc("sglang-p.service")) for i in range(5000))
    path = make_journal(text)
    monkeypatch.setattr(journal_mod, "_UNTIL_CHECK", 64)
    got = read(JournalSource("files", [path]), Selection(window=Window(T0 + 50, T0 + 150)))
    assert got.records["ts_us"].to_list() == list(range(T0 + 50, T0 + 150))
    assert got.skipped < 64  # entries past the end read before the check, nothing before the start


@pytest.mark.parametrize("force", READERS)
def test_batch_size_is_an_upper_bound(journal: Path, force: bool) -> None:
    batches = list(
        JournalSource("files", [journal], force_journalctl=force).batches(Selection(units=("*",)), 3)
    )
    sizes = [b.records.height for b in batches]
    assert max(sizes) <= 3 and sum(sizes) == len(ENTRIES)


# -- directories and errors --------------------------------------------------------------------------


@pytest.mark.parametrize("force", READERS)
def test_directory_with_journals_in_subfolders(make_journal, tmp_path: Path, force: bool) -> None:
    (tmp_path / "remote").mkdir()
    make_journal(b"".join(ENTRIES[:5]), "remote/remote-a.journal")
    make_journal(b"".join(ENTRIES[5:]), "b.journal")
    got = read(JournalSource("directory", [tmp_path], force_journalctl=force))
    assert sorted(got.records["ts_us"]) == [T0 + i for i in range(10)]
    assert got.records["source"][0] == f"journal:{tmp_path.resolve()}"


def test_directory_without_journal_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SourceError, match="no journal files"):
        JournalSource("directory", [tmp_path])


def test_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such directory"):
        JournalSource("directory", [tmp_path / "nope"])
    with pytest.raises(SourceError, match="no such file"):
        JournalSource("files", [tmp_path / "nope.journal"])
    with pytest.raises(SourceError, match="is a directory"):
        JournalSource("files", [tmp_path])


@needs_python_systemd
def test_corrupt_journal_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.journal"
    bad.write_bytes(b"LPKSHHRH" + os.urandom(4096))
    with pytest.raises(SourceError, match="cannot open journal"):
        list(JournalSource("files", [bad]).batches(Selection()))


def test_journalctl_missing_and_no_python_systemd(journal: Path) -> None:
    with pytest.raises(SourceError, match="journalctl is missing"):
        JournalSource("files", [journal], force_journalctl=True, journalctl="/nonexistent/journalctl")


@needs_journalctl
def test_journalctl_failure_becomes_source_error(journal: Path, tmp_path: Path) -> None:
    fake = tmp_path / "journalctl"
    fake.write_text("#!/bin/sh\necho 'Failed to open files: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    src = JournalSource("files", [journal], force_journalctl=True, journalctl=str(fake))
    with pytest.raises(SourceError, match="systemd-journal"):
        list(src.batches(Selection()))


@pytest.mark.parametrize("force", READERS)
def test_abandoned_iteration_stops_the_reader(make_journal, force: bool) -> None:
    text = b"".join(entry(T0 + i, f"m{i}", **svc("sglang-p.service")) for i in range(3000))
    src = JournalSource("files", [make_journal(text)], force_journalctl=force)
    before = threading.active_count()
    it = src.batches(Selection(), batch_size=100)
    assert next(it).records.height == 100
    it.close()  # consumer gives up: the thread (and journalctl) must go away
    assert threading.active_count() == before


def test_local_journal_invisible_to_unprivileged_user(monkeypatch: pytest.MonkeyPatch) -> None:
    # This machine's local journal is empty; for a user outside the journal groups an empty result
    # means "cannot see it", not "nothing happened". (The real privilege check runs as nobody below.)
    monkeypatch.setattr(journal_mod, "privileged", lambda: False)
    monkeypatch.setattr(journal_mod, "_LOCAL_DIRS", ())
    src = JournalSource("local")
    with pytest.raises(SourceError, match="systemd-journal group"):
        list(src.batches(Selection(window=Window(since_us=4_000_000_000_000_000))))


# -- real permissions: as root, fork and drop to nobody -------------------------------------------


def as_unprivileged(fn: Callable[[], str]) -> str:
    """Run fn in a child without root (uid/gid nobody, no groups); its result or 'Error: message'.

    Only code that does not touch polars runs there (its thread pool does not survive a fork).
    """
    if os.geteuid() != 0:
        try:
            return fn()
        except Exception as e:
            return f"{type(e).__name__}: {e}"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            try:
                out = fn()
            except Exception as e:
                out = f"{type(e).__name__}: {e}"
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 20)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("unprivileged child hung")
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    return json.loads(data)


@pytest.fixture
def shared_dir(make_journal):
    """A directory nobody may enter, with a readable and an unreadable journal file."""
    d = Path(tempfile.mkdtemp(prefix="pdf-perm-"))
    d.chmod(0o755)
    src = make_journal(EXPORT)
    for name, mode in (("ok.journal", 0o644), ("locked.journal", 0o000)):
        shutil.copy(src, d / name)
        (d / name).chmod(mode)
    yield d
    shutil.rmtree(d)


def test_unreadable_journal_file(shared_dir: Path) -> None:
    ok, locked = shared_dir / "ok.journal", shared_dir / "locked.journal"

    def probe() -> str:
        JournalSource("files", [ok])  # control: readable file is fine for this user
        if python_systemd_available():
            _open_reader([str(ok)]).close()  # what the reader (a child process) opens
        JournalSource("files", [locked])
        return "no error"

    out = as_unprivileged(probe)
    assert out.startswith("SourceError") and "systemd-journal group" in out


@needs_python_systemd
def test_unreadable_journal_file_at_open(shared_dir: Path) -> None:
    # The file becomes unreadable between the check and the open: still a SourceError, not OSError.
    def probe() -> str:
        src = JournalSource("files", [shared_dir / "ok.journal"])
        src.files = [shared_dir / "locked.journal"]
        list(src.batches(Selection()))
        return "no error"

    out = as_unprivileged(probe)
    assert out.startswith("SourceError") and "systemd-journal group" in out


def test_directory_with_an_unreadable_journal(shared_dir: Path) -> None:
    out = as_unprivileged(lambda: repr(JournalSource("directory", [shared_dir])))
    assert out.startswith("SourceError") and "1 of 2 journal files unreadable" in out


def test_privilege_detection_for_nobody() -> None:
    assert as_unprivileged(lambda: str(journal_mod.privileged())) == "False"


# -- the source label every stored line carries ------------------------------------------------------


def test_a_few_files_are_named_more_are_counted(make_journal, tmp_path: Path) -> None:
    """Every stored line carries its source's label: for a rotated collection named file by file
    (54 files of journal-remote), the comma-joined paths made it ~7 KB a line."""
    first = make_journal(EXPORT)
    files = []
    for i in range(5):
        (tmp_path / f"rot{i}").mkdir()
        files.append(shutil.copy(first, tmp_path / f"rot{i}" / f"system@{i}.journal"))
    files = [Path(f) for f in files]
    few = JournalSource(kind="files", paths=files[:3])
    assert few.label == "journal:" + ",".join(str(f.resolve()) for f in files[:3])
    many = JournalSource(kind="files", paths=files)
    assert many.label == f"journal:5 files in {tmp_path.resolve()}"
    sources = set(read(many).records["source"].unique())
    assert sources == {many.label}
