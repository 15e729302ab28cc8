"""What the live host says about the watchdog: the prefill units' own environment.

The watchdog patch reads `SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT` from the unit's environment. When
the database was read from this host's journal, `systemctl show -p Environment UNIT` tells the
timeout the operator configured. It is evidence of configuration, not of arming: a build that
ignores the variable prints no armed line, and the views rank an armed line (or its absence at a
prefill start) above it (queries/views/01_context.sql).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

import duckdb

TIMEOUT_VARIABLE = "SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT"
_ASSIGNMENT = re.compile(rf"(?:^|[\s\"]){TIMEOUT_VARIABLE}=\"?(\d+(?:\.\d+)?)s?\"?(?:\s|$)")
# systemctl answers at once or not at all (no systemd as PID 1, no bus): never wait long for it.
_SYSTEMCTL_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class UnitTimeout:
    unit: str
    timeout_s: float


def parse_environment(text: str) -> float | None:
    """The timeout an `Environment=` value sets, if it sets one."""
    m = _ASSIGNMENT.search(text)
    return float(m.group(1)) if m else None


def read_from_live_journal(con: duckdb.DuckDBPyConnection) -> bool:
    """The last ingest read this host's own journal (not files or a directory from elsewhere)."""
    row = con.execute(
        "SELECT sources FROM ingests WHERE stored > 0 ORDER BY ingest_id DESC LIMIT 1"
    ).fetchone()
    return bool(row) and row[0] == "journal"


def prefill_units(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute(
        "SELECT DISTINCT unit FROM lines WHERE engine = 'prefill' AND unit LIKE '%.service' ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def unit_timeout(con: duckdb.DuckDBPyConnection) -> UnitTimeout | None:
    """The timeout a prefill unit's environment sets on this host, when the data came from here."""
    systemctl = os.environ.get("PDFORENSICS_SYSTEMCTL") or shutil.which("systemctl")
    if not systemctl or not read_from_live_journal(con):
        return None
    for unit in prefill_units(con):
        try:
            out = subprocess.run(
                [systemctl, "show", "-p", "Environment", "--value", unit],
                capture_output=True, text=True, timeout=_SYSTEMCTL_TIMEOUT_S, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        timeout = parse_environment(out.stdout) if out.returncode == 0 else None
        if timeout is not None:
            return UnitTimeout(unit, timeout)
    return None
