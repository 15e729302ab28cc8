"""Raw journal fields -> records: unit attribution, selection by unit globs and window, dedup keys.

Every journal-shaped reader (python-systemd, journalctl export, export files, JSON files) builds a
"raw" frame with one String column per name in FIELDS (NULL when the entry lacks the field) plus
`_off` (Int64: byte offset of the entry in its input, NULL when there is none) and hands it to
`journal_records`, so selection and attribution are the same code for all of them.

Repeated fields (one name, several values in one entry): MESSAGE values are joined with "\\n" (the
journal allows it, nothing is lost, and parse already handles multi-line messages); for every
other field the last value wins, which is what `journalctl -o short` shows.
"""

from __future__ import annotations

import re

import polars as pl

from pdforensics.schema import RECORD_SCHEMA, REJECT_SCHEMA
from pdforensics.sources import RecordBatch, Selection
from pdforensics.sources._common import escape_expr

FIELDS: tuple[str, ...] = (
    "__CURSOR",
    "__REALTIME_TIMESTAMP",
    "__SEQNUM",
    "__SEQNUM_ID",
    "MESSAGE",
    "PRIORITY",
    "SYSLOG_IDENTIFIER",
    "_HOSTNAME",
    "_PID",
    "_BOOT_ID",
    "_SYSTEMD_UNIT",
    "_SYSTEMD_USER_UNIT",
    "_SYSTEMD_INVOCATION_ID",
    "UNIT",  # pid 1's lines about a unit
    "INVOCATION_ID",
    "USER_UNIT",  # a user manager's lines about a user unit
    "USER_INVOCATION_ID",
    "COREDUMP_UNIT",
    "OBJECT_SYSTEMD_UNIT",
)
# What the python-systemd reader copies out of _get_all() (cursor and time come from _get_cursor()).
ENTRY_FIELDS: tuple[str, ...] = tuple(f for f in FIELDS if not f.startswith("__"))
# _off: byte offset of the entry in its input; _line: its line number (JSON); _msg_null: MESSAGE was
# JSON null (journalctl -o json without --all prints null for fields over 4096 bytes).
RAW_SCHEMA: dict[str, pl.DataType] = {f: pl.String() for f in FIELDS} | {
    "_off": pl.Int64(),
    "_line": pl.Int64(),
    "_msg_null": pl.Boolean(),
}

JOURNALD_UNIT = "systemd-journald.service"
# journald's rate-limit line; older versions name the unit's cgroup path instead of the unit.
_REGEX_META = re.compile(r"[.^$|?*+()\[\]{}\\]")  # polars' (Rust) regex rejects some escapes re.escape makes
_SUPPRESSED = r"^Suppressed \d+ messages from (?:\S*/)?([^/\s]+)"


def glob_regex(globs: tuple[str, ...]) -> str | None:
    """One anchored regex for unit globs (None = match everything).

    `*` and `?` as in shell globs, `[...]` kept; like `journalctl -u`, a glob without a unit
    suffix also matches `<glob>.service`.
    """
    if not globs or "*" in globs:
        return None
    parts = []
    for g in globs:
        body = _glob_body(g)
        if "." not in g and not g.endswith("*"):
            body += r"(?:\.service)?"
        parts.append(body)
    return "^(?:" + "|".join(parts) + ")$"


def _glob_body(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[" and (j := glob.find("]", i + 2)) > 0:
            inner = glob[i + 1 : j]
            inner = "^" + inner[1:] if inner.startswith("!") else inner
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = j
        else:
            out.append(_REGEX_META.sub(r"\\\g<0>", c))
        i += 1
    return "".join(out)


def ensure_raw(frame: pl.DataFrame) -> pl.DataFrame:
    """Add missing raw columns as NULL and put them in RAW_SCHEMA order and types."""
    missing = [pl.lit(None, dtype=t).alias(n) for n, t in RAW_SCHEMA.items() if n not in frame.columns]
    if missing:
        frame = frame.with_columns(missing)
    return frame.select([pl.col(n).cast(t) for n, t in RAW_SCHEMA.items()])


def _cursor_field(index: int, key: str) -> pl.Expr:
    part = pl.col("_cp").struct.field(f"field_{index}")
    return pl.when(part.str.starts_with(f"{key}=")).then(part.str.slice(2))


def journal_records(
    raw: pl.DataFrame, selection: Selection, *, source: str, fallback_key: str | None = None
) -> RecordBatch:
    """Selected records, rejects (entries without time or key) and counts for one raw frame.

    `fallback_key` names the dedup namespace for entries without a cursor or __SEQNUM (hand-made
    export/JSON files); their seq is then `_off`.
    """
    c = pl.col
    # sd_journal cursors are "s=…;i=…;b=…;m=…;t=…;x=…": one split is ~4x cheaper than regexes.
    raw = ensure_raw(raw).with_columns(_cp=c("__CURSOR").str.split_exact(";", 5))
    cursor = {k: _cursor_field(i, k) for i, k in enumerate("sibmt") if k != "m"}
    pid1 = (c("_PID") == "1") | (c("_SYSTEMD_UNIT") == "init.scope")
    about_unit = pid1 & c("UNIT").is_not_null()
    # All derived columns in one select, then one filter: every pass copies the message column.
    frame = raw.select(
        source=pl.lit(source, dtype=pl.String),
        source_key=pl.coalesce(
            cursor["s"], c("__SEQNUM_ID"), pl.when(c("_off").is_not_null()).then(pl.lit(fallback_key))
        ),
        seq=pl.coalesce(
            cursor["i"].str.to_integer(base=16, strict=False),
            c("__SEQNUM").str.to_integer(strict=False),
            c("_off") if fallback_key is not None else pl.lit(None, dtype=pl.Int64),
        ),
        cursor=c("__CURSOR"),
        ts_us=_realtime(),
        host=c("_HOSTNAME"),
        # The unit a line is *about*: pid 1 / a user manager / a coredump naming a unit; then the
        # user unit a process runs in; then its system unit. Independent of the selection, so a
        # record is the same whichever --unit globs first stored it.
        unit=pl.coalesce(
            pl.when(about_unit).then(c("UNIT")),
            c("USER_UNIT"),
            c("COREDUMP_UNIT"),
            c("OBJECT_SYSTEMD_UNIT"),
            c("_SYSTEMD_USER_UNIT"),
            c("_SYSTEMD_UNIT"),
        ),
        pid=c("_PID").str.strip_chars().str.to_integer(strict=False),
        boot_id=pl.coalesce(c("_BOOT_ID"), cursor["b"]),
        invocation_id=pl.coalesce(
            pl.when(about_unit).then(c("INVOCATION_ID")),
            pl.when(c("USER_UNIT").is_not_null()).then(c("USER_INVOCATION_ID")),
            c("_SYSTEMD_INVOCATION_ID"),
        ),
        syslog_identifier=c("SYSLOG_IDENTIFIER"),
        priority=c("PRIORITY").str.strip_chars().cast(pl.Int8, strict=False),
        message=c("MESSAGE").fill_null(""),
        _msg_null=c("_msg_null").fill_null(False),
        _selected=_selected(selection, pid1),
        _position=pl.coalesce(
            pl.format("line {}", c("_line")), pl.format("byte {}", c("_off")), c("__CURSOR"), pl.lit("?")
        ),
    )
    bad = c("ts_us").is_null() | c("source_key").is_null() | c("seq").is_null()
    frame = frame.with_columns(_bad=bad)
    rejects = frame.filter(c("_bad")).select(
        source=c("source"),
        position=c("_position"),
        reason=pl.when(c("ts_us").is_null())
        .then(pl.lit("entry has no valid __REALTIME_TIMESTAMP"))
        .otherwise(pl.lit("entry has no __CURSOR or __SEQNUM")),
        sample=escape_expr(c("message").str.slice(0, 200)),
    )
    records = frame.filter(c("_selected") & ~c("_bad"))
    return RecordBatch(
        records.select(list(RECORD_SCHEMA)).cast(RECORD_SCHEMA),  # type: ignore[arg-type]
        rejects.cast(REJECT_SCHEMA),  # type: ignore[arg-type]
        skipped=frame.height - rejects.height - records.height,
        null_messages=int(records["_msg_null"].sum()),
    )


def _realtime() -> pl.Expr:
    """µs since the epoch: __REALTIME_TIMESTAMP (decimal digits only: "-5" or "+5" is not a time),
    else the cursor's t= (hex). Needs the `_cp` column (the split cursor)."""
    text = pl.col("__REALTIME_TIMESTAMP").str.strip_chars()
    return pl.coalesce(
        pl.when(text.str.contains(r"^[0-9]{1,18}$")).then(text.str.to_integer(strict=False)),
        _cursor_field(4, "t").str.to_integer(base=16, strict=False),
    )


def _selected(selection: Selection, pid1: pl.Expr) -> pl.Expr:
    """Window and unit globs as one boolean expression over raw fields."""
    c = pl.col
    keep = pl.lit(True)
    w = selection.window
    ts = _realtime()
    if w.since_us is not None:
        keep = keep & (ts >= w.since_us)
    if w.until_us is not None:
        keep = keep & (ts < w.until_us)
    rx = glob_regex(selection.units)
    if rx is not None:
        named = [
            c("_SYSTEMD_UNIT"),
            c("_SYSTEMD_USER_UNIT"),
            pl.when(pid1).then(c("UNIT")),
            c("USER_UNIT"),
            c("COREDUMP_UNIT"),
            c("OBJECT_SYSTEMD_UNIT"),
            pl.when(c("_SYSTEMD_UNIT") == JOURNALD_UNIT).then(c("MESSAGE").str.extract(_SUPPRESSED)),
        ]
        keep = keep & pl.any_horizontal([e.str.contains(rx).fill_null(False) for e in named])
    return keep.fill_null(False)
