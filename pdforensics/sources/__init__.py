"""Sources: everything that yields raw journal-like records.

Each source turns its input into batches of records (``schema.RECORD_SCHEMA``)
plus rejects (``schema.REJECT_SCHEMA``). Filtering by unit and time window
happens here, so later stages only see what the user asked for; the exception
is a plain text log, taken whole (its times are known only after parse).

Readers: ``journal.JournalSource`` (python-systemd, journalctl fallback),
``export.ExportFileSource``, ``jsonlines.JsonLinesSource``, ``plain.PlainFileSource``;
``detect.open_file_source`` picks one for a file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import polars as pl

from pdforensics.schema import empty_records, empty_rejects


@dataclass
class Window:
    """Half-open [since_us, until_us) in UTC microseconds; None = unbounded."""

    since_us: int | None = None
    until_us: int | None = None


@dataclass
class Selection:
    """What the user asked for: a time window and unit globs (``*`` = all)."""

    window: Window = field(default_factory=Window)
    units: tuple[str, ...] = ("sglang*",)


@dataclass
class RecordBatch:
    records: pl.DataFrame = field(default_factory=empty_records)
    rejects: pl.DataFrame = field(default_factory=empty_rejects)
    # Records read but left out by the unit/time selection (counted, not stored).
    skipped: int = 0
    # Records kept with message "" because MESSAGE was null in the input (`journalctl -o json`
    # without --all prints null for fields over 4096 bytes): worth a warning to re-export with --all.
    null_messages: int = 0


class Source(Protocol):
    label: str  # e.g. "journal (local)", "file:/var/log/prefill.log"
    reader: str  # which reader ran: "python-systemd", "journalctl-export", "json", "export", "plain"

    def batches(self, selection: Selection, batch_size: int = 100_000) -> Iterator[RecordBatch]: ...
