"""What the exporters share: which relations exist, the window, engine instances."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb


def has_relation(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
    ).fetchone()
    return bool(row and row[0])


def has_column(con: duckdb.DuckDBPyConnection, relation: str, column: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = ? AND column_name = ?",
        [relation, column],
    ).fetchone()
    return bool(row and row[0])


def relations(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(name, 'table'|'view') of every table and view a user sees, tables first."""
    # The database's own relations win over temporary ones of the same name (materialised views).
    rows = con.execute(
        """SELECT table_name, CASE WHEN table_type = 'VIEW' THEN 'view' ELSE 'table' END AS kind
           FROM information_schema.tables
           WHERE table_schema = 'main'
           QUALIFY row_number() OVER (
               PARTITION BY table_name ORDER BY (table_catalog = current_database()) DESC) = 1
           ORDER BY kind, table_name"""
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> Any:
    row = con.execute(sql, params or []).fetchone()
    return row[0] if row else None


def events_rel(con: duckdb.DuckDBPyConnection) -> str:
    """Window events on the reference clock (`evt`, with t_us) when the views exist, else all events."""
    if has_relation(con, "evt"):
        return "evt"
    return "(SELECT *, ts_us AS t_us FROM events)"


def window_t(con: duckdb.DuckDBPyConnection) -> tuple[int | None, int | None]:
    """The window on the reference clock: the views' `clock_window`, else the span of the lines."""
    if has_relation(con, "clock_window"):
        row = con.execute("SELECT start_t, end_t FROM clock_window").fetchone()
    else:
        row = con.execute("SELECT min(ts_us), max(ts_us) FROM lines").fetchone()
    if not row:
        return None, None
    return row[0], row[1]


@dataclass(frozen=True)
class Instance:
    """One engine instance (an engine on a host): a process in Perfetto, a resource in OTLP."""

    key: tuple[str, str]  # (host, engine)
    index: int  # 1-based, stable: prefill hosts first, then decode, then the rest
    units: str

    @property
    def host(self) -> str:
        return self.key[0]

    @property
    def engine(self) -> str:
        return self.key[1]

    @property
    def name(self) -> str:
        where = self.host or "unknown host"
        return f"{self.engine} {where}" + (f" ({self.units})" if self.units else "")


def instances(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], Instance]:
    rows = con.execute(
        """SELECT coalesce(host, '') AS host, engine, string_agg(DISTINCT unit, ', ' ORDER BY unit) AS units
           FROM lines
           WHERE engine IN ('prefill', 'decode', 'router')
           GROUP BY 1, 2
           ORDER BY CASE engine WHEN 'prefill' THEN 0 WHEN 'decode' THEN 1 ELSE 2 END, 1"""
    ).fetchall()
    return {
        (host, engine): Instance((host, engine), i, units or "")
        for i, (host, engine, units) in enumerate(rows, start=1)
    }
