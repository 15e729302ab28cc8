"""Failures grouped by reason: ids become readable placeholders (<rid>, <room>, <addr>, <hex>),
other numbers N, in both the saved query `failures_by_reason` and the report's failures table."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pdforensics import query, store
from pdforensics.api import run_ingest
from pdforensics.report import build_model
from pdforensics.report.data import Limits
from pdforensics.verdict import VerdictOptions

OPTS = VerdictOptions(watchdog_timeout_s=60)
RIDS = [
    "9dc6e1f2a3b4c5d6e7f8091a2b3c4d5e",
    "0abb148e5eb6479ab8b193fef7feadfc",
    "cd00baf7d2fc4dcf8535c3a25f0288a3",
]
ROOMS = [4611300501895570458, 6721395813317762539, 8360203925601259718]


def _log() -> str:
    out = []
    for i, (rid, room) in enumerate(zip(RIDS, ROOMS, strict=True)):
        out.append(
            f"[2026-11-29 12:00:0{i} TP0] Prefill transfer failed for request rank=0 req.rid='{rid}' "
            f"req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): "
            f"Failed to send kv chunk of {room} to 10.0.0.{9 + i}:1500{i}"
        )
        out.append(
            f"[2026-11-29 12:00:1{i} TP0] Prefill transfer failed for request rank=0 req.rid='{rid}x' "
            f"req.bootstrap_room={room + 1} with exception KVTransferError(bootstrap_room={room + 1}): "
            f"PD retract rebootstrap /generate failed for rid={rid} (status=50{i})."
        )
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("shape")
    log = folder / "prefill.log"
    log.write_text(_log(), encoding="utf-8")
    path = folder / "x.duckdb"
    run_ingest(
        db=path, since=None, until=None, units=None, directories=None, journal_files=None, files=[log],
        tz="UTC", host="p-node-01", catalogs=None, watchdog_timeout=60, grace=None, progress=False,
        now_us=1_900_000_000_000_000,
    )  # fmt: skip
    return path


SEND = "Failed to send kv chunk of <room> to <addr>"
REBOOT = "PD retract rebootstrap /generate failed for rid=<rid> (status=N)."


def test_saved_query_groups_one_cause_per_row_readably(db: Path) -> None:
    out = io.StringIO()
    query.run_query(db, "failures_by_reason", "ndjson", OPTS, out)
    rows = {r["reason"]: r for r in map(json.loads, out.getvalue().splitlines())}
    assert set(rows) == {SEND, REBOOT}
    assert rows[SEND]["rooms"] == 3 and rows[REBOOT]["rooms"] == 3
    # the example keeps the real text
    assert rows[SEND]["sample_reason"].startswith("Failed to send kv chunk of ")


def test_report_failures_table_uses_the_same_shapes(db: Path) -> None:
    con = store.open_db(db, read_only=True)
    try:
        model, _ = build_model(con, OPTS, show_prompts=False, limits=Limits())
    finally:
        con.close()
    (table,) = [t for t in model["tables"] if t["id"] == "failures"]
    col = [c["key"] for c in table["columns"]].index("reason")
    reasons = sorted({row[col] for row in table["rows"]})
    assert reasons == sorted([SEND, REBOOT])
    assert not any("NcN" in r or "NaN" in r for r in reasons)
