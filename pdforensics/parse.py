"""Records -> lines + events, vectorised with polars.

Three passes over a batch, all column-at-a-time:
1. *prefix*: strip ANSI colour, `journalctl` short prefixes and docker-compose
   `service | ` prefixes; read the SGLang `[time RANKS]` prefix (or a custom
   `SGLANG_LOGGING_CONFIG_PATH` one) into app time and ranks; leave the body.
2. *match*: one Aho-Corasick pass finds each row's catalog anchors; only those
   candidate rows run the entry's regex, in catalog order (first match wins).
3. *extract*: each matched entry's named groups and `fields` become typed
   event columns; anything not in `schema.EVENT_FIELDS` goes to `extra` JSON.

Python loops here run over catalog entries, never over lines.
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
from pdforensics.schema import EVENT_BASE_COLUMNS, EVENT_FIELDS, RECORD_SCHEMA

ANSI = r"\x1b\[[0-9;?]*[A-Za-z]"
# `journalctl` default output: "Nov 29 10:00:00 host unit[pid]: message"
SYSLOG_PREFIX = (
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}(?:\.\d+)?) (?P<sl_host>\S+) "
    r"(?P<sl_ident>[^\s\[:]+)(?:\[(?P<sl_pid>\d+)\])?: "
)
DOCKER_PREFIX = r"^(?P<svc>[A-Za-z0-9][\w.-]*)\s+\| "
# The SGLang logger prefix, `[ts(.ms)? RANKS]`, followed either by " body" or by more
# adjacent `[...]` groups (custom dictConfig formats: `[ts][file.py:42][INFO]: body`).
# What may follow the seconds inside the SGLang prefix: `.ms` and the rank parts (any order).
PREFIX_TAIL = r"^(?:[.,]\d{1,6})?(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*$"
# Formats whose time is kept but whose text stays the body (the catalog matches them whole).
ROUTER_TIME = r"^(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d{1,9}))?Z?\s+(?:TRACE|DEBUG|INFO|WARN|ERROR)\s"
PDLB_TIME = r"^\[PDLB \(Python\)\] (?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:,(?P<frac>\d{3}))?"
UCX_TIME = r"^\[(?P<sec>\d{9,11})\.(?P<frac>\d{6})\] \["

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


@dataclass
class StreamCarry:
    """What a batch hands to the next one of the same ingest (per stream)."""

    last_ts: dict[str, int] = field(default_factory=dict)  # source_key -> last known ts_us
    last_head: dict[str, int] = field(default_factory=dict)  # stream key -> line_id of last head
    host_offsets_us: dict[str, int] = field(default_factory=dict)  # host -> local minus UTC
    # stream key -> whether its last prefixed/recognised line ended with ':' and so opened a block
    # of loose lines (read only for streams still in last_head: clearing that ends the block too)
    open_block: dict[str, bool] = field(default_factory=dict)
    # host/unit key of a unit not named prefill/decode -> the (prefill, decode) lines it has shown
    # so far, and the last of them: its engine is the running majority (see _engine)
    unit_votes: dict[str, tuple[int, int]] = field(default_factory=dict)
    unit_last: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------- prefix pass


def _strip_prefixes(df: pl.DataFrame) -> pl.DataFrame:
    df = df.with_columns(pl.col("message").fill_null("").alias("_clean"))
    # The expensive clean-ups run only when a batch needs them.
    if df["_clean"].str.contains("\x1b", literal=True).any():
        df = df.with_columns(pl.col("_clean").str.replace_all(ANSI, ""))
    if df["_clean"].str.contains("\r", literal=True).any():
        df = df.with_columns(pl.col("_clean").str.strip_chars_end("\r"))
    starts = pl.col("_clean").str.starts_with("[")
    bare = df.filter(~starts)
    if bare.height:
        df = pl.concat([df.filter(starts), _strip_outer_prefixes(bare)]).sort("_row")
    df = _sglang_prefix(df)
    return _other_clocks(df).drop("_clean", "_svc", strict=False)


def _strip_outer_prefixes(df: pl.DataFrame) -> pl.DataFrame:
    """`journalctl` short-format and docker-compose prefixes (only rows not starting with '[')."""
    df = df.with_columns(pl.col("_clean").str.extract_groups(SYSLOG_PREFIX).alias("_sl")).unnest("_sl")
    has_sl = pl.col("sl_ident").is_not_null()
    df = df.with_columns(
        pl.when(has_sl).then(pl.col("_clean").str.replace(SYSLOG_PREFIX, "")).otherwise(pl.col("_clean")),
        pl.when(has_sl & (pl.col("host").is_in(["local", "unknown"]) | pl.col("host").is_null()))
        .then(pl.col("sl_host"))
        .otherwise(pl.col("host"))
        .alias("host"),
        pl.coalesce(pl.col("pid"), pl.col("sl_pid").cast(pl.Int64, strict=False)).alias("pid"),
        pl.when(has_sl).then(pl.col("sl_ident")).otherwise(pl.col("unit")).alias("unit"),
    ).drop("sl_host", "sl_ident", "sl_pid")
    df = df.with_columns(pl.col("_clean").str.extract(DOCKER_PREFIX, 1).alias("_svc"))
    return df.with_columns(
        pl.when(pl.col("_svc").is_not_null())
        .then(pl.col("_clean").str.replace(DOCKER_PREFIX, ""))
        .otherwise(pl.col("_clean")),
        pl.coalesce(pl.col("_svc"), pl.col("unit")).alias("unit"),
    ).drop("_svc")


def _sglang_prefix(df: pl.DataFrame) -> pl.DataFrame:
    """`[YYYY-MM-DD HH:MM:SS(.ms)( DPn TPn ...)] body` by position, not regex: it is on most lines."""
    clean = pl.col("_clean")
    df = df.with_columns(clean.str.find("]", literal=True).alias("_close"))
    df = df.with_columns(
        clean.str.slice(1, 19).alias("ts"), clean.str.slice(20, pl.col("_close") - 20).alias("_tail")
    )
    valid = (
        clean.str.starts_with("[")
        & pl.col("ts").str.strptime(pl.Datetime("us"), TIME_FMT, strict=False).is_not_null()
        & ((pl.col("_tail") == "") | pl.col("_tail").str.contains(PREFIX_TAIL))
    )
    df = df.with_columns(valid.alias("_has_prefix"))
    t = pl.when("_has_prefix").then("_tail")  # NULL without a prefix: the regexes below skip it
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


def _other_clocks(df: pl.DataFrame) -> pl.DataFrame:
    """Times of non-SGLang formats: router (UTC), mini_lb (local), UCX (epoch)."""
    router = pl.col("body").str.extract_groups(ROUTER_TIME)
    pdlb = pl.col("body").str.extract_groups(PDLB_TIME)
    ucx = pl.col("body").str.extract_groups(UCX_TIME)
    df = df.with_columns(router.alias("_r"), pdlb.alias("_l"), ucx.alias("_u"))
    is_router = pl.col("ts").is_null() & pl.col("_r").struct.field("ts").is_not_null()
    return df.with_columns(
        pl.coalesce(pl.col("ts"), pl.col("_r").struct.field("ts"), pl.col("_l").struct.field("ts")).alias(
            "ts"
        ),
        pl.coalesce(
            pl.col("frac"), pl.col("_r").struct.field("frac"), pl.col("_l").struct.field("frac")
        ).alias("frac"),
        is_router.alias("_utc_prefix"),
        (
            pl.col("_u").struct.field("sec").cast(pl.Int64) * US
            + pl.col("_u").struct.field("frac").cast(pl.Int64)
        ).alias("_epoch_us"),
    ).drop("_r", "_l", "_u")


def _naive_us(df: pl.DataFrame) -> pl.Expr:
    """The prefix time as microseconds of a zone-less wall clock (frac padded to us)."""
    secs = (
        pl.col("ts")
        .str.replace("T", " ")
        .str.strptime(pl.Datetime("us"), TIME_FMT, strict=False)
        .dt.epoch("us")
    )
    frac = pl.col("frac").fill_null("").str.pad_end(6, "0").str.slice(0, 6)
    return secs + pl.when(pl.col("frac").is_null()).then(0).otherwise(frac.cast(pl.Int64, strict=False))


def _precision(df: pl.DataFrame) -> pl.Expr:
    n = pl.col("frac").str.len_chars()
    return (
        pl.when(pl.col("_epoch_us").is_not_null())
        .then(1)
        .when(pl.col("ts").is_null())
        .then(None)
        .when(pl.col("frac").is_null())
        .then(US)
        .when(n <= 3)
        .then(1000)
        .otherwise(1)
        .cast(pl.Int32)
    )


def _infer_offsets(df: pl.DataFrame, carry: StreamCarry) -> dict[str, int]:
    """Per host, local-minus-UTC from journal-time/prefix pairs, rounded to 15 minutes."""
    pairs = df.filter(pl.col("ts_us").is_not_null() & pl.col("_naive").is_not_null() & ~pl.col("_utc_prefix"))
    if pairs.height:
        est = pairs.group_by("host").agg((pl.col("_naive") - pl.col("ts_us")).median().alias("d"))
        quarter = 900 * US
        for host, d in est.iter_rows():
            if host not in carry.host_offsets_us and d is not None:
                carry.host_offsets_us[host] = round(d / quarter) * quarter
    return carry.host_offsets_us


def _app_time(df: pl.DataFrame, opts: ParseOptions, carry: StreamCarry) -> pl.DataFrame:
    df = df.with_columns(_naive_us(df).alias("_naive"), _precision(df).alias("app_ts_precision_us"))
    zone = opts.tz
    if zone is None:
        offsets = _infer_offsets(df, carry)
        offset = pl.col("host").replace_strict(offsets, default=None, return_dtype=pl.Int64)
        by_zone = _zone_convert(pl.col("_naive"), LOCAL_TZ)
        local = pl.when(offset.is_not_null()).then(pl.col("_naive") - offset).otherwise(by_zone)
    else:
        local = _zone_convert(pl.col("_naive"), zone)
    app = (
        pl.when(pl.col("_epoch_us").is_not_null())
        .then(pl.col("_epoch_us"))
        .when(pl.col("_utc_prefix"))
        .then(pl.col("_naive"))
        .otherwise(local)
    )
    return df.with_columns(app.alias("app_ts_us")).drop("_naive", "_epoch_us", "ts", "frac", "_utc_prefix")


def _zone_convert(naive_us: pl.Expr, zone: str) -> pl.Expr:
    return (
        naive_us.cast(pl.Datetime("us"))
        .dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
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
    anchor_table: pl.DataFrame  # anchor -> entry_idx
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
            anchor_table=pl.DataFrame(
                rows, schema={"anchor": pl.String, "entry_idx": pl.Int32}, orient="row"
            ),
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
_COMPILED: dict[int, _Compiled] = {}


def _compiled(catalog: Catalog) -> _Compiled:
    key = id(catalog)
    if key not in _COMPILED:
        _COMPILED[key] = _Compiled.of(catalog)
    return _COMPILED[key]


def _candidates(body: pl.DataFrame, column: str, anchors: tuple[str, ...], comp: _Compiled) -> pl.DataFrame:
    """(row, entry_idx, body) for every entry whose literal anchor occurs in `column` (Aho-Corasick)."""
    if not anchors or body.height == 0:
        return pl.DataFrame(schema={"_row": pl.UInt32, "entry_idx": pl.Int32, "body": pl.String})
    found = (
        body.select("_row", pl.col(column).str.extract_many(list(anchors), overlapping=True).alias("anchor"))
        .explode("anchor")
        .drop_nulls("anchor")
        .unique()
    )
    return (
        found.join(comp.anchor_table, on="anchor").join(body.select("_row", "body"), on="_row").drop("anchor")
    )


def _try_entries(cand: pl.DataFrame, comp: _Compiled) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Candidate entries in catalog order, each on the rows no earlier entry claimed: returns
    (matches with typed fields, failed pairs).

    The pattern runs as a match test first; groups and `fields` are extracted only for the rows
    it wins. (Extracting every candidate entry and keeping the first cost 7x on stats lines,
    which all versioned `Prefill batch` layouts share an anchor for.) Skipping claimed rows
    keeps the results: a later entry could not win them, and their misses were never errors.
    """
    matched, failed = [], []
    # claimed[_row]: a mask, not a growing is_in set (rows are the batch's positions)
    claimed = pl.repeat(False, int(cand["_row"].max() or 0) + 1 if cand.height else 0, eager=True)
    parts = cand.partition_by("entry_idx", as_dict=True)
    for key in sorted(parts):
        idx = int(key[0])
        entry, part = comp.entries[idx], parts[key]
        body = pl.col("body")
        part = part.filter(~claimed.gather(part["_row"]))
        if entry.starts_with:  # the anchor was found somewhere near the start; it must BE the start
            part = part.filter(body.str.starts_with(entry.starts_with))
        if part.height == 0:
            continue
        names = comp.groups[entry.name]
        if names:  # one regex pass for both: the match (the always-empty sentinel group) and groups
            groups = part.select(
                body.str.extract_groups(f"(?P<{MATCHED}>)(?:{entry.pattern})").alias("_g")
            ).unnest("_g")
            hit = groups[MATCHED].is_not_null()
        else:
            groups, hit = pl.DataFrame(), part["body"].str.contains(entry.pattern)
        won = part.filter(hit)
        failed.append(part.filter(~hit).select("_row", "entry_idx"))
        if won.height == 0:
            continue
        captured = groups.filter(hit).select(names) if names else groups
        matched.append(
            _extract_entry(won, entry, captured).with_columns(pl.lit(idx, pl.Int32).alias("entry_idx"))
        )
        claimed.scatter(won["_row"], True)
    return _stack(matched, _fields_schema()), _stack(failed, {"_row": pl.UInt32, "entry_idx": pl.Int32})


def _stack(frames: list[pl.DataFrame], schema: dict) -> pl.DataFrame:
    base = pl.DataFrame(schema=schema)
    return pl.concat([base, *frames], how="diagonal_relaxed").select(list(schema)) if frames else base


def _fields_schema() -> dict:
    return {"_row": pl.UInt32, "entry_idx": pl.Int32, **EVENT_FIELDS, "extra": pl.String}


def _match_and_extract(df: pl.DataFrame, catalog: Catalog) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Adds `entry_idx` (first matching entry) and `error_idx` (anchor hit, no pattern matched).

    Entries anchored at the start of the body are tried first (their anchors are searched in the
    first few characters only); `contains` entries only for lines none of those matched.
    Returns the frame and the typed fields of the winning entry per row.
    """
    comp = _compiled(catalog)
    body = df.select("_row", "body", pl.col("body").str.slice(0, comp.head_len).alias("_head"))
    hits, misses = _try_entries(_candidates(body, "_head", comp.starts, comp), comp)
    rest = body.join(hits.select("_row"), on="_row", how="anti")
    more_hits, more_misses = _try_entries(_candidates(rest, "body", comp.contains, comp), comp)
    # Disjoint: each pass claims a row once, and the second pass saw only rows the first left.
    hits = pl.concat([hits, more_hits])
    errors = (
        pl.concat([misses, more_misses])
        .join(hits.select("_row"), on="_row", how="anti")
        .group_by("_row")
        .agg(pl.col("entry_idx").min().alias("error_idx"))
    )
    # Row order is what the passes after this read (forward fills, running counts): keep it.
    df = df.join(hits.select("_row", "entry_idx"), on="_row", how="left", maintain_order="left")
    df = df.join(errors, on="_row", how="left", maintain_order="left")
    return df, hits.drop("entry_idx")


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


def _extract_entry(won: pl.DataFrame, entry: Entry, captured: pl.DataFrame) -> pl.DataFrame:
    """Typed fields for the rows an entry's pattern matched: its named groups (`captured`, row
    for row with `won`) and its `fields`; names not in the schema go into `extra`.

    A field the pattern also captures is taken from the pattern unless that group is empty on
    every row. Text is extracted in one select (polars runs its regexes in parallel) and cast in
    a second: the casts read a value more than once, and eager selects do not share subexpressions.
    """
    body = pl.col("body")
    names = captured.columns
    frame = won.select("_row").hstack(captured)
    empty = {n for n in names if frame[n].null_count() == frame.height}
    regexes = {n: rx for n, rx in entry.fields.items() if n not in names or n in empty}
    if regexes:
        frame = frame.with_columns(won.select(body.str.extract(rx, 1).alias(n) for n, rx in regexes.items()))
    cols = list(dict.fromkeys([*names, *entry.fields]))
    typed = [_cast_field(n, pl.col(n)) for n in cols if n in EVENT_FIELDS]
    extra_names = [n for n in cols if n not in EVENT_FIELDS]
    extra = (
        pl.struct(extra_names).struct.json_encode().alias("extra")
        if extra_names
        else pl.lit(None, pl.String).alias("extra")
    )
    return frame.select("_row", *typed, extra)


# ----------------------------------------------------------- line structure


def _engine(df: pl.DataFrame, catalog: Catalog, carry: StreamCarry) -> pl.DataFrame:
    """engine = from the unit (or identifier) name, else what the unit's lines so far imply, else
    the line's own catalog entry's, else `other`.

    A unit named neither prefill nor decode takes the majority of the engines its recognised
    lines imply, counted up to and including this line (a tie: the latest of them), with the
    counts carried from batch to batch. Counting only earlier lines keeps a line's engine
    independent of where the batch ends; the cost is that a unit's lines before its first
    prefill/decode line stay `other` (or their entry's engine).
    """
    name = pl.coalesce(pl.col("unit"), pl.col("syslog_identifier"), pl.col("source"))
    # Names repeat on nearly every line: match the regexes once per distinct name.
    names = df.select(name.alias("_name")).unique()
    by_name = pl.lit(None, pl.String)
    for engine, regex in reversed(ENGINE_FROM_NAME):
        by_name = pl.when(pl.col("_name").str.contains(regex)).then(pl.lit(engine)).otherwise(by_name)
    named = dict(names.select("_name", by_name.alias("e")).drop_nulls("e").iter_rows())
    entry_engine = pl.col("entry_idx").replace_strict(
        {i: e.engine for i, e in enumerate(catalog.entries)}, default=None, return_dtype=pl.String
    )
    df = df.with_columns(
        name.replace_strict(named, default=None, return_dtype=pl.String).alias("_by_name"),
        entry_engine.alias("_entry_engine"),
    )
    implied = pl.lit(None, pl.String)
    if df["_by_name"].null_count():
        implied_by_unit = _implied_engines(df.filter(pl.col("_by_name").is_null()), carry)
        df = df.join(implied_by_unit, on="_row", how="left", maintain_order="left")
        implied = pl.col("_implied")
    return df.with_columns(
        pl.coalesce("_by_name", implied, "_entry_engine", pl.lit("other")).alias("engine"),
    ).drop("_by_name", "_entry_engine", "_implied", strict=False)


def _implied_engines(df: pl.DataFrame, carry: StreamCarry) -> pl.DataFrame:
    """(_row, _implied): the running prefill/decode majority of each unit's lines (see _engine)."""
    key = pl.concat_str([pl.col("host").fill_null("\0"), pl.col("unit").fill_null("\0")], separator="\x1f")
    df = df.select("_row", key.alias("_ukey"), "_entry_engine")
    voted = pl.col("_entry_engine").is_in(["prefill", "decode"])
    seeds = {k: v[0] for k, v in carry.unit_votes.items()}, {k: v[1] for k, v in carry.unit_votes.items()}
    counts = [
        (pl.col("_entry_engine") == engine).fill_null(False).cast(pl.Int64).cum_sum().over("_ukey")
        + pl.col("_ukey").replace_strict(seed, default=0, return_dtype=pl.Int64)
        for engine, seed in zip(("prefill", "decode"), seeds, strict=True)
    ]
    last = pl.coalesce(
        pl.when(voted).then("_entry_engine").forward_fill().over("_ukey"),
        pl.col("_ukey").replace_strict(carry.unit_last, default=None, return_dtype=pl.String),
    )
    df = df.with_columns(counts[0].alias("_p"), counts[1].alias("_d"), last.alias("_last"))
    implied = pl.when(pl.col("_p") > pl.col("_d")).then(pl.lit("prefill"))
    implied = implied.when(pl.col("_d") > pl.col("_p")).then(pl.lit("decode")).otherwise("_last")
    df = df.with_columns(implied.alias("_implied"))
    ends = df.group_by("_ukey").agg(pl.col("_p", "_d", "_last").last())
    for ukey, p, d, last_engine in ends.iter_rows():
        carry.unit_votes[ukey] = (p, d)
        if last_engine is not None:
            carry.unit_last[ukey] = last_engine
    return df.select("_row", "_implied")


def _continuations(df: pl.DataFrame, carry: StreamCarry) -> pl.DataFrame:
    """cont_of = line_id of the head record for the continuation lines of a multi-line record."""
    stream = pl.concat_str(
        [pl.col("source_key"), pl.col("host"), pl.col("unit"), pl.col("pid").cast(pl.String)],
        separator="|",
        ignore_nulls=True,
    )
    df = df.with_columns(stream.alias("_stream"))
    loose = ~pl.col("_has_prefix") & pl.col("entry_idx").is_null()
    # A loose line after a prefixed line ending with ':' (e.g. "debug info:") continues it too.
    opens = pl.when(~loose).then(pl.col("body").str.strip_chars_end().str.ends_with(":"))
    # The block a line of an earlier batch opened is still open (while that stream's chain holds).
    open_before = {s: v for s, v in carry.open_block.items() if s in carry.last_head}
    seed_open = pl.col("_stream").replace_strict(open_before, default=False, return_dtype=pl.Boolean)
    df = df.with_columns(opens.forward_fill().over("_stream").alias("_open"))
    in_block = loose & pl.coalesce("_open", seed_open)
    cont = loose & (pl.col("body").str.contains(CONTINUATION) | in_block)
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


def parse_records(
    records: pl.DataFrame, opts: ParseOptions, line_id_base: int = 0, carry: StreamCarry | None = None
) -> Parsed:
    """Parse one batch. `line_id_base` numbers the lines; `carry` links consecutive batches."""
    carry = carry or StreamCarry()
    cat = opts.catalog
    df = records.select(list(RECORD_SCHEMA)).with_row_index("_row")
    df = df.with_columns((pl.col("_row").cast(pl.Int64) + line_id_base).alias("line_id"))
    df = _strip_prefixes(df)
    df = _app_time(df, opts, carry)
    df = _best_time(df, carry)
    df, fields = _match_and_extract(df, cat)
    df = _engine(df, cat, carry)
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
    events = (
        df.filter(pl.col("event").is_not_null())
        .select("_row", *EVENT_BASE_COLUMNS)
        .join(fields, on="_row", how="left", maintain_order="left")
        .drop("_row")
    )
    return Parsed(lines=lines, events=events)


def parse_messages(lines: list[str], catalog: Catalog | None = None, tz: str = "UTC") -> pl.DataFrame:
    """Parse bare log lines (as in a plain file): one row per line, events' fields included."""
    records = pl.DataFrame(
        {
            "source": "inline",
            "source_key": "inline",
            "seq": list(range(len(lines))),
            "message": lines,
            "host": "local",
            "unit": "inline",
        }
    ).with_columns(
        [
            pl.lit(None, dtype).alias(n)
            for n, dtype in RECORD_SCHEMA.items()
            if n not in ("source", "source_key", "seq", "message", "host", "unit")
        ]
    )
    records = records.select([pl.col(n).cast(t) for n, t in RECORD_SCHEMA.items()])
    parsed = parse_records(records, ParseOptions(catalog=catalog or load_catalog(), tz=tz))
    out = parsed.lines.select("line_id", "tp_rank", "dp_rank", "app_ts_us", "event", "entry", "parse_error")
    ev = parsed.events.drop(EVENT_BASE_COLUMNS[1:], strict=False)
    return out.join(ev, on="line_id", how="left").sort("line_id")


def extra_json(value: str | None) -> dict:
    return json.loads(value) if value else {}
