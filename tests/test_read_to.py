"""A window of the data ends where the reading ended, not where the surviving lines end.

Each run records, per source and unit, the latest time it read (`source_stats.read_to_us`: its
last line's time; a live journal read to its end: the moment it was read). When lines read then
are gone from the database later (deleted by hand, a store that lost its tail), the window still
reaches that time, so an engine that went quiet before it shows as a silence instead of the
window shrinking to hide it (tests/test_verdict_property.py deletes lines this way).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from pdforensics import fold, store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest, read_through
from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source
from pdforensics.verdict import VerdictOptions, compute_verdict

SCENARIO = "prefill_goes_silent"  # its decode logs to the window end, its prefill stops earlier


def ingested(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    db = tmp_path / "w.duckdb"
    ingest(db, [open_file_source(fixtures_dir() / SCENARIO / "journal.json")], Selection(), load_catalog())
    return store.open_db(db)


def window_end(con: duckdb.DuckDBPyConnection) -> int:
    compute_verdict(con, VerdictOptions())  # installs the views
    return con.execute("SELECT end_us FROM time_window").fetchone()[0]


def test_each_unit_records_its_last_line_as_read_to(tmp_path: Path) -> None:
    con = ingested(tmp_path)
    got = con.execute(
        "SELECT s.unit, s.read_to_us, max(l.ts_us) FROM source_stats AS s "
        "JOIN lines AS l ON l.unit = s.unit AND l.host = s.host GROUP BY ALL ORDER BY 1"
    ).fetchall()
    assert len(got) == 2 and all(read_to == last for _, read_to, last in got), got


def test_lines_lost_after_the_ingest_do_not_shorten_the_window(tmp_path: Path) -> None:
    con = ingested(tmp_path)
    end = window_end(con)
    decode_last = con.execute("SELECT max(ts_us) FROM lines WHERE engine = 'decode'").fetchone()[0]
    assert end == decode_last
    # the decode's second half disappears from the database
    cut = con.execute("SELECT quantile_disc(ts_us, 0.55) FROM lines WHERE engine = 'decode'").fetchone()[0]
    con.execute("DELETE FROM events WHERE engine = 'decode' AND ts_us >= ?", [cut])
    con.execute("DELETE FROM lines WHERE engine = 'decode' AND ts_us >= ?", [cut])
    fold.rebuild(con)
    assert con.execute("SELECT max(ts_us) FROM lines").fetchone()[0] < end
    assert window_end(con) == end
    v = compute_verdict(con, VerdictOptions())
    assert v.verdict != "nothing_stuck", v.reasons
    assert "prefill logged nothing" in v.reasons[0] or "showed nothing of its queues" in v.reasons[0], (
        v.reasons
    )


def test_a_database_without_read_to_ends_at_its_lines(tmp_path: Path) -> None:
    """Runs stored before schema 4 have no read_to_us: their window is the span of their lines."""
    con = ingested(tmp_path)
    con.execute("UPDATE source_stats SET read_to_us = NULL")
    con.execute("DELETE FROM lines WHERE line_id = (SELECT max(line_id) FROM lines)")
    assert window_end(con) == con.execute("SELECT max(ts_us) FROM lines").fetchone()[0]


def stats(*rows: tuple[str, int | None]) -> pl.DataFrame:
    return pl.DataFrame(
        {"source": [r[0] for r in rows], "read_to_us": [r[1] for r in rows]},
        schema={"source": pl.String, "read_to_us": pl.Int64},
    )


def test_a_live_journal_read_to_its_end_is_read_to_now() -> None:
    got = read_through(
        stats(("journal", 100), ("file:/a.log", 100), ("journal", None)), {"journal": 500}, None
    )
    assert got["read_to_us"].to_list() == [500, 100, 500]


def test_read_to_never_passes_the_windows_until() -> None:
    got = read_through(stats(("journal", 100), ("journal", 450)), {"journal": 500}, until_us=400)
    assert got["read_to_us"].to_list() == [399, 450]  # a line inside is kept as read


def test_nothing_reached_leaves_the_stats_as_they_are() -> None:
    before = stats(("journal", 100))
    assert read_through(before, {}, None).equals(before)
