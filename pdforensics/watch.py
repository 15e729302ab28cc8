"""`pdforensics watch`: follow the logs, store them, and alert the moment a rule becomes true.

Each poll: read what the followers (follow.py) have new, parse it (parse.py, the ingest's
parser), fold its events into the open requests (livefold.py), raise the alerts that became
true, then write the batch into the database.

**The database lock.** DuckDB lets one process hold a file for writing and refuses every other
connection meanwhile. The watch therefore never keeps the file open: each poll's lines go in one
short write transaction (open, insert + fold + state, commit, close: tens of milliseconds), and
`verdict`, `report`, `sql` retry their read-only open for a few seconds (store.READ_LOCK_WAIT_S)
instead of failing at once. While a reader holds the file (a report of a big database takes
seconds) the watch keeps following, alerting and serving metrics from memory, keeps the parsed
lines, and writes them all with the next poll that gets the lock (`pdforensics_pending_lines`).
Measured and chosen over a snapshot copy for readers: a copy costs a full file write per
refresh (hundreds of MB for a day of logs), a write transaction costs only the new lines.

**Restart.** The followers' positions and the fold's state are stored in the same transaction
as the lines they cover (a `meta` row, `watch_state:<sources>`), so a killed watch restarts from
its last commit: lines after it are read again, lines before it are not. Alerts are delivered
once: each raised alert is kept in the state, and each delivered one appended (and fsynced) to
the alert log (`--alert-log`, default `<db>.alerts.jsonl`) before the next is sent; at start
the raised-but-undelivered ones are sent, and re-raised ones already in the log are not.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import duckdb
import polars as pl

from pdforensics import store
from pdforensics.catalog import Catalog
from pdforensics.errors import DatabaseError, SourceError, UsageError, is_database_fault
from pdforensics.follow import FileFollower, Follower, JournalFollower
from pdforensics.livefold import LiveFold, alert_json
from pdforensics.livemetrics import MetricWatch
from pdforensics.parse import ParseOptions, StreamCarry, parse_records
from pdforensics.render import terminal_safe
from pdforensics.schema import RECORD_SCHEMA, empty_rejects
from pdforensics.sources._common import HEAD_BYTES

STATE_PREFIX = "watch_state:"
EXEC_TIMEOUT_S = 30.0
# Buffered lines beyond which following pauses until the database can be written again.
MAX_PENDING_LINES = 500_000
# LiveFold.timeout_source, as the start line says it
TIMEOUT_FROM = {
    "operator (--watchdog-timeout)": "--watchdog-timeout",
    "armed line": "the logs' `inflight watchdog armed` line",
    "firing lines": "a watchdog firing's `stalled >Ns`",
    "default": "the default until an armed or a firing line gives the deployment's",
}


@dataclass
class WatchConfig:
    db: Path
    followers: list[Follower]
    catalog: Catalog
    tz: str | None = None
    watchdog_timeout_s: float | None = None
    grace_s: float = 10.0
    poll_s: float = 1.0
    commit_s: float = 2.0  # at most one write transaction this often (alerts never wait for it)
    wall_clock: bool = False  # "now" is also the wall clock (the live local journal)
    json_out: bool = False
    exec_cmd: str | None = None
    listen: str | None = None
    textfile: Path | None = None
    status_file: Path | None = None
    alert_log: Path | None = None
    once: bool = False
    prometheus: str | None = None  # livemetrics.py: the gauges polled live
    match: list[str] | None = None
    prometheus_poll_s: float = 5.0
    since_us: int | None = None  # where a first --prometheus poll reads from
    out: TextIO = field(default_factory=lambda: sys.stdout)
    clock: Callable[[], int] = field(default_factory=lambda: lambda: time.time_ns() // 1000)


class Watcher:
    def __init__(self, cfg: WatchConfig) -> None:
        self.cfg = cfg
        self.fold = LiveFold(cfg.watchdog_timeout_s, cfg.grace_s)
        self.opts = ParseOptions(catalog=cfg.catalog, tz=cfg.tz)
        self.carry = StreamCarry()
        names = sorted(f.name for f in cfg.followers)
        self.state_key = STATE_PREFIX + hashlib.sha1("\n".join(names).encode()).hexdigest()[:12]
        self.alert_log = cfg.alert_log or cfg.db.with_name(cfg.db.name + ".alerts.jsonl")
        self.delivered: set[str] = set()
        self.pending: list[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, int]]] = []
        self.pending_lines = 0
        self.next_id = 1
        self.commit_seq = 0
        self.ingest_id = 0
        self.db_busy = 0
        self.unlogged: list[dict[str, Any]] = []  # delivered alerts the alert log does not hold yet
        self.troubles: set[str] = set()  # what cannot be written now (said once each)
        self.polls = 0
        self.samples_stored = 0
        self.flushed_lines = 0
        self.last_flush_ms = 0.0  # the last write transaction, open to close
        self.last_commit = 0.0
        self.stop = False
        self.metrics: Any = None
        self.listening: tuple[str, int] | None = None
        self.awaited: list[Follower] = []  # followed paths not there yet: said when they appear
        self.timeout_said: tuple[float, str] | None = None
        self.prom: MetricWatch | None = None
        if cfg.prometheus is not None:
            self.prom = MetricWatch(cfg.prometheus, cfg.match, cfg.prometheus_poll_s, cfg.since_us)

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        con = store.open_db(self.cfg.db, wait_s=30.0)
        try:
            self.ingest_id = store.begin_ingest(
                con, "watch: " + "; ".join(f.name for f in self.cfg.followers), "watch", "", None, None
            )
            self.next_id = store.next_line_id(con)
            mark = store.get_mark(con, self.state_key)
            noted = store.file_heads_shorter_than(con, HEAD_BYTES + 1)  # plain files' identities
            for f in self.cfg.followers:
                if isinstance(f, FileFollower):
                    f.noted = list(noted)
            from pdforensics.verdict import ensure_views

            ensure_views(con)
        finally:
            con.close()
        if mark is not None:
            self.commit_seq, state = mark[0], json.loads(mark[1])
            self.fold.load_state(state["fold"])
            if self.prom is not None:
                self.prom.load_state(state.get("prometheus"))
            for f in self.cfg.followers:
                f.restore(state["followers"].get(f.name))
        self._load_delivered()
        if self.cfg.listen or self.cfg.textfile:
            from pdforensics.metrics import WatchMetrics

            self.metrics = WatchMetrics()
            if self.cfg.listen:
                self.listening = self.metrics.serve(self.cfg.listen)
        self.awaited = [f for f in self.cfg.followers if f.waiting]
        self.timeout_said = (self.fold.timeout_s, self.fold.timeout_source)
        _warn(self.start_line())
        # raised before a kill, not delivered yet
        for a in list(self.fold.raised.values()):
            if a["id"] not in self.delivered:
                self._deliver(a)

    def start_line(self) -> str:
        """What is followed and from where, the timeout and its source, the clock, the metrics."""
        follows = "; ".join(f.describe() for f in self.cfg.followers)
        timeout = f"timeout {self.fold.timeout_s:g} s ({TIMEOUT_FROM[self.fold.timeout_source]})"
        clock = (
            "wall (deadlines also pass while the logs are quiet)"
            if self.cfg.wall_clock
            else "log (the newest line's time)"
        )
        metrics = []
        if self.listening:
            host, port = self.listening
            metrics.append(f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics")
        if self.cfg.textfile:
            metrics.append(f"textfile {self.cfg.textfile}")
        prometheus = f"; gauges: {self.prom.describe()}" if self.prom is not None else ""
        return (f"following {follows}{prometheus}; into {self.cfg.db}; {timeout}, grace {self.fold.grace_s:g} s; "
                f"clock: {clock}; metrics: {', '.join(metrics) or 'none (--listen, --textfile)'}")  # fmt: skip

    def _say_changes(self) -> None:
        """A followed path that appeared, a timeout the logs changed: one line each."""
        for f in [f for f in self.awaited if not f.waiting]:
            self.awaited.remove(f)
            if isinstance(f, JournalFollower):
                _warn(
                    f"{f.dir}: its first journal file appeared ({', '.join(p.name for p in f.files)}): following it"
                )
            else:
                _warn(f"{f.path} appeared: following it")
        now = (self.fold.timeout_s, self.fold.timeout_source)
        if now != self.timeout_said:
            self.timeout_said = now
            _warn(f"timeout now {now[0]:g} s ({TIMEOUT_FROM[now[1]]})")

    def _load_delivered(self) -> None:
        if not self.alert_log.exists():
            return
        for line in self.alert_log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                self.delivered.add(json.loads(line)["id"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a kill mid-write: its alert is sent again

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        self.start()
        with contextlib.suppress(ValueError):  # not the main thread (a library caller): no handler
            signal.signal(signal.SIGTERM, self._on_term)
        try:
            while not self.stop:
                more = self.poll()
                if self.cfg.once and not more:
                    break
                if not more:
                    self._sleep(self.cfg.poll_s)
        finally:
            self.flush(wait_s=30.0, force=True)
            self._finish()
            for f in self.cfg.followers:
                f.close()

    def _on_term(self, *_: object) -> None:
        self.stop = True

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stop and time.monotonic() < end:
            time.sleep(min(0.05, end - time.monotonic()) if end > time.monotonic() else 0)

    def poll(self) -> bool:
        """One pass over the followers; True when some of them have more to read at once."""
        self.polls += 1
        more = False
        if self.pending_lines < MAX_PENDING_LINES:
            batches = [f.poll() for f in self.cfg.followers]
            more = any(f.more for f in self.cfg.followers)
            self._fold(batches)
            self._say_changes()
        now = self.fold.newest_us or 0
        if self.cfg.wall_clock:
            now = max(now, self.cfg.clock())
        if self.prom is not None and self.prom.due():
            self._poll_prometheus(max(now, self.cfg.clock()))
        if now:
            for a in self.fold.tick(now):
                self._deliver(alert_json(a))
        self.flush()
        self._report(now)
        return more

    def _fold(self, batches: list[Any]) -> None:
        records = [b.records for b in batches if b.records.height]
        rejects = [b.rejects for b in batches if b.rejects.height]
        skipped = sum(b.skipped for b in batches)
        if not records and not rejects and not skipped:
            return
        rec = pl.concat(records) if records else None
        rej = pl.concat(rejects) if rejects else empty_rejects()
        if rec is not None:
            parsed = parse_records(rec, self.opts, line_id_base=self.next_id, carry=self.carry)
            self.next_id += rec.height
            lines, events = parsed.lines, parsed.events
            for a in self.fold.apply(lines, events):
                self._deliver(alert_json(a))
            newest = lines["ts_us"].max()
            if newest is not None:
                self.fold.advance(int(newest))  # type: ignore[arg-type]
        else:
            lines = events = None
        counts = {
            "records": rec.height if rec is not None else 0,
            "stored": lines.height if lines is not None else 0,
            "skipped": skipped,
            "rejected": rej.height,
            "unrecognised": lines["event"].null_count() if lines is not None else 0,
            "parse_errors": (lines.height - lines["parse_error"].null_count()) if lines is not None else 0,
        }
        if lines is not None and events is not None:
            self.pending.append((lines, events, rej, counts))
            self.pending_lines += lines.height
        else:
            self.pending.append((pl.DataFrame(), pl.DataFrame(), rej, counts))

    def _poll_prometheus(self, now_us: int) -> None:
        """The server's new samples, the metric_pin rule, scrape gaps; an unreachable server is
        said once and retried at each --prometheus-poll while the logs are followed."""
        assert self.prom is not None
        try:
            self.prom.poll(self.cfg.clock(), self.fold)
        except (SourceError, UsageError) as exc:
            self._trouble("prometheus", f"{exc}; following the logs without it, retried every "
                          f"{self.prom.poll_s:g} s")  # fmt: skip
            return
        self._recovered("prometheus", f"{self.prom.server.url} answers again")
        for key, gap in self.prom.gaps().items():
            what = "scrape " + key
            if gap is not None:
                self._trouble(what, f"prometheus {gap}: no evidence from its gauges meanwhile")
            else:
                self._recovered(what, f"prometheus {key.replace(chr(9), ' (job ')}): scraped again")
        self.prom.check(self.fold, now_us)
        for a in self.fold.take_new():
            self._deliver(alert_json(a))

    # ------------------------------------------------------------------ alerts

    def _deliver(self, alert: dict[str, Any]) -> None:
        if alert["id"] in self.delivered:
            return
        out = self.cfg.out
        out.write((json.dumps(alert) if self.cfg.json_out else terminal_safe(human(alert))) + "\n")
        out.flush()
        if self.cfg.exec_cmd:
            self._exec(alert)
        self.delivered.add(alert["id"])
        self.unlogged.append(alert)
        self._log_alerts()

    def _log_alerts(self) -> None:
        """Append the delivered alerts to the alert log; when it cannot be written (a full or
        read-only filesystem) they are kept and written at a later poll, and watching goes on."""
        if not self.unlogged:
            return
        try:
            with open(self.alert_log, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(a) + "\n" for a in self.unlogged))
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            self._trouble("alert log", f"cannot write the alert log {self.alert_log}: {exc.strerror or exc}; "
                          f"{len(self.unlogged)} alert(s) delivered and kept, written when it can be")  # fmt: skip
            return
        self.unlogged.clear()
        self._recovered("alert log")

    def _trouble(self, what: str, text: str) -> None:
        """Say once that `what` cannot be written, until it can again."""
        if what not in self.troubles:
            self.troubles.add(what)
            _warn(text)

    def _recovered(self, what: str, text: str | None = None) -> None:
        if what in self.troubles:
            self.troubles.discard(what)
            _warn(text or f"the {what} is written again")

    def _exec(self, alert: dict[str, Any]) -> None:
        try:
            proc = subprocess.run(
                shlex.split(self.cfg.exec_cmd or ""), input=json.dumps(alert).encode(), timeout=EXEC_TIMEOUT_S,
                capture_output=True, check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
                _warn(f"--exec exited {proc.returncode} for alert {alert['id']}: {tail[0]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            _warn(f"--exec failed for alert {alert['id']}: {exc}")

    # ------------------------------------------------------------------ the database

    def _connect(self, wait_s: float) -> duckdb.DuckDBPyConnection:
        """A write connection; the schema was checked at start, so not again (a third of the cost)."""
        end = time.monotonic() + wait_s
        while True:
            try:
                con = duckdb.connect(str(self.cfg.db))
                store.plan_views_fast(con)
                return con
            except duckdb.Error as exc:
                if not store._is_lock_error(exc):
                    raise store._friendly(exc, self.cfg.db) from None
                if time.monotonic() >= end:
                    raise store._friendly(exc, self.cfg.db) from None
                time.sleep(0.05)

    def flush(self, wait_s: float = 0.0, force: bool = False) -> bool:
        """Write what is pending and the state in one transaction; False if the database is busy."""
        # Alerts raised by time passing alone need no write: delivered ones are in the alert log,
        # and a restarted fold raises the others again from the lines.
        if not self.pending and not (self.prom is not None and self.prom.pending):
            return True
        if not force and time.monotonic() - self.last_commit < self.cfg.commit_s:
            return True
        started = time.perf_counter()
        try:
            con = self._connect(wait_s)
        except DatabaseError as exc:
            if "in use" not in str(exc):
                raise
            self.db_busy += 1
            return False
        self.last_commit = time.monotonic()
        try:
            self._write(con)
        except duckdb.Error as exc:
            # a full disk, an I/O error: what was read stays pending and is written at a later
            # commit, as when another process holds the database
            if not is_database_fault(exc):
                raise
            self._trouble("database", f"cannot write {self.cfg.db}: {str(exc).splitlines()[0]}; "
                          f"{self.pending_lines} line(s) kept, written at a later commit")  # fmt: skip
            self.db_busy += 1
            return False
        finally:
            con.close()
        self._recovered("database")
        self.last_flush_ms = (time.perf_counter() - started) * 1000
        return True

    def _write(self, con: duckdb.DuckDBPyConnection) -> None:
        lines = [p[0] for p in self.pending if p[0].height]
        events = [p[1] for p in self.pending if p[1].height]
        counts: dict[str, int] = {"records": 0}  # never an empty SET (samples alone)
        for p in self.pending:
            for k, v in p[3].items():
                counts[k] = counts.get(k, 0) + v
        if not lines:  # rejects or skipped records only: an empty parse gives the frames' columns
            empty = parse_records(pl.DataFrame(schema=RECORD_SCHEMA), self.opts)
            lines, events = [empty.lines], [empty.events]
        all_lines = pl.concat(lines)
        all_events = (
            pl.concat(events, how="diagonal_relaxed")
            if events
            else parse_records(pl.DataFrame(schema=RECORD_SCHEMA), self.opts).events
        )
        shift = store.next_line_id(con) - (all_lines["line_id"].min() or store.next_line_id(con))
        if shift > 0:  # another writer (an ingest) stored lines meanwhile: renumber after them
            all_lines = all_lines.with_columns(pl.col("line_id") + shift, pl.col("cont_of") + shift)
            all_events = all_events.with_columns(pl.col("line_id") + shift)
            self.next_id += shift
        known = store.known_lines(con, all_lines.select("source_key", "seq"))
        if known.height:  # stored already by someone else (an ingest of the same journal)
            all_lines = all_lines.join(
                known.select("source_key", "seq"), on=["source_key", "seq"], how="anti"
            )
            all_events = all_events.join(all_lines.select("line_id"), on="line_id", how="semi")
            counts["stored"] -= known.height
            counts["duplicates"] = counts.get("duplicates", 0) + known.height
        rejects = pl.concat([p[2] for p in self.pending]) if self.pending else empty_rejects()
        self.commit_seq += 1
        state: dict[str, Any] = {
            "fold": self.fold.to_state(),
            "followers": {f.name: f.state() for f in self.cfg.followers},
        }
        prom = self.prom
        if prom is not None:
            state["prometheus"] = prom.to_state()
        marks = {self.state_key: (self.commit_seq, json.dumps(state, separators=(",", ":")))}
        con.execute("UPDATE ingests SET status = 'running' WHERE ingest_id = ?", [self.ingest_id])
        for (
            f
        ) in self.cfg.followers:  # a short file's identity, for an ingest of it grown (ingest._grown_from)
            if isinstance(f, FileFollower) and f.head_note is not None:
                store.note_file_head(con, *f.head_note)
                f.head_note = None
        store.store_batch(
            con, self.ingest_id, all_lines, all_events, rejects, counts, marks,
            also=(lambda c: self._store_samples(c)) if prom is not None and prom.pending else None,
        )  # fmt: skip
        if prom is not None:
            prom.stored()
        self.flushed_lines += all_lines.height
        self.pending, self.pending_lines = [], 0

    def _store_samples(self, con: duckdb.DuckDBPyConnection) -> None:
        assert self.prom is not None
        self.samples_stored += self.prom.store(con, self.fold, self.ingest_id)

    def _finish(self) -> None:
        try:
            con = store.open_db(self.cfg.db, wait_s=30.0)
        except DatabaseError:
            return
        try:
            store.finish_ingest(con, self.ingest_id, "complete", "watch")
        finally:
            con.close()

    # ------------------------------------------------------------------ status

    def _report(self, now_us: int) -> None:
        self._log_alerts()
        try:
            self._write_status(now_us)
        except OSError as exc:
            self._trouble(
                "status file",
                f"cannot write the status or metrics file: {exc.strerror or exc}; retried each poll",
            )
        else:
            self._recovered("status file")

    def _write_status(self, now_us: int) -> None:
        if self.metrics is not None:
            self.metrics.update(self.fold, now_us, self.pending_lines, self.db_busy)
            if self.cfg.textfile:
                self.metrics.write_textfile(self.cfg.textfile)
        if self.cfg.status_file:
            status = {
                "polls": self.polls, "lines": self.fold.lines_total, "flushed_lines": self.flushed_lines,
                "pending_lines": self.pending_lines, "newest_us": self.fold.log_us, "now_us": now_us,
                "open_requests": len(self.fold.rooms), "alerts": len(self.delivered),
                "db_busy": self.db_busy, "last_flush_ms": round(self.last_flush_ms, 1), "listen": f"{self.listening[0]}:{self.listening[1]}" if self.listening else None,
                "verdict": self.fold.live_verdict(now_us),
            }  # fmt: skip
            if self.prom is not None:
                status["prometheus"] = {
                    "samples": self.prom.samples_total, "stored": self.samples_stored,
                    "queried_to_us": self.prom.queried_to_us, "inflight": self.prom.floors(self.fold),
                    "unreachable": "prometheus" in self.troubles,
                }  # fmt: skip
            tmp = self.cfg.status_file.with_name(self.cfg.status_file.name + ".tmp")
            tmp.write_text(json.dumps(status))
            os.replace(tmp, self.cfg.status_file)


def _warn(text: str) -> None:
    sys.stderr.write(f"pdforensics watch: {text}\n")
    sys.stderr.flush()


def human(a: dict[str, Any]) -> str:
    """One line per alert for a terminal or a log."""
    kind = a["alert"]
    where = f"host={a.get('host') or '?'}"
    if kind == "silent_pin":
        decode = f" decode_rid={a['decode_rid']}" if a.get("decode_rid") else ""  # none seen: not "None"
        what = (f"room={a['bootstrap_room']} rid={a['rid']}{decode} dwell={a['dwell_s']:.1f}s "
                f"> timeout {a['timeout_s']:g}s + grace {a['grace_s']:g}s, no watchdog line "
                f"(evidence {a['evidence_level']}{', a hole may hide its end' if a['possibly_hidden'] else ''})")  # fmt: skip
    elif kind == "watchdog_fired":
        what = (f"room={a['bootstrap_room']} rid={a['rid']} state={a['state']} dwell={a['dwell_s']}s "
                f"ranks={a['ranks']}")  # fmt: skip
    elif kind == "anonymous_pin":
        what = (f"inflight floor {a['floor']} for more than {a['timeout_s']:g}s, {a['anonymous']} not named by "
                f"any request line (evidence {a['evidence_level']})")  # fmt: skip
    elif kind == "metric_pin":
        interval = a.get("scrape_interval_s")
        what = (f"inflight gauge >= {a['floor']} since {a['since']} for more than {a['timeout_s']:g}s + grace "
                f"{a['grace_s']:g}s, {a['named_requests']} open request(s) in the logs "
                f"({', '.join(a['instances'])}, scraped every {f'{interval:g}s' if interval else '?'}; "
                "the gauge may repeat the last batch line's value)")  # fmt: skip
    elif kind in ("engine_down", "engine_silent"):
        state = "down" if kind == "engine_down" else "silent"
        what = f"{a['engine']} {state} for {a['for_s']:.0f}s while {a['open_requests']} request(s) are open"
    else:
        what = a.get("detail", "")
    return f"{a['at']} ALERT {kind} {where} {what} (seen {a['detected']})"


def once_exit_code(
    db: Path, since_us: int | None, timeout_s: float | None, grace_s: float | None
) -> tuple[str, int]:
    """`--once`: the verdict over the window the pass stored, with `verdict --check`'s exit code."""
    from pdforensics.api import verdict_options
    from pdforensics.verdict import compute_verdict

    con = store.open_db(db, read_only=True)
    try:
        v = compute_verdict(con, verdict_options(since_us, None, timeout_s, grace_s))
    finally:
        con.close()
    codes = {"nothing_stuck": 0, "watchdog_fired": 1, "watchdog_missed": 2, "inconclusive": 3}
    return v.verdict, codes.get(v.verdict, 3)


def build_followers(
    directories: list[Path] | None, journal_files: list[Path] | None, files: list[Path] | None,
    units: tuple[str, ...], since_us: int | None, host: str | None,
) -> list[Follower]:  # fmt: skip
    """The same sources as `ingest`: directories, journal files, plain files, else the local journal."""
    out: list[Follower] = []
    for d in directories or []:
        out.append(JournalFollower("directory", [Path(d)], units, since_us))
    if journal_files:
        out.append(JournalFollower("files", [Path(f) for f in journal_files], units, since_us))
    for f in files or []:
        out.append(FileFollower(Path(f), host, None))
    return out or [JournalFollower("local", [], units, since_us)]
