"""The rules on the real engine: every translated view's result on a local Spark session equals
DuckDB's, row for row, on fixtures that cover the rules (every fixture with PDF_SPARK_FULL=1) and
on a hand-built database with rooms >= 2^63, NULL rooms and rids, and a multi-rank failure.

Rows are compared as multisets (no view's order is part of its contract; `ORDER BY` in a view is
for reading), and the lists inside rows exactly, in order (an ordered list() is compared as a
list). A view named not portable (tests/golden/spark/NOT_PORTABLE.tsv) is not compared; the test
asserts the list of portable views is what Spark installed, so a view that stops installing fails.

One SparkSession for every Spark test (tests/conftest.py `spark_session`; the JVM takes 10-50 s to
start; its JIT and Spark's caches make the fixtures after the first 2-3x cheaper): the Spark tests
are one xdist group, run by one worker. Each fixture's database is the shared `json` one
(tests/scenario_dbs.py), built once per test run. Grouped by the `spark` marker:
`./dev test -m spark`; skipped where pyspark or Java is missing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pdforensics import verdict
from pdforensics.paths import fixtures_dir
from pdforensics.spark import session

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark")]

_WHY = session.spark_available()
if _WHY:
    pytest.skip(_WHY, allow_module_level=True)

from pdforensics.spark import run  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "spark"
ALL_FIXTURES = sorted(p.name for p in fixtures_dir().iterdir() if (p / "journal.json").is_file())
# Spark runs the ~140 steps of the rules as as many small jobs, ~25 s a fixture on a quiet machine
# and 50-230 s beside the rest of the suite: every fixture is ~40 min of CI. By default, a fixed
# set chosen to cover the rules: every portable view with rows in at least one of them, and the
# most values of the views' enumerated columns (class, status, kind, ...) per second of Spark
# (a greedy cover over what DuckDB gives on every fixture: wedge_after_decode_restart alone gives
# 63 % of those values, the five 85 %; abort_storm_pins is the only one with an abort storm,
# decode_only_export the only one with an instance no line of its own shows).
# PDF_SPARK_FULL=1 compares every fixture (before changing a rule's translation: ./dev test-full).
COVERING_FIXTURES = (
    "wedge_after_decode_restart",
    "l0_anonymous_pins",
    "hole_hides_firing",
    "abort_storm_pins",
    "decode_only_export",
)
FULL = os.environ.get("PDF_SPARK_FULL") == "1"
FIXTURES = ALL_FIXTURES if FULL else [f for f in ALL_FIXTURES if f in COVERING_FIXTURES]


@pytest.fixture
def spark(spark_session: Any) -> Any:
    return spark_session


def not_portable() -> set[str]:
    text = (GOLDEN / "NOT_PORTABLE.tsv").read_text(encoding="utf-8")
    return {line.split("\t", 1)[0] for line in text.splitlines() if line}


def compare_all(spark: Any, db: Path, parquet: Path, opts: verdict.VerdictOptions) -> None:
    """Install the views on Spark over `db`'s tables and compare each with DuckDB's result."""
    failed = run.install(spark, db, parquet, run.params_of(opts))
    assert set(failed) == not_portable(), f"Spark installed other views than the golden list says: {failed}"
    con = duckdb.connect(str(db), read_only=True)
    try:
        verdict.install_views(con, temporary=True)
        verdict.apply_options(con, opts)
        views = [v.name for v in run.translate.read_views()[0] if v.name not in failed]
        diffs = []
        for view in views:
            # each view's rows once, as a temporary table that the later views read (as
            # verdict.materialised does): the deep views are not recomputed for every reader
            con.execute(f'CREATE TEMP TABLE "{view}__rows" AS SELECT * FROM "{view}"')
            con.execute(f'DROP VIEW "{view}"')
            con.execute(f'CREATE TEMP VIEW "{view}" AS SELECT * FROM "{view}__rows"')
            cols_d, rows_d = run.duckdb_rows(con, view)
            cols_s, rows_s = run.spark_rows(spark, view)
            if cols_d != cols_s:
                diffs.append(f"{view}: columns {cols_d} != {cols_s}")
            elif sorted(rows_d, key=run.sort_key) != sorted(rows_s, key=run.sort_key):
                diffs.append(f"{view}: {first_difference(rows_d, rows_s)}")
        assert not diffs, "\n".join(diffs)
    finally:
        con.close()


def first_difference(a: list[dict], b: list[dict]) -> str:
    if len(a) != len(b):
        return f"{len(a)} rows in DuckDB, {len(b)} on Spark"
    for x, y in zip(sorted(a, key=run.sort_key), sorted(b, key=run.sort_key), strict=True):
        if x != y:
            keys = [k for k in x if x[k] != y.get(k)]
            return f"DuckDB {[x[k] for k in keys]} Spark {[y.get(k) for k in keys]} in {keys}"
    return "?"


def fixture_options(name: str) -> verdict.VerdictOptions:
    exp = json.loads((fixtures_dir() / name / "expected.json").read_text())
    o = exp.get("verdict_options", {})
    return verdict.VerdictOptions(
        watchdog_timeout_s=o.get("watchdog_timeout_s"), since_us=o.get("since_us"), until_us=o.get("until_us")
    )


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_view_equals_duckdb_on_fixture(fixture: str, spark, scenario_db, tmp_path: Path) -> None:
    compare_all(spark, scenario_db("json", fixture), tmp_path / "parquet", fixture_options(fixture))


def test_rooms_above_2_63_and_null_rooms_and_rids(spark, tmp_path: Path) -> None:
    """No fixture has rooms >= 2^63 or NULL rooms/rids: a hand-built database does."""
    from tests.verdict_helpers import DECODE, PREFILL, Log

    big = [2**63, 2**63 + 7, 2**64 - 2]
    log = Log(tmp_path / "hand.duckdb")
    log.add(0, PREFILL, "watchdog_armed", "inflight watchdog armed", timeout_s=60.0)
    for i, r in enumerate(big):
        log.completed(10 + i, r)
    log.receive(20, PREFILL, 2**64 - 1, "pinned").receive(20.001, DECODE, 2**64 - 1, "dpinned")
    log.failure(30, PREFILL, "prefill_transfer_failed", 2**63 + 99, "fail", "KV transfer failed", ranks=4)
    log.add(40, PREFILL, "request_received", "Receive: obj=GenerateReqInput()", rid=None, bootstrap_room=None)
    log.add(
        41, DECODE, "request_received", "Receive: obj=GenerateReqInput(rid='x')", rid="x", bootstrap_room=None
    )
    for t in range(0, 200, 5):
        log.batch(t, inflight=1 if t > 20 else 0)
    log.close()
    con = duckdb.connect(str(log.path), read_only=True)
    rooms = {r[0] for r in con.execute("SELECT bootstrap_room FROM events").fetchall()}
    con.close()
    assert max(r for r in rooms if r is not None) == 2**64 - 1 and None in rooms
    compare_all(spark, log.path, tmp_path / "parquet", verdict.VerdictOptions(watchdog_timeout_s=60))
