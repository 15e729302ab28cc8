"""Deployment evidence from the live host: the prefill unit's environment (systemctl show).

systemd is not PID 1 in this container, so `systemctl show` cannot answer here: the tests point
PDFORENSICS_SYSTEMCTL at a stand-in script that prints what `systemctl show -p Environment --value`
prints on a real host. That stand-in is the only mock; the journal, the database and the views are real.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pdforensics.environment import parse_environment, unit_timeout
from tests.verdict_helpers import PREFILL, Log, room


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60 CUDA_VISIBLE_DEVICES=0,1", 60.0),
        ('PATH=/usr/bin "SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=120"', 120.0),
        ("SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s", 60.0),
        ("X_SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60", None),
        ("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=300", None),
        ("", None),
    ],
)
def test_parse_environment(text: str, want: float | None) -> None:
    assert parse_environment(text) == want


def fake_systemctl(tmp_path: Path, env_value: str) -> Path:
    script = tmp_path / "systemctl"
    script.write_text(f'#!/bin/sh\n[ "$2" = "-p" ] && [ "$3" = Environment ] && echo \'{env_value}\'\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def log(tmp_path: Path):
    db = Log(tmp_path / "hand.duckdb")
    db.receive(30, {**PREFILL, "unit": "sglang-dsv4-prefill.service"}, room(1), "p1")
    yield db
    db.close()


def read_from(log: Log, sources: str) -> None:
    log.con.execute("UPDATE ingests SET sources = ?, stored = 1", [sources])


def test_the_unit_environment_is_deployment_evidence(log: Log, tmp_path: Path, monkeypatch) -> None:
    read_from(log, "journal")
    script = fake_systemctl(tmp_path, "SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=45 OTHER=1")
    monkeypatch.setenv("PDFORENSICS_SYSTEMCTL", str(script))
    found = unit_timeout(log.con)
    assert found is not None and (found.unit, found.timeout_s) == ("sglang-dsv4-prefill.service", 45.0)
    v = log.verdict(timeout=None, env_timeout_s=found.timeout_s, env_unit=found.unit)
    assert (v.timeout_s, v.timeout_source, v.deployed) == (45.0, "unit environment", True)
    assert "no armed line in the data proves it armed" in v.deployed_basis


def test_an_armed_line_outranks_the_environment(log: Log) -> None:
    log.add(
        5,
        PREFILL,
        "watchdog_armed",
        "inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s",
        timeout_s=60.0,
    )
    v = log.verdict(timeout=None, env_timeout_s=45.0, env_unit="sglang-dsv4-prefill.service")
    assert (v.timeout_s, v.timeout_source, v.deployed_basis) == (60.0, "armed line", "armed line")


def test_files_from_elsewhere_are_not_judged_by_this_hosts_units(
    log: Log, tmp_path: Path, monkeypatch
) -> None:
    read_from(log, "file:/tmp/prefill.log")
    script = fake_systemctl(tmp_path, "SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=45")
    monkeypatch.setenv("PDFORENSICS_SYSTEMCTL", str(script))
    assert unit_timeout(log.con) is None


def test_no_systemd_answers_nothing(log: Log, monkeypatch) -> None:
    read_from(log, "journal")
    monkeypatch.setenv("PDFORENSICS_SYSTEMCTL", os.devnull)  # not executable: an OSError, not a traceback
    assert unit_timeout(log.con) is None
