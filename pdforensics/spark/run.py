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

from pdforensics import store, verdict
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
    """The views translated against the DuckDB file `db`'s schema (see translate_con)."""
    con = duckdb.connect(str(db), read_only=True)
    store.plan_views_fast(con)
    try:
        return translate_con(con, params)
    finally:
        con.close()


def translate_con(
    con: duckdb.DuckDBPyConnection, params: translate.Params
) -> tuple[list[translate.Translated], dict[str, str]]:
    """The views translated against `con`'s tables. Kept per schema (translating binds every star
    in DuckDB, ~20-50 s here); only the views that read the parameters (`params`) are translated
    again for each set of them. Installs the views on `con` as temporary ones when it needs them."""
    shape = tuple(
        con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() "
            "WHERE schema_name = 'main' AND NOT internal AND database_name = current_database() ORDER BY ALL"
        ).fetchall()
    )
    key = (shape, translate.views_text())
    if key not in _TRANSLATED:
        verdict.install_views(con, temporary=True)
        _TRANSLATED[key] = translate.translate_all(con)
    done, failed = _TRANSLATED[key]
    done, failed = list(done), dict(failed)
    if params:
        views = {v.name for v in translate.read_views()[0] if translate.reads_parameters(v)}
        # no star in them: DuckDB's binder (the installed views) is not needed
        redone, refailed = translate.translate_all(con, params, only=views)
        by_name = {t.name: t for t in redone}
        done = [by_name.get(t.name, t) for t in done if t.name not in refailed]
        failed |= refailed
    return done, failed


def reset(spark: Any) -> None:
    """Forget every temporary view and cached step of an earlier database."""
    spark.catalog.clearCache()
    # SHOW VIEWS, not catalog.listTables(): the latter cannot decode its rows without codegen
    for row in spark.sql("SHOW VIEWS").collect():
        if row["isTemporary"]:
            spark.catalog.dropTempView(row["viewName"])


def install(
    spark: Any, db: Path, parquet_dir: Path, params: translate.Params | None = None
) -> dict[str, str]:
    """Load `db`'s tables into Spark and create every translated view; returns the views that are
    not portable (translation or Spark's analysis failed), each with its reason."""
    reset(spark)
    load.load_database(spark, db, parquet_dir)
    translated, failed = translate_for(db, params or {})
    return create_steps(spark, translated, failed)


def create_steps(
    spark: Any, translated: list[translate.Translated], failed: dict[str, str]
) -> dict[str, str]:
    """Each translated view's steps as checkpointed temporary views, in order; `failed` (the views
    that did not translate) grows by those Spark could not analyse or run, and is returned."""
    failed = dict(failed)
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
