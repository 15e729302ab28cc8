from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REAL_LOGS = REPO.parent / "shared" / "real-logs"
JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")


@pytest.fixture(scope="session")
def real_logs_dir() -> Path:
    if not REAL_LOGS.is_dir() or not any(REAL_LOGS.glob("*.log")):
        pytest.skip("../shared/real-logs is not present")
    return REAL_LOGS


def export_to_journal(export_text: bytes | str, out: Path) -> Path:
    """Turn Journal Export Format text into a real .journal file (systemd-journal-remote)."""
    if not JOURNAL_REMOTE.exists():
        pytest.skip("systemd-journal-remote is not installed")
    assert out.suffix == ".journal"
    data = export_text.encode() if isinstance(export_text, str) else export_text
    subprocess.run([str(JOURNAL_REMOTE), "-o", str(out), "-"], input=data, check=True, capture_output=True)
    return out


@pytest.fixture
def make_journal(tmp_path: Path):
    def _make(export_text: bytes | str, name: str = "test.journal") -> Path:
        return export_to_journal(export_text, tmp_path / name)

    return _make


def have_journalctl() -> bool:
    return shutil.which("journalctl") is not None


@pytest.fixture
def log(tmp_path: Path):
    """A hand-built database (tests/verdict_helpers.py) for the classification and verdict tests."""
    from tests.verdict_helpers import Log

    db = Log(tmp_path / "hand.duckdb")
    yield db
    db.close()
