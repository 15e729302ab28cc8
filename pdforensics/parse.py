"""Records -> lines + events, vectorised with polars.

The passes over a batch, all column-at-a-time:
1. *prefix*: strip ANSI colour; read SGLang's `[time RANKS]` prefix (or a custom
   `SGLANG_LOGGING_CONFIG_PATH` one) by position; on the lines without it, strip the outer
   prefixes of catalog/prefixes.toml (journalctl, docker-compose, kubectl, CRI, Kibana, Loki,
   CloudWatch/Datadog CSV...), repair mangled SGLang prefixes (a lost `[`, a time-only prefix
   dated from the file's other lines or --date), and read the other clocks (router, mini_lb, UCX).
2. *time*: app time in UTC (zone from --tz, else inferred from journal or outer UTC times, or for
   a plain file from its head's UTC-stamped lines (file_zone, once per file, before its batches),
   else this machine's, and said so in the stats); a line without one inherits the previous line's.
3. *join*: records split in several lines (CRI `P` partials, journald LineMax splits, lines a
   reporter wrapped onto indented lines) are matched as one record.
4. *match*: one Aho-Corasick pass finds each row's catalog anchors; only those candidate rows
   run the entry's regex, in catalog order (first match wins).
5. *extract*: each matched entry's named groups and `fields` become typed event columns;
   anything not in `schema.EVENT_FIELDS` goes to `extra` JSON.
6. *engine*: from what the unit's lines show (PD queue fields, PD-only lines; `unified` for a
   non-PD server), else its name; then continuations and per-source stats (store.source_stats).

Python loops here run over catalog entries and prefix forms, never over lines.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from pdforensics.catalog import Catalog, Entry, load_catalog
from pdforensics.catalog.prefixes import Prefix, Prefixes, load_prefixes
from pdforensics.errors import UsageError
from pdforensics.schema import EVENT_BASE_COLUMNS, EVENT_FIELDS, RECORD_SCHEMA

ANSI = r"\x1b\[[0-9;?]*[A-Za-z]"
# The outer prefixes (journalctl, docker-compose, kubectl, CRI, log-viewer copies), the repairs of
# a mangled SGLang prefix, the non-SGLang clocks and SGLang's own prefix tail are data:
# catalog/prefixes.toml.
# journald splits a stream line longer than LineMax (48K by default) into entries of that size.
LINE_MAX_BYTES = (48 * 1024 - 1, 48 * 1024)
SGLANG_START = r"^\[\d{4}-\d{2}-\d{2}[ T]"  # a line that starts with the SGLang prefix (dated)
# An indented line that is not a traceback's frame, caret or blank: a wrapped piece of the line above.
NOT_WRAP = r"^\s*$|^\s+(?:File \"|\^|~|at |\.\.\.|Traceback|During handling)"
ENGINE_FROM_NAME = [
    ("prefill", r"(?i)prefill"),
    ("decode", r"(?i)decode"),
    ("router", r"(?i)router|gateway|(?:^|[-_.])lb(?:$|[-_.])|mini_lb"),
]
# Lines that continue the previous record of the same stream (multi-line log records).
CONTINUATION = (
    r"^(?:\s|Traceback \(most recent call last\)|During handling of the above exception"
    r"|The above exception was the direct cause|[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b(?::|$))"
)
TIME_FMT = "%Y-%m-%d %H:%M:%S"


def local_zone() -> str:
    """This machine's zone as polars understands it: $TZ, the /etc/localtime link, else a fixed offset."""
    env = os.environ.get("TZ", "").lstrip(":")
    if env and _valid_zone(env):
        return env
    link = Path("/etc/localtime")
    if link.is_symlink():
        target = str(link.resolve())
        if "zoneinfo/" in target and _valid_zone(name := target.split("zoneinfo/", 1)[1]):
            return name
    offset = datetime.now(UTC).astimezone().utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds() // 60)
    return f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def checked_zone(tz: str | None) -> None:
    """--tz as the parser reads it (local, UTC, an IANA name, a fixed offset such as +08:00), or a
    usage error naming the closest zone, before anything is read."""
    if tz is None or tz.lower() == "local" or _valid_zone(tz):
        return
    import difflib
    import zoneinfo

    close = difflib.get_close_matches(tz, sorted(zoneinfo.available_timezones()), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise UsageError(
        f"--tz: unknown time zone {tz!r}{hint}: an IANA name such as Asia/Shanghai, a fixed offset such as +08:00, or UTC"
    )


def _valid_zone(name: str) -> bool:
    try:
        pl.Series([0]).cast(pl.Datetime("us")).dt.replace_time_zone(name)
    except pl.exceptions.PolarsError:
        return False
    return True


LOCAL_TZ = local_zone()
US = 1_000_000


@dataclass
class ParseOptions:
    catalog: Catalog
    tz: str | None = None  # zone of zone-less prefixes; None = infer from journal times, else local zone
    prefixes: Prefixes = field(default_factory=load_prefixes)
    date: str | None = None  # YYYY-MM-DD for time-only prefixes no other line of the file dates


@dataclass(frozen=True)
class FileZone:
    """A plain file's UTC offset as its own head settles it (see file_zone)."""

    offset_us: int | None  # local minus UTC; None: its pairs disagree, so none is guessed
    how: str  # what settled it, or how the pairs disagree (for the ingest summary)


@dataclass
class StreamCarry:
    """What a batch hands to the next one of the same ingest (per stream)."""

    last_ts: dict[str, int] = field(default_factory=dict)  # source_key -> last known ts_us
    last_head: dict[str, int] = field(default_factory=dict)  # stream key -> line_id of last head
    host_offsets_us: dict[str, int] = field(default_factory=dict)  # host -> local minus UTC
    # stream key -> whether its last prefixed/recognised line ended with ':' and so opened a block
    # of loose lines (read only for streams still in last_head: clearing that ends the block too)
    open_block: dict[str, bool] = field(default_factory=dict)
    # hash of a unit (host, unit) -> the votes its lines cast so far (prefill, decode, plain
    # prefill, plain decode; see _engine), the last PD vote, and the engine they gave
    unit_votes: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    unit_last: dict[int, str] = field(default_factory=dict)
    unit_engine: dict[int, str] = field(default_factory=dict)  # the engine its lines showed so far
    last_date: dict[str, str] = field(default_factory=dict)  # source_key -> its last dated line's time
    # source_key -> its last zone-less local time, and whether that line was in the second pass
    # of a repeated (DST) hour: the next batch goes on resolving the hour by file order
    last_local: dict[str, tuple[int, bool]] = field(default_factory=dict)
    host_offset_how: dict[str, str] = field(default_factory=dict)  # host -> what its offset came from
    # source (a plain file's label) -> the offset its own head settled before any batch was parsed
    # (file_zone): set once per file by ingest, read by every batch, never changed by one
    file_zones: dict[str, FileZone] = field(default_factory=dict)
    # record stream (see _join_records) -> the text of its split record so far, when the batch
    # ended before the record did (a CRI `P` record, a journald LineMax piece): the next batch
    # joins its continuation to it. Honoured while last_head holds anything: ingest clears that
    # when it skips stored records, and a record must not be joined across them.
    pending: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------- prefix pass

# Columns the prefix pass adds for the later ones (NULL where no form said anything).
_PREFIX_COLS: dict[str, pl.DataType] = {
    "_prefix": pl.String(),  # the forms found, outermost first: "cri", "journalctl_short+docker_compose"
    "_o_us": pl.Int64(),  # the outer prefix's time: UTC us when _o_utc, else a zone-less wall clock
    "_o_utc": pl.Boolean(),
    "_o_prec": pl.Int32(),
    "_partial": pl.Boolean(),  # the record continues in the next one of its stream (CRI `P`)
    "_rstream": pl.String(),  # the record's stream within its file (CRI stdout / stderr)
    "_dated": pl.String(),  # time-only prefix: where its date came from (lines | --date)
}


def _strip_prefixes(df: pl.DataFrame, opts: ParseOptions, carry: StreamCarry) -> pl.DataFrame:
    df = df.with_columns(pl.col("message").fill_null("").alias("_clean"))
    # The expensive clean-ups run only when a batch needs them, on the lines that need them
    # (one scan for both: most batches have neither).
    needs = df["_clean"].str.contains_any(["\x1b", "\r"])
    if needs.any():
        some = pl.when(needs).then(pl.col("_clean"))  # NULL: nothing to clean
        if df.select(some.str.contains("\x1b", literal=True).any()).item():
            df = df.with_columns(pl.coalesce(some.str.replace_all(ANSI, ""), "_clean").alias("_clean"))
        if df.select(some.str.contains("\r", literal=True).any()).item():
            df = df.with_columns(pl.coalesce(some.str.strip_chars_end("\r"), "_clean").alias("_clean"))
    forms = opts.prefixes
    df = df.with_columns(pl.lit(None, t).alias(n) for n, t in _PREFIX_COLS.items())
    bracket = df["_clean"].str.starts_with("[")
    # Split records are made whole first: no form is tried on a continuation's own text.
    df, joined = _join_records(df, forms, carry, ~bracket)
    if joined:  # their text is what the forms read now
        bracket = df["_clean"].str.starts_with("[")
    # (`[pod/..] ` and time-only exports take the other way: slower, as correct.)
    if (~bracket).sum() * 2 > df.height:
        # An export (journalctl text, CRI, a log viewer's copy): most lines carry an outer prefix.
        # The forms run on the whole batch first, then the SGLang pass once.
        df = _repairs(_outer_prefixes(df, forms), forms.of_kind("repair"), with_date=False)
    df = _sglang_prefix(df, forms.sglang.tail)
    if not df["_has_prefix"].all():
        # Only the lines without SGLang's prefix (a few per file, or all of an export) try the forms.
        before = df["_prefix"]
        df = _outer_prefixes(df, forms, fresh=~pl.col("_has_prefix") & pl.col("_prefix").is_null())
        rest = df.with_columns(before.alias("_before")).filter(~pl.col("_has_prefix"))
        rest = _repairs(rest, forms.of_kind("repair"), with_date=False)
        redo = pl.col("_prefix").ne_missing(pl.col("_before"))  # a form changed the line: read it again
        if rest.select(redo.any()).item():  # else no form matched: nothing to write back
            redone = _sglang_prefix(rest.filter(redo).drop(_SGLANG_COLS), forms.sglang.tail)
            df = _write_back(df, redone.select(pl.all().exclude(*_UNTOUCHED, "_before")))
        df = _time_only(df, forms, opts, carry)
    else:
        _remember_dates(df, carry)
    df = _other_clocks(df, forms.of_kind("clock"))
    if joined:  # the record's own form (CRI) is the outermost one the line carried
        df = df.with_columns(
            pl.when(pl.col("_rprefix").is_null())
            .then(pl.col("_prefix"))
            .otherwise(pl.concat_str(["_rprefix", "_prefix"], separator="+", ignore_nulls=True))
            .alias("_prefix")
        )
    return df.drop("_clean", "_rprefix", strict=False)


# A split record's text waits for the next batch up to this size; a longer one (a stream of `P`
# records that never ends) is dropped there, and its continuation read alone.
PENDING_MAX_CHARS = 1 << 22


def _join_records(
    df: pl.DataFrame, forms: Prefixes, carry: StreamCarry, unbracketed: pl.Series
) -> tuple[pl.DataFrame, bool]:
    """Records split over several lines made whole before any prefix is read: a CRI `P` record's
    text is joined with the records that follow it in its stream (same file, same stdout/stderr)
    up to its `F` record, whatever their text looks like (digits and a comma are not a CloudWatch
    line there: prefix forms never win over a pending continuation); a journald entry cut at
    LineMax with the entries that follow it in its stream.

    The record forms (outer forms with a `partial` group) are read here, from the lines they start
    that no earlier outer form starts: the form goes to `_rprefix` (merged into `_prefix` at the
    end), the rest of the line to `_clean`. They are tried on the lines that do not start with `[`
    (`unbracketed`: SGLang's own prefix is on most lines of most files, and no record form starts
    with it; a regex over every line would cost a tenth of the parse).

    The record's LAST piece (the one that completes it) holds its whole text (`_rhold`); the
    pieces before it are stored with an empty text: the first (`_rstart`) as the record's head,
    the others as its continuations (`_rpiece`, like the holder). Each line is then parsed from
    itself and the lines before it only, so where a batch ends changes nothing: a record the batch
    ends inside leaves its text in `carry.pending`, and the next batch's last piece of it holds it.
    (Half a line never becomes an event: a room number cut short would be another request.)
    Returns the frame and whether any line's text changed.
    """
    df = df.with_columns(
        pl.lit(None, pl.String).alias("_rprefix"),
        pl.lit(False).alias("_rstart"),
        pl.lit(False).alias("_rpiece"),
        pl.lit(False).alias("_rhold"),
        pl.lit(False).alias("_rjoins"),
        pl.lit(False).alias("_rtaken"),
        unbracketed.alias("_rcand"),
    )
    outer = forms.of_kind("outer")
    for i, form in enumerate(outer):
        if "partial" not in form.groups or not unbracketed.any():
            continue
        cand = pl.when(pl.col("_rcand") & ~pl.col("_rtaken")).then(pl.col("_clean"))
        df = df.with_columns(cand.str.contains(form.pattern).fill_null(False).alias("_hit"))
        if not df["_hit"].any():
            continue
        for earlier in outer[:i]:  # a form before it in file order is the outermost there
            other = pl.when("_hit").then(pl.col("_clean")).str.contains(earlier.pattern).fill_null(False)
            df = df.with_columns((pl.col("_hit") & ~other).alias("_hit"))
        df = df.with_columns(pl.col("_rtaken") | pl.col("_hit"))
        df = _apply_outer(df, form, forms.label_keys)
    line_max = pl.col("message").str.len_bytes().is_between(*LINE_MAX_BYTES).fill_null(False)
    df = df.with_columns(
        pl.when("_rtaken").then(pl.col("_partial").fill_null(False)).otherwise(line_max).alias("_rjoins"),
        pl.col("_prefix").alias("_rprefix"),
    ).with_columns(pl.lit(None, pl.String).alias("_prefix"), pl.lit(None, pl.Boolean).alias("_partial"))
    df = df.drop("_rtaken", "_rcand")
    taken = df["_rprefix"].null_count() < df.height
    # The carry is kept while the chain of batches holds (see StreamCarry.pending).
    if not carry.last_head:
        carry.pending.clear()
    seeds = dict(carry.pending)
    if not seeds and not df["_rjoins"].any():
        return df, taken
    # A record's stream: its file or process, and within it its CRI stream.
    key = pl.concat_str(
        [pl.col(c).cast(pl.String).fill_null("") for c in ("source_key", "host", "unit", "pid", "_rstream")],
        separator="\x1f",
    )
    df = df.with_columns(key.alias("_rkey"))
    carried = (
        pl.col("_rkey").replace_strict(seeds, default=None, return_dtype=pl.String)
        if seeds
        else pl.lit(None, pl.String)
    )
    # A piece: the record before it in its stream continues (the batch's first: an earlier batch's).
    cont = pl.coalesce(pl.col("_rjoins").shift(1).over("_rkey"), carried.is_not_null())
    df = df.with_columns(cont.alias("_rpiece"))
    df = df.with_columns((~pl.col("_rpiece") & pl.col("_rjoins")).alias("_rstart"))
    first = pl.coalesce(
        pl.when(~pl.col("_rpiece")).then(pl.col("_row")).forward_fill().over("_rkey"),
        pl.col("_row").first().over("_rkey"),  # a record begun in an earlier batch
    )
    chain = df.filter(pl.col("_rpiece") | pl.col("_rstart")).select(
        "_row", first.alias("_first"), "_rkey", "_clean", "_rjoins", "_rpiece"
    )
    records = chain.group_by("_first", maintain_order=True).agg(
        pl.col("_clean").str.join(""),
        pl.col("_row").last().alias("_last"),
        pl.col("_rjoins").last().alias("_open"),  # the batch ends inside it
        pl.col("_rkey").first(),
        pl.col("_rpiece").first().alias("_carried"),
    )
    if seeds:
        before = pl.col("_rkey").replace_strict(seeds, default="", return_dtype=pl.String)
        records = records.with_columns(
            pl.when("_carried").then(pl.concat_str([before, "_clean"])).otherwise("_clean").alias("_clean")
        )
    # Each stream of the batch took its carried record; what the batch ends inside waits.
    for k in set(df["_rkey"].unique().to_list()) & set(seeds):
        del carry.pending[k]
    waiting = records.filter("_open")
    carry.pending.update(
        {
            k: text
            for k, text in waiting.select("_rkey", "_clean").iter_rows()
            if len(text) <= PENDING_MAX_CHARS
        }
    )
    done = records.filter(~pl.col("_open"))
    blank = pl.when(pl.col("_rpiece") | pl.col("_rstart")).then(pl.lit("")).otherwise(pl.col("_clean"))
    clean = df.select(blank).to_series().clone()  # clone: scatter writes in place
    hold = pl.repeat(False, df.height, eager=True)
    if done.height:
        clean = clean.scatter(done["_last"], done["_clean"])
        hold = hold.scatter(done["_last"], True)
    df = df.with_columns(clean.alias("_clean"), hold.alias("_rhold"))
    return df.drop("_rkey"), True


def _write_back(df: pl.DataFrame, part: pl.DataFrame) -> pl.DataFrame:
    """`part` (rows of df, any order, by _row) written over df's rows: a scatter per column,
    cheaper than re-sorting every column of the batch for a few changed rows. df is the whole
    batch: its row i has _row i."""
    idx = part["_row"]
    cols = [c for c in part.columns if c != "_row"]
    # clone: scatter writes in place, and df's columns may be the caller's records
    return df.with_columns(
        df[c].cast(part[c].dtype).clone().scatter(idx, part[c]) for c in cols if c in df.columns
    )


# What no prefix form changes (the write-back skips them).
_UNTOUCHED = ["source", "source_key", "seq", "cursor", "ts_us", "boot_id", "invocation_id",
              "syslog_identifier", "priority", "message", "line_id"]  # fmt: skip
_SGLANG_COLS = ["ts", "frac", "dp_rank", "pp_rank", "tp_rank", "ep_rank", "body", "_has_prefix"]


def _outer_prefixes(df: pl.DataFrame, forms: Prefixes, fresh: pl.Expr | None = None) -> pl.DataFrame:
    """Strip each outer form (file order: outermost first) from the lines it matches; `fresh`:
    the lines no form was tried on yet (the others were, before the SGLang pass).

    The forms run on the lines still open (not starting with an SGLang prefix), a shrinking
    subset; the lines they changed are written back by position.
    """
    is_open = ~pl.col("_clean").str.contains(SGLANG_START)
    work = df.select(
        "_row",
        "_clean",
        "host",
        "unit",
        "pid",
        *_PREFIX_COLS,
        *([fresh.alias("_fresh")] if fresh is not None else []),
    )
    if fresh is not None:
        work = work.filter("_fresh").drop("_fresh")
    work = work.filter(is_open)
    done: list[pl.DataFrame] = []
    for form in forms.of_kind("outer"):
        if work.height == 0:
            break
        hit = work["_clean"].str.contains(form.pattern)
        if not hit.any():
            continue
        work = _apply_outer(work.with_columns(hit.alias("_hit")), form, forms.label_keys)
        still = work.select(is_open).to_series()
        done.append(work.filter(~still))
        work = work.filter(still)
    changed = pl.concat([*done, work]).filter(pl.col("_prefix").is_not_null())
    return _write_back(df, changed) if changed.height else df


def _apply_outer(df: pl.DataFrame, form: Prefix, label_keys: dict[str, tuple[str, ...]]) -> pl.DataFrame:
    hit = pl.col("_hit")
    m = pl.when(hit).then(pl.col("_clean")).str.extract_groups(f"(?P<_all>{form.pattern})")
    df = df.with_columns(m.alias("_m"))
    g = set(form.groups)
    f = pl.col("_m").struct.field
    rest = pl.col("_clean").str.slice(f("_all").str.len_chars())
    if form.unquote:  # a CSV field: "text with ""quotes""" -> text with "quotes"
        quoted = rest.str.starts_with('"') & rest.str.ends_with('"') & (rest.str.len_chars() >= 2)
        rest = pl.when(quoted).then(rest.str.slice(1).str.slice(0, rest.str.len_chars() - 2)).otherwise(rest)
        rest = rest.str.replace_all('""', '"', literal=True)
    host, unit = (f(n) if n in g else pl.lit(None, pl.String) for n in ("host", "unit"))
    if "labels" in g:
        host = pl.coalesce(host, _label(f("labels"), label_keys.get("host", ())))
        unit = pl.coalesce(unit, _label(f("labels"), label_keys.get("unit", ())))
    cols = [
        pl.when(hit).then(rest).otherwise(pl.col("_clean")).alias("_clean"),
        pl.when(
            hit & host.is_not_null() & (pl.col("host").is_in(["local", "unknown"]) | pl.col("host").is_null())
        )
        .then(host)
        .otherwise(pl.col("host"))
        .alias("host"),
        pl.when(hit & unit.is_not_null() & (unit != "")).then(unit).otherwise(pl.col("unit")).alias("unit"),
        pl.when(hit)
        .then(pl.concat_str([pl.col("_prefix"), pl.lit(form.name)], separator="+", ignore_nulls=True))
        .otherwise(pl.col("_prefix"))
        .alias("_prefix"),
    ]
    if "pid" in g:
        cols.append(pl.coalesce(pl.col("pid"), f("pid").cast(pl.Int64, strict=False)).alias("pid"))
    if "partial" in g:
        cols.append(pl.when(hit).then(f("partial") == "P").otherwise(pl.col("_partial")).alias("_partial"))
    if "stream" in g:
        cols.append(pl.when(hit).then(f("stream")).otherwise(pl.col("_rstream")).alias("_rstream"))
    when_us, utc, prec = _form_time(form, f)
    if when_us is not None:
        new = hit & pl.col("_o_us").is_null() & when_us.is_not_null()  # the outermost time is kept
        cols += [
            pl.when(new).then(when_us).otherwise(pl.col("_o_us")).alias("_o_us"),
            pl.when(new).then(utc).otherwise(pl.col("_o_utc")).alias("_o_utc"),
            pl.when(new).then(prec).otherwise(pl.col("_o_prec")).alias("_o_prec"),
        ]
    return df.with_columns(cols).drop("_m", "_hit")


def _label(labels: pl.Expr, keys: tuple[str, ...]) -> pl.Expr:
    """The value of the first of `keys` in label columns: `{pod="x", ...}`, `pod: x`, `pod=x`."""
    if not keys:
        return pl.lit(None, pl.String)
    names = "|".join(re.escape(k) for k in keys)
    return labels.str.extract(rf'(?:^|[\t{{,\s])(?:{names})(?:=|: ?)"?([^",}}\t\s]+)', 1)


def _form_time(form: Prefix, f) -> tuple[pl.Expr | None, pl.Expr, pl.Expr]:
    """(us, is_utc, precision) of a form's time groups; us is None when the form has none."""
    g = set(form.groups)
    frac = f("frac") if "frac" in g else pl.lit(None, pl.String)
    frac_us = frac.str.pad_end(6, "0").str.slice(0, 6).cast(pl.Int64, strict=False).fill_null(0)
    n = frac.str.len_chars()
    prec = pl.when(frac.is_null()).then(US).when(n <= 3).then(1000).otherwise(1).cast(pl.Int32)
    parts: list[tuple[pl.Expr, pl.Expr, pl.Expr]] = []
    if "epoch_ms" in g:
        parts.append(
            (f("epoch_ms").cast(pl.Int64, strict=False) * 1000, pl.lit(True), pl.lit(1000, pl.Int32))
        )
    if "epoch_s" in g:
        parts.append((f("epoch_s").cast(pl.Int64, strict=False) * US + frac_us, pl.lit(True), prec))
    if "ts" in g and form.time_format:
        ts = f("ts") if "T" in form.time_format else f("ts").str.replace("T", " ", literal=True)
        secs = ts.str.strptime(pl.Datetime("us"), form.time_format, strict=False).dt.epoch("us")
        wall = secs + frac_us
        if "tzoff" in g:
            off = f("tzoff")
            sign = pl.when(off.str.starts_with("-")).then(-1).otherwise(1)
            hhmm = off.str.extract(r"(\d{2}):?(\d{2})$", 1).cast(pl.Int64) * 60 + off.str.extract(
                r"(\d{2}):?(\d{2})$", 2
            ).cast(pl.Int64)
            offset_us = pl.when(off == "Z").then(0).otherwise(sign * hhmm * 60 * US)
            utc = off.is_not_null() | pl.lit(form.zone == "utc")
            wall = pl.when(off.is_not_null()).then(wall - offset_us).otherwise(wall)
        else:
            utc = pl.lit(form.zone == "utc")
        parts.append((wall, utc, prec))
    if not parts:
        return None, pl.lit(None, pl.Boolean), pl.lit(None, pl.Int32)
    us = pl.coalesce([p[0] for p in parts])
    pick_utc = pl.lit(None, pl.Boolean)
    pick_prec = pl.lit(None, pl.Int32)
    for p_us, p_utc, p_prec in reversed(parts):
        pick_utc = pl.when(p_us.is_not_null()).then(p_utc).otherwise(pick_utc)
        pick_prec = pl.when(p_us.is_not_null()).then(p_prec).otherwise(pick_prec)
    return us, pick_utc, pick_prec


def _repairs(df: pl.DataFrame, forms: tuple[Prefix, ...], with_date: bool) -> pl.DataFrame:
    """Mangled SGLang prefixes made whole (`insert` in front) so the SGLang pass reads them."""
    for form in forms:
        if ("{date}" in form.insert) != with_date:
            continue
        text = pl.when(~pl.col("_clean").str.contains(SGLANG_START)).then(pl.col("_clean"))
        hit = text.str.contains(form.pattern).fill_null(False)
        if with_date:
            hit = hit & pl.col("_date").is_not_null()
        if not df.select(hit.any()).item():
            continue
        lead, _, tail = form.insert.partition("{date}")
        if with_date:  # "[{date} " + the line without its "[" -> "[2026-05-16 03:51:54] ..."
            fixed = pl.concat_str(
                [pl.lit(lead), pl.col("_date"), pl.lit(tail), pl.col("_clean").str.slice(1)]
            )
        else:
            fixed = pl.concat_str([pl.lit(form.insert), pl.col("_clean")])
        df = df.with_columns(
            pl.when(hit).then(fixed).otherwise(pl.col("_clean")).alias("_clean"),
            pl.when(hit)
            .then(pl.concat_str([pl.col("_prefix"), pl.lit(form.name)], separator="+", ignore_nulls=True))
            .otherwise(pl.col("_prefix"))
            .alias("_prefix"),
        )
    return df


def _time_only(df: pl.DataFrame, forms: Prefixes, opts: ParseOptions, carry: StreamCarry) -> pl.DataFrame:
    """`[03:51:54] body`: dated from the file's earlier lines, else --date, else its later lines."""
    dated = [p for p in forms.of_kind("repair") if "{date}" in p.insert]
    if not dated:
        return df
    loose = df.filter(~pl.col("_has_prefix")).select("_clean")
    if not loose.select(
        pl.any_horizontal(pl.col("_clean").str.contains(p.pattern) for p in dated).any()
    ).item():
        return _remember_dates(df, carry)
    own = pl.coalesce(
        pl.when("_has_prefix").then(pl.col("ts")),
        pl.col("_o_us").cast(pl.Datetime("us")).dt.strftime("%Y-%m-%d %H:%M:%S"),
    )  # "YYYY-MM-DD HH:MM:SS" of the lines that have a date
    seed = pl.col("source_key").replace_strict(carry.last_date, default=None, return_dtype=pl.String)
    before = pl.coalesce(own.forward_fill().over("source_key"), seed)
    # Past midnight: a time more than 12 h before the last dated line's is the next day's.
    secs = [
        e.str.slice(i, 2).cast(pl.Int64, strict=False)
        for e in (before.str.slice(11, 8), pl.col("_clean").str.slice(1, 8))
        for i in (0, 3, 6)
    ]
    last_s, line_s = (secs[0] * 3600 + secs[1] * 60 + secs[2]), (secs[3] * 3600 + secs[4] * 60 + secs[5])
    day = before.str.slice(0, 10)
    next_day = day.str.strptime(pl.Date, "%Y-%m-%d", strict=False).dt.offset_by("1d").dt.strftime("%Y-%m-%d")
    before_date = pl.when((last_s - line_s) > 43_200).then(next_day).otherwise(day)
    after = own.backward_fill().over("source_key").str.slice(0, 10)
    date = pl.coalesce(before_date, pl.lit(opts.date, pl.String), after)
    how = (
        pl.when(before.is_not_null())
        .then(pl.lit("earlier lines"))
        .when(pl.lit(opts.date is not None))
        .then(pl.lit("--date"))
        .otherwise(pl.lit("later lines"))
    )
    df = df.with_columns(date.alias("_date"), how.alias("_date_how"), pl.col("_prefix").alias("_before"))
    df = _repairs(df, tuple(dated), with_date=True)
    fixed = pl.col("_prefix").ne_missing(pl.col("_before"))
    redo = df.filter(fixed).drop(_SGLANG_COLS)
    redo = _sglang_prefix(redo, forms.sglang.tail).with_columns(pl.col("_date_how").alias("_dated"))
    df = _write_back(df, redo.select("_row", *_SGLANG_COLS, "_dated", "_prefix", "_clean"))
    df = _remember_dates(df, carry)
    return df.drop("_date", "_date_how", "_before")


def _remember_dates(df: pl.DataFrame, carry: StreamCarry) -> pl.DataFrame:
    """Each file's last date in the batch (a file with no dated line keeps the one it had)."""
    keys, ts = df["source_key"], df["ts"]
    if keys.len() and keys[0] == keys[-1] and ts[-1] is not None:  # one file, ending dated: no group_by
        carry.last_date[keys[-1]] = ts[-1]
        return df
    last = (
        df.select("source_key", "ts")
        .group_by("source_key")
        .agg(pl.col("ts").drop_nulls().last().str.slice(0, 10))
    )
    carry.last_date.update({k: d for k, d in last.iter_rows() if d is not None})
    return df


def _sglang_prefix(df: pl.DataFrame, tail: str) -> pl.DataFrame:
    """`[YYYY-MM-DD HH:MM:SS(.ms)( DPn TPn ...)] body` by position, not regex: it is on most lines."""
    clean = pl.col("_clean")
    df = df.with_columns(clean.str.find("]", literal=True).alias("_close"))
    df = df.with_columns(
        clean.str.slice(1, 19).alias("ts"), clean.str.slice(20, pl.col("_close") - 20).alias("_tail")
    )
    valid = (
        clean.str.starts_with("[")
        & pl.col("ts").str.strptime(pl.Datetime("us"), TIME_FMT, strict=False).is_not_null()
        & ((pl.col("_tail") == "") | pl.when(pl.col("_tail") != "").then("_tail").str.contains(tail))
    )
    df = df.with_columns(valid.alias("_has_prefix"))
    # NULL without a prefix, or with nothing after the seconds (most lines): the regexes skip it
    t = pl.when(pl.col("_has_prefix") & (pl.col("_tail") != "")).then("_tail")
    # The body starts after the prefix, less one space; sliced once (each slice copies every body).
    start = pl.when("_has_prefix").then(pl.col("_close") + 1).otherwise(0)
    df = df.with_columns(
        pl.when("_has_prefix").then("ts").alias("ts"),
        t.str.extract(r"^[.,](\d{1,6})", 1).alias("frac"),
        *[
            t.str.extract(rf"(?:^| ){n}(\d+)", 1).cast(pl.Int16).alias(f"{n.lower()}_rank")
            for n in ("DP", "PP", "TP", "EP")
        ],
        start.alias("_start"),
        clean.str.slice(start, 1).alias("_next"),
    )
    # Custom dictConfig formats add adjacent groups: `[ts][file.py:42][INFO]: body`.
    custom = pl.col("_has_prefix") & (pl.col("_next") == "[")
    skip = pl.col("_start") + (pl.col("_next") == " ").cast(pl.Int64)
    df = df.with_columns(clean.str.slice(skip).alias("body"))
    if df.select(custom.any()).item():
        groups = pl.col("body").str.replace(r"^(?:\[[^\]]*\])*:? ?", "").str.strip_prefix(" ")
        df = df.with_columns(pl.when(custom).then(groups).otherwise("body").alias("body"))
    return df.drop("_tail", "_close", "_start", "_next")


def _other_clocks(df: pl.DataFrame, forms: tuple[Prefix, ...]) -> pl.DataFrame:
    """Times of non-SGLang formats read in the body (router UTC, mini_lb local, UCX epoch...).

    Tried only on the lines without an SGLang time (few, in most files), written back by position.
    """
    cols = {"_c_us": pl.Int64(), "_c_utc": pl.Boolean(), "_c_prec": pl.Int32()}
    df = df.with_columns(pl.lit(None, t).alias(n) for n, t in cols.items())
    part = df.filter(pl.col("ts").is_null()).select("_row", "body", "_prefix", *cols)
    hit_any = False
    for form in forms:
        text = pl.when(pl.col("_c_us").is_null()).then(pl.col("body"))
        hit = text.str.contains(form.pattern).fill_null(False)
        if part.height == 0 or not part.select(hit.any()).item():
            continue
        part = part.with_columns(hit.alias("_hit"))
        part = part.with_columns(
            pl.when("_hit").then(pl.col("body")).str.extract_groups(form.pattern).alias("_m")
        )
        when_us, utc, prec = _form_time(form, pl.col("_m").struct.field)
        if when_us is None:
            continue
        hit_any = True
        part = part.with_columns(
            pl.when("_hit").then(when_us).otherwise(pl.col("_c_us")).alias("_c_us"),
            pl.when("_hit").then(utc).otherwise(pl.col("_c_utc")).alias("_c_utc"),
            pl.when("_hit").then(prec).otherwise(pl.col("_c_prec")).alias("_c_prec"),
            pl.when("_hit")
            .then(pl.concat_str([pl.col("_prefix"), pl.lit(form.name)], separator="+", ignore_nulls=True))
            .otherwise(pl.col("_prefix"))
            .alias("_prefix"),
        ).drop("_m", "_hit")
    return _write_back(df, part.select("_row", "_prefix", *cols)) if hit_any else df


def _naive_us(df: pl.DataFrame) -> pl.Expr:
    """The SGLang prefix time as microseconds of a zone-less wall clock (frac padded to us)."""
    secs = pl.col("ts").str.strptime(pl.Datetime("us"), TIME_FMT, strict=False).dt.epoch("us")
    frac = pl.col("frac").fill_null("").str.pad_end(6, "0").str.slice(0, 6)
    return secs + pl.when(pl.col("frac").is_null()).then(0).otherwise(frac.cast(pl.Int64, strict=False))


def _precision(df: pl.DataFrame) -> pl.Expr:
    n = pl.col("frac").str.len_chars()
    return (
        pl.when(pl.col("ts").is_null())
        .then(pl.coalesce("_c_prec", "_o_prec"))
        .when(pl.col("frac").is_null())
        .then(US)
        .when(n <= 3)
        .then(1000)
        .otherwise(1)
        .cast(pl.Int32)
    )


def _infer_offsets(df: pl.DataFrame, carry: StreamCarry) -> dict[str, int]:
    """Per host, local-minus-UTC from pairs of a UTC time (the journal's, or a UTC outer prefix
    such as CRI's) and the same line's zone-less prefix, rounded to 15 minutes."""
    pairs = df.filter(pl.col("_pair_utc").is_not_null() & pl.col("_naive").is_not_null())
    if pairs.height:
        est = pairs.group_by("host").agg(
            (pl.col("_naive") - pl.col("_pair_utc")).median().alias("d"), pl.col("ts_us").is_not_null().any()
        )
        quarter = 900 * US
        for host, d, journal in est.iter_rows():
            if host not in carry.host_offsets_us and d is not None:
                carry.host_offsets_us[host] = round(d / quarter) * quarter
                carry.host_offset_how[host] = (
                    "journal receive times" if journal else "UTC times of an outer prefix"
                )
    return carry.host_offsets_us


# A line stamped in UTC only (UCX's `[epoch]`) and the zone-less time of the timed line before or
# after it are a pair when they are this close to a whole quarter hour apart (lines logged within a
# minute of each other); farther, the two lines are apart in time and say nothing of the zone.
_NEIGHBOUR_SLACK_US = 60 * US
# UTC offsets (minutes) IANA zones use, DST included: whole hours from -12 to +14 and these. A pair
# rounded elsewhere (-00:15: a UCX line a quarter hour after a UTC host's last line) is two lines
# apart in time, not a zone.
_ZONE_OFFSETS_MIN = frozenset(
    [*range(-720, 841, 60), -570, -210, -150, 210, 270, 330, 345, 390, 525, 570, 630, 765, 825]
)


def file_zone(records: pl.DataFrame, opts: ParseOptions) -> FileZone | None:
    """A plain file's UTC offset as its head (`records`: its first lines) settles it, once, before
    any batch of the file is parsed (a batch's own lines never change it: the same file gives the
    same rows read in one go, in batches, or resumed after it grew).

    Each line stamped in UTC only (UCX's `[epoch]`) pairs with the zone-less time of the timed line
    before it and of the one after it; a difference within a minute of a quarter hour that some
    zone uses is rounded to it. One offset: FileZone(it). Several: FileZone(None, how they disagree):
    nothing is guessed, the file is read as it would be without them. None: --tz names the zone,
    the file's lines pair UTC and zone-less times themselves (a UTC outer prefix such as CRI's:
    _infer_offsets reads those, as the prefix forms say), or there is no pair."""
    if opts.tz is not None or not records.height:
        return None
    df = records.select(list(RECORD_SCHEMA)).with_row_index("_row")
    df = df.with_columns(pl.col("_row").cast(pl.Int64).alias("line_id"))
    df = _time_columns(_strip_prefixes(df, opts, StreamCarry()))
    if df.select((pl.col("_pair_utc").is_not_null() & pl.col("_naive").is_not_null()).any()).item():
        return None
    quarter = 900 * US
    stamped = pl.col("_utc").is_not_null() & pl.col("_local").is_null() & pl.col("ts_us").is_null()
    pairs = (
        df.with_columns(
            # on a stamped line (no zone-less time of its own): the nearest one before and after it
            pl.col("_local").forward_fill().over("source_key").alias("_before"),
            pl.col("_local").backward_fill().over("source_key").alias("_after"),
        )
        .filter(stamped)
        .select(
            pl.concat_list(pl.col("_before") - pl.col("_utc"), pl.col("_after") - pl.col("_utc")).alias("d")
        )
        .explode("d")
        .drop_nulls("d")
        .with_columns(((pl.col("d") / quarter).round() * quarter).cast(pl.Int64).alias("offset"))
        .filter(
            ((pl.col("d") - pl.col("offset")).abs() <= _NEIGHBOUR_SLACK_US)
            & (pl.col("offset") // (60 * US)).is_in(list(_ZONE_OFFSETS_MIN))
        )
    )
    if not pairs.height:
        return None
    counts = pairs.group_by("offset").len().sort(["len", "offset"], descending=[True, False])
    what = "its UTC-stamped lines (UCX's [epoch]) and the zone-less times beside them"
    said = [f"{_offset_text(o)} from {n} pair{'s' if n > 1 else ''}" for o, n in counts.iter_rows()]
    if counts.height == 1:
        return FileZone(counts["offset"][0], f"{what} ({said[0].split(' from ', 1)[1]})")
    return FileZone(
        None, f"{what} disagree on its offset ({', '.join(said)}), so none was inferred: pass --tz"
    )


def _offset_text(us: int) -> str:
    minutes = us // (60 * US)
    return f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _time_columns(df: pl.DataFrame) -> pl.DataFrame:
    """After the prefix pass: `_naive` (the SGLang prefix's zone-less time), `_local` (the line's
    zone-less time, whichever form gave it), `_utc` (its time known in UTC: a UTC outer prefix, a
    UTC or epoch clock such as UCX's) and `_pair_utc` (a UTC time to pair with `_naive`: the
    journal's, or a UTC outer prefix's), all in microseconds."""
    local_naive = pl.coalesce(
        pl.col("_naive"), pl.when(~pl.col("_c_utc")).then("_c_us"), pl.when(~pl.col("_o_utc")).then("_o_us")
    )
    known_utc = pl.coalesce(pl.when(pl.col("_c_utc")).then("_c_us"), pl.when(pl.col("_o_utc")).then("_o_us"))
    df = df.with_columns(_naive_us(df).alias("_naive"), _precision(df).alias("app_ts_precision_us"))
    return df.with_columns(
        local_naive.alias("_local"),
        known_utc.alias("_utc"),
        pl.coalesce("ts_us", pl.when(pl.col("_o_utc")).then("_o_us")).alias("_pair_utc"),
    )


def _app_time(df: pl.DataFrame, opts: ParseOptions, carry: StreamCarry) -> pl.DataFrame:
    """app_ts_us: the line's own time in UTC; `_zoned`: it was read in a zone (see zone_read)."""
    df = _time_columns(df)
    zone = opts.tz
    df = _repeated_hour(df, zone or LOCAL_TZ, carry)
    if zone is None:
        offsets = _infer_offsets(df, carry)
        offset = pl.col("host").replace_strict(offsets, default=None, return_dtype=pl.Int64)
        # a plain file's own head settled its offset before any batch (file_zone): it wins
        settled = {s: z.offset_us for s, z in carry.file_zones.items() if z.offset_us is not None}
        if settled:
            by_file = pl.col("source").replace_strict(settled, default=None, return_dtype=pl.Int64)
            offset = pl.coalesce(by_file, offset)
        local = pl.when(offset.is_not_null()).then(pl.col("_local") - offset).otherwise("_by_zone")
    else:
        local = pl.col("_by_zone")
    own_local = pl.col("_naive").is_not_null() | pl.col("_utc").is_null()
    app = pl.when(pl.col("_naive").is_null() & pl.col("_utc").is_not_null()).then("_utc").otherwise(local)
    df = df.with_columns(
        app.alias("app_ts_us"),
        (own_local & pl.col("_local").is_not_null() & pl.col("ts_us").is_null()).alias("_zoned"),
        # read in the zone (not by an inferred offset) inside its repeated hour
        pl.when(own_local & local.eq_missing(pl.col("_by_zone"))).then("_fold").otherwise(0).alias("_fold"),
    )
    return df.drop("_naive", "_local", "_utc", "_pair_utc", "ts", "frac", "_c_us", "_c_utc", "_c_prec",
                   "_o_us", "_o_utc", "_o_prec", "_by_zone")  # fmt: skip


# A step back of at least this much inside a repeated hour is the clock going back (DST's end):
# lines before it are the hour's first pass, lines after it its second.
_DST_STEP_US = 30 * 60 * US


def _repeated_hour(df: pl.DataFrame, zone: str, carry: StreamCarry) -> pl.DataFrame:
    """`_by_zone`: each zone-less local time in UTC, a repeated hour (the autumn DST change) read
    in file order; `_fold`: 1 for a line of the hour read as its first pass, 2 after the step
    back that starts its second, else 0. A file whose hour has no step (one pass logged nothing)
    cannot say which pass its lines were: the verdict reads the marks (`ts_origin`)."""
    early, late = (
        _zone_convert(pl.col("_local"), zone, "earliest"),
        _zone_convert(pl.col("_local"), zone, "latest"),
    )
    df = df.with_columns(early.alias("_by_zone"), late.alias("_late"))
    repeated = (pl.col("_by_zone") != pl.col("_late")).fill_null(False)
    if not df.select(repeated.any()).item():
        carry.last_local.update(_last_local(df, {}))
        return df.with_columns(pl.lit(0, pl.Int8).alias("_fold")).drop("_late")
    seeds = carry.last_local
    seed_t = pl.col("source_key").replace_strict(
        {k: v[0] for k, v in seeds.items()}, default=None, return_dtype=pl.Int64
    )
    seed_second = pl.col("source_key").replace_strict({k: v[1] for k, v in seeds.items()}, default=False,
                                                      return_dtype=pl.Boolean)  # fmt: skip
    first = pl.int_range(pl.len()).over("source_key") == 0
    prev = pl.coalesce(
        pl.col("_local").shift(1).forward_fill().over("source_key"), pl.when(first).then(seed_t)
    )
    # a line without a time of its own (a traceback, an unprefixed line) neither starts nor ends a
    # run: it belongs to the run of the timed line before it
    inside = pl.when(pl.col("_local").is_not_null()).then(pl.col("_by_zone") != pl.col("_late"))
    df = df.with_columns(
        repeated.alias("_rep"),
        (repeated & (prev - pl.col("_local") >= _DST_STEP_US).fill_null(False)).alias("_back"),
        inside.forward_fill().over("source_key").fill_null(False).alias("_in_hour"),
    )
    # runs of lines inside the hour, per file; the run the previous batch ended in goes on here
    run = (
        (pl.col("_in_hour") != pl.col("_in_hour").shift(1).over("source_key"))
        .fill_null(True)
        .cum_sum()
        .over("source_key")
    )
    df = df.with_columns(run.alias("_run"))
    continued = (pl.col("_run") == pl.col("_run").min().over("source_key")) & seed_second
    second = pl.col("_rep") & ((pl.col("_back").cum_sum().over(["source_key", "_run"]) > 0) | continued)
    df = df.with_columns(
        pl.when(second).then("_late").otherwise("_by_zone").alias("_by_zone"),
        pl.when(second).then(2).when(pl.col("_rep")).then(1).otherwise(0).cast(pl.Int8).alias("_fold"),
    )
    ends = dict(df.group_by("source_key").agg(pl.col("_fold").last() == 2).iter_rows())
    carry.last_local.update(_last_local(df, ends))
    return df.drop("_late", "_rep", "_back", "_run", "_in_hour")


def _last_local(df: pl.DataFrame, second: dict[str, bool]) -> dict[str, tuple[int, bool]]:
    last = df.filter(pl.col("_local").is_not_null()).group_by("source_key").agg(pl.col("_local").last())
    return {k: (t, bool(second.get(k, False))) for k, t in last.iter_rows()}


def zone_read(host: str | None, opts: ParseOptions, carry: StreamCarry, source: str | None = None) -> str:
    """The zone a host's (or a plain file's) zone-less times were read in, and why (for the ingest
    summary)."""
    if opts.tz is not None:
        return f"{opts.tz}, from --tz"
    own = carry.file_zones.get(source) if source is not None else None
    if own is not None and own.offset_us is not None:
        return f"UTC{_offset_text(own.offset_us)}, inferred from {own.how}"
    if host in carry.host_offsets_us:
        how = carry.host_offset_how.get(host, "UTC times")
        read = f"UTC{_offset_text(carry.host_offsets_us[host])}, inferred from {how}"
        return f"{read}; {own.how}" if own is not None else read
    if own is not None:  # its pairs disagree: read as before, and said
        return f"{LOCAL_TZ}, this machine's zone: {own.how}"
    return f"{LOCAL_TZ}, this machine's zone (no --tz, and no UTC time to compare with)"


def _zone_convert(naive_us: pl.Expr, zone: str, ambiguous: str = "earliest") -> pl.Expr:
    return (
        naive_us.cast(pl.Datetime("us"))
        .dt.replace_time_zone(zone, ambiguous=ambiguous, non_existent="null")
        .dt.convert_time_zone("UTC")
        .dt.epoch("us")
    )


def _best_time(df: pl.DataFrame, carry: StreamCarry) -> pl.DataFrame:
    """ts_us = journal time, else own prefix, else inherited from the previous line of the file.

    Only ever from an earlier line (this batch's or, via the carry, an earlier batch's): lines
    before a file's first time stay without one (`none`). Filling them from a later line would
    make their time depend on whether that line happened to be in the same batch.
    """
    df = df.with_columns(
        pl.when(pl.col("ts_us").is_not_null())
        .then(pl.lit("journal"))
        .when(pl.col("app_ts_us").is_not_null() & (pl.col("_fold") > 0))
        .then(pl.format("app_fold{}", "_fold"))
        .when(pl.col("app_ts_us").is_not_null())
        .then(pl.lit("app"))
        .otherwise(None)
        .alias("ts_origin"),
        pl.coalesce("ts_us", "app_ts_us").alias("ts_us"),
    )
    if df["ts_us"].null_count():
        seed = pl.col("source_key").replace_strict(carry.last_ts, default=None, return_dtype=pl.Int64)
        filled = (
            pl.coalesce(pl.col("ts_us"), pl.when(pl.col("_first_of_key")).then(seed))
            .forward_fill()
            .over("source_key")
        )
        df = (
            df.with_columns((pl.int_range(pl.len()) == 0).over("source_key").alias("_first_of_key"))
            .with_columns(
                pl.when(pl.col("ts_us").is_null() & filled.is_not_null())
                .then(pl.lit("inherited"))
                .otherwise(pl.col("ts_origin"))
                .alias("ts_origin"),
                filled.alias("ts_us"),
            )
            .drop("_first_of_key")
        )
    df = df.with_columns(pl.col("ts_origin").fill_null("none"))
    last = df.filter(pl.col("ts_us").is_not_null()).group_by("source_key").agg(pl.col("ts_us").last())
    carry.last_ts.update(dict(last.iter_rows()))
    return df


# ----------------------------------------------------------------- match pass


@dataclass(frozen=True)
class _Compiled:
    """The catalog prepared for matching: anchors, and each pattern's named groups."""

    entries: tuple[Entry, ...]
    starts: tuple[str, ...]  # distinct starts_with anchors
    contains: tuple[str, ...]  # distinct contains anchors
    head_len: int  # only this many leading characters can hold a starts_with anchor
    by_anchor: dict[str, tuple[int, ...]]  # anchor -> the entries it is the anchor of
    groups: dict[str, list[str]]  # entry name -> its pattern's named groups, in pattern order

    @classmethod
    def of(cls, catalog: Catalog) -> _Compiled:
        entries = catalog.entries
        rows = [(e.starts_with or e.contains or "", i) for i, e in enumerate(entries)]
        starts = tuple(sorted({e.starts_with for e in entries if e.starts_with}))
        return cls(
            entries=entries,
            starts=starts,
            contains=tuple(sorted({e.contains for e in entries if e.contains and not e.starts_with})),
            head_len=max((len(a) for a in starts), default=0),
            by_anchor={a: tuple(i for b, i in rows if b == a) for a, _ in rows},
            groups={e.name: _named_groups(e.pattern) for e in entries},
        )


def _named_groups(pattern: str) -> list[str]:
    """Named groups in pattern order, as extract_groups names its struct fields. Python's `re`
    is ~50x cheaper to ask than compiling in polars; the catalog requires both to accept each
    pattern, and polars answers when `re` cannot."""
    try:
        index = re.compile(pattern).groupindex
        return sorted(index, key=index.__getitem__)
    except re.error:
        names = pl.Series([""]).str.extract_groups(pattern).struct.fields
        return [n for n in names if not n.isdigit()]


MATCHED = "__matched"  # an always-empty group: non-null exactly when the entry's pattern matched
# id(catalog) -> (catalog, compiled): the catalog is kept so that its id cannot be reused by another
_COMPILED: dict[int, tuple[Catalog, _Compiled]] = {}


def _compiled(catalog: Catalog) -> _Compiled:
    cached = _COMPILED.get(id(catalog))
    if cached is None or cached[0] is not catalog:
        cached = _COMPILED[id(catalog)] = (catalog, _Compiled.of(catalog))
    return cached[1]


def _candidates(
    text: pl.Series, rows: pl.Series, anchors: tuple[str, ...], comp: _Compiled
) -> dict[int, pl.Series]:
    """entry_idx -> the rows (of `rows`, `text` row for row) whose `text` holds the entry's literal
    anchor, ascending: one Aho-Corasick pass over all anchors."""
    if not anchors or text.len() == 0:
        return {}
    found = (
        pl.DataFrame({"_row": rows, "anchor": text.str.extract_many(list(anchors), overlapping=True)})
        .explode("anchor")
        .drop_nulls("anchor")
        .group_by("anchor")
        .agg(pl.col("_row").unique().sort())
    )
    # the few anchors found -> their entries (an anchor may be several entries')
    return {
        idx: at
        for anchor, at in zip(found["anchor"].to_list(), found["_row"], strict=True)
        for idx in comp.by_anchor[anchor]
    }


def _try_entries(
    cand: dict[int, pl.Series], body: pl.Series, claimed: pl.Series, comp: _Compiled
) -> tuple[list[pl.DataFrame], list[pl.DataFrame]]:
    """Candidate entries in catalog order, each on its candidate rows no earlier entry claimed:
    returns (matches with typed fields, failed (row, entry) pairs). `claimed` (one flag per row
    of the batch) is updated in place.

    The pattern runs as a match test first; groups and `fields` are extracted only for the rows
    it wins. (Extracting every candidate entry and keeping the first cost 7x on stats lines,
    which all versioned `Prefill batch` layouts share an anchor for.) Skipping claimed rows
    keeps the results: a later entry could not win them, and their misses were never errors.
    """
    matched, failed = [], []
    for idx in sorted(cand):
        entry, rows = comp.entries[idx], cand[idx].alias("_row")
        rows = rows.filter(~claimed.gather(rows))
        text = body.gather(rows)
        if entry.starts_with:  # the anchor was found somewhere near the start; it must BE the start
            at_start = text.str.starts_with(entry.starts_with)
            rows, text = rows.filter(at_start), text.filter(at_start)
        if rows.len() == 0:
            continue
        names = comp.groups[entry.name]
        if names:  # one regex pass for both: the match (the always-empty sentinel group) and groups
            groups = text.str.extract_groups(f"(?P<{MATCHED}>)(?:{entry.pattern})").struct.unnest()
            hit = groups[MATCHED].is_not_null()
        else:
            groups, hit = pl.DataFrame(), text.str.contains(entry.pattern)
        n_won = hit.sum()
        if n_won < rows.len():
            failed.append(rows.filter(~hit).to_frame().with_columns(pl.lit(idx, pl.Int32).alias("entry_idx")))
        if n_won == 0:
            continue
        if n_won < rows.len():
            rows, text = rows.filter(hit), text.filter(hit)
            groups = groups.filter(hit) if names else groups
        captured = groups.select(names) if names else groups
        matched.append(_extract_entry(rows, text, entry, captured, idx))
        claimed.scatter(rows, True)
    return matched, failed


def _stack(frames: list[pl.DataFrame], schema: dict) -> pl.DataFrame:
    base = pl.DataFrame(schema=schema)
    return pl.concat([base, *frames], how="diagonal_relaxed").select(list(schema)) if frames else base


def _in_row_order(frames: list[pl.DataFrame], schema: dict) -> pl.DataFrame:
    """The entries' field frames as one frame in row order, built column by column: a column no
    entry has is all NULL; the others are one gather each from the entries that have it (stacking
    every column of every entry, then sorting, cost more than the regexes of a batch)."""
    if not frames:
        return pl.DataFrame(schema=schema)
    if any(f[c].dtype != schema[c] for f in frames for c in f.columns):  # a stack relaxes the dtype
        return _stack(frames, schema).sort("_row")
    heights = [f.height for f in frames]
    order = pl.concat([f["_row"] for f in frames]).arg_sort()  # output position -> stacked row
    # per output position: which frame its row is in, and where in that frame
    frame_of = pl.concat([pl.repeat(k, h, dtype=pl.UInt32, eager=True) for k, h in enumerate(heights)])
    offset = pl.concat([pl.int_range(h, dtype=pl.Int64, eager=True) for h in heights])
    frame_of, offset = frame_of.gather(order), offset.gather(order)
    index: dict[tuple[int, ...], pl.Series] = {}  # the frames having a column -> where to gather it from
    cols = []
    for name, dtype in schema.items():
        having = tuple(k for k, f in enumerate(frames) if name in f.columns)
        if not having:
            cols.append(pl.repeat(None, order.len(), dtype=dtype, eager=True).alias(name))
            continue
        if having not in index:  # the start of each of those frames in their concatenation
            at = dict(
                zip(having, [sum(heights[j] for j in having[:i]) for i in range(len(having))], strict=True)
            )
            starts = pl.Series([at.get(k) for k in range(len(frames))], dtype=pl.Int64)  # one per frame
            index[having] = (starts.gather(frame_of) + offset).cast(pl.UInt32)  # NULL in the other frames
        values = pl.concat([frames[k][name] for k in having], rechunk=True)
        cols.append(values.gather(index[having]).alias(name))
    return pl.DataFrame(cols)


def _fields_schema() -> dict:
    return {"_row": pl.UInt32, "entry_idx": pl.Int32, **EVENT_FIELDS, "extra": pl.String}


def _match_and_extract(df: pl.DataFrame, catalog: Catalog) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Adds `entry_idx` (first matching entry) and `error_idx` (anchor hit, no pattern matched).

    Entries anchored at the start of the body are tried first (their anchors are searched in the
    first few characters only); `contains` entries only for lines none of those matched.
    Returns the frame and the typed fields of the winning entry per row.
    """
    comp = _compiled(catalog)
    body = df["body"]
    n = df.height
    rows = pl.int_range(n, dtype=pl.UInt32, eager=True).alias("_row")  # df's _row is its position
    claimed = pl.repeat(False, n, eager=True)  # a mask by position, not a growing is_in set
    head = body.str.slice(0, comp.head_len)
    hits, misses = _try_entries(_candidates(head, rows, comp.starts, comp), body, claimed, comp)
    # The `contains` entries see only the rows no `starts_with` entry claimed.
    rest = rows.filter(~claimed)
    cand = _candidates(body.gather(rest), rest, comp.contains, comp)
    more_hits, more_misses = _try_entries(cand, body, claimed, comp)
    # Disjoint: each pass claims a row once, and the second pass saw only rows the first left.
    fields = _in_row_order([*hits, *more_hits], _fields_schema())
    failed = [*misses, *more_misses]

    # By position (df's rows are in _row order): a scatter, not a join that copies every column.
    def at_rows(at: pl.Series, values: pl.Series, col: str) -> pl.Series:  # a new series each
        return pl.repeat(None, n, dtype=pl.Int32, eager=True).alias(col).scatter(at, values)

    error_idx = pl.repeat(None, n, dtype=pl.Int32, eager=True).alias("error_idx")
    if failed:
        failed_at = pl.concat(failed)
        errors = (
            failed_at.filter(~claimed.gather(failed_at["_row"]))
            .group_by("_row")
            .agg(pl.col("entry_idx").min())
        )
        error_idx = at_rows(errors["_row"], errors["entry_idx"], "error_idx")
    df = df.with_columns(at_rows(fields["_row"], fields["entry_idx"], "entry_idx"), error_idx)
    return df, fields.drop("entry_idx")


# --------------------------------------------------------------- extract pass


def _cast_field(name: str, col: pl.Expr) -> pl.Expr:
    dtype = EVENT_FIELDS[name]
    if dtype == pl.Boolean():
        return col.str.to_lowercase().is_in(["true", "1", "yes"]).alias(name)
    if name.endswith("_us"):
        # Reported epoch seconds with a fraction ("1790000103.123") -> integer microseconds.
        whole = col.str.extract(r"^(\d+)", 1).cast(pl.Int64, strict=False)
        frac = col.str.extract(r"\.(\d{1,6})", 1).str.pad_end(6, "0").cast(pl.Int64, strict=False)
        return (whole * US + frac.fill_null(0)).alias(name)
    if dtype.is_numeric():
        cleaned = col.str.strip_chars().str.strip_chars_end("s%")
        if dtype.is_integer():
            # Exact first (64-bit rooms do not survive a float); "12.0" style values via float.
            via_float = cleaned.cast(pl.Float64, strict=False).cast(dtype, strict=False)
            return pl.coalesce(cleaned.cast(dtype, strict=False), via_float).alias(name)
        return cleaned.cast(dtype, strict=False).alias(name)
    return col.alias(name)


def _extract_entry(
    rows: pl.Series, text: pl.Series, entry: Entry, captured: pl.DataFrame, idx: int
) -> pl.DataFrame:
    """Typed fields for the rows an entry's pattern matched (`rows`, their bodies `text`): its
    named groups (`captured`, row for row) and its `fields`; names not in the schema go into `extra`.

    A field the pattern also captures is taken from the pattern unless that group is empty on
    every row. Text is extracted in one select (polars runs its regexes in parallel) and cast in
    a second: the casts read a value more than once, and eager selects do not share subexpressions.
    """
    names = captured.columns
    frame = captured.insert_column(0, rows.alias("_row")) if names else rows.alias("_row").to_frame()
    empty = {n for n in names if frame[n].null_count() == frame.height}
    regexes = {n: rx for n, rx in entry.fields.items() if n not in names or n in empty}
    if regexes:
        body = text.alias("body").to_frame()
        frame = frame.with_columns(
            body.select(pl.col("body").str.extract(rx, 1).alias(n) for n, rx in regexes.items())
        )
    # an entry's constants (`set`): the KVPoll name of an integer state, an upstream timeout's kind
    if entry.constants:
        frame = frame.with_columns(pl.lit(v, pl.String).alias(n) for n, v in entry.constants.items())
    cols = list(dict.fromkeys([*names, *entry.fields, *entry.constants]))
    typed = [_cast_field(n, pl.col(n)) for n in cols if n in EVENT_FIELDS]
    extra_names = [n for n in cols if n not in EVENT_FIELDS]
    extra = (
        pl.struct(extra_names).struct.json_encode().alias("extra")
        if extra_names
        else pl.lit(None, pl.String).alias("extra")
    )
    return frame.select("_row", *typed, extra, pl.lit(idx, pl.Int32).alias("entry_idx"))


# ----------------------------------------------------------- line structure


def _stream_key() -> pl.Expr:
    """One writer's lines: a file (each stream of a CRI file: stdout, stderr), or one process of
    one unit on one host."""
    return pl.concat_str(
        [
            pl.col("source_key"),
            pl.col("host"),
            pl.col("unit"),
            pl.col("pid").cast(pl.String),
            pl.col("_rstream"),
        ],
        separator="|",
        ignore_nulls=True,
    )


def _join_pieces(df: pl.DataFrame) -> pl.DataFrame:
    """Records split in several lines become one record again (the first line's body holds the
    whole text; the other pieces keep their message, with an empty body, as continuations): lines
    a terminal or a reporter wrapped onto indented lines, and CRI partial lines (`P`) inside
    another outer prefix. A piece whose first line was in an earlier batch stays as it is. (CRI
    records and journald's LineMax splits were joined before any prefix was read, across batches
    too: _join_records; their pieces after the first are `_rpiece`.)
    """
    joins_next = pl.col("_partial").fill_null(False)
    # Indented lines without a prefix (few: tracebacks, dumps) are the only wrap candidates.
    body = pl.col("body")
    loose = df.filter(~pl.col("_has_prefix") & pl.col("_prefix").is_null()).select("_row", "body")
    wraps = loose.filter(body.str.contains(r"^[ \t]+\S") & ~body.str.contains(NOT_WRAP))["_row"]
    splits = df.select(joins_next.any()).item()
    if not splits and wraps.len() == 0:
        return df.with_columns(pl.col("_rpiece").alias("_piece"))
    indented = pl.repeat(False, df.height, eager=True).scatter(wraps, True) if wraps.len() else False
    df = df.with_columns(joins_next.alias("_jn"), pl.lit(indented).alias("_ind"))
    # A wrapped line continues the prefixed line above it, through other wrapped lines; a
    # traceback's frame line (NOT_WRAP) or any unindented line ends the chain.
    opener = pl.col("_has_prefix") & ~pl.col("_jn")
    wrap = pl.col("_ind") & pl.when(~pl.col("_ind")).then(opener).forward_fill().over("_stream").fill_null(
        False
    )
    after_split = pl.col("_jn").shift(1).over("_stream").fill_null(False)
    df = df.with_columns(
        (after_split | wrap).alias("_piece"),
        after_split.alias("_split"),
        pl.col("body").str.slice(-1).shift(1).over("_stream").alias("_prev_last"),
    )
    text = pl.when(pl.col("_split")).then(pl.col("body")).otherwise(pl.col("body").str.strip_chars_start())
    # A wrap inside a number ("bootstrap_room=12345" + "6789") joins without a space; any other
    # wrap is taken to be at a space (reporters wrap at words; a word cut in two gets a space).
    glued = pl.col("_prev_last").str.contains(r"^\d$") & text.str.slice(0, 1).str.contains(r"^\d$")
    sep = pl.when(pl.col("_split") | glued.fill_null(False)).then(pl.lit("")).otherwise(pl.lit(" "))
    df = df.with_columns(
        pl.when("_piece").then(pl.concat_str([sep, text])).alias("_ptext"),
        pl.when(~pl.col("_piece")).then(pl.col("line_id")).forward_fill().over("_stream").alias("_head_id"),
    )
    added = (
        df.filter(pl.col("_piece") & pl.col("_head_id").is_not_null())
        .group_by("_head_id", maintain_order=True)
        .agg(pl.col("_ptext").str.join("").alias("_added"))
        .rename({"_head_id": "line_id"})
    )
    df = df.join(added, on="line_id", how="left", maintain_order="left")
    body = (
        pl.when(pl.col("_added").is_not_null())
        .then(pl.concat_str(["body", "_added"]))
        .when(pl.col("_piece") & pl.col("_head_id").is_not_null())
        .then(pl.lit(""))
        .otherwise(pl.col("body"))
    )
    return df.with_columns(body.alias("body"), pl.col("_piece") | pl.col("_rpiece")).drop(
        "_jn", "_ind", "_split", "_prev_last", "_ptext", "_head_id", "_added"
    )


# Queue fields only a PD server's stats lines carry (prefill: bootstrap/inflight; decode:
# prealloc/transfer): a `Prefill batch` without them is a non-PD (unified) server's.
PD_FIELDS = {
    "prefill_stats": ("bootstrap_req", "inflight_req"),
    "decode_stats": ("prealloc_req", "transfer_req"),
}
VOTES = ("prefill", "decode", "plain_prefill", "plain_decode")


def engine_from_name(names: pl.Expr) -> pl.Expr:
    by_name = pl.lit(None, pl.String)
    for engine, regex in reversed(ENGINE_FROM_NAME):
        by_name = pl.when(names.str.contains(regex)).then(pl.lit(engine)).otherwise(by_name)
    return by_name


def _engine(df: pl.DataFrame, fields: pl.DataFrame, catalog: Catalog, carry: StreamCarry) -> pl.DataFrame:
    """engine = what the unit's lines so far show, else its (unit, identifier or file) name, else
    the line's own catalog entry's, else `other`.

    The lines: PD prefill evidence (stats with #bootstrap-req/#inflight-req, bootstrap and
    transfer lines...), PD decode evidence (#prealloc-req/#transfer-req, decode-side failures):
    the majority of those (a tie: the latest). Without any, `Prefill batch` lines without PD fields
    are a non-PD server's (`unified`), and so are `Decode batch` lines under a prefill name (a PD
    prefill prints none); `Decode batch` alone is decode. Counted per unit up to and including the
    line, carried from batch to batch: a line's engine never depends on where its batch ends.
    `_by_name`/`_by_lines` stay for the ingest summary (where they disagree, the lines won).
    """
    name = pl.coalesce(pl.col("unit"), pl.col("syslog_identifier"), pl.col("source"))
    # Names repeat on nearly every line: match the regexes once per distinct name.
    names = df.select(name.alias("_name")).unique()
    named = dict(
        names.select("_name", engine_from_name(pl.col("_name")).alias("e")).drop_nulls("e").iter_rows()
    )
    entries = catalog.entries
    entry_engine = pl.col("entry_idx").replace_strict(
        {i: e.engine for i, e in enumerate(entries)}, default=None, return_dtype=pl.String
    )
    pd = pl.repeat(False, df.height, eager=True)
    pd_cols = [c for cols in PD_FIELDS.values() for c in cols]
    rows = fields.filter(pl.any_horizontal(pl.col(c).is_not_null() for c in pd_cols))["_row"]
    if rows.len():
        pd = pd.scatter(rows, True)
    # The vote of each entry (index into VOTES): a stats entry votes plain_* without PD fields.
    pd_votes, plain_votes = {}, {}
    for i, e in enumerate(entries):
        if e.engine in ("prefill", "decode"):
            pd_votes[i] = VOTES.index(e.engine)
            plain_votes[i] = VOTES.index(f"plain_{e.engine}") if e.event in PD_FIELDS else pd_votes[i]
    idx = pl.col("entry_idx")
    vote = pl.when(pl.col("_pd")).then(idx.replace_strict(pd_votes, default=None, return_dtype=pl.Int8))
    vote = vote.otherwise(idx.replace_strict(plain_votes, default=None, return_dtype=pl.Int8))
    df = df.with_columns(
        name.replace_strict(named, default=None, return_dtype=pl.String).alias("_by_name"),
        entry_engine.alias("_entry_engine"),
        pd.alias("_pd"),
    ).with_columns(vote.alias("_vote"))
    df = df.with_columns(_engine_by_lines(df, carry)["_by_lines"])  # in _row order
    return df.with_columns(
        pl.coalesce("_by_lines", "_by_name", "_entry_engine", pl.lit("other")).alias("engine"),
    ).drop("_entry_engine", "_pd", "_vote")


def _engine_by_lines(df: pl.DataFrame, carry: StreamCarry) -> pl.DataFrame:
    """(_row, _by_lines): the engine each unit's lines so far show (see _engine); NULL: no evidence.

    Counted on the lines that vote only, then carried forward over the unit's other lines.
    """
    key = pl.struct(pl.col("host"), pl.col("unit")).hash(seed=13)  # a unit, as one cheap integer
    df = df.select("_row", key.alias("_ukey"), "_vote", "_by_name")
    keys = df["_ukey"].unique()
    # One unit in the batch (a plain file, mostly): plain running sums and scalars, no windows.
    one = keys.len() == 1
    k0 = keys[0] if one else None

    def per_unit(e: pl.Expr) -> pl.Expr:
        return e if one else e.over("_ukey")

    def seeded(table: dict, default: object, dtype: pl.DataType) -> pl.Expr:
        if one:
            return pl.lit(table.get(k0, default), dtype)
        if not table:
            return pl.lit(default, dtype)
        return pl.col("_ukey").replace_strict(table, default=default, return_dtype=dtype)

    seed_engine = seeded(carry.unit_engine, None, pl.String())
    votes = df.filter(pl.col("_vote").is_not_null())
    if votes.height == 0:
        return df.select("_row", seed_engine.alias("_by_lines"))
    counts = [
        (per_unit((pl.col("_vote") == i).cast(pl.Int64).cum_sum())
         + seeded({k: c[i] for k, c in carry.unit_votes.items()}, 0, pl.Int64())).alias(f"_n{i}")
        for i in range(len(VOTES))
    ]  # fmt: skip
    pd_vote = pl.col("_vote") <= 1
    as_engine = pl.when(pl.col("_vote") == 0).then(pl.lit("prefill")).otherwise(pl.lit("decode"))
    last = pl.coalesce(
        per_unit(pl.when(pd_vote).then(as_engine).forward_fill()), seeded(carry.unit_last, None, pl.String())
    )
    votes = votes.with_columns(*counts, last.alias("_last"))
    p, d, pp, pd_ = (pl.col(f"_n{i}") for i in range(4))
    by_lines = (
        pl.when(p + d > 0)
        .then(pl.when(p > d).then(pl.lit("prefill")).when(d > p).then(pl.lit("decode")).otherwise("_last"))
        .when(pp > 0)
        .then(pl.lit("unified"))
        .when(pd_ > 0)
        .then(pl.when(pl.col("_by_name") == "prefill").then(pl.lit("unified")).otherwise(pl.lit("decode")))
    )
    votes = votes.with_columns(by_lines.alias("_by_lines"))
    at_votes = (
        pl.repeat(None, df.height, dtype=pl.String, eager=True)
        .alias("_by_lines")
        .scatter(votes["_row"], votes["_by_lines"])
    )
    out = df.with_columns(at_votes).select(
        "_row", pl.coalesce(per_unit(pl.col("_by_lines").forward_fill()), seed_engine).alias("_by_lines")
    )
    ends = votes.group_by("_ukey").agg(pl.col("_n0", "_n1", "_n2", "_n3", "_last", "_by_lines").last())
    for ukey, *n, last_engine, engine in ends.iter_rows():
        carry.unit_votes[ukey] = tuple(n)  # type: ignore[assignment]
        if last_engine is not None:
            carry.unit_last[ukey] = last_engine
        if engine is not None:
            carry.unit_engine[ukey] = engine
    return out


def _continuations(df: pl.DataFrame, carry: StreamCarry) -> pl.DataFrame:
    """cont_of = line_id of the head record for the continuation lines of a multi-line record.

    The first piece of a split record (`_rstart`, its text held by its last piece) is its head:
    never a loose line, whatever its empty text."""
    loose = ~pl.col("_has_prefix") & pl.col("entry_idx").is_null() & ~pl.col("_rstart")
    # A loose line after a prefixed line ending with ':' (e.g. "debug info:") continues it too.
    # (`:\s*$`: ends with ':' once trailing whitespace is stripped, without copying every body)
    opens = pl.when(~loose).then(pl.col("body").str.contains(r":\s*$"))
    # The block a line of an earlier batch opened is still open (while that stream's chain holds).
    open_before = {s: v for s, v in carry.open_block.items() if s in carry.last_head}
    seed_open = pl.col("_stream").replace_strict(open_before, default=False, return_dtype=pl.Boolean)
    df = df.with_columns(opens.forward_fill().over("_stream").alias("_open"))
    in_block = loose & pl.coalesce("_open", seed_open)
    continues = pl.when(loose).then(pl.col("body")).str.contains(CONTINUATION)  # loose lines only: few
    cont = loose & (continues | in_block) | pl.col("_piece")
    df = df.with_columns((~cont).alias("_head"))
    seed = pl.col("_stream").replace_strict(carry.last_head, default=None, return_dtype=pl.Int64)
    head_id = pl.coalesce(
        pl.when(pl.col("_head")).then(pl.col("line_id")).forward_fill().over("_stream"), seed
    )
    df = df.with_columns(pl.when(pl.col("_head")).then(None).otherwise(head_id).alias("cont_of"))
    heads = df.filter(pl.col("_head")).group_by("_stream").agg(pl.col("line_id").last())
    carry.last_head.update(dict(heads.iter_rows()))
    blocks = df.filter(pl.col("_open").is_not_null()).group_by("_stream").agg(pl.col("_open").last())
    carry.open_block.update(dict(blocks.iter_rows()))
    return df.drop("_stream", "_head", "_open")


def _suppressed_unit(lines: pl.DataFrame, events: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """journald's `Suppressed N messages from UNIT` belongs to the unit it names."""
    comp = _compiled(catalog)
    naming = [i for i, e in enumerate(comp.entries) if "unit_named" in (*comp.groups[e.name], *e.fields)]
    if not lines["entry_idx"].is_in(naming).any():  # the common case: no such line, no JSON scan
        return lines
    named = events.filter(pl.col("extra").str.contains('"unit_named"')).select(
        "_row",
        pl.col("extra").str.json_path_match("$.unit_named").str.replace(r"^.*/", "").alias("_named"),
    )
    if named.height == 0:
        return lines
    return (
        lines.join(named, on="_row", how="left", maintain_order="left")
        .with_columns(pl.coalesce("_named", "unit").alias("unit"))
        .drop("_named")
    )


# ------------------------------------------------------------------- public


@dataclass
class Parsed:
    lines: pl.DataFrame  # schema.LINE_COLUMNS minus ingest_id
    events: pl.DataFrame  # schema.EVENT_COLUMNS
    stats: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=STATS_SCHEMA)
    )  # see _source_stats
    odd: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema={"line_id": pl.Int64}))


def parse_records(
    records: pl.DataFrame, opts: ParseOptions, line_id_base: int = 0, carry: StreamCarry | None = None
) -> Parsed:
    """Parse one batch. `line_id_base` numbers the lines; `carry` links consecutive batches."""
    carry = carry or StreamCarry()
    cat = opts.catalog
    df = records.select(list(RECORD_SCHEMA)).with_row_index("_row")
    df = df.with_columns((pl.col("_row").cast(pl.Int64) + line_id_base).alias("line_id"))
    df = _strip_prefixes(df, opts, carry)
    df = _app_time(df, opts, carry)
    df = _best_time(df, carry)
    df = df.with_columns(_stream_key().alias("_stream"))
    df = _join_pieces(df)
    df, fields = _match_and_extract(df, cat)
    df = _engine(df, fields, cat, carry)
    df = _continuations(df, carry)
    names = {i: e.name for i, e in enumerate(cat.entries)}
    events_of = {i: e.event for i, e in enumerate(cat.entries)}
    df = df.with_columns(
        pl.col("entry_idx").replace_strict(events_of, default=None, return_dtype=pl.String).alias("event"),
        pl.col("entry_idx").replace_strict(names, default=None, return_dtype=pl.String).alias("entry"),
        pl.col("error_idx").replace_strict(names, default=None, return_dtype=pl.String).alias("parse_error"),
    )
    df = _suppressed_unit(df, fields, cat)
    lines = df.select(
        "line_id", "source", "source_key", "seq", "cursor", "host", "unit", "engine", "pid", "boot_id",
        "invocation_id", "syslog_identifier", "priority", "ts_us", "app_ts_us", "ts_origin",
        "app_ts_precision_us", "dp_rank", "tp_rank", "pp_rank", "ep_rank", "message", "event", "entry",
        "parse_error", "cont_of",
    )  # fmt: skip
    events = _events(df, fields)
    stats, odd = _source_stats(df, opts, carry)
    return Parsed(lines=lines, events=events, stats=stats, odd=odd)


def _events(df: pl.DataFrame, fields: pl.DataFrame) -> pl.DataFrame:
    """The event rows (a catalog entry matched) with their fields. `fields` has exactly those rows,
    in row order (see _in_row_order): they line up, no join needed."""
    base = df.select("_row", *EVENT_BASE_COLUMNS).filter(pl.col("event").is_not_null())  # narrow first
    if not base["_row"].equals(fields["_row"]):  # cannot happen (every entry names an event)
        return base.join(fields, on="_row", how="left", maintain_order="left").drop("_row")
    return base.drop("_row").hstack(fields.drop("_row"))


STATS_KEY = ["source", "host", "unit"]
# Per source and unit, what the prefix and time passes made of a batch (ingest sums them up).
STATS_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(), "host": pl.String(), "unit": pl.String(),
    "lines": pl.Int64(), "no_prefix": pl.Int64(), "no_time": pl.Int64(), "inherited_time": pl.Int64(),
    "time_only": pl.Int64(), "joined": pl.Int64(), "date_from": pl.String(), "zone": pl.String(),
    "engine_by_name": pl.String(), "engine_by_lines": pl.String(), "prefixes": pl.String(),
    "read_to_us": pl.Int64(),
}  # fmt: skip


ODD_FLAGS = ["no_prefix", "no_time", "inherited_time", "time_only", "joined"]


def _source_stats(
    df: pl.DataFrame, opts: ParseOptions, carry: StreamCarry
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stats, odd). stats: per source and unit, STATS_SCHEMA. odd: the lines the counts concern
    (line_id, the key, one flag per count, date_from), so that ingest can count only what it stores.

    no_prefix: first lines of records with no prefix form and no catalog entry (not understood);
    no_time: first lines of records without a time of their own (journal or text); blank lines
    count in neither. Also the zone a zone-less time was read in and why, the engines the name
    and the lines gave, and the prefix forms seen. read_to_us: the latest time the source's lines
    of that unit reached (the verdict's window never ends before what was read, even when lines
    are later lost from the database).
    """
    # a split record's text is on its last piece (_rhold): that line stands for the record here
    first = pl.col("cont_of").is_null() & ~pl.col("_rstart") | pl.col("_rhold")
    no_prefix = first & ~pl.col("_has_prefix") & pl.col("_prefix").is_null() & pl.col("entry_idx").is_null()
    no_time = first & pl.col("app_ts_us").is_null() & (pl.col("ts_origin") != "journal")
    inherited = pl.col("ts_origin") == "inherited"
    odd_rows = no_time | no_prefix | inherited | pl.col("_dated").is_not_null() | pl.col("_piece")
    text = pl.col("message").str.contains(r"\S")
    odd = df.filter(odd_rows).select(
        "line_id", *STATS_KEY,
        (no_prefix & text).alias("no_prefix"), (no_time & text).alias("no_time"),
        inherited.alias("inherited_time"), pl.col("_dated").is_not_null().alias("time_only"),
        pl.col("_piece").alias("joined"), pl.col("_dated").alias("date_from"),
    )  # fmt: skip
    stats = df.group_by(STATS_KEY).agg(
        pl.len().alias("lines"),
        pl.col("ts_us").max().alias("read_to_us"),
        pl.col("_zoned").any().alias("_zoned"),
        pl.col("_by_name").last().alias("engine_by_name"),
        pl.col("_by_lines").last().alias("engine_by_lines"),
    )
    zones = {h: zone_read(h, opts, carry) for h in stats["host"].unique().to_list()}
    zone = pl.col("host").replace_strict(zones, default=zone_read(None, opts, carry), return_dtype=pl.String)
    if carry.file_zones and opts.tz is None:  # plain files whose own lines spoke of their zone
        own = {
            s: zone_read(h, opts, carry, s)
            for s, h in stats.select("source", "host").unique().iter_rows()
            if s in carry.file_zones
        }
        if own:
            zone = pl.coalesce(
                pl.col("source").replace_strict(own, default=None, return_dtype=pl.String), zone
            )
    stats = stats.with_columns(pl.when("_zoned").then(zone).alias("zone"))
    forms = (
        df.select(*STATS_KEY, "_prefix")
        .filter(pl.col("_prefix").is_not_null())
        .group_by([*STATS_KEY, "_prefix"])
        .len()
        .group_by(STATS_KEY)
        .agg(pl.format("{}={}", "_prefix", "len").str.join(", ").alias("prefixes"))
    )
    stats = stats.join(forms, on=STATS_KEY, how="left", nulls_equal=True)
    return with_counts(stats.drop("_zoned"), odd), odd


def with_counts(per_key: pl.DataFrame, odd: pl.DataFrame) -> pl.DataFrame:
    """per_key (STATS_KEY, lines and the per-unit texts) with the counts of `odd` added."""
    counts = odd.group_by(STATS_KEY).agg(
        *[pl.col(c).sum().cast(pl.Int64) for c in ODD_FLAGS], pl.col("date_from").drop_nulls().first()
    )
    out = per_key.drop(*ODD_FLAGS, "date_from", strict=False).join(
        counts, on=STATS_KEY, how="left", nulls_equal=True
    )
    out = out.with_columns(pl.col(ODD_FLAGS).fill_null(0))
    return out.select(list(STATS_SCHEMA)).cast(STATS_SCHEMA)  # type: ignore[arg-type]


def kept_stats(parsed: Parsed) -> pl.DataFrame:
    """parsed.stats counting only the lines still in parsed.lines (ingest drops the lines parsed as
    context only, and a plain file's lines outside the window)."""
    lines = parsed.lines.group_by(STATS_KEY).agg(
        pl.len().cast(pl.Int64).alias("lines"), pl.col("ts_us").max().alias("read_to_us")
    )
    texts = parsed.stats.drop("lines", "read_to_us", *ODD_FLAGS, "date_from")
    per_key = lines.join(texts, on=STATS_KEY, how="left", nulls_equal=True)
    odd = parsed.odd.join(parsed.lines.select("line_id"), on="line_id", how="semi")
    return with_counts(per_key, odd)


def read_prefixes(records: pl.DataFrame, opts: ParseOptions) -> pl.DataFrame:
    """What the prefix pass reads from each record: body (the text the catalog matches), host,
    unit, pid, ranks, app_ts_us, partial, the forms found (for the prefix samples' tests)."""
    df = records.select(list(RECORD_SCHEMA)).with_row_index("_row")
    df = df.with_columns(pl.col("_row").cast(pl.Int64).alias("line_id"))
    df = _app_time(_strip_prefixes(df, opts, StreamCarry()), opts, StreamCarry())
    return df.select(
        "body", "host", "unit", "pid", "tp_rank", "dp_rank", "app_ts_us", "app_ts_precision_us",
        (pl.col("_partial").fill_null(False) | pl.col("_rjoins")).alias("partial"),
        pl.col("_prefix").alias("prefixes"),
    )  # fmt: skip


def records_of(
    lines: list[str], source: str = "inline", host: str = "local", unit: str = "inline"
) -> pl.DataFrame:
    """Bare lines as the records of one plain file."""
    records = pl.DataFrame(
        {"source": source, "source_key": source, "seq": list(range(len(lines))), "message": lines,
         "host": host, "unit": unit}
    )  # fmt: skip
    records = records.with_columns(
        pl.lit(None, dtype).alias(n)
        for n, dtype in RECORD_SCHEMA.items()
        if n not in ("source", "source_key", "seq", "message", "host", "unit")
    )
    return records.select([pl.col(n).cast(t) for n, t in RECORD_SCHEMA.items()])


def parse_messages(lines: list[str], catalog: Catalog | None = None, tz: str = "UTC") -> pl.DataFrame:
    """Parse bare log lines (as in a plain file): one row per line, events' fields included."""
    records = records_of(lines)
    parsed = parse_records(records, ParseOptions(catalog=catalog or load_catalog(), tz=tz))
    out = parsed.lines.select("line_id", "tp_rank", "dp_rank", "app_ts_us", "event", "entry", "parse_error")
    ev = parsed.events.drop(EVENT_BASE_COLUMNS[1:], strict=False)
    return out.join(ev, on="line_id", how="left").sort("line_id")


def extra_json(value: str | None) -> dict:
    return json.loads(value) if value else {}
