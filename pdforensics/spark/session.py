"""A local Spark session for the rules: loopback only, UTC, quiet, small.

pyspark is the optional extra `pdforensics[spark]` and needs a Java 17 runtime (Debian's
openjdk-17-jre-headless). Starting the JVM takes ~10 s, so callers keep one session.
"""

from __future__ import annotations

import os
import shutil
from typing import Any


def spark_available() -> str | None:
    """None when a session can start here, else the reason it cannot (one clear line)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed: pip install 'pdforensics[spark]'"
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "no Java runtime: apt-get install openjdk-17-jre-headless"
    return None


def local_session(cores: int = 2, app: str = "pdforensics") -> Any:
    """A `local[cores]` SparkSession bound to 127.0.0.1 (no reverse-DNS packet leaves the host)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("TZ", "UTC")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.default.parallelism", str(cores))
        .config("spark.driver.memory", "1g")
        # off: DuckDB gives NULL for an index past a list's end, ANSI Spark raises
        .config("spark.sql.ansi.enabled", "false")
        # size(NULL) is NULL, as DuckDB's array_length (not the legacy -1)
        .config("spark.sql.legacy.sizeOfNull", "false")
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
