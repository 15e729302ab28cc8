"""What storing the messages costs: a zstd column (the `lines` table today) against compressed blocks.

    python bench/text_store.py [DIR]   # DIR: plain .log files; default the bench's cached plain-1M

Each layout goes into a fresh DuckDB file, one thread, checkpoint included; docs/benchmark.md has
the figures (issue 17, session 8).
"""

import glob
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import zstandard as zstd

DIR = (
    sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent / "results/work/plain-1M/plain")
)
files = sorted(glob.glob(os.path.join(DIR, "*.log")))
if not files:
    sys.exit(f"text_store: no .log files in {DIR}")
TMP = tempfile.mkdtemp()
msgs = pl.concat(
    [
        pl.read_csv(
            f,
            has_header=False,
            separator="\x1f",
            quote_char=None,
            infer_schema=False,
            new_columns=["message"],
        )
        for f in files
    ]
)["message"]
n = len(msgs)
print("lines", n, "bytes", sum(os.path.getsize(f) for f in files))


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(name, fn, db):
    if os.path.exists(db):
        os.remove(db)
    con = duckdb.connect(db)
    con.execute("SET threads=1")
    t, c = time.perf_counter(), cpu()
    fn(con)
    con.execute("CHECKPOINT")
    con.close()
    print(
        f"{name:44s} {time.perf_counter() - t:6.2f} s wall {cpu() - c:6.2f} s CPU  {os.path.getsize(db) / 1e6:7.1f} MB"
    )


ids = pl.Series("line_id", range(n), pl.Int64)
frame = pl.DataFrame([ids, msgs])
newest = pl.CompatLevel.newest()


def column_zstd(con):
    con.execute("CREATE TABLE t (line_id BIGINT, message VARCHAR USING COMPRESSION zstd)")
    for part in frame.iter_slices(122_880):
        con.register("b", part.to_arrow(compat_level=newest))
        con.execute("INSERT INTO t SELECT * FROM b")
        con.unregister("b")


def ids_only(con):
    con.execute("CREATE TABLE t (line_id BIGINT)")
    for part in frame.select("line_id").iter_slices(122_880):
        con.register("b", part.to_arrow(compat_level=newest))
        con.execute("INSERT INTO t SELECT * FROM b")
        con.unregister("b")


def blocks(level, per):
    def fn(con):
        con.execute("CREATE TABLE blocks (first_line_id BIGINT, n INTEGER, text BLOB)")
        cctx = zstd.ZstdCompressor(level=level)
        firsts, ns, texts = [], [], []
        for start in range(0, n, per):
            part = msgs.slice(start, per)
            # offsets are implied: lines joined by \n (a message holds no \n here: continuation lines are their own)
            texts.append(cctx.compress("\n".join(part.to_list()).encode()))
            firsts.append(start)
            ns.append(len(part))
        tbl = pa.table(
            {"first_line_id": firsts, "n": pa.array(ns, pa.int32()), "text": pa.array(texts, pa.binary())}
        )
        con.register("b", tbl)
        con.execute("INSERT INTO blocks SELECT * FROM b")

    return fn


def blocks_join(level, per):
    # the join done by polars (Rust), not a Python list: str.join over row groups
    def fn(con):
        con.execute("CREATE TABLE blocks (first_line_id BIGINT, n INTEGER, text BLOB)")
        cctx = zstd.ZstdCompressor(level=level)
        g = (
            frame.with_columns(blk=(pl.col("line_id") // per))
            .group_by("blk", maintain_order=True)
            .agg(
                pl.col("line_id").first().alias("first_line_id"),
                pl.len().alias("n"),
                pl.col("message").str.join("\n"),
            )
        )
        texts = [cctx.compress(s.encode()) for s in g["message"].to_list()]
        tbl = pa.table(
            {
                "first_line_id": g["first_line_id"].to_arrow(),
                "n": g["n"].cast(pl.Int32).to_arrow(),
                "text": pa.array(texts, pa.binary()),
            }
        )
        con.register("b", tbl)
        con.execute("INSERT INTO blocks SELECT * FROM b")

    return fn


run("message column, zstd (today)", column_zstd, os.path.join(TMP, "tb1.duckdb"))
run("line_id only (no text)", ids_only, os.path.join(TMP, "tb2.duckdb"))
run("blocks of 4096, zstd 3, python join", blocks(3, 4096), os.path.join(TMP, "tb3.duckdb"))
run("blocks of 4096, zstd 1, polars join", blocks_join(1, 4096), os.path.join(TMP, "tb4.duckdb"))
run("blocks of 4096, zstd 3, polars join", blocks_join(3, 4096), os.path.join(TMP, "tb5.duckdb"))
