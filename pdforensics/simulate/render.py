"""Turn a simulated world into log lines, vectorised with polars.

Per-request lines (request logger, uvicorn access, ReqTimeStats) are polars templates over
the request table; everything else (gauges, failures, lifecycle) arrives as pre-rendered
events. Each line gets the writing host's clock (skew), its local-time prefix (time zone) and
its journal receive time (a per-stream delay of a few ms).
"""

from __future__ import annotations

from collections.abc import Iterator
from string import Formatter

import polars as pl

from pdforensics.simulate import lines as L
from pdforensics.simulate.fast import uniform
from pdforensics.simulate.model import INF, EngineCfg, Fleet, World

LINE_SCHEMA = {
    "t_us": pl.Int64,  # true time of the write, UTC µs
    "stream": pl.Int32,
    "fmt": pl.Int8,  # 1: "[local-time ranks] body", 0: body as is
    "ranks": pl.String,
    "body": pl.String,
    "bin": pl.Int32,  # index into World.events raw bytes (ANSI / invalid UTF-8), else null
}

ROUTER_IP = "10.0.0.9"
PROBE_IP = "10.0.0.9"


def fixed(expr: pl.Expr, decimals: int) -> pl.Expr:
    """``f"{x:.Nf}"`` for non-negative floats, vectorised."""
    scale = 10**decimals
    v = (expr * scale).round(0).cast(pl.Int64)
    return pl.concat_str(
        [(v // scale).cast(pl.String), pl.lit("."), (v % scale).cast(pl.String).str.zfill(decimals)]
    )


def template(fmt: str, slots: dict[str, pl.Expr]) -> pl.Expr:
    """A str.format-style template whose ``{name}`` slots are polars string expressions."""
    parts: list[pl.Expr] = []
    for literal, name, _spec, _conv in Formatter().parse(fmt):
        if literal:
            parts.append(pl.lit(literal))
        if name is not None:
            parts.append(slots[name])
    return pl.concat_str(parts)


def _s(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.String)


def request_table(w: World, pre: EngineCfg, dec: EngineCfg, pprocs, dprocs) -> pl.DataFrame:
    """``w.table`` as the request lines need it: stream ids, rank prefixes, null for 'never'."""
    k = w.key + 50

    def t(c: str) -> pl.Expr:
        return pl.when(pl.col(c) < INF).then(pl.col(c))

    def stream_of(col: str, procs) -> pl.Expr:
        return pl.col(col).replace_strict(
            list(range(len(procs))), [p.stream for p in procs], default=None, return_dtype=pl.Int32
        )

    def ranks_of(col: str, eng: EngineCfg) -> pl.Expr:
        return pl.col(col).replace_strict(
            list(range(eng.dp)),
            [eng.ranks(eng.lead_rank(d)) for d in range(eng.dp)],
            default="",
            return_dtype=pl.String,
        )

    return w.table.select(
        "hc",
        "room",
        "prid",
        "drid",
        "in_len",
        "cached",
        "out_len",
        "prealloc_wait",
        "d_status",
        "p_fin_reason",
        "d_fin_reason",
        "key",
        p_stream=stream_of("p_proc", pprocs),
        d_stream=stream_of("d_proc", dprocs),
        p_ranks=ranks_of("p_dp", pre),
        d_ranks=ranks_of("d_dp", dec),
        p_recv=t("p_recv"),
        p_bq=t("p_bq"),
        p_ready=t("p_ready"),
        p_start=t("p_start"),
        p_inf=t("p_inf"),
        p_fin=t("p_fin"),
        p_acc=t("p_acc"),
        p_ok=pl.col("p_out") == "ok",
        d_recv=pl.when(pl.col("d_out") != "hc503").then(t("d_recv")),
        d_pre=t("d_pre"),
        d_join=t("d_join"),
        d_fin=t("d_fin"),
        d_acc=t("d_acc"),
        d_ok=pl.col("d_out") == "ok",
    ).with_columns(
        port_p=(32768 + 28000 * uniform(k)).cast(pl.Int64),
        port_d=(32768 + 28000 * uniform(k + 1)).cast(pl.Int64),
        speed=8 + 30 * uniform(k + 2),
    )


def _epoch(col: str, skew_s: float, t0_us: int) -> pl.Expr:
    # wall clock of the writing host as Python's time.time() would print it
    return (pl.col(col) + skew_s) + t0_us / 1e6


def _spec(
    df: pl.DataFrame,
    time_col: str,
    stream_col: str,
    ranks: pl.Expr,
    body: pl.Expr,
    cond: pl.Expr,
    span: tuple[float, float],
    t0_us: int,
) -> pl.DataFrame:
    t = pl.col(time_col)
    sel = df.filter(
        cond & t.is_not_null() & (t >= span[0]) & (t < span[1]) & pl.col(stream_col).is_not_null()
    )
    return sel.select(
        t_us=(t * 1e6).round(0).cast(pl.Int64) + t0_us,
        stream=pl.col(stream_col).cast(pl.Int32),
        fmt=pl.lit(1, pl.Int8),
        ranks=ranks,
        body=body,
        bin=pl.lit(None, pl.Int32),
    )


def _obj_slots(side: str, bootstrap_ip: str) -> dict[str, pl.Expr]:
    hc = pl.col("hc")
    rid = pl.col("prid" if side == "p" else "drid")
    return {
        "rid": pl.concat_str([pl.lit("'"), rid, pl.lit("'")]),
        "stream": pl.when(hc).then(pl.lit("False")).otherwise(pl.lit("True")),
        "log_metrics": pl.when(hc).then(pl.lit("False")).otherwise(pl.lit("True")),
        "bhost": pl.when(hc)
        .then(pl.lit(f"'{L.FAKE_BOOTSTRAP_HOST}'"))
        .otherwise(pl.lit(f"'{bootstrap_ip}'")),
        "bport": pl.when(hc).then(pl.lit("None")).otherwise(pl.lit("8998")),
        "room": _s("room"),
    }


def _request_logger_specs(
    df, eng: EngineCfg, side: str, span: tuple[float, float], w: World, bootstrap_ip: str | None = None
) -> list[pl.DataFrame]:
    recv, fin, ok = f"{side}_recv", f"{side}_fin", pl.col(f"{side}_ok")
    stream = f"{side}_stream"
    slots = _obj_slots(side, bootstrap_ip or w.bootstrap_ip)
    obj = template(L.obj_template(eng), slots)
    if side == "p":
        success = pl.lit("{'type': 'length', 'length': 0}")
        completion = pl.lit("1")
    else:
        success = (
            pl.when(pl.col("hc"))
            .then(pl.lit("{'type': 'length', 'length': 1}"))
            .otherwise(pl.lit("{'type': 'stop', 'matched': 1}"))
        )
        completion = pl.when(pl.col("hc")).then(pl.lit("1")).otherwise(_s("out_len"))
    meta = template(
        L.meta_template(eng),
        {
            "rid": slots["rid"],
            "finish": pl.coalesce(pl.col(f"{side}_fin_reason"), success),
            "prompt": _s("in_len"),
            "completion": pl.when(ok).then(completion).otherwise(pl.lit("0")),
            "cached": _s("cached"),
            "e2e": (pl.col(fin) - pl.col(recv)).cast(pl.String),
            "sent": _epoch(fin, eng.host.skew_s, w.t0_us).cast(pl.String),
        },
    )
    none = pl.lit("")
    return [
        _spec(
            df,
            recv,
            stream,
            none,
            pl.concat_str([pl.lit("Receive: obj="), obj]),
            pl.col(recv) < eng.log_requests_until,  # a runtime `Config logging` can turn it off
            span,
            w.t0_us,
        ),
        _spec(
            df,
            fin,
            stream,
            none,
            pl.concat_str([pl.lit("Finish: obj="), obj, pl.lit(", out="), meta]),
            pl.col(recv).is_not_null() & (pl.col(fin) < eng.log_requests_until),
            span,
            w.t0_us,
        ),
    ]


def _client(w: World) -> pl.Expr:
    """Who called: the probe, the router, or (a rebootstrap leg) the decode host itself."""
    client = pl.when(pl.col("hc")).then(pl.lit(PROBE_IP))
    for rid, ip in sorted(w.rebootstrap.items()):
        client = client.when(pl.col("prid") == rid).then(pl.lit(ip))
    return client.otherwise(pl.lit(ROUTER_IP))


def _access_spec(df, eng: EngineCfg, side: str, span: tuple[float, float], w: World) -> pl.DataFrame:
    hc = pl.col("hc")
    status = pl.lit(200) if side == "p" else pl.col("d_status")
    line = pl.concat_str(
        [
            pl.lit("INFO:     "),
            _client(w),
            pl.lit(":"),
            _s(f"port_{side}"),
            pl.when(hc)
            .then(pl.lit(' - "GET /health HTTP/1.1" '))
            .otherwise(pl.lit(' - "POST /generate HTTP/1.1" ')),
            status.cast(pl.String),
            pl.when(status == 200).then(pl.lit(" OK")).otherwise(pl.lit(" Service Unavailable")),
        ]
    )
    cond = pl.lit(True) if eng.access_log_health else ~hc
    return _spec(df, f"{side}_acc", f"{side}_stream", pl.lit(""), line, cond, span, w.t0_us)


def _rts_spec(df, eng: EngineCfg, side: str, span: tuple[float, float], w: World) -> pl.DataFrame:
    ms = 1000.0
    if side == "p":
        slots = {
            "rid": pl.col("prid"),
            "room": _s("room"),
            "in_len": _s("in_len"),
            "cached": _s("cached"),
            "out_len": pl.lit("1"),
            "boot_ms": fixed((pl.col("p_ready") - pl.col("p_bq")) * ms, 2),
            "queue_ms": fixed((pl.col("p_start") - pl.col("p_ready")) * ms, 2),
            "fwd_ms": fixed((pl.col("p_inf") - pl.col("p_start")) * ms, 2),
            "entry": fixed(_epoch("p_bq", eng.host.skew_s, w.t0_us), 3),
            "speed": fixed(pl.col("speed"), 2),
            "total": fixed(pl.col("in_len") * 0.0625, 2),
        }
    else:
        slots = {
            "rid": pl.col("drid"),
            "room": _s("room"),
            "in_len": _s("in_len"),
            "cached": pl.lit("0"),
            "out_len": pl.when(pl.col("hc")).then(pl.lit("1")).otherwise(_s("out_len")),
            "boot_ms": fixed((pl.col("d_pre") - pl.col("d_recv") - pl.col("prealloc_wait")) * ms, 2),
            "alloc_ms": fixed(pl.col("prealloc_wait") * ms, 2),
            "xfer_ms": fixed((pl.col("d_join") - pl.col("d_pre")) * ms, 2),
            "queue_ms": fixed(pl.lit(0.41), 2),
            "fwd_ms": fixed((pl.col("d_fin") - pl.col("d_join")) * ms, 2),
            "entry": fixed(_epoch("d_recv", eng.host.skew_s, w.t0_us), 3),
        }
    body = template(L.rts_template(eng), slots)
    return _spec(
        df,
        f"{side}_fin",
        f"{side}_stream",
        pl.col(f"{side}_ranks"),
        body,
        pl.col(f"{side}_ok"),
        span,
        w.t0_us,
    )


def request_frames(
    w: World, pre: EngineCfg, dec: EngineCfg, df: pl.DataFrame, lo: float, hi: float
) -> Iterator[pl.DataFrame]:
    """The per-request lines whose true time falls in [lo, hi)."""
    span = (lo, hi)
    for side, eng in (("p", pre), ("d", dec)):
        yield from _side_frames(w, eng, side, df, span)


def _side_frames(
    w: World,
    eng: EngineCfg,
    side: str,
    df: pl.DataFrame,
    span: tuple[float, float],
    bootstrap_ip: str | None = None,
) -> Iterator[pl.DataFrame]:
    if eng.log_requests:
        yield from _request_logger_specs(df, eng, side, span, w, bootstrap_ip)
    yield _access_spec(df, eng, side, span, w)
    if eng.time_stats:
        yield _rts_spec(df, eng, side, span, w)


def fleet_request_frames(
    w: World, fleet: Fleet, df: pl.DataFrame, lo: float, hi: float
) -> Iterator[pl.DataFrame]:
    """:func:`request_frames` for a fleet: each side's lines as its own instance writes them, and the
    ``bootstrap_host`` of both legs the address of the request's prefill (the router injects it)."""
    span = (lo, hi)
    for pe, de in df.select("pe", "de").unique().sort("pe", "de", nulls_last=True).iter_rows():
        g = df.filter(pl.col("pe").eq_missing(pe) & pl.col("de").eq_missing(de))
        ip = fleet.pres[pe].host.ip if pe is not None else None
        if pe is not None:
            yield from _side_frames(w, fleet.pres[pe], "p", g, span, ip)
        if de is not None:
            yield from _side_frames(w, fleet.decs[de], "d", g, span, ip)


def event_frame(w: World, end: float) -> pl.DataFrame:
    ev = [e for e in w.events if 0.0 <= e.t <= end]
    raw_idx = {id(e): i for i, e in enumerate(w.events) if e.raw is not None}
    return pl.DataFrame(
        {
            "t_us": [w.t0_us + round(e.t * 1e6) for e in ev],
            "stream": [e.stream for e in ev],
            "fmt": [e.fmt for e in ev],
            "ranks": [e.ranks for e in ev],
            "body": [e.body for e in ev],
            "bin": [raw_idx.get(id(e)) for e in ev],
        },
        schema=LINE_SCHEMA,
    )


def stream_frame(w: World) -> pl.DataFrame:
    hosts = sorted({s.host.name for s in w.streams})
    return pl.DataFrame(
        {
            "stream": list(range(len(w.streams))),
            "host": [s.host.name for s in w.streams],
            "host_idx": [hosts.index(s.host.name) for s in w.streams],
            "skew_us": [round(s.host.skew_s * 1e6) for s in w.streams],
            "tz_us": [s.host.tz_min * 60_000_000 for s in w.streams],
            "delay_us": [s.delay_us for s in w.streams],
        },
        schema={
            "stream": pl.Int32,
            "host": pl.String,
            "host_idx": pl.Int32,
            "skew_us": pl.Int64,
            "tz_us": pl.Int64,
            "delay_us": pl.Int64,
        },
    )


def finish_lines(lines: pl.DataFrame, streams: pl.DataFrame, zone: str | None = None) -> pl.DataFrame:
    """Add the host clock, the journal receive time ``ts`` and the line's ``prefix``.

    The message is ``prefix + body``; the two stay apart so the writers copy the (long) body
    only once, straight into the export/json/plain text. The prefix is the host's local time: its
    fixed offset, or `zone`'s wall clock (DST: an hour skipped, an hour shown twice).
    """
    df = lines.join(streams, on="stream", how="left", maintain_order="left")
    clock = pl.col("t_us") + pl.col("skew_us")
    if zone is None:
        wall = (clock + pl.col("tz_us")).cast(pl.Datetime("us"))
    else:
        wall = clock.cast(pl.Datetime("us", "UTC")).dt.convert_time_zone(zone)
    local = wall.dt.strftime("%Y-%m-%d %H:%M:%S")
    prefix = (
        pl.when(pl.col("fmt") == 1)
        .then(pl.concat_str([pl.lit("["), local, pl.col("ranks"), pl.lit("] ")]))
        .otherwise(pl.lit(""))
    )
    return df.select(
        "t_us", "stream", "host_idx", "bin", "body", ts=clock + pl.col("delay_us"), prefix=prefix
    )
