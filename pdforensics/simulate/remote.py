"""A journal-remote collection: one ``remote-<host>.journal`` per host, as an operator's
``systemd-journal-remote`` receiver writes them (``/var/log/journal/remote/``).

Each host's entries (Journal Export Format, in their original order) are fed to the real
``/lib/systemd/systemd-journal-remote -o DIR/remote-<host>.journal -``. The files are binary
and not deterministic (the tool stamps its own ids), so they are made on demand, never committed.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

from pdforensics.errors import UsageError

JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")
CURSOR = b"__CURSOR="
HOSTNAME = b"_HOSTNAME="


def split_export(data: bytes) -> list[bytes]:
    """The entries of Journal Export Format text, each with its trailing blank line.

    The fast path splits on blank lines; a binary field (``NAME\\n<u64 length><bytes>\\n``) whose
    bytes hold a blank line makes a piece that does not start with ``__CURSOR=``, and then the
    text is walked field by field.
    """
    pieces = data.split(b"\n\n")
    if pieces and not pieces[-1].strip():
        pieces.pop()
    if all(p.startswith(CURSOR) for p in pieces):
        return [p + b"\n\n" for p in pieces]
    return _walk(data)


def _walk(data: bytes) -> list[bytes]:
    entries, start, i, n = [], 0, 0, len(data)
    while i < n:
        if data[i : i + 1] == b"\n":  # the blank line that ends an entry
            entries.append(data[start : i + 1])
            i += 1
            start = i
            continue
        nl = data.index(b"\n", i)
        if b"=" in data[i:nl]:
            i = nl + 1
        else:  # binary field: the name, then a little-endian u64 length, the bytes and a newline
            (size,) = struct.unpack("<Q", data[nl + 1 : nl + 9])
            i = nl + 9 + size + 1
    if start < n and data[start:].strip():
        entries.append(data[start:] + b"\n")
    return entries


def host_of(entry: bytes) -> str:
    """The entry's ``_HOSTNAME`` (the collection names each file after it)."""
    at = entry.find(b"\n" + HOSTNAME)
    if at < 0:
        raise UsageError("an export entry without _HOSTNAME cannot be put in a journal-remote collection")
    start = at + 1 + len(HOSTNAME)
    return entry[start : entry.index(b"\n", start)].decode()


def by_host(data: bytes) -> dict[str, bytes]:
    """Each host's entries, in the order the export holds them."""
    out: dict[str, list[bytes]] = {}
    for entry in split_export(data):
        out.setdefault(host_of(entry), []).append(entry)
    return {h: b"".join(es) for h, es in sorted(out.items())}


def write_journal_remote(export: Path, out_dir: Path) -> list[Path]:
    """Write ``out_dir/remote-<host>.journal`` for every host of the export file; return them."""
    if not JOURNAL_REMOTE.exists():
        raise UsageError(f"{JOURNAL_REMOTE} is not installed (Debian: systemd-journal-remote)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for host, data in by_host(Path(export).read_bytes()).items():
        target = out_dir / f"remote-{host}.journal"
        target.unlink(missing_ok=True)  # journal-remote appends to an existing file
        done = subprocess.run([str(JOURNAL_REMOTE), "-o", str(target), "-"], input=data, capture_output=True)
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
            raise UsageError(f"systemd-journal-remote failed for {host}: {why[0]}")
        written.append(target)
    return written
