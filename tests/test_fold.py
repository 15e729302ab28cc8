"""The summaries folded at ingest answer exactly what aggregating the lines answers.

`room_facts` reads a room's row from `rooms` where it can and aggregates the room's lines where it
cannot (lines stored after the fold, untimed lines, a side on two hosts, a window cutting a side);
`context` takes whole seconds from `line_seconds`/`event_seconds` and groups the rest from the
lines. Forcing the line path (empty summaries, `meta.folded_upto` = 0: nothing folded) must give the
same rows, for every simulated incident, whole and through windows that cut requests in two.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from pdforensics import fold, store, verdict
from pdforensics.catalog import load_catalog
from pdforensics.errors import DatabaseError
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source

SECOND_SUMS = (
    """SELECT host, engine, sec, invocation_id, pid, own, min(lo_us), max(hi_us), sum(n_lines), sum(n_recognised),
           sum(n_parse_errors), sum(n_other_lines), sum(n_continuation) FROM line_seconds GROUP BY ALL ORDER BY ALL""",
    "SELECT host, engine, event, sec, max(hi_us), sum(n_received) FROM event_seconds GROUP BY ALL ORDER BY ALL",
)
SCENARIOS = sorted(p.name for p in fixtures_dir().iterdir() if (p / "expected.json").is_file())


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def ingest_json(db: Path, scenario: str, catalog, batch_size: int | None = None) -> None:
    kw = {"batch_size": batch_size} if batch_size else {}
    ingest(db, [open_file_source(fixtures_dir() / scenario / "journal.json")], Selection(), catalog, **kw)


def lines_only_copy(db: Path, folder: Path) -> Path:
    """A copy of `db` where nothing counts as folded (every room and second from the lines)."""
    copy = folder / (db.stem + "-lines.duckdb")
    shutil.copy(db, copy)
    con = duckdb.connect(str(copy))
    for table in ("rooms", "line_seconds", "event_seconds"):
        con.execute(f"DELETE FROM {table}")
    con.execute("UPDATE meta SET value = '0' WHERE key = ?", [fold.UPTO_KEY])
    con.close()
    return copy


def facts_for(db: Path, windows: list[verdict.VerdictOptions]) -> list[tuple[list, list]]:
    """room_facts and context as the views compute them, for each options in turn (one connection)."""
    con = store.open_db(db, read_only=True)
    try:
        verdict.ensure_views(con)
        out = []
        for opts in windows:
            verdict.apply_options(con, opts)
            # context's rows once (room_facts reads it several times), never kept for another reader
            with verdict.materialised(con, ("context",), cache=False):
                rooms = con.execute("SELECT * FROM room_facts ORDER BY bootstrap_room, holder").fetchall()
                out.append((rooms, con.execute("SELECT * FROM context").fetchall()))
        return out
    finally:
        con.close()


def facts(db: Path, opts: verdict.VerdictOptions, lines_only: bool = False) -> tuple[list, list]:
    """room_facts and context; `lines_only`: on a copy beside `db` where nothing counts as folded."""
    return facts_for(lines_only_copy(db, db.parent) if lines_only else db, [opts])[0]


def span(db: Path) -> tuple[int, int]:
    con = duckdb.connect(str(db), read_only=True)
    row = con.execute("SELECT min(ts_us), max(ts_us) FROM events").fetchone()
    con.close()
    assert row and row[0] is not None
    return int(row[0]), int(row[1])


def folded_share(db: Path, opts: verdict.VerdictOptions) -> tuple[int, int]:
    """(rooms answered from `rooms`, rooms in room_facts that are one request each): the fast path
    must really be taken. A room two deployments share is judged from its lines (never folded)."""
    con = store.open_db(db, read_only=True)
    try:
        verdict.ensure_views(con)
        verdict.apply_options(con, opts)
        sql = next(p for p in verdict.view_files() if p.name == "04_room_facts.sql").read_text(
            encoding="utf-8"
        )
        body = sql[sql.index("WITH o AS") : sql.index("common_lines AS (")].rstrip().rstrip(",")
        with verdict.materialised(con, ("context",), cache=False):
            folded = con.execute(f"{body} SELECT count(*) FROM folded").fetchone()
            total = con.execute("SELECT count(*) FROM room_facts WHERE holder = ''").fetchone()
        assert folded and total
        return int(folded[0]), int(total[0])
    finally:
        con.close()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_folded_rooms_equal_their_lines(scenario: str, tmp_path: Path, scenario_db) -> None:
    db = scenario_db("json", scenario)  # shared: read only; the lines-only copy is this test's
    whole = verdict.VerdictOptions()
    lo, hi = span(db)
    cut = verdict.VerdictOptions(since_us=lo + (hi - lo) * 2 // 5, until_us=lo + (hi - lo) * 3 // 4)
    got, got_cut = facts_for(db, [whole, cut])
    assert [got, got_cut] == facts_for(lines_only_copy(db, tmp_path), [whole, cut])
    if not got[0]:
        # no line names a bootstrap room (a non-PD server; L0 logs with no failure line): nothing to
        # fold, and the same from the lines
        assert not json.loads((fixtures_dir() / scenario / "expected.json").read_text())["requests"], scenario
        return
    folded, total = folded_share(db, whole)
    shared = sum(1 for row in got[0] if row[1])  # rows of a shared room: judged from its lines
    assert total == len(got[0]) - shared and folded > total // 2, (folded, total, shared)


def test_plain_logs_of_several_hosts_with_skewed_clocks(tmp_path: Path, catalog) -> None:
    db = tmp_path / "plain.duckdb"
    scenario = fixtures_dir() / "multihost_skew"
    hosts = {p.name.split("-")[0] for p in (scenario / "plain").glob("*.log")}
    for log in sorted((scenario / "plain").glob("*.log")):
        host = next(h for h in sorted(hosts, key=len, reverse=True) if log.name.startswith(h + "-"))
        ingest(db, [open_file_source(log, host=host, unit=log.stem[len(host) + 1 :])], Selection(), catalog)
    whole = verdict.VerdictOptions()
    assert facts(db, whole) == facts(db, whole, lines_only=True)
    lo, hi = span(db)
    cut = verdict.VerdictOptions(since_us=lo + (hi - lo) // 3, until_us=hi - (hi - lo) // 3)
    assert facts(db, cut) == facts(db, cut, lines_only=True)


def test_batch_by_batch_folding_equals_folding_everything_at_once(tmp_path: Path, catalog) -> None:
    db = tmp_path / "b.duckdb"
    ingest_json(db, "abort_storm_clean", catalog, batch_size=23)  # rooms cut across many batches
    con = store.open_db(db)
    try:
        by_batch = con.execute("SELECT * FROM rooms ORDER BY bootstrap_room").fetchall()
        seconds = [con.execute(sql).fetchall() for sql in SECOND_SUMS]
        assert fold.is_current(con)
        fold.rebuild(con)
        assert con.execute("SELECT * FROM rooms ORDER BY bootstrap_room").fetchall() == by_batch
        # one row per second at once, partial rows per batch: their sums agree
        assert [con.execute(sql).fetchall() for sql in SECOND_SUMS] == seconds
    finally:
        con.close()
    assert len(by_batch) >= 40


def test_events_stored_around_the_fold_are_read_from_their_lines_then_folded(tmp_path: Path, catalog) -> None:
    db = tmp_path / "s.duckdb"
    ingest_json(db, "healthy", catalog)
    con = store.open_db(db)
    try:
        # another writer's rows (not through store_batch): a copy of a Receive: line, a new room
        con.execute(
            """INSERT INTO events SELECT * REPLACE (line_id + 1000000 AS line_id, 424242::UBIGINT AS bootstrap_room)
               FROM events WHERE event = 'request_received' AND engine = 'prefill' LIMIT 1"""
        )
        assert not fold.is_current(con)
    finally:
        con.close()
    whole = verdict.VerdictOptions()
    got = facts(db, whole)
    assert 424242 in {r[0] for r in got[0]}
    assert got == facts(db, whole, lines_only=True)
    ingest(db, [], Selection(), catalog)  # the next ingest folds everything again
    con = store.open_db(db, read_only=True)
    try:
        assert fold.is_current(con)
        assert con.execute("SELECT count(*) FROM rooms WHERE bootstrap_room = 424242").fetchone() == (1,)
    finally:
        con.close()
    assert facts(db, whole) == got


def test_a_database_of_schema_1_is_migrated_by_a_writer(tmp_path: Path, catalog) -> None:
    db = tmp_path / "old.duckdb"
    ingest_json(db, "healthy", catalog)
    expected = facts(db, verdict.VerdictOptions())
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE rooms")
    con.execute("DELETE FROM meta WHERE key = 'folded_upto'")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(DatabaseError, match="has schema 1; run `pdforensics ingest"):
        store.open_db(db, read_only=True)
    store.open_db(db).close()  # a writer migrates
    con = store.open_db(db, read_only=True)
    try:
        assert fold.is_current(con)
        n_rooms = con.execute("SELECT count(*) FROM rooms").fetchone()
        assert n_rooms and n_rooms[0] == len(expected[0])
    finally:
        con.close()
    assert facts(db, verdict.VerdictOptions()) == expected


def test_views_another_version_installed_are_replaced_or_shadowed(tmp_path: Path, catalog) -> None:
    db = tmp_path / "v.duckdb"
    ingest_json(db, "healthy", catalog)
    con = store.open_db(db, read_only=True)
    want = verdict.compute_verdict(con).to_json()
    con.close()
    con = duckdb.connect(str(db))
    con.execute("CREATE OR REPLACE VIEW verdict AS SELECT 'from another version' AS verdict")
    con.execute("UPDATE meta SET value = 'other' WHERE key = ?", [verdict.VIEWS_KEY])
    con.close()
    con = store.open_db(db, read_only=True)  # read-only: temporary views of this version
    try:
        assert verdict.compute_verdict(con).to_json() == want
    finally:
        con.close()
    con = store.open_db(db)  # a writer installs them
    try:
        verdict.ensure_views(con)
        assert con.execute("SELECT value FROM meta WHERE key = ?", [verdict.VIEWS_KEY]).fetchone() == (
            verdict.views_digest(),
        )
        assert verdict.compute_verdict(con).to_json() == want
    finally:
        con.close()
