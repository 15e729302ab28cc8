"""One mapping of I/O and database failures to the documented exit codes (issue 29, item 6).

An output that cannot be written (a full disk) is exit 6 from every command that writes one, with
nothing partial left where it was to be written; a damaged database is exit 4 whether the damage
is met opening it or in the middle of a query (`sql` included), and is never called "being
written by another process". The full disk is a 256 KiB tmpfs filled to the brim (conftest
`full_folder`), the damage a block of the database overwritten.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdforensics.cli import app

BLOCK, HEADER = 262_144, 12_288  # DuckDB's block size, and its three 4 KiB headers before them


def cli(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env={"PDFORENSICS_DEBUG": "", "PDFORENSICS_CACHE": "off"})


@pytest.fixture(scope="module")
def healthy(scenario_db) -> Path:  # type: ignore[no-untyped-def]
    return scenario_db("json", "healthy")


def left_in(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} - {"filler"}


@pytest.mark.parametrize("fmt", ["otlp", "perfetto", "timesketch", "parquet"])
def test_export_to_a_full_disk_is_exit_6_and_leaves_nothing(
    healthy: Path, full_folder: Path, fmt: str
) -> None:
    res = cli("export", "--db", str(healthy), "--format", fmt, "--out", str(full_folder / "out"))
    assert res.exit_code == 6, res.output
    assert "cannot write" in res.output and len(res.output.strip().splitlines()) == 1
    assert left_in(full_folder) == set(), "no partial file or folder"


def test_report_to_a_full_disk_is_exit_6_and_leaves_nothing(healthy: Path, full_folder: Path) -> None:
    res = cli("report", "--db", str(healthy), "--out", str(full_folder / "r.html"))
    assert res.exit_code == 6, res.output
    assert "cannot write" in res.output
    assert left_in(full_folder) == set()


def damaged_copies(db: Path, folder: Path) -> list[Path]:
    """One copy of `db` per data block, that block's bytes after its checksum overwritten."""
    out = []
    for k in range((db.stat().st_size - HEADER) // BLOCK):
        copy = folder / f"block{k}.duckdb"
        shutil.copyfile(db, copy)
        with open(copy, "r+b") as f:
            f.seek(HEADER + k * BLOCK + 8)
            f.write(os.urandom(64))
        out.append(copy)
    return out


def test_a_damaged_block_is_a_database_error_wherever_it_is_met(healthy: Path, tmp_path: Path) -> None:
    """Each block damaged in turn: `sql` reading every line either does not touch it (0) or says the
    database is damaged with exit 4 — met opening the file or in the middle of the query."""
    codes = []
    for copy in damaged_copies(healthy, tmp_path):
        res = cli("sql", "--db", str(copy), "SELECT count(*), sum(length(message)) FROM lines")
        codes.append(res.exit_code)
        assert res.exit_code in (0, 4), f"{copy.name}: exit {res.exit_code}: {res.output}"
        if res.exit_code == 4:
            assert "corrupt" in res.output.lower(), res.output
            assert "being written" not in res.output and "in use" not in res.output
    assert 4 in codes, "some block the query reads was damaged"
