"""The verdict as a Spark application, for `spark-submit` on a cluster:

    spark-submit --master spark://head:7077 "$(python -c 'import pdforensics.spark.job as j; print(j.__file__)')" \
        --parquet /shared/pdf/day --out verdict.json

Reads the Parquet folder `ingest --parquet` wrote, runs the translated rules on the cluster, and
writes the verdict JSON (`pdforensics verdict --json`'s keys, built by the same code). DIR is a
filesystem path the driver can list and every executor can read (a shared or mounted filesystem:
NFS, a FUSE mount of object storage); the translation binds against the tables' schema, which
DuckDB reads on the driver. Only the driver needs pdforensics (duckdb, sqlglot): the rules are
SQL, no Python runs on the executors."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pdforensics.errors import EngineError, PdfError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="pdforensics-spark-job", description=__doc__.splitlines()[0])
    ap.add_argument("--parquet", required=True, type=Path, help="the folder `ingest --parquet` wrote")
    ap.add_argument("--out", type=Path, help="write the verdict JSON here [default: stdout]")
    ap.add_argument("--since", help="window start (pdforensics verdict's forms)")
    ap.add_argument("--until", help="window end")
    ap.add_argument("--watchdog-timeout", type=float, help="the watchdog timeout in seconds")
    ap.add_argument("--grace", type=float, help="seconds of slack past the timeout")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        from pyspark.sql import SparkSession

        from pdforensics.api import _window_us, verdict_options
        from pdforensics.spark import engine, session

        since_us, until_us = _window_us(args.since, args.until, int(time.time() * 1e6))
        opts = verdict_options(since_us, until_us, args.watchdog_timeout, args.grace)
        why = session.spark_available()
        if why:
            raise EngineError(why)
        engine.table_folders(args.parquet)  # a bad directory fails before the JVM starts
        # spark-submit's session (its master, its cluster's settings) plus what the rules need
        spark = SparkSession.builder.appName("pdforensics-verdict").getOrCreate()
        session.apply_rules_conf(spark)
        try:
            v = engine.spark_verdict(args.parquet, opts, spark=spark)
        finally:
            spark.stop()
    except PdfError as exc:
        print(f"pdforensics: {exc}", file=sys.stderr)
        return exc.exit_code
    text = json.dumps(v.to_json(), indent=2) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
