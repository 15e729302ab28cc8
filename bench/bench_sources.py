"""Throughput of the source readers on N generated journald entries (default 200k).

    python bench/bench_sources.py [N] [--dir DIR] [--consumer]

Builds (once, in DIR) a .journal with systemd-journal-remote, its `journalctl -o export` and
`-o json` output and a plain text log, then reads each with every reader and prints entries/s.
`--consumer` adds downstream-like work per batch (a polars regex pass + a DuckDB insert) and
runs each reader with and without the background read-ahead thread, to show the overlap.
Entries carry the ~25 fields journald stores for a service line (bench/gen_journal.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_journal import entry

from pdforensics.sources import Selection, _common
from pdforensics.sources.export import ExportFileSource
from pdforensics.sources.journal import JournalSource
from pdforensics.sources.jsonlines import JsonLinesSource
from pdforensics.sources.plain import PlainFileSource


def prepare(n: int, d: Path) -> dict[str, list[Path]]:
    export = d / f"b{n}.export"
    if not export.exists():
        with open(export, "w") as f:
            for i in range(n):
                f.write(entry(i))
                f.write("\n")
    journals = sorted(d.glob(f"b{n}*.journal"))
    if not journals:
        with open(export, "rb") as f:
            subprocess.run(
                ["/lib/systemd/systemd-journal-remote", "-o", str(d / f"b{n}.journal"), "-"],
                stdin=f,
                check=True,
            )
        journals = sorted(d.glob(f"b{n}*.journal"))  # journal-remote may rotate into several files
    files = ["--file=" + str(p) for p in journals]
    out = {}
    for fmt in ("export", "json"):
        path = d / f"b{n}.journalctl.{fmt}"
        if not path.exists():
            with open(path, "wb") as f:
                subprocess.run(["journalctl", "--all", "--utc", "-o", fmt, *files], stdout=f, check=True)
        out[fmt] = [path]
    plain = d / f"b{n}.log"
    if not plain.exists():
        pl.read_ndjson(out["json"][0], schema={"MESSAGE": pl.String}).write_csv(
            plain, include_header=False, quote_style="never"
        )
    out["journal"] = journals
    out["plain"] = [plain]
    return out


def downstream(con: duckdb.DuckDBPyConnection, records: pl.DataFrame, first: bool) -> None:
    """Roughly what parse + store do with a batch: regex work in polars, an insert into DuckDB."""
    parsed = records.with_columns(
        prefix=pl.col("message").str.extract(r"^\[([0-9: -]+)(?: [A-Z]+\d+)*\]"),
        new_token=pl.col("message").str.extract(r"#new-token: (\d+)").cast(pl.Int64, strict=False),
    )
    con.register("batch", parsed)
    con.execute(
        "CREATE TABLE lines AS SELECT * FROM batch" if first else "INSERT INTO lines SELECT * FROM batch"
    )
    con.unregister("batch")


def run(label: str, source, consumer: bool) -> None:
    con = duckdb.connect() if consumer else None
    t = time.perf_counter()
    n = skipped = 0
    for batch in source.batches(Selection(units=("*",))):
        if con is not None:
            downstream(con, batch.records, first=n == 0)
        n += batch.records.height
        skipped += batch.skipped
    dt = time.perf_counter() - t
    print(f"{label:58s} {n + skipped:>8} entries {dt:6.2f} s {(n + skipped) / dt:>10,.0f} entries/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=200_000)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--consumer", action="store_true")
    args = ap.parse_args()
    d = args.dir or Path(tempfile.mkdtemp(prefix="pdf-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    files = prepare(args.n, d)
    readers = [
        ("journal file, python-systemd", lambda: JournalSource("files", files["journal"])),
        (
            "journal file, journalctl -o export",
            lambda: JournalSource("files", files["journal"], force_journalctl=True),
        ),
        ("export file (journalctl -o export)", lambda: ExportFileSource(files["export"][0])),
        ("json file (journalctl -o json)", lambda: JsonLinesSource(files["json"][0])),
        ("plain text log", lambda: PlainFileSource(files["plain"][0])),
    ]
    modes = [(2, "read-ahead thread"), (0, "inline")] if args.consumer else [(_common.READ_AHEAD, "")]
    for label, make in readers:
        for depth, mode in modes:
            _common.READ_AHEAD = depth
            run(f"{label} {'+ consumer, ' + mode if args.consumer else ''}", make(), args.consumer)


if __name__ == "__main__":
    main()
