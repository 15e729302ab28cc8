"""The systemd journal: the local one, a directory (e.g. a systemd-journal-remote collection), or files.

Journal files (directory and files sources) are first read directly (`journalfile`: the on-disk
format mapped and gathered with numpy, no Python per entry); a file it cannot vouch for (an
unknown flag, not closed cleanly, a failed bounds check), the local journal, and the rest of a
file it stops on go to python-systemd below, the reason counted in `JournalSource.direct`.

python-systemd reader: the low-level `_Reader`. `_get_all()` gives raw fields, the cursor
gives the dedup key (`s=`, `i=`) and the exact receive time (`t=`, hex µs, equal to
__REALTIME_TIMESTAMP), so each entry costs one `_next`, one `_get_all` and one `_get_cursor`
call. The per-entry loop (`_journal_child.read_entries`) only copies fields into column lists, in
a child process, so that a file libsystemd aborts on costs one entry or that file, never the run
(see _journal_child); decoding, attribution and selection are vectorised in polars (_records).
Files are read one at a time, in seqnum order. The child's blocks are handed on by a background
thread feeding a bounded queue, so reading overlaps with the consumer's work on the previous batch.

Fallback (python-systemd not importable, or `force_journalctl=True`): `journalctl --all --utc
-o export`, one run per file, streamed through the export parser. Both readers yield identical
records.

The window is applied by seeking to its start and stopping at its end (as journalctl does), then
exactly, per record. Unit globs select in polars over all entries read (see _records).
"""

from __future__ import annotations

import contextlib
import grp
import itertools
import os
import shutil
import signal
import struct
import subprocess
import tempfile
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl

from pdforensics.errors import SourceError
from pdforensics.sources import JOURNAL_MARK, RecordBatch, Selection, Window
from pdforensics.sources import _journal_child as child
from pdforensics.sources._common import JOURNAL_MAGIC, escape_expr, in_background, rejects_frame, split_batch
from pdforensics.sources._journal_child import IsolatedReader, Unit
from pdforensics.sources._records import ENTRY_FIELDS, glob_regex, journal_records
from pdforensics.sources.export import ExportParser, export_batches
from pdforensics.sources.journalfile import DirectNotes, direct_events

try:
    from systemd import journal as _sd_journal
except ImportError:  # pragma: no cover - depends on the installation
    _sd_journal = None

Kind = Literal["local", "directory", "files"]

GROUP_HINT = "add the user to the systemd-journal group (or adm), or run as root"
_PRIVILEGED_GROUPS = {"systemd-journal", "adm", "wheel"}
_LOCAL_DIRS = (Path("/var/log/journal"), Path("/run/log/journal"))
_UNTIL_CHECK = 1024  # entries between checks of the window's end (overshoot is filtered exactly)
# Entries per python-systemd read block: a block is held as Python objects (~25 fields an entry)
# until converted, so blocks stay small; ingest coalesces them into store-sized batches.
BLOCK_ENTRIES = 16_384
# Entries read from the start of each selected unit's incarnation before a window (context_heads):
# SGLang's startup (server_args, per-rank loading, the armed line, `fired up`) fits in a few hundred
# lines at TP8; a few thousand leave room for noisy ones.
HEAD_ENTRIES = 3_000
DIRECT_BLOCK = (
    16_384  # entries a block of the direct reader: measured, 32,768 cost ~80 MB more peak RSS, no less CPU
)


def python_systemd_available() -> bool:
    return _sd_journal is not None


# Every stored line carries its source's label: a list of 54 paths made it ~7 KB a line, which
# cost a 10M-entry ingest ~850 MB of peak RSS and ~30 % of its CPU (docs/benchmark.md).
LABEL_FILES = 3  # up to this many files are named in the label; more are counted


def files_label(paths: Sequence[Path]) -> str:
    """`journal:` and the files, or for more than LABEL_FILES of them their number and the
    folder they share: a label short enough to repeat on every line."""
    resolved = [p.resolve() for p in paths]
    if len(resolved) <= LABEL_FILES:
        return "journal:" + ",".join(map(str, resolved))
    return f"journal:{len(resolved)} files in {os.path.commonpath([p.parent for p in resolved])}"


def journal_files(directory: Path) -> list[Path]:
    """Journal files in `directory` and one level of subfolders (machine-id folders, remote/)."""
    found: list[Path] = []
    for pattern in ("*.journal", "*.journal~", "*/*.journal", "*/*.journal~"):
        found.extend(p for p in directory.glob(pattern) if p.is_file())
    return sorted(found)


def privileged() -> bool:
    """Whether this user can see the whole system journal (root or a journal-reading group)."""
    if os.geteuid() == 0:
        return True
    names = set()
    for gid in {os.getegid(), *os.getgroups()}:
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return bool(names & _PRIVILEGED_GROUPS)


def _unreadable(path: Path) -> SourceError:
    return SourceError(f"{path}: permission denied; {GROUP_HINT}")


class JournalSource:
    """The journal via python-systemd (`reader` "python-systemd") or journalctl ("journalctl-export")."""

    def __init__(
        self,
        kind: Kind,
        paths: Sequence[Path] = (),
        *,
        force_journalctl: bool = False,
        journalctl: str = "journalctl",
    ) -> None:
        self.kind = kind
        self.paths = [Path(p) for p in paths]
        self.files: list[Path] = []  # the journal files read (empty for the local journal)
        if kind == "local":
            if self.paths:
                raise ValueError("the local journal takes no paths")
            self.label = "journal"
            self._check_local()
        elif kind == "directory":
            if len(self.paths) != 1:
                raise ValueError("a journal directory source takes exactly one path")
            # Both readers get the files found here: sd_journal's own directory mode only descends
            # into machine-id folders and would silently skip e.g. remote/ of journal-remote.
            self.files = self._check_directory(self.paths[0])
            self.label = f"journal:{self.paths[0].resolve()}"
        elif kind == "files":
            if not self.paths:
                raise ValueError("a journal files source needs at least one file")
            for p in self.paths:
                self._check_file(p)
            self.files = self.paths
            self.label = files_label(self.paths)
        else:
            raise ValueError(f"unknown journal source kind {kind!r}")
        # Set by ingest from a resume mark (see `resume`): the cursor to re-read from, less `context`.
        self.resume_cursor: str | None = None
        self.context = 0
        self.direct = DirectNotes()  # files read by the direct reader (journalfile), and fallbacks
        if force_journalctl or _sd_journal is None:
            found = shutil.which(journalctl)
            if found is None:
                raise SourceError(
                    "cannot read the journal: python-systemd is not installed and journalctl is missing"
                )
            self.journalctl = found
            self.reader = "journalctl-export"
        else:
            self.journalctl = journalctl
            self.reader = "python-systemd"

    def reading_note(self) -> str | None:
        """How the journal files were read, for the ingest summary (DirectNotes.describe)."""
        return self.direct.describe() if self.reader == "python-systemd" else None

    # -- checks: fail early, with a message naming the fix ------------------------------------------

    def _check_local(self) -> None:
        if privileged():
            return
        system = [
            f for d in _LOCAL_DIRS if d.is_dir() for f in journal_files(d) if f.name.startswith("system")
        ]
        if system and not any(os.access(f, os.R_OK) for f in system):
            raise SourceError(f"cannot read the system journal ({system[0].parent}); {GROUP_HINT}")

    @staticmethod
    def _check_directory(d: Path) -> list[Path]:
        try:
            return JournalSource._check_directory_files(d)
        except PermissionError as e:  # a folder on the way (or inside) the user may not enter
            raise _unreadable(Path(e.filename or d)) from e

    @staticmethod
    def _check_directory_files(d: Path) -> list[Path]:
        if not d.exists():
            raise SourceError(f"{d}: no such directory")
        if not d.is_dir():
            raise SourceError(f"{d} is not a directory (use --journal-file for a .journal file)")
        if not os.access(d, os.R_OK | os.X_OK):
            raise _unreadable(d)
        # glob skips folders it cannot enter: journal-remote's remote/ unreadable would vanish silently.
        closed = [s for s in d.iterdir() if s.is_dir() and not os.access(s, os.R_OK | os.X_OK)]
        if closed:
            raise _unreadable(closed[0])
        files = journal_files(d)
        if not files:
            raise SourceError(f"{d}: no journal files (*.journal) in it or its subfolders")
        # A silently skipped file is missing evidence: refuse rather than read part of the journal.
        locked = [f for f in files if not os.access(f, os.R_OK)]
        if locked:
            raise SourceError(
                f"{len(locked)} of {len(files)} journal files unreadable, e.g. {locked[0]}; {GROUP_HINT}"
            )
        return files

    @staticmethod
    def _check_file(f: Path) -> None:
        try:
            if not f.exists():
                raise SourceError(f"{f}: no such file")
            if f.is_dir():
                raise SourceError(f"{f} is a directory (use --directory)")
        except PermissionError as e:  # a folder on the way the user may not enter
            raise _unreadable(f) from e
        if not os.access(f, os.R_OK):
            raise _unreadable(f)
        if not f.is_file():  # a FIFO or a device: sd_journal would wait on it forever
            raise SourceError(f"{f} is not a regular file (a pipe or a device?); pass a .journal file")

    # -- resuming ------------------------------------------------------------------------------------

    def mark_key(self, selection: Selection) -> str | None:
        """The resume mark's key for this selection, or None when a mark would not be sound.

        Sound when python-systemd reads journal files that all share one __SEQNUM_ID: sd_journal then
        returns their entries in seqnum order, so "every selected entry up to seqnum N is stored"
        holds after each batch. Entries of several seqnum ids interleave by time (clocks), and a
        damaged file ends early: those read in full.
        """
        if self.reader != "python-systemd" or not self.files:
            return None
        return self._mark_key(selection, [read_header(f) for f in self.files])

    @staticmethod
    def _mark_key(selection: Selection, headers: list[JournalHeader | None]) -> str | None:
        if any(h is None or h.truncated for h in headers):
            return None
        ids = {h.seqnum_id for h in headers if h is not None}
        if len(ids) != 1:
            return None
        # Files are read one after another in seqnum order: sound only when their ranges are disjoint.
        ranges = sorted((h.head_seqnum, h.tail_seqnum) for h in headers if h is not None and h.n_entries)
        if any(b[0] <= a[1] for a, b in itertools.pairwise(ranges)):
            return None
        w = selection.window
        return f"{JOURNAL_MARK}{ids.pop()}|{','.join(selection.units)}|{w.since_us}|{w.until_us}"

    @staticmethod
    def _file_ids(headers: list[JournalHeader | None]) -> list[str]:
        return sorted({h.file_id.hex() for h in headers if h is not None})

    def resume(self, detail: str | None, context: int) -> None:
        """Re-read from `context` entries before the marked cursor (`detail`: "cursor file_id,...").

        Not when a file holds entries before the mark but was not among the files read then (an
        older rotated file added since): its entries were never stored.
        """
        self.resume_cursor, self.context = None, 0
        if not detail:
            return
        cursor, _, ids = detail.partition(" ")
        marked = set(ids.split(","))
        seqnum = _cursor_seqnum(cursor)
        for h in (read_header(f) for f in self.files):
            if h is None or (h.n_entries and h.head_seqnum <= seqnum and h.file_id.hex() not in marked):
                return
        self.resume_cursor, self.context = cursor, context

    # -- reading -------------------------------------------------------------------------------------

    def batches(self, selection: Selection, batch_size: int = 100_000) -> Iterator[RecordBatch]:
        read = self._python_batches if self.reader == "python-systemd" else self._journalctl_batches

        def produce(stopped: Callable[[], bool]) -> Iterator[RecordBatch]:
            problems: list[tuple[str, str, str, str]] = []
            seen: dict[Path | None, int] = {}  # entries read (records, skipped, rejects) per unit
            with _readable_copies(self.files, self.label, problems) as (files, headers):
                units = self._units(files, headers)
                yield from read(selection, batch_size, stopped, units, problems, seen)
                if not stopped() and self.resume_cursor is None:  # a resumed read sees only the tail
                    problems += _unread_entries(self.label, units, seen, selection)
            if problems:
                yield RecordBatch(rejects=rejects_frame(problems))
            if self.kind == "local" and not sum(seen.values()) and not privileged():
                raise SourceError(f"no journal entries visible to this user; {GROUP_HINT}")

        return in_background(produce)

    def context_heads(self, selection: Selection) -> Iterator[RecordBatch]:
        """Each selected unit's incarnation start before the reading window (`selection`, already
        widened by its context): the first HEAD_ENTRIES entries of the invocation running at its
        start (server_args, the armed line, `fired up`), found through the journal's own per-value
        indexes (unit, then `_SYSTEMD_INVOCATION_ID`), in milliseconds however long ago it started.
        python-systemd only (journalctl would take a process per lookup): the journalctl reader
        reads the window alone."""
        before = selection.window.since_us
        if before is None or not selection.heads or self.reader != "python-systemd":
            return
        heads = Selection(Window(None, before), selection.units)
        problems: list[tuple[str, str, str, str]] = []
        with _readable_copies(self.files, self.label, problems) as (files, _):
            unit = Unit(
                None if self.kind == "local" else [str(f) for f in files],
                units=_unit_regex(selection), heads_before_us=before, head_entries=HEAD_ENTRIES,
            )  # fmt: skip
            for ev in IsolatedReader([unit], ENTRY_FIELDS, None, BLOCK_ENTRIES, _UNTIL_CHECK, lambda: False):
                if ev.kind == child.BLOCK and ev.block is not None and ev.block[0]:
                    yield journal_records(_raw_frame(*ev.block), heads, source=self.label)
                elif ev.kind in (child.ERROR, child.OPEN_FAILED):
                    problems.append((self.label, self.label, f"context before the window: {ev.text}", ""))
        if problems:
            yield RecordBatch(rejects=rejects_frame(problems))

    def _units(self, files: Sequence[Path], headers: list[JournalHeader]) -> list[_ReadUnit]:
        """What each reader reads on its own: every file (in seqnum order), or the local journal.

        One file at a time: a file libsystemd cannot read (or aborts on) costs that file only.
        """
        if self.kind == "local":
            return [_ReadUnit(None, None, None)]
        by_path = {h.path: h for h in headers}
        units = [
            _ReadUnit(copy, orig, by_path.get(orig)) for copy, orig in zip(files, self.files, strict=True)
        ]
        return sorted(units, key=_ReadUnit.order)

    def _python_batches(
        self,
        selection: Selection,
        batch_size: int,
        stopped: Callable[[], bool],
        units: list[_ReadUnit],
        problems: list[tuple[str, str, str, str]],
        seen: dict[Path | None, int],
    ) -> Iterator[RecordBatch]:
        headers = [read_header(f) for f in self.files]  # read once for the mark's key and file ids
        key = self._mark_key(selection, headers) if self.files else None
        file_ids = ",".join(self._file_ids(headers)) if key else ""
        units, requests = self._start_points(units, selection)
        first = self.resume_cursor is not None
        last_seq: dict[int, int] = {}  # per unit: the greatest seqnum read
        block = min(batch_size, BLOCK_ENTRIES)

        def isolated(indices: list[int], start: Unit | None) -> Iterator[child.Event]:
            todo = [requests[k] for k in indices] if start is None else [start]
            for ev in IsolatedReader(
                todo, ENTRY_FIELDS, selection.window.until_us, block, _UNTIL_CHECK, stopped
            ):
                ev.unit = indices[ev.unit]
                yield ev

        # Journal files are read directly (journalfile, ~10x python-systemd); a file it cannot vouch
        # for, and the local journal, by python-systemd in a child as before.
        reader = direct_events(
            requests, selection, min(batch_size, DIRECT_BLOCK), stopped, isolated, self.direct
        )
        opened = 0
        for ev in reader:
            unit = units[ev.unit]
            where = str(unit.path) if unit.path else self.label
            if ev.kind == child.RESUMED:
                first = first and ev.text == "1"
            elif ev.kind == child.OPEN_FAILED:
                code, _, msg = ev.text.partition(" ")
                if code in _NO_PERMISSION:  # the user can act on that: stop with one line
                    raise SourceError(f"{where}: permission denied; {GROUP_HINT}")
                problems.append((self.label, where, f"journal file cannot be opened: {msg}", ""))
            elif ev.kind == child.DONE:
                opened += 1
            elif ev.kind == child.SKIPPED:
                problems.append((self.label, ev.text, f"journal entry unreadable ({ev.reason}); skipped", ""))
                seen[unit.path] = seen.get(unit.path, 0) + 1
            elif ev.kind == child.ERROR:
                problems.append((self.label, where, ev.text, ""))
            elif ev.kind == child.BLOCK and (ev.frame is not None or (ev.block is not None and ev.block[0])):
                raw = ev.frame if ev.frame is not None else _raw_frame(*ev.block)  # type: ignore[misc]
                seen[unit.path] = seen.get(unit.path, 0) + raw.height + ev.skipped
                last, head = raw["__CURSOR"][-1], raw["__CURSOR"][0]
                repeated = rejects_frame([])
                if unit.copy is not None:  # one file: seqnum order (the local journal mixes seqnum ids)
                    raw, repeated, last_seq[ev.unit] = _repeated_seqnums(
                        raw, last_seq.get(ev.unit, 0), self.label
                    )
                batch = journal_records(raw, selection, source=self.label)
                batch.skipped += ev.skipped
                if repeated.height:
                    batch.rejects = pl.concat([repeated, batch.rejects])
                if key:
                    batch.marks = {key: (_cursor_seqnum(last), f"{last} {file_ids}")}
                if first:  # the stored entries before the first one re-read are counted by ingest
                    batch.known_before = (_cursor_field(head, "s"), _cursor_seqnum(head))
                    first = False
                yield from split_batch(batch, batch_size)
        if units and not opened and not stopped() and not any(seen.values()):
            # Nothing could be read at all: one line, as for any input that cannot be read.
            reasons = [p[2] for p in problems if p[1] != "journal files"]
            raise SourceError(
                f"{self.label}: cannot open journal: {reasons[-1] if reasons else 'unreadable'}"
            )

    def _start_points(
        self, units: list[_ReadUnit], selection: Selection
    ) -> tuple[list[_ReadUnit], list[Unit]]:
        """The units to read and where each starts: a resumed read skips the files before its mark."""
        since, only = selection.window.since_us, self._unit_matches(selection)
        if self.resume_cursor is None:
            return units, [Unit(u.files, since, units=only) for u in units]
        seqnum = _cursor_seqnum(self.resume_cursor)
        # A mark is only kept for files read in seqnum order with disjoint ranges (_mark_key): those
        # ending before the mark are stored whole; the first one reaching it seeks to it.
        rest = [u for u in units if u.header is None or u.header.tail_seqnum >= seqnum]
        requests = [Unit(u.files, since, units=only) for u in rest]
        if requests:
            requests[0] = Unit(rest[0].files, since, self.resume_cursor, self.context, units=only)
        return rest, requests

    def _unit_matches(self, selection: Selection) -> str | None:
        """The unit regex python-systemd restricts the local journal to (`_journal_child.match_units`:
        the journal's own per-value entry lists, as `journalctl -u`), or None (every entry is read).
        Only the local journal: journal files go to the direct reader, which indexes just those
        entries itself, and the header counts of damaged ones compare with every entry read. Not for
        globs with a [class]: the child matches with Python's `re`, polars' reads some classes apart."""
        if self.kind != "local":
            return None
        return _unit_regex(selection)

    def journalctl_command(self, selection: Selection, files: Sequence[Path] | None = None) -> list[str]:
        cmd = [self.journalctl, "--all", "--utc", "--no-pager", "-o", "export"]
        for p in self.files if files is None else files:
            cmd += ["--file", str(p)]
        w = selection.window
        # journalctl's --until is inclusive and both bounds are exact to the µs; records are
        # filtered exactly afterwards anyway.
        if w.since_us is not None:
            cmd += ["--since", _at(w.since_us)]
        if w.until_us is not None:
            cmd += ["--until", _at(w.until_us)]
        return cmd

    def _journalctl_batches(
        self,
        selection: Selection,
        batch_size: int,
        stopped: Callable[[], bool],
        units: list[_ReadUnit],
        problems: list[tuple[str, str, str, str]],
        seen: dict[Path | None, int],
    ) -> Iterator[RecordBatch]:
        """One journalctl per file (the whole local journal in one): a file it fails on costs that file."""
        failed: list[str] = []
        for unit in units:
            if stopped():
                return
            files = [] if unit.copy is None else [unit.copy]
            msg = yield from self._journalctl_unit(selection, batch_size, stopped, files, unit, seen)
            if msg is None:
                continue
            if "ermission" in msg:
                raise SourceError(f"journalctl failed: {msg}; {GROUP_HINT}")
            where = str(unit.path) if unit.path else "journalctl"
            if seen.get(unit.path):  # it failed part-way (a damaged entry): keep what it printed
                problems.append((self.label, where, f"journalctl stopped early: {msg}", ""))
            else:
                problems.append((self.label, where, f"journalctl cannot read this file: {msg}", ""))
                failed.append(msg)
        if units and len(failed) == len(units):
            raise SourceError(f"journalctl failed: {failed[-1]}")

    def _journalctl_unit(
        self,
        selection: Selection,
        batch_size: int,
        stopped: Callable[[], bool],
        files: list[Path],
        unit: _ReadUnit,
        seen: dict[Path | None, int],
    ) -> Generator[RecordBatch, None, str | None]:
        """One journalctl run; returns its error message (None: it succeeded or was stopped)."""
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                self.journalctl_command(selection, files), stdout=subprocess.PIPE, stderr=err
            )
            assert proc.stdout is not None
            finished = False
            try:
                parser = ExportParser(proc.stdout, self.label, name="journalctl")
                for batch in export_batches(parser, selection, batch_size, self.label, None, stopped):
                    seen[unit.path] = seen.get(unit.path, 0) + batch.records.height + batch.skipped
                    yield batch
                finished = not stopped()
            finally:
                if proc.poll() is None:
                    proc.kill()
                rc = proc.wait()
                proc.stdout.close()
            if not finished or rc == 0:
                return None
            err.seek(0)
            lines = err.read().decode("utf-8", "replace").strip().splitlines()
            if rc < 0:
                return f"journalctl was killed by {_signal_name(-rc)}" + (f" ({lines[-1]})" if lines else "")
            return lines[-1] if lines else f"exit status {rc}"


_NO_PERMISSION = ("1", "13")  # EPERM, EACCES


def _repeated_seqnums(raw: pl.DataFrame, before: int, label: str) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Entries of one file whose seqnum does not exceed an earlier one's: (the others, their rejects,
    the greatest seqnum so far). One file's entries come in seqnum order; a repeat is damage (a bit
    flipped in a seqnum), not the same entry, and would otherwise pass for a duplicate."""
    seq = pl.col("__CURSOR").str.extract(r"(?:^|;)i=([0-9a-f]+)").str.to_integer(base=16, strict=False)
    marked = raw.with_columns(_seq=seq).with_columns(
        _bad=pl.col("_seq")
        <= pl.max_horizontal(pl.col("_seq").cum_max().shift(1), pl.lit(before)).fill_null(before)
    )
    top = max(before, marked["_seq"].max() or 0)  # type: ignore[type-var]
    bad = marked.filter(pl.col("_bad"))
    if not bad.height:
        return raw, rejects_frame([]), top
    rejects = bad.select(
        source=pl.lit(label),
        position=pl.col("__CURSOR"),
        reason=pl.format("journal entry repeats seqnum {} of an earlier one (damaged file)", pl.col("_seq")),
        sample=escape_expr(pl.col("MESSAGE").fill_null("").str.slice(0, 200)),
    )
    return marked.filter(~pl.col("_bad")).drop("_seq", "_bad"), rejects, top


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


@dataclass(frozen=True)
class _ReadUnit:
    """One reader's input: a journal file (`copy` what is read, `path` the user's), or the local journal."""

    copy: Path | None
    path: Path | None
    header: JournalHeader | None

    @property
    def files(self) -> list[str] | None:
        return None if self.copy is None else [str(self.copy)]

    def order(self) -> tuple[object, ...]:
        """Files of one seqnum id in seqnum order (what a resume mark needs), then by time."""
        h = self.header
        if h is None:
            return (1, "", 0, str(self.path))
        return (0, h.seqnum_id, h.head_seqnum, str(self.path))


# -- damaged journal files: read what is readable, count what is not ---------------------------------

# sd_journal's file header (systemd src/libsystemd/sd-journal/journal-def.h): file_id at 24, seqnum_id
# at 72, header_size and arena_size at 88, n_objects at 144, n_entries at 152, tail/head entry seqnum
# at 160/168, head/tail entry realtime at 184.
_HEADER_BYTES = 208
_MAX_DECLARED = 64 << 30  # a larger declared size is a damaged header, not a journal file


@dataclass(frozen=True)
class JournalHeader:
    path: Path
    file_id: bytes
    size: int  # bytes on disk
    declared: int  # header_size + arena_size: what the file should hold
    n_entries: int
    head_realtime: int
    tail_realtime: int
    seqnum_id: str = ""  # hex, as in a cursor's s=
    head_seqnum: int = 0
    tail_seqnum: int = 0
    n_objects: int = 0

    @property
    def truncated(self) -> bool:
        return self.size < self.declared

    @property
    def count_plausible(self) -> bool:
        """Whether n_entries can be believed: a damaged header's count is not (an entry object
        takes at least 64 bytes, is one of the file's objects, and has its own seqnum)."""
        span = self.tail_seqnum - self.head_seqnum + 1 if self.n_entries else 0
        return (
            self.n_entries <= self.n_objects
            and self.n_entries * 64 <= self.declared
            and (not self.n_entries or 0 < self.head_seqnum <= self.tail_seqnum)
            and self.n_entries <= span
        )


def read_header(path: Path) -> JournalHeader | None:
    """The header of a journal file, or None when it is not a plausible one (sd_journal decides then)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER_BYTES)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    if len(head) < _HEADER_BYTES or not head.startswith(JOURNAL_MAGIC):
        return None
    file_id = head[24:40]
    header_size, arena_size = struct.unpack_from("<QQ", head, 88)
    n_objects, n_entries, tail_seqnum, head_seqnum = struct.unpack_from("<QQQQ", head, 144)
    head_rt, tail_rt = struct.unpack_from("<QQ", head, 184)
    declared = header_size + arena_size
    if not (_HEADER_BYTES <= header_size <= 4096 and declared <= _MAX_DECLARED and header_size <= size):
        return None
    return JournalHeader(
        path, file_id, size, declared, n_entries, head_rt, tail_rt, head[72:88].hex(), head_seqnum,
        tail_seqnum, n_objects,
    )  # fmt: skip


@contextlib.contextmanager
def _readable_copies(
    files: Sequence[Path], label: str, problems: list[tuple[str, str, str, str]]
) -> Iterator[tuple[list[Path], list[JournalHeader]]]:
    """The files to hand to sd_journal/journalctl, and their headers.

    A truncated file (shorter than its header says: a copy cut short, a full disk) is refused by
    sd_journal as a whole. A sparse copy padded with zeros to the declared size opens, and
    sd_journal then reads every entry before the cut and skips the rest; the cut is reported.
    """
    headers = [h for h in (read_header(f) for f in files) if h is not None]
    cut = [h for h in headers if h.truncated]
    if not cut:
        yield list(files), headers
        return
    with tempfile.TemporaryDirectory(prefix="pdforensics-journal-") as tmp:
        swap: dict[Path, Path] = {}
        for i, h in enumerate(cut):
            copy = Path(tmp) / f"{i}-{h.path.name}"
            try:
                shutil.copyfile(h.path, copy)
                with open(copy, "r+b") as f:
                    f.truncate(h.declared)  # sparse: the padding costs no disk
            except OSError:
                continue  # no room for the copy: sd_journal refuses the original, as before
            swap[h.path] = copy
            problems.append(
                (label, str(h.path), f"journal file truncated: {h.size:,} of {h.declared:,} bytes", "")
            )
        yield [swap.get(f, f) for f in files], headers


def _unread_entries(
    label: str, units: Sequence[_ReadUnit], seen: dict[Path | None, int], selection: Selection
) -> list[tuple[str, str, str, str]]:
    """A reject per damaged file whose header counts more entries than were read from it.

    Only comparable when the window covers the file whole (otherwise entries outside it are never
    visited) and when the header's count is plausible (a damaged header's is not believed).
    """
    w = selection.window
    out = []
    for u in units:
        h = u.header
        if h is None or not h.n_entries or not h.count_plausible:
            continue
        if (w.since_us is not None and w.since_us > h.head_realtime) or (
            w.until_us is not None and w.until_us <= h.tail_realtime
        ):
            continue
        got = seen.get(u.path, 0)
        if got < h.n_entries:
            reason = (
                f"{h.n_entries - got:,} of {h.n_entries:,} journal entries unreadable (damaged file; "
                "`journalctl --verify --file FILE` shows where)"
            )
            out.append((label, str(u.path), reason, ""))
    return out


def _cursor_field(cursor: str, name: str) -> str:
    return next((part[2:] for part in cursor.split(";") if part.startswith(name + "=")), "")


def _cursor_seqnum(cursor: str) -> int:
    return int(_cursor_field(cursor, "i") or "0", 16)


def _at(us: int) -> str:
    """A journalctl time argument for µs since the epoch (the journal holds nothing before 1970)."""
    us = max(us, 0)
    return f"@{us // 1_000_000}.{us % 1_000_000:06d}"


def _unit_regex(selection: Selection) -> str | None:
    """The unit globs as a regex for Python's `re` in the child, or None (every unit): not for globs
    with a [class], which polars' regex reads apart from Python's."""
    return None if any("[" in g for g in selection.units) else glob_regex(selection.units)


def _raw_frame(cursors: list[str], cols: list[list[Any]]) -> pl.DataFrame:
    """A block read by the child (`_journal_child.read_entries`) as a raw frame of text columns."""
    return pl.DataFrame(
        {"__CURSOR": pl.Series(cursors, dtype=pl.String)}
        | {name: _text_column(col, name == "MESSAGE") for name, col in zip(ENTRY_FIELDS, cols, strict=True)}
    )


def _text_column(values: list[Any], join: bool) -> pl.Series:
    """bytes / None / list-of-bytes (a repeated field) -> String, invalid UTF-8 replaced."""
    try:
        col = pl.Series(values, dtype=pl.Binary)
    except (TypeError, pl.exceptions.PolarsError):
        values = [(b"\n".join(v) if join else v[-1]) if isinstance(v, list) else v for v in values]
        col = pl.Series(values, dtype=pl.Binary)
    try:
        return col.cast(pl.String)
    except pl.exceptions.PolarsError:
        return pl.Series(
            [None if v is None else v.decode("utf-8", "replace") for v in values], dtype=pl.String
        )
