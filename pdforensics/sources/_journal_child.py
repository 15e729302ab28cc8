"""python-systemd in a child process: a journal file that makes libsystemd abort cannot take us down.

libsystemd asserts on some damaged files (`decompress_blob_zstd()` on a cut compressed field,
`generic_array_bisect()` on a damaged entry array) and aborts the process that reads them. So the
`_Reader` loop runs in a child (this file run as a script: it imports neither polars nor the
package, so it starts in a few tens of ms), which streams blocks of raw fields back through a pipe
(`marshal`). The parent (`IsolatedReader`) turns a dead child into a counted problem and starts
another one where it stopped: it knows the last entry it received, and a counter the child keeps
in a shared file says how many entries of the unsent block it had read, so the new child reads
those again, steps over the one entry it died on and reads on. A death while opening or stepping
over (a damaged entry array: walking itself aborts), or more than MAX_ABORTS in one unit, gives up
the rest of that unit; the next unit is read.

A unit is what one `_Reader` reads: one journal file (directory and file sources), or the whole
local journal. Units are read one after another by one child; another is started only after a death.

Messages (child -> parent): kind (1 byte), unit index (u32), payload length (u64), payload.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import mmap
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, replace
from typing import IO, Any

_HEAD = struct.Struct("<cIQ")
BLOCK, RESUMED, SKIPPED, ERROR, OPEN_FAILED, DONE = b"B", b"R", b"S", b"E", b"O", b"D"
# Counter slots shared with the child (int64): unit being read, entries of the unsent block read,
# phase. A death while reading an entry is stepped over; one while opening or stepping over is not.
UNIT, DONE_IN_BLOCK, PHASE = 0, 1, 2
PHASE_OPEN, PHASE_READ, PHASE_STEP = 0, 1, 2
MAX_ABORTS = 16  # per unit: each costs a child start (~50 ms)


@dataclass
class Unit:
    """What one `_Reader` reads and where it starts (the request sent to a child)."""

    files: list[str] | None  # None: the local journal
    since_us: int | None = None
    cursor: str | None = None  # resume: start `context` entries before this cursor
    context: int = 0
    after: str | None = None  # restart: start after this cursor (the last one received)
    skip_at: int | None = None  # restart: read this many entries, then step over one
    units: str | None = None  # read only entries whose unit fields can match this regex (match_units)
    # context: the start (and, when it ended, the end) of each selected unit's incarnation at this
    # time, `head_entries` entries each, read through the invocation's index (read_heads)
    heads_before_us: int | None = None
    head_entries: int = 0


@dataclass
class Event:
    kind: bytes
    unit: int
    block: tuple[list[str], list[list[Any]]] | None = None  # BLOCK: cursors, one list per field
    text: str = ""  # SKIPPED: the stepped-over entry's cursor; ERROR, OPEN_FAILED: what happened
    reason: str = ""  # SKIPPED: why it was stepped over
    frame: Any = None  # BLOCK from the direct reader (journalfile): the raw frame itself
    skipped: int = 0  # BLOCK from the direct reader: entries read but left out before the frame


@dataclass
class _State:
    last_cursor: str | None = None
    aborts: int = 0
    done: bool = False
    lost: str = ""  # why the child died on the entry the next child steps over


class IsolatedReader:
    """Read units in child processes; yield their blocks and what went wrong (see module doc)."""

    def __init__(
        self,
        units: list[Unit],
        fields: tuple[str, ...],
        until_us: int | None,
        block: int,
        until_check: int,
        stopped: Callable[[], bool],
    ) -> None:
        self.units = units
        self.fields = fields
        self.until_us = until_us
        self.block = block
        self.until_check = until_check
        self.stopped = stopped

    def __iter__(self) -> Iterator[Event]:
        state = [_State() for _ in self.units]
        specs = list(self.units)
        with tempfile.NamedTemporaryFile(prefix="pdforensics-journal-") as counter:
            counter.write(bytes(8 * 4))
            counter.flush()
            while not self.stopped():
                todo = [i for i, s in enumerate(state) if not s.done]
                if not todo:
                    return
                rc, err = yield from self._run_child(todo, specs, state, counter.name)
                if self.stopped():
                    return
                if rc != 0:
                    yield from self._after_death(rc, err, specs, state, counter.name)
                    continue
                for i in todo:  # a clean exit reports every unit done; never read one again
                    if not state[i].done:
                        state[i].done = True
                        yield Event(ERROR, i, text=f"journal reader ended early{': ' + err if err else ''}")

    def _run_child(
        self, todo: list[int], specs: list[Unit], state: list[_State], counter: str
    ) -> Generator[Event, None, tuple[int, str]]:
        request = {
            "units": [{"index": i, **asdict(specs[i])} for i in todo],
            "fields": list(self.fields),
            "until_us": self.until_us,
            "block": self.block,
            "until_check": self.until_check,
            "counter": counter,
        }
        with open(counter, "r+b") as f:  # a child that dies before its first unit left no stale state
            f.write(struct.pack("<qqqq", todo[0], 0, PHASE_OPEN, 0))
        with tempfile.TemporaryFile() as err:
            try:
                proc: subprocess.Popen[bytes] | _InProcess = subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                    start_new_session=True,  # Ctrl-C and SIGTERM reach us only; we stop the child
                )  # fmt: skip
            except OSError:  # this Python cannot be started again (not executable for this user)
                proc = _InProcess(request)
            if isinstance(proc, subprocess.Popen):
                assert proc.stdin is not None
                try:
                    proc.stdin.write(json.dumps(request).encode())
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
            assert proc.stdout is not None
            try:
                yield from self._relay(proc.stdout, state)
            finally:
                if proc.poll() is None:
                    proc.kill()  # stopped, or the consumer went away
                rc = proc.wait()
                proc.stdout.close()
            err.seek(0)
            lines = err.read().decode("utf-8", "replace").strip().splitlines()
        return rc, (lines[-1] if lines else "")

    def _relay(self, stream: IO[bytes], state: list[_State]) -> Iterator[Event]:
        for ev in _messages(stream):
            if self.stopped():
                return
            s = state[ev.unit]
            if ev.kind == BLOCK and ev.block is not None and ev.block[0]:
                s.last_cursor = ev.block[0][-1]
            if ev.kind == SKIPPED:
                ev.reason, s.lost = s.lost, ""
            if ev.kind in (DONE, OPEN_FAILED):
                s.done = True
                if s.lost:  # it died on the last entry: there was none to step over
                    yield Event(ERROR, ev.unit, text=f"the last journal entry is unreadable ({s.lost})")
                    s.lost = ""
            yield ev

    def _after_death(
        self, rc: int, err: str, specs: list[Unit], state: list[_State], counter: str
    ) -> Iterator[Event]:
        with open(counter, "rb") as f:
            unit, done_in_block, phase, _ = struct.unpack("<qqqq", f.read(32))
        if not (0 <= unit < len(specs)) or state[unit].done:
            unit, phase = next(i for i, s in enumerate(state) if not s.done), PHASE_OPEN
        s = state[unit]
        s.aborts += 1
        detail = f"{_death(rc)}{': ' + err if err else ''}"
        base = specs[unit]
        if base.heads_before_us is not None:  # context only: the window is read on its own
            s.done = True
            yield Event(
                ERROR, unit, text=f"journal reader died reading the context before the window ({detail})"
            )
            return
        if phase == PHASE_OPEN and not base.after and (base.since_us is not None or base.cursor):
            # Seeking (a bisection of the entry arrays) can abort where walking does not: read the
            # file from its start instead (the window is applied to every record anyway).
            specs[unit] = Unit(base.files, units=base.units)
            return
        if phase == PHASE_READ and not s.lost and s.aborts <= MAX_ABORTS:
            # The entry after the `done_in_block` read ones killed it: the next child steps over it.
            after = s.last_cursor
            if after:
                specs[unit] = Unit(base.files, after=after, skip_at=done_in_block, units=base.units)
            else:
                specs[unit] = replace(base, skip_at=done_in_block)
            s.lost = detail
            return
        s.done = True
        yield Event(ERROR, unit, text=f"journal reader died ({detail}); the rest of this file is unreadable")


class _InProcess:
    """The child's work in a thread of this process, for when no child can be started: the same
    messages, without the protection (an abort then ends this process)."""

    def __init__(self, request: dict[str, Any]) -> None:
        import threading

        r, w = os.pipe()
        self.stdout: IO[bytes] | None = os.fdopen(r, "rb")
        self._out = os.fdopen(w, "wb")
        self._thread = threading.Thread(target=self._run, args=(request,), daemon=True)
        self._thread.start()

    def _run(self, request: dict[str, Any]) -> None:
        try:
            serve(request, self._out)
        except BrokenPipeError:
            pass
        finally:
            with contextlib.suppress(OSError):
                self._out.close()

    def poll(self) -> int | None:
        return None if self._thread.is_alive() else 0

    def kill(self) -> None:
        if self.stdout is not None:
            self.stdout.close()  # the thread's next write fails and it ends

    def wait(self) -> int:
        self._thread.join()
        return 0


def _death(rc: int) -> str:
    if rc < 0:
        try:
            return f"libsystemd aborted ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _read_exact(stream: IO[bytes], n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def _messages(stream: IO[bytes]) -> Iterator[Event]:
    while (head := _read_exact(stream, _HEAD.size)) is not None:
        kind, unit, size = _HEAD.unpack(head)
        payload = _read_exact(stream, size)
        if payload is None:
            return  # cut by the child's death
        if kind == BLOCK:
            yield Event(kind, unit, block=marshal.loads(payload))
        else:
            yield Event(kind, unit, text=payload.decode("utf-8", "replace"))


# -- the reading loop (runs in the child) -----------------------------------------------------------


def read_entries(
    j: Any, fields: tuple[str, ...], limit: int, until_us: int | None, until_check: int, progress: memoryview
) -> tuple[list[str], list[list[Any]], bool, OSError | None]:
    """Up to `limit` entries' cursors and fields (one list per name): (cursors, cols, more, error).

    Hot loop: locals only, unrolled per field, one `_get_all` dict per entry, nothing else.
    (Pausing the GC looked ~12% faster in isolation but was not faster inside the reader; dropped.)
    A read error while walking (a damaged file) ends the block with the entries read before it. An
    entry `_get_all` refuses (a field name not UTF-8, a field without '=') is read field by field.
    `progress[DONE_IN_BLOCK]` counts the entries of this block read so far.
    """
    (k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10, k11, k12, k13, k14) = fields
    cols: list[list[Any]] = [[] for _ in fields]
    (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) = (c.append for c in cols)
    cursors: list[str] = []
    ac = cursors.append
    nx, get_all, get_cursor, get_rt = j._next, j._get_all, j._get_cursor, j._get_realtime
    pv = progress
    more = True
    error: OSError | None = None
    try:
        while more and len(cursors) < limit:
            for _ in range(min(until_check, limit - len(cursors))):
                if not nx():
                    more = False
                    break
                try:
                    g = get_all().get
                except (ValueError, OSError):  # a field name not UTF-8, a field without '=': one by one
                    g = {name: _field(j, name) for name in fields}.get
                ac(get_cursor())
                a0(g(k0))
                a1(g(k1))
                a2(g(k2))
                a3(g(k3))
                a4(g(k4))
                a5(g(k5))
                a6(g(k6))
                a7(g(k7))
                a8(g(k8))
                a9(g(k9))
                a10(g(k10))
                a11(g(k11))
                a12(g(k12))
                a13(g(k13))
                a14(g(k14))
                pv[1] += 1
            if more and until_us is not None and cursors and get_rt() >= until_us:
                more = False
    except OSError as e:  # raised by _next/_get_all/_get_cursor, before an entry's appends
        error, more = e, False
    return cursors, cols, more, error


def _field(j: Any, name: str) -> bytes | None:
    """One field of the current entry (the first value of a repeated one), None when absent."""
    try:
        return j._get(name)
    except (KeyError, ValueError, OSError):
        return None


def seek_before(j: Any, cursor: str, context: int) -> bool:
    """Position `j` so that its next entry is `context` entries before `cursor` (or the first).

    False when the cursor cannot be found (its file was removed): the caller reads from the start.
    """
    try:
        j.seek_cursor(cursor)
        if not j._next() or not j.test_cursor(cursor):
            j.seek_head()
            return False
        for _ in range(context):
            if not j._previous():
                j.seek_head()  # fewer entries before the cursor than `context`: from the first
                return True
        return True
    except OSError:
        j.seek_head()
        return False


# The fields a unit glob is matched against (_records._selected), and journald's own unit, whose
# "Suppressed N messages from UNIT" lines name the unit in MESSAGE.
MATCH_FIELDS = (
    "_SYSTEMD_UNIT",
    "_SYSTEMD_USER_UNIT",
    "UNIT",
    "USER_UNIT",
    "COREDUMP_UNIT",
    "OBJECT_SYSTEMD_UNIT",
)
JOURNALD = b"_SYSTEMD_UNIT=systemd-journald.service"


def match_units(j: Any, regex: str) -> bool:
    """Restrict `j` to the entries a unit field of which has a value `regex` matches, and
    journald's: what `journalctl -u` reads (the values' entry lists) instead of every entry. The
    parent selects exactly afterwards, so this only has to keep a superset. When no value matches
    (a glob naming no unit here) nothing is restricted: every entry is read, and the parent can
    still list the units that were there. Returns whether it restricted."""
    rx = re.compile(regex)
    groups = []
    for field in MATCH_FIELDS:
        try:
            values = j.query_unique(field)
        except OSError:  # a damaged file: read everything, as without a selection
            return False
        hits = [v for v in values if rx.search(v.decode("utf-8", "replace"))]  # _Reader: bytes
        if hits:
            groups.append((field, hits))
    if not groups:
        return False
    for field, hits in groups:  # values of one field OR'ed, each field its own disjunction
        for v in hits:
            j.add_match(field.encode() + b"=" + v)
        j.add_disjunction()
    j.add_match(JOURNALD)
    return True


def _send(out: IO[bytes], kind: bytes, unit: int, payload: bytes) -> None:
    out.write(_HEAD.pack(kind, unit, len(payload)) + payload)
    out.flush()


def _open(files: list[str] | None) -> Any:
    from systemd import journal

    j = journal._Reader() if files is None else journal._Reader(flags=0, files=files)
    j.data_threshold = 0  # never truncate large fields (long Receive: lines)
    return j


def _start(j: Any, unit: dict[str, Any]) -> bool:
    """Position the reader; True when it resumed at a cursor (the first entry is a re-read one)."""
    if unit["after"]:
        j.seek_cursor(unit["after"])
        if not j._next() or not j.test_cursor(unit["after"]):
            raise OSError(0, "cannot find the entry to restart after")
        return False
    if unit["cursor"] and seek_before(j, unit["cursor"], unit["context"]):
        return True
    if unit["since_us"] is not None:
        j.seek_realtime(max(unit["since_us"], 0))
    return False


def _read_unit(out: IO[bytes], unit: dict[str, Any], request: dict[str, Any], pv: memoryview) -> None:
    i = unit["index"]
    pv[UNIT], pv[DONE_IN_BLOCK], pv[PHASE] = i, 0, PHASE_OPEN
    try:
        j = _open(unit["files"])
    except OSError as e:
        _send(out, OPEN_FAILED, i, f"{e.errno or 0} {e.strerror or e}".encode())
        return
    try:
        if unit["heads_before_us"] is not None:
            read_heads(out, j, unit, request, pv)
        else:
            if unit["units"]:
                match_units(j, unit["units"])
            _read_open(out, j, unit, request, pv)
    finally:
        j.close()
    _send(out, DONE, i, b"")


def _read_open(out: IO[bytes], j: Any, unit: dict[str, Any], request: dict[str, Any], pv: memoryview) -> None:
    i = unit["index"]
    fields = tuple(request["fields"])
    try:
        resumed = _start(j, unit)
    except OSError as e:
        _send(out, ERROR, i, f"journal reader cannot start: {e.strerror or e}".encode())
        return
    _send(out, RESUMED, i, b"1" if resumed else b"0")
    skip_at: int | None = unit["skip_at"]
    more = True
    while more:
        if skip_at == 0:
            pv[PHASE] = PHASE_STEP
            if not j._next():
                break
            _send(out, SKIPPED, i, j._get_cursor().encode())
            skip_at = None
        pv[PHASE] = PHASE_READ
        limit = request["block"] if skip_at is None else min(request["block"], skip_at)
        cursors, cols, more, error = read_entries(
            j, fields, limit, request["until_us"], request["until_check"], pv
        )
        if cursors:
            _send(out, BLOCK, i, marshal.dumps((cursors, cols)))
        pv[DONE_IN_BLOCK] = 0
        if skip_at is not None:
            skip_at -= len(cursors)
        if error is not None:
            _send(out, ERROR, i, f"journal read stopped early: {error.strerror or error}".encode())
            return


# The fields that name the process's own unit (the unit an SGLang line comes from).
OWN_UNIT_FIELDS = ("_SYSTEMD_UNIT", "_SYSTEMD_USER_UNIT")
TAIL_ENTRIES = 50  # of an incarnation that ended before the context: its stop lines
HEAD_SPAN_US = 3_600_000_000  # an incarnation's start: its first hour at most (a big model loads in minutes)


def current_invocations(j: Any, regex: str | None, before_us: int) -> list[bytes]:
    """The invocation each selected unit of each host was running just before `before_us`: the
    invocation id of its last entry before that time (the entry lists of the unit and the host,
    then one step back). A unit whose every entry is later has none; `regex` None takes every unit."""
    rx = re.compile(regex) if regex else None
    # per host: a collection of several hosts runs the same unit on each (a fleet's prefills)
    hosts = [b"_HOSTNAME=" + h for h in j.query_unique("_HOSTNAME")] or [None]
    found: list[bytes] = []
    for field in OWN_UNIT_FIELDS:
        for value in j.query_unique(field):
            if rx is not None and not rx.search(value.decode("utf-8", "replace")):
                continue
            for host in hosts:
                j.flush_matches()
                j.add_match(field.encode() + b"=" + value)
                if host is not None:
                    j.add_match(host)
                j.seek_realtime(max(before_us, 0))
                if not j._previous():
                    continue
                inv = _field(j, "_SYSTEMD_INVOCATION_ID")
                if inv and inv not in found:
                    found.append(inv)
    j.flush_matches()
    return found


def _match_invocation(j: Any, inv: bytes) -> None:
    """The invocation's own entries and systemd's about it (Started, Stopped: INVOCATION_ID)."""
    j.flush_matches()
    j.add_match(b"_SYSTEMD_INVOCATION_ID=" + inv)
    j.add_disjunction()
    j.add_match(b"INVOCATION_ID=" + inv)


def read_heads(out: IO[bytes], j: Any, unit: dict[str, Any], request: dict[str, Any], pv: memoryview) -> None:
    """Context for a window: each selected unit's incarnation at `heads_before_us` from its first
    `head_entries` entries of its first hour (server_args, the armed line, `fired up`), and its last TAIL_ENTRIES when it
    ended before that time. Read through the journal's per-value entry lists: milliseconds, however
    many hours before the window the unit started. Entries at or after `heads_before_us` are the
    window read's; the parent drops them."""
    i = unit["index"]
    fields, before = tuple(request["fields"]), unit["heads_before_us"]
    try:
        invocations = current_invocations(j, unit["units"], before)
    except OSError as e:
        _send(out, ERROR, i, f"context before the window unreadable: {e.strerror or e}".encode())
        return
    _send(out, RESUMED, i, b"0")
    pv[PHASE] = PHASE_READ
    for inv in invocations:
        _match_invocation(j, inv)
        j.seek_head()
        if not j._next():
            continue
        until = min(before, j._get_realtime() + HEAD_SPAN_US)
        j.seek_cursor(j._get_cursor())  # the next entry is the first again
        error = _send_entries(out, i, j, fields, unit["head_entries"], until, pv)
        if error is None and (tail := _ended_before(j, before)):
            error = _send_entries(out, i, j, fields, tail, before, pv)
        if error is not None:
            _send(out, ERROR, i, f"context before the window unreadable: {error.strerror or error}".encode())
            return


def _send_entries(
    out: IO[bytes], i: int, j: Any, fields: tuple[str, ...], limit: int, until_us: int, pv: memoryview
) -> OSError | None:
    """Up to `limit` entries from the reader's position (checking the time after each), as one block."""
    cursors, cols, _, error = read_entries(j, fields, limit, until_us, 1, pv)
    if cursors:
        _send(out, BLOCK, i, marshal.dumps((cursors, cols)))
    pv[DONE_IN_BLOCK] = 0
    return error


def _ended_before(j: Any, before_us: int) -> int:
    """With the invocation matched: when its last entry is before `before_us`, position the reader
    TAIL_ENTRIES back from it and say how many to read; else 0."""
    j.seek_tail()
    if not j._previous() or j._get_realtime() >= before_us:
        return 0
    n = 1
    while n < TAIL_ENTRIES and j._previous():
        n += 1
    j.seek_cursor(j._get_cursor())  # the next entry is the first of the tail
    return n


def serve(request: dict[str, Any], out: IO[bytes]) -> None:
    """Read the request's units, sending their messages to `out`."""
    with open(request["counter"], "r+b") as f:
        mm = mmap.mmap(f.fileno(), 32)
    pv = memoryview(mm).cast("q")
    try:
        for unit in request["units"]:
            _read_unit(out, unit, request, pv)
    finally:
        pv.release()
        mm.close()


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the parent decides when reading stops
        signal.signal(sig, signal.SIG_IGN)
    try:
        serve(json.loads(sys.stdin.buffer.read()), sys.stdout.buffer)
    except BrokenPipeError:  # the parent stopped reading: nothing to say
        os._exit(0)


if __name__ == "__main__":
    # Run as a script: its folder (this package's) must not shadow top-level modules.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    main()
