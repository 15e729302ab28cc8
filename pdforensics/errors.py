"""One exception family: the CLI turns each into one line and an exit code."""

from __future__ import annotations


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
