"""The ingest's progress bar on stderr: records stored, bytes read, a total and an ETA.

Records come from the ingest's callback (once per committed batch). Bytes come from the kernel:
a thread samples the read position of the input files' open descriptors (/proc/self/fdinfo)
several times a second, so the bar moves while the reader reads and the parser parses, not only
when a batch is committed; it costs a few system calls per refresh and nothing in the ingest.
Journals are memory-mapped (no read position): their bar counts entries against the headers' total.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

REFRESH_S = 0.25


class InputPositions:
    """How far the process has read into each of `files` (plain logs, exports; .gz: compressed)."""

    def __init__(self, files: list[Path]) -> None:
        self.sizes: dict[str, int] = {}
        for f in files:
            try:
                self.sizes[str(Path(f).resolve())] = Path(f).stat().st_size
            except OSError:
                continue
        self.total = sum(self.sizes.values())
        self._seen: dict[str, int] = {}  # path -> furthest position seen while it was open
        self._done: set[str] = set()

    def read_bytes(self) -> int:
        """Bytes read so far: a file seen open and now closed counts whole."""
        open_now: dict[str, int] = {}
        try:
            fds = os.listdir("/proc/self/fd")
        except OSError:
            return 0
        for fd in fds:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target not in self.sizes:
                    continue
                with open(f"/proc/self/fdinfo/{fd}") as info:
                    pos = int(info.readline().split()[1])  # "pos:\t<offset>"
            except (OSError, ValueError, IndexError):
                continue
            open_now[target] = max(open_now.get(target, 0), pos)
        for path in list(self._seen):
            if path not in open_now:
                self._done.add(path)
        for path, pos in open_now.items():
            self._seen[path] = max(self._seen.get(path, 0), pos)
            self._done.discard(path)
        return sum(self.sizes[p] if p in self._done else min(n, self.sizes[p]) for p, n in self._seen.items())


class IngestProgress:
    """Context manager giving the ingest's `progress(records)` callback, or None when disabled."""

    def __init__(self, enabled: bool, entries: int | None = None, files: list[Path] | None = None,
                 console: Any = None) -> None:  # fmt: skip
        self.enabled = enabled
        self.entries = entries or None
        self.positions = InputPositions(files or [])
        self.console = console
        self.records = 0
        self._stop = threading.Event()

    def __enter__(self) -> Callable[[int], None] | None:
        if not self.enabled:
            return None
        from rich import progress as rp
        from rich.console import Console

        by_bytes = self.positions.total > 0
        columns: list[Any] = [rp.SpinnerColumn(), rp.TextColumn("ingesting {task.fields[records]:,} records")]
        if by_bytes:  # the reader reads ahead of the parser: bytes and their ETA are the read's
            columns += [rp.BarColumn(), rp.TextColumn("read"), rp.DownloadColumn(), rp.TransferSpeedColumn(),
                        rp.TextColumn("read ETA"), rp.TimeRemainingColumn()]  # fmt: skip
        elif self.entries:
            columns += [rp.BarColumn(), rp.TextColumn("of {task.total:,.0f} journal entries"), rp.TextColumn("ETA"),
                        rp.TimeRemainingColumn()]  # fmt: skip
        columns += [rp.TimeElapsedColumn()]
        self._p = rp.Progress(*columns, console=self.console or Console(stderr=True), transient=True)
        self._p.__enter__()
        # (+1: the task is not "finished", and its elapsed time keeps running, until the ingest ends)
        total = self.positions.total + 1 if by_bytes else self.entries
        self._task = self._p.add_task("ingest", total=total, records=0)
        if by_bytes:
            self._thread = threading.Thread(target=self._sample, name="pdf-progress", daemon=True)
            self._thread.start()
        return self._advance

    def _advance(self, n: int) -> None:
        self.records += n
        if self.positions.total:
            self._p.update(self._task, records=self.records)
        else:
            self._p.update(self._task, records=self.records, completed=self.records)

    def _sample(self) -> None:
        while not self._stop.wait(REFRESH_S):
            self._p.update(self._task, completed=self.positions.read_bytes())

    def __exit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        self._stop.set()
        if self.positions.total:
            self._thread.join()
            if exc[0] is None:  # every input read (a small file may open and close between samples)
                self._p.update(self._task, completed=self.positions.total + 1)
        self._p.__exit__(None, None, None)
