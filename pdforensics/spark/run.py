"""Runs the translated views on Spark, in dependency order, over a DuckDB database's tables.

    spark = session.local_session()
    views = install(spark, db, parquet_dir)     # tables -> Parquet -> temp views; the rules on top
    rows = spark.sql("SELECT * FROM requests").collect()

Results are compared with DuckDB's by `canonical()`: decimals (rooms, Spark's decimal(20,0)) as
ints, structs as dicts, lists kept in order (an ordered list() is compared as a list).
"""

from __future__ import annotations

import decimal
import hashlib
import json
import math
import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import duckdb

from pdforensics import judgement, paths, store, verdict
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


Translation = tuple[list[translate.Translated], dict[str, str]]
_TRANSLATED: dict[tuple, Translation] = {}


def translate_for(db: Path, params: translate.Params) -> Translation:
    """The views translated against the DuckDB file `db`'s schema (see translate_con)."""
    con = duckdb.connect(str(db), read_only=True)
    store.plan_views_fast(con)
    try:
        return translate_con(con, params)
    finally:
        con.close()


def translate_con(con: duckdb.DuckDBPyConnection, params: translate.Params) -> Translation:
    """The views translated against `con`'s tables. Kept per schema, in this process and in the
    user's cache (translating binds every star in DuckDB: ~8 s of CPU here, paid by each new process);
    only the views that read the parameters (`params`) are translated again, once for each kind of
    their values (translate.parameter_kinds).
    Installs the views on `con` as temporary ones when it needs them."""
    shape = tuple(
        con.execute(
            "SELECT c.table_name, c.column_name, c.data_type FROM duckdb_columns() AS c "
            "JOIN duckdb_tables() AS t USING (database_name, schema_name, table_name) "
            "WHERE c.schema_name = 'main' AND NOT c.internal AND c.database_name = current_database() "
            "ORDER BY ALL"
        ).fetchall()
    )  # the tables only: the views' columns follow from them and the view files (in the key)
    key = (shape, translate.views_text())

    def translate_every_view() -> Translation:
        verdict.install_views(con, temporary=True)
        return translate.translate_all(con)

    def translate_parameter_views() -> Translation:
        views = {v.name for v in translate.read_views()[0] if translate.reads_parameters(v)}
        return translate.translate_all(con, translate.placeholders(params), only=views)

    done, failed = _kept(key, translate_every_view)
    done, failed = list(done), dict(failed)
    if params:
        # translated once per kind of values, with placeholders that the values then replace
        # (a translation of them is ~2.5 s of CPU here; it was every set of values)
        redone, refailed = _kept((key, translate.parameter_kinds(params)), translate_parameter_views)
        redone = translate.fill_placeholders(redone, params)
        by_name = {t.name: t for t in redone}
        done = [by_name.get(t.name, t) for t in done if t.name not in refailed]
        failed |= refailed
    return done, failed


def _kept(key: tuple, translate_now: Callable[[], Translation]) -> Translation:
    """The translation of `key` kept in this process, else in the user's cache, else made now."""
    if key not in _TRANSLATED:
        _TRANSLATED[key] = _kept_on_disk(repr(key), translate_now)
    return _TRANSLATED[key]


# Files whose code decides a translation, beside the views and the schema in the key.
_TRANSLATING_CODE = ("translate.py",)


def _kept_on_disk(key: str, translate_now: Callable[[], Translation]) -> Translation:
    """`translate_now()`'s result, read from the user's cache when this key (the schema, the view
    files, the parameters, the translating code, sqlglot's and DuckDB's versions) was translated
    before; written there whole (a temporary file renamed into place) otherwise. Keyed, never
    timed: a changed view, option or translator is another file. PDFORENSICS_CACHE=off: no file."""
    import sqlglot

    digest = hashlib.sha256(f"{key}|{sqlglot.__version__}|{duckdb.__version__}".encode())
    for name in _TRANSLATING_CODE:
        digest.update((Path(translate.__file__).parent / name).read_bytes())
    path = paths.user_cache_dir() / f"spark-{digest.hexdigest()[:24]}.json"
    if judgement.enabled():
        with suppress(OSError, ValueError, KeyError, TypeError):
            doc = json.loads(path.read_text(encoding="utf-8"))
            done = [
                translate.Translated(t["name"], [tuple(s) for s in t["steps"]], t["deps"])
                for t in doc["done"]
            ]
            return done, dict(doc["failed"])
    done, failed = translate_now()
    if judgement.enabled():
        doc = {"done": [{"name": t.name, "steps": t.steps, "deps": t.deps} for t in done], "failed": failed}
        with suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, path)
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


def needed_for(translated: list[translate.Translated], names: tuple[str, ...]) -> list[translate.Translated]:
    """The translated views `names` read, directly or through others, with `names` themselves, in
    the translation's (dependency) order: what answering them takes, and no more."""
    deps = {t.name: t.deps for t in translated}
    wanted: set[str] = set()
    todo = [n for n in names if n in deps]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(d for d in deps[name] if d in deps)
    return [t for t in translated if t.name in wanted]


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
