"""Where the shipped data lives: beside the package in a wheel, at the repo root in a checkout."""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _shipped(name: str) -> Path:
    for candidate in (_PKG / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"pdforensics data folder {name!r} is missing from this installation")


def queries_dir() -> Path:
    return _shipped("queries")


def fixtures_dir() -> Path:
    return _shipped("fixtures")


CACHE_DIR_ENV = "PDFORENSICS_CACHE_DIR"


def user_cache_dir() -> Path:
    """Where pdforensics keeps what it can rebuild (a new database's template, Spark translations):
    $PDFORENSICS_CACHE_DIR, else $XDG_CACHE_HOME/pdforensics, else ~/.cache/pdforensics."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pdforensics"
