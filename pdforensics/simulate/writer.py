"""Write rendered lines as a journal (Journal Export Format + ``journalctl -o json``) and as plain files.

Entries are written in ``__REALTIME_TIMESTAMP`` order across hosts (systemd-journal-remote
needs it), each host with its own seqnum id, boot id and monotonic clock. MESSAGE values with
control bytes (ANSI colours) or invalid UTF-8 use the binary export form and a byte array in
JSON, as journalctl does. journald's rate limiter is modelled by :class:`~model.Hole`: entries
of the unit inside the hole are dropped and ``Suppressed N messages from UNIT`` is logged just
before the unit's next entry. Lines longer than journald's LineMax (48 KiB) are split.

Line frames carry ``prefix`` and ``body`` separately (message = prefix + body) so each long
body is copied once, straight into the output text; the text is written with polars'
``write_csv`` in row segments, with the few Python-rendered entries spliced in between.
"""

from __future__ import annotations

import json
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import polars as pl

from pdforensics.simulate.fast import hex_series
from pdforensics.simulate.model import Host, World

LINE_MAX = 48 * 1024


def write_rows(f: BinaryIO, col: pl.Series, overrides: dict[int, bytes]) -> None:
    """Write each string of ``col`` followed by a newline; rows in ``overrides`` are written as given."""
    start = 0
    frame = col.to_frame()
    for row in sorted(overrides):
        if row > start:
            frame.slice(start, row - start).write_csv(f, include_header=False, quote_style="never")
        f.write(overrides[row])
        start = row + 1
    if start < frame.height:
        frame.slice(start).write_csv(f, include_header=False, quote_style="never")


def export_entry(head: list[tuple[str, str]], fields: tuple[tuple[str, str], ...], message: bytes) -> bytes:
    out = [f"{k}={v}\n".encode() for k, v in head + list(fields)]
    if printable(message):
        out.append(b"MESSAGE=" + message + b"\n")
    else:  # binary-safe form: name, newline, little-endian u64 length, data, newline
        out.append(b"MESSAGE\n" + struct.pack("<Q", len(message)) + message + b"\n")
    return b"".join(out) + b"\n"


def json_entry(head: list[tuple[str, str]], fields: tuple[tuple[str, str], ...], message: bytes) -> bytes:
    obj: dict[str, object] = dict(head + list(fields))
    obj["MESSAGE"] = message.decode() if printable(message) else list(message)
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def printable(b: bytes) -> bool:
    """journalctl's test for the text form: valid UTF-8 without control characters."""
    if any(c < 0x20 or c == 0x7F for c in b):
        return False
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass
class HoleState:
    host_idx: int
    streams: list[int]
    t0_us: int
    t1_us: int
    unit: str
    dropped: int = 0
    reported: bool = False


@dataclass
class JournalSink:
    """Streams ts-sorted chunks into journal.export and journal.json."""

    w: World
    out: Path
    hosts: list[Host]
    formats: tuple[str, ...] = ("export", "json")
    since_us: int | None = None
    until_us: int | None = None
    entries: int = 0
    holes: list[HoleState] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.files = {fmt: open(self.out / f"journal.{fmt}", "wb") for fmt in self.formats}  # noqa: SIM115
        self.seq = [h.seq_base for h in self.hosts]
        self.boot_us = [self.w.t0_us + round((h.skew_s - h.uptime_s) * 1e6) for h in self.hosts]
        names = [h.name for h in self.hosts]
        for hole in self.w.holes:
            if hole.silent:  # dropped before any sink sees the lines (run._render)
                continue
            streams = [
                i
                for i, s in enumerate(self.w.streams)
                if s.host.name == hole.host.name and dict(s.fields).get("_SYSTEMD_UNIT") == hole.unit
            ]
            t0, t1 = (self.w.t0_us + round(x * 1e6) for x in (hole.t0, hole.t1))
            self.holes.append(HoleState(names.index(hole.host.name), streams, t0, t1, hole.unit))
        self.pool = ThreadPoolExecutor(max_workers=2)  # polars releases the GIL: export and json in parallel
        self.heads: tuple[list[str], list[str]] = ([], [])
        self.pending: list = []  # the writes of the previous chunk, overlapping the next chunk's rendering

    def _headers(self) -> tuple[list[str], list[str]]:
        ex, js = [], []
        for s in self.w.streams:
            h = s.host
            fields = [
                ("_BOOT_ID", h.boot_id),
                ("_MACHINE_ID", h.machine_id),
                ("_HOSTNAME", h.name),
                *s.fields,
            ]
            ex.append("".join(f"{k}={v}\n" for k, v in fields))
            js.append(",".join(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=False)}" for k, v in fields))
        return ex, js

    # ---- journald behaviour ------------------------------------------------------------------
    def _apply_holes(self, df: pl.DataFrame, py_rows: list) -> pl.DataFrame:
        for h in self.holes:
            in_unit = pl.col("stream").is_in(h.streams)
            inside = in_unit & (pl.col("t_us") >= h.t0_us) & (pl.col("t_us") < h.t1_us)
            n = df.select(inside.sum()).item()
            if n:
                h.dropped += n
                df = df.filter(~inside)
            if h.reported or not h.dropped:
                continue
            after = df.filter(in_unit & (pl.col("t_us") >= h.t1_us))
            if after.height:
                first = after.row(0, named=True)
                sid = self.w.journald_stream(self.hosts[h.host_idx], h.unit, h.dropped)
                msg = f"Suppressed {h.dropped} messages from {h.unit}"
                py_rows.append((self.w.streams[sid].fields, msg.encode()))
                row = {
                    **first,
                    "stream": sid,
                    "bin": None,
                    "ts": first["ts"] - 1,
                    "prefix": "",
                    "body": msg,
                    "py": len(py_rows) - 1,
                }
                df = pl.concat([df, pl.DataFrame([row], schema=df.schema)]).sort("ts", maintain_order=True)
                h.reported = True
        return df

    def _split_long(self, df: pl.DataFrame) -> pl.DataFrame:
        long = (pl.col("prefix").str.len_bytes() + pl.col("body").str.len_bytes()) > LINE_MAX
        if not df.select(long.any()).item():
            return df
        rows = []
        for r in df.filter(long).iter_rows(named=True):
            data = (r["prefix"] + r["body"]).encode()
            for k in range(0, len(data), LINE_MAX):
                piece = data[k : k + LINE_MAX].decode("utf-8", errors="ignore")
                rows.append({**r, "ts": r["ts"] + k // LINE_MAX, "prefix": "", "body": piece})
        parts = pl.DataFrame(rows, schema=df.schema)
        return pl.concat([df.filter(~long), parts]).sort("ts", maintain_order=True)

    def _py_rows(self, df: pl.DataFrame) -> tuple[pl.DataFrame, list]:
        """Rows whose entry Python renders: raw-bytes messages (and journald's own line)."""
        py_rows: list[tuple[tuple[tuple[str, str], ...], bytes]] = []
        df = df.with_columns(py=pl.lit(None, pl.Int32))
        bins = df.filter(pl.col("bin").is_not_null())
        if bins.height:
            raw = [e.raw for e in self.w.events]
            idx = {}
            for b, s in bins.select("bin", "stream").iter_rows():
                py_rows.append((self.w.streams[s].fields, raw[b]))
                idx[b] = len(py_rows) - 1
            df = df.with_columns(py=pl.col("bin").replace_strict(idx, default=None, return_dtype=pl.Int32))
        return df, py_rows

    # ---- writing -------------------------------------------------------------------------------
    def write(self, df: pl.DataFrame) -> None:
        if not df.height:
            return
        df, py_rows = self._py_rows(df)
        df = self._split_long(self._apply_holes(df, py_rows))
        if not df.height:
            return
        n_hosts = len(self.hosts)
        idx = list(range(n_hosts))
        df = df.with_columns(
            seq=pl.col("host_idx").replace_strict(idx, self.seq, return_dtype=pl.Int64)
            + pl.int_range(pl.len()).over("host_idx"),
            mono=pl.col("ts") - pl.col("host_idx").replace_strict(idx, self.boot_us, return_dtype=pl.Int64),
        )
        for hidx, n in df.group_by("host_idx").len().iter_rows():
            self.seq[hidx] += n
        hid = pl.col("host_idx")
        cursor = pl.concat_str(
            [
                pl.lit("s="),
                hid.replace_strict(idx, [h.seqnum_id for h in self.hosts], return_dtype=pl.String),
                pl.lit(";i="),
                pl.lit(hex_series(df["seq"])),
                pl.lit(";b="),
                hid.replace_strict(idx, [h.boot_id for h in self.hosts], return_dtype=pl.String),
                pl.lit(";m="),
                pl.lit(hex_series(df["mono"])),
                pl.lit(";t="),
                pl.lit(hex_series(df["ts"])),
                pl.lit(";x="),
                pl.lit(hex_series(df["ts"] * 31 + df["seq"] * 2654435761 % (1 << 40), pad=True)),
            ]
        )
        df = df.with_columns(cursor=cursor)
        overrides = self._render_py(df, py_rows)
        if len(self.heads[0]) != len(self.w.streams):  # journald's own streams appear as holes close
            self.heads = self._headers()
        self._wait()  # the previous chunk is on disk before this one starts: order is kept
        self.pending = [self.pool.submit(self._write_format, fmt, df, overrides[fmt]) for fmt in self.formats]
        first, last = df["ts"].min(), df["ts"].max()
        self.since_us = first if self.since_us is None else min(self.since_us, first)
        self.until_us = last if self.until_us is None else max(self.until_us, last)
        self.entries += df.height

    def _write_format(self, fmt: str, df: pl.DataFrame, overrides: dict[int, bytes]) -> None:
        heads = self.heads[0] if fmt == "export" else self.heads[1]
        n = len(heads)
        hdr = pl.col("stream").replace_strict(list(range(n)), heads, default="", return_dtype=pl.String)
        ts, mono = pl.col("ts").cast(pl.String), pl.col("mono").cast(pl.String)
        if fmt == "export":
            text = pl.concat_str(
                [
                    pl.lit("__CURSOR="),
                    pl.col("cursor"),
                    pl.lit("\n__REALTIME_TIMESTAMP="),
                    ts,
                    pl.lit("\n__MONOTONIC_TIMESTAMP="),
                    mono,
                    pl.lit("\n"),
                    hdr,
                    pl.lit("MESSAGE="),
                    pl.col("prefix"),
                    pl.col("body"),
                    pl.lit("\n"),
                ]
            )
        else:
            text = pl.concat_str(
                [
                    pl.lit('{"__CURSOR":"'),
                    pl.col("cursor"),
                    pl.lit('","__REALTIME_TIMESTAMP":"'),
                    ts,
                    pl.lit('","__MONOTONIC_TIMESTAMP":"'),
                    mono,
                    pl.lit('",'),
                    hdr,
                    pl.lit(',"MESSAGE":"'),
                    pl.col("prefix"),
                    pl.lit(_json_escaped(df["body"])),
                    pl.lit('"}'),
                ]
            )
        write_rows(self.files[fmt], df.select(text).to_series(), overrides)

    def _render_py(self, df: pl.DataFrame, py_rows: list) -> dict[str, dict[int, bytes]]:
        over: dict[str, dict[int, bytes]] = {fmt: {} for fmt in self.formats}
        special = df.with_row_index("row").filter(pl.col("py").is_not_null())
        for r in special.iter_rows(named=True):
            fields, msg = py_rows[r["py"]]
            host = self.hosts[r["host_idx"]]
            head = [
                ("__CURSOR", r["cursor"]),
                ("__REALTIME_TIMESTAMP", str(r["ts"])),
                ("__MONOTONIC_TIMESTAMP", str(r["mono"])),
                ("_BOOT_ID", host.boot_id),
                ("_MACHINE_ID", host.machine_id),
                ("_HOSTNAME", host.name),
            ]
            if "export" in over:
                over["export"][r["row"]] = export_entry(head, fields, msg)
            if "json" in over:
                over["json"][r["row"]] = json_entry(head, fields, msg)
        return over

    def _wait(self) -> None:
        for job in self.pending:
            job.result()
        self.pending = []

    def close(self) -> None:
        try:
            self._wait()
        finally:
            self.pool.shutdown()
            for f in self.files.values():
                f.close()


def _json_escaped(body: pl.Series) -> pl.Series:
    """JSON string escaping, applied only to the rows that need it (a double quote or a backslash)."""
    need = body.str.contains(r'["\\]')
    if not need.any():
        return body
    idx = need.arg_true()
    fixed = (
        body.gather(idx).str.replace_all("\\", "\\\\", literal=True).str.replace_all('"', '\\"', literal=True)
    )
    return body.scatter(idx, fixed)


def cri_records(
    part: pl.DataFrame, text: pl.Series, over: dict[int, bytes], size: int
) -> tuple[pl.Series, dict]:
    """The lines (``text`` row for row with ``part``; ``over``: rows given as bytes) as a CRI
    runtime writes a pod's log (containerd, ``/var/log/pods/NS_POD_UID/CONTAINER/N.log``):
    ``<RFC 3339 UTC receive time> <stream> <P|F> <text>``. A line longer than ``size`` bytes
    (containerd's ``max_container_log_line_size``) is cut into ``P`` records of ``size`` bytes, at
    any byte, and a last ``F`` one. SGLang's logger writes to stderr; prints and other programs'
    lines (no SGLang prefix) to stdout."""
    ts = pl.col("ts")
    whole = (ts - ts % 1_000_000).cast(pl.Datetime("us")).dt.strftime("%Y-%m-%dT%H:%M:%S")
    frac = (ts % 1_000_000 * 1000).cast(pl.String).str.pad_start(9, "0").str.strip_chars_end("0")
    head = pl.concat_str(
        [
            whole,
            pl.when(frac != "").then(pl.concat_str([pl.lit("."), frac])).otherwise(pl.lit("")),
            pl.lit("Z "),
            pl.when(pl.col("prefix") != "").then(pl.lit("stderr")).otherwise(pl.lit("stdout")),
            pl.lit(" "),
        ]
    )
    heads = part.select(head).to_series()
    long = (text.str.len_bytes() > size).arg_true().to_list()
    out = {}
    for r in sorted(set(long) | set(over)):
        data = over[r].removesuffix(b"\n") if r in over else text[r].encode()
        pieces = [data[k : k + size] for k in range(0, len(data), size)] or [b""]
        lead = heads[r].encode()
        out[r] = b"".join(
            lead + (b"P " if k < len(pieces) - 1 else b"F ") + piece + b"\n" for k, piece in enumerate(pieces)
        )
    return pl.select(pl.concat_str([pl.lit(heads), pl.lit("F "), pl.lit(text)])).to_series(), out


@dataclass
class PlainSink:
    """One file per (host, unit): what the SGLang process itself printed, local-time prefixes and all.
    With ``cri_line_max``, as a CRI runtime wrote it (see :func:`cri_records`)."""

    w: World
    out: Path
    lines: int = 0
    handles: dict[str, BinaryIO] = field(default_factory=dict)
    cri_line_max: int | None = None

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.target = {
            i: f"{s.host.name}-{s.unit.removesuffix('.service')}.log"
            for i, s in enumerate(self.w.streams)
            if s.plain
        }

    def write(self, df: pl.DataFrame) -> None:
        df = df.filter(pl.col("stream").is_in(list(self.target))).sort("t_us", maintain_order=True)
        if not df.height:
            return
        raw = [e.raw for e in self.w.events]
        df = df.with_columns(file=pl.col("stream").replace_strict(self.target, return_dtype=pl.String))
        for (name,), part in df.group_by("file", maintain_order=True):
            f = self.handles.get(name)
            if f is None:
                f = self.handles[name] = open(self.out / name, "wb")  # noqa: SIM115
            bins = part.with_row_index("row").filter(pl.col("bin").is_not_null())
            over = {r: raw[b] + b"\n" for r, b in bins.select("row", "bin").iter_rows()}
            text = part.select(pl.concat_str(["prefix", "body"])).to_series()
            if self.cri_line_max:
                text, over = cri_records(part, text, over, self.cri_line_max)
            write_rows(f, text, over)
            self.lines += part.height

    def close(self) -> None:
        for f in self.handles.values():
            f.close()
