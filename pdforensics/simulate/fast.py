"""Vectorised helpers: a portable per-row hash RNG and hex formatting of integer columns."""

from __future__ import annotations

import polars as pl
import pyarrow as pa


def hash_u32(idx: pl.Expr, key: int) -> pl.Expr:
    """A 32-bit integer hash of (row key, stream key), exact in 64-bit arithmetic.

    Pure integer arithmetic, so the same seed gives the same bytes on every platform and
    polars version (polars' own ``hash`` makes no such promise).
    """
    x = (idx * 2654435761 + key) % 2**32
    x = ((x ^ (x // 65536)) * 73244475) % 2**32
    x = ((x ^ (x // 65536)) * 73244475) % 2**32
    return x ^ (x // 65536)


def uniform(key: int, col: str = "key") -> pl.Expr:
    """A deterministic U[0, 1) per row, independent for each ``key``."""
    return hash_u32(pl.col(col), key) / 2**32


def hex_series(values: pl.Series, pad: bool = False) -> pl.Series:
    """Lower-case hex of non-negative integers < 2**64 (journald cursor style), vectorised.

    The values are byte-swapped to big-endian, viewed as 8-byte binaries and hex-encoded.
    """
    x = values.cast(pl.UInt64)
    swapped = pl.select(
        sum(((pl.lit(x) // (256**k)) % 256) * (256 ** (7 - k)) for k in range(8)).cast(pl.UInt64)
    ).to_series()
    arr = swapped.to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    fsb = pa.Array.from_buffers(pa.binary(8), len(arr), [None, arr.buffers()[1]], offset=arr.offset)
    out = pl.Series(fsb).cast(pl.Binary).bin.encode("hex")
    return out if pad else out.str.strip_chars_start("0").replace("", "0")
