"""The CLI contract: instant --help, one-line errors with documented exit codes, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PDFORENSICS_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "pdforensics", *args], capture_output=True, text=True, cwd=cwd, env=full_env
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]


def test_help_lists_commands_without_importing_plotly() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for cmd in ("ingest", "verdict", "timeline", "report", "sql", "export", "simulate", "demo"):
        assert cmd in proc.stdout
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pdforensics.cli; print('plotly' in sys.modules, 'duckdb' in sys.modules)",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.split() == ["False", "False"]


def test_bad_time_window_is_usage_error(tmp_path: Path) -> None:
    proc = run("ingest", "--db", str(tmp_path / "a.duckdb"), "--since", "yesterday-ish", "--file", "x.log")
    assert_one_line_error(proc, 2, "yesterday-ish")


def test_missing_database_for_verdict(tmp_path: Path) -> None:
    proc = run("verdict", "--db", str(tmp_path / "none.duckdb"))
    assert_one_line_error(proc, 4, "run `pdforensics ingest` first")


def test_missing_input_file(tmp_path: Path) -> None:
    proc = run("ingest", "--db", str(tmp_path / "a.duckdb"), "--file", str(tmp_path / "nope.log"))
    assert_one_line_error(proc, 3, "nope.log")


def test_db_env_variable_is_honoured(tmp_path: Path) -> None:
    proc = run("verdict", env={"PDFORENSICS_DB": str(tmp_path / "from-env.duckdb")})
    assert_one_line_error(proc, 4, "from-env.duckdb")


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02garbage\xff" * 1000])
def test_empty_or_binary_files_never_traceback(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "input.log"
    f.write_bytes(content)
    proc = run("ingest", "--db", str(tmp_path / "a.duckdb"), "--file", str(f), "--quiet")
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 3), proc.stderr


def test_an_empty_ingest_says_so_and_the_verdict_names_no_window(tmp_path: Path) -> None:
    # "Found nothing" must not read like "nothing happened": the operator is told what to widen.
    f = tmp_path / "empty.log"
    f.write_bytes(b"")
    db = str(tmp_path / "a.duckdb")
    proc = run("ingest", "--db", db, "--file", str(f))
    assert proc.returncode == 0, proc.stderr
    assert "nothing was read" in proc.stdout
    verdict = run("verdict", "--db", db)
    assert verdict.returncode == 0, verdict.stderr
    assert "window:  none (no line in the database" in verdict.stdout
    assert "inconclusive" in verdict.stdout.splitlines()[0]
