"""`ingest -D DIR --jobs N` (N >= 3): a journal directory's files read and parsed by N - 1 worker
processes while this one stores (N = 2 is ingest._pipeline: a parse thread beside the store).

A journal-remote collection is one file per sending host (`remote-<host>.journal`, rotated ones
`remote-<host>@....journal~`). Each host's files are one *task*: read in seqnum order by one worker,
as `--jobs 1` reads them (a JournalSource over those files, labelled like the directory's), with
its own parse carry, so continuation lines, inherited times and engine votes never straddle two
workers. The worker drops what the database already holds (the task carries the stored seq ranges
of its files' seqnum ids), parses the rest and sends the parsed batch as Arrow IPC; the main
process, the one DuckDB writer, stores each batch in its own transaction with the task's resume
mark (`journal_mark:<seqnum id>|...`), so a killed ingest resumes every host's files where they
stopped.

Line ids come from one counter the workers share (a block per batch), so they stay unique; links
to lines stored before the run (the parse context of a resumed read) travel as `-(seq + 1)` and the
main process points them at the stored line_ids. A worker that dies (kill -9, OOM) costs nothing:
its task is read again by a new worker from the marks committed so far; a second death, or a file
that cannot be read, is one counted rejection.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import re
import shutil
import signal
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from pdforensics import batches, store
from pdforensics.batches import Context, Prepared, coalesce, prepare_batch
from pdforensics.errors import SourceError
from pdforensics.parse import Parsed, ParseOptions, StreamCarry, parse_records
from pdforensics.schema import empty_records
from pdforensics.sources import RecordBatch, Selection, Source
from pdforensics.sources._common import rejects_frame
from pdforensics.sources.journal import JournalSource, read_header

# Test hooks (tests/test_ingest_jobs.py), each a worker death at a chosen point: a worker SIGKILLs
# itself after sending this many batches of a task's first attempt; after finishing its first
# task (dead between tasks); the main process SIGKILLs the first worker it starts at once (dead
# before it has read anything, its end of the pipe perhaps still held by the resource sharer).
_DIE_AFTER_ENV = "PDFORENSICS_TEST_WORKER_DIES_AFTER"
_DIE_BETWEEN_ENV = "PDFORENSICS_TEST_WORKER_DIES_BETWEEN_TASKS"
_KILL_FIRST_ENV = "PDFORENSICS_TEST_FIRST_WORKER_KILLED_AT_START"
_ATTEMPTS = 2  # a task whose worker dies is read again once


@dataclass
class Collection:
    """A journal directory split into tasks (one host's files each), read by `jobs` workers."""

    source: JournalSource
    tasks: list[list[Path]]
    jobs: int


def _task_key(path: Path) -> tuple[str, str]:
    """One host's files: remote-<host>.journal and its rotated remote-<host>@....journal~."""
    return str(path.parent), re.sub(r"(@[^/]*)?\.journal~?$", "", path.name)


def collection_tasks(files: list[Path]) -> list[list[Path]]:
    """The directory's files grouped per host (file name stem), biggest task first.

    Files of one seqnum id always share a task, whatever their names (a local journal's system and
    user files): one task's resume mark covers its seqnum id, so no other task may store under it."""
    owner: dict[object, int] = {}  # a name stem or a seqnum id -> its group
    parent = list(range(len(files)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, f in enumerate(files):
        header = read_header(f)
        for key in (_task_key(f), header.seqnum_id if header is not None else None):
            if key is None:
                continue
            if key in owner:
                parent[root(i)] = root(owner[key])
            else:
                owner[key] = i
    groups: dict[int, list[Path]] = {}
    for i, f in enumerate(files):
        groups.setdefault(root(i), []).append(f)

    def size(task: list[Path]) -> int:
        return sum(f.stat().st_size for f in task if f.exists())

    return sorted(groups.values(), key=lambda t: (-size(t), str(t[0])))


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def collection_plan(sources: list[Source], jobs: int | None) -> Collection | None:
    """The parallel plan for one journal directory of several hosts' files: `jobs` - 1 workers
    read and parse while this process stores (None: one job per core). None (this process reads,
    ingest._pipeline) for other sources, a single task, or fewer than 2 workers: with 2 jobs, one
    worker process beside the store does what the pipeline's parse thread does, at the cost of a
    process (measured on the 2-core machine: 24.8 s with 2 workers, 21.4 s pipelined)."""
    if len(sources) != 1:
        return None
    src = sources[0]
    if not isinstance(src, JournalSource) or src.kind != "directory":
        return None
    tasks = collection_tasks(src.files)
    n = min((jobs or default_jobs()) - 1, len(tasks))
    return Collection(src, tasks, n) if n > 1 else None


# ------------------------------------------------------------------ main process


@dataclass
class _Task:
    """What a worker needs to read one host's files (all picklable)."""

    index: int
    files: list[Path]
    label: str
    attempt: int
    resume: str | None  # the resume mark's detail (JournalSource.resume)
    stored: bytes  # IPC: source_key, lo, hi: seq ranges the database holds for these files
    spool: str = ""  # where the worker writes its batches' big frames (Arrow IPC files)
    keys: tuple[str, ...] = ()  # the seqnum ids of its files' headers: only this task stores under them


@dataclass
class _Worker:
    process: Any  # multiprocessing's SpawnProcess
    conn: Connection
    task: _Task | None = None


@dataclass
class _Progress:
    failed: list[tuple[str, str, str, str]] = field(default_factory=list)  # rejects of lost tasks
    finished: int = 0
    unreadable: int = 0  # tasks whose files could not be read at all


def read_collection(
    con: duckdb.DuckDBPyConnection,
    plan: Collection,
    selection: Selection,
    opts: ParseOptions,
    batch_size: int,
    next_id: int,
    commit: Callable[[Prepared], None],
) -> None:
    """Hand the tasks to `plan.jobs` workers and store their batches as they come (`commit`)."""
    ctx = mp.get_context("spawn")  # not fork: this process holds DuckDB's threads and file lock
    counter = ctx.Value("q", next_id)
    journalctl = plan.source.reader == "journalctl-export"
    done = _Progress()
    workers: list[_Worker] = []

    # At least 2: a worker's reader thread and its parse overlap (measured on the 2-core machine:
    # 1 thread each made the run slower); on a big box, its share of the cores.
    threads = str(max(2, default_jobs() // plan.jobs))

    def start() -> _Worker:
        mine, theirs = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=_worker_main, args=(theirs, counter, opts, selection, batch_size, journalctl),
            name="pdforensics-ingest-worker", daemon=True,
        )  # fmt: skip
        # The workers share the cores: polars' pool in each sized to its share, not N pools of all
        # the cores (read when polars is imported; PDFORENSICS_WORKER_THREADS overrides it).
        with _env(POLARS_MAX_THREADS=os.environ.get("PDFORENSICS_WORKER_THREADS", threads)):
            proc.start()
        theirs.close()  # only the worker holds its end (once it has it): its death reads as EOF here
        if kill_next:
            proc.kill()
            kill_next.clear()
        return _Worker(proc, mine)

    kill_next = [True] if os.environ.get(_KILL_FIRST_ENV) else []  # the test hook: the first one only

    spool = _spool_dir()
    todo = deque(
        _Task(i, files, plan.source.label, 0, None, b"", str(spool)) for i, files in enumerate(plan.tasks)
    )
    try:
        workers = [start() for _ in range(plan.jobs)]
        while True:
            for k, w in enumerate(workers):
                if w.task is None and todo:
                    task = _planned(con, todo.popleft(), selection)
                    if not _handed(w, task):  # it died between tasks: not the task's fault
                        todo.appendleft(task)
                        workers[k] = start()
            busy = [w for w in workers if w.task is not None]
            if not busy:
                if todo:
                    continue
                break
            # A worker's exit as well as its messages: one that dies before it has taken its end
            # of the pipe leaves a copy with multiprocessing's resource sharer, and no EOF comes.
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
            for w in busy:
                if w.conn in ready:
                    died = _serve(con, w, commit, todo, done, plan.source)
                elif w.process.sentinel in ready:
                    _died(w, w.task, todo, done)  # type: ignore[arg-type]
                    died = True
                else:
                    continue
                if died:
                    workers[workers.index(w)] = start()
    finally:
        _stop(workers)
        shutil.rmtree(spool, ignore_errors=True)
    if done.unreadable == len(plan.tasks):  # nothing could be read at all: one line, as with --jobs 1
        raise SourceError(done.failed[-1][2])
    if done.failed:
        commit(_rejects_only(done.failed, opts))


_SPOOL_PREFIX = "pdforensics-jobs-"


def _spool_dir() -> Path:
    """A fresh directory for the workers' batch files: in /dev/shm (memory, no disk writes) when
    there is one. Those a killed ingest left (its pid gone) are removed first."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    for old in base.glob(f"{_SPOOL_PREFIX}*"):
        pid = old.name.removeprefix(_SPOOL_PREFIX).split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{_SPOOL_PREFIX}{os.getpid()}-", dir=base))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    """Environment variables set while a child process is spawned (it copies the environment)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _planned(con: duckdb.DuckDBPyConnection, task: _Task, selection: Selection) -> _Task:
    """The task with where to resume (its mark, as committed so far) and what is stored."""
    probe = JournalSource("files", task.files)
    key = probe.mark_key(selection)
    mark = store.get_mark(con, key) if key else None
    ids = sorted({h.seqnum_id for h in (read_header(f) for f in task.files) if h is not None})
    task.resume = mark[1] if mark else None
    task.stored = _ipc(_stored_ranges(con, ids))
    task.keys = tuple(ids)
    return task


def _stored_ranges(con: duckdb.DuckDBPyConnection, keys: list[str]) -> pl.DataFrame:
    """The seqs stored under `keys`, as runs of consecutive seqs (source_key, lo, hi)."""
    empty = pl.DataFrame(schema={"source_key": pl.String, "lo": pl.Int64, "hi": pl.Int64})
    if not keys:
        return empty
    got = store.query_pl(
        con,
        """SELECT source_key, min(seq) AS lo, max(seq) AS hi FROM (
               SELECT source_key, seq, seq - row_number() OVER (PARTITION BY source_key ORDER BY seq) AS run
               FROM lines WHERE source_key IN (SELECT unnest(?::VARCHAR[])))
           GROUP BY source_key, run ORDER BY source_key, lo""",
        [keys],
    )
    return got.cast(empty.schema) if got.height else empty  # type: ignore[arg-type]


def _serve(
    con: duckdb.DuckDBPyConnection,
    w: _Worker,
    commit: Callable[[Prepared], None],
    todo: deque[_Task],
    done: _Progress,
    source: JournalSource,
) -> bool:
    """Take one message from a worker; True when it died and needs replacing."""
    task = w.task
    assert task is not None
    try:
        msg = w.conn.recv()
    except (EOFError, OSError):
        _died(w, task, todo, done)
        return True
    kind = msg[0]
    if kind == "batch":
        commit(_resolved(con, _decoded(msg[1])))
    elif kind == "done":
        _merge_notes(source, msg[1])
        done.finished += 1
        w.task = None
    elif kind == "failed":
        fatal, text = msg[1], msg[2]
        if fatal:  # the user can act on it (permission denied): one line, as with --jobs 1
            raise SourceError(text)
        done.failed.append((task.label, ",".join(map(str, task.files)), text, ""))
        done.unreadable += msg[3]
        w.task = None
    return False


def _handed(w: _Worker, task: _Task) -> bool:
    """Give an idle worker its next task; False when the worker is already gone."""
    if w.process.exitcode is not None:
        return False
    try:
        w.conn.send(task)
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        return False
    w.task = task
    return True


def _died(w: _Worker, task: _Task, todo: deque[_Task], done: _Progress) -> None:
    """A worker died mid-task: its committed batches stay; the task is read again from its marks
    (what is stored is dropped as known), once; a second death is a counted rejection."""
    w.process.join(timeout=5)
    code = w.process.exitcode
    how = (
        f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
    )
    w.task = None
    if task.attempt + 1 < _ATTEMPTS:
        todo.appendleft(_Task(task.index, task.files, task.label, task.attempt + 1, None, b"", task.spool))
        return
    files = ",".join(map(str, task.files))
    done.failed.append(
        (task.label, files, f"ingest worker {how} twice reading these files; the rest of them is unread", "")
    )


def _stop(workers: list[_Worker]) -> None:
    for w in workers:
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(None)
    for w in workers:
        w.process.join(timeout=2)
        if w.process.is_alive():  # stuck or still reading after Ctrl-C: it is ours, end it
            w.process.kill()
            w.process.join()
        w.conn.close()


def _merge_notes(source: JournalSource, notes: tuple[int, int, dict[str, int]]) -> None:
    files, entries, fallbacks = notes
    source.direct.files += files
    source.direct.entries += entries
    source.direct.fallbacks.update(fallbacks)


def _rejects_only(problems: list[tuple[str, str, str, str]], opts: ParseOptions) -> Prepared:
    """A batch of nothing but these rejects (tasks lost to dead workers or unreadable files)."""
    empty = parse_records(empty_records(), opts)
    return Prepared(RecordBatch(rejects=rejects_frame(problems)), empty, 0, 0, 0, 0)


def _resolved(con: duckdb.DuckDBPyConnection, prep: Prepared) -> Prepared:
    """Links to lines stored before (cont_of = -(seq + 1), same source_key) -> their line_ids."""
    lines = prep.parsed.lines
    if not lines.height:
        return prep
    refs = lines.filter(pl.col("cont_of") < 0).select("source_key", seq=-pl.col("cont_of") - 1).unique()
    if not refs.height:
        return prep
    stored = store.known_lines(con, refs).rename({"seq": "_ref", "line_id": "_ref_id"})
    ref = pl.when(pl.col("cont_of") < 0).then(-pl.col("cont_of") - 1)
    lines = (
        lines.with_columns(_ref=ref)
        .join(stored, on=["source_key", "_ref"], how="left", maintain_order="left")
        .with_columns(
            cont_of=pl.when(pl.col("cont_of") < 0).then(pl.col("_ref_id")).otherwise(pl.col("cont_of"))
        )
        .select(lines.columns)
    )
    prep.parsed = Parsed(lines=lines, events=prep.parsed.events, stats=prep.parsed.stats, odd=prep.parsed.odd)
    return prep


# ------------------------------------------------------------------ hand-over: Arrow IPC


def _ipc(frame: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.write_ipc(buf, compression="uncompressed")
    return buf.getvalue()


def _frame(data: bytes) -> pl.DataFrame:
    return pl.read_ipc(io.BytesIO(data))


def _encoded(prep: Prepared, spool: Path, name: str) -> tuple[Any, ...]:
    """The batch as a message: lines and events written as Arrow IPC files into `spool` (the main
    process reads them from memory: no pickling, no pipe copy of the text), the small frames inline."""
    b, p = prep.batch, prep.parsed
    paths = []
    for part, frame in (("lines", p.lines), ("events", p.events)):
        path = spool / f"{name}-{part}.arrow"
        frame.write_ipc(path, compression="uncompressed")
        paths.append(str(path))
    small = [_ipc(f) for f in (p.stats, p.odd, b.rejects)]
    counts = (b.skipped, b.null_messages, b.known_unread, b.known_before, b.marks)
    return (paths, small, counts, prep.fresh, prep.outside, prep.parsed_records, prep.records, prep.unseen)


def _mapped(path: str) -> pl.DataFrame:
    """An IPC file as a frame over its memory map (no copy: ~40x cheaper than reading it); the
    name is removed at once, the pages stay until the frame is dropped."""
    with pa.memory_map(path) as src:
        table = pa.ipc.open_file(src).read_all()
    Path(path).unlink(missing_ok=True)
    return pl.from_arrow(table)  # type: ignore[return-value]


def _decoded(msg: tuple[Any, ...]) -> Prepared:
    paths, small, (skipped, nulls, unread, before, marks), fresh, outside, parsed_records, records, unseen = (
        msg
    )
    lines, events = (_mapped(p) for p in paths)
    stats, odd, rejects = (_frame(f) for f in small)
    batch = RecordBatch(empty_records(), rejects, skipped, nulls, unread, before, marks)
    return Prepared(batch, Parsed(lines, events, stats, odd), fresh, outside, parsed_records, records, unseen)


# ------------------------------------------------------------------ worker process


def _worker_main(
    conn: Connection,
    counter: Any,
    opts: ParseOptions,
    selection: Selection,
    batch_size: int,
    journalctl: bool,
) -> None:
    """Read tasks until told to stop (None) or the main process is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's: it stops us
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            _run_task(conn, counter, task, opts, selection, batch_size, journalctl)
        except (BrokenPipeError, EOFError):
            return
        except SourceError as exc:
            text = str(exc)
            conn.send(("failed", "permission denied" in text, text, 1))
        except Exception as exc:  # a reader's bug costs this task, counted, not the run
            first = (str(exc).strip().splitlines() or [""])[0]
            conn.send(("failed", False, f"reading these files failed: {type(exc).__name__}: {first}", 0))


def _run_task(
    conn: Connection,
    counter: Any,
    task: _Task,
    opts: ParseOptions,
    selection: Selection,
    batch_size: int,
    journalctl: bool,
) -> None:
    src = JournalSource("files", task.files, force_journalctl=journalctl)
    src.label = task.label  # the lines' `source` is the directory's, whatever the jobs
    src.resume(task.resume, batches.CONTEXT_RECORDS)
    stored = _frame(task.stored)
    carry, context = StreamCarry(), Context()
    die_after = int(os.environ.get(_DIE_AFTER_ENV, "0") or 0) if task.attempt == 0 else 0

    def ids(n: int) -> int:
        with counter.get_lock():
            first = counter.value
            counter.value = first + n
        return first

    def known_of(records: pl.DataFrame) -> pl.DataFrame:
        return _known(records, stored)

    spool = Path(task.spool)
    for sent, batch in enumerate(_batches(src, selection, batch_size), 1):
        prep = prepare_batch(known_of, batch, selection.window, opts, carry, ids, context)
        lines = prep.parsed.lines.select("source_key", "seq")
        # What this batch stores is known to the next ones; when all of it is under this task's
        # own seqnum ids, this worker knows everything stored there: the main process need not look.
        stored = pl.concat([stored, _runs(lines)])
        prep.unseen = bool(task.keys) and lines["source_key"].is_in(task.keys).all()
        conn.send(("batch", _encoded(prep, spool, f"{os.getpid()}-{task.index}-{task.attempt}-{sent}")))
        if die_after and sent >= die_after:
            os.kill(os.getpid(), signal.SIGKILL)
    d = src.direct
    conn.send(("done", (d.files, d.entries, dict(d.fallbacks))))
    if os.environ.get(_DIE_BETWEEN_ENV):
        os.kill(os.getpid(), signal.SIGKILL)


def _runs(keys: pl.DataFrame) -> pl.DataFrame:
    """(source_key, seq) rows as runs of consecutive seqs: source_key, lo, hi."""
    keys = keys.drop_nulls().unique().sort("source_key", "seq")
    run = pl.col("seq") - pl.int_range(pl.len()).over("source_key")
    return (
        keys.group_by("source_key", run.alias("_run"))
        .agg(lo=pl.col("seq").min(), hi=pl.col("seq").max())
        .select(
            pl.col("source_key").cast(pl.String), pl.col("lo").cast(pl.Int64), pl.col("hi").cast(pl.Int64)
        )
    )


def _batches(src: JournalSource, selection: Selection, batch_size: int) -> Iterator[RecordBatch]:
    return coalesce(src.batches(selection, batch_size), batch_size)


def _known(records: pl.DataFrame, stored: pl.DataFrame) -> pl.DataFrame:
    """The records' (source_key, seq) inside a stored run, with line_id -(seq + 1): a stand-in the
    main process replaces by the stored line's id (see _resolved)."""
    empty = pl.DataFrame(schema={"source_key": pl.String(), "seq": pl.Int64(), "line_id": pl.Int64()})
    if not records.height or not stored.height:
        return empty
    keys = records.select("source_key", "seq").drop_nulls().sort("source_key", "seq")
    # Both sides are sorted by (source_key, seq/lo) just above, so each `by` group is sorted: polars
    # cannot check that with `by` and warned so on stderr, once per worker (issue 29, item 10).
    hit = keys.join_asof(
        stored.sort("source_key", "lo"), left_on="seq", right_on="lo", by="source_key", strategy="backward",
        check_sortedness=False,
    ).filter(pl.col("seq") <= pl.col("hi"))  # fmt: skip
    return hit.select("source_key", "seq", line_id=-pl.col("seq") - 1).cast(empty.schema)  # type: ignore[arg-type]
