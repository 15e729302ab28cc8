"""Judged once, read many times (pdforensics.judgement): the classification of a database state,
window and options is kept beside the database and read back by every later reader.

A kept judgement is the computed one, read without the views; it is keyed, never timed: a new
ingest, other options, any change to the file, and other rules each give a judgement of their
own, and a folder that cannot be written (or a broken file in it) means computing, as before.
Hand-built databases (tests/verdict_helpers.py): two prefill hosts, one of them holding a request.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
from verdict_helpers import DECODE, PREFILL, Log, room

from pdforensics import api, judgement, store, verdict
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection, Window
from pdforensics.sources.detect import open_file_source

OTHER = {"host": "gpu-c", "unit": "sglang-prefill.service", "engine": "prefill", "pid": 3300,
         "invocation_id": "inv-c1"}  # fmt: skip


def _fleet(path: Path, pinned: bool = True) -> Path:
    """gpu-a and gpu-c serve requests through one decode; gpu-c holds room(1) from 50 s on."""
    log = Log(path)
    with log.bulk():
        for n, t in enumerate(range(5, 380, 20)):
            log.completed(t, room(100 + n), PREFILL)
            log.completed(t + 7, room(500 + n), OTHER)
        if pinned:
            log.receive(50, OTHER, room(1), "p1").receive(50.001, DECODE, room(1), "d1")
        for k in range(1, 40):
            held = 1 if pinned and k * 10 > 50 else 0
            log.batch(k * 10 + 0.1, 1)
            log.batch(k * 10 + 0.2, 1 + held, who=OTHER)
    log.install()
    log.close()
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return _fleet(tmp_path / "fleet.duckdb")


def judge(path: Path, **opts: Any) -> dict[str, Any]:
    con = store.open_db(path, read_only=True)
    try:
        return verdict.compute_verdict(con, verdict.VerdictOptions(**opts)).to_json()
    finally:
        con.close()


def computed(path: Path, monkeypatch: pytest.MonkeyPatch, **opts: Any) -> dict[str, Any]:
    """The judgement as the views compute it, the cache out of the way."""
    with monkeypatch.context() as m:
        m.setenv(judgement.ENV, "off")
        return judge(path, **opts)


def kept(path: Path) -> list[str]:
    folder = judgement.folder_of(path)
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _no_views(monkeypatch: pytest.MonkeyPatch) -> None:
    """Computing or installing a view from here on fails the test: only kept rows may answer."""

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("the views were computed although the judgement is kept")

    for name in ("ensure_views", "install_views", "_shadow"):
        monkeypatch.setattr(verdict, name, refuse)


def test_the_kept_judgement_is_the_computed_one_read_without_the_views(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = computed(db, monkeypatch, watchdog_timeout_s=60)
    assert want["verdict"] == "watchdog_missed" and len(want["instances"]) == 2
    assert kept(db) == [], "the cache switched off writes nothing"
    assert judge(db, watchdog_timeout_s=60) == want  # judged, and kept
    assert [name.split(".", 1)[1] for name in kept(db)] == ["instances.duckdb", "stack.duckdb"]
    _no_views(monkeypatch)
    assert judge(db, watchdog_timeout_s=60) == want  # read back: each instance's judgement too


def test_readers_shadow_the_views_with_the_kept_rows(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = verdict.VerdictOptions(watchdog_timeout_s=60)

    def read() -> tuple[list[tuple], dict[str, Any], bool]:
        con = store.open_db(db, read_only=True)
        try:
            verdict.ensure_views(con)
            verdict.apply_options(con, opts)
            with verdict.materialised(con):
                rows = con.execute("SELECT * FROM requests ORDER BY bootstrap_room").fetchall()
                kept_view = verdict._SHADOWS[id(con)].get("requests") == "view"
            timeline = verdict.request_timeline(con, "p1", opts).to_json()
            assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone() == (0,)
            return rows, timeline, kept_view
        finally:
            con.close()

    with monkeypatch.context() as m:
        m.setenv(judgement.ENV, "off")
        want_rows, want_timeline, _ = read()
    rows, timeline, from_kept = read()  # computed here, and kept
    assert (rows, timeline, from_kept) == (want_rows, want_timeline, False)
    assert any(name.endswith(".requests.duckdb") for name in kept(db))
    rows, timeline, from_kept = read()
    assert (rows, timeline, from_kept) == (want_rows, want_timeline, True)
    assert timeline["request"]["class"] == "silent_pin"


def test_other_options_are_other_judgements(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = [
        {"watchdog_timeout_s": 60},
        {"watchdog_timeout_s": 600},  # the pin is younger than this timeout
        {"watchdog_timeout_s": 60, "grace_s": 0.0},
        {"watchdog_timeout_s": 60, "until_us": 1_796_000_000_000_000 + 40_000_000},  # before the pin
    ]
    answers = [judge(db, **o) for o in options]
    assert len({a["verdict"] for a in answers[:2]}) == 2, "the timeout decides this pin"
    assert answers[3]["verdict"] != "watchdog_missed"
    stacks = [n for n in kept(db) if n.endswith(".stack.duckdb")]
    assert len(stacks) == len(options) and len({n.split("-")[0] for n in stacks}) == 1, stacks
    for o, got in zip(options, answers, strict=True):
        assert judge(db, **o) == got == computed(db, monkeypatch, **o)


def test_a_new_ingest_is_a_new_judgement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "db.duckdb"

    def ingest_fixture(name: str) -> None:
        con = store.open_db(path)
        try:
            source = open_file_source(fixtures_dir() / name / "journal.json")
            ingest(path, [source], Selection(window=Window(), units=("*",)), load_catalog([]), con=con)
        finally:
            con.close()

    ingest_fixture("healthy")
    first = judge(path)
    assert first["verdict"] == "nothing_stuck"
    [first_state] = {name.split("-")[0] for name in kept(path)}
    ingest_fixture("decode_restart_old_build")
    second = judge(path)
    assert second == computed(path, monkeypatch) and second["counts"] != first["counts"]
    # the first state's judgement can never be read again: removed when the second was kept
    assert (
        {name.split("-")[0] for name in kept(path)} - {first_state}
        == {name.split("-")[0] for name in kept(path)}
        != set()
    )


def test_a_changed_file_is_never_served_a_stale_judgement(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = judge(db, watchdog_timeout_s=60)
    assert before["verdict"] == "watchdog_missed"
    stat = db.stat()
    # written by hand, not by pdforensics: the pinned request's lines are gone, and the file's
    # times put back as they were (its ctime cannot be)
    con = duckdb.connect(str(db))
    con.execute("DELETE FROM events WHERE bootstrap_room = ?", [room(1)])
    con.execute("DELETE FROM lines WHERE message LIKE '%bootstrap_room=' || ? || ')%'", [str(room(1))])
    con.close()
    os.utime(db, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = judge(db, watchdog_timeout_s=60)
    assert after == computed(db, monkeypatch, watchdog_timeout_s=60)
    assert after["counts"]["silent_pin"] == before["counts"]["silent_pin"] - 1
    # the same counts, other content: an UPDATE in place
    con = duckdb.connect(str(db))
    con.execute("UPDATE lines SET host = 'gpu-z' WHERE host = 'gpu-c'")
    con.execute("UPDATE events SET host = 'gpu-z' WHERE host = 'gpu-c'")
    con.close()
    assert {i["host"] for i in judge(db, watchdog_timeout_s=60)["instances"]} == {"gpu-a", "gpu-z"}
    # another database moved into its place
    other = _fleet(db.parent / "other.duckdb")
    os.replace(other, db)
    assert judge(db, watchdog_timeout_s=60) == before


def test_a_folder_that_cannot_be_written_means_computing(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = computed(db, monkeypatch, watchdog_timeout_s=60)
    folder = judgement.folder_of(db)
    folder.write_text("not a folder")  # the cache folder cannot be made
    assert judge(db, watchdog_timeout_s=60) == want
    assert folder.read_text() == "not a folder"
    folder.unlink()
    # a folder no one may write in, root included (tests may run as root)
    folder.symlink_to("/proc", target_is_directory=True)
    assert judge(db, watchdog_timeout_s=60) == want
    folder.unlink()
    if os.geteuid() != 0:  # the plain case, where permissions hold
        ro = tmp_path / "ro"
        ro.mkdir()
        shutil.copy(db, ro / "db.duckdb")
        ro.chmod(0o555)
        try:
            assert judge(ro / "db.duckdb", watchdog_timeout_s=60) == want
            assert kept(ro / "db.duckdb") == []
        finally:
            ro.chmod(0o755)


def test_a_broken_or_misplaced_kept_file_is_not_read(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want_60 = judge(db, watchdog_timeout_s=60)
    want_600 = computed(db, monkeypatch, watchdog_timeout_s=600)
    folder = judgement.folder_of(db)
    stack_60 = next(p for p in folder.iterdir() if p.name.endswith(".stack.duckdb"))
    # the 60 s judgement's file under the 600 s judgement's name: refused, computed instead
    con = store.open_db(db, read_only=True)
    verdict.apply_options(con, verdict.VerdictOptions(watchdog_timeout_s=600))
    entry_600 = judgement.entry(con, verdict.data_catalog(con))
    con.close()
    assert entry_600 is not None
    shutil.copy(stack_60, entry_600.path("stack"))
    assert judge(db, watchdog_timeout_s=600) == want_600
    # a file that is not a judgement at all
    stack_60.write_bytes(b"garbage" * 1000)
    assert judge(db, watchdog_timeout_s=60) == want_60


def test_a_writer_and_a_scoped_connection_never_keep(db: Path) -> None:
    con = store.open_db(db)
    try:
        v = verdict.compute_verdict(con, verdict.VerdictOptions(watchdog_timeout_s=60))
    finally:
        con.close()
    assert v.verdict == "watchdog_missed" and kept(db) == []
    con = store.open_db(db, read_only=True)
    try:
        con.execute("CREATE TEMP TABLE lines AS SELECT * FROM main.lines WHERE host <> 'gpu-c'")
        assert judgement.entry(con, verdict.data_catalog(con)) is None, "rows that are not the file's"
    finally:
        con.close()


def test_the_ingest_judges_once_for_every_reader_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "db.duckdb"
    export = fixtures_dir() / "healthy" / "journal.export"
    _, at_ingest = api.run_ingest(
        db=path, since=None, until=None, units=None, directories=None, journal_files=None, files=[export],
        tz=None, host=None, catalogs=None, watchdog_timeout=None, grace=None, progress=False, now_us=0,
    )  # fmt: skip
    assert at_ingest is not None
    assert [n.split(".", 1)[1] for n in kept(path)] == ["stack.duckdb"]
    _no_views(monkeypatch)
    assert api.run_verdict(path, None, None, None, None, now_us=0).to_json() == at_ingest.to_json()


def test_another_versions_views_are_kept_as_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _fleet(tmp_path / "old.duckdb", pinned=False)
    con = duckdb.connect(str(db))
    con.execute("CREATE OR REPLACE VIEW context AS SELECT 'another version' AS x")
    con.execute("UPDATE meta SET value = 'other' WHERE key = ?", [verdict.VIEWS_KEY])
    con.close()
    want = computed(db, monkeypatch)
    con = store.open_db(db, read_only=True)
    try:
        verdict.ensure_views(con)  # this version's views, installed once into a kept file
    finally:
        con.close()
    assert [n for n in kept(db) if n.startswith(judgement.VIEWS_PREFIX)], kept(db)
    monkeypatch.setattr(verdict, "install_views", lambda *a, **k: pytest.fail("views installed again"))
    con = store.open_db(db, read_only=True)
    try:
        verdict.ensure_views(con)
        verdict.apply_options(con, verdict.VerdictOptions())
        with verdict.materialised(con, cache=False):
            assert con.execute("SELECT verdict FROM verdict").fetchone() == (want["verdict"],)
    finally:
        con.close()
    con = duckdb.connect(str(db), read_only=True)
    try:  # the file is untouched
        assert con.execute("SELECT x FROM context").fetchone() == ("another version",)
    finally:
        con.close()
