"""schema.EVENT_FIELDS only grows: a database written before a field existed gets its column on
the next write-open, and an ingest into it stores the new field."""

from __future__ import annotations

from pathlib import Path

from pdforensics import store
from pdforensics.api import run_ingest
from pdforensics.schema import EVENT_FIELDS

NEW = ("state_code", "timeout_kind", "watchdog_queue", "log_requests", "log_requests_level", "log_level")
LINE = (
    "[2026-03-10 09:12:44 TP0] Prefill transfer timed out after 612.3s (state=3) for request rank=0 "
    "req.rid='5f0c' req.bootstrap_room=7561186998443553199\n"
)


def _columns(path: Path) -> set[str]:
    con = store.open_db(path, read_only=True)
    try:
        rows = con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'events'"
        ).fetchall()
    finally:
        con.close()
    return {r[0] for r in rows}


def test_an_older_database_gets_the_new_event_columns(tmp_path: Path) -> None:
    assert set(NEW) <= set(EVENT_FIELDS)
    db = tmp_path / "old.duckdb"
    con = store.open_db(db)
    for name in NEW:  # as a database made before these fields existed
        con.execute(f"ALTER TABLE events DROP COLUMN {name}")
    con.close()
    assert not set(NEW) & _columns(db)
    log = tmp_path / "prefill.log"
    log.write_text(LINE, encoding="utf-8")
    run_ingest(
        db=db, since=None, until=None, units=None, directories=None, journal_files=None, files=[log],
        tz="UTC", host="p", catalogs=None, watchdog_timeout=None, grace=None, progress=False,
        now_us=1_900_000_000_000_000,
    )  # fmt: skip
    assert set(NEW) <= _columns(db)
    con = store.open_db(db, read_only=True)
    try:
        got = con.execute("SELECT event, state_code, watchdog_queue FROM events").fetchall()
    finally:
        con.close()
    assert got == [("watchdog_fired", 3, "transfer")]
