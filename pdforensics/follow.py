"""Follow mode for the sources `ingest` reads: the journal (local, a directory, files) and plain logs.

A follower is polled: each `poll()` returns the records that appeared since the last one (a
`RecordBatch`, possibly empty) and `state()` says where it stands, so a restarted watch continues
exactly there (nothing re-read, nothing skipped). The readers' own record builders are reused, so
a followed line is stored exactly as `ingest` would store it (journal entries keep their
`(seqnum id, seqnum)` key: a later `ingest` of the same journal adds nothing twice).

* `JournalFollower`: one python-systemd `_Reader` kept open; sd_journal sees entries appended to
  the files it has open (systemd-journal-remote, journald). A directory is re-listed every few
  polls, and a new file (rotation, a new remote host) reopens the reader at the cursor. A
  directory with no journal file yet (a new journal-remote collection starts empty) is waited on:
  listed every poll until its first file appears.
* `FileFollower`: `tail -F` for a plain text log. Complete lines only (a line still being written
  waits for its newline); when the path names another file (rotation by rename) or the file
  shrank (copytruncate), the rest of the old file is read to its end, then the new one from byte 0.
  The dedup key is `ingest`'s: the content key of the file's first bytes when its first lines
  are read, kept while it grows (sources.plain.grown_key, with the heads the database noted), so a
  file both watched and ingested is stored once; a rotated or rewritten file is a new one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import polars as pl

from pdforensics.errors import SourceError, UsageError
from pdforensics.sources import RecordBatch, Selection, Window
from pdforensics.sources._common import GZIP_MAGIC, HEAD_BYTES, file_key
from pdforensics.sources._journal_child import read_entries
from pdforensics.sources._records import ENTRY_FIELDS, journal_records
from pdforensics.sources.journal import (
    _LOCAL_DIRS,
    _UNTIL_CHECK,
    GROUP_HINT,
    JournalSource,
    _raw_frame,
    journal_files,
    python_systemd_available,
)
from pdforensics.sources.plain import MAX_LINE_BYTES, PlainFileSource, grown_key

# Entries or bytes taken per poll and source: bounds the memory of one poll after a long outage
# (the rest comes with the next polls, which follow at once while there is more).
POLL_ENTRIES = 50_000
POLL_BYTES = 16 << 20
_RELIST_POLLS = 5  # a directory is re-listed for new journal files every this many polls
# Polls a directory's first journal file may fail to open before that is an error: it can be seen
# while journal-remote is still writing its header (sd_journal then says ENODATA).
_FIRST_OPEN_TRIES = 10
# Where journald keeps the local journal (persistent, volatile); a test points it elsewhere.
LOCAL_DIRS = _LOCAL_DIRS


class JournalFollower:
    def __init__(self, kind: str, paths: list[Path], units: tuple[str, ...], since_us: int | None) -> None:
        if not python_systemd_available():
            raise SourceError("watch follows the journal through python-systemd, which is not installed")
        self.kind, self.paths = kind, paths
        self.dir = paths[0] if kind == "directory" else None
        self.selection = Selection(window=Window(since_us=since_us), units=units)
        self.cursor: str | None = None
        self.source: JournalSource | None = None
        self.files: list[Path] = []
        self._open_tries = 0
        if self.dir is not None and _empty_collection(self.dir):
            self.name = f"journal:{self.dir.resolve()}"  # JournalSource's label: the state key's name
        else:
            self._open_source()
            if kind == "local" and not any(journal_files(d) for d in LOCAL_DIRS if d.is_dir()):
                raise SourceError(
                    f"no local journal: no journal file in {' or '.join(map(str, LOCAL_DIRS))}; "
                    "follow a collection with -D DIR, a file with --journal-file or a log with --file"
                )
        self._j: Any = None
        self._polls = 0
        self._watching = False
        self.more = False  # the last poll stopped at its limit: poll again at once
        self._progress = memoryview(bytearray(16)).cast("q")  # read_entries counts entries here

    def _open_source(self) -> None:
        self.source = JournalSource(self.kind, self.paths)  # type: ignore[arg-type]  # its checks, same messages
        self.name = self.source.label
        self.files = list(self.source.files)

    @property
    def waiting(self) -> bool:
        """No journal file to follow yet (the directory is listed every poll)."""
        return self.source is None

    def restore(self, state: dict[str, Any] | None) -> None:
        self.cursor = (state or {}).get("cursor")

    def state(self) -> dict[str, Any]:
        return {"cursor": self.cursor}

    def describe(self) -> str:
        """What is followed and from where, for the watch's first line."""
        if self.kind == "local":
            what = "the local journal"
        elif self.dir is not None:
            what = f"the journal directory {self.dir}"
            if self.waiting:
                what += " (no journal file in it yet: waiting for the first)"
        else:
            what = f"the journal file{'s' * (len(self.paths) > 1)} {', '.join(map(str, self.paths))}"
        since = self.selection.window.since_us
        if self.cursor:
            where = "where the last run stopped"
        elif since is not None:
            where = _iso(since)
        else:
            where = "its start"
        return f"{what}, units {','.join(self.selection.units)}, from {where}"

    def _reopen(self) -> None:
        assert self.source is not None
        if self._j is not None:
            self._j.close()
        self.source.files = self.files
        self._j = _open_reader(self.source)
        self._watching = False
        since = self.selection.window.since_us
        if self.cursor and _seek_after(self._j, self.cursor):
            return
        if self.cursor:  # its file is gone (rotated away, vacuumed): continue after its time
            self._j.seek_realtime(_cursor_time(self.cursor) + 1)
        elif since is not None:
            self._j.seek_realtime(max(since, 0))

    def poll(self) -> RecordBatch:
        self._polls += 1
        if self.source is None and not self._first_file():
            return RecordBatch()
        if self.dir is not None and self._polls % _RELIST_POLLS == 0:
            found = journal_files(self.dir)
            if found != self.files:
                self.files = found
                self._reopen()
        if self._j is None:
            self._reopen()
        if self.kind == "local":
            # journald rotates and adds files: sd_journal notices through its inotify fd, which
            # process() drains (it must exist first: fileno() creates it)
            with contextlib.suppress(OSError):
                if not self._watching:
                    self._j.fileno()
                    self._watching = True
                self._j.process()
        cursors, cols, self.more, error = read_entries(
            self._j, ENTRY_FIELDS, POLL_ENTRIES, None, _UNTIL_CHECK, self._progress
        )
        raw = _raw_frame(cursors, cols)
        if error is not None:
            raise SourceError(f"{self.name}: journal read failed: {error.strerror or error}")
        if not raw.height:
            return RecordBatch()
        self.cursor = raw["__CURSOR"][-1]
        return journal_records(raw, self.selection, source=self.name)

    def _first_file(self) -> bool:
        """While the directory has no journal file: list it; True once one appeared and opened."""
        assert self.dir is not None
        if not journal_files(self.dir):
            return False
        try:
            self._open_source()
            self._reopen()
        except SourceError:
            self._open_tries += 1
            if self._open_tries >= _FIRST_OPEN_TRIES:
                raise
            self.source = None  # still being created: the next poll tries again
            return False
        return True

    def close(self) -> None:
        if self._j is not None:
            self._j.close()
            self._j = None


def _empty_collection(d: Path) -> bool:
    """A readable directory with no journal file yet; anything else gets JournalSource's checks."""
    if not (d.is_dir() and os.access(d, os.R_OK | os.X_OK)):
        return False
    try:
        subdirs = [s for s in d.iterdir() if s.is_dir()]
    except OSError:
        return False
    return all(os.access(s, os.R_OK | os.X_OK) for s in subdirs) and not journal_files(d)


def _iso(t_us: int) -> str:
    from pdforensics.verdict import iso

    return iso(t_us) or ""


def _open_reader(source: JournalSource) -> Any:
    """A python-systemd reader in this process: the watch follows files it has already read, so a
    file that could abort libsystemd was met (and stepped over, in a child) by the first pass."""
    from systemd import journal

    try:
        j = (
            journal._Reader()
            if source.kind == "local"
            else journal._Reader(flags=0, files=[str(p) for p in source.files])
        )
    except PermissionError as e:
        raise SourceError(f"{source.label}: permission denied; {GROUP_HINT}") from e
    except OSError as e:
        raise SourceError(f"{source.label}: cannot open journal: {e.strerror or e}") from e
    j.data_threshold = 0  # never truncate large fields (long Receive: lines)
    return j


def _seek_after(j: Any, cursor: str) -> bool:
    """Position `j` so that its next entry is the one after `cursor`; False if it is not there."""
    try:
        j.seek_cursor(cursor)
        return bool(j._next() and j.test_cursor(cursor))
    except OSError:
        return False


def _cursor_time(cursor: str) -> int:
    part = next((p[2:] for p in cursor.split(";") if p.startswith("t=")), "0")
    return int(part, 16)


class FileFollower:
    def __init__(self, path: Path, host: str | None, unit: str | None) -> None:
        self.path = Path(path)
        self.host, self.unit = host, unit
        self.name = f"file:{self.path.resolve()}"
        self._f: Any = None
        self.ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being read
        self.key = ""  # the file's identity, chosen when its first lines are read (_identify)
        # heads the database noted (key, bytes: store.file_heads_shorter_than), set by the watch;
        # and the one this follower chose for a file shorter than a head, for the watch to note
        self.noted: list[tuple[str, int]] = []
        self.head_note: tuple[str, int] | None = None
        self.offset = 0  # bytes of the current file consumed (complete lines)
        self._src: PlainFileSource | None = None
        self.more = False
        self._check_first()

    def _check_first(self) -> None:
        if not self.path.exists():
            return  # tail -F: wait for it to appear
        PlainFileSource(self.path)  # its checks: a directory, a pipe, permissions, not text
        with open(self.path, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                raise UsageError(f"{self.path} is compressed: watch follows live text logs; ingest .gz files")

    def restore(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        self.ident = tuple(state["ident"])  # type: ignore[assignment]
        self.key, self.offset = state["key"], int(state["offset"])

    @property
    def waiting(self) -> bool:
        """Not opened yet and not there (tail -F: it is followed once it appears)."""
        return self._f is None and not self.path.exists()

    def describe(self) -> str:
        """What is followed and from where, for the watch's first line."""
        if self.waiting:
            return f"{self.path} (not there yet: waiting for it)"
        where = f"byte {self.offset}, where the last run stopped" if self.ident else "its start"
        return f"{self.path}, from {where}"

    def state(self) -> dict[str, Any]:
        return {"ident": list(self.ident) if self.ident else None, "key": self.key, "offset": self.offset}

    def _stat(self) -> os.stat_result | None:
        try:
            return self.path.stat()
        except FileNotFoundError:
            return None

    def _open_current(self, st: os.stat_result) -> None:
        ident = (st.st_dev, st.st_ino)
        if ident != self.ident:  # a new file at the path: from its start, its key chosen when read
            self.ident, self.offset, self.key = ident, 0, ""
        self._f = open(self.path, "rb")  # noqa: SIM115 - kept open while followed
        self._src = PlainFileSource(self.path, host=self.host, unit=self.unit)
        self._src.key = self.key  # "" until the first lines are read

    def poll(self) -> RecordBatch:
        st = self._stat()
        if self._f is None:
            if st is None:
                return RecordBatch()
            self._open_current(st)
        out = [self._read(final=False)]
        st = self._stat()
        own = os.fstat(self._f.fileno())
        rotated = st is not None and (st.st_dev, st.st_ino) != (own.st_dev, own.st_ino)
        truncated = own.st_size < self.offset
        if (rotated or truncated) and not self.more:
            if rotated:
                out.append(self._read(final=True))  # the old file's last (maybe unterminated) line
            self._f.close()
            self._f = None
            if truncated and not rotated:
                self.ident = None  # rewritten in place: a new stream
            if st is not None:
                self._open_current(st)
                out.append(self._read(final=False))
        return _concat([b for b in out if b.records.height or b.rejects.height])

    def _read(self, final: bool) -> RecordBatch:
        assert self._f is not None and self._src is not None
        self._f.seek(self.offset)
        buf = self._f.read(POLL_BYTES)
        self.more = len(buf) == POLL_BYTES
        end = buf.rfind(b"\n") + 1
        if not final and end == 0 and len(buf) > MAX_LINE_BYTES:
            end = len(buf)  # a "line" longer than any SGLang line: taken (and rejected) as it is
        if final:
            end = len(buf)
        if end == 0:
            return RecordBatch()
        if not self.key:
            self._identify()
        batch = self._src._batch(buf[:end], self.offset, [])
        self.offset += end
        return batch

    def _identify(self) -> None:
        """The open file's key, as `ingest` would give it now: its first bytes (read from the open
        file, not the path, which may name a newer one), or the key they had when shorter."""
        assert self._f is not None and self._src is not None
        head = os.pread(self._f.fileno(), HEAD_BYTES, 0)
        key = grown_key(file_key(head), len(head), self.noted, lambda n: file_key(head[:n]))
        self.key = self._src.key = key
        if len(head) < HEAD_BYTES and not any(k == key for k, _ in self.noted):
            self.head_note = (key, len(head))
            self.noted.append(self.head_note)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def _concat(batches: list[RecordBatch]) -> RecordBatch:
    if not batches:
        return RecordBatch()
    if len(batches) == 1:
        return batches[0]
    return RecordBatch(
        records=pl.concat([b.records for b in batches]),
        rejects=pl.concat([b.rejects for b in batches]),
    )


Follower = JournalFollower | FileFollower
