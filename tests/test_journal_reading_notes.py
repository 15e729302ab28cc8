"""The ingest says how its journal files were read: by the direct reader, or by python-systemd and why.

Real journal files (systemd-journal-remote), one of them marked as not closed cleanly (the state a
live journald file has): the direct reader refuses it, python-systemd reads it, and the summary, the
printed line and `ingests.readers` all say so. Nothing is lost on the way.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import JOURNAL_REMOTE, export_to_journal, have_journalctl

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source
from pdforensics.sources.journal import JournalSource, python_systemd_available
from pdforensics.sources.journalfile import ENV_READER, STATE_ONLINE

pytestmark = [
    pytest.mark.skipif(not python_systemd_available(), reason="python-systemd not installed"),
    pytest.mark.skipif(not have_journalctl(), reason="journalctl not installed"),
    pytest.mark.skipif(not JOURNAL_REMOTE.exists(), reason="systemd-journal-remote not installed"),
]
ALL = Selection(units=("*",))
ONLINE = "file not closed cleanly (online)"


def _journals(tmp_path: Path) -> tuple[Path, Path]:
    """Two journals of different fixtures; the second one's header says it is still open."""
    clean = export_to_journal(
        (fixtures_dir() / "healthy" / "journal.export").read_bytes(), tmp_path / "a.journal"
    )
    live = export_to_journal(
        (fixtures_dir() / "decode_restart_watchdog_fires" / "journal.export").read_bytes(),
        tmp_path / "b.journal",
    )
    data = bytearray(live.read_bytes())
    data[16] = STATE_ONLINE  # the header's state byte: what journald's active file says
    live.write_bytes(bytes(data))
    return clean, live


def _entries(path: Path) -> int:
    out = subprocess.run(
        ["journalctl", "--file", str(path), "-o", "export", "--no-pager"], capture_output=True, check=True
    ).stdout
    return out.count(b"\n__CURSOR=") + out.startswith(b"__CURSOR=")


def _stored_readers(db: Path) -> str:
    con = store.open_db(db, read_only=True)
    try:
        (readers,) = con.execute("SELECT readers FROM ingests ORDER BY ingest_id DESC LIMIT 1").fetchone()  # type: ignore[misc]
        return readers
    finally:
        con.close()


def test_a_file_left_to_python_systemd_is_named_with_its_reason(tmp_path: Path) -> None:
    clean, live = _journals(tmp_path)
    db = tmp_path / "x.duckdb"
    s = ingest(db, [JournalSource("files", [clean, live])], ALL, load_catalog(), views=False)
    note = f"journal files: 1 read directly, 1 by python-systemd (1x {ONLINE})"
    assert s.reading_notes == [note]
    assert _stored_readers(db) == f"python-systemd; {note}"
    assert s.stored == _entries(clean) + _entries(live) > 0  # the refused file was read all the same


def test_files_all_read_directly_say_so_and_nothing_else(tmp_path: Path) -> None:
    clean, _ = _journals(tmp_path)
    s = ingest(tmp_path / "x.duckdb", [JournalSource("files", [clean])], ALL, load_catalog(), views=False)
    assert s.reading_notes == ["journal files: 1 read directly"]


def test_forcing_python_systemd_counts_every_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean, live = _journals(tmp_path)
    monkeypatch.setenv(ENV_READER, "python-systemd")
    s = ingest(
        tmp_path / "x.duckdb", [JournalSource("files", [clean, live])], ALL, load_catalog(), views=False
    )
    assert s.reading_notes == [
        f"journal files: 0 read directly, 2 by python-systemd (2x {ENV_READER}=python-systemd)"
    ]


def test_plain_files_and_journalctl_have_no_note(tmp_path: Path) -> None:
    clean, _ = _journals(tmp_path)
    log = sorted((fixtures_dir() / "healthy" / "plain").glob("*.log"))[0]
    db = tmp_path / "x.duckdb"
    s = ingest(db, [open_file_source(log)], ALL, load_catalog(), views=False)
    assert s.reading_notes == [] and _stored_readers(db) == ",".join(s.readers)
    s = ingest(
        tmp_path / "y.duckdb",
        [JournalSource("files", [clean], force_journalctl=True)],
        ALL,
        load_catalog(),
        views=False,
    )
    assert s.reading_notes == [] and s.readers == ["journalctl-export"]


def test_the_summary_prints_the_line(tmp_path: Path) -> None:
    """Through the installed command, as an operator sees it."""
    clean, live = _journals(tmp_path)
    cmd = [sys.executable, "-m", "pdforensics", "ingest", "--db", str(tmp_path / "x.duckdb"), "-u", "*"]
    out = subprocess.run(
        [*cmd, "--journal-file", str(clean), "--journal-file", str(live)], capture_output=True, text=True
    )
    assert f"journal files: 1 read directly, 1 by python-systemd (1x {ONLINE})" in out.stdout, (
        out.stdout + out.stderr
    )
