"""Runs the translated views on Spark, in dependency order, over a DuckDB database's tables.

    spark = session.local_session()
    views = install(spark, db, parquet_dir)     # tables -> Parquet -> temp views; the rules on top
    rows = spark.sql("SELECT * FROM requests").collect()

Results are compared with DuckDB's by `canonical()`: decimals (rooms, Spark's decimal(20,0)) as
ints, structs as dicts, lists kept in order (an ordered list() is compared as a list).
"""

from __future__ import annotations

import decimal
import math
from pathlib import Path
from typing import Any

import duckdb

from pdforensics import verdict
from pdforensics.spark import load, translate


def params_of(opts: verdict.VerdictOptions | None) -> translate.Params:
    """The getvariable() values DuckDB's verdict sets (pdforensics.verdict), for Spark literals."""
    if opts is None:
        return {}
    out: translate.Params = {
        "pdf_watchdog_timeout_s": opts.watchdog_timeout_s,
        "pdf_grace_s": opts.grace_s,
        "pdf_since_us": opts.since_us,
        "pdf_until_us": opts.until_us,
        "pdf_env_timeout_s": opts.env_timeout_s,
        "pdf_env_unit": opts.env_unit,
    }
    return {k: v for k, v in out.items() if v is not None}


_TRANSLATED: dict[tuple, tuple[list[translate.Translated], dict[str, str]]] = {}


def translate_for(db: Path, params: translate.Params) -> tuple[list[translate.Translated], dict[str, str]]:
    """The views translated against `db`'s schema (kept per schema and parameters: translating
    binds every star in DuckDB, ~20 s)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        shape = tuple(
            con.execute(
                "SELECT table_name, column_name, data_type FROM duckdb_columns() "
                "WHERE schema_name = 'main' AND NOT internal ORDER BY ALL"
            ).fetchall()
        )
        key = (shape, tuple(sorted(params.items())), translate.views_text())
        if key not in _TRANSLATED:
            verdict.install_views(con, temporary=True)
            _TRANSLATED[key] = translate.translate_all(con, params)
        done, failed = _TRANSLATED[key]
        return list(done), dict(failed)
    finally:
        con.close()


def reset(spark: Any) -> None:
    """Forget every temporary view and cached step of an earlier database."""
    spark.catalog.clearCache()
    for t in spark.catalog.listTables():
        if t.isTemporary:
            spark.catalog.dropTempView(t.name)


def install(
    spark: Any, db: Path, parquet_dir: Path, params: translate.Params | None = None
) -> dict[str, str]:
    """Load `db`'s tables into Spark and create every translated view; returns the views that are
    not portable (translation or Spark's analysis failed), each with its reason."""
    reset(spark)
    load.load_database(spark, db, parquet_dir)
    translated, failed = translate_for(db, params or {})
    for t in translated:
        blocked = [d for d in t.deps if d in failed]
        if blocked:
            failed[t.name] = f"reads {', '.join(blocked)}, not portable"
            continue
        try:
            for name, select in t.steps:
                # a checkpoint cuts the lineage: the next step analyses a leaf, not the stack
                spark.sql(select).localCheckpoint(eager=True).createOrReplaceTempView(name)
        except Exception as exc:  # Spark's analysis errors come as several py4j/pyspark types
            failed[t.name] = f"Spark, step {name}: " + str(exc).strip().splitlines()[0][:300]
    return failed


# ----------------------------------------------------------------------------- comparing


def canonical(value: Any) -> Any:
    """One form for both engines' values."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 9)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if hasattr(value, "asDict"):
        return {k: canonical(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    return value


def sort_key(row: Any) -> str:
    return repr(row)


def duckdb_rows(con: duckdb.DuckDBPyConnection, view: str) -> tuple[list[str], list[dict[str, Any]]]:
    rel = con.sql(f'SELECT * FROM "{view}"')
    cols = list(rel.columns)
    return cols, [dict(zip(cols, (canonical(v) for v in r), strict=True)) for r in rel.fetchall()]


def spark_rows(spark: Any, view: str) -> tuple[list[str], list[dict[str, Any]]]:
    df = spark.table(view)
    cols = list(df.columns)
    return cols, [dict(zip(cols, (canonical(v) for v in r), strict=True)) for r in df.collect()]
