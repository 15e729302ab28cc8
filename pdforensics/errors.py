"""One exception family: the CLI turns each into one line and an exit code."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path


class PdfError(Exception):
    """A problem the user can act on; its message is printed as one line."""

    exit_code = 1


class UsageError(PdfError):
    """Bad arguments, options or user-supplied files (catalog, time window)."""

    exit_code = 2


class SourceError(PdfError):
    """An input could not be opened or read at all (permissions, missing, empty)."""

    exit_code = 3


class DatabaseError(PdfError):
    """The database is locked, corrupt, read-only or from an unknown version."""

    exit_code = 4


class OutputError(PdfError):
    """An output file (report, export, alert log, status file) could not be written: a full disk,
    a read-only folder, permissions. Nothing partial is left where it was to be written."""

    exit_code = 6


@contextlib.contextmanager
def written_whole(out: Path, folder: bool = False, name: str = "") -> Iterator[Path]:
    """A path beside `out` to write to, moved into place when the block ends and removed when it
    fails: a full disk leaves no part of `out`. An OSError is an OutputError ("cannot write
    {name}{out}"). `folder`: the path is a folder whose files go into `out` (created if need be)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        if folder:
            out.mkdir(exist_ok=True)
            for f in sorted(tmp.iterdir()):
                f.replace(out / f.name)
        else:
            tmp.replace(out)
    except OSError as exc:
        raise OutputError(f"cannot write {name}{out}: {exc.strerror or exc}") from None
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


# DuckDB errors that say the database file itself is damaged or cannot be read or written (a
# corrupt block, an I/O error, a full disk): a database problem (4), whichever command met them.
# By class name: this module never imports duckdb (the CLI's --help stays instant).
_DATABASE_FAULTS = ("IOException", "FatalException", "InternalException", "SerializationException")


def is_database_fault(exc: BaseException) -> bool:
    text = str(exc).lower()
    return type(exc).__name__ in _DATABASE_FAULTS or "corrupt" in text or "checksum" in text


class EngineError(PdfError):
    """The engine asked for cannot run here (`verdict --engine spark`: no pyspark, no Java) or
    failed to run the rules."""

    exit_code = 5


class Stopped(KeyboardInterrupt):
    """SIGTERM (`systemctl stop`) or SIGHUP (the terminal went away): stopped as Ctrl-C stops,
    so every `except KeyboardInterrupt` path (committed batches kept, run marked interrupted) holds."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
stop_signal: int | None = None  # the stop signal received, if any (exit status 128 + it)


def _on_stop_signal(signum: int, frame: object) -> None:
    global stop_signal
    if stop_signal is not None:
        return  # already stopping: a second signal must not break the orderly stop
    stop_signal = signum
    raise Stopped(signum)


def install_stop_signals() -> None:
    """SIGTERM and SIGHUP raise Stopped in the main thread (call from it)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_stop_signal)


def interrupt_exit_code() -> int:
    """130 after Ctrl-C; 128 + the signal after SIGTERM (143) or SIGHUP (129)."""
    return 128 + (stop_signal if stop_signal is not None else signal.SIGINT)


def is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C seen inside a DuckDB call: duckdb.InterruptException, RuntimeError("Query interrupted"),
    or a scan of a registered frame that "failed: KeyboardInterrupt"; or anything after a stop signal
    (its Stopped surfaces in DuckDB as one of those, or as another error of the call it cut short)."""
    if stop_signal is not None:
        return True
    duckdb = sys.modules.get("duckdb")  # never imported here: the CLI's --help must stay instant
    if duckdb is not None and isinstance(exc, duckdb.InterruptException):
        return True
    return str(exc).strip().endswith(("Query interrupted", "KeyboardInterrupt", "KeyboardInterrupt:"))
