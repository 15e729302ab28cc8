"""One exception family: the CLI turns each into one line and an exit code."""

from __future__ import annotations

import sys


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


def is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C seen inside a DuckDB call: duckdb.InterruptException, RuntimeError("Query interrupted"),
    or a scan of a registered frame that "failed: KeyboardInterrupt"."""
    duckdb = sys.modules.get("duckdb")  # never imported here: the CLI's --help must stay instant
    if duckdb is not None and isinstance(exc, duckdb.InterruptException):
        return True
    return str(exc).strip().endswith(("Query interrupted", "KeyboardInterrupt", "KeyboardInterrupt:"))
