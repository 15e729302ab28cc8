"""How fast is `verdict` on a database of N requests? (default 1,000,000)

    python bench/verdict_1m.py [--requests 1000000] [--db /tmp/verdict-1m.duckdb] [--keep] [--steps] [--threads N]

Writes N requests' events straight into a fresh pdforensics database with SQL (no simulator, no
parser: only `lines`/`events` as docs/internals.md defines them), folds them into the summary
tables as an ingest would, installs the views, then times `verdict.compute_verdict` on a read-only
connection, the way `pdforensics verdict` runs it, with its wall time, CPU time (all DuckDB threads)
and the process's peak RSS. `--steps` first times each view `compute_verdict` shadows, one after the other.
`--threads 1` runs DuckDB on one thread: on a busy shared machine its CPU time is the figure that
compares two versions (with all threads, other processes' load inflates both wall and CPU time).
Run 1 judges (the views compute the verdict, which is then kept beside the database:
pdforensics.judgement; its folder is emptied first), runs 2 and 3 read the kept judgement, as every
later `pdforensics verdict` on that database does. `--no-cache` computes every run (the figure
before issue 27).

The traffic: one prefill host and one decode host (the decode clock 1.5 s ahead), --log-requests
(Receive:/Finish: on both engines), a `Prefill batch` line per 10 requests and a `Decode batch`
line per 40, the watchdog armed at 60 s. 1 % of the requests are aborted while in the prefill
inflight queue (`Prefill transfer failed ... Aborted by AbortReq.` on 4 TP ranks, plus the
decode's failure lines), one in 100,000 is pinned (Receive on both engines, nothing after), the
last few hundred are still in flight at the window end; the rest complete.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import time
from pathlib import Path

from pdforensics import fold, judgement, store, verdict

T0 = 1_796_000_000_000_000  # 2026-11-30 UTC, in us
SKEW_US = 1_500_000  # the decode host's clock is ahead by this much


def _insert(con, n: int) -> None:  # type: ignore[no-untyped-def]
    step = 3_600_000_000 // n  # one hour of traffic
    con.execute(
        f"""
        CREATE TEMP TABLE req AS
        SELECT i,
            (1000000000000000000 + i * 7919)::UBIGINT AS room,
            {T0} + i * {step} AS t_arr,
            CASE WHEN i % 100 = 7 THEN 'abort'
                 WHEN i % 100000 = 50 THEN 'pin'
                 WHEN i >= {n} - 300 THEN 'open'
                 ELSE 'ok' END AS fate,
            printf('p%031x', i) AS prid, printf('d%031x', i) AS drid
        FROM range({n}) AS t(i)
        """
    )
    # (k, engine, host, event, time offset us, which fates, extra columns)
    kinds = [
        (0, "prefill", "p-node", "request_received", 0, "TRUE", "NULL", "NULL"),
        (1, "decode", "d-node", "request_received", 900 + SKEW_US, "TRUE", "NULL", "NULL"),
        (2, "prefill", "p-node", "request_finished", 400_000, "fate = 'ok'", "'length'", "NULL"),
        (3, "decode", "d-node", "request_finished", 5_000_000 + SKEW_US, "fate = 'ok'", "'length'", "NULL"),
        (4, "prefill", "p-node", "request_finished", 700_000, "fate = 'abort'", "'abort'",
         "'Prefill transfer failed ... Aborted by AbortReq.'"),
        (5, "decode", "d-node", "request_finished", 701_000 + SKEW_US, "fate = 'abort'", "'abort'",
         "'Decode transfer failed ... Aborted by AbortReq.'"),
    ]  # fmt: skip
    for k, engine, host, event, dt, where, finish_type, reason in kinds:
        rid = "prid" if engine == "prefill" else "drid"
        _rows(con, f"""
            SELECT i * 16 + {k} AS line_id, t_arr + {dt} AS ts_us, '{host}' AS host, '{engine}' AS engine,
                   '{event}' AS event, NULL::SMALLINT AS tp_rank, room AS bootstrap_room, {rid} AS rid,
                   {finish_type} AS finish_type, {reason} AS reason, NULL::SMALLINT AS rank
            FROM req WHERE {where}""")  # fmt: skip
    for rank in range(4):  # the abort hit the inflight queue: every TP rank logs it
        _rows(con, f"""
            SELECT i * 16 + 6 + {rank} AS line_id, t_arr + 690000 AS ts_us, 'p-node' AS host, 'prefill' AS engine,
                   'prefill_transfer_failed' AS event, {rank}::SMALLINT AS tp_rank, room AS bootstrap_room,
                   prid AS rid, NULL AS finish_type, 'Aborted by AbortReq.' AS reason, {rank}::SMALLINT AS rank
            FROM req WHERE fate = 'abort'""")  # fmt: skip
        _rows(con, f"""
            SELECT i * 16 + 10 + {rank} AS line_id, t_arr + 695000 + {SKEW_US} AS ts_us, 'd-node' AS host,
                   'decode' AS engine, 'decode_transfer_failed' AS event, {rank}::SMALLINT AS tp_rank,
                   room AS bootstrap_room, drid AS rid, NULL AS finish_type, 'Aborted by AbortReq.' AS reason,
                   {rank}::SMALLINT AS rank
            FROM req WHERE fate = 'abort'""")  # fmt: skip
    # gauges: a Prefill batch per 10 requests (the batch just run is in #inflight-req), a Decode batch per 40
    _rows(con, """
        SELECT i, i * 16 + 14 AS line_id, t_arr + 300000 AS ts_us, 'p-node' AS host, 'prefill' AS engine,
               'prefill_stats' AS event, 0::SMALLINT AS tp_rank, NULL::UBIGINT AS bootstrap_room, NULL AS rid,
               NULL AS finish_type, NULL AS reason, NULL::SMALLINT AS rank
        FROM req WHERE i % 10 = 0""",
        extra={"new_seq": "10", "inflight_req": "10 + (SELECT count(*) FROM req AS q WHERE q.fate = 'pin' AND q.i < r.i)",
               "bootstrap_req": "0", "queue_req": "0"})  # fmt: skip
    _rows(con, f"""
        SELECT i * 16 + 15 AS line_id, t_arr + 2000000 + {SKEW_US} AS ts_us, 'd-node' AS host, 'decode' AS engine,
               'decode_stats' AS event, 0::SMALLINT AS tp_rank, NULL::UBIGINT AS bootstrap_room, NULL AS rid,
               NULL AS finish_type, NULL AS reason, NULL::SMALLINT AS rank
        FROM req WHERE i % 40 = 0""", extra={"running_req": "40", "gen_throughput": "1500.0"})  # fmt: skip
    con.execute(
        f"""INSERT INTO events (line_id, ts_us, host, engine, event, tp_rank, timeout_s)
            VALUES (1, {T0 - 60_000_000}, 'p-node', 'prefill', 'watchdog_armed', 0, 60.0)"""
    )
    _lines_for_events(con)


def _rows(con, select: str, extra: dict[str, str] | None = None) -> None:  # type: ignore[no-untyped-def]
    extra = extra or {}
    cols = ", ".join(extra)
    vals = ", ".join(f"{v} AS {k}" for k, v in extra.items())
    con.execute(
        f"""INSERT INTO events (line_id, ts_us, app_ts_us, host, unit, engine, pid, invocation_id, tp_rank,
                                event, entry, bootstrap_room, rid, finish_type, reason, rank
                                {", " + cols if cols else ""})
            SELECT line_id, ts_us, ts_us // 1000000 * 1000000, host, 'sglang-' || engine || '.service', engine,
                   CASE engine WHEN 'prefill' THEN 1100 ELSE 2200 END, 'inv-' || engine, tp_rank, event, event,
                   bootstrap_room, rid, finish_type, reason, rank {", " + vals if vals else ""}
            FROM ({select}) AS r"""
    )


def _lines_for_events(con) -> None:  # type: ignore[no-untyped-def]
    con.execute(
        """INSERT INTO lines (line_id, ingest_id, source, source_key, seq, host, unit, engine, pid,
                              invocation_id, syslog_identifier, priority, ts_us, app_ts_us, ts_origin,
                              app_ts_precision_us, tp_rank, message, event, entry)
           SELECT line_id, 1, 'bench', 'bench', line_id, host, unit, engine, pid, invocation_id, 'python3', 6,
                  ts_us, app_ts_us, 'journal', 1000000, tp_rank, event || ' ' || coalesce(rid, ''), event, entry
           FROM events"""
    )
    con.execute(
        "INSERT INTO ingests (ingest_id, started_at, sources, status) VALUES (1, now(), 'bench', 'ok')"
    )


def build(path: Path, n: int) -> None:
    path.unlink(missing_ok=True)
    con = store.open_db(path)
    try:
        con.execute("BEGIN")
        _insert(con, n)
        # what an ingest maintains batch by batch (the rows above bypass store_batch)
        fold.rebuild(con)
        con.execute("COMMIT")
        verdict.install_views(con)
    finally:
        con.close()


def steps(con) -> None:  # type: ignore[no-untyped-def]
    """Each view `compute_verdict` shadows, computed in its order (each reads the ones before)."""
    verdict.ensure_views(con)
    verdict.apply_options(con, verdict.VerdictOptions())
    catalog = con.execute("SELECT current_database()").fetchall()[0][0]
    made = []
    try:
        for name in verdict._VERDICT_VIEWS:
            t, cpu = time.perf_counter(), time.process_time()
            con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{catalog}".main."{name}"')
            made.append(name)
            print(
                f"  {name:<16} {time.perf_counter() - t:6.2f} s wall {time.process_time() - cpu:6.2f} s CPU"
            )
    finally:
        for name in reversed(made):
            con.execute(f'DROP TABLE temp.main."{name}"')


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--db", type=Path, default=Path("/tmp/verdict-1m.duckdb"))
    ap.add_argument("--keep", action="store_true", help="reuse an existing database")
    ap.add_argument("--steps", action="store_true", help="time each materialised view first")
    ap.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: DuckDB's own)")
    ap.add_argument("--no-cache", action="store_true", help="never keep or read a judgement")
    args = ap.parse_args(argv)
    if args.no_cache:
        os.environ[judgement.ENV] = "off"
    if not (args.keep and args.db.exists()):
        t = time.perf_counter()
        build(args.db, args.requests)
        print(f"built {args.db} with {args.requests:,} requests in {time.perf_counter() - t:.1f} s")
    else:  # a kept database gets this version's views (read-only, stale ones would be temporary)
        con = store.open_db(args.db)
        verdict.ensure_views(con)
        con.close()
    shutil.rmtree(judgement.folder_of(args.db), ignore_errors=True)  # run 1 judges
    con = store.open_db(args.db, read_only=True)
    try:
        n_events = con.execute("SELECT count(*) FROM events").fetchall()[0][0]
        if args.threads:
            con.execute(f"SET threads = {int(args.threads)}")
        if args.steps:
            steps(con)
        for run in range(3):
            t, cpu = time.perf_counter(), time.process_time()
            v = verdict.compute_verdict(con, verdict.VerdictOptions())
            took, cpu = time.perf_counter() - t, time.process_time() - cpu
            how = "computed" if args.no_cache else "judged and kept" if run == 0 else "read back"
            print(f"run {run + 1} ({how}): verdict {v.verdict} over {v.counts['requests']:,} requests / {n_events:,} events "
                  f"in {took:.2f} s wall, {cpu:.2f} s CPU ({len(v.requests):,} not completed; "
                  f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")  # fmt: skip
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    finally:
        con.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
