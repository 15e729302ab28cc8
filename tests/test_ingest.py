"""Ingest accounting: every record stored or rejected, nothing twice, whole batches only."""

from __future__ import annotations

import gzip
import json
import threading
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


def test_plain_lines_outside_the_window_are_read_once(tmp_path: Path, catalog) -> None:
    """Issue 29, item 10: a plain file's lines outside the window are read, parsed and dropped; they
    count as outside the selection, not also as read and selected (`read N records` said the file's
    lines plus those outside the window)."""
    log = tmp_path / "sglang-prefill.log"
    log.write_bytes(_plain_text(3000))
    lines = log.read_bytes().count(b"\n")
    clean_db = tmp_path / "clean.duckdb"
    run(clean_db, [_plain(log)], catalog)
    ts = all_lines(clean_db)["ts_us"].drop_nulls().sort()
    part = run(tmp_path / "w.duckdb", [_plain(log)], catalog,
               Selection(window=Window(since_us=int(ts[ts.len() // 2])), units=("*",)))  # fmt: skip
    assert 0 < part.skipped < lines and part.rejected == 0
    assert part.records + part.skipped == lines, "each line read is counted once"
    assert part.records == part.stored + part.duplicates


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


# ------------------------------------------------------------------ batching and file marks


def test_coalesce_cuts_row_group_batches_and_keeps_counts_and_marks() -> None:
    from pdforensics.batches import coalesce
    from pdforensics.schema import RECORD_SCHEMA
    from pdforensics.sources._common import rejects_frame

    def recs(lo: int, n: int) -> pl.DataFrame:
        return (
            pl.DataFrame({"seq": list(range(lo, lo + n))})
            .select(pl.lit(None, pl.String).alias(c) if c != "seq" else pl.col("seq") for c in RECORD_SCHEMA)
            .cast(RECORD_SCHEMA)
        )  # type: ignore[arg-type]

    inp = [
        RecordBatch(recs(0, 3), rejects_frame([("f", "byte 1", "r", "")]), marks={"k": (3, "-")}),
        RecordBatch(recs(3, 5), skipped=2, marks={"k": (8, "-")}),
        RecordBatch(known_unread=4),
        RecordBatch(recs(8, 7), null_messages=1, marks={"k": (15, "-")}),
        RecordBatch(marks={"k": (15, "99")}),
    ]
    out = list(coalesce(inp, 4))
    assert [b.records.height for b in out] == [4, 4, 4, 3]
    assert pl.concat([b.records for b in out])["seq"].to_list() == list(range(15))
    assert sum(b.rejects.height for b in out) == 1 and sum(b.skipped for b in out) == 2
    assert sum(b.null_messages for b in out) == 1 and sum(b.known_unread for b in out) == 4
    # A mark goes out only with (or after) the batch holding the last record it covers.
    assert [b.marks for b in out] == [{"k": (3, "-")}, {"k": (8, "-")}, {}, {"k": (15, "99")}]


def test_coalesce_cuts_a_batch_of_long_lines_by_its_text() -> None:
    """Long lines (prompts, tracebacks) make a smaller batch: its text reaches the byte cap, not the
    record count; every record goes out once, in order, and a mark with the batch holding its end."""
    from pdforensics.batches import coalesce
    from pdforensics.schema import RECORD_SCHEMA

    def recs(lo: int, n: int, width: int) -> pl.DataFrame:
        return (
            pl.DataFrame({"seq": list(range(lo, lo + n)), "message": ["x" * width] * n})
            .select(pl.col(c) if c in ("seq", "message") else pl.lit(None).alias(c) for c in RECORD_SCHEMA)
            .cast(
                RECORD_SCHEMA  # type: ignore[arg-type]
            )
        )

    inp = [
        RecordBatch(recs(0, 6, 10), marks={"k": (6, "-")}),  # 60 bytes: under both caps
        RecordBatch(recs(6, 4, 100), marks={"k": (10, "-")}),  # the 7th record reaches 100 bytes
        RecordBatch(recs(10, 5, 10), marks={"k": (15, "-")}),
    ]
    out = list(coalesce(inp, 8, max_bytes=100))
    assert [b.records.height for b in out] == [7, 1, 1, 1, 5]  # 100-byte records go out one by one
    assert pl.concat([b.records for b in out])["seq"].to_list() == list(range(15))
    assert [b.marks for b in out] == [{"k": (6, "-")}, {}, {}, {"k": (10, "-")}, {"k": (15, "-")}]
    assert [b.records.height for b in coalesce(inp, 8, max_bytes=None)] == [8, 7]  # records alone


def _plain_text(lines: int) -> bytes:
    """Real plain logs (a traceback included) repeated to `lines` lines or more."""
    logs = sorted(fixtures_dir().glob("watchdog_armed_never_fires/plain/*prefill*.log"))
    logs += sorted(fixtures_dir().glob("*/plain/*prefill*.log"))
    text = b"".join(p.read_bytes() for p in logs)
    return text * (lines // text.count(b"\n") + 1)


def all_lines(db: Path) -> pl.DataFrame:
    """Every stored line; `cont_of` as its head's seq (a resumed run's line_ids may leave gaps)."""
    con = store.open_db(db, read_only=True)
    try:
        return store.query_pl(
            con,
            """SELECT l.* EXCLUDE (ingest_id, line_id, cont_of), h.seq AS cont_of_seq
               FROM lines l LEFT JOIN lines h ON h.line_id = l.cont_of ORDER BY l.line_id""",
        )
    finally:
        con.close()


def _plain(path: Path):  # type: ignore[no-untyped-def]
    from pdforensics.sources.plain import PlainFileSource

    return PlainFileSource(path, unit="sglang-prefill")


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from pdforensics.sources.plain import PlainFileSource

    reads: list[int] = []
    real = PlainFileSource._batch

    def counting(self, buf: bytes, base: int, long: list) -> RecordBatch:  # type: ignore[no-untyped-def]
        reads.append(base)
        return real(self, buf, base, long)

    monkeypatch.setattr(PlainFileSource, "_batch", counting)
    return reads


@pytest.mark.parametrize("compress", [False, True])
def test_an_unchanged_plain_file_is_not_read_again(
    tmp_path: Path, catalog, monkeypatch: pytest.MonkeyPatch, compress: bool
) -> None:
    log = tmp_path / ("sglang-prefill.log.gz" if compress else "sglang-prefill.log")
    text = _plain_text(3000)
    log.write_bytes(gzip.compress(text) if compress else text)
    db = tmp_path / "m.duckdb"
    first = run(db, [_plain(log)], catalog)
    reads = _count_reads(monkeypatch)
    again = run(db, [_plain(log)], catalog)
    assert reads == []
    assert (again.records, again.stored, again.duplicates) == (first.records, 0, first.records)


@pytest.mark.parametrize("compress", [False, True])
def test_an_appended_plain_file_resumes_near_its_mark_and_equals_a_clean_run(
    tmp_path: Path, catalog, monkeypatch: pytest.MonkeyPatch, compress: bool
) -> None:
    text = _plain_text(6000)
    # Cut inside the traceback: the appended part's first lines continue a record stored before.
    tb = text.index(b"Traceback (most recent call last):", len(text) // 2)
    cut = text.index(b"\n", tb + 40) + 1
    log = tmp_path / ("sglang-prefill.log.gz" if compress else "sglang-prefill.log")
    log.write_bytes(gzip.compress(text[:cut]) if compress else text[:cut])
    db = tmp_path / "a.duckdb"
    first = run(db, [_plain(log)], catalog)
    with open(log, "ab") as f:  # gzip: a second member, as `cat a.gz b.gz` or a gzip append makes
        f.write(gzip.compress(text[cut:]) if compress else text[cut:])
    reads = _count_reads(monkeypatch)
    again = run(db, [_plain(log)], catalog)
    assert reads and min(reads) > 0, "the grown file was read from its start"
    clean_db = tmp_path / "clean.duckdb"
    clean = run(clean_db, [_plain(log)], catalog)
    assert again.records == clean.records and first.stored + again.stored == clean.stored
    assert again.duplicates == first.stored
    resumed = all_lines(db)
    assert resumed.equals(all_lines(clean_db))
    tail = resumed.filter(pl.col("seq") >= cut)["cont_of_seq"].drop_nulls()
    assert tail.min() < cut, "the traceback's tail lost its head across the append"


@pytest.mark.parametrize("window", [False, True])
def test_a_small_file_that_grows_is_stored_once(tmp_path: Path, catalog, window: bool) -> None:
    """A file shorter than the head its identity hashes (64 KiB) keeps its identity as it grows
    (issue 29, item 2): ingested, appended to and ingested again, it holds what one ingest of the
    whole file holds, with or without a window (which leaves no resume mark)."""
    whole = _plain_text(1)
    text = whole[: whole.index(b"\n", 20_000) + 1]
    cut = text.index(b"\n", len(text) // 2) + 1
    log = tmp_path / "sglang-prefill.log"
    log.write_bytes(text[:cut])
    db = tmp_path / "g.duckdb"
    sel = Selection(window=Window(since_us=0)) if window else Selection()
    first = ingest(db, [_plain(log)], sel, catalog, tz="UTC", views=False)
    with open(log, "ab") as f:
        f.write(text[cut:])
    again = ingest(db, [_plain(log)], sel, catalog, tz="UTC", views=False)
    clean_db = tmp_path / "clean.duckdb"
    clean = ingest(clean_db, [_plain(log)], sel, catalog, tz="UTC", views=False)
    assert first.stored + again.stored == clean.stored
    grown = all_lines(db)
    assert grown["source_key"].n_unique() == 1  # one file, one identity
    assert grown.drop("source_key").equals(all_lines(clean_db).drop("source_key"))


def test_a_windowed_ingest_leaves_no_mark_and_a_later_full_ingest_stores_the_rest(
    tmp_path: Path, catalog
) -> None:
    log = tmp_path / "sglang-prefill.log"
    log.write_bytes(_plain_text(3000))
    db = tmp_path / "w.duckdb"
    clean_db = tmp_path / "clean.duckdb"
    clean = run(clean_db, [_plain(log)], catalog)
    ts = all_lines(clean_db)["ts_us"].drop_nulls()
    mid = int(ts.sort()[ts.len() // 2])
    part = run(db, [_plain(log)], catalog, Selection(window=Window(since_us=mid), units=("*",)))
    assert 0 < part.stored < clean.stored and part.skipped > 0
    con = store.open_db(db, read_only=True)
    assert con.execute("SELECT count(*) FROM meta WHERE key LIKE 'file_mark:%'").fetchall() == [(0,)]
    con.close()
    rest = run(db, [_plain(log)], catalog)
    assert part.stored + rest.stored == clean.stored
    assert run(db, [_plain(log)], catalog).stored == 0


def test_a_plain_file_that_shrank_is_read_whole(tmp_path: Path, catalog) -> None:
    text = _plain_text(3000)
    log = tmp_path / "sglang-prefill.log"
    log.write_bytes(text)
    db = tmp_path / "s.duckdb"
    first = run(db, [_plain(log)], catalog)
    log.write_bytes(text[: len(text) // 2])  # rewritten in place: same head, so the same key
    again = run(db, [_plain(log)], catalog)
    assert again.stored == 0 and again.records == again.duplicates and 0 < again.records < first.records


def _journal_parts(fixture: Path, times: int = 3) -> tuple[bytes, bytes]:
    """The scenario's export `times` over, cut in two between entries (3 times: ~1,150 entries).

    Repeated entries are identical, and sd_journal shows entries identical across files once:
    parts meant for different files need `times=1`."""
    entries = [e for e in fixture.joinpath("journal.export").read_bytes().split(b"\n\n") if e.strip()] * times
    cut = len(entries) * 2 // 3
    return b"\n\n".join(entries[:cut]) + b"\n\n", b"\n\n".join(entries[cut:]) + b"\n\n"


def _count_journal_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from pdforensics.sources import journal, journalfile

    reads: list[int] = []
    real = journal._raw_frame  # each block the reader (a child process) sends
    real_direct = journalfile.JournalFile.frame  # each block the direct reader gathers

    def counting(cursors, cols):  # type: ignore[no-untyped-def]
        reads.append(len(cursors))
        return real(cursors, cols)

    def counting_direct(self, blk, at=None):  # type: ignore[no-untyped-def]
        out = real_direct(self, blk, at)
        reads.append(out.height)
        return out

    monkeypatch.setattr(journal, "_raw_frame", counting)
    monkeypatch.setattr(journalfile.JournalFile, "frame", counting_direct)
    return reads


@pytest.mark.parametrize("selection", [ALL, Selection(units=("sglang*",))], ids=["all", "sglang"])
def test_a_grown_journal_resumes_near_its_mark_and_equals_a_clean_run(
    tmp_path: Path,
    fixture: Path,
    catalog,
    make_journal,
    monkeypatch: pytest.MonkeyPatch,
    selection: Selection,
) -> None:
    import pdforensics.batches as batches_module

    # where a resume starts reading, and what a batch keeps as context: one number
    monkeypatch.setattr(batches_module, "CONTEXT_RECORDS", 50)
    part_a, part_b = _journal_parts(fixture)
    path = make_journal(part_a, "grown.journal")
    db = tmp_path / "j.duckdb"
    first = run(db, [JournalSource("files", [path])], catalog, selection)
    assert first.stored > 100
    unchanged_reads = _count_journal_reads(monkeypatch)
    same = run(db, [JournalSource("files", [path])], catalog, selection)
    assert sum(unchanged_reads) <= 51, "an unchanged journal was read again"
    assert (same.records, same.stored, same.duplicates) == (first.records, 0, first.records)
    make_journal(part_b, "grown.journal")  # journal-remote appends to the file: same seqnum id
    reads = _count_journal_reads(monkeypatch)
    again = run(db, [JournalSource("files", [path])], catalog, selection)
    entries = export_entries_text(part_a) + export_entries_text(part_b)
    assert sum(reads) < entries - 100, "the grown journal was read from its start"
    clean_db = tmp_path / "clean.duckdb"
    clean = run(clean_db, [JournalSource("files", [path])], catalog, selection)
    assert again.records == clean.records and first.stored + again.stored == clean.stored
    assert all_lines(db).equals(all_lines(clean_db))
    # Another selection has its own mark: it reads everything.
    other = Selection(units=("*",), window=Window(since_us=0))
    reads.clear()
    run(db, [JournalSource("files", [path])], catalog, other)
    assert sum(reads) == entries


def export_entries_text(text: bytes) -> int:
    return sum(1 for line in text.split(b"\n") if line.startswith(b"__REALTIME_TIMESTAMP="))


def test_a_journal_mark_is_not_used_when_a_file_with_earlier_entries_was_not_read(
    tmp_path: Path, fixture: Path, catalog, make_journal
) -> None:
    part_a, _ = _journal_parts(fixture)
    path = make_journal(part_a, "a.journal")
    db = tmp_path / "j.duckdb"
    run(db, [JournalSource("files", [path])], catalog)
    src = JournalSource("files", [path])
    key = src.mark_key(ALL)
    assert key is not None
    con = store.open_db(db, read_only=True)
    mark = store.get_mark(con, key)
    con.close()
    assert mark is not None
    src.resume(mark[1], 10)
    assert src.resume_cursor is not None
    cursor = mark[1].split()[0]
    src.resume(f"{cursor} 00000000000000000000000000000000", 10)  # the file was not among those read
    assert src.resume_cursor is None


def test_journals_of_several_seqnum_ids_are_read_whole(
    tmp_path: Path, fixture: Path, catalog, make_journal
) -> None:
    part_a, part_b = _journal_parts(fixture, times=1)
    b = make_journal(part_b, "b.journal")
    a = make_journal(part_a, "a.journal")  # its own seqnum id, older entries
    db = tmp_path / "j.duckdb"
    run(db, [JournalSource("files", [b])], catalog)
    assert JournalSource("files", [a, b]).mark_key(ALL) is None
    both = run(db, [JournalSource("files", [a, b])], catalog)
    # Equal but for `source`, the label of the reader that stored each line first.
    clean_db = tmp_path / "clean.duckdb"
    clean = run(clean_db, [JournalSource("files", [a, b])], catalog)
    assert both.records == clean.records
    assert (
        all_lines(db)
        .sort("seq", "source_key")
        .drop("cont_of_seq", "source")
        .equals(all_lines(clean_db).sort("seq", "source_key").drop("cont_of_seq", "source"))
    )


def _export_entries_text(path: Path) -> list[bytes]:
    return [e for e in path.read_bytes().split(b"\n\n") if e.strip()]


@pytest.mark.parametrize("late", [False, True], ids=["seen-before-parse", "stored-while-parsed"])
def test_a_repeat_of_the_batch_before_is_stored_once(
    tmp_path: Path, fixture: Path, catalog, monkeypatch: pytest.MonkeyPatch, late: bool
) -> None:
    """Overlapping exports concatenated: entries repeat a batch later. The next batch is parsed while
    the one before is stored, so its repeats are found either before the parse (committed batches)
    or, when that one was not committed yet, just before its own store: stored once either way."""
    entries = _export_entries_text(fixture / "journal.export")
    overlap = tmp_path / "overlap.export"
    overlap.write_bytes(b"\n\n".join(entries + entries[-30:]) + b"\n\n")
    if late:  # the parse worker never sees the batch before: every repeat is left to the store step
        real = store.known_lines

        def blind(con, records):  # type: ignore[no-untyped-def]
            if threading.current_thread().name.startswith("pdforensics-parse"):
                return real(con, records.head(0))
            return real(con, records)

        monkeypatch.setattr(store, "known_lines", blind)
    summary = ingest(
        tmp_path / "o.duckdb", [open_file_source(overlap)], ALL, catalog, batch_size=50, views=False
    )
    clean = run(tmp_path / "clean.duckdb", [open_file_source(fixture / "journal.export")], catalog)
    assert (summary.records, summary.stored, summary.duplicates) == (len(entries) + 30, clean.stored, 30)
    assert stored_lines(tmp_path / "o.duckdb").equals(stored_lines(tmp_path / "clean.duckdb"))
    con = store.open_db(tmp_path / "o.duckdb", read_only=True)
    try:  # continuation lines point at stored heads
        dangling = con.execute(
            "SELECT count(*) FROM lines l WHERE cont_of IS NOT NULL AND cont_of NOT IN (SELECT line_id FROM lines)"
        ).fetchone()
    finally:
        con.close()
    assert dangling == (0,)


@pytest.mark.parametrize("jobs", [1, 2])
def test_duckdb_stores_on_one_thread_and_gets_its_setting_back(
    tmp_path: Path, fixture: Path, catalog, jobs: int
) -> None:
    """A batch is one row group, written by one DuckDB thread: a second one only takes CPU from the
    parse, so the store runs with `threads = 1` whatever --jobs says, and the caller's setting is
    restored afterwards."""
    con = store.open_db(tmp_path / "t.duckdb")
    con.execute("SET threads = 2")
    seen: list[str] = []

    def at_commit(_n: int) -> None:  # called on the storing thread after each batch
        row = con.execute("SELECT current_setting('threads')").fetchone()
        seen.append(str(row[0]) if row else "")

    try:
        source = open_file_source(fixture / "journal.export")
        ingest(tmp_path / "t.duckdb", [source], ALL, catalog, batch_size=200, progress=at_commit,
               con=con, views=False, jobs=jobs)  # fmt: skip
        after = con.execute("SELECT current_setting('threads')").fetchone()
    finally:
        con.close()
    assert len(seen) > 1 and set(seen) == {"1"}, seen
    assert after == (2,) or after == ("2",), after
