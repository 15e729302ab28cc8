"""`ingest --parquet DIR`: the database as hive-partitioned Parquet, read back exactly.

Real journal files (systemd-journal-remote) of a fixture whose rooms are moved above 2^63 and some
of whose entries lose their _HOSTNAME (NULL hosts), plus a host name that needs escaping.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from conftest import JOURNAL_REMOTE
from test_ingest_jobs import export_entries, make_collection

from pdforensics.api import build_sources
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.parquet_store import (
    PART_KEY,
    hive_escape,
    read_relations,
    read_tables,
    table_globs,
    table_sql,
)
from pdforensics.paths import fixtures_dir
from pdforensics.sources import Selection

pytestmark = pytest.mark.skipif(not JOURNAL_REMOTE.exists(), reason="systemd-journal-remote is not installed")

BIG_ROOM = 2**64 - 1_000  # >= 2^63: a UBIGINT that no signed 64-bit type holds
ROOM = b"5195707840761313063"  # a room of multihost_skew, on both its hosts


def odd_export() -> bytes:
    """multihost_skew with ROOM moved to BIG_ROOM, every 10th entry without _HOSTNAME, and one host
    renamed to a name Hive escapes (text fields only: binary ones keep their length prefix)."""
    out = []
    for n, (entry, _) in enumerate(
        export_entries((fixtures_dir() / "multihost_skew" / "journal.export").read_bytes())
    ):
        lines = entry.split(b"\n")
        if all(b"=" in line or not line for line in lines):  # text fields only
            entry = entry.replace(ROOM, str(BIG_ROOM).encode()).replace(
                b"_HOSTNAME=d-node-01", b"_HOSTNAME=d/node=01"
            )
            if n % 10 == 0:
                entry = b"\n".join(line for line in lines if not line.startswith(b"_HOSTNAME=")).replace(
                    ROOM, str(BIG_ROOM).encode()
                )
        out.append(entry)
    return b"".join(out)


def ingest_into(db: Path, directory: Path, parquet: Path, jobs: int = 2) -> None:
    sources = build_sources([directory], None, None, None)
    ingest(db, sources, Selection(units=("*",)), load_catalog([]), batch_size=64, jobs=jobs, parquet=parquet)


def assert_mirrors(db: Path, parquet: Path) -> None:
    """Every table of the database == the Parquet read back: same columns and types, same rows
    (as multisets: EXCEPT ALL both ways)."""
    con = duckdb.connect(str(db), read_only=True)

    def one(sql: str) -> object:
        row = con.execute(sql).fetchone()
        assert row is not None
        return row[0]

    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
            ).fetchall()
        ]
        assert set(table_globs(parquet)) == set(tables), "one entry per stored table"
        for table in tables:
            back, want = table_sql(parquet, table), f'SELECT * FROM "{table}"'
            got_types = con.execute(f"DESCRIBE {back}").fetchall()
            want_types = con.execute(f"DESCRIBE {want}").fetchall()
            assert [r[:2] for r in got_types] == [r[:2] for r in want_types], f"{table}: columns and types"
            assert one(f"SELECT count(*) FROM ({back})") == one(f"SELECT count(*) FROM ({want})"), table
            assert not one(f"SELECT count(*) FROM (({back}) EXCEPT ALL ({want}))"), (
                f"{table}: rows only in Parquet"
            )
            assert not one(f"SELECT count(*) FROM (({want}) EXCEPT ALL ({back}))"), (
                f"{table}: rows only in DuckDB"
            )
    finally:
        con.close()


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("odd")
    make_collection(odd_export(), d / "collection", rotate=False)
    return d / "collection"


def test_tables_read_back_exactly_big_rooms_and_null_hosts_included(collection: Path, tmp_path: Path) -> None:
    db, pq = tmp_path / "db.duckdb", tmp_path / "pq"
    ingest_into(db, collection, pq)
    con = duckdb.connect(str(db), read_only=True)
    rooms = con.execute("SELECT count(*) FROM events WHERE bootstrap_room = ?", [BIG_ROOM]).fetchone()[0]  # type: ignore[index]
    null_hosts = con.execute("SELECT count(*) FROM lines WHERE host IS NULL").fetchone()[0]  # type: ignore[index]
    null_rooms = con.execute("SELECT count(*) FROM events WHERE bootstrap_room IS NULL").fetchone()[0]  # type: ignore[index]
    con.close()
    assert rooms and null_hosts and null_rooms, "the input must hold what this test is about"
    assert_mirrors(db, pq)
    assert set(read_tables(pq)) >= {"lines", "events", "rooms", "meta", "ingests"}
    with duckdb.connect(str(db), read_only=True) as con:
        rels = read_relations(con, pq)
        assert rels["events"].filter(f"bootstrap_room = {BIG_ROOM}").aggregate("count(*)").fetchall() == [
            (rooms,)
        ]
    # The layout: host and hour partitions, NULL host as '_', a name Hive escapes escaped.
    hosts = {p.name for p in (pq / "lines").iterdir()}
    assert {"pdf_host=_", f"pdf_host={hive_escape('d/node=01')}", "pdf_host=p-node-01"} <= hosts
    assert hive_escape("d/node=01") == "d%2Fnode%3D01"
    hours = {p.name for p in (pq / "lines").glob("*/*")}
    assert hours and all(
        h.startswith("pdf_hour=2026-") and len(h) == len("pdf_hour=2026-11-29T12") for h in hours
    )
    spark_read = duckdb.sql(
        f"SELECT DISTINCT pdf_host FROM read_parquet('{pq}/lines/**/*.parquet', hive_partitioning = true)"
    )
    assert len(spark_read.fetchall()) == len(hosts)


def test_appended_per_ingest_and_mended_after_a_kill(collection: Path, tmp_path: Path) -> None:
    db, pq = tmp_path / "db.duckdb", tmp_path / "pq"
    ingest_into(db, collection, pq, jobs=1)
    first = sorted(p.name for p in pq.glob("lines/*/*/*.parquet"))
    other = tmp_path / "other"
    make_collection(
        (fixtures_dir() / "abort_storm_clean" / "journal.export").read_bytes(), other, rotate=False
    )
    ingest_into(db, other, pq)
    names = sorted(p.name for p in pq.glob("lines/*/*/*.parquet"))
    assert set(first) < set(names) and any(n.startswith("part-2-") for n in names), "ingest 2 appended"
    assert_mirrors(db, pq)
    # A kill between a part's files and its record: a stray file, and a part no record names.
    con = duckdb.connect(str(db))
    key = con.execute(
        "SELECT key FROM meta WHERE starts_with(key, ?) ORDER BY key LIMIT 1", [PART_KEY]
    ).fetchone()[0]  # type: ignore[index]
    con.execute("DELETE FROM meta WHERE key = ?", [key])
    con.close()
    victim = next(pq.glob("lines/*/*/*.parquet"))
    (victim.parent / "part-9-123456789.parquet").write_bytes(victim.read_bytes())
    ingest_into(db, other, pq)  # nothing new to store: the mirror is mended all the same
    assert not list(pq.glob("lines/*/*/part-9-*.parquet")), "the stray part is gone"
    assert_mirrors(db, pq)


def test_cli_parquet_option_and_help(collection: Path, tmp_path: Path) -> None:
    from test_reliability import cli

    help_text = cli("ingest", "--help").stdout
    assert "--parquet" in help_text and "--jobs" in help_text
    db, pq = tmp_path / "db.duckdb", tmp_path / "pq"
    proc = cli("ingest", "--db", str(db), "-D", str(collection), "--unit", "*", "--parquet", str(pq), "-q")
    assert proc.returncode == 0, proc.stderr
    assert_mirrors(db, pq)
    afile = tmp_path / "file"
    afile.write_text("x")
    bad = cli("ingest", "--db", str(db), "-D", str(collection), "--parquet", str(afile))
    assert bad.returncode != 0 and "not a directory" in bad.stderr and "Traceback" not in bad.stderr


def test_a_parquet_copy_that_cannot_be_written_is_named_not_the_database(
    tmp_path: Path, full_folder: Path
) -> None:
    """Issue 29, item 10: a full disk under --parquet was reported as "writing <db> failed", the
    database that holds every batch. One line naming the Parquet folder, exit 6 (an output), and no
    part file left half-written."""
    from test_reliability import cli

    db, pq = tmp_path / "db.duckdb", full_folder / "pq"
    export = fixtures_dir() / "decode_restart_watchdog_fires" / "journal.export"
    proc = cli("ingest", "--db", str(db), "--file", str(export), "--parquet", str(pq), "-q")
    assert proc.returncode == 6, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"pdforensics: writing the Parquet copy {pq} failed: "), line
    assert "No space left on device" in line and f"writing {db}" not in line, line
    assert not [p for p in pq.rglob("*") if p.is_file()], "no part file left"


def test_a_batch_larger_than_the_memory_limit_is_written_in_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--parquet` at 1M lines failed with "failed to allocate 128.0 MiB": DuckDB's default row group
    is a whole stored batch, buffered at once. Scaled down: a 48,000-line batch of ~48 MB of text
    under a 128 MB DuckDB limit (the ingest's was 250 MB, now 150 MB, for 122,880-line batches): one row group per
    part runs out of memory there (it needs ~136 MB), row groups of PART_ROW_GROUP need ~120 MB."""
    from pdforensics import ingest as ingest_module
    from pdforensics.parquet_store import PART_ROW_GROUP
    from pdforensics.sources.detect import open_file_source

    monkeypatch.setattr(ingest_module, "INGEST_MEMORY_LIMIT", "128MB")
    log = tmp_path / "gpu-a-sglang-prefill.log"
    pad = "x" * 1_000
    with log.open("w") as f:
        for i in range(48_000):
            stamp = f"[2026-11-29 10:{i // 1000 % 60:02d}:{i % 60:02d} TP0]"
            if i % 100 == 0:  # a line the catalog knows: events to mirror too
                f.write(f"{stamp} Prefill batch, #new-seq: 1, #new-token: 2, #cached-token: 0, token usage: "
                        "0.00, #running-req: 0, #queue-req: 0,\n")  # fmt: skip
            else:
                f.write(f"{stamp} a line of text {i} {pad}\n")
    db, parquet = tmp_path / "big.duckdb", tmp_path / "pq"
    ingest(db, [open_file_source(log)], Selection(), load_catalog(), batch_size=48_000, parquet=parquet)
    assert_mirrors(db, parquet)
    (part,) = (parquet / "lines").glob("*/*/part-*.parquet")
    con = duckdb.connect()
    try:
        groups = con.execute(
            f"SELECT row_group_id, max(row_group_num_rows) FROM parquet_metadata('{part}') GROUP BY ALL"
        ).fetchall()
    finally:
        con.close()
    assert len(groups) == -(-48_000 // PART_ROW_GROUP) and max(n for _, n in groups) == PART_ROW_GROUP
