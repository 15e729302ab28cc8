"""`ingest -D DIR --jobs N`: a journal-remote collection read and parsed by worker processes.

The collections are real `.journal` files: a fixture's Journal Export split by _HOSTNAME into one
`remote-<host>.journal` per host (systemd-journal-remote writes each), one host's also rotated
into two files. What is stored must not depend on N (nor on a kill, of the main process or of a
worker), and the verdict neither.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import polars as pl
import pytest
from conftest import JOURNAL_REMOTE

from pdforensics import store
from pdforensics.api import build_sources, run_verdict
from pdforensics.catalog import load_catalog
from pdforensics.ingest import IngestSummary, ingest
from pdforensics.ingest_jobs import (
    _DIE_AFTER_ENV,
    _DIE_BETWEEN_ENV,
    _KILL_FIRST_ENV,
    collection_plan,
    collection_tasks,
)
from pdforensics.paths import fixtures_dir
from pdforensics.sources import JOURNAL_MARK, Selection, Window

pytestmark = pytest.mark.skipif(not JOURNAL_REMOTE.exists(), reason="systemd-journal-remote is not installed")

SCENARIOS = ["abort_storm_clean", "wedge_after_decode_restart", "multihost_skew"]
SMALL = 64  # records per batch: a fixture's few hundred entries span many transactions
WORKERS = 3  # --jobs 3: two worker processes beside the store (2 is the single-process pipeline)


# ------------------------------------------------------------------ collections


def export_entries(data: bytes) -> Iterator[tuple[bytes, str | None]]:
    """Journal Export entries as bytes (binary fields kept whole), with their _HOSTNAME."""
    i, start, host = 0, 0, None
    while i < len(data):
        if data[i : i + 1] == b"\n":
            yield data[start : i + 1], host
            i, start, host = i + 1, i + 1, None
            continue
        end = data.index(b"\n", i)
        line = data[i:end]
        if b"=" in line:
            if line.startswith(b"_HOSTNAME="):
                host = line[len(b"_HOSTNAME=") :].decode()
            i = end + 1
        else:  # FIELD\n, 64-bit little-endian size, the value, \n
            i = end + 9 + struct.unpack_from("<Q", data, end + 1)[0] + 1
    if start < len(data):
        yield data[start:] + b"\n", host


def write_journal(entries: list[bytes], out: Path) -> None:
    subprocess.run(
        [str(JOURNAL_REMOTE), "-o", str(out), "-"], input=b"".join(entries), check=True, capture_output=True
    )


def make_collection(export: bytes, out: Path, rotate: bool = True) -> dict[str, int]:
    """One remote-<host>.journal per _HOSTNAME; the first host's first half rotated into
    remote-<host>@....journal~ as journald names it. Returns entries per host."""
    by_host: dict[str, list[bytes]] = {}
    for entry, host in export_entries(export):
        by_host.setdefault(host or "unknown", []).append(entry)
    out.mkdir(parents=True, exist_ok=True)
    for n, (name, entries) in enumerate(sorted(by_host.items())):
        host = name.replace("/", "_")  # a file name (journal-remote names files by address or host)
        if rotate and n == 0:
            half = len(entries) // 2
            rotated = (
                out
                / f"remote-{host}@0123456789abcdef0123456789abcdef-0000000000000001-0005f0c1a2b3c4d5.journal"
            )
            write_journal(entries[:half], rotated)
            rotated.rename(rotated.with_name(rotated.name + "~"))
            entries = entries[half:]
        write_journal(entries, out / f"remote-{host}.journal")
    return {h: len(e) for h, e in by_host.items()}


@pytest.fixture(scope="module")
def collections(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("collections")
    out = {}
    for name in SCENARIOS:
        make_collection((fixtures_dir() / name / "journal.export").read_bytes(), root / name)
        out[name] = root / name
    return out


# ------------------------------------------------------------------ what was stored


def run(
    db: Path,
    directory: Path,
    jobs: int,
    selection: Selection | None = None,
    batch_size: int = SMALL,
    progress: Callable[[int], None] | None = None,
) -> IngestSummary:
    sources = build_sources([directory], None, None, None)
    return ingest(
        db, sources, selection or Selection(units=("*",)), load_catalog([]), batch_size=batch_size,
        jobs=jobs, progress=progress,
    )  # fmt: skip


def content(db: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Lines, events and rejects without what depends on the run (line ids, ingest ids): a line's
    continuation link is its head's (source_key, seq), an event's line its (source_key, seq)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        lines = store.query_pl(
            con,
            """SELECT l.* EXCLUDE (line_id, ingest_id, cont_of), h.source_key AS head_key, h.seq AS head_seq
               FROM lines l LEFT JOIN lines h ON h.line_id = l.cont_of""",
        )
        events = store.query_pl(
            con,
            """SELECT e.* EXCLUDE (line_id), l.source_key AS line_key, l.seq AS line_seq
               FROM events e JOIN lines l USING (line_id)""",
        )
        rejects = store.query_pl(con, "SELECT * EXCLUDE (ingest_id) FROM rejects")
    finally:
        con.close()
    return tuple(f.sort(f.columns, nulls_last=True) for f in (lines, events, rejects))  # type: ignore[return-value]


def assert_same(a: Path, b: Path) -> None:
    for got, want, name in zip(content(b), content(a), ("lines", "events", "rejects"), strict=True):
        assert got.height == want.height, f"{name}: {got.height} rows, not {want.height}"
        assert got.equals(want), f"{name} differ"


def verdict_json(db: Path) -> dict:
    doc = run_verdict(db, None, None, None, None, now_us=0).to_json()
    doc.pop("database", None)
    return doc


# ------------------------------------------------------------------ the plan


def test_files_are_grouped_per_host_rotated_ones_included(collections: dict[str, Path]) -> None:
    d = collections["abort_storm_clean"]
    tasks = collection_tasks(sorted(d.iterdir()))
    assert sorted(len(t) for t in tasks) == [1, 2], "one task per host, the rotated file with its host"
    rotated = next(t for t in tasks if len(t) == 2)
    assert {p.name.split("@")[0].removesuffix(".journal") for p in rotated} == {"remote-gb200-a"}
    sources = build_sources([d], None, None, None)
    assert collection_plan(sources, 1) is None, "--jobs 1 reads in this process, one job at a time"
    assert collection_plan(sources, 2) is None, "--jobs 2: the parse thread beside the store, no process"
    assert collection_plan(sources, WORKERS).jobs == 2, "--jobs N: N - 1 workers"  # type: ignore[union-attr]
    assert collection_plan(sources, 8).jobs == 2, "never more workers than hosts"  # type: ignore[union-attr]
    single = d.parent / "single"
    single.mkdir()
    (single / "remote-x.journal").symlink_to(d / "remote-gb200-b.journal")
    assert collection_plan(build_sources([single], None, None, None), 4) is None, "one host: no workers"


def test_files_of_one_seqnum_id_share_a_task_whatever_their_names(
    collections: dict[str, Path], tmp_path: Path
) -> None:
    """A copy of a host's file under another name holds the same entries (same seqnum id): one task
    reads both, so one resume mark covers that id, and each entry is stored once."""
    d = tmp_path / "collection"
    d.mkdir()
    for f in collections["multihost_skew"].iterdir():
        os.symlink(f, d / f.name)
    original = sorted(d.glob("remote-d-node-01.journal"))[0]
    (d / "remote-copy.journal").write_bytes(original.read_bytes())
    tasks = collection_tasks(sorted(d.iterdir()))
    shared = [{p.name for p in t} for t in tasks if any(p.name == "remote-copy.journal" for p in t)]
    assert len(shared) == 1 and "remote-d-node-01.journal" in shared[0], tasks
    assert len(tasks) == 2, "still one task per host"
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    s1, s2 = run(one, d, 1), run(two, d, WORKERS)
    assert s1.duplicates > 0 and (s2.stored, s2.duplicates) == (s1.stored, s1.duplicates)
    assert_same(one, two)


# ------------------------------------------------------------------ N does not change the result


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_one_job_and_worker_processes_store_the_same_lines_events_and_verdict(
    scenario: str, collections: dict[str, Path], tmp_path: Path
) -> None:
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    s1 = run(one, collections[scenario], 1)
    s2 = run(two, collections[scenario], WORKERS)
    assert s1.stored > 0 and s1.rejected == 0
    for key in ("records", "stored", "duplicates", "skipped", "rejected", "unrecognised", "parse_errors"):
        assert getattr(s2, key) == getattr(s1, key), key
    assert_same(one, two)
    assert verdict_json(two) == verdict_json(one)
    expected = (fixtures_dir() / scenario / "expected.json").read_text()
    assert verdict_json(two)["verdict"] in expected, "the fixture's own verdict"


def test_since_and_unit_selection_are_the_same_with_workers(
    collections: dict[str, Path], tmp_path: Path
) -> None:
    d = collections["wedge_after_decode_restart"]
    con = duckdb.connect()
    full = run(tmp_path / "full.duckdb", d, 1)
    lo, hi = (
        duckdb.connect(str(tmp_path / "full.duckdb"), read_only=True)
        .execute("SELECT min(ts_us), max(ts_us) FROM lines")
        .fetchone()
    )  # type: ignore[misc]
    con.close()
    selection = Selection(window=Window(since_us=(lo + hi) // 2), units=("sglang-*-decode*",))
    s1 = run(tmp_path / "one.duckdb", d, 1, selection)
    s2 = run(tmp_path / "two.duckdb", d, WORKERS, selection)
    assert 0 < s1.stored < full.stored and s1.skipped > 0, "the selection must leave some out"
    assert (s2.stored, s2.skipped) == (s1.stored, s1.skipped)
    assert_same(tmp_path / "one.duckdb", tmp_path / "two.duckdb")


def test_reingest_of_an_unchanged_collection_stores_nothing_and_reads_little(
    collections: dict[str, Path], tmp_path: Path
) -> None:
    db = tmp_path / "db.duckdb"
    first = run(db, collections["abort_storm_clean"], WORKERS)
    again = run(db, collections["abort_storm_clean"], WORKERS)
    assert again.stored == 0 and again.rejected == 0
    assert again.records == first.records == again.duplicates, "every entry counted as already stored"
    con = duckdb.connect(str(db), read_only=True)
    marks = con.execute("SELECT count(*) FROM meta WHERE starts_with(key, ?)", [JOURNAL_MARK]).fetchone()
    con.close()
    # Each host's files resume from their own mark: the hosts without several seqnum ids have one.
    assert marks and marks[0] >= 1


# ------------------------------------------------------------------ kills


def test_an_ingest_stopped_half_way_resumes_each_host_where_it_stopped(
    collections: dict[str, Path], tmp_path: Path
) -> None:
    # Not rotated: each host's files then share one seqnum id, so each has a mark (as journal-remote's
    # own rotation keeps the id; the rotated file made above is another run's, another id).
    d = tmp_path / "collection"
    make_collection((fixtures_dir() / "abort_storm_clean" / "journal.export").read_bytes(), d, rotate=False)
    clean = tmp_path / "clean.duckdb"
    run(clean, d, 1)
    db = tmp_path / "stopped.duckdb"
    commits = []

    def stop_at_three(n: int) -> None:
        commits.append(n)
        if len(commits) == 3:  # a batch boundary, not a moment: three batches are committed
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(db, d, WORKERS, progress=stop_at_three)
    con = duckdb.connect(str(db), read_only=True)
    kept = con.execute("SELECT count(*) FROM lines").fetchone()[0]  # type: ignore[index]
    marks = con.execute("SELECT key FROM meta WHERE starts_with(key, ?)", [JOURNAL_MARK]).fetchall()
    hosts = con.execute("SELECT count(DISTINCT source_key) FROM lines").fetchone()[0]  # type: ignore[index]
    status = con.execute("SELECT status FROM ingests").fetchall()
    con.close()
    assert 0 < kept < content(clean)[0].height, "whole batches were kept"
    assert len(marks) == hosts, "each host that stored a batch has its own resume mark"
    assert status == [("interrupted",)]
    resumed = run(db, d, WORKERS)
    assert resumed.stored == content(clean)[0].height - kept, "only what the stopped run had not stored"
    assert_same(clean, db)


def test_a_worker_killed_mid_file_loses_and_duplicates_nothing(
    collections: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = collections["multihost_skew"]
    clean = tmp_path / "clean.duckdb"
    run(clean, d, 1)
    monkeypatch.setenv(_DIE_AFTER_ENV, "2")  # every worker SIGKILLs itself after its 2nd batch
    db = tmp_path / "killed.duckdb"
    summary = run(db, d, WORKERS)
    assert summary.rejected == 0, "each task was read again, from its mark, by a new worker"
    assert_same(clean, db)


@pytest.fixture(scope="module")
def fleet_collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 hosts: 16 tasks, so each of two workers takes several in turn."""
    out = tmp_path_factory.mktemp("fleet") / "fleet_16_hosts"
    make_collection((fixtures_dir() / "fleet_16_hosts" / "journal.export").read_bytes(), out)
    return out


@pytest.mark.parametrize("hook", [_DIE_BETWEEN_ENV, _KILL_FIRST_ENV], ids=["between_tasks", "at_start"])
def test_a_worker_dead_between_tasks_or_before_its_first_is_replaced(
    hook: str, fleet_collection: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, item 3: a worker that dies after finishing a task (the next task's hand-off met a
    dead pipe: exit 1, no line) or before it has read anything (no EOF ever came: the ingest
    hung holding the database lock) is replaced, and every line is stored once."""
    clean = tmp_path / "clean.duckdb"
    run(clean, fleet_collection, 1, batch_size=1024)
    monkeypatch.setenv(hook, "1")
    db = tmp_path / "killed.duckdb"
    got: list[IngestSummary] = []
    # a hang guard, not a time limit: the run takes seconds, a hung one never ends
    worker = threading.Thread(
        target=lambda: got.append(run(db, fleet_collection, WORKERS, batch_size=1024)), daemon=True
    )
    worker.start()
    worker.join(timeout=900)
    assert got, "the ingest did not end"
    assert got[0].rejected == 0, "each task was read whole by a live worker"
    assert_same(clean, db)


def test_main_process_killed_at_a_batch_boundary_then_resumed(
    collections: dict[str, Path], tmp_path: Path
) -> None:
    from test_reliability import cli, kill_at_boundary

    d = collections["wedge_after_decode_restart"]
    clean = tmp_path / "clean.duckdb"
    run(clean, d, 1)
    db = tmp_path / "killed.duckdb"
    args = ["ingest", "--db", str(db), "-D", str(d), "--jobs", str(WORKERS), "--unit", "*", "--quiet"]
    child = kill_at_boundary(args, 1)
    assert child.returncode == -signal.SIGKILL
    resumed = cli(*args)  # through the CLI: what its workers print reaches the user's stderr
    assert resumed.returncode == 0, resumed.stderr
    # issue 29, item 10: each worker's polars warned "Sortedness of columns cannot be checked"
    assert resumed.stderr == "", resumed.stderr
    assert_same(clean, db)


# ------------------------------------------------------------------ bad input


def test_an_unreadable_file_is_a_counted_rejection_the_other_hosts_are_stored(
    collections: dict[str, Path], tmp_path: Path
) -> None:
    d = tmp_path / "collection"
    d.mkdir()
    for f in collections["multihost_skew"].iterdir():
        os.symlink(f, d / f.name)
    (d / "remote-broken.journal").write_bytes(b"LPKSHHRH" + b"\xff" * 300)  # a journal magic, then junk
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    s1, s2 = run(one, d, 1), run(two, d, WORKERS)
    assert s2.stored == s1.stored > 0
    for db in (one, two):
        rejects = content(db)[2]
        assert rejects["position"].str.contains("remote-broken").any(), rejects
    assert content(one)[0].equals(content(two)[0])


def test_one_job_parses_and_stores_in_turn_two_overlap(collections: dict[str, Path], tmp_path: Path) -> None:
    """--jobs 1: no parse thread (each batch parsed, then stored, on one thread); --jobs 2: the
    next batch is parsed on its own thread while this one is stored. Both store the same."""
    seen: dict[int, set[str]] = {1: set(), 2: set()}
    for jobs in (1, 2):

        def threads_at_commit(_n: int, jobs: int = jobs) -> None:  # called as each batch is stored
            seen[jobs].update(t.name.split("_")[0] for t in threading.enumerate())

        run(tmp_path / f"{jobs}.duckdb", collections["multihost_skew"], jobs, progress=threads_at_commit)
    assert "pdforensics-parse" not in seen[1] and "pdforensics-parse" in seen[2], seen
    assert_same(tmp_path / "1.duckdb", tmp_path / "2.duckdb")


def test_cli_jobs_option(collections: dict[str, Path], tmp_path: Path) -> None:
    from test_reliability import cli

    d = collections["multihost_skew"]
    db = tmp_path / "db.duckdb"
    bad = cli("ingest", "--db", str(db), "-D", str(d), "--jobs", "0")
    assert bad.returncode != 0 and "--jobs must be at least 1" in bad.stderr and "Traceback" not in bad.stderr
    ok = cli("ingest", "--db", str(db), "-D", str(d), "--jobs", str(WORKERS), "--unit", "*", "-q")
    assert ok.returncode == 0, ok.stderr
    run(tmp_path / "one.duckdb", d, 1)
    assert_same(tmp_path / "one.duckdb", db)
