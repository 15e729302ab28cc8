"""Fleets: the lines and events of one prefill instance, for a judgement of its own.

A deployment of several prefill and decode instances is judged per prefill instance (a prefill
host), and the window's verdict is the worst of them: one healthy prefill must not hide a pinned
one, and builds (watchdog or not, its timeout) differ across a fleet. Which rows belong to an
instance is a rule, so it lives in SQL (`queries/views/08_instances.sql`); this module only puts
that scope in front of the same views, on a connection of its own: temporary tables `lines` and
`events` of the instance's rows win name resolution over the stored tables, and the summaries
folded at ingest (rooms, per-second counts: folded across instances) are shadowed empty, so the
views recompute what they need from the scoped rows (fold.py: the summaries only make a verdict
faster, never different).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import duckdb

# Folded at ingest over every instance's lines: shadowed empty inside a scope.
SUMMARIES = ("rooms", "line_seconds", "event_seconds")


def prefill_instances(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The prefill hosts the window holds lines of (the `context` the caller has computed)."""
    rows = con.execute("SELECT DISTINCT unnest(prefill_hosts) AS h FROM context ORDER BY h").fetchall()
    return [r[0] for r in rows]


# The other prefills' sides of the rooms `host` shares with them, on `host`'s clock (the scope's
# reference): read on the caller's connection, which sees the whole file.
_FOREIGN_SIDES = """
SELECT list(s) FROM (
    SELECT bootstrap_room, host, recv_t + (SELECT coalesce(max(offset_us), 0) FROM host_offsets WHERE host = $1)
        AS recv_t, addresses
    FROM shared_prefill_sides
    WHERE host <> $1 AND bootstrap_room IN (SELECT bootstrap_room FROM shared_prefill_sides WHERE host = $1)
) AS s
"""
FOREIGN_SIDES_TYPE = "STRUCT(bootstrap_room UBIGINT, host VARCHAR, recv_t BIGINT, addresses VARCHAR[])[]"


@contextmanager
def instance_scope(
    con: duckdb.DuckDBPyConnection,
    host: str,
    catalog: str,
    ensure_views: Callable[[duckdb.DuckDBPyConnection], None],
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the same database on which the views see only `host`'s scope.

    Session variables and temporary tables are per connection in DuckDB, so the caller's own
    (its window, its materialised views) are untouched; set the views' options on the one yielded.
    `catalog` holds the stored tables; `ensure_views` makes the views available on the connection
    yielded (temporary views are per connection too). `con` must have the views too: the rooms
    `host` shares with other prefills are read on it, where their lines are not hidden.
    """
    foreign = con.execute(_FOREIGN_SIDES, [host]).fetchone()[0]
    cur = con.cursor()
    try:
        ensure_views(cur)
        cur.execute("SET VARIABLE pdf_instance = ?", [host])
        if foreign:
            cur.execute(f"SET VARIABLE pdf_foreign_sides = ?::{FOREIGN_SIDES_TYPE}", [foreign])
        # lines first: instance_events reads the stored events, which the temporary table then hides
        for name in ("lines", "events"):
            cur.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM instance_{name}')
        stored = {
            r[0]
            for r in cur.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND NOT temporary", [catalog]
            ).fetchall()
        }
        for name in SUMMARIES:
            if name in stored:
                cur.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{catalog}".main."{name}" LIMIT 0')
        cur.execute(
            f"""CREATE TEMP TABLE meta AS SELECT * FROM "{catalog}".main.meta WHERE key <> 'folded_upto'"""
        )
        yield cur
    finally:
        cur.close()
