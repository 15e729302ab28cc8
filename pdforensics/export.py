"""`pdforensics export`: what pdforensics found, in formats other tools read.

Each format lives in `pdforensics/exporters/`; this module picks one, prepares the
read-only connection (the classification views and their session variables) and
hands it over. Every exporter streams from DuckDB, so a database with a million
requests exports without holding them all in Python.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from pdforensics.errors import DatabaseError, OutputError, UsageError, written_whole
from pdforensics.query import prepared

if TYPE_CHECKING:
    from pdforensics.verdict import VerdictOptions


FORMATS = ("parquet", "perfetto", "otlp", "timesketch")


def _exporter(fmt: str) -> Callable[[duckdb.DuckDBPyConnection, Path], Path]:
    module = importlib.import_module(f"pdforensics.exporters.{fmt}")  # only the one asked for
    return module.export


def export(con: duckdb.DuckDBPyConnection, fmt: str, out: Path, opts: VerdictOptions | None) -> Path:
    """Write `fmt` to `out` (a folder for parquet, a file otherwise); returns what was written."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export --format {fmt!r}; one of: {', '.join(FORMATS)}")
    out = Path(out)
    folder = fmt == "parquet"
    _check_writable(out, folder)
    # written beside `out` and moved into place whole: a failure (a full disk) leaves no part of it
    try:
        with written_whole(out, folder) as tmp, prepared(con, opts):
            _exporter(fmt)(con, tmp)
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0]
        if "space left" in first.lower() or f".{out.name}." in first:
            raise OutputError(f"cannot write {out}: {first}") from None
        raise DatabaseError(f"{fmt} export could not read the database: {first}") from None
    return out


def _check_writable(out: Path, folder: bool) -> None:
    if folder:
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out} is a file; parquet export writes a folder (one file per table)")
        parent = out if out.exists() else out.parent
    else:
        if out.is_dir():
            raise UsageError(f"--out {out} is a folder; this format writes one file")
        parent = out.parent
    parent = parent if str(parent) else Path(".")
    if not parent.exists():
        raise UsageError(f"cannot write {out}: folder {parent} does not exist")
