"""Timesketch JSONL: one event per line with `message`, `datetime`, `timestamp_desc`, `timestamp`.

Every stored line becomes one event (with its catalog event's typed fields flattened next
to it), and pdforensics' own findings follow as events of their own data types: each
request's class, each coverage hole, the window's verdict. DuckDB builds each JSON
object (nulls dropped through an RFC 7396 merge patch); Python only writes the text.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from pdforensics.exporters.common import has_column, has_relation
from pdforensics.schema import EVENT_FIELDS
from pdforensics.store import CHUNK_ROWS

ANSI = r"\x1b\[[0-9;]*[A-Za-z]"
ISO = "'%Y-%m-%dT%H:%M:%S.%fZ'"

# Fields whose 64-bit values must survive JavaScript and OpenSearch's dynamic mapping: text.
AS_TEXT = {"bootstrap_room"}


def _iso(expr: str) -> str:
    return f"strftime(make_timestamp({expr}), {ISO})"


def _line_events_sql() -> str:
    fields = ", ".join(
        f"{name}: e.{name}::VARCHAR" if name in AS_TEXT else f"{name}: e.{name}" for name in EVENT_FIELDS
    )
    return f"""
        SELECT json_merge_patch('{{}}', to_json({{
            message: regexp_replace(l.message, '{ANSI}', '', 'g'),
            datetime: {_iso("l.ts_us")},
            timestamp: l.ts_us,
            timestamp_desc: CASE l.ts_origin
                WHEN 'journal' THEN 'Journal Receive Time'
                WHEN 'app' THEN 'Log Prefix Time'
                WHEN 'inherited' THEN 'Time of the Record''s First Line'
                ELSE 'Unknown Time' END,
            data_type: 'sglang:log:line',
            hostname: l.host, unit: l.unit, engine: l.engine, pid: l.pid, invocation_id: l.invocation_id,
            boot_id: l.boot_id, syslog_identifier: l.syslog_identifier, priority: l.priority,
            dp_rank: l.dp_rank, tp_rank: l.tp_rank, app_timestamp: l.app_ts_us,
            event: l.event, entry: l.entry, parse_error: l.parse_error, cont_of: l.cont_of,
            line_id: l.line_id, source: l.source, journal_cursor: l.cursor,
            {fields},
            extra: nullif(e.extra::VARCHAR, '{{}}')
        }}))::VARCHAR
        FROM lines AS l LEFT JOIN events AS e USING (line_id)
        WHERE l.ts_us IS NOT NULL
    """  # no ORDER BY: Timesketch sorts by itself, and sorting 1M+ JSON rows would hold them all


def _finding_sql(
    relation: str, time_col: str, desc: str, data_type: str, message: str, drop: str = ""
) -> str:
    """One event per row of a view: every column of the row, plus Timesketch's required keys."""
    exclude = f" EXCLUDE ({drop})" if drop else ""
    return f"""
        SELECT json_merge_patch('{{}}', to_json(r), to_json({{
            message: {message},
            datetime: {_iso(f"r.{time_col}")},
            timestamp: r.{time_col},
            timestamp_desc: '{desc}',
            data_type: '{data_type}'
        }}))::VARCHAR
        FROM (SELECT *{exclude} FROM {relation}) AS r
        WHERE r.{time_col} IS NOT NULL
        ORDER BY r.{time_col}
    """


def _findings(con: duckdb.DuckDBPyConnection) -> list[str]:
    found = []
    if has_relation(con, "requests"):
        found.append(
            _finding_sql(
                "requests", "first_t", "Request First Seen", "pdforensics:request",
                "format('request {}: {}{}{}', r.room, r.class, "
                "CASE WHEN r.abort_race THEN ', abort race' ELSE '' END, "
                "CASE WHEN r.dwell_s IS NOT NULL THEN format(', dwell {:.1f} s', r.dwell_s) ELSE '' END)",
                drop="bootstrap_room",
            )
        )  # fmt: skip
    if has_relation(con, "holes"):
        found.append(
            _finding_sql("holes", "from_t", "Coverage Hole Start", "pdforensics:hole",
                         "format('hole {}: {}', r.kind, r.detail)")
        )  # fmt: skip
    if has_relation(con, "verdict") and has_column(con, "verdict", "window_end_t"):
        found.append(
            _finding_sql("verdict", "window_end_t", "Window End", "pdforensics:verdict",
                         "format('verdict: {}', r.verdict)")
        )  # fmt: skip
    return found


def export(con: duckdb.DuckDBPyConnection, out: Path) -> Path:
    with out.open("w", encoding="utf-8") as fh:
        for sql in [_line_events_sql(), *_findings(con)]:
            cur = con.execute(sql)
            while chunk := cur.fetchmany(CHUNK_ROWS):
                fh.write("".join(row[0] + "\n" for row in chunk))
    return out
