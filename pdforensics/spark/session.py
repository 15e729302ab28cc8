"""A local Spark session for the rules: loopback only, UTC, quiet, small.

pyspark is the optional extra `pdforensics[spark]` and needs a Java 17 runtime (Debian's
openjdk-17-jre-headless). Starting the JVM takes ~10 s, so callers keep one session.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def spark_available() -> str | None:
    """None when a session can start here, else the reason it cannot (one clear line)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed: pip install 'pdforensics[spark]'"
    try:
        import sqlglot  # noqa: F401
    except ImportError:
        return "sqlglot is not installed: pip install 'pdforensics[spark]'"
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "no Java runtime: apt-get install openjdk-17-jre-headless"
    return None


# Settings the translated rules need to mean what they mean in DuckDB (on any cluster too).
RULES_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    # off: DuckDB gives NULL for an index past a list's end, ANSI Spark raises
    "spark.sql.ansi.enabled": "false",
    # size(NULL) is NULL, as DuckDB's array_length (not the legacy -1)
    "spark.sql.legacy.sizeOfNull": "false",
    # partition directories (pdf_host=..) stay strings
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
}

# The rules run as ~120 small Spark jobs (pdforensics.spark.run), so on inputs of a few thousand
# rows the fixed cost per job (planning, Janino-compiling whole-stage code, AQE re-planning each
# stage) is most of the time. Measured on the fixtures (tests/test_spark_equality.py, 2 cores):
# 79-91 s -> 34-50 s per fixture once the JVM is warm. On a cluster over a fleet's data these
# are the wrong trade: pdforensics.spark.job leaves them to the cluster's configuration.
# The serial collector: on 2 cores G1's concurrent threads compete with the planner for the same
# CPU; over three fixtures' rules it took the JVM's CPU from 166-186 s to 142 s and the wall from
# 94-117 s to 85 s (the driver's heap is 1 GB, the size the serial collector is made for).
SMALL_INPUT_CONF: dict[str, str] = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:+UseSerialGC",
}


def local_session(cores: int = 2, app: str = "pdforensics", conf: dict[str, str] | None = None) -> Any:
    """A `local[cores]` SparkSession bound to 127.0.0.1 (no reverse-DNS packet leaves the host)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("TZ", "UTC")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", str(cores))
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        # not ./spark-warehouse in whatever folder the command runs in
        .config("spark.sql.warehouse.dir", str(Path(tempfile.gettempdir()) / "pdforensics-spark-warehouse"))
    )
    for key, value in (RULES_CONF | SMALL_INPUT_CONF | (conf or {})).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def apply_rules_conf(spark: Any) -> None:
    """Set RULES_CONF on a session someone else built (spark-submit's, a cluster's)."""
    for key, value in RULES_CONF.items():
        spark.conf.set(key, value)
