"""Reading the catalog's and the prefixes' TOML files: small, regular, bounded.

A FIFO would block the read forever and `/dev/zero` would fill memory: each is one line (exit 2)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pdforensics.errors import UsageError

# The bundled catalog is ~60 KB; a user's file of a thousand entries stays well under this.
MAX_BYTES = 4 * 1024 * 1024


def read_toml_text(path: Path, what: str) -> str:
    """The text of the `what` file (`catalog`, `prefix`) at `path`, else a UsageError of one line."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise UsageError(f"{what} file {path} is a directory; pass a .toml file")
        if not stat.S_ISREG(mode):
            raise UsageError(
                f"{what} file {path} is not a regular file (a pipe or a device?); pass a .toml file"
            )
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"{what} file not found: {path}") from None
    except PermissionError:
        raise UsageError(f"{what} file {path} cannot be read: permission denied") from None
    except OSError as exc:  # a name too long, too many symlink levels...
        raise UsageError(f"{what} file {path} cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise UsageError(
            f"{what} file {path} is larger than {MAX_BYTES // (1024 * 1024)} MiB: not a {what} file"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} file {path} is not valid TOML: not UTF-8 text ({exc.reason})") from None
