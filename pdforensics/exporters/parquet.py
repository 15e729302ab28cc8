"""Parquet: every table and view, one file each, for Spark, Trino or DuckDB elsewhere.

DuckDB's own `COPY ... TO` writes them, streaming, so nothing passes through Python.
Views are evaluated with this session's variables (timeout, grace, window): each file's
key-value metadata records them, so a reader knows which settings classified the rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from pdforensics.exporters.common import relations
from pdforensics.store import sql_string


def session_variables(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    rows = con.execute("SELECT name, value FROM duckdb_variables() WHERE name LIKE 'pdf\\_%' ESCAPE '\\'")
    return {name: value for name, value in rows.fetchall()}


def export(con: duckdb.DuckDBPyConnection, out: Path) -> Path:
    out.mkdir(exist_ok=True)
    variables = sql_string(json.dumps(session_variables(con), sort_keys=True))
    for name, kind in relations(con):
        target = sql_string(str(out / f"{name}.parquet"))
        con.execute(
            f'COPY (FROM "{name}") TO {target} (FORMAT parquet, COMPRESSION zstd, '
            f"KV_METADATA {{pdforensics_kind: '{kind}', pdforensics_variables: {variables}}})"
        )
    return out
