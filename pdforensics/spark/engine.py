"""`verdict --engine spark`: the translated rules on Spark over a Parquet directory, answered by
the same code as DuckDB's verdict.

    tables = read_parquet_dir(spark, DIR)          # {table: DataFrame}, the ingest's layout
    v = spark_verdict(DIR, opts)                   # the rules on Spark; each prefill instance's too
    # answer(spark, tables, schema, params): ANSWER_RELATIONS as tables of an in-memory DuckDB,
    # read by verdict.verdict_from_relations, the code DuckDB's verdict uses

The layout (`ingest --parquet DIR`): `DIR/lines` and `DIR/events` hive-partitioned by
`pdf_host`/`pdf_hour` (dropped on reading: every file keeps all the table's columns), every other
table `DIR/<table>/part-0.parquet`. `run_views` takes any DataFrames registered under the base
tables' names, so the same views can run over a scoped subset of the rows.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import duckdb

from pdforensics import fleet, store, verdict
from pdforensics.errors import EngineError, SourceError
from pdforensics.spark import session

# pdforensics.spark.run / translate import sqlglot (the `spark` extra): imported where used, so
# `--engine duckdb --parquet` works without it

PARTITION_COLUMNS = ("pdf_host", "pdf_hour")


def _partitioned(folder: Path) -> bool:
    return any(p.is_dir() and p.name.startswith(f"{PARTITION_COLUMNS[0]}=") for p in folder.iterdir())


def table_folders(root: Path) -> dict[str, Path]:
    """Each table the directory holds -> its folder (a folder with Parquet files in it or below)."""
    if not root.is_dir():
        raise SourceError(f"{root}: not a directory (give the folder `ingest --parquet` wrote)")
    out = {
        d.name: d
        for d in sorted(root.iterdir())
        if d.is_dir() and next(d.rglob("*.parquet"), None) is not None
    }
    if not out:
        raise SourceError(f"{root}: no Parquet tables in it (give the folder `ingest --parquet` wrote)")
    return out


def _table_queries(root: Path) -> dict[str, str]:
    """Each table of the directory -> a DuckDB query giving it back (partition columns dropped)."""
    out: dict[str, str] = {}
    for name, folder in table_folders(root).items():
        if _partitioned(folder):
            src = f"read_parquet('{folder}/**/*.parquet', hive_partitioning = true)"
            out[name] = f"SELECT * EXCLUDE ({', '.join(PARTITION_COLUMNS)}) FROM {src}"
        else:
            out[name] = f"SELECT * FROM read_parquet('{folder}/*.parquet')"
    return out


def duckdb_schema_of(root: Path, rows: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB database with the directory's tables in their stored types (DuckDB
    reads its own UINT_64 rooms back as UBIGINT), empty (what the translation binds against)
    unless `rows`."""
    con = duckdb.connect(":memory:")
    store.plan_views_fast(con)
    for name, sql in _table_queries(root).items():
        try:
            con.execute(f'CREATE TABLE "{name}" AS {sql}' + ("" if rows else " LIMIT 0"))
        except duckdb.Error as exc:
            raise SourceError(f"{root / name}: not readable as Parquet: {str(exc).splitlines()[0]}") from None
    return con


def read_parquet_dir(spark: Any, root: Path) -> dict[str, Any]:
    """Each table of the directory as a Spark DataFrame of exactly the stored columns."""
    out: dict[str, Any] = {}
    for name, folder in table_folders(root).items():
        df = spark.read.parquet(str(folder))
        if _partitioned(folder):
            df = df.drop(*PARTITION_COLUMNS)
        out[name] = df
    return out


def run_views(
    spark: Any,
    tables: dict[str, Any],
    schema: duckdb.DuckDBPyConnection,
    params: dict[str, Any],
    wanted: tuple[str, ...] | None = None,
) -> dict[str, str]:
    """Register `tables` under their names and create the translated views' steps on top (every
    view, or only those `wanted` reads); returns the views that failed, with the reason. `schema`:
    a DuckDB database of the tables' shape (the translation binds the views' stars against it)."""
    from pdforensics.spark import run

    run.reset(spark)
    for name, df in tables.items():
        df.createOrReplaceTempView(name)
    translated, failed = run.translate_con(schema, params)
    if wanted is not None:
        translated = run.needed_for(translated, wanted)
    return run.create_steps(spark, translated, failed)


def to_duckdb(
    spark: Any, names: tuple[str, ...], schema: duckdb.DuckDBPyConnection
) -> duckdb.DuckDBPyConnection:
    """The Spark relations `names` as tables of an in-memory DuckDB connection, each column cast to
    the type DuckDB's own view has (`schema` has the views installed): rooms, Spark's
    decimal(20,0), come back as UBIGINT, inside lists and structs too."""
    con = duckdb.connect(":memory:")
    for name in names:
        types = schema.execute(f'DESCRIBE SELECT * FROM "{name}"').fetchall()
        data = spark.table(name).toArrow()
        con.register("__spark_rows", data)
        cols = ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t, *_ in types)
        con.execute(f'CREATE TABLE "{name}" AS SELECT {cols} FROM __spark_rows')
        con.unregister("__spark_rows")
    return con


def answer(
    spark: Any, tables: dict[str, Any], schema: duckdb.DuckDBPyConnection, params: dict[str, Any]
) -> duckdb.DuckDBPyConnection:
    """The rules on Spark over `tables`; the answer's relations in an in-memory DuckDB.
    `schema`: the tables' shape with the views installed (see `_schema`)."""
    # only what the answer reads: half of the views (the drill-down's, the scoping's) are not
    wanted = (*verdict.ANSWER_RELATIONS, "context")
    failed = run_views(spark, tables, schema, params, wanted)
    missing = [n for n in wanted if n in failed]
    if missing:
        raise EngineError(f"Spark could not run the view {missing[0]}: {failed[missing[0]]}")
    return to_duckdb(spark, verdict.ANSWER_RELATIONS, schema)


def _schema(root: Path) -> duckdb.DuckDBPyConnection:
    schema = duckdb_schema_of(root)
    try:
        verdict.install_views(schema, temporary=True)
    except Exception as exc:
        schema.close()
        raise SourceError(f"{root}: not the tables of a pdforensics database ({exc})") from None
    return schema


# The views that give an instance its rows (08_instances.sql); the summaries folded over every
# instance are shadowed empty as pdforensics.fleet does (fleet.SUMMARIES).
_SCOPE_VIEWS = ("prefill_instances", "instance_requests", "instance_events", "instance_lines")


def _scoped_tables(
    spark: Any, tables: dict[str, Any], schema: duckdb.DuckDBPyConnection, host: str, work: Path
) -> dict[str, Any]:
    """The tables as `host`'s instance sees them: the same SQL (08_instances.sql) the DuckDB path
    scopes with, run on Spark, each result checkpointed before it takes the base table's name."""
    from pdforensics.spark import run

    run.reset(spark)
    for name, df in tables.items():
        df.createOrReplaceTempView(name)
    translated, failed = run.translate_con(schema, {"pdf_instance": host})
    wanted = [t for t in translated if t.name in _SCOPE_VIEWS]
    failed = run.create_steps(spark, wanted, {k: v for k, v in failed.items() if k in _SCOPE_VIEWS})
    if failed:
        name = next(iter(failed))
        raise EngineError(f"Spark could not run the view {name}: {failed[name]}")
    # written out and read back: a checkpointed result under a base table's name made Spark 4.3's
    # planner fail on later steps ("key not found: host#0"); a Parquet scan is a clean leaf
    scoped = dict(tables)
    for name, view in (("lines", "instance_lines"), ("events", "instance_events")):
        scoped[name] = _leaf(spark, spark.table(view), work / f"{host_dir(host)}-{name}")
    scoped["meta"] = _leaf(
        spark, tables["meta"].where("key <> 'folded_upto'"), work / f"{host_dir(host)}-meta"
    )
    for name in fleet.SUMMARIES:
        if name in tables:
            scoped[name] = spark.createDataFrame([], tables[name].schema)
    return scoped


def host_dir(host: str) -> str:
    return "host-" + "".join(c if c.isalnum() or c in "-_." else f"%{ord(c):02X}" for c in host)


def _leaf(spark: Any, df: Any, path: Path) -> Any:
    df.write.mode("overwrite").parquet(str(path))
    return spark.read.parquet(str(path))


def _judge_on_spark(
    spark: Any, tables: dict[str, Any], schema: duckdb.DuckDBPyConnection, work: Path
) -> verdict.InstanceJudge:
    from pdforensics.spark import run

    def judge(host: str, opts: verdict.VerdictOptions, fleet_vars: dict[str, Any]) -> verdict.Verdict:
        scoped = _scoped_tables(spark, tables, schema, host, work)
        con = answer(spark, scoped, schema, {**run.params_of(opts), **fleet_vars, "pdf_instance": host})
        try:
            return verdict.verdict_from_relations(con)
        finally:
            con.close()

    return judge


def spark_verdict(root: Path, opts: verdict.VerdictOptions, spark: Any | None = None) -> verdict.Verdict:
    """The window's verdict computed on Spark (a local session unless one is given or active), one
    judgement per prefill instance as on DuckDB (verdict.judged_per_instance)."""
    why = session.spark_available()
    if why:
        raise EngineError(f"--engine spark: {why}")
    table_folders(root)  # a bad directory fails before the JVM starts
    own = None
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            try:
                spark = own = session.local_session()
            except Exception as exc:
                raise EngineError(
                    f"--engine spark: Spark did not start: {str(exc).strip().splitlines()[0]}"
                ) from None
    from pdforensics.spark import run

    schema = _schema(root)
    verdict.apply_options(schema, opts)
    try:
        tables = read_parquet_dir(spark, root)
        con = answer(spark, tables, schema, run.params_of(opts))
        try:
            whole = verdict.verdict_from_relations(con)
        finally:
            con.close()
        hosts = sorted(
            {h for row in spark.sql("SELECT prefill_hosts FROM context").collect() for h in row[0] or []}
        )
        with tempfile.TemporaryDirectory(prefix="pdforensics-spark-") as work:
            judge = _judge_on_spark(spark, tables, schema, Path(work))
            return verdict.judged_per_instance(whole, hosts, opts, judge)
    finally:
        schema.close()
        if own is not None:
            own.stop()


def duckdb_verdict(root: Path, opts: verdict.VerdictOptions) -> verdict.Verdict:
    """The same verdict by DuckDB over the Parquet directory, its tables read into an in-memory
    database of the stored schema (keys and all: the views' install records itself in `meta`).
    Read in, not queried in place: DuckDB 2.0.1 fails some window queries run straight on
    hive-partitioned Parquet (shared/spark-feasibility.md)."""

    con = duckdb.connect(":memory:")
    store.plan_views_fast(con)
    try:
        store.create_schema(con)
        schema = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        for name, sql in _table_queries(root).items():
            try:
                if name in schema:
                    con.execute(f'DELETE FROM "{name}"')
                    con.execute(f'INSERT INTO "{name}" BY NAME {sql}')
                else:
                    con.execute(f'CREATE TABLE "{name}" AS {sql}')
            except duckdb.Error as exc:
                raise SourceError(
                    f"{root / name}: not readable as this table: {str(exc).splitlines()[0]}"
                ) from None
        return verdict.compute_verdict(con, opts)
    finally:
        con.close()
