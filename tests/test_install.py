"""The operator's install (README, Installing on a host): the wheel, in a clean venv, runs the
core commands with the base dependencies alone; Spark and Playwright are extras, never pulled in.

Built once for the module: a wheel of this tree (`pip wheel --no-deps`), a venv with no system site
packages, `pip install` of the wheel (its dependencies from the configured index or pip's cache).
Every step has a timeout. When pip cannot reach an index at all the module is skipped, saying so;
any other failure of the install fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# one worker builds the wheel and its venv once (a module fixture is per xdist worker)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("install")]

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "fixtures" / "healthy"
BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 600
RUN_TIMEOUT_S = 180
EXTRAS_ONLY = ("pyspark", "sqlglot", "playwright")  # [spark] and [screenshots]


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path
    work: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, *args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """The installed `pdforensics` command, run outside the repository."""
        return _run([str(self.venv / "bin" / "pdforensics"), *args], self.work, timeout)


def _env() -> dict[str, str]:
    # Nothing of this checkout leaks in: no PYTHONPATH, no pdforensics settings.
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PDFORENSICS_")}


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _pip(python: Path | str, *args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return _run([str(python), "-m", "pip", "--disable-pip-version-check", *args], cwd, timeout)


def _skip_without_an_index(failed: subprocess.CompletedProcess[str], what: str, probe_dir: Path) -> None:
    """Skip when pip reaches no index (nor a cached copy) at all; otherwise the failure is real."""
    probe = _pip(
        sys.executable, "download", "--no-deps", "-d", str(probe_dir), "hatchling", cwd=probe_dir, timeout=120
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"pip cannot reach a package index here (a download of hatchling failed: {last})")
    pytest.fail(f"{what} failed although pip reaches an index:\n{failed.stdout}\n{failed.stderr}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("install")
    dist, work = root / "dist", root / "work"
    work.mkdir()
    # Build isolation fetches hatchling as an operator's `pipx install ./pdforensics` does.
    built = _pip(
        sys.executable, "wheel", "--no-deps", "-w", str(dist), str(REPO), cwd=root, timeout=BUILD_TIMEOUT_S
    )
    if built.returncode != 0:
        _skip_without_an_index(built, "pip wheel", root)
    (wheel,) = dist.glob("pdforensics-*.whl")
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], root, 120)  # no system site packages
    assert made.returncode == 0, made.stderr
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    got = _pip(venv / "bin" / "python", "install", str(wheel), cwd=root, timeout=INSTALL_TIMEOUT_S)
    if got.returncode != 0:
        _skip_without_an_index(got, "pip install of the wheel", root)
    return Installed(venv, wheel, work)


def test_the_installed_command_ingests_and_gives_the_fixtures_verdict(installed: Installed) -> None:
    where = _run(
        [str(installed.python), "-c", "import pdforensics; print(pdforensics.__file__)"], installed.work, 60
    )
    assert Path(where.stdout.strip()).is_relative_to(installed.venv), where.stdout + where.stderr
    db = installed.work / "healthy.duckdb"
    ingest = installed.run("ingest", "--file", str(FIXTURE / "journal.export"), "--db", str(db))
    assert ingest.returncode == 0, ingest.stdout + ingest.stderr
    verdict = installed.run("verdict", "--db", str(db), "--json")
    assert verdict.returncode == 0, verdict.stderr
    expected = json.loads((FIXTURE / "expected.json").read_text())["verdict"]
    assert json.loads(verdict.stdout)["verdict"] == expected == "nothing_stuck"
    check = installed.run("verdict", "--db", str(db), "--check")
    assert check.returncode == 0 and check.stdout.startswith("OK - nothing_stuck"), (
        check.stdout + check.stderr
    )


def test_the_base_install_pulls_in_no_extra(installed: Installed) -> None:
    probe = "import importlib.util, sys; print([m for m in sys.argv[1:] if importlib.util.find_spec(m)])"
    found = _run([str(installed.python), "-c", probe, *EXTRAS_ONLY], installed.work, 60)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]", f"the base install brought {found.stdout.strip()}"


def test_a_feature_without_its_extra_names_the_extra_in_one_line(installed: Installed) -> None:
    db = installed.work / "extras.duckdb"
    assert installed.run("ingest", "--file", str(FIXTURE / "journal.export"), "--db", str(db)).returncode == 0
    spark = installed.run("verdict", "--db", str(db), "--engine", "spark")
    assert spark.returncode == 5, spark.stdout + spark.stderr
    assert spark.stderr.splitlines() == [
        "pdforensics: --engine spark: pyspark is not installed: pip install 'pdforensics[spark]'"
    ]
    shot = _run(
        [str(installed.python), "-m", "pdforensics.report.screenshot", "r.html", "r.png"], installed.work, 60
    )
    assert shot.returncode == 5, shot.stdout + shot.stderr
    assert shot.stderr.splitlines() == [
        "pdforensics: screenshot: playwright is not installed: install pdforensics with its extra, "
        "pip install 'pdforensics[screenshots]'"
    ]
