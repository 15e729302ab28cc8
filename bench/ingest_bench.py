"""`python bench/ingest_bench.py`: ingest speed beside lnav, polars, DuckDB, `grep` and `journalctl`.

    python bench/ingest_bench.py --sizes 1M,10M --runs 3,1   # the published table (docs/benchmark.md)
    python bench/ingest_bench.py --sizes 1M --runs 1 --dir INPUTS --db-dir /tmp/bench-db
                                                            # inputs cached earlier, read only
    python bench/ingest_bench.py --quick                     # a smoke run in seconds (what the test runs)

For each size the simulator writes one incident (`decode_restart_old_build`, scaled to about that
many lines) twice: as plain per-unit SGLang logs and as a `.journal` (its Journal Export Format
output through `systemd-journal-remote`). Inputs are cached in `--dir` (`plain-1M/`, `journal-1M/`,
each complete once it holds `DONE`), keyed by size, so a rerun only measures. Databases and the
report go to `--db-dir` (default: `--dir`); with a separate `--db-dir` the inputs must already be
cached: the bench then never writes into `--dir`. Then, for each size (smallest first), in each of
its `--runs` rounds (the tools interleaved on the same inputs, so a load spike on this shared
machine hits every tool alike):

* plain: `pdforensics` ingest of the log files into a fresh DuckDB file, the same ingest again
  (an unchanged window: everything is already stored), and on the same files: lnav indexing them
  (`lnav -n -c ';SELECT count(*) FROM all_logs'`, its line count checked against the files'), a
  polars one-liner and a DuckDB one-liner (`read_csv` of the lines as one column + two extractions,
  the DuckDB one into a table of a fresh database file), and `grep -cE PATTERN`;
* plain, each stage alone: reading the files, reading and parsing them (nothing stored), and
  storing the rows the ingest stored into a fresh file: their CPU over the cores is this design's
  floor, printed beside lnav;
* journal: ingest of the `.journal` files, the re-ingest, `journalctl --file ... -o json` and
  `-o export` into /dev/null, and a python-systemd `Reader` loop over every entry;
* mixed: a journal where the incident's units are 1 entry in MIXED_SHARE among other units' (a
  busy node), ingested with `--unit 'sglang*'`, beside `journalctl -u 'sglang*' -o export`;
* answer (issue 30): the operator's wait from raw input to the answer, whole processes: lnav
  answering "rooms received > 60 s before the end that the decode never finished" on the plain
  files, `pdforensics ingest` (its verdict included) of the plain files and of the journal, and
  `journalctl -o short-iso | grep -c`.

Every measured command runs in its own process: its wall time, CPU time (user + system, its
children included) and peak RSS come from `wait4`; ingest and one-liner figures are the call itself
(the ingest with `views=False`), timed inside the child, without interpreter start-up and imports
(reported apart), their CPU time `time.process_time()` plus `RUSAGE_CHILDREN` (the journal reader
runs in a child process per file). Every baseline's speed is also printed as a ratio to the ingest.
Last, on the largest size's plain-ingest database: installing the classification views,
`verdict.compute_verdict` and `report.write_report`. Each figure is the median over the runs, with the
1-minute load average taken before each measurement. The table goes to stdout (Markdown) and
everything to `--out` (JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pdforensics.verdict import VerdictOptions

SCENARIO = "decode_restart_old_build"
NOW_US = 1_796_040_600_000_000  # 2026-11-30 12:10:00 UTC: fixed, so cached inputs stay valid
SEED = 7
GREP_PATTERN = "Prefill batch|Decode batch|bootstrap_room"
JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")
BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = BENCH_DIR / "results" / "bench.json"
DEFAULT_WORK = BENCH_DIR / "results" / "work"
# The one-liners' two extractions: the line's `[time ...]` prefix and the request's bootstrap_room.
# Both are RE2/Rust-regex syntax, so polars and DuckDB run the very same patterns.
PREFIX_RE = r"^\[([^\]]+)\]"
ROOM_RE = r"bootstrap_room=(\d+)"
# The one-liners read each line as one CSV column: a separator byte no log line holds, no quoting.
LINE_SEP = "\x1f"
# lnav indexes the files, then answers; `lnav_file.lines` is every line it indexed (all_logs folds
# continuation lines into their message), so the bench can check that it read all of them.
LNAV_QUERY = (
    ";SELECT (SELECT sum(lines) FROM lnav_file) AS file_lines, (SELECT count(*) FROM all_logs) AS messages"
)

# Issue 30: the operator's wait, raw input to the answer. The question: rooms the prefill received
# more than 60 s before the end that the decode never finished. lnav answers it with a query-time
# regex over `log_text` (its `log_body` form is 5-8x slower and would flatter pdforensics); the
# form and its figures: ../shared/perf-facts.md.
LNAV_ANSWER_QUERY = (
    ";WITH recv AS (SELECT regexp_match('bootstrap_room=(\\d+)', log_text) AS room, min(log_time) AS t"
    " FROM all_logs WHERE log_path LIKE '%prefill%' AND log_text LIKE '%] Receive: obj=%' GROUP BY 1),"
    " fin AS (SELECT regexp_match('bootstrap_room=(\\d+)', log_text) AS room, max(log_time) AS t"
    " FROM all_logs WHERE log_path LIKE '%decode%' AND log_text LIKE '%] Finish: obj=%' GROUP BY 1),"
    " last AS (SELECT max(log_time) AS t FROM all_logs)"
    " SELECT count(*) AS unfinished FROM recv, last LEFT JOIN fin ON fin.room = recv.room AND fin.t >= recv.t"
    " WHERE fin.room IS NULL AND julianday(last.t) - julianday(recv.t) > 60.0/86400"
)
# `journalctl | grep`: the operator's first try on the journal (the same rooms' Receive: lines).
JOURNAL_GREP = "journalctl --file {files} -o short-iso | grep -c 'Receive: obj='"

# Issue 17's "Done when" on the 2-core machine: (comparison, bound). Each holds in the same run as the
# figures it compares; the AIMS are the stretch figures, shown apart in the table.
TARGETS: dict[str, tuple[str, float]] = {
    "plain_vs_lnav": (">=", 1),
    "plain_lines_per_s": (">=", 1_000_000),
    "plain_vs_grep_x": ("<=", 10),
    "journal_vs_journalctl_export": (">=", 1),
    "journal_entries_per_s": (">=", 250_000),
    "plain_peak_rss_mb": ("<", 1536),
    "journal_peak_rss_mb": ("<", 1536),
    "plain_reingest_share": ("<", 0.05),
    "journal_reingest_share": ("<", 0.05),
    "verdict_s": ("<", 3),
    "report_s": ("<", 15),
}
AIMS = frozenset({"plain_lines_per_s", "plain_vs_grep_x", "journal_entries_per_s"})


# ------------------------------------------------------------------ processes


@dataclass
class Proc:
    wall_s: float
    cpu_s: float  # user + system of the child (and children it waited for)
    rss_mb: float  # peak resident set size
    out: str
    load: float  # 1-minute load average just before it started


def spawn(cmd: list[str], capture: bool = True, env: dict[str, str] | None = None) -> Proc:
    """Run `cmd`, returning its own wall/CPU time and peak RSS (wait4: per child, not cumulative).

    stdout is captured (children print JSON) or thrown away (`journalctl ... > /dev/null`).
    """
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile() as err, open(os.devnull, "wb") as null:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if capture else null, stderr=err, env=env)
        out = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)  # not proc.wait(): that would hide the rusage
        wall = time.perf_counter() - started
        if proc.stdout:
            proc.stdout.close()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(
                f"{' '.join(cmd[:5])} ... failed ({proc.returncode}): {err.read().decode()[-2000:]}"
            )
    return Proc(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        rss_mb=usage.ru_maxrss / 1024,
        out=out.decode(),
        load=load,
    )


def child(*args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", *args]


def in_child(*args: str) -> Any:
    """Unmeasured work (making inputs, reading versions) in a child process; returns its JSON.

    The bench's own process stays small (no polars, DuckDB or simulator in it) because Linux
    carries a process's peak RSS across `exec` into the child it spawns: a measured command's
    peak RSS from `wait4` is at least this process's peak (`bench_peak_rss_mb` in the JSON).
    """
    done = subprocess.run(child(*args), stdout=subprocess.PIPE, check=True)
    return json.loads(done.stdout)


def own_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_now() -> float:
    """CPU seconds of this process and of every child it has waited for (the journal reader's)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


# ------------------------------------------------------------------ inputs


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2k, 1M, 10M)")
    return int(float(m.group(1)) * {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2).lower()])


def size_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def _done(d: Path) -> bool:
    return (d / "DONE").exists()


def _line_count(paths: list[Path]) -> tuple[int, int]:
    lines = size = 0
    for p in paths:
        size += p.stat().st_size
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):  # small: see `in_child`
                lines += chunk.count(b"\n")
    return lines, size


def make_plain(work: Path, lines: int) -> list[Path]:
    """The incident as plain logs of about `lines` lines; the scale that gave them is kept for the journal.

    Lines grow a little slower than the simulator's scale, so the scale is corrected until the
    count is within 5 % (plain output is cheap: ~100k lines/s).
    """
    from pdforensics.simulate import simulate_plain

    d = work / f"plain-{size_label(lines)}"
    if not _done(d):
        shutil.rmtree(d, ignore_errors=True)
        scale = max(lines / _lines_per_scale(work), 0.05)
        for _ in range(4):
            simulate_plain(SCENARIO, d, now_us=NOW_US, seed=SEED, scale=scale)
            got = _line_count(sorted((d / "plain").glob("*.log")))[0]
            if abs(got / lines - 1) <= 0.05:
                break
            scale *= lines / got
        (d / "scale.json").write_text(json.dumps({"scale": scale, "lines": got}))
        (d / "DONE").touch()
    return sorted((d / "plain").glob("*.log"))


def _lines_per_scale(work: Path) -> float:
    """Lines per unit of simulator scale, from the largest input made so far (about 100)."""
    done = sorted(
        (json.loads(p.read_text()) for p in work.glob("plain-*/scale.json")), key=lambda d: d["lines"]
    )
    return done[-1]["lines"] / done[-1]["scale"] if done else 100.0


def _scale(work: Path, lines: int) -> float:
    make_plain(work, lines)
    return float(json.loads((work / f"plain-{size_label(lines)}" / "scale.json").read_text())["scale"])


def make_journal(work: Path, lines: int) -> list[Path]:
    """The same incident as a journal: simulator export -> systemd-journal-remote (export removed)."""
    from pdforensics.simulate import simulate

    d = work / f"journal-{size_label(lines)}"
    if not _done(d):
        shutil.rmtree(d, ignore_errors=True)
        simulate(SCENARIO, d, now_us=NOW_US, seed=SEED, scale=_scale(work, lines), formats=("export",))
        export = d / "journal.export"
        with open(export, "rb") as f:
            subprocess.run(
                [str(JOURNAL_REMOTE), "-o", str(d / "incident.journal"), "-"],
                stdin=f,
                check=True,
                capture_output=True,
            )
        export.unlink()  # 2x the journal's size, and nothing reads it again
        (d / "DONE").touch()
    return sorted(d.glob("*.journal"))  # journal-remote may rotate into several files


# The mixed journal: the incident's sglang units are 1 entry in MIXED_SHARE, the rest other units of
# a busy host (their lines interleaved by time), as on a real node's journal.
MIXED_SHARE = 20
MIXED_UNITS = ("sglang*",)
_NOISE_UNITS = ("sshd.service", "kubelet.service", "containerd.service", "cron.service", "docker.service")


def _export_entries(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(realtime, raw entry with its blank line) of a Journal Export Format stream: text fields
    `NAME=value`, binary ones `NAME`, a le64 size and the bytes (which may hold blank lines)."""
    pos, start, realtime = 0, 0, 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        nl = len(data) if nl < 0 else nl
        line = data[pos:nl]
        if not line:
            if pos > start:
                yield realtime, data[start : nl + 1]
            pos = start = nl + 1
            continue
        if b"=" in line:
            if line.startswith(b"__REALTIME_TIMESTAMP="):
                realtime = int(line.partition(b"=")[2])
            pos = nl + 1
        else:
            (size,) = struct.unpack_from("<Q", data, nl + 1)
            pos = nl + 9 + size + 1
    if pos > start < len(data):
        yield realtime, data[start:] + b"\n"


def _noise_entry(i: int, realtime: int) -> bytes:
    unit = _NOISE_UNITS[i % len(_NOISE_UNITS)]
    fields = {
        "__REALTIME_TIMESTAMP": str(realtime), "__MONOTONIC_TIMESTAMP": str(realtime - NOW_US + 10**12),
        "_BOOT_ID": "0123456789abcdef0123456789abcdef", "_MACHINE_ID": "fedcba9876543210fedcba9876543210",
        "_HOSTNAME": "dsv4-node-01", "_TRANSPORT": "stdout", "PRIORITY": "6", "SYSLOG_IDENTIFIER": unit.split(".")[0],
        "_UID": "0", "_GID": "0", "_COMM": unit.split(".")[0], "_SYSTEMD_CGROUP": f"/system.slice/{unit}",
        "_SYSTEMD_UNIT": unit, "_SYSTEMD_SLICE": "system.slice", "_PID": str(2000 + i % 5),
        "MESSAGE": f"{unit.split('.')[0]}[{2000 + i % 5}]: request {i} handled in {i % 97} ms "
        f"(peer 10.0.{i % 250}.{i % 13}:{40000 + i % 20000}, status ok)",
    }  # fmt: skip
    return ("\n".join(f"{k}={v}" for k, v in fields.items()) + "\n\n").encode()


def make_mixed(work: Path, lines: int) -> list[Path]:
    """About `lines` entries: the incident scaled to lines / MIXED_SHARE, the other units' entries
    spread over its time span between them, through systemd-journal-remote."""
    from pdforensics.simulate import simulate

    d = work / f"mixed-{size_label(lines)}"
    if not _done(d):
        shutil.rmtree(d, ignore_errors=True)
        scale = _scale(work, lines) / MIXED_SHARE
        simulate(SCENARIO, d, now_us=NOW_US, seed=SEED, scale=scale, formats=("export",))
        export = d / "journal.export"
        sglang = list(_export_entries(export.read_bytes()))
        export.unlink()
        first, last = sglang[0][0], sglang[-1][0]
        n_noise = len(sglang) * (MIXED_SHARE - 1)
        step = max((last - first) / max(n_noise, 1), 1e-3)
        proc = subprocess.Popen([str(JOURNAL_REMOTE), "-o", str(d / "mixed.journal"), "-"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        assert proc.stdin is not None
        k = 0
        for realtime, raw in sglang:
            while k < n_noise and first + int(k * step) <= realtime:
                proc.stdin.write(_noise_entry(k, first + int(k * step)))
                k += 1
            proc.stdin.write(raw)
        while k < n_noise:
            proc.stdin.write(_noise_entry(k, first + int(k * step)))
            k += 1
        proc.stdin.close()
        if proc.wait() != 0:
            raise RuntimeError(f"systemd-journal-remote failed: {proc.stderr.read().decode()[-500:]}")  # type: ignore[union-attr]
        (d / "DONE").touch()
    return sorted(d.glob("*.journal"))


def make_collection(journal: list[Path], out: Path) -> Path:
    """A journal-remote collection from the journal input, which stays read-only: one sender's
    files per unit (`journalctl -o export _SYSTEMD_UNIT=U` -> `systemd-journal-remote -o
    remote-<U>.journal`, which rotates as a real collection does), made once into `out`."""
    if _done(out):
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    files = [f"--file={p}" for p in journal]
    units = subprocess.run(
        ["journalctl", *files, "-F", "_SYSTEMD_UNIT"], check=True, capture_output=True, text=True
    ).stdout.split()
    for unit in sorted(units):
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", unit.removesuffix(".service"))
        export = subprocess.Popen(
            ["journalctl", *files, "--no-pager", "-o", "export", f"_SYSTEMD_UNIT={unit}"],
            stdout=subprocess.PIPE,
        )
        subprocess.run(
            [str(JOURNAL_REMOTE), "-o", str(out / f"remote-{name}.journal"), "-"],
            stdin=export.stdout, check=True, capture_output=True,
        )  # fmt: skip
        if export.stdout:
            export.stdout.close()
        if export.wait() != 0:
            raise RuntimeError(f"journalctl -o export _SYSTEMD_UNIT={unit} failed")
    (out / "DONE").touch()
    return out


# ------------------------------------------------------------------ children


def _child_main(args: list[str]) -> None:
    """Work done in a measured subprocess; prints one JSON object."""
    what = args[0]
    if what == "make":
        make = {"plain": make_plain, "journal": make_journal, "mixed": make_mixed}[args[1]]
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON only
            made = make(Path(args[3]), int(args[2]))
        print(json.dumps([str(p) for p in made]))
    elif what == "machine":
        print(json.dumps(machine()))
    elif what == "ingest":
        _child_ingest(args[1], Path(args[2]), [Path(p) for p in args[3:]])
    elif what == "collection":
        _child_collection(int(args[1]), Path(args[2]), Path(args[3]))
    elif what == "stages":
        _child_stages(Path(args[1]), Path(args[2]), [Path(p) for p in args[3:]])
    elif what == "reader":
        _child_reader([Path(p) for p in args[1:]])
    elif what == "polars":
        _child_polars([Path(p) for p in args[1:]])
    elif what == "duckdb":
        _child_duckdb(Path(args[1]), [Path(p) for p in args[2:]])
    elif what == "verdict":
        _child_verdict(Path(args[1]))
    elif what == "report":
        _child_report(Path(args[1]), Path(args[2]))
    else:
        raise SystemExit(f"unknown child task {what!r}")


def _child_ingest(kind: str, db: Path, files: list[Path]) -> None:
    t0 = time.perf_counter()
    from pdforensics.catalog import load_catalog
    from pdforensics.ingest import ingest
    from pdforensics.sources import Selection, Source
    from pdforensics.sources.journal import JournalSource
    from pdforensics.sources.plain import PlainFileSource

    catalog = load_catalog()
    sources: list[Source] = (
        [PlainFileSource(p) for p in files] if kind == "plain" else [JournalSource("files", files)]
    )
    startup = time.perf_counter() - t0
    cpu = cpu_now()
    units = MIXED_UNITS if kind == "mixed" else ("*",)
    s = ingest(db, sources, Selection(units=units), catalog, views=False)
    cpu = cpu_now() - cpu
    print(
        json.dumps(
            {
                "records": s.records,
                "stored": s.stored,
                "duplicates": s.duplicates,
                "elapsed_s": s.elapsed_s,
                "cpu_s": cpu,
                "startup_s": startup,
                "skipped": s.skipped,
                "readers": s.readers,
            }
        )
    )


def _child_stages(stored: Path, fresh: Path, files: list[Path]) -> None:
    """The plain ingest's stages each alone, in CPU seconds: reading the files, reading + parsing
    them (no store), and storing the rows an ingest stored (`stored`, read back batch by batch,
    unmeasured) into a fresh database file (`fresh`) with the ingest's own `store_batch`. Their
    sum over the cores is the fastest this design could ingest the files on this machine."""
    import polars as pl

    from pdforensics import store
    from pdforensics.catalog import load_catalog
    from pdforensics.ingest import BATCH_SIZE, INGEST_MEMORY_LIMIT, _batches
    from pdforensics.parse import ParseOptions, StreamCarry, parse_records
    from pdforensics.schema import EVENT_COLUMNS, LINE_COLUMNS, empty_rejects
    from pdforensics.sources import Selection
    from pdforensics.sources.plain import PlainFileSource

    selection = Selection(units=("*",))
    opts = ParseOptions(catalog=load_catalog())

    def batches() -> Any:
        return _batches([PlainFileSource(p) for p in files], selection, BATCH_SIZE)

    cpu = cpu_now()
    read = sum(b.records.height for b in batches())
    read_cpu = cpu_now() - cpu
    cpu, carry, parsed = cpu_now(), StreamCarry(), 0
    for batch in batches():
        parsed += parse_records(batch.records, opts, line_id_base=parsed, carry=carry).lines.height
    parse_cpu = cpu_now() - cpu
    source = store.open_db(stored, read_only=True)
    con = store.open_db(fresh)
    stored_rows, store_cpu = 0, 0.0
    lines_cols = ", ".join(c for c in LINE_COLUMNS if c != "ingest_id")
    try:
        ingest_id = store.begin_ingest(con, "bench", "stages", "*", None, None)
        (last,) = source.execute("SELECT coalesce(max(line_id), -1) FROM lines").fetchone() or (-1,)
        with store.bulk_load(con, INGEST_MEMORY_LIMIT, threads=1):
            for first in range(0, last + 1, BATCH_SIZE):
                span = [first, first + BATCH_SIZE - 1]
                where = "WHERE line_id BETWEEN ? AND ? ORDER BY line_id"
                lines = store.query_pl(source, f"SELECT {lines_cols} FROM lines {where}", span)
                events = store.query_pl(
                    source, f"SELECT {', '.join(EVENT_COLUMNS)} FROM events {where}", span
                )
                events = events.with_columns(pl.col("extra").cast(pl.String))
                cpu = cpu_now()
                store.store_batch(con, ingest_id, lines, events, empty_rejects(), {"stored": lines.height})
                store_cpu += cpu_now() - cpu
                stored_rows += lines.height
    finally:
        source.close()
        con.close()
    print(
        json.dumps(
            {"read": read, "parsed": parsed, "stored": stored_rows, "read_cpu_s": read_cpu,
             "parse_cpu_s": parse_cpu, "store_cpu_s": store_cpu}
        )
    )  # fmt: skip


def _child_collection(jobs: int, db: Path, directory: Path) -> None:
    """`ingest -D DIR --jobs N`: CPU time includes the worker processes (reaped: RUSAGE_CHILDREN)."""
    t0 = time.perf_counter()
    from pdforensics.catalog import load_catalog
    from pdforensics.ingest import ingest
    from pdforensics.sources import Selection
    from pdforensics.sources.journal import JournalSource

    catalog = load_catalog()
    sources = [JournalSource("directory", [directory])]
    startup = time.perf_counter() - t0
    cpu = cpu_now()
    s = ingest(db, sources, Selection(units=("*",)), catalog, views=False, jobs=jobs)
    cpu = cpu_now() - cpu
    info = {"records": s.records, "stored": s.stored, "rejected": s.rejected, "elapsed_s": s.elapsed_s}
    print(json.dumps(info | {"cpu_s": cpu, "startup_s": startup, "files": len(sources[0].files)}))


def _child_reader(files: list[Path]) -> None:
    """What a Python tool on python-systemd does: the high-level Reader, every entry converted."""
    from systemd import journal

    reader = journal.Reader(files=[str(p) for p in files])
    started, cpu = time.perf_counter(), cpu_now()
    n = sum(1 for _ in reader)
    print(json.dumps({"entries": n, "elapsed_s": time.perf_counter() - started, "cpu_s": cpu_now() - cpu}))


def _child_polars(files: list[Path]) -> None:
    """What an operator's polars one-liner does: every line as one column, the prefix and room extracted."""
    import polars as pl

    started, cpu = time.perf_counter(), cpu_now()
    df = (
        pl.scan_csv(
            files,
            has_header=False,
            new_columns=["line"],
            separator=LINE_SEP,
            quote_char=None,
            infer_schema=False,
            encoding="utf8-lossy",
        )
        .with_columns(prefix=pl.col("line").str.extract(PREFIX_RE), room=pl.col("line").str.extract(ROOM_RE))
        .collect()
    )
    elapsed, cpu = time.perf_counter() - started, cpu_now() - cpu
    rooms = int(df["room"].is_not_null().sum())
    print(json.dumps({"lines": df.height, "rooms": rooms, "elapsed_s": elapsed, "cpu_s": cpu}))


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _child_duckdb(db: Path, files: list[Path]) -> None:
    """The DuckDB one-liner: the lines read as one column, both extractions, into a fresh database file."""
    import duckdb

    started, cpu = time.perf_counter(), cpu_now()
    con = duckdb.connect(str(db))
    try:
        con.execute(
            f"""CREATE TABLE lines AS
            SELECT line, regexp_extract(line, {_sql_str(PREFIX_RE)}, 1) AS prefix,
                   regexp_extract(line, {_sql_str(ROOM_RE)}, 1) AS room
            FROM read_csv([{", ".join(_sql_str(str(f)) for f in files)}], columns = {{'line': 'VARCHAR'}},
                          delim = {_sql_str(LINE_SEP)}, quote = '', escape = '', header = false,
                          auto_detect = false, max_line_size = 100000000)"""
        )
    finally:
        con.close()  # timed too: the table is in the file once the close has checkpointed it
    elapsed, cpu = time.perf_counter() - started, cpu_now() - cpu
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT count(*), count(*) FILTER (WHERE room <> '') FROM lines").fetchone()
    finally:
        con.close()
    lines, rooms = row if row else (0, 0)
    print(json.dumps({"lines": lines, "rooms": rooms, "elapsed_s": elapsed, "cpu_s": cpu}))


def _scenario_options() -> VerdictOptions:
    """The options the operator of this incident passes (its --watchdog-timeout: the old build logs none)."""
    from pdforensics.simulate import SCENARIOS
    from pdforensics.verdict import VerdictOptions

    return VerdictOptions(**SCENARIOS[SCENARIO].verdict_options)


def _child_verdict(db: Path) -> None:
    from pdforensics import store
    from pdforensics.verdict import compute_verdict, install_views

    con = store.open_db(db)
    try:
        started = time.perf_counter()
        install_views(con)
        views = time.perf_counter() - started
        started = time.perf_counter()
        v = compute_verdict(con, _scenario_options())
        elapsed = time.perf_counter() - started
        lines = con.execute("SELECT count(*) FROM lines").fetchone()
    finally:
        con.close()
    print(
        json.dumps(
            {
                "views_s": views,
                "elapsed_s": elapsed,
                "verdict": v.verdict,
                "requests": v.counts["requests"],
                "lines": lines[0] if lines else 0,
            }
        )
    )


def _child_report(db: Path, out: Path) -> None:
    from pdforensics import judgement, store
    from pdforensics.report import write_report

    # the report computed from the views in every round, as issue 17's target means it (a kept
    # judgement, pdforensics.judgement, would make the later rounds read it back)
    os.environ[judgement.ENV] = "off"
    con = store.open_db(db, read_only=True)
    try:
        started = time.perf_counter()
        write_report(con, out, _scenario_options())
        elapsed = time.perf_counter() - started
    finally:
        con.close()
    print(json.dumps({"elapsed_s": elapsed, "bytes": out.stat().st_size}))


# ------------------------------------------------------------------ measuring


@dataclass
class Figure:
    name: str
    size: str
    unit: str
    label: str
    runs: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else float("nan")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "size": self.size,
            "label": self.label,
            "unit": self.unit,
            "median": self.median,
            "runs": self.runs,
            "load_1min": self.loads,
        }
        if self.name in TARGETS:
            op, bound = TARGETS[self.name]
            out["target"] = f"{op} {bound:g}"
            out["met"] = _meets(self.median, op, bound)
            out["aim"] = self.name in AIMS  # the stretch figure, not its "done when"
        return out


def _meets(value: float, op: str, bound: float) -> bool:
    return {">=": value >= bound, "<=": value <= bound, "<": value < bound}[op]


class Results:
    def __init__(self) -> None:
        self.figures: dict[tuple[str, str], Figure] = {}
        self.inputs: dict[str, dict[str, Any]] = {}
        self.skipped: dict[str, str] = {}  # baseline -> why it was not measured

    def add(self, size: str, name: str, value: float, load: float, unit: str, label: str) -> None:
        fig = self.figures.setdefault((size, name), Figure(name, size, unit, label))
        fig.runs.append(value)
        fig.loads.append(load)

    def median(self, size: str, name: str) -> float:
        return self.figures[(size, name)].median


def _remove_db(db: Path) -> None:
    """A database file and its WAL gone: the next measurement starts from a fresh file."""
    for f in (db, db.with_name(db.name + ".wal")):
        f.unlink(missing_ok=True)


def measure_plain(res: Results, size: str, files: list[Path], db: Path) -> None:
    """One round: ingest into a fresh DB; lnav, the one-liners and grep over the same files; the re-ingest."""
    lines = res.inputs[size]["plain_lines"]
    _remove_db(db)
    first = spawn(child("ingest", "plain", str(db), *map(str, files)))
    info = json.loads(first.out)
    res.inputs[size]["plain_records"] = info["records"]
    res.add(size, "plain_ingest_s", info["elapsed_s"], first.load, "s", "plain ingest, time")
    res.add(
        size, "plain_lines_per_s", info["records"] / info["elapsed_s"], first.load, "lines/s", "plain ingest"
    )
    res.add(size, "plain_cpu_s", info["cpu_s"], first.load, "s", "plain ingest, CPU time")
    res.add(size, "plain_startup_s", info["startup_s"], first.load, "s", "plain ingest, start-up")
    res.add(size, "plain_peak_rss_mb", first.rss_mb, first.load, "MB", "plain ingest, peak RSS")
    res.add(
        size,
        "plain_process_cpu_s",
        first.cpu_s,
        first.load,
        "s",
        "plain ingest process, CPU time (start-up included)",
    )
    measure_lnav(res, size, files, db.parent / "lnav-home")
    measure_stages(res, size, files, db)
    for tool in ("polars", "duckdb"):
        measure_one_liner(res, size, tool, files, db.with_name(f"one-liner-{size}.duckdb"))
    grep = spawn(["grep", "-chE", GREP_PATTERN, *map(str, files)])
    res.inputs[size]["grep_matches"] = sum(int(x) for x in grep.out.split())
    res.add(size, "grep_s", grep.wall_s, grep.load, "s", "grep -cE, time")
    res.add(size, "grep_cpu_s", grep.cpu_s, grep.load, "s", "grep -cE, CPU time")
    res.add(size, "grep_lines_per_s", lines / grep.wall_s, grep.load, "lines/s", "grep -cE")
    again = spawn(child("ingest", "plain", str(db), *map(str, files)))
    info2 = json.loads(again.out)
    assert info2["stored"] == 0, "re-ingest of an unchanged window stored lines"
    res.add(size, "plain_reingest_s", info2["elapsed_s"], again.load, "s", "plain re-ingest, time")


def measure_stages(res: Results, size: str, files: list[Path], db: Path) -> None:
    """The plain ingest's stages alone (read, read + parse, store of what `db` holds), checked to
    cover every line; the floor is their CPU spread over every core, as if they overlapped perfectly."""
    fresh = db.with_name(f"stages-{size}.duckdb")
    _remove_db(fresh)
    proc = spawn(child("stages", str(db), str(fresh), *map(str, files)))
    _remove_db(fresh)
    info = json.loads(proc.out)
    lines = res.inputs[size]["plain_lines"]
    if not info["read"] == info["parsed"] == info["stored"] == lines:
        raise RuntimeError(f"the stages saw {info} of the files' {lines:,} lines")
    cores = os.cpu_count() or 1
    for stage, label in (
        ("read", "stage alone: read the files, CPU"),
        ("parse", "stage alone: read + parse (no store), CPU"),
        ("store", "stage alone: store the parsed rows (DuckDB), CPU"),
    ):
        res.add(size, f"plain_{stage}_cpu_s", info[f"{stage}_cpu_s"], proc.load, "s", label)
    floor = (info["parse_cpu_s"] + info["store_cpu_s"]) / cores
    res.add(
        size,
        "plain_floor_s",
        floor,
        proc.load,
        "s",
        f"plain ingest floor: (parse + store CPU) / {cores} cores",
    )


def lnav_version() -> str | None:
    if shutil.which("lnav") is None:
        return None
    out = subprocess.run(["lnav", "-V"], capture_output=True, text=True, check=False).stdout.strip()
    return out or "lnav"


def measure_lnav(res: Results, size: str, files: list[Path], home: Path) -> None:
    """lnav indexing the same files and answering one SQL query, checked to have read every line.

    Its own HOME (kept across rounds, so every round finds the same config) keeps the operator's
    lnav state out of the figure and the bench's out of the operator's.
    """
    version = lnav_version()
    if version is None:
        res.skipped["lnav"] = "lnav is not installed (Debian: lnav): no lnav figures"
        return
    lines = res.inputs[size]["plain_lines"]
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    cmd = ["lnav", "-n", "-c", LNAV_QUERY, "-c", ":write-json-to -", *map(str, files)]
    lv = spawn(cmd, env=env)
    try:
        (row,) = json.loads(lv.out)
    except (ValueError, TypeError) as exc:
        raise RuntimeError(f"lnav printed no query result: {lv.out[-500:]!r}") from exc
    if row["file_lines"] != lines:
        raise RuntimeError(f"lnav indexed {row['file_lines']:,} of the files' {lines:,} lines")
    res.inputs[size].update(lnav_lines=row["file_lines"], lnav_messages=row["messages"], lnav=version)
    res.add(size, "lnav_s", lv.wall_s, lv.load, "s", "lnav, time")
    res.add(size, "lnav_cpu_s", lv.cpu_s, lv.load, "s", "lnav, CPU time")
    label = f"{version}: index + `SELECT count(*) FROM all_logs`"
    res.add(size, "lnav_lines_per_s", lines / lv.wall_s, lv.load, "lines/s", label)
    res.add(size, "lnav_peak_rss_mb", lv.rss_mb, lv.load, "MB", "lnav, peak RSS")


def _pdforensics(*args: str) -> list[str]:
    return [sys.executable, "-m", "pdforensics", *args]


def measure_answer(res: Results, size: str, plain: list[Path], journal: list[Path], db: Path) -> None:
    """Issue 30: from raw input to the answer, each tool as the operator runs it, whole processes:
    lnav answering the question on the plain files; `pdforensics ingest` (its verdict included) of
    the same files into a fresh database, and of the journal; `journalctl | grep` on the journal."""
    timeout = ["--watchdog-timeout", "60"]
    _remove_db(db)
    ours = spawn(
        _pdforensics("ingest", "--db", str(db), *(a for f in plain for a in ("--file", str(f))), *timeout)
    )
    res.add(
        size,
        "answer_plain_s",
        ours.wall_s,
        ours.load,
        "s",
        "answer, plain: `pdforensics ingest` + its verdict",
    )
    res.add(
        size, "answer_plain_cpu_s", ours.cpu_s, ours.load, "s", "answer, plain: `pdforensics ingest`, CPU"
    )
    version = lnav_version()
    if version is None:
        res.skipped["lnav"] = "lnav is not installed (Debian: lnav): no lnav figures"
    else:
        home = db.parent / "lnav-home"
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
        lv = spawn(
            ["lnav", "-n", "-c", LNAV_ANSWER_QUERY, "-c", ":write-json-to -", *map(str, plain)], env=env
        )
        (row,) = json.loads(lv.out)
        res.inputs[size]["lnav_unfinished_rooms"] = row["unfinished"]
        res.add(
            size, "answer_lnav_s", lv.wall_s, lv.load, "s", f"answer, plain: {version} query on `log_text`"
        )
        res.add(size, "answer_lnav_cpu_s", lv.cpu_s, lv.load, "s", "answer, plain: lnav, CPU")
    _remove_db(db)
    ours = spawn(
        _pdforensics(
            "ingest", "--db", str(db), *(a for f in journal for a in ("--journal-file", str(f))), *timeout
        )
    )
    res.add(
        size,
        "answer_journal_s",
        ours.wall_s,
        ours.load,
        "s",
        "answer, journal: `pdforensics ingest` + its verdict",
    )
    res.add(
        size, "answer_journal_cpu_s", ours.cpu_s, ours.load, "s", "answer, journal: `pdforensics ingest`, CPU"
    )
    grep = spawn(["sh", "-c", JOURNAL_GREP.format(files=" --file ".join(map(str, journal)))])
    res.add(
        size,
        "answer_journalctl_grep_s",
        grep.wall_s,
        grep.load,
        "s",
        "answer, journal: `journalctl -o short-iso` into `grep -c`",
    )
    res.add(
        size,
        "answer_journalctl_grep_cpu_s",
        grep.cpu_s,
        grep.load,
        "s",
        "answer, journal: journalctl into grep, CPU",
    )
    _remove_db(db)


ONE_LINER_LABELS = {  # (short name, what it does)
    "polars": ("polars one-liner", "polars: `read_csv` of the lines + two `str.extract`"),
    "duckdb": (
        "DuckDB one-liner",
        "DuckDB: `read_csv` of the lines + two `regexp_extract` into a fresh file",
    ),
}


def measure_one_liner(res: Results, size: str, tool: str, files: list[Path], db: Path) -> None:
    """The polars or DuckDB one-liner over the same files, checked to have read every line."""
    lines = res.inputs[size]["plain_lines"]
    _remove_db(db)
    args = [str(db)] if tool == "duckdb" else []
    proc = spawn(child(tool, *args, *map(str, files)))
    info = json.loads(proc.out)
    if info["lines"] != lines:
        raise RuntimeError(f"the {tool} one-liner read {info['lines']:,} of the files' {lines:,} lines")
    res.inputs[size][f"{tool}_rooms"] = info["rooms"]
    short, label = ONE_LINER_LABELS[tool]
    res.add(size, f"{tool}_s", info["elapsed_s"], proc.load, "s", f"{short}, time")
    res.add(size, f"{tool}_cpu_s", info["cpu_s"], proc.load, "s", f"{short}, CPU time")
    res.add(size, f"{tool}_lines_per_s", lines / info["elapsed_s"], proc.load, "lines/s", label)
    res.add(size, f"{tool}_peak_rss_mb", proc.rss_mb, proc.load, "MB", f"{short}, peak RSS")
    db.unlink(missing_ok=True)  # its size is the input's again; nothing reads it


def measure_journal(res: Results, size: str, files: list[Path], db: Path) -> None:
    _remove_db(db)
    first = spawn(child("ingest", "journal", str(db), *map(str, files)))
    info = json.loads(first.out)
    n = info["records"]
    res.inputs[size]["journal_entries"] = n
    res.inputs[size]["journal_reader"] = info["readers"]
    res.add(size, "journal_ingest_s", info["elapsed_s"], first.load, "s", "journal ingest, time")
    res.add(size, "journal_entries_per_s", n / info["elapsed_s"], first.load, "entries/s", "journal ingest")
    res.add(size, "journal_cpu_s", info["cpu_s"], first.load, "s", "journal ingest, CPU time")
    res.add(size, "journal_peak_rss_mb", first.rss_mb, first.load, "MB", "journal ingest, peak RSS")
    res.add(
        size,
        "journal_process_cpu_s",
        first.cpu_s,
        first.load,
        "s",
        "journal ingest process, CPU time (start-up included)",
    )
    file_args = [f"--file={p}" for p in files]
    for fmt in ("json", "export"):
        jc = spawn(["journalctl", "--no-pager", *file_args, "-o", fmt], capture=False)
        res.add(
            size, f"journalctl_{fmt}_s", jc.wall_s, jc.load, "s", f"journalctl -o {fmt} > /dev/null, time"
        )
        res.add(size, f"journalctl_{fmt}_per_s", n / jc.wall_s, jc.load, "entries/s", f"journalctl -o {fmt}")
        res.add(size, f"journalctl_{fmt}_cpu_s", jc.cpu_s, jc.load, "s", f"journalctl -o {fmt}, CPU time")
    rd = spawn(child("reader", *map(str, files)))
    rinfo = json.loads(rd.out)
    res.add(size, "reader_s", rinfo["elapsed_s"], rd.load, "s", "python-systemd Reader, time")
    res.add(size, "reader_cpu_s", rinfo["cpu_s"], rd.load, "s", "python-systemd Reader, CPU time")
    res.add(
        size,
        "reader_per_s",
        rinfo["entries"] / rinfo["elapsed_s"],
        rd.load,
        "entries/s",
        "python-systemd Reader",
    )
    again = spawn(child("ingest", "journal", str(db), *map(str, files)))
    info2 = json.loads(again.out)
    assert info2["stored"] == 0, "re-ingest of an unchanged window stored entries"
    res.add(size, "journal_reingest_s", info2["elapsed_s"], again.load, "s", "journal re-ingest, time")


def measure_mixed(res: Results, size: str, files: list[Path], db: Path) -> None:
    """The mixed journal (sglang a small share) ingested with `--unit sglang*`, beside `journalctl -u`
    with the same glob on the same files: what selecting a few units out of a busy host costs."""
    _remove_db(db)
    ing = spawn(child("ingest", "mixed", str(db), *map(str, files)))
    info = json.loads(ing.out)
    n = info["records"] + info["skipped"]  # every entry of the files: read, or skipped as another unit's
    res.inputs[size].update(mixed_entries=n, mixed_selected=info["stored"])
    res.add(
        size,
        "mixed_ingest_s",
        info["elapsed_s"],
        ing.load,
        "s",
        "mixed journal ingest --unit 'sglang*', time",
    )
    res.add(
        size,
        "mixed_entries_per_s",
        n / info["elapsed_s"],
        ing.load,
        "entries/s",
        "mixed journal ingest --unit 'sglang*'",
    )
    res.add(size, "mixed_cpu_s", info["cpu_s"], ing.load, "s", "mixed journal ingest, CPU time")
    jc = spawn(
        ["journalctl", "--no-pager", *(f"--file={p}" for p in files), "-u", MIXED_UNITS[0], "-o", "export"],
        capture=False,
    )
    res.add(size, "journalctl_u_s", jc.wall_s, jc.load, "s", "journalctl -u 'sglang*' -o export, time")
    res.add(
        size,
        "journalctl_u_per_s",
        n / jc.wall_s,
        jc.load,
        "entries/s",
        "journalctl -u 'sglang*' -o export > /dev/null",
    )
    res.add(size, "journalctl_u_cpu_s", jc.cpu_s, jc.load, "s", "journalctl -u 'sglang*' -o export, CPU time")
    db.unlink(missing_ok=True)


# 1: each batch parsed then stored, in turn; 2: the parse of the next batch beside the store (one
# process); 3: two worker processes (one host's files each) beside the store
COLLECTION_JOBS = (1, 2, 3)


def measure_collection(res: Results, size: str, directory: Path, db: Path) -> None:
    """One round: `ingest -D` of the collection into a fresh DB with each of COLLECTION_JOBS."""
    stored = {}
    for jobs in COLLECTION_JOBS:
        _remove_db(db)
        p = spawn(child("collection", str(jobs), str(db), str(directory)))
        info = json.loads(p.out)
        stored[jobs] = (info["records"], info["stored"], info["rejected"])
        res.inputs[size].update(collection_entries=info["records"], collection_files=info["files"])
        j = f"collection_j{jobs}"
        res.add(size, f"{j}_s", info["elapsed_s"], p.load, "s", f"collection ingest --jobs {jobs}, time")
        res.add(
            size,
            f"{j}_cpu_s",
            info["cpu_s"],
            p.load,
            "s",
            f"collection ingest --jobs {jobs}, CPU (workers incl.)",
        )
        res.add(
            size,
            f"{j}_per_s",
            info["records"] / info["elapsed_s"],
            p.load,
            "entries/s",
            f"collection ingest --jobs {jobs}",
        )
        res.add(
            size,
            f"{j}_peak_rss_mb",
            p.rss_mb,
            p.load,
            "MB",
            f"collection ingest --jobs {jobs}, peak RSS (main)",
        )
    assert len(set(stored.values())) == 1, (
        f"--jobs {COLLECTION_JOBS} read/stored/rejected differently: {stored}"
    )


def measure_verdict(res: Results, size: str, db: Path, report_out: Path) -> None:
    v = spawn(child("verdict", str(db)))
    info = json.loads(v.out)
    res.inputs[size].update(verdict=info["verdict"], requests=info["requests"], db_lines=info["lines"])
    res.add(size, "views_s", info["views_s"], v.load, "s", "install views")
    res.add(size, "verdict_s", info["elapsed_s"], v.load, "s", "verdict (compute_verdict)")
    r = spawn(child("report", str(db), str(report_out)))
    rinfo = json.loads(r.out)
    res.add(size, "report_s", rinfo["elapsed_s"], r.load, "s", "report (write_report)")
    res.add(size, "report_peak_rss_mb", r.rss_mb, r.load, "MB", "report, peak RSS")


def derive(res: Results, size: str) -> None:
    """Ratios from the medians (a ratio of medians, so one slow run of either side cannot skew it)."""
    have = {k for s, k in res.figures if s == size}
    if not have:
        return
    loads = [x for (s, _), f in res.figures.items() if s == size for x in f.loads]
    m = res.median
    ratios = (
        ("plain_vs_lnav", "plain_lines_per_s", "lnav_lines_per_s", "x", "plain ingest speed / lnav"),
        ("plain_floor_vs_lnav", "lnav_s", "plain_floor_s", "x", "plain ingest floor speed / lnav"),
        ("plain_parse_vs_lnav_cpu", "plain_parse_cpu_s", "lnav_cpu_s", "x", "read + parse alone CPU / lnav CPU"),
        ("plain_store_vs_lnav_cpu", "plain_store_cpu_s", "lnav_cpu_s", "x", "store alone CPU / lnav CPU"),
        ("plain_vs_polars", "plain_lines_per_s", "polars_lines_per_s", "x", "plain ingest speed / polars one-liner"),
        ("plain_vs_duckdb", "plain_lines_per_s", "duckdb_lines_per_s", "x", "plain ingest speed / DuckDB one-liner"),
        ("plain_vs_grep", "plain_lines_per_s", "grep_lines_per_s", "x", "plain ingest speed / grep -cE"),
        ("plain_vs_grep_x", "plain_ingest_s", "grep_s", "x", "plain ingest time / grep time"),
        ("plain_reingest_share", "plain_reingest_s", "plain_ingest_s", "share", "plain re-ingest / first ingest"),
        ("journal_vs_journalctl_json", "journal_entries_per_s", "journalctl_json_per_s", "x", "journal ingest speed / journalctl -o json"),
        ("journal_vs_journalctl_export", "journal_entries_per_s", "journalctl_export_per_s", "x", "journal ingest speed / journalctl -o export"),
        ("journal_vs_reader", "journal_entries_per_s", "reader_per_s", "x", "journal ingest speed / python-systemd Reader"),
        ("journal_reingest_share", "journal_reingest_s", "journal_ingest_s", "share", "journal re-ingest / first ingest"),
        ("mixed_vs_journalctl_u", "mixed_entries_per_s", "journalctl_u_per_s", "x", "mixed journal ingest speed / journalctl -u"),
        ("collection_speedup", "collection_j1_s", "collection_j2_s", "x", "collection ingest: --jobs 1 time / --jobs 2 time"),
        ("collection_cpu_ratio", "collection_j2_cpu_s", "collection_j1_cpu_s", "x", "collection ingest: --jobs 2 CPU / --jobs 1 CPU"),
        ("collection_speedup_3", "collection_j1_s", "collection_j3_s", "x", "collection ingest: --jobs 1 time / --jobs 3 time"),
        ("answer_plain_vs_lnav", "answer_lnav_s", "answer_plain_s", "x", "answer, plain: lnav time / pdforensics time"),
        ("answer_plain_vs_lnav_cpu", "answer_lnav_cpu_s", "answer_plain_cpu_s", "x", "answer, plain: lnav CPU / pdforensics CPU"),
        ("answer_journal_vs_grep", "answer_journalctl_grep_s", "answer_journal_s", "x", "answer, journal: journalctl into grep time / pdforensics time"),
        # The same comparisons in CPU seconds: what a busy shared machine distorts least.
        ("plain_vs_grep_cpu_x", "plain_cpu_s", "grep_cpu_s", "x", "plain ingest CPU / grep CPU"),
        ("plain_vs_lnav_cpu", "lnav_cpu_s", "plain_cpu_s", "x", "lnav CPU / plain ingest CPU"),
        ("plain_vs_polars_cpu", "polars_cpu_s", "plain_cpu_s", "x", "polars one-liner CPU / plain ingest CPU"),
        ("plain_vs_duckdb_cpu", "duckdb_cpu_s", "plain_cpu_s", "x", "DuckDB one-liner CPU / plain ingest CPU"),
        ("journal_vs_journalctl_export_cpu", "journalctl_export_cpu_s", "journal_cpu_s", "x", "journalctl -o export CPU / journal ingest CPU"),
        ("journal_vs_reader_cpu", "reader_cpu_s", "journal_cpu_s", "x", "python-systemd Reader CPU / journal ingest CPU"),
    )  # fmt: skip
    for name, num, den, unit, label in ratios:
        if num in have and den in have:
            res.figures[(size, name)] = Figure(
                name, size, unit, label, [m(size, num) / m(size, den)], [statistics.median(loads)]
            )
    for kind, unit in (("plain", "lines"), ("journal", "entries")):
        count = res.inputs[size].get("plain_records" if kind == "plain" else "journal_entries")
        if f"{kind}_cpu_s" in have and count:
            name = f"{kind}_{unit}_per_cpu_s"
            per = count / m(size, f"{kind}_cpu_s")
            res.figures[(size, name)] = Figure(
                name, size, f"{unit}/s", f"{kind} ingest, per CPU-second", [per], [statistics.median(loads)]
            )
    if "plain_ingest_s" in have:
        mb_s = res.inputs[size]["plain_bytes"] / 1e6 / m(size, "plain_ingest_s")
        res.figures[(size, "plain_mb_per_s")] = Figure(
            "plain_mb_per_s", size, "MB/s", "plain ingest, input bytes", [mb_s], [statistics.median(loads)]
        )


# ------------------------------------------------------------------ output

ROWS = (
    "plain_lines_per_s", "plain_mb_per_s",
    "lnav_lines_per_s", "plain_vs_lnav", "polars_lines_per_s", "plain_vs_polars",
    "duckdb_lines_per_s", "plain_vs_duckdb", "grep_lines_per_s", "plain_vs_grep", "plain_vs_grep_x",
    "plain_cpu_s", "plain_process_cpu_s", "plain_lines_per_cpu_s", "lnav_cpu_s", "plain_vs_lnav_cpu",
    "polars_cpu_s", "plain_vs_polars_cpu", "duckdb_cpu_s", "plain_vs_duckdb_cpu", "grep_cpu_s",
    "plain_vs_grep_cpu_x", "plain_read_cpu_s", "plain_parse_cpu_s", "plain_store_cpu_s",
    "plain_parse_vs_lnav_cpu", "plain_store_vs_lnav_cpu", "plain_floor_s", "plain_floor_vs_lnav", "plain_peak_rss_mb", "lnav_peak_rss_mb", "polars_peak_rss_mb",
    "duckdb_peak_rss_mb", "plain_reingest_share",
    "journal_entries_per_s", "journalctl_json_per_s", "journalctl_export_per_s", "reader_per_s",
    "journal_vs_journalctl_json", "journal_vs_journalctl_export", "journal_vs_reader", "journal_cpu_s",
    "journal_process_cpu_s",
    "journal_entries_per_cpu_s", "journalctl_export_cpu_s", "reader_cpu_s", "journal_vs_journalctl_export_cpu",
    "journal_vs_reader_cpu", "journal_peak_rss_mb", "journal_reingest_share",
    "mixed_entries_per_s", "journalctl_u_per_s", "mixed_vs_journalctl_u", "mixed_cpu_s", "journalctl_u_cpu_s",
    "collection_j1_per_s", "collection_j2_per_s", "collection_j1_s", "collection_j2_s", "collection_speedup",
    "collection_j1_cpu_s", "collection_j2_cpu_s", "collection_cpu_ratio", "collection_j1_peak_rss_mb",
    "collection_j2_peak_rss_mb", "collection_j3_s", "collection_j3_cpu_s", "collection_speedup_3",
    "collection_j3_peak_rss_mb",
    "answer_plain_s", "answer_plain_cpu_s", "answer_lnav_s", "answer_lnav_cpu_s", "answer_plain_vs_lnav",
    "answer_plain_vs_lnav_cpu", "answer_journal_s", "answer_journal_cpu_s", "answer_journalctl_grep_s",
    "answer_journalctl_grep_cpu_s", "answer_journal_vs_grep", "views_s", "verdict_s",
    "report_s", "report_peak_rss_mb",
)  # fmt: skip


def _fmt(value: float, unit: str) -> str:
    if unit in ("lines/s", "entries/s"):
        return f"{value:,.0f}"
    if unit == "share":
        return f"{value:.1%}"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "MB":
        return f"{value:,.0f} MB"
    if unit == "MB/s":
        return f"{value:.1f} MB/s"
    return f"{value:.3f} s" if value < 0.1 else f"{value:.2f} s"


# The verdict/report targets are set at 1M requests; a smaller database cannot meet or miss them.
TARGET_REQUESTS = {"verdict_s": 1_000_000, "report_s": 1_000_000}


def _target_mark(res: Results, size: str, name: str, value: float) -> str:
    if name not in TARGETS:
        return ""
    requests = res.inputs.get(size, {}).get("requests", 0)
    if name in TARGET_REQUESTS and requests < TARGET_REQUESTS[name]:
        return f" (at {requests:,} requests; the target is at {TARGET_REQUESTS[name]:,})"
    return " ✓" if _meets(value, *TARGETS[name]) else " ✗"


def table(res: Results, sizes: list[str]) -> str:
    head = "| figure | " + " | ".join(sizes) + " | target |"
    out = [head, "|---|" + "---|" * len(sizes) + "---|"]
    for size_key, what in (
        ("plain_lines", "plain lines (bytes)"), ("journal_entries", "journal entries"),
        ("collection_entries", "collection entries"), ("collection_files", "collection files"),
        ("mixed_entries", "mixed journal entries"), ("mixed_selected", "mixed journal: sglang entries"),
    ):  # fmt: skip
        cells = []
        for s in sizes:
            inp = res.inputs.get(s, {})
            v = inp.get(size_key)
            extra = f" ({inp['plain_bytes'] / 1e6:,.0f} MB)" if size_key == "plain_lines" and v else ""
            cells.append(f"{v:,}{extra}" if v is not None else "")
        out.append(f"| {what} | " + " | ".join(cells) + " | |")
    for name in ROWS:
        figs = [res.figures.get((s, name)) for s in sizes]
        if not any(figs):
            continue
        label = next(f.label for f in figs if f)
        unit = next(f.unit for f in figs if f)
        cells = []
        for s, f in zip(sizes, figs, strict=True):
            if f is None:
                cells.append("")
                continue
            cells.append(_fmt(f.median, unit) + _target_mark(res, s, name, f.median))
        target = ""
        if name in TARGETS:
            op, bound = TARGETS[name]
            target = ("aim " if name in AIMS else "") + f"{op} {_fmt(bound, unit)}"
        out.append(f"| {label} | " + " | ".join(cells) + f" | {target} |")
    loads = []
    for s in sizes:
        ls = [x for (sz, _), f in res.figures.items() if sz == s for x in f.loads]
        loads.append(f"{statistics.median(ls):.1f} ({min(ls):.1f}–{max(ls):.1f})" if ls else "")
    out.append("| load average, 1 min: median (min–max) | " + " | ".join(loads) + " | |")
    out.extend(f"\nnot measured: {why}." for why in res.skipped.values())
    for s in sizes:
        inp = res.inputs.get(s, {})
        if "requests" in inp:
            out.append(
                f"\nverdict/report database: the {s} plain ingest, {inp['db_lines']:,} lines, "
                f"{inp['requests']:,} requests, verdict `{inp['verdict']}`."
            )
    return "\n".join(out)


def machine() -> dict[str, Any]:
    import duckdb
    import polars as pl

    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "polars": pl.__version__,
        "duckdb": duckdb.__version__,
        "polars_max_threads": pl.thread_pool_size(),
        "POLARS_MAX_THREADS": os.environ.get("POLARS_MAX_THREADS"),
        "lnav": lnav_version(),
    }


# ------------------------------------------------------------------ main


class InputsMissing(Exception):
    """A read-only input directory lacks a cached input the run needs."""


def _input_kinds(formats: tuple[str, ...]) -> list[str]:
    """The cached inputs each format reads: a collection is the journal split; an answer reads both."""
    reads = {"collection": ["journal"], "answer": ["plain", "journal"]}
    return [kind for name in formats for kind in reads.get(name, [name])]


def run(
    sizes: list[int],
    runs: list[int],
    work: Path,
    out: Path,
    formats: tuple[str, ...] = ("plain", "journal"),
    verdict: bool = True,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
    db_dir: Path | None = None,
) -> dict[str, Any]:
    """Measure every size (`runs[i]` rounds for `sizes[i]`), writing `out` after each step.

    Inputs are read from (and, unless `db_dir` is another directory, made in) `work`; databases,
    lnav's home and the report go to `db_dir` (default `work`).
    """
    labels = [size_label(n) for n in sizes]
    if db_dir is None or db_dir.resolve() == work.resolve():
        db_dir = work
        work.mkdir(parents=True, exist_ok=True)
    else:
        missing = [
            str(work / f"{kind}-{label}")
            for label in labels
            for kind in sorted(set(_input_kinds(formats)))
            if not _done(work / f"{kind}-{label}")
        ]
        if missing:  # --dir is read-only with a separate --db-dir: nothing may be generated there
            raise InputsMissing(f"no cached input (a directory holding DONE): {', '.join(missing)}")
    db_dir.mkdir(parents=True, exist_ok=True)
    res = Results()
    about_machine = in_child("machine")
    inputs: dict[str, dict[str, list[Path]]] = {}
    errors: list[str] = []
    command = ("python bench/ingest_bench.py " + " ".join(sys.argv[1:])).strip()

    def save() -> dict[str, Any]:
        # Rewritten after every measurement: a long run cut short keeps what it measured.
        for label in labels:
            derive(res, label)
        doc = {
            "command": command,
            "scenario": SCENARIO,
            "grep_pattern": GREP_PATTERN,
            "runs": dict(zip(labels, runs, strict=True)),
            "machine": about_machine,
            "bench_peak_rss_mb": own_peak_rss_mb(),
            "inputs": res.inputs,
            "figures": [f.to_json() for f in res.figures.values()],
            "table": table(res, labels),
            "errors": errors,
            "skipped": res.skipped,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1))
        return doc

    def attempt(what: str, measure: Callable[[], None]) -> None:
        # One failing stage (e.g. the report) must not cost the figures of the others.
        log(f"[bench] {time.strftime('%H:%M:%S')} {what}")
        try:
            measure()
        except (RuntimeError, AssertionError, KeyError, ValueError) as exc:
            errors.append(f"{what}: {exc}")
            log(f"[bench] {what} FAILED: {exc}")
        save()

    for n, label in zip(sizes, labels, strict=True):
        started = time.perf_counter()
        inputs[label] = {}
        if "plain" in formats or "answer" in formats:
            inputs[label]["plain"] = [Path(p) for p in in_child("make", "plain", str(n), str(work))]
            lines, size = _line_count(inputs[label]["plain"])
            res.inputs[label] = {"plain_lines": lines, "plain_bytes": size}
        if "journal" in formats or "collection" in formats or "answer" in formats:
            inputs[label]["journal"] = [Path(p) for p in in_child("make", "journal", str(n), str(work))]
            res.inputs.setdefault(label, {})
        if "mixed" in formats:
            inputs[label]["mixed"] = [Path(p) for p in in_child("make", "mixed", str(n), str(work))]
            res.inputs.setdefault(label, {})
        if "collection" in formats:  # made in db_dir: --dir stays read-only
            inputs[label]["collection"] = [
                make_collection(inputs[label]["journal"], db_dir / f"collection-{label}")
            ]
        log(f"[bench] inputs for {label} ready ({time.perf_counter() - started:.0f} s)")
    # Smaller sizes first and all their rounds: a cut-short run still has complete small figures.
    for label, count in zip(labels, runs, strict=True):
        for r in range(count):
            run_no = f"run {r + 1}/{count} {label}"
            if "plain" in formats:
                db = db_dir / f"plain-{label}.duckdb"
                attempt(
                    f"{run_no}: plain",
                    lambda label=label, db=db: measure_plain(res, label, inputs[label]["plain"], db),
                )
            if "journal" in formats:
                db = db_dir / f"journal-{label}.duckdb"
                attempt(
                    f"{run_no}: journal",
                    lambda label=label, db=db: measure_journal(res, label, inputs[label]["journal"], db),
                )
            if "mixed" in formats:
                db = db_dir / f"mixed-{label}.duckdb"
                attempt(
                    f"{run_no}: mixed journal",
                    lambda label=label, db=db: measure_mixed(res, label, inputs[label]["mixed"], db),
                )
            if "answer" in formats:
                db = db_dir / f"answer-{label}.duckdb"
                attempt(
                    f"{run_no}: answer (raw input to the verdict, beside lnav and journalctl | grep)",
                    lambda label=label, db=db: measure_answer(
                        res, label, inputs[label]["plain"], inputs[label]["journal"], db
                    ),
                )
            if "collection" in formats:
                db = db_dir / f"collection-{label}.duckdb"
                attempt(
                    f"{run_no}: collection --jobs " + ", ".join(map(str, COLLECTION_JOBS)),
                    lambda label=label, db=db: measure_collection(
                        res, label, inputs[label]["collection"][0], db
                    ),
                )
    if verdict and "plain" in formats:
        big, count = labels[-1], runs[-1]
        db, html = db_dir / f"plain-{big}.duckdb", db_dir / f"report-{big}.html"
        for r in range(count):
            attempt(
                f"run {r + 1}/{count} {big}: verdict, report", lambda: measure_verdict(res, big, db, html)
            )
    return save()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child_main(argv[1:])
        return 0
    ap = argparse.ArgumentParser(prog="python bench/ingest_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default="1M,10M", help="incident sizes in lines, comma-separated (2k, 1M, ...)"
    )
    ap.add_argument(
        "--runs", default="3", help="rounds, each figure the median; one number, or one per size (3,1)"
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: --sizes 3k --runs 1")
    ap.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_WORK,
        help="cached inputs (plain-1M/, journal-1M/, ...) and databases",
    )
    ap.add_argument(
        "--db-dir",
        type=Path,
        help="databases, lnav's home and the report (default: --dir); another directory makes --dir "
        "read-only: its inputs must be cached, e.g. --dir INPUTS --db-dir /tmp/bench-db",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results")
    ap.add_argument(
        "--only",
        choices=("plain", "journal", "mixed", "collection", "answer"),
        help="one input format only (collection: the journal split per unit into a journal-remote "
        "directory, ingested with --jobs 1 and --jobs 2; answer: raw input to the verdict, issue 30)",
    )
    ap.add_argument("--no-verdict", action="store_true", help="skip verdict/report")
    args = ap.parse_args(argv)
    sizes = [3_000] if args.quick else [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    runs = [max(int(r), 1) for r in args.runs.split(",")]
    if args.quick:
        runs = [1]
    if len(runs) == 1:
        runs = runs * len(sizes)
    if len(runs) != len(sizes):
        ap.error("--runs takes one number or one per size")
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    sizes, runs = [sizes[i] for i in order], [runs[i] for i in order]
    formats = (args.only,) if args.only else ("plain", "journal", "mixed", "collection", "answer")
    uncached = [n for n in sizes if not _done(args.dir / f"journal-{size_label(n)}")]
    if (
        {"journal", "mixed", "collection", "answer"} & set(formats)
        and not JOURNAL_REMOTE.exists()
        and (uncached or {"mixed", "collection"} & set(formats))
    ):
        print(f"{JOURNAL_REMOTE} is missing (Debian: systemd-journal-remote)", file=sys.stderr)
        return 2
    try:
        doc = run(sizes, runs, args.dir, args.out, formats, verdict=not args.no_verdict, db_dir=args.db_dir)
    except InputsMissing as exc:
        print(f"ingest_bench: {exc}", file=sys.stderr)
        return 2
    print(doc["table"])
    print(f"\n{args.out}  (reproduce: {doc['command']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
