"""Ingest accounting: every record stored or rejected, nothing twice, whole batches only."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.sources import RecordBatch, Selection, Window
from pdforensics.sources.detect import open_file_source
from pdforensics.sources.journal import JournalSource

SCENARIO = "decode_restart_watchdog_fires"  # two hosts, TP ranks, watchdog lines, a restart
ALL = Selection(units=("*",))


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def fixture() -> Path:
    return fixtures_dir() / SCENARIO


def export_entries(path: Path) -> int:
    return sum(1 for line in path.read_bytes().split(b"\n") if line.startswith(b"__REALTIME_TIMESTAMP="))


def run(db: Path, sources: list, catalog, selection: Selection = ALL):  # type: ignore[no-untyped-def]
    return ingest(db, sources, selection, catalog, views=False)


def stored_lines(db: Path) -> pl.DataFrame:
    con = store.open_db(db, read_only=True)
    try:
        return store.query_pl(con, "SELECT ts_us, host, unit, message, event FROM lines ORDER BY ALL")
    finally:
        con.close()


def test_every_record_is_stored_once(tmp_path: Path, fixture: Path, catalog) -> None:
    db = tmp_path / "a.duckdb"
    export = fixture / "journal.export"
    first = run(db, [open_file_source(export)], catalog)
    assert first.records == export_entries(export)
    assert first.stored == first.records and first.rejected == 0 and first.duplicates == 0
    again = run(db, [open_file_source(export)], catalog)
    assert (again.records, again.stored, again.duplicates) == (first.records, 0, first.records)
    con = store.open_db(db, read_only=True)
    assert con.execute("SELECT count(*) FROM lines").fetchall() == [(first.records,)]
    assert con.execute("SELECT count(*), count(DISTINCT line_id) FROM lines").fetchall() == [
        (first.records, first.records)
    ]
    runs = con.execute("SELECT ingest_id, stored, duplicates, status FROM ingests ORDER BY 1").fetchall()
    con.close()
    assert runs == [(1, first.records, 0, "complete"), (2, 0, first.records, "complete")]


def test_export_json_and_journal_give_the_same_lines(
    tmp_path: Path, fixture: Path, catalog, make_journal
) -> None:
    journal = make_journal((fixture / "journal.export").read_bytes(), "incident.journal")
    dbs = {}
    for name, source in {
        "export": open_file_source(fixture / "journal.export"),
        "json": open_file_source(fixture / "journal.json"),
        "journal": JournalSource("files", [journal]),
        "journalctl": JournalSource("files", [journal], force_journalctl=True),
    }.items():
        dbs[name] = tmp_path / f"{name}.duckdb"
        run(dbs[name], [source], catalog)
    reference = stored_lines(dbs["export"])
    assert reference.height == export_entries(fixture / "journal.export")
    for name in ("json", "journal", "journalctl"):
        assert stored_lines(dbs[name]).equals(reference), name


def test_plain_files_match_the_journal_events(tmp_path: Path, fixture: Path, catalog) -> None:
    plain = sorted((fixture / "plain").glob("*.log"))
    assert plain
    summary = run(tmp_path / "p.duckdb", [open_file_source(p) for p in plain], catalog)
    assert summary.stored == sum(len(p.read_bytes().splitlines()) for p in plain)
    con = store.open_db(tmp_path / "p.duckdb", read_only=True)
    fired = con.execute("SELECT count(*) FROM events WHERE event = 'watchdog_fired'").fetchall()[0][0]
    con.close()
    expected = json.loads((fixture / "expected.json").read_text())
    assert fired >= sum(r["class"] == "watchdog_fired" for r in expected["requests"])


def test_gzip_input(tmp_path: Path, fixture: Path, catalog) -> None:
    gz = tmp_path / "journal.json.gz"
    gz.write_bytes(gzip.compress((fixture / "journal.json").read_bytes()))
    summary = run(tmp_path / "g.duckdb", [open_file_source(gz)], catalog)
    assert summary.stored == export_entries(fixture / "journal.export")


def test_truncated_export_counts_rejects(tmp_path: Path, fixture: Path, catalog) -> None:
    text = (fixture / "journal.export").read_bytes()
    cut = tmp_path / "cut.export"
    cut.write_bytes(text[: len(text) // 2] + b"\n__REALTIME_TIMESTAMP=17\nMESSAGE")  # ends mid-entry
    summary = run(tmp_path / "c.duckdb", [open_file_source(cut)], catalog)
    assert summary.rejected >= 1
    assert summary.stored > 0
    assert sum(summary.rejects_by_reason.values()) == summary.rejected


def test_window_applies_to_plain_files_after_parsing(tmp_path: Path, fixture: Path, catalog) -> None:
    plain = sorted((fixture / "plain").glob("*.log"))
    total = sum(len(p.read_bytes().splitlines()) for p in plain)
    everything = run(tmp_path / "all.duckdb", [open_file_source(p) for p in plain], catalog)
    assert everything.stored == total
    times = stored_lines(tmp_path / "all.duckdb")["ts_us"]
    since = (times.min() + times.max()) // 2  # type: ignore[operator]
    summary = run(tmp_path / "w.duckdb", [open_file_source(p) for p in plain], catalog,
                  Selection(window=Window(since_us=since), units=("*",)))  # fmt: skip
    assert 0 < summary.skipped < total
    assert summary.stored + summary.skipped == total
    lines = stored_lines(tmp_path / "w.duckdb")
    assert lines.filter(pl.col("ts_us") < since - 1_000_000).height == 0


class _Dying:
    """A source that yields real batches, then fails: an interrupted ingest."""

    label = "dying"
    reader = "test"

    def __init__(self, inner, fail_after: int) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.fail_after = fail_after

    def batches(self, selection: Selection, batch_size: int = 100_000) -> Iterator[RecordBatch]:
        for i, batch in enumerate(self.inner.batches(selection, batch_size)):
            if i == self.fail_after:
                raise OSError("disk went away")
            yield batch


def test_interrupted_ingest_keeps_whole_batches_and_resumes(tmp_path: Path, fixture: Path, catalog) -> None:
    export = fixture / "journal.export"
    clean_db, db = tmp_path / "clean.duckdb", tmp_path / "broken.duckdb"
    run(clean_db, [open_file_source(export)], catalog)
    with pytest.raises(OSError, match="disk went away"):
        ingest(db, [_Dying(open_file_source(export), 2)], ALL, catalog, batch_size=100, views=False)
    con = store.open_db(db, read_only=True)
    assert con.execute("SELECT count(*) FROM lines").fetchall() == [(200,)]
    assert con.execute("SELECT status FROM ingests").fetchall() == [("interrupted",)]
    con.close()
    resumed = ingest(db, [open_file_source(export)], ALL, catalog, batch_size=100, views=False)
    assert resumed.duplicates == 200
    assert stored_lines(db).equals(stored_lines(clean_db))


def test_every_real_log_ingests(tmp_path: Path, real_logs_dir: Path, catalog) -> None:
    files = sorted(real_logs_dir.glob("*.log"))
    summary = run(tmp_path / "r.duckdb", [open_file_source(f) for f in files], catalog)
    total = sum(len(f.read_bytes().splitlines()) for f in files)
    assert summary.stored + summary.rejected == total
    con = store.open_db(tmp_path / "r.duckdb", read_only=True)
    rooms = con.execute(
        "SELECT count(*) FROM lines l JOIN events e USING (line_id) "
        "WHERE regexp_matches(l.message, 'bootstrap_room=\\d+') "
        "AND e.bootstrap_room = TRY_CAST(regexp_extract(l.message, 'bootstrap_room=(\\d+)', 1) AS UBIGINT)"
    ).fetchall()[0][0]
    with_room = con.execute(
        "SELECT count(*) FROM lines WHERE regexp_matches(message, 'bootstrap_room=\\d+')"
    ).fetchall()[0][0]
    con.close()
    assert with_room > 10 and rooms == with_room
