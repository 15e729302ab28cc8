"""The DuckDB store: schema and version, clear errors for bad databases, dedup, atomic batches."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from pdforensics import store
from pdforensics.errors import DatabaseError
from pdforensics.schema import EVENT_COLUMNS, LINE_COLUMNS, SCHEMA_VERSION, empty_rejects


def test_new_database_has_the_documented_tables(tmp_path: Path) -> None:
    con = store.open_db(tmp_path / "a.duckdb")
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"lines", "events", "rejects", "ingests", "meta"} <= tables
    line_cols = [r[0] for r in con.execute("DESCRIBE lines").fetchall()]
    event_cols = [r[0] for r in con.execute("DESCRIBE events").fetchall()]
    assert line_cols == LINE_COLUMNS
    assert event_cols == EVENT_COLUMNS
    assert (
        dict(con.execute("DESCRIBE events").fetchall()[i][:2] for i in range(len(event_cols)))[
            "bootstrap_room"
        ]
        == "UBIGINT"
    )
    assert store.stored_version(con) == SCHEMA_VERSION
    con.close()


def test_reopening_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "a.duckdb"
    store.open_db(path).close()
    con = store.open_db(path)
    assert con.execute("SELECT count(*) FROM meta").fetchone() == (1,)
    con.close()


def test_read_only_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="run `pdforensics ingest` first"):
        store.open_db(tmp_path / "none.duckdb", read_only=True)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.duckdb"
    con = store.open_db(path)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    con.close()
    with pytest.raises(DatabaseError, match="newer pdforensics"):
        store.open_db(path)
    with pytest.raises(DatabaseError, match="newer pdforensics"):
        store.open_db(path, read_only=True)


def test_foreign_duckdb_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (x INT)")
    con.close()
    with pytest.raises(DatabaseError, match="not a pdforensics database"):
        store.open_db(path)


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.duckdb"
    path.write_bytes(b"this is not a database" * 200)
    with pytest.raises(DatabaseError, match=r"not a readable pdforensics database|cannot open"):
        store.open_db(path)


def test_a_damaged_wal_is_named_with_how_to_move_it_aside(tmp_path: Path) -> None:
    """Issue 29, item 10: a damaged `<db>.wal` (DuckDB replays it on every open) made the database
    "not a readable pdforensics database" with no hint; the line names the .wal and the command
    that moves it aside, after which the database opens as of its last checkpoint."""
    db = tmp_path / "a.duckdb"
    store.open_db(db).close()
    con = duckdb.connect(str(db))
    con.execute("PRAGMA disable_checkpoint_on_shutdown")
    con.execute("INSERT INTO meta SELECT 'k' || i, repeat('v', 50) FROM range(200) t(i)")
    con.close()
    wal = Path(f"{db}.wal")
    data = wal.read_bytes()
    mid = len(data) // 2
    wal.write_bytes(data[:mid] + bytes(64) + data[mid + 64 :])
    for read_only in (False, True):
        with pytest.raises(DatabaseError) as damaged:
            store.open_db(db, read_only=read_only)
        text = str(damaged.value)
        assert text.startswith(f"{wal}, the log of a.duckdb's commits since its last checkpoint, is damaged")
        assert f"move it aside (mv {wal} {wal}.damaged)" in text, text
    proc = subprocess.run([sys.executable, "-m", "pdforensics", "verdict", "--db", str(db)],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 4 and proc.stderr.count("\n") == 1 and "mv " in proc.stderr, proc.stderr
    wal.rename(f"{wal}.damaged")
    con = store.open_db(db, read_only=True)
    assert con.execute("SELECT count(*) FROM meta WHERE key LIKE 'k%'").fetchone() == (0,)
    con.close()


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="does not exist"):
        store.open_db(tmp_path / "nope" / "a.duckdb")


def test_second_writer_gets_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "a.duckdb"
    store.open_db(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb,time; c=duckdb.connect({str(path)!r}); print('ok', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        with pytest.raises(DatabaseError, match=r"in use by another process \(PID \d+\)") as err:
            store.open_db(path)
        assert "\n" not in str(err.value)
    finally:
        holder.kill()
        holder.wait()


def _lines(ids: list[int], key: str = "k") -> pl.DataFrame:
    n = len(ids)
    data = {c: [None] * n for c in LINE_COLUMNS if c != "ingest_id"}
    data.update(line_id=ids, source_key=[key] * n, seq=ids, message=["m"] * n, source=["s"] * n)
    return pl.DataFrame(data, schema_overrides={"line_id": pl.Int64, "seq": pl.Int64}).with_columns(
        pl.all().exclude("line_id", "seq", "message", "source", "source_key").cast(pl.String)
    )


def test_drop_known_removes_stored_records(tmp_path: Path) -> None:
    con = store.open_db(tmp_path / "a.duckdb")
    con.execute("INSERT INTO ingests (ingest_id, status) VALUES (1, 'x')")
    con.execute(
        "INSERT INTO lines (line_id, ingest_id, source_key, seq) SELECT i, 1, 'k', i FROM range(10) t(i)"
    )
    recs = pl.DataFrame({"source_key": ["k"] * 5 + ["other"] * 2, "seq": [8, 9, 10, 11, 12, 8, 9]})
    left = store.drop_known(con, recs)
    assert left.rows() == [("k", 10), ("k", 11), ("k", 12), ("other", 8), ("other", 9)]
    con.close()


def test_failed_batch_leaves_nothing(tmp_path: Path) -> None:
    con = store.open_db(tmp_path / "a.duckdb")
    ingest_id = store.begin_ingest(con, "s", "r", "u", None, None)
    bad_events = pl.DataFrame({"no_such_column": [1]})
    with pytest.raises(duckdb.Error):
        store.store_batch(con, ingest_id, _lines([1, 2, 3]), bad_events, empty_rejects(), {"stored": 3})
    assert con.execute("SELECT count(*) FROM lines").fetchone() == (0,)
    assert con.execute("SELECT stored FROM ingests").fetchone() == (0,)
    con.close()


def test_read_only_reader_while_nobody_writes(tmp_path: Path) -> None:
    path = tmp_path / "a.duckdb"
    store.open_db(path).close()
    con = store.open_db(path, read_only=True)
    assert con.execute("SELECT count(*) FROM lines").fetchone() == (0,)
    with pytest.raises(duckdb.Error):
        con.execute("DELETE FROM lines")
    con.close()
