"""Issue 7: on the worst day the tool neither loses nor invents evidence, and never falls over.

Killed ingests (kill -9 at random points), two ingests and readers on one database at once,
corrupt and hostile input through every reader, permissions (as an unprivileged user), old
databases, and hostile text in the HTML report.
"""

from __future__ import annotations

import atexit
import functools
import gzip
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from conftest import export_to_journal
from test_cli import assert_one_line_error

from pdforensics import store
from pdforensics.api import build_sources
from pdforensics.catalog import Catalog, load_catalog
from pdforensics.errors import DatabaseError, SourceError
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.schema import SCHEMA_VERSION
from pdforensics.sources import Selection
from pdforensics.sources.journal import python_systemd_available, read_header

REPO = Path(__file__).resolve().parent.parent
SCENARIO = "decode_restart_watchdog_fires"
CLI_SELECTION = Selection(units=("sglang*",))  # what `pdforensics ingest` selects without options
# Small batches: the ~35k lines of `big` span ~22 transactions, so a kill or a Ctrl-C has many
# boundaries to land between. (Each batch costs ~0.2 s of CPU and an fsync: at 400 lines, ~88 of
# them, one ingest of `big` took 17 s of CPU, and this file ingests it about a dozen times.)
BATCH = 1600
CLI_TIMEOUT = 600


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full.pop("PDFORENSICS_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "pdforensics", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        cwd=REPO,
    )


def cli_popen(
    *args: str, env: dict[str, str] | None = None, batch: int | None = None, hold: bool = False
) -> subprocess.Popen[str]:
    """The real CLI in a child process; with `batch`, ingest stores batches of that many records.
    `hold`: the ingest waits on its stdin (a pipe the test keeps open) once its run is recorded
    complete, so a signal the test sends always finds it running."""
    full = {**os.environ, **(env or {})}
    full.pop("PDFORENSICS_DEBUG", None)
    cmd = [sys.executable, "-m", "pdforensics", *args]
    if batch is not None:
        cmd = [sys.executable, "-c", _SMALL_BATCH_CLI, str(batch), "hold" if hold else "-", *args]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full, cwd=REPO,
        stdin=subprocess.PIPE if hold else None,
    )  # fmt: skip


# `pdforensics ingest` stores 100k records per transaction; a killed run is only interesting when it
# spans many, so the child runs the unchanged CLI with ingest's batch size made small.
_SMALL_BATCH_CLI = """
import functools, sys
import pdforensics.ingest as ingest_module
ingest_module.ingest = functools.partial(ingest_module.ingest, batch_size=int(sys.argv[1]))
if sys.argv[2] == "hold":
    views = ingest_module._install_views
    def held(con):
        sys.stdin.readline()
        views(con)
    ingest_module._install_views = held
from pdforensics.cli import main
sys.argv = ["pdforensics", *sys.argv[3:]]
main()
"""


def lock_holder(db: Path) -> int | None:
    """PID holding a POSIX lock on the database file (DuckDB's), from /proc/locks; None if unlocked."""
    try:
        inode = db.stat().st_ino
    except FileNotFoundError:
        return None
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if len(f) >= 6 and f[1] == "POSIX" and f[5].rsplit(":", 1)[-1] == str(inode):
            return int(f[4])
    return None


def wait_for_lock(db: Path, proc: subprocess.Popen[str], timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = lock_holder(db)
        if pid is not None:
            return pid
        if proc.poll() is not None:
            pytest.fail(f"child exited before opening the database: {proc.communicate()}")
        time.sleep(0.01)
    pytest.fail("child never opened the database")


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = store.open_db(db, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def evidence(db: Path) -> pl.DataFrame:
    """What an ingest stored, independent of line ids: one row per record."""
    con = store.open_db(db, read_only=True)
    try:
        return store.query_pl(con, "SELECT source_key, seq, message FROM lines ORDER BY source_key, seq")
    finally:
        con.close()


PARSED = "l.source_key, l.seq, l.message, l.ts_us, l.app_ts_us, l.ts_origin, l.engine, l.event, l.entry, l.parse_error"


def parsed_evidence(db: Path) -> pl.DataFrame:
    """Every line as parsed, its continuation link as the head's key (line ids differ between runs)."""
    con = store.open_db(db, read_only=True)
    try:
        return store.query_pl(
            con,
            f"""SELECT {PARSED}, h.source_key AS head_key, h.seq AS head_seq
                FROM lines l LEFT JOIN lines h ON h.line_id = l.cont_of ORDER BY l.source_key, l.seq""",
        )
    finally:
        con.close()


def assert_consistent(db: Path) -> None:
    """Every run's counters match what it stored: no partial batch, no line stored twice."""
    per_run = rows(
        db,
        """SELECT i.ingest_id, i.stored, i.rejected,
                  (SELECT count(*) FROM lines l WHERE l.ingest_id = i.ingest_id),
                  (SELECT count(*) FROM rejects r WHERE r.ingest_id = i.ingest_id)
           FROM ingests i ORDER BY 1""",
    )
    for ingest_id, stored, rejected, n_lines, n_rejects in per_run:
        assert (stored, rejected) == (n_lines, n_rejects), f"ingest {ingest_id}"
    [(n, ids, keys, events, with_event)] = rows(
        db,
        """SELECT count(*), count(DISTINCT line_id), count(DISTINCT (source_key, seq)),
                  (SELECT count(*) FROM events), count(event) FROM lines""",
    )
    assert n == ids == keys, "a line stored twice"
    assert events == with_event, "events and lines disagree"
    orphans = rows(db, "SELECT count(*) FROM events e ANTI JOIN lines l USING (line_id)")
    assert orphans == [(0,)]


# ------------------------------------------------------------------ a big input and its clean ingest


@dataclass
class Big:
    files: list[Path]
    clean: pl.DataFrame  # every stored line of a clean run, in line_id order
    parsed: pl.DataFrame  # the same, as parsed_evidence() gives it
    boundaries: set[int]  # lines stored after each whole batch of that run
    store_s: float  # how long the clean run read, parsed and stored


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory, catalog: Catalog) -> Big:
    """A few seconds of input (plain logs of every scenario, and a journal export), ingested cleanly."""
    d = tmp_path_factory.mktemp("big")
    files = []
    for engine in ("prefill", "decode"):  # one file per engine: the unit's name says which it is
        plain = b"".join(p.read_bytes() for p in sorted(fixtures_dir().glob(f"*/plain/*{engine}*.log")))
        files.append(d / f"sglang-{engine}-all.log")
        files[-1].write_bytes(plain * 2)
    shutil.copy(fixtures_dir() / SCENARIO / "journal.export", d / "journal.export")
    files.append(d / "journal.export")
    db = d / "clean.duckdb"
    boundaries = {0}
    real = store.store_batch

    def counting(con: Any, ingest_id: int, lines: pl.DataFrame, *rest: Any) -> None:
        real(con, ingest_id, lines, *rest)
        boundaries.add(max(boundaries) + lines.height)

    mp = pytest.MonkeyPatch()
    mp.setattr(store, "store_batch", counting)
    try:
        summary = ingest(db, build_sources(None, None, files, None), CLI_SELECTION, catalog, batch_size=BATCH,
                         views=False)  # fmt: skip
    finally:
        mp.undo()
    assert summary.stored > 10 * BATCH
    con = store.open_db(db, read_only=True)
    clean = store.query_pl(con, "SELECT * EXCLUDE (ingest_id) FROM lines ORDER BY line_id")
    con.close()
    return Big(files, clean, parsed_evidence(db), boundaries, summary.elapsed_s)


def file_args(big: Big) -> list[str]:
    return [arg for f in big.files for arg in ("--file", str(f))]


# ------------------------------------------------------------------ kill -9


# The kill point is a batch boundary, not a moment: the child (the unchanged CLI, small batches)
# reports each committed batch on one pipe and waits on another before it goes on, so the test
# kills it at the boundary it chose, whatever the machine's load. Not past the last one: a kill
# while it computes the verdict would meet a run already marked complete.
_BOUNDARY_CLI = """
import os, sys
import pdforensics.ingest as ingest_module
batch, report_fd, wait_fd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
real = ingest_module.ingest
calls = []

def at_boundary(n):
    calls.append(n)
    os.write(report_fd, b"%d\\n" % len(calls))
    os.read(wait_fd, 1)  # the test answers, or kills us here

def ingest(*args, **kwargs):
    kwargs.update(batch_size=batch, progress=at_boundary)
    return real(*args, **kwargs)

ingest_module.ingest = ingest
from pdforensics.cli import main
sys.argv = ["pdforensics", *sys.argv[4:]]
main()
"""


def kill_at_boundary(args: list[str], boundary: int) -> subprocess.Popen[str]:
    """Run the CLI until it has committed `boundary` batches, then SIGKILL it there."""
    report_r, report_w = os.pipe()
    wait_r, wait_w = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "PDFORENSICS_DEBUG"}
    child = subprocess.Popen(
        [sys.executable, "-c", _BOUNDARY_CLI, str(BATCH), str(report_w), str(wait_r), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
        pass_fds=(report_w, wait_r),
    )  # fmt: skip
    os.close(report_w)
    os.close(wait_r)
    with os.fdopen(report_r) as reports, os.fdopen(wait_w, "wb", buffering=0) as answers:
        for line in reports:
            if int(line) == boundary:
                child.send_signal(signal.SIGKILL)
                break
            answers.write(b"g")
    child.communicate(timeout=CLI_TIMEOUT)
    return child


@pytest.mark.slow
def test_kill_9_at_random_points_leaves_whole_batches_and_the_next_ingest_completes(
    tmp_path: Path, big: Big, catalog: Catalog
) -> None:
    rnd = random.Random(7)
    batches = len(big.boundaries) - 1
    assert batches >= 4, "input too small for kills inside the run"
    for i, boundary in enumerate(sorted(rnd.sample(range(1, batches), 3))):
        db = tmp_path / f"killed-{i}.duckdb"
        child = kill_at_boundary(["ingest", "--db", str(db), *file_args(big), "--quiet"], boundary)
        assert child.returncode == -signal.SIGKILL, f"the ingest ended before batch boundary {boundary}"

        # The database opens, for writing too, and holds a prefix of the clean run in whole batches.
        store.open_db(db).close()
        assert_consistent(db)
        con = store.open_db(db, read_only=True)
        kept = store.query_pl(con, "SELECT * EXCLUDE (ingest_id) FROM lines ORDER BY line_id")
        runs = con.execute("SELECT status, finished_at FROM ingests").fetchall()
        con.close()
        assert kept.height in big.boundaries, f"{kept.height} lines is not a whole number of batches"
        assert kept.equals(big.clean.head(kept.height)), "a killed run stored something a clean run does not"
        assert len(runs) == 1 and all(status == "running" and end is None for status, end in runs)
        assert kept.height == sorted(big.boundaries)[boundary], "not the batches committed before the kill"

        # The next ingest completes with exactly the clean run's evidence; the killed run is marked.
        again = ingest(db, build_sources(None, None, big.files, None), CLI_SELECTION, catalog, batch_size=BATCH,
                       views=False)  # fmt: skip
        assert (again.stored, again.duplicates) == (big.clean.height - kept.height, kept.height)
        assert_consistent(db)
        assert parsed_evidence(db).equals(big.parsed), "the resumed database differs from a clean run's"
        statuses = [s for (s,) in rows(db, "SELECT status FROM ingests ORDER BY ingest_id")]
        assert statuses == ["interrupted", "complete"]


TRACEBACK = """[2026-11-29 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/scheduler.py", line 10, in event_loop
    self.process()
  File "/sgl/scheduler.py", line 20, in process
    raise ValueError("boom")
ValueError: boom
[2026-11-29 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 2, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0,
"""


def _parsed_lines(db: Path) -> list[tuple[Any, ...]]:
    """Each line as parsed, its continuation link given as the head's position (line ids differ by run)."""
    return rows(
        db,
        """SELECT l.seq, l.ts_us, l.ts_origin, l.event, l.engine, h.seq FROM lines l
           LEFT JOIN lines h ON h.line_id = l.cont_of ORDER BY l.seq""",
    )


@pytest.mark.parametrize("resume_batch", [3, 100_000])
def test_resumed_ingest_parses_new_lines_after_their_stored_heads(
    tmp_path: Path, catalog: Catalog, resume_batch: int
) -> None:
    """A run stopped inside a traceback: the rest, read by the next run, keeps its head and its time."""
    log = tmp_path / "prefill.log"
    log.write_text(TRACEBACK)
    clean, db = tmp_path / "clean.duckdb", tmp_path / "resumed.duckdb"
    ingest(
        clean,
        build_sources(None, None, [log], None),
        CLI_SELECTION,
        catalog,
        tz="UTC",
        batch_size=3,
        views=False,
    )

    def stop(_: int) -> None:
        raise KeyboardInterrupt  # after the first batch: head and two traceback lines stored

    with pytest.raises(KeyboardInterrupt):
        ingest(db, build_sources(None, None, [log], None), CLI_SELECTION, catalog, tz="UTC", batch_size=3,
               views=False, progress=stop)  # fmt: skip
    assert rows(db, "SELECT count(*) FROM lines") == [(3,)]
    ingest(db, build_sources(None, None, [log], None), CLI_SELECTION, catalog, tz="UTC", batch_size=resume_batch,
           views=False)  # fmt: skip
    got = _parsed_lines(db)
    assert got == _parsed_lines(clean)
    assert [origin for _, _, origin, *_ in got] == ["app", *["inherited"] * 5, "app"]
    assert [head for *_, head in got] == [None, 0, 0, 0, 0, 0, None]


def test_an_entry_twice_in_one_input_is_stored_once(tmp_path: Path, catalog: Catalog) -> None:
    """Overlapping `journalctl -o json` runs appended to one file: each entry is one line."""
    f = tmp_path / "overlap.json"
    f.write_bytes(b"".join(json_entry(i, f"m{i}") for i in (1, 2, 3, 2, 3, 4)))
    summary = ingest(tmp_path / "o.duckdb", build_sources(None, None, [f], None), CLI_SELECTION, catalog,
                     views=False)  # fmt: skip
    assert (summary.records, summary.stored, summary.duplicates) == (6, 4, 2)
    assert rows(tmp_path / "o.duckdb", "SELECT message FROM lines ORDER BY seq") == [
        ("m1",),
        ("m2",),
        ("m3",),
        ("m4",),
    ]


def test_kill_9_while_the_database_is_being_created(tmp_path: Path) -> None:
    """DuckDB writes a new file in steps; a kill among them used to leave a file no run could open."""
    child = "import sys; from pdforensics import store; print(flush=True); sys.stdin.readline(); store.open_db(sys.argv[1])"
    rnd = random.Random(3)
    for i in range(6):
        db = tmp_path / f"new-{i}.duckdb"
        p = subprocess.Popen(
            [sys.executable, "-c", child, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert p.stdin is not None and p.stdout is not None
        p.stdout.readline()  # imports done: what follows is only the creation
        p.stdin.write(b"\n")
        p.stdin.flush()
        time.sleep(rnd.uniform(0, 0.05))
        p.kill()
        p.wait()
        assert (
            not db.exists() or store.stored_version(duckdb.connect(str(db), read_only=True)) == SCHEMA_VERSION
        )
        store.open_db(db).close()  # whatever the kill left, the next ingest can open it


def test_an_empty_database_file_is_adopted_not_refused(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    db.touch()  # what a kill during creation left before, or `touch`
    with pytest.raises(DatabaseError, match="holds no pdforensics data yet"):
        store.open_db(db, read_only=True)
    con = store.open_db(db)
    assert store.stored_version(con) == SCHEMA_VERSION
    con.close()


@pytest.mark.slow
def test_ctrl_c_keeps_committed_batches_and_says_so(tmp_path: Path, big: Big) -> None:
    """Ctrl-C at random points, inside DuckDB calls too: exit 130 and one line, never a traceback."""
    rnd = random.Random(5)
    for i in range(3):
        db = tmp_path / f"int-{i}.duckdb"
        # held once complete: the signal never lands in the interpreter's exit (killed, not 130)
        child = cli_popen("ingest", "--db", str(db), *file_args(big), "--quiet", batch=BATCH, hold=True)
        wait_for_lock(db, child)
        time.sleep(rnd.uniform(0.1, 1.0) * big.store_s)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=CLI_TIMEOUT)
        assert child.returncode == 130, err
        assert err.strip().splitlines() == [
            "pdforensics: interrupted; every batch committed so far is kept, rerun to continue"
        ]
        [(status,)] = rows(db, "SELECT status FROM ingests")
        assert status in ("interrupted", "complete")  # complete: Ctrl-C came after the last batch
        assert_consistent(db)


def test_ingest_that_cannot_write_fails_with_one_line_and_keeps_committed_batches(
    tmp_path: Path, big: Big, catalog: Catalog
) -> None:
    """Disk full (here: a file size limit) during an ingest: one line, exit 4, the database intact."""
    db = tmp_path / "full.duckdb"
    store.open_db(db).close()
    limit = db.stat().st_size + 2_000_000

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {k: v for k, v in os.environ.items() if k != "PDFORENSICS_DEBUG"}
    proc = subprocess.run(
        [sys.executable, "-c", _SMALL_BATCH_CLI, str(BATCH), "-", "ingest", "--db", str(db), *file_args(big), "--quiet"],
        capture_output=True, text=True, env=env, cwd=REPO, preexec_fn=small_files, timeout=CLI_TIMEOUT,
    )  # fmt: skip
    assert_one_line_error(proc, 4, f"writing {db} failed")
    assert_consistent(db)
    summary = ingest(db, build_sources(None, None, big.files, None), CLI_SELECTION, catalog, batch_size=BATCH,
                     views=False)  # fmt: skip
    assert summary.stored + summary.duplicates == big.clean.height
    assert evidence(db).equals(big.clean.select("source_key", "seq", "message").sort("source_key", "seq"))


# ------------------------------------------------------------------ two processes, one database


@pytest.mark.slow
def test_busy_database_second_ingest_and_readers_get_one_line(tmp_path: Path, big: Big) -> None:
    db = tmp_path / "busy.duckdb"
    first = cli_popen("ingest", "--db", str(db), *file_args(big), "--quiet")
    pid = wait_for_lock(db, first)
    os.kill(pid, signal.SIGSTOP)  # an ingest in the middle of its work, holding the database
    try:
        second = cli_popen(
            "ingest", "--db", str(db), *file_args(big), "--quiet", env={"PDFORENSICS_LOCK_WAIT": "2"}
        )
        readers = {
            "sql": cli_popen("sql", "--db", str(db), "SELECT count(*) FROM lines"),
            "verdict": cli_popen("verdict", "--db", str(db)),
            "report": cli_popen("report", "--db", str(db), "--out", str(tmp_path / "r.html")),
        }
        started = time.monotonic()
        _, err = second.communicate(timeout=CLI_TIMEOUT)
        assert time.monotonic() - started >= 2, "the second ingest did not wait"
        assert_one_line_error(_done(second, err), 4, f"in use by another process (PID {pid})")
        assert "waited 2s" in err
        for name, proc in readers.items():
            _, err = proc.communicate(timeout=CLI_TIMEOUT)
            assert_one_line_error(_done(proc, err), 4, f"is being written by PID {pid} (an ingest?)")
            assert "try again when it finishes" in err, name
    finally:
        os.kill(pid, signal.SIGCONT)
    _, err = first.communicate(timeout=CLI_TIMEOUT)
    assert first.returncode == 0, err
    assert_consistent(db)
    assert evidence(db).equals(big.clean.select("source_key", "seq", "message").sort("source_key", "seq"))
    assert rows(db, "SELECT status FROM ingests") == [("complete",)]  # the second never began
    assert not (tmp_path / "r.html").exists()


def test_a_waiting_writer_proceeds_when_the_holder_finishes(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    store.open_db(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pdforensics import store; c = store.open_db(sys.argv[1]); "
         "print(flush=True); time.sleep(1.5); c.close(); time.sleep(30)", str(db)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        holder.stdout.readline()
        started = time.monotonic()
        with pytest.raises(DatabaseError, match=r"in use by another process \(PID \d+\)"):
            store.open_db(db, wait_s=0.3)
        con = store.open_db(db, wait_s=20)
        assert 1.0 < time.monotonic() - started < 20
        assert store.stored_version(con) == SCHEMA_VERSION
        con.close()
    finally:
        holder.kill()
        holder.wait()


def _done(proc: subprocess.Popen[str], err: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)


def test_lock_wait_option_is_validated(tmp_path: Path) -> None:
    proc = cli(
        "ingest", "--db", str(tmp_path / "a.duckdb"), "--file", "x.log", env={"PDFORENSICS_LOCK_WAIT": "soon"}
    )
    assert_one_line_error(proc, 2, "PDFORENSICS_LOCK_WAIT")


# ------------------------------------------------------------------ corrupt and hostile input

T0 = 1_795_946_400_000_000  # 2026-11-29 10:00:00 UTC


def plain_line(text: str, when: str = "2026-11-29 10:00:00") -> bytes:
    return f"[{when} TP0] {text}\n".encode()


def json_entry(i: int, message: Any, ts: Any = None, sid: str = "feedc0de", **fields: Any) -> bytes:
    # No t= in the cursor: a broken __REALTIME_TIMESTAMP has no fallback, as in hand-made files.
    entry = {"__CURSOR": f"s={sid};i={i:x}", "__REALTIME_TIMESTAMP": str(T0 + i) if ts is None else ts,
             "_SYSTEMD_UNIT": "sglang-prefill.service", "_HOSTNAME": "h1", "MESSAGE": message} | fields  # fmt: skip
    return json.dumps(entry).encode() + b"\n"


def export_entry(i: int, message: bytes, ts: bytes | None = None) -> bytes:
    ts = str(T0 + i).encode() if ts is None else ts
    return (b"__CURSOR=s=c0ffee;i=%x\n__REALTIME_TIMESTAMP=%s\n_SYSTEMD_UNIT=sglang-decode.service\n"
            b"_HOSTNAME=h2\nMESSAGE=%s\n\n") % (i, ts, message)  # fmt: skip


def hostile_files(d: Path) -> dict[str, tuple[Path, int, int]]:
    """name -> (file, records it must store, rejects it must count)."""
    rnd = random.Random(11)
    out: dict[str, tuple[Path, int, int]] = {}

    def put(name: str, data: bytes, stored: int, rejected: int) -> None:
        (d / name).write_bytes(data)
        out[name] = (d / name, stored, rejected)

    ten_mb = "y" * (10 << 20)
    put("ten-mb-line.log", plain_line("first") + plain_line(ten_mb) + plain_line("after"), 2, 1)
    put("ten-mb-line.json", json_entry(1, ten_mb) + json_entry(2, "after"), 2, 0)
    # the zero-only line: one counted reject (issue 29 item 5)
    put("nul-bytes.log", plain_line("before\x00after") * 3 + b"\x00\x00\x00\n", 3, 1)
    put(
        "invalid-utf8.log",
        plain_line("ok") + b"[2026-11-29 10:00:01 TP0] caf\xe9 \xff\xfe \xc3\x28 \xed\xa0\x80\n",
        2,
        0,
    )
    noisy = b"".join(plain_line(f"line {i}") for i in range(400))
    noisy += (
        bytes(rnd.getrandbits(8) for _ in range(3000)).replace(b"\n", b" ") + b"\n"
    )  # garbage inside a log
    put("random-bytes-inside.log", noisy, 401, 0)
    years = [
        plain_line("Prefill batch, #new-seq: 1", f"{y}-11-29 10:00:00")
        for y in (2026, 1970, 2099, 1999, 9999, 2026)
    ]
    years += [
        plain_line("impossible date", "2026-02-30 10:00:00"),
        plain_line("impossible time", "2026-11-29 25:61:61"),
    ]
    put("years-off-and-out-of-order.log", b"".join(years), 8, 0)
    put("wrong-program.log", b"".join(f'10.0.0.{i} - - [29/Nov/2026:10:00:{i % 60:02d} +0000] "GET /x HTTP/1.1" 200 {i}\n'.encode()
                                      for i in range(300)), 300, 0)  # fmt: skip
    put("x-caret.log", b"x^2 + y^2 looks like zlib to polars\n" + plain_line("next"), 2, 0)
    bad_ts = b"".join([
        json_entry(1, "ok", sid="bad"),
        json_entry(2, "no time", ts="yesterday", sid="bad"),
        json_entry(3, "overflow", ts="9" * 30, sid="bad"),
        json_entry(4, "negative", ts=-5, sid="bad"),
        b'{"__CURSOR": "s=bad;i=5", "MESSAGE": "trunc\n',  # a line cut short
        json_entry(6, "after", sid="bad"),
    ])  # fmt: skip
    put("bad-timestamps-and-truncated.json", bad_ts, 2, 4)  # -5 is not a time (issue 15): rejected
    export = (
        export_entry(1, b"fine")
        + export_entry(2, b"late", b"999999999999999999999")
        + export_entry(3, b"cut")
    )
    # rejects: the overflowing time; the cut entry, and its cut line (which has no '=' left)
    put("truncated-entry.export", export[: export.rfind(b"MESSAGE=cut") + 6], 1, 3)
    gz = gzip.compress(b"".join(plain_line(f"line {i}") for i in range(2000)))
    put("cut.log.gz", gz[: len(gz) // 2], -1, 1)  # -1: some lines, whatever decompresses before the cut
    return out


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int, int]]:
    return hostile_files(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize(
    "name",
    ["ten-mb-line.log", "ten-mb-line.json", "nul-bytes.log", "invalid-utf8.log", "random-bytes-inside.log",
     "years-off-and-out-of-order.log", "wrong-program.log", "x-caret.log", "bad-timestamps-and-truncated.json",
     "truncated-entry.export", "cut.log.gz"],
)  # fmt: skip
def test_hostile_input_is_stored_or_counted(
    tmp_path: Path, hostile: dict[str, tuple[Path, int, int]], catalog: Catalog, name: str
) -> None:
    path, stored, rejected = hostile[name]
    db = tmp_path / "h.duckdb"
    summary = ingest(
        db, build_sources(None, None, [path], None), Selection(units=("*",)), catalog, views=False
    )
    if stored >= 0:
        assert summary.stored == stored, summary
    else:
        assert summary.stored > 0
    assert summary.rejected == rejected, summary.rejects_by_reason
    assert sum(summary.rejects_by_reason.values()) == summary.rejected
    assert summary.records == summary.stored + summary.skipped
    assert_consistent(db)
    if name == "nul-bytes.log":
        assert rows(db, "SELECT message FROM lines ORDER BY seq LIMIT 1")[0][0].endswith("before\x00after")
    if name == "invalid-utf8.log":
        assert "caf\ufffd" in rows(db, "SELECT string_agg(message, '|') FROM lines")[0][0]
    if name == "years-off-and-out-of-order.log":  # stored as logged, in file order, years and all
        years = rows(
            db, "SELECT year(make_timestamp(app_ts_us)) FROM lines WHERE app_ts_us IS NOT NULL ORDER BY seq"
        )
        assert [y for (y,) in years] == [2026, 1970, 2099, 1999, 9999, 2026]


def test_hostile_files_through_the_cli_never_traceback(
    tmp_path: Path, hostile: dict[str, tuple[Path, int, int]], journal_file: tuple[Path, int]
) -> None:
    """All of it at once, as a user would: exit 0, and the summary says what was rejected and why."""
    src, _ = journal_file
    start, end = _object_area(src)
    cut = tmp_path / "cut.journal"
    cut.write_bytes(src.read_bytes()[: (start + end) // 2])
    args = [a for path, _, _ in hostile.values() for a in ("--file", str(path))] + [
        "--journal-file",
        str(cut),
    ]
    proc = cli("ingest", "--db", str(tmp_path / "h.duckdb"), *args, "--unit", "*", "--since", "2026-11-29 09:00:00",
               "--until", "2026-11-29 13:00:00", "--tz", "UTC")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    summary = next(line for line in proc.stdout.splitlines() if line.startswith("read "))
    # outside the window: the plain lines of 1970, 2099, 1999 and 9999 (the JSON entry at -5 µs has
    # no valid time: rejected, issue 15)
    assert "already stored 0, outside selection 4," in summary
    for reason in ("line longer than 1 MiB", "entry has no valid __REALTIME_TIMESTAMP", "malformed JSON",
                   "truncated entry at end of input", "compressed file ends before its end (truncated)",
                   "journal file truncated", "journal entries unreadable"):  # fmt: skip
        assert any(ln.strip().startswith("rejected ") and reason in ln for ln in proc.stdout.splitlines()), (
            reason
        )


def test_random_bytes_file_is_refused_with_one_line(tmp_path: Path) -> None:
    f = tmp_path / "random.bin"
    f.write_bytes(random.Random(5).randbytes(200_000))
    proc = cli("ingest", "--db", str(tmp_path / "a.duckdb"), "--file", str(f), "--quiet")
    assert_one_line_error(proc, 3, "not a text log")


def test_a_pipe_is_refused_with_one_line(tmp_path: Path) -> None:
    """`--file <(journalctl ...)`: a pipe can be read once only; say so instead of failing inside."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = cli("ingest", "--db", str(tmp_path / "a.duckdb"), "--file", str(fifo), "--quiet")
    assert_one_line_error(proc, 3, "is not a regular file (a pipe?)")


def test_markup_in_host_and_unit_names_is_printed_as_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pdforensics.ingest import IngestSummary, UnitCount

    monkeypatch.setenv("COLUMNS", "200")  # (in 80 columns a long name wraps in its cell)
    from pdforensics.render import print_ingest_summary

    # A journal's _HOSTNAME / _SYSTEMD_UNIT are whatever the sender wrote (journal-remote collections).
    unit = UnitCount(host="[red]h[/x]", unit="sglang-[/bold]x.service", engine="other", lines=1, recognised=0,
                     parse_errors=0)  # fmt: skip
    summary = IngestSummary(ingest_id=1, db="/d/[b]x[/b].duckdb", sources=[], readers=["json"], units=[unit],
                            rejects_by_reason={"bad [/i] thing :fire: \\": 2})  # fmt: skip
    print_ingest_summary(summary)
    out = capsys.readouterr().out
    for text in ("[red]h[/x]", "sglang-[/bold]x.service", "/d/[b]x[/b].duckdb", "bad [/i] thing :fire: \\\n"):
        assert text in out, text


def test_markup_in_the_verdict_reason_is_printed_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    from pdforensics.render import print_verdict_line

    class Fake:
        def to_json(self) -> dict[str, Any]:
            return {
                "verdict": "inconclusive",
                "evidence_level": "L1",
                "reasons": ["unit [/x] said :fire: \\"],
            }

    print_verdict_line(Fake())  # type: ignore[arg-type]
    assert capsys.readouterr().out == "verdict: inconclusive (L1) unit [/x] said :fire: \\\n"


def test_a_unit_named_like_markup_goes_through_the_cli(tmp_path: Path) -> None:
    """The whole path: a journal entry whose unit and host are rich markup, ingested by the real CLI."""
    entry = {"MESSAGE": "[2026-11-29 10:00:00 TP0] hello", "_SYSTEMD_UNIT": "[/x]", "_HOSTNAME": "[bold]h",
             "__REALTIME_TIMESTAMP": "1795946400000000", "__CURSOR": "s=a;i=1", "_PID": "7"}  # fmt: skip
    f = tmp_path / "markup.json"
    f.write_text(json.dumps(entry) + "\n")
    proc = cli("ingest", "--db", str(tmp_path / "m.duckdb"), "--file", str(f), "--unit", "*")
    assert proc.returncode == 0, proc.stderr
    assert "[/x]" in proc.stdout and "[bold]h" in proc.stdout


# -- real .journal files, damaged


@pytest.fixture(scope="module")
def journal_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    export = (fixtures_dir() / SCENARIO / "journal.export").read_bytes()
    path = export_to_journal(export, tmp_path_factory.mktemp("journal") / "incident.journal")
    header = read_header(path)
    assert header is not None and header.n_entries > 100
    return path, header.n_entries


def _object_area(path: Path) -> tuple[int, int]:
    """Where the entry and data objects of a journal file written by journal-remote lie (after the hash tables)."""
    import struct

    head = path.read_bytes()[:208]
    data_ht, data_ht_size = struct.unpack_from("<QQ", head, 104)
    (tail,) = struct.unpack_from("<Q", head, 136)
    return data_ht + data_ht_size, tail


def _read_journal(path: Path, force_journalctl: bool) -> tuple[int, list[str]]:
    from pdforensics.sources.journal import JournalSource

    records, reasons = 0, []
    for batch in JournalSource("files", [path], force_journalctl=force_journalctl).batches(
        Selection(units=("*",))
    ):
        records += batch.records.height
        reasons += batch.rejects["reason"].to_list()
    return records, reasons


READERS = [pytest.param(False, id="python-systemd"), pytest.param(True, id="journalctl")]


@pytest.mark.parametrize("force_journalctl", READERS)
@pytest.mark.parametrize("keep", [0.97, 0.9, 0.6])
def test_truncated_journal_file_reads_what_is_there_and_counts_the_rest(
    tmp_path: Path, journal_file: tuple[Path, int], keep: float, force_journalctl: bool
) -> None:
    if not force_journalctl and not python_systemd_available():
        pytest.skip("python-systemd is not installed")
    src, total = journal_file
    start, end = _object_area(src)
    cut = tmp_path / "cut.journal"
    cut.write_bytes(src.read_bytes()[: int(start + (end - start) * keep)])
    records, reasons = _read_journal(cut, force_journalctl)
    assert 0 < records < total if keep > 0.6 else records < total
    assert any(r.startswith("journal file truncated") for r in reasons), reasons
    assert f"{total - records:,} of {total:,} journal entries unreadable" in " ".join(reasons)


@pytest.mark.parametrize("force_journalctl", READERS)
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_bit_flipped_journal_file_never_stops_the_ingest(
    tmp_path: Path, journal_file: tuple[Path, int], seed: int, force_journalctl: bool
) -> None:
    if not force_journalctl and not python_systemd_available():
        pytest.skip("python-systemd is not installed")
    src, total = journal_file
    start, end = _object_area(src)
    data = bytearray(src.read_bytes())
    rnd = random.Random(seed)
    for _ in range(12):
        data[rnd.randrange(start, end)] ^= 1 << rnd.randrange(8)
    flipped = tmp_path / "flipped.journal"
    flipped.write_bytes(bytes(data))
    try:
        records, reasons = _read_journal(flipped, force_journalctl)
    except SourceError as e:  # a header too damaged to open: one line naming the file is the answer
        assert "\n" not in str(e) and "flipped.journal" in str(e)
        return
    unread = [r for r in reasons if "journal entries unreadable" in r]
    if records < total:
        assert unread == [f"{total - records:,} of {total:,} journal entries unreadable (damaged file; "
                          "`journalctl --verify --file FILE` shows where)"]  # fmt: skip
    else:
        assert unread == []


def test_journal_too_short_for_a_header_is_one_line(tmp_path: Path, journal_file: tuple[Path, int]) -> None:
    stub = tmp_path / "stub.journal"
    stub.write_bytes(journal_file[0].read_bytes()[:100])
    proc = cli("ingest", "--db", str(tmp_path / "j.duckdb"), "--journal-file", str(stub))
    assert_one_line_error(proc, 3, "stub.journal")


# ------------------------------------------------------------------ permissions (as nobody)

NOBODY = 65534


# The child drops to nobody before running the CLI. Modules it imports later (typer and the
# commands import lazily) may live where nobody cannot read (a Python under /root): imports alone
# regain root's rights, from the saved set-user-ID. Everything else runs as nobody.
_AS_NOBODY = """
import importlib.abc, importlib.machinery, os, sys

NOBODY = int(sys.argv[1])


def privileged(call, *args):
    os.seteuid(0)
    try:
        return call(*args)
    finally:
        os.seteuid(NOBODY)


class Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return privileged(self.inner.create_module, spec)

    def exec_module(self, module):
        privileged(self.inner.exec_module, module)


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        spec = privileged(importlib.machinery.PathFinder.find_spec, name, path, target)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = Loader(spec.loader)
        return spec


sys.path.insert(0, sys.argv.pop(2))  # the world-readable copy of the package (see readable_copy)
from pdforensics.cli import main

assert main.__module__ == "pdforensics.cli" and sys.modules["pdforensics"].__file__.startswith(sys.path[0])
os.setgroups([])
os.setresgid(NOBODY, NOBODY, 0)
os.setresuid(NOBODY, NOBODY, 0)
sys.meta_path.insert(0, Finder())
sys.argv = ["pdforensics", *sys.argv[2:]]
main()
"""


def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as user nobody, without groups (real and effective uid; see _AS_NOBODY)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged user")
    env = {k: v for k, v in os.environ.items() if k != "PDFORENSICS_DEBUG"}
    return subprocess.run([sys.executable, "-c", _AS_NOBODY, str(NOBODY), str(readable_copy()), *args],
                          capture_output=True, text=True, env=env, cwd="/", timeout=CLI_TIMEOUT)  # fmt: skip


@functools.cache
def readable_copy() -> Path:
    """The package and the data it reads (catalog, views) where nobody can read them: a checkout
    under a 0700 home or temp folder is closed to other users, and these tests must not depend
    on where the checkout lives. Imports from elsewhere regain root's rights (see _AS_NOBODY)."""
    d = Path(tempfile.mkdtemp(prefix="pdf-pkg-"))
    atexit.register(shutil.rmtree, d, True)
    shutil.copytree(REPO / "pdforensics", d / "pdforensics", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "queries", d / "queries")
    for path in [d, *d.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return d


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody can enter and read (tmp_path's parents are closed to other users)."""
    d = Path(tempfile.mkdtemp(prefix="pdf-rel-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def test_unreadable_journal_file_names_the_group(shared: Path, journal_file: tuple[Path, int]) -> None:
    locked = shared / "system.journal"
    shutil.copy(journal_file[0], locked)
    locked.chmod(0o600)
    out = shared / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    proc = as_nobody("ingest", "--db", str(out / "a.duckdb"), "--journal-file", str(locked))
    assert_one_line_error(proc, 3, "systemd-journal group")


def test_unreadable_journal_directory_names_the_group(shared: Path, journal_file: tuple[Path, int]) -> None:
    d = shared / "remote"
    d.mkdir()
    shutil.copy(journal_file[0], d / "remote-a.journal")
    d.chmod(0o700)
    proc = as_nobody("ingest", "--db", str(shared / "a.duckdb"), "--directory", str(d))
    assert_one_line_error(proc, 3, "systemd-journal group")


def test_local_journal_invisible_to_nobody_names_the_group(shared: Path) -> None:
    out = shared / "out"
    out.mkdir()
    out.chmod(0o777)
    proc = as_nobody("ingest", "--db", str(out / "a.duckdb"), "--since", "1h")
    assert_one_line_error(proc, 3, "systemd-journal group")


@pytest.mark.parametrize("case", ["read-only file", "read-only folder"])
def test_read_only_database_path_is_a_clear_message(shared: Path, case: str) -> None:
    db = shared / "ro.duckdb"
    store.open_db(db).close()
    db.chmod(0o444 if case == "read-only file" else 0o644)
    export = shutil.copy(fixtures_dir() / SCENARIO / "journal.export", shared / "journal.export")
    Path(export).chmod(0o644)  # the checkout may be closed to other users: nobody reads this copy
    proc = as_nobody("ingest", "--db", str(db if case == "read-only file" else shared / "new.duckdb"),
                     "--file", str(export))  # fmt: skip
    assert_one_line_error(proc, 4, "permission denied (choose a writable --db path)")


def test_a_writable_database_in_a_read_only_folder_says_what_to_change(shared: Path) -> None:
    """Issue 29, item 10: the file writable, its folder not (DuckDB writes `<db>.wal` there): the
    first commit failed with "rerun to continue", which never helps. One line naming the folder
    and what to do, before any run is recorded."""
    db = shared / "ro.duckdb"
    store.open_db(db).close()
    db.chmod(0o666)
    export = shutil.copy(fixtures_dir() / SCENARIO / "journal.export", shared / "journal.export")
    Path(export).chmod(0o644)
    proc = as_nobody("ingest", "--db", str(db), "--file", str(export))
    assert_one_line_error(proc, 4, f"its folder {shared} is read-only")
    assert "make the folder writable" in proc.stderr and "rerun" not in proc.stderr, proc.stderr
    assert rows(db, "SELECT count(*) FROM ingests") == [(0,)]


def test_a_write_refused_mid_ingest_says_what_to_change_not_rerun(
    tmp_path: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database that stops being writable during the run (a read-only remount): the batches
    committed are kept, and the line says what to change, since a plain rerun meets the same wall."""
    db = tmp_path / "a.duckdb"
    real = store.store_batch
    calls: list[int] = []

    def refused_at_the_second(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise duckdb.IOException(f'Cannot open file "{db}.wal": Read-only file system')
        real(*args, **kwargs)

    monkeypatch.setattr(store, "store_batch", refused_at_the_second)
    sources = build_sources(None, None, [fixtures_dir() / SCENARIO / "journal.export"], None)
    with pytest.raises(DatabaseError) as failed:
        ingest(db, sources, CLI_SELECTION, catalog, batch_size=100, views=False)  # 382 entries: 4 batches
    text = str(failed.value)
    assert f"writing {db} failed" in text and "Read-only file system" in text, text
    assert "rerun to continue" not in text and "writable" in text, text
    assert rows(db, "SELECT status FROM ingests") == [("interrupted",)]
    assert rows(db, "SELECT count(*) FROM lines") == [(100,)], "the first batch is kept"


def test_unreadable_database_is_a_clear_message(shared: Path) -> None:
    db = shared / "secret.duckdb"
    store.open_db(db).close()
    db.chmod(0o600)
    proc = as_nobody("verdict", "--db", str(db))
    assert_one_line_error(proc, 4, f"cannot read {db}: permission denied")


# ------------------------------------------------------------------ schema versions


def _with_version(path: Path, version: str) -> Path:
    store.open_db(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [version])
    con.close()
    return path


def test_database_from_an_older_version_without_a_migration_is_refused(tmp_path: Path) -> None:
    assert 0 not in store.MIGRATIONS
    db = _with_version(tmp_path / "old.duckdb", "0")
    for args in (["ingest", "--file", str(fixtures_dir() / SCENARIO / "journal.export")], ["verdict"]):
        proc = cli(args[0], "--db", str(db), *args[1:])
        assert_one_line_error(proc, 4, "written by an older pdforensics (schema 0")
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [
        ("0",)
    ]  # untouched
    assert con.execute("SELECT count(*) FROM lines").fetchall() == [(0,)]
    con.close()


def test_database_version_that_is_not_a_number_is_one_line(tmp_path: Path) -> None:
    db = _with_version(tmp_path / "odd.duckdb", "one")
    assert_one_line_error(cli("verdict", "--db", str(db)), 4, "unreadable schema version 'one'")


def test_older_schema_is_migrated_by_a_writer_and_refused_by_a_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "v1.duckdb"
    store.open_db(db).close()  # written by "the older version": the current schema
    monkeypatch.setattr(store, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(
        store, "MIGRATIONS", {SCHEMA_VERSION: ["ALTER TABLE ingests ADD COLUMN host VARCHAR"]}
    )
    with pytest.raises(DatabaseError, match=f"has schema {SCHEMA_VERSION}; run `pdforensics ingest"):
        store.open_db(db, read_only=True)
    con = store.open_db(db)
    assert store.stored_version(con) == SCHEMA_VERSION + 1
    assert "host" in [r[0] for r in con.execute("DESCRIBE ingests").fetchall()]
    con.close()
    store.open_db(db, read_only=True).close()


def test_a_failing_migration_leaves_the_old_database_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "v1.duckdb"
    store.open_db(db).close()
    monkeypatch.setattr(store, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(store, "MIGRATIONS", {SCHEMA_VERSION: ["ALTER TABLE ingests ADD COLUMN x INT",
                                                               "ALTER TABLE no_such_table ADD COLUMN y INT"]})  # fmt: skip
    with pytest.raises(DatabaseError):
        store.open_db(db)
    monkeypatch.undo()
    con = store.open_db(db, read_only=True)
    assert store.stored_version(con) == SCHEMA_VERSION
    assert "x" not in [r[0] for r in con.execute("DESCRIBE ingests").fetchall()]
    con.close()


# ------------------------------------------------------------------ hostile text in the report
# tests/test_report*.py (the report's author) cover HTML/script in synthetic data and redaction;
# these add what reaches the report through a real ingest (host and unit names, reject samples, a
# failure reason), bidi controls and very long words.

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: displays what follows reversed ("evil" trick)
RLO_SHOWN = "\u27e8U+202E\u27e9"  # how the report shows it (pdforensics.report.html.shown)
LONG_WORD = "W" * 20_000
SECRET = "SECRET PROMPT tell me the launch codes"


@dataclass
class HostileReport:
    html: Path
    room: str


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory: pytest.TempPathFactory, catalog: Catalog) -> HostileReport:
    import re

    from pdforensics.report import write_report
    from pdforensics.verdict import VerdictOptions

    d = tmp_path_factory.mktemp("hostile-report")
    fx = fixtures_dir() / "decode_restart_old_build"
    room = next(r["bootstrap_room"] for r in json.loads((fx / "expected.json").read_text())["requests"]
                if r["class"] == "silent_pin")  # fmt: skip
    db = d / "r.duckdb"
    ingest(db, build_sources(None, None, [fx / "journal.export"], None), Selection(units=("*",)), catalog,
           views=False)  # fmt: skip
    [(ts, host, unit, pid, boot, inv, message)] = rows(
        db,
        "SELECT ts_us, host, unit, pid, boot_id, invocation_id, message FROM lines "
        f"WHERE message LIKE '%bootstrap_room={room}%' AND engine = 'prefill' ORDER BY ts_us LIMIT 1",
    )
    match = re.match(r"^\[[^\]]*\]", message)
    assert match
    same = {"_HOSTNAME": host, "_SYSTEMD_UNIT": unit, "_PID": str(pid), "_BOOT_ID": boot,
            "_SYSTEMD_INVOCATION_ID": inv}  # fmt: skip
    reason = f"<img src=x onerror=window.__pwned=7> ABC{RLO}DEF {LONG_WORD}"
    failed = (f"{match.group(0)} Prefill transfer failed for request rank=0 req.rid='hostile' "
              f"req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): {reason}")  # fmt: skip
    receive = (f"{match.group(0)} Receive: obj=GenerateReqInput(rid='hostile', text='{SECRET} "
               f"<script>window.__pwned=9</script>', bootstrap_room={room})")  # fmt: skip
    lines = [
        {"__CURSOR": "s=hostile;i=1", "__REALTIME_TIMESTAMP": str(ts + 500_000), "MESSAGE": receive} | same,
        {"__CURSOR": "s=hostile;i=2", "__REALTIME_TIMESTAMP": str(ts + 1_000_000), "MESSAGE": failed} | same,
        {"__CURSOR": "s=hostile;i=3", "__REALTIME_TIMESTAMP": str(ts + 2_000_000), "MESSAGE": "hello",
         "_HOSTNAME": "H" * 5_000 + RLO + "tsoh", "_SYSTEMD_UNIT": f"sglang-{RLO}live-decode.service"},
    ]  # fmt: skip
    text = "\n".join(json.dumps(x) for x in lines) + "\n"
    text += '{"MESSAGE": "<svg onload=window.__pwned=8> XYZ' + RLO + "UVW " + LONG_WORD + "\n"  # a reject
    (d / "hostile.json").write_text(text)
    ingest(db, build_sources(None, None, [d / "hostile.json"], None), Selection(units=("*",)), catalog)
    con = store.open_db(db, read_only=True)
    try:
        html = write_report(con, d / "incident.html", VerdictOptions(watchdog_timeout_s=60))
    finally:
        con.close()
    return HostileReport(html, room)


@pytest.fixture(scope="module")
def page(hostile_report: HostileReport) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    from pdforensics.report.screenshot import CHROMIUM, launch, wait_rendered

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed")
    with sync_api.sync_playwright() as p:
        browser = launch(p)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.dialogs, pg.errors = [], []
        pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
        pg.on("pageerror", lambda e: pg.errors.append(str(e)))
        pg.goto(hostile_report.html.resolve().as_uri())
        wait_rendered(pg)
        pg.evaluate(f"window.pdforensics.showRequest('{hostile_report.room}')")
        yield pg
        browser.close()


# Where two characters of a marker are drawn (its characters at offsets a and b), as [left, left].
_DRAWN_AT = """([root, marker, a, b]) => {
  const walker = document.createTreeWalker(document.querySelector(root), NodeFilter.SHOW_TEXT);
  for (let node; (node = walker.nextNode()); ) {
    const i = node.data.indexOf(marker);
    if (i < 0) continue;
    const left = (k) => { const r = document.createRange(); r.setStart(node, k); r.setEnd(node, k + 1);
                          return r.getBoundingClientRect().left; };
    return [left(i + a), left(i + b)];
  }
  return null;
}"""


@pytest.mark.browser
def test_report_shows_hostile_log_text_as_text_with_prompts_redacted(
    page: Any, hostile_report: HostileReport
) -> None:
    raw = page.inner_text("#detail pre.raw")
    assert "<img src=x onerror=window.__pwned=7>" in raw  # as text
    assert "text=[redacted" in raw
    assert SECRET not in hostile_report.html.read_text(encoding="utf-8")  # not even escaped: gone
    assert "<svg onload=window.__pwned=8>" in page.inner_text("#tbl-rejects")
    assert ("H" * 100) in page.inner_text("#tbl-units")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("img[src=x], svg[onload], #detail script").count() == 0
    assert page.dialogs == [] and page.errors == []


@pytest.mark.browser
def test_report_very_long_words_stay_inside_the_page(page: Any) -> None:
    width, viewport = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= viewport, f"the page is {width} px wide"


@pytest.mark.browser
@pytest.mark.parametrize(("where", "before", "after"), [("#detail pre.raw", "ABC", "DEF"),
                                                        ("#tbl-failures", "ABC", "DEF"),
                                                        ("#tbl-rejects", "XYZ", "UVW"),
                                                        ("#tbl-units", "sglang-", "live-decode")])  # fmt: skip
def test_report_bidi_controls_do_not_reorder_log_text(page: Any, where: str, before: str, after: str) -> None:
    """No CSS stops U+202E from reversing the text after it inside its own element (isolation only
    keeps it from leaking out): the report shows each bidi control as a visible token instead."""
    from pdforensics.report.html import BIDI_CONTROLS

    marker = f"{before}{RLO_SHOWN}{after}"
    first, last = len(before) + len(RLO_SHOWN), len(marker) - 1
    drawn = page.evaluate(_DRAWN_AT, [where, marker, first, last])
    assert drawn is not None, f"{marker!r} not shown in {where}"
    assert drawn[0] < drawn[1], f"{where}: the text after U+202E is drawn reversed"
    text = page.evaluate("(root) => document.querySelector(root).textContent", where)
    assert not set(text) & set(BIDI_CONTROLS)


def test_report_file_holds_no_bidi_control_from_the_logs(hostile_report: HostileReport) -> None:
    from pdforensics.report.html import BIDI_CONTROLS, shown

    html = hostile_report.html.read_text(encoding="utf-8")
    plotly = pytest.importorskip("plotly.offline").get_plotlyjs()
    assert not set(html.replace(plotly, "")) & set(BIDI_CONTROLS)
    assert shown(f"a{RLO}b\u2066c\u200fd") == "a\u27e8U+202E\u27e9b\u27e8U+2066\u27e9c\u27e8U+200F\u27e9d"
