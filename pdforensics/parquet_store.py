"""The database as hive-partitioned Parquet (`ingest --parquet DIR`), so the data can move to a cluster.

Layout (a contract: pdforensics.spark reads it):

    DIR/lines/pdf_host=<host>/pdf_hour=<YYYY-MM-DDTHH>/part-<ingest_id>-<k>.parquet
    DIR/events/pdf_host=<host>/pdf_hour=<YYYY-MM-DDTHH>/part-<ingest_id>-<k>.parquet
    DIR/<every other table>/part-0.parquet   (a snapshot, rewritten at the end of each ingest)

`pdf_host` is the row's `host` ('_' when NULL or empty; other characters percent-escaped as Hive
does), `pdf_hour` the UTC hour of `ts_us` ('_' when NULL). Each file holds all the table's columns
with DuckDB's types (written by DuckDB itself: rooms stay UBIGINT, `extra` JSON), so a reader that
drops the two partition columns gets the table back exactly (`read_table`).

Lines and events are appended per stored batch (k = the batch's first line_id). Each part written
is recorded in the database's `meta` (`parquet_part:<DIR>|<ingest_id>-<k>` -> last line_id of the
part), after its files are in place: a run killed in between leaves files no record names; the
next ingest with the same DIR deletes them and writes every line and event no record covers, so
DIR ends each ingest holding each stored row once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from pdforensics.errors import OutputError, is_interrupt
from pdforensics.store import sql_string

PARTITIONED = ("lines", "events")
PARTITION_COLUMNS = ("pdf_host", "pdf_hour")
PART_KEY = "parquet_part:"
NULL_VALUE = "_"
# Hive's FileUtils.escapePathName (and Spark's ExternalCatalogUtils): these and control characters.
_HIVE_ESCAPED = set("\"#%'*/:=?\\\x7f{[]^") | {chr(c) for c in range(1, 32)}
# Rows per Parquet row group of a part. DuckDB's default (122,880, a whole stored batch) buffers a
# batch's text in one allocation (~128 MiB at SGLang's line lengths), past the ingest's DuckDB
# memory limit (then 250 MB, now 150 MB): `--parquet` failed at 1M lines ("failed to allocate 128.0 MiB").
PART_ROW_GROUP = 16_384
_PART_FILE = re.compile(r"^part-(\d+)-(\d+)\.parquet$")
_HOST = f"CASE WHEN host IS NULL OR host = '' THEN '{NULL_VALUE}' ELSE host END"
_HOUR = f"coalesce(strftime(make_timestamp(ts_us), '%Y-%m-%dT%H'), '{NULL_VALUE}')"


def hive_escape(value: str) -> str:
    """A partition value as Hive writes it in a directory name."""
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in value)


class ParquetMirror:
    """Keeps DIR a Parquet copy of one database while an ingest stores into it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.key = f"{PART_KEY}{self.root.resolve()}|"

    # -- the ingest's hooks ---------------------------------------------------------------------------

    @contextmanager
    def _writing(self, tmp: Path | None = None) -> Iterator[None]:
        """A write into DIR: its failure (a full disk, a read-only folder) is an OutputError naming
        DIR, not the database (whose committed batches stand), and leaves no `tmp` behind."""
        try:
            yield
        except (duckdb.Error, OSError) as exc:
            if is_interrupt(exc):
                raise
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            raise OutputError(
                f"writing the Parquet copy {self.root} failed: {_reason(exc)}; the database keeps every "
                "batch committed before this: free space there (or make it writable) and rerun with the "
                "same --parquet, which writes what the copy lacks"
            ) from None

    def begin(self, con: duckdb.DuckDBPyConnection, ingest_id: int) -> None:
        """Remove parts no record names (a killed run's), then write what no record covers."""
        with self._writing():
            self._begin(con)

    def _begin(self, con: duckdb.DuckDBPyConnection) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        recorded = self._recorded(con)
        for table in PARTITIONED:
            for f in (self.root / table).glob("*/*/part-*.parquet"):
                m = _PART_FILE.match(f.name)
                if m is None or (int(m[1]), int(m[2])) not in recorded:
                    f.unlink()
        for f in self.root.glob("*/*/*/.part-*.tmp"):
            f.unlink()
        uncovered = self._uncovered(con)
        for ingest, lo, hi in uncovered:
            self._write_part(con, ingest, lo, hi, only_uncovered=True)

    def batch(self, con: duckdb.DuckDBPyConnection, ingest_id: int, first: int, last: int) -> None:
        """Append the lines (and their events) just stored, line_id in [first, last]."""
        self._write_part(con, ingest_id, first, last)

    def finish(self, con: duckdb.DuckDBPyConnection) -> None:
        """Snapshot every other table (one file each, replaced atomically)."""
        for table in _tables(con):
            if table in PARTITIONED:
                continue
            out = self.root / table / "part-0.parquet"
            tmp = out.with_name(".part-0.parquet.tmp")
            with self._writing(tmp):
                out.parent.mkdir(parents=True, exist_ok=True)
                con.execute(
                    f"COPY (SELECT * FROM {_ident(table)}) TO {sql_string(str(tmp))} (FORMAT parquet)"
                )
                os.replace(tmp, out)

    # -- parts ------------------------------------------------------------------------------------------

    def _write_part(
        self, con: duckdb.DuckDBPyConnection, ingest_id: int, lo: int, hi: int, only_uncovered: bool = False
    ) -> None:
        span = f"line_id BETWEEN {int(lo)} AND {int(hi)}"
        scopes = {"lines": span, "events": span}
        if only_uncovered:  # events carry no ingest_id: theirs is their line's
            lines = f"{span} AND ingest_id = {int(ingest_id)} AND NOT ({self._covered_sql()})"
            scopes = {"lines": lines, "events": f"line_id IN (SELECT line_id FROM lines WHERE {lines})"}
        name = f"part-{int(ingest_id)}-{int(lo)}.parquet"
        for table in PARTITIONED:
            scope = scopes[table]
            groups = con.execute(f"SELECT DISTINCT {_HOST}, {_HOUR} FROM {table} WHERE {scope}").fetchall()
            for host, hour in groups:
                d = self.root / table / f"pdf_host={hive_escape(host)}" / f"pdf_hour={hour}"
                tmp = d / f".{name}.tmp"
                with self._writing(tmp):
                    d.mkdir(parents=True, exist_ok=True)
                    con.execute(
                        f"COPY (SELECT * FROM {table} WHERE {scope} AND {_HOST} = {sql_string(host)} "
                        f"AND {_HOUR} = {sql_string(hour)} ORDER BY line_id) TO {sql_string(str(tmp))} (FORMAT parquet, ROW_GROUP_SIZE {PART_ROW_GROUP})"
                    )
                    os.replace(tmp, d / name)
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [f"{self.key}{ingest_id}-{lo}", str(hi)])

    def _recorded(self, con: duckdb.DuckDBPyConnection) -> set[tuple[int, int]]:
        rows = con.execute(
            "SELECT substr(key, ?) FROM meta WHERE starts_with(key, ?)", [len(self.key) + 1, self.key]
        ).fetchall()
        out = set()
        for (part,) in rows:
            ingest, _, lo = str(part).partition("-")
            out.add((int(ingest), int(lo)))
        return out

    def _covered_sql(self) -> str:
        """A predicate on `line_id`: inside a recorded part."""
        return (
            "EXISTS (SELECT 1 FROM meta m WHERE starts_with(m.key, "
            f"{sql_string(self.key)}) AND line_id BETWEEN "
            f"CAST(split_part(substr(m.key, {len(self.key) + 1}), '-', 2) AS BIGINT) AND CAST(m.value AS BIGINT))"
        )

    def _uncovered(self, con: duckdb.DuckDBPyConnection) -> list[tuple[int, int, int]]:
        """Per ingest, the line_id span of its lines no recorded part covers."""
        rows = con.execute(
            f"SELECT ingest_id, min(line_id), max(line_id) FROM lines WHERE NOT ({self._covered_sql()}) "
            "GROUP BY ingest_id ORDER BY ingest_id"
        ).fetchall()
        return [(int(i), int(lo), int(hi)) for i, lo, hi in rows]


def _reason(exc: BaseException) -> str:
    """The short reason of a failed write: an OSError's strerror, the message DuckDB's IO error
    wraps in JSON ("No space left on device"), else its first line."""
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    text = str(exc).strip()
    inner = re.search(r'"exception_message":"((?:[^"\\]|\\.)*)"', text)
    if inner:
        return inner.group(1).replace('\\"', '"')
    return text.splitlines()[0] if text else type(exc).__name__


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT temporary ORDER BY table_name"
    ).fetchall()
    return [r[0] for r in rows]


# ------------------------------------------------------------------ reading it back


def table_globs(root: Path) -> dict[str, str]:
    """Each table DIR holds -> the glob of its Parquet files (read with hive_partitioning for
    lines and events, and drop PARTITION_COLUMNS)."""
    root = Path(root)
    out: dict[str, str] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if d.name in PARTITIONED:
            if any(d.glob("*/*/part-*.parquet")):
                out[d.name] = str(d / "*" / "*" / "part-*.parquet")
        elif (d / "part-0.parquet").is_file():
            out[d.name] = str(d / "part-0.parquet")
    return out


def table_sql(root: Path, table: str) -> str:
    """A DuckDB query giving one table back from DIR exactly as the database held it (rows in no
    particular order): its Parquet files minus the partition columns."""
    glob = table_globs(root).get(table)
    if glob is None:
        raise FileNotFoundError(f"{root}: no Parquet files for table {table!r}")
    if table in PARTITIONED:
        cols = ", ".join(PARTITION_COLUMNS)
        return f"SELECT * EXCLUDE ({cols}) FROM read_parquet({sql_string(glob)}, hive_partitioning = true)"
    return f"SELECT * FROM read_parquet({sql_string(glob)})"


def read_table(con: duckdb.DuckDBPyConnection, root: Path, table: str) -> duckdb.DuckDBPyRelation:
    """One table back from DIR as a relation on `con` (see table_sql)."""
    return con.sql(table_sql(root, table))


def read_tables(root: Path) -> dict[str, str]:
    """Every table DIR holds -> the glob of its Parquet files (the contract's helper: the same as
    `table_globs`). Read lines/events with hive partitioning and drop PARTITION_COLUMNS, or use
    `table_sql`/`read_table`, which do."""
    return table_globs(root)


def read_relations(con: duckdb.DuckDBPyConnection, root: Path) -> dict[str, duckdb.DuckDBPyRelation]:
    """Every table DIR holds, as relations on `con` (see read_table)."""
    return {name: read_table(con, root, name) for name in table_globs(root)}
