"""Pick the reader for a file from its content (after gunzip), not its name."""

from __future__ import annotations

import json
from pathlib import Path

from pdforensics.errors import SourceError
from pdforensics.sources import Source
from pdforensics.sources._common import BOM, JOURNAL_MAGIC, check_file, read_head
from pdforensics.sources.export import ExportFileSource
from pdforensics.sources.journal import JournalSource
from pdforensics.sources.jsonlines import JsonLinesSource
from pdforensics.sources.plain import PlainFileSource

_EXPORT_MARKERS = (b"__CURSOR=", b"__REALTIME_TIMESTAMP=")
_JSON_MARKERS = ('"__CURSOR"', '"__REALTIME_TIMESTAMP"')


def sniff(head: bytes) -> str:
    """'json', 'export' or 'plain' for the first decompressed bytes of a file."""
    text = head.removeprefix(BOM).lstrip(b" \t\r\n")
    first_entry = text.split(b"\n\n", 1)[0]
    if text.startswith(b"{"):
        line = text.split(b"\n", 1)[0].decode("utf-8", "replace")
        try:
            obj = json.loads(line)
            is_entry = isinstance(obj, dict) and any(m.strip('"') in obj for m in _JSON_MARKERS)
        except ValueError:  # first line cut by the head limit, or malformed: look for the keys
            is_entry = any(m in line for m in _JSON_MARKERS)
        if is_entry:
            return "json"
    if any(line.startswith(_EXPORT_MARKERS) for line in first_entry.split(b"\n")):
        return "export"
    return "plain"


def open_file_source(path: Path, host: str | None = None, unit: str | None = None) -> Source:
    """The source for one user-named file: journal file, export, JSON lines or plain text log.

    `host` and `unit` only apply to plain text logs; journal formats carry their own.
    """
    path = Path(path)
    check_file(path)  # also: a directory, a pipe, no permission
    try:
        with open(path, "rb") as f:
            magic = f.read(len(JOURNAL_MAGIC))
    except OSError as e:
        raise SourceError(f"{path}: {e.strerror or e}") from e
    if magic == JOURNAL_MAGIC:
        return JournalSource("files", [path])
    head = read_head(path)
    if head.startswith(JOURNAL_MAGIC):  # sd_journal reads only uncompressed journal files
        raise SourceError(f"{path} is a compressed journal file: decompress it first (gunzip -k)")
    kind = sniff(head)
    if kind == "json":
        return JsonLinesSource(path)
    if kind == "export":
        return ExportFileSource(path)
    return PlainFileSource(path, host=host, unit=unit)
