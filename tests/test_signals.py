"""Issue 15: SIGTERM (`systemctl stop`) and SIGHUP stop an ingest as Ctrl-C does.

Committed batches are kept, the run is marked `interrupted`, one line is printed, the exit status is
128 + the signal, and the next ingest completes. The moment is deterministic: the child (the real
CLI, with small batches) reports on a pipe that its third batch is committed and then waits there;
the signal arrives while it waits, at that batch boundary (in 0.1 s sleeps: Python runs a
handler in the main thread only, and a signal delivered to another thread does not cut a sleep short).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pdforensics import store
from pdforensics.paths import fixtures_dir

REPO = Path(__file__).resolve().parent.parent
BATCH = 50
STOP_AFTER = 3  # batches committed before the signal
INTERRUPTED = "pdforensics: interrupted; every batch committed so far is kept, rerun to continue"

# The unchanged CLI, with small batches; after batch STOP_AFTER is committed it writes its line
# count to the pipe fd READY_FD and waits for the signal (which arrives inside that sleep).
_CHILD = """
import functools, os, sys, time
import pdforensics.ingest as ingest_module
from pdforensics import store
ingest_module.ingest = functools.partial(ingest_module.ingest, batch_size=int(sys.argv[1]))
real, done, stop_after = store.store_batch, [], int(sys.argv[2])

def store_batch(con, ingest_id, lines, *rest):
    real(con, ingest_id, lines, *rest)
    done.append(lines.height)
    if len(done) == stop_after:
        os.write(int(os.environ["READY_FD"]), b"%d\\n" % sum(done))
        for _ in range(6000):  # short sleeps: a signal the kernel hands to another thread (the
            time.sleep(0.1)    # parse worker, DuckDB's) is acted on at the next one, not in 600 s

store.store_batch = store_batch
from pdforensics.cli import main
sys.argv = ["pdforensics", *sys.argv[3:]]
main()
"""


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    con = store.open_db(db, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _ingest(db: Path, export: Path, stop_after: int) -> tuple[subprocess.Popen[str], int]:
    r, w = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "PDFORENSICS_DEBUG"} | {"READY_FD": str(w)}
    args = ["ingest", "--db", str(db), "--file", str(export), "--unit", "*", "--quiet"]
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(BATCH), str(stop_after), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, pass_fds=(w,),
    )  # fmt: skip
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 300)
        if not ready:
            child.kill()
            pytest.fail(f"the ingest never reached batch {stop_after}: {child.communicate()}")
        line = os.read(r, 100).decode().strip()
    finally:
        os.close(r)
    if not line:
        pytest.fail(f"the ingest ended before batch {stop_after}: {child.communicate()}")
    return child, int(line)


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_a_stop_signal_keeps_committed_batches_marks_the_run_and_says_so(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    export = fixtures_dir() / "decode_restart_watchdog_fires" / "journal.export"
    db = tmp_path / "s.duckdb"
    child, committed = _ingest(db, export, STOP_AFTER)
    child.send_signal(sig)
    out, err = child.communicate(timeout=300)
    assert child.returncode == code, err
    assert err.strip().splitlines() == [INTERRUPTED]
    assert "Traceback" not in out + err
    assert _rows(db, "SELECT status, stored FROM ingests") == [("interrupted", committed)]
    assert _rows(db, "SELECT count(*), count(DISTINCT (source_key, seq)) FROM lines") == [
        (committed, committed)
    ]
    # The next ingest (not stopped) completes; together they equal one clean run.
    clean = tmp_path / "clean.duckdb"
    for target in (db, clean):
        proc = subprocess.run(
            [sys.executable, "-m", "pdforensics", "ingest", "--db", str(target), "--file", str(export), "--unit", "*",
             "--quiet"], capture_output=True, text=True, cwd=REPO, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    query = "SELECT source_key, seq, message FROM lines ORDER BY source_key, seq"
    assert _rows(db, query) == _rows(clean, query)
    assert _rows(db, "SELECT status FROM ingests ORDER BY ingest_id") == [("interrupted",), ("complete",)]
