"""A DuckDB database's tables as Parquet, registered as Spark temporary views.

The tables are read from the database (`duckdb_tables()`), not named here: the stored shape
may change. DuckDB writes UBIGINT as Parquet UINT_64, which Spark reads as exact decimal(20,0)
(rooms >= 2^63 stay exact; HUGEINT would become a lossy DOUBLE).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb


def base_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The database's own tables (not temporary ones, not views)."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE NOT temporary AND schema_name = 'main' ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def export_parquet(con: duckdb.DuckDBPyConnection, out: Path) -> dict[str, Path]:
    """Every table as one Parquet file (a folder per table, so a cluster can read it the same way)."""
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for table in base_tables(con):
        folder = out / table
        folder.mkdir(exist_ok=True)
        path = folder / "part-0.parquet"
        con.execute(f"COPY (SELECT * FROM main.\"{table}\") TO '{path}' (FORMAT parquet)")
        paths[table] = folder
    return paths


def register_parquet(spark: Any, tables: dict[str, Path]) -> None:
    """Each table folder as a Spark temporary view of the table's name."""
    for table, folder in tables.items():
        spark.read.parquet(str(folder)).createOrReplaceTempView(table)


def load_database(spark: Any, db: Path, out: Path) -> dict[str, Path]:
    """Export `db`'s tables to `out` and register them in `spark`; returns the table folders."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = export_parquet(con, out)
    finally:
        con.close()
    register_parquet(spark, tables)
    return tables
