"""Pick the reader for a file from its content (after gunzip), not its name."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pdforensics.errors import SourceError
from pdforensics.sources import Source
from pdforensics.sources._common import BOM, HEAD_BYTES, JOURNAL_MAGIC, check_file, open_stream, read_head
from pdforensics.sources.export import ExportFileSource
from pdforensics.sources.journal import JournalSource
from pdforensics.sources.jsonlines import JsonLinesSource
from pdforensics.sources.plain import PlainFileSource

_EXPORT_MARKERS = (b"__CURSOR=", b"__REALTIME_TIMESTAMP=")
_JSON_MARKERS = ('"__CURSOR"', '"__REALTIME_TIMESTAMP"')
# How much of a file's first line / first export entry detection reads: a journalctl -o json line
# with a 1 MiB MESSAGE (before __CURSOR: its key order varies) is read whole.
SNIFF_LIMIT = 64 << 20
_FIELD_LINE = re.compile(rb"^[A-Za-z0-9_]+(=|\n)")


def sniff(head: bytes) -> str:
    """'json', 'export' or 'plain' for the first decompressed bytes of a file, by structure:
    a first line that is a JSON object with journal fields, or a first entry of `NAME=value`
    lines (or binary fields) holding a journal timestamp or cursor."""
    text = head.removeprefix(BOM).lstrip(b" \t\r\n")
    if text.startswith(b"{"):
        line = text.split(b"\n", 1)[0].decode("utf-8", "replace")
        try:
            obj = json.loads(line)
            is_entry = isinstance(obj, dict) and any(m.strip('"') in obj for m in _JSON_MARKERS)
        except (ValueError, RecursionError):  # first line cut by the limit, or malformed: look for keys
            is_entry = any(m + ":" in line.replace('": ', '":') for m in _JSON_MARKERS)
        if is_entry:
            return "json"
    if _FIELD_LINE.match(text):
        first_entry = text.split(b"\n\n", 1)[0]
        if any(line.startswith(_EXPORT_MARKERS) for line in first_entry.split(b"\n")):
            return "export"
    return "plain"


def _sniff_head(path: Path) -> bytes:
    """The bytes detection needs: the first line (JSON) or first entry (export), up to SNIFF_LIMIT."""
    head = read_head(path)
    text = head.removeprefix(BOM).lstrip(b" \t\r\n")
    if text.startswith(b"{"):
        end = b"\n"
    elif _FIELD_LINE.match(text):
        end = b"\n\n"
    else:
        return head
    if end in text or len(head) < HEAD_BYTES:
        return head
    with open_stream(path) as s:
        buf = bytearray()
        while len(buf) < SNIFF_LIMIT:
            try:
                chunk = s.read(1 << 20)
            except (OSError, EOFError):
                break
            if not chunk:
                break
            buf += chunk
            if end in chunk or end in buf[-len(chunk) - 1 :]:
                break
        return bytes(buf[:SNIFF_LIMIT])


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
    kind = sniff(_sniff_head(path))
    if kind == "json":
        return JsonLinesSource(path)
    if kind == "export":
        return ExportFileSource(path)
    return PlainFileSource(path, host=host, unit=unit)
