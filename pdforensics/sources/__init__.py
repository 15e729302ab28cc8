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
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import polars as pl

# polars (and schema.py) load with the first batch, not with `Window`, which every command's
# options use (timewindow.py): a `verdict` or `sql` never reads a source.


def empty_records() -> pl.DataFrame:
    from pdforensics.schema import empty_records

    return empty_records()


def empty_rejects() -> pl.DataFrame:
    from pdforensics.schema import empty_rejects

    return empty_rejects()


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
    # How far before `window.since_us` lines are read as context (requests still open at its
    # start, the gauge), and whether each unit's incarnation start is read too (journal sources:
    # through the journal's indexes). Stored as lines before the window: the verdict reads them
    # as context and never judges them (queries/views/00_params.sql, time_window).
    context_us: int = 0
    heads: bool = False

    def reading(self) -> Selection:
        """What the readers read: the window widened by its context."""
        since = self.window.since_us
        if since is None or not self.context_us:
            return self
        return Selection(Window(since - self.context_us, self.window.until_us), self.units, 0, self.heads)


# Resume mark keys (rows of the database's `meta` table, "position detail"). A plain file read
# without a window: `file_mark:<source_key>` -> (upto, eof_size or "-"): every line before byte
# `upto` of its decompressed stream is stored; `eof_size` is the raw file's size when a read reached
# its end. Journal files sharing one __SEQNUM_ID `S`, read by python-systemd for one selection:
# `journal_mark:S|units|since|until` -> (seqnum, "cursor file_id,..."): every selected entry up to
# that seqnum is stored, and these files were read.
FILE_MARK = "file_mark:"
JOURNAL_MARK = "journal_mark:"


@dataclass
class RecordBatch:
    records: pl.DataFrame = field(default_factory=empty_records)
    rejects: pl.DataFrame = field(default_factory=empty_rejects)
    # Records read but left out by the unit/time selection (counted, not stored).
    skipped: int = 0
    # Records kept with message "" because MESSAGE was null in the input (`journalctl -o json`
    # without --all prints null for fields over 4096 bytes): worth a warning to re-export with --all.
    null_messages: int = 0
    # Records not read again because the database holds them (a resumed plain file): ingest counts
    # them as read and as duplicates, as if they had been re-read.
    known_unread: int = 0
    # A resumed journal: (source_key, seq) of its first re-read entry; ingest counts the stored
    # records of that source_key before it as read and duplicates (entries another unit selection
    # stored are counted too: the count is the database's, not this selection's).
    known_before: tuple[str, int] | None = None
    # Resume marks, stored with the batch: {meta key: (position, detail)}. Every record the mark
    # covers (up to `position` of its stream) is in this batch or an earlier one. See `FILE_MARK`.
    marks: dict[str, tuple[int, str]] = field(default_factory=dict)

    def counted(self) -> bool:
        """Whether the batch carries anything for ingest: records, rejects, counts or marks."""
        return bool(
            self.records.height or self.rejects.height or self.skipped or self.null_messages
            or self.known_unread or self.known_before or self.marks
        )  # fmt: skip


class Source(Protocol):
    label: str  # e.g. "journal (local)", "file:/var/log/prefill.log"
    reader: str  # which reader ran: "python-systemd", "journalctl-export", "json", "export", "plain"

    def batches(self, selection: Selection, batch_size: int = 100_000) -> Iterator[RecordBatch]: ...
