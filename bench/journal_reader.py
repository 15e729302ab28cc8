"""The direct .journal reader (pdforensics/sources/journalfile.py) beside python-systemd and journalctl.

    python bench/journal_reader.py reader|python-systemd|journalctl|source|ingest [UNIT_GLOB ...]

On the benchmark's journal files (JOURNALS, default the bench's cache:
bench/results/work/journal-1M/*.journal; NFILES
limits how many). Each mode is one measurement (run one at a time): wall, CPU of this process
and its children (RUSAGE_CHILDREN), entries/s, the load average.
- reader: JournalFile alone, every entry's raw frame (cursor + ENTRY_FIELDS).
- python-systemd: the bare `_Reader` loop (`_next`, `_get_all`, `_get_cursor` an entry).
- journalctl: `journalctl --file ... -o export --all > /dev/null`.
- source: JournalSource.batches() (reader + unit/window selection + records); SINCE_FRAC=0.1
  reads only the last 10 % of the time range; PDFORENSICS_JOURNAL_READER=python-systemd for the old path.
- ingest: the whole ingest() into a fresh database.
"""

from __future__ import annotations

import glob
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILES = sorted(
    glob.glob(
        os.environ.get("JOURNALS", str(Path(__file__).resolve().parent / "results/work/journal-1M/*.journal"))
    )
)[: int(os.environ.get("NFILES", "100"))]


def cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def reader() -> int:
    from pdforensics.sources.journalfile import JournalFile

    n = 0
    for f in FILES:
        with JournalFile(f) as jf:
            for blk in jf.blocks(0, jf.n_entries, 32_768):
                n += jf.frame(blk).height
    return n


def python_systemd() -> int:
    from systemd import journal

    n = 0
    for f in FILES:
        j = journal._Reader(flags=0, files=[f])
        j.data_threshold = 0
        while j._next():
            j._get_all()
            j._get_cursor()
            n += 1
    return n


def journalctl() -> int:
    cmd = ["journalctl", "--all", "-o", "export"] + [a for f in FILES for a in ("--file", f)]
    out = subprocess.run(cmd, capture_output=True, check=True).stdout
    return (b"\n" + out).count(b"\n__CURSOR=")


def source(units: tuple[str, ...]) -> int:
    from pdforensics.sources import Selection, Window
    from pdforensics.sources.journal import JournalSource, read_header

    headers = [h for h in (read_header(Path(f)) for f in FILES) if h is not None]
    lo, hi = min(h.head_realtime for h in headers), max(h.tail_realtime for h in headers)
    frac = float(os.environ.get("SINCE_FRAC", "0"))
    window = Window(since_us=int(hi - (hi - lo) * frac)) if frac else Window()
    n = 0
    for b in JournalSource("files", [Path(f) for f in FILES]).batches(Selection(window=window, units=units)):
        n += b.records.height + b.skipped
    return n


def ingest(units: tuple[str, ...]) -> int:
    from pdforensics.catalog import load_catalog
    from pdforensics.ingest import ingest as run
    from pdforensics.sources import Selection
    from pdforensics.sources.journal import JournalSource

    with tempfile.TemporaryDirectory() as d:
        src = JournalSource("files", [Path(f) for f in FILES])
        summary = run(Path(d) / "b.duckdb", [src], Selection(units=units), load_catalog())
        print("direct reader:", src.direct)
        return summary.records


def main() -> None:
    mode, units = sys.argv[1], tuple(sys.argv[2:]) or ("sglang*",)
    work = {
        "reader": reader, "python-systemd": python_systemd, "journalctl": journalctl,
        "source": lambda: source(units), "ingest": lambda: ingest(units),
    }[mode]  # fmt: skip
    load = os.getloadavg()[0]
    t, c = time.perf_counter(), cpu()
    n = work()
    wall, cp = time.perf_counter() - t, cpu() - c
    print(
        f"{mode} {units if mode in ('source', 'ingest') else ''}: {n:,} entries; wall {wall:.2f} s "
        f"({n / wall:,.0f}/s); cpu incl. children {cp:.2f} s ({n / cp:,.0f}/s); "
        f"load {load:.2f} -> {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
