from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

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


# ------------------------------------------------------------------ built once per test run

# Databases (and other inputs) that cost seconds to build are built once per test run and shared
# by every test file and every pytest-xdist worker: in a folder of the run's base temp directory
# (`pytest-N/`, the workers' common parent), each under a file lock, marked complete by `.done`.
# Shared databases are opened read-only; a test that writes takes its own copy (`private_copy`).


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of this test run that every xdist worker shares."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def user_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's cache (a new database's template, Spark translations) is this test run's, shared
    by its workers and their subprocesses: no run reads what an earlier one left."""
    from pdforensics.paths import CACHE_DIR_ENV

    folder = run_root(tmp_path_factory) / "user-cache"
    folder.mkdir(exist_ok=True)
    os.environ[CACHE_DIR_ENV] = str(folder)  # not XDG_CACHE_HOME: pip's, fontconfig's stay warm
    return folder


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[Path], Any]], Path]:
    """built(key, build) -> a folder that `build(folder)` filled, once per test run for that key."""
    root = run_root(tmp_path_factory) / "built"
    root.mkdir(exist_ok=True)

    def _get(key: str, build: Callable[[Path], Any]) -> Path:
        out = root / key
        if (out / ".done").exists():
            return out
        with _locked(root / f"{key}.lock"):
            if not (out / ".done").exists():
                if out.exists():  # a build that failed half-way (its test failed with it)
                    shutil.rmtree(out)
                out.mkdir()
                build(out)
                (out / ".done").touch()
        return out

    return _get


@pytest.fixture(scope="session")
def scenario_db(built) -> Callable[[str, str], Path]:
    """scenario_db(recipe, scenario) -> that scenario ingested by that recipe (tests/scenario_dbs.py),
    shared: open it read-only."""
    import scenario_dbs

    def _get(recipe: str, scenario: str) -> Path:
        recipe = scenario_dbs.same_as(recipe, scenario)
        make = scenario_dbs.RECIPES[recipe]
        return built(f"{recipe}-{scenario}", lambda out: make(scenario, out / "db.duckdb")) / "db.duckdb"

    return _get


@pytest.fixture
def full_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder on a filesystem with no space left: a 256 KiB tmpfs filled to the last byte (root
    only: skipped where it cannot be mounted). Writing any file there fails with ENOSPC."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (root only): {mounted.stderr.decode().strip()}")
    try:
        with contextlib.suppress(OSError), open(folder / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"x" * 4096)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


def private_copy(db: Path, folder: Path) -> Path:
    """A copy of a shared database for a test that writes to it."""
    out = folder / db.name
    shutil.copyfile(db, out)
    return out


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    """One local SparkSession for every Spark test of this process (the JVM takes 10-50 s to start;
    the translated views are kept per process too: pdforensics.spark.run). The Spark tests are one
    xdist group (`xdist_group("spark")`), so one worker starts it."""
    from pdforensics.spark import session

    why = session.spark_available()
    if why:
        pytest.skip(why)
    s = session.local_session()
    yield s
    s.stop()


# ------------------------------------------------------------------ xdist groups

# The groups whose tests run first: the Spark group is the longest chain of the suite (one worker,
# one JVM), so it starts at once while the other workers share the rest.
FIRST_GROUPS = ("spark",)


def _groups(item: pytest.Item) -> list[str]:
    return sorted(
        {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--dist loadgroup` sends a test to the worker of its group by the `@group` its node id ends
    with. pytest-xdist 3.8 writes that suffix to `item._nodeid`, which pytest 9.2 no longer reads
    (a node id is `item._id`): every group's tests were spread over the workers, each starting a
    JVM, translating the views and building the wheel again. Write it where pytest reads it; and
    put the FIRST_GROUPS first (every worker collects the same order)."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        names = _groups(item)
        if names and "@" not in item.nodeid.rsplit("]", 1)[-1]:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")
    items.sort(key=lambda item: not set(_groups(item)) & set(FIRST_GROUPS))


# ------------------------------------------------------------------ no time limits, a time table

# Hypothesis: no per-example deadline (the machine's load varies; no test enforces a time limit),
# the same examples every run (derandomized), no example database. A test's own settings add to this.
settings.register_profile("pdforensics", deadline=None, derandomize=True, database=None)
settings.load_profile("pdforensics")

_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Every phase's time (setup with its fixtures, call, teardown), summed per test file; under
    xdist the controller sees every worker's reports."""
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """With --durations: the 15 slowest test files too (time summed over their tests' phases)."""
    if not config.getoption("durations", None) or not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_sep("=", "slowest 15 test files (seconds summed over their tests)")
    for path, secs in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{secs:9.1f}s  {100 * secs / total:5.1f}%  {path}")
    terminalreporter.write_line(f"{total:9.1f}s  summed over every test (wall time: the last line)")
