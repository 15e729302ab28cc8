"""`spark-submit pdforensics/spark/job.py --parquet DIR --out verdict.json`: the cluster entry
point, run once here with spark-submit's own launcher in local mode (loopback only); its JSON
equals `pdforensics verdict --json` on the same database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pdforensics.spark import session
from tests.test_spark_verdict import cli, timeout_args, write_layout

# In the Spark group, after the equality tests: spark-submit's driver is a new process, and it reads the
# translation they kept in this run's user cache (tests/conftest.py `user_cache`) instead of ~20 s again.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark")]

FIXTURE = "decode_restart_watchdog_fires"


def test_spark_submit_job_equals_duckdb_verdict(scenario_db, tmp_path: Path) -> None:
    why = session.spark_available()
    if why:
        pytest.skip(why)
    submit = Path(sys.executable).parent / "spark-submit"
    db = scenario_db("json", FIXTURE)
    root = write_layout(db, tmp_path / "pq")
    out = tmp_path / "verdict.json"
    from pdforensics.spark import job

    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, TZ="UTC")  # fmt: skip
    conf = [f"--conf={k}={v}" for k, v in session.SMALL_INPUT_CONF.items()]
    res = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf=spark.driver.host=127.0.0.1",
         "--conf=spark.driver.bindAddress=127.0.0.1", "--conf=spark.ui.enabled=false",
         "--conf=spark.sql.shuffle.partitions=1", *conf, job.__file__,
         "--parquet", str(root), "--out", str(out), *timeout_args(FIXTURE)],
        capture_output=True, text=True, env=env, timeout=1200,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    code, want = cli("verdict", "--db", str(db), "--json", *timeout_args(FIXTURE))
    assert code == 0
    got = json.loads(out.read_text())
    assert got == json.loads(want)
    assert got["verdict"] == "watchdog_fired"


def test_job_bad_directory_exit_3(tmp_path: Path) -> None:
    """The job's own errors: one line, the CLI's exit codes (no JVM is started for them)."""
    res = subprocess.run(
        [sys.executable, "-m", "pdforensics.spark.job", "--parquet", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 3 and len(res.stderr.strip().splitlines()) == 1, res.stderr
