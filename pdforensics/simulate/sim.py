"""The PD engine model, vectorised: what happens to each request, and what the gauges read.

Phases per request (reference §3.2): decode receives it and pre-allocates KV (``d_pre``);
prefill bootstraps (``p_ready`` = when decode's KV indices arrived), waits, runs in a batch
(``p_inf`` = forward end = inflight-queue entry), transfers KV (``p_rel`` = leaves the
inflight queue), decode joins the running batch (``d_join``) and finishes (``d_fin``).

Incident rules, all from the reference:
* a decode unit in SIGTERM draining stops completing KV receives; a transfer that would end
  after its SIGTERM never completes: NIXL leaves the prefill sender in Transferring forever
  (the pin) and the decode side dies with the process at SIGKILL;
* ``pin`` forces the same (a stalled NIXL handle); ``abort_lands=False`` models an abort
  that races the inflight append and never reaches the prefill sender;
* the operator's watchdog, when armed (and not broken), force-fails a pin at entry + timeout + ε.

All requests live in one polars frame (``World.table`` after :func:`run`): background
traffic is generated in bulk, incident requests and health checks are :class:`Req` objects
whose outcomes are copied back onto them. Per-row jitter comes from :func:`uniform`, an
integer hash, so output is identical across platforms and library versions.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import polars as pl

from pdforensics.simulate import lines as L
from pdforensics.simulate.fast import uniform
from pdforensics.simulate.model import INF, V0_5_9, V0_5_14, EngineCfg, Fleet, Proc, World

STATE = "KVPoll.Transferring"
ABORT = "Aborted by AbortReq."


# ---- the request frame --------------------------------------------------------------------

REQ_SCHEMA = {
    "key": pl.UInt64,
    "t_arr": pl.Float64,
    "in_len": pl.Int64,
    "cached": pl.Int64,
    "out_len": pl.Int64,
    "room": pl.UInt64,
    "prid": pl.String,
    "drid": pl.String,
    "hc": pl.Boolean,
    "to_p": pl.Boolean,
    "to_d": pl.Boolean,
    "p_dp": pl.Int32,
    "d_dp": pl.Int32,
    "prealloc_wait": pl.Float64,
    "xfer": pl.Float64,
    "abort_t": pl.Float64,
    "abort_lands": pl.Boolean,
    "pin": pl.Boolean,
    "xfer_fail": pl.String,
    "special": pl.Int32,  # index into World.reqs, null for bulk traffic
}


def specials_frame(w: World) -> pl.DataFrame:
    rows = w.reqs
    base = 1 << 40  # hash keys of specials never meet the bulk traffic's
    return pl.DataFrame(
        {
            "key": [base + i for i in range(len(rows))],
            "t_arr": [r.t_arr for r in rows],
            "in_len": [r.in_len for r in rows],
            "cached": [r.cached for r in rows],
            "out_len": [r.out_len for r in rows],
            "room": [r.room for r in rows],
            "prid": [r.prid for r in rows],
            "drid": [r.drid for r in rows],
            "hc": [r.hc for r in rows],
            "to_p": [r.to_prefill for r in rows],
            "to_d": [r.to_decode for r in rows],
            "p_dp": [r.p_dp for r in rows],
            "d_dp": [r.d_dp for r in rows],
            "prealloc_wait": [r.prealloc_wait for r in rows],
            "xfer": [r.xfer for r in rows],
            "abort_t": [r.abort_t for r in rows],
            "abort_lands": [r.abort_lands for r in rows],
            "pin": [r.pin for r in rows],
            "xfer_fail": [r.xfer_fail or None for r in rows],
            "special": list(range(len(rows))),
        },
        schema=REQ_SCHEMA,
    )


def _proc_index(procs: list[Proc], t: pl.Expr) -> pl.Expr:
    expr = pl.lit(None, pl.Int32)
    for k in reversed(range(len(procs))):
        p = procs[k]
        expr = pl.when((t >= p.t_ready) & (t < p.t_end)).then(pl.lit(k, pl.Int32)).otherwise(expr)
    return expr


def _by_proc(procs: list[Proc], idx: pl.Expr, attr: str) -> pl.Expr:
    expr = pl.lit(None, pl.Float64)
    for k, p in enumerate(procs):
        expr = pl.when(idx == k).then(pl.lit(getattr(p, attr), pl.Float64)).otherwise(expr)
    return expr


def _inf(x: pl.Expr) -> pl.Expr:
    return pl.when(x.is_null()).then(pl.lit(INF)).otherwise(x)


# ---- phases before the prefill forward -----------------------------------------------------


def _pre(
    df: pl.DataFrame, pprocs: list[Proc], dprocs: list[Proc], k: int, rebootstrap: dict[str, str]
) -> pl.DataFrame:
    t = pl.col("t_arr")
    df = df.with_columns(
        p_proc=pl.when(pl.col("to_p")).then(_proc_index(pprocs, t)),
        d_proc=pl.when(pl.col("to_d")).then(_proc_index(dprocs, t)),
    ).with_columns(to_p=pl.col("p_proc").is_not_null(), to_d=pl.col("d_proc").is_not_null())
    hc, d_proc = pl.col("hc"), pl.col("d_proc")
    d_recv = pl.when(pl.col("to_d")).then(t + 0.0004 + 0.0016 * uniform(k + 1)).otherwise(INF)
    df = df.with_columns(d_recv=d_recv).with_columns(
        hc503=hc & pl.col("to_d") & (pl.col("d_recv") >= _inf(_by_proc(dprocs, d_proc, "t_sigterm")))
    )
    d_pre = (
        pl.col("d_recv")
        + pl.when(hc).then(0.001).otherwise(0.004 + 0.012 * uniform(k + 2))
        + pl.col("prealloc_wait")
    )
    d_pre = (
        pl.when(~pl.col("to_d") | pl.col("hc503") | (d_pre >= _inf(_by_proc(dprocs, d_proc, "t_end"))))
        .then(INF)
        .otherwise(d_pre)
    )
    p_recv = pl.when(pl.col("to_p")).then(t + 0.0004 + 0.0016 * uniform(k + 3)).otherwise(INF)
    df = df.with_columns(d_pre=d_pre, p_recv=p_recv).with_columns(
        p_bq=pl.col("p_recv") + pl.when(hc).then(0.0008).otherwise(0.002 + 0.006 * uniform(k + 4))
    )
    ready = pl.when(hc).then(pl.col("p_bq") + 0.0008)  # fake sender: WaitingForInput at once
    if rebootstrap:  # a rebootstrap leg reuses its room's bootstrapped sender
        ready = ready.when(pl.col("prid").is_in(sorted(rebootstrap))).then(pl.col("p_bq") + 0.0008)
    ready = (
        ready.when(pl.col("to_d") & (pl.col("d_pre") < INF) & (pl.col("abort_t") >= pl.col("d_pre")))
        .then(pl.max_horizontal("p_bq", "d_pre") + 0.0005)
        .otherwise(INF)  # decode never sent its KV indices: the sender stays Bootstrapping
    )
    df = df.with_columns(p_ready=pl.when(pl.col("to_p")).then(ready).otherwise(INF))
    boot_abort = pl.col("to_p") & (pl.col("abort_t") < pl.col("p_ready")) & pl.col("abort_lands")
    return df.with_columns(
        p_out=pl.when(boot_abort).then(pl.lit("boot_abort")).otherwise(pl.lit("none")),
        p_rel=pl.when(boot_abort).then(pl.col("abort_t") + 0.003).otherwise(INF),
    )


# ---- prefill batches (sequential over batches, not requests) -----------------------------------


class Batches:
    """FCFS batches of one DP group: each takes every ready request up to the token cap."""

    def __init__(self) -> None:
        self.start: list[float] = []
        self.end: list[float] = []
        self.n: list[int] = []
        self.tokens: list[int] = []
        self.cached: list[int] = []
        self.proc: list[int] = []


def _run_batches(eng: EngineCfg, g: pl.DataFrame, scale: float) -> tuple[Batches, list, list, list]:
    """Return the batches and, per row of ``g`` (sorted by p_ready), start, end, waiting-abort flag."""
    ready = g["p_ready"].to_list()
    ext = (g["in_len"] - g["cached"]).to_list()
    aborts = g["abort_t"].to_list()
    lands = g["abort_lands"].to_list()
    cached = g["cached"].to_list()
    procs = g["p_proc"].to_list()
    prefix = [0]
    for e in ext:
        prefix.append(prefix[-1] + e)
    aborted = [i for i, a in enumerate(aborts) if a < INF]  # only incident rows can abort
    per_tok = eng.prefill_fwd_per_tok_s / scale  # `scale` grows the fleet with the request rate
    cap = int(eng.max_prefill_tokens * max(1.0, scale))
    n = len(ready)
    start = [INF] * n
    end = [INF] * n
    wait_abort = [False] * n
    b = Batches()
    t_free = -INF
    i = 0
    while i < n:
        s = max(t_free, ready[i]) + 0.0012
        j = max(i + 1, min(bisect_right(ready, s, lo=i), bisect_right(prefix, prefix[i] + cap, lo=i + 1) - 1))
        members = j - i
        tokens = prefix[j] - prefix[i]
        hit_cached = 0
        for a in aborted[bisect_right(aborted, i - 1) : bisect_right(aborted, j - 1)]:
            if aborts[a] <= s and lands[a]:  # aborted while waiting: leaves the queue, never runs
                wait_abort[a] = True
                members -= 1
                tokens -= ext[a]
        if members == 0:
            t_free = s
            i = j
            continue
        e = s + eng.prefill_fwd_base_s + tokens * per_tok
        start[i:j] = [s] * (j - i)
        end[i:j] = [e] * (j - i)
        if cached[i] or members > 1:
            hit_cached = sum(cached[x] for x in range(i, j) if not wait_abort[x])
        b.start.append(s)
        b.end.append(e)
        b.n.append(members)
        b.tokens.append(tokens)
        b.cached.append(hit_cached)
        b.proc.append(procs[i])
        t_free = e
        i = j
    return b, start, end, wait_abort


def _same_second(t: pl.Expr, offset_s: float) -> pl.Expr:
    """Keep a firing (and its per-rank lines, ~2 ms) inside one wall-clock second (design §3).

    ``offset_s``: host clock minus simulation time, so the second is the one the prefix shows.
    """
    frac = (t + offset_s) % 1.0
    return pl.when(frac > 0.97).then(t - 0.05).otherwise(t)


def _release(df: pl.DataFrame, eng: EngineCfg, dprocs: list[Proc], w: World) -> pl.DataFrame:
    """When (and how) each request that ran its forward leaves the inflight queue."""
    ran = pl.col("p_inf") < INF
    base = pl.col("p_inf") + pl.col("xfer")
    sigterm = _inf(_by_proc(dprocs, pl.col("d_proc"), "t_sigterm"))
    frozen = pl.col("to_d") & (base >= sigterm)  # the decode is draining: the KV never lands
    blind = pl.col("room").is_in(sorted(w.sender_blind)) & ~frozen  # the KV lands; Success is never seen
    pin = ran & ~pl.col("hc") & (pl.col("pin") | frozen | blind)
    abort_in = ran & ~pl.col("hc") & ~pin & (pl.col("abort_t") < base)
    race = abort_in & ~pl.col("abort_lands")  # decode aborted, prefill never hears of it
    df = df.with_columns(pin=pin | race, inflight_abort=abort_in & pl.col("abort_lands"))
    armed = eng.watchdog_s is not None and not eng.watchdog_broken
    offset = (w.t0_us % 1_000_000) / 1e6 + eng.host.skew_s
    fire = _same_second(pl.col("p_inf") + (eng.watchdog_s or 0) + 0.3 + 0.2 * uniform(w.key + 5), offset)
    out = (
        pl.when(~ran)
        .then(pl.col("p_out"))
        .when(pl.col("hc"))
        .then(pl.lit("ok"))
        .when(pl.col("pin"))
        .then(pl.lit("watchdog" if armed else "pinned"))
        .when(pl.col("inflight_abort"))
        .then(pl.lit("inflight_abort"))
        .when(pl.col("xfer_fail").is_not_null())
        .then(pl.lit("xfer_fail"))
        .otherwise(pl.lit("ok"))
    )
    rel = (
        pl.when(~ran)
        .then(pl.col("p_rel"))
        .when(pl.col("hc"))
        .then(pl.col("p_inf") + 0.0015)
        .when(pl.col("pin"))
        .then(fire if armed else pl.lit(INF))
        .when(pl.col("inflight_abort"))
        .then(pl.max_horizontal("abort_t", "p_inf") + 0.004)
        .otherwise(base)
    )
    return df.with_columns(
        p_out=out, p_rel=rel, kv_t=pl.when(ran & blind & ~pl.col("hc")).then(base).otherwise(INF)
    ).with_columns(fire_t=pl.when(pl.col("p_out") == "watchdog").then(pl.col("p_rel")).otherwise(INF))


def _bootstrap_timeout(df: pl.DataFrame, eng: EngineCfg) -> pl.DataFrame:
    """SGLang's own bootstrap timeout (``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT``): a sender still
    Bootstrapping (the decode never sent its KV indices) fails ``timeout`` after its creation."""
    if eng.bootstrap_timeout_s is None:
        return df
    hit = pl.col("to_p") & ~pl.col("hc") & (pl.col("p_ready") == INF) & (pl.col("p_out") == "none")
    return df.with_columns(
        p_out=pl.when(hit).then(pl.lit("boot_timeout")).otherwise(pl.col("p_out")),
        p_rel=pl.when(hit).then(pl.col("p_bq") + eng.bootstrap_timeout_s).otherwise(pl.col("p_rel")),
    )


def _died(df: pl.DataFrame, pprocs: list[Proc]) -> pl.DataFrame:
    """Requests a prefill process still held when it ended (crash, kill, restart): gone with it.

    No line of that process ends them; the decode side never gets their KV (``p_out`` "died").
    They leave every queue at the process's end (``p_rel``): a new process starts empty.
    """
    for k, p in enumerate(pprocs):
        if p.t_end == INF:
            continue
        held = (pl.col("p_proc") == k) & (pl.col("p_rel") >= p.t_end)
        df = df.with_columns(
            p_out=pl.when(held).then(pl.lit("died")).otherwise(pl.col("p_out")),
            p_rel=pl.when(held).then(p.t_end).otherwise(pl.col("p_rel")),
            fire_t=pl.when(held).then(INF).otherwise(pl.col("fire_t")),
        )
    return df


def simulate_prefill(
    w: World,
    df: pl.DataFrame,
    eng: EngineCfg,
    dprocs: list[Proc],
    end: float,
    pprocs: list[Proc] | None = None,
) -> pl.DataFrame:
    df = df.with_row_index("row")
    parts = []
    for dp_rank in range(eng.dp):
        g = df.filter(
            pl.col("to_p")
            & (pl.col("p_dp") == dp_rank)
            & (pl.col("p_ready") < INF)
            & (pl.col("p_out") == "none")
        ).sort("p_ready", "row")
        b, start, stop, wait_abort = _run_batches(eng, g, w.scale)
        parts.append(
            pl.DataFrame({"row": g["row"], "p_start": start, "p_inf": stop, "wait_abort": wait_abort})
        )
        w.batches.append((dp_rank, b))
    upd = (
        pl.concat(parts)
        if parts
        else pl.DataFrame(
            schema={"row": pl.UInt32, "p_start": pl.Float64, "p_inf": pl.Float64, "wait_abort": pl.Boolean}
        )
    )
    df = df.join(upd, on="row", how="left").with_columns(
        p_start=_inf(pl.col("p_start")),
        p_inf=_inf(pl.col("p_inf")),
        wait_abort=pl.col("wait_abort").fill_null(False),
    )
    df = df.with_columns(
        p_out=pl.when(pl.col("wait_abort")).then(pl.lit("wait_abort")).otherwise(pl.col("p_out")),
        p_rel=pl.when(pl.col("wait_abort")).then(pl.col("abort_t") + 0.002).otherwise(pl.col("p_rel")),
        p_start=pl.when(pl.col("wait_abort")).then(INF).otherwise(pl.col("p_start")),
        p_inf=pl.when(pl.col("wait_abort")).then(INF).otherwise(pl.col("p_inf")),
    )
    df = _release(df, eng, dprocs, w).sort("row").drop("row")
    df = _bootstrap_timeout(df, eng)
    df = _died(df, pprocs or [])
    # the Finish line and the access line of the /generate (or /health) call that ends it
    done = pl.col("p_out").is_in(
        ["ok", "boot_abort", "wait_abort", "inflight_abort", "xfer_fail", "watchdog", "boot_timeout"]
    )
    fin = pl.col("p_rel") + pl.when(pl.col("p_out") == "ok").then(0.0008).otherwise(0.0021)
    fin = pl.when(pl.col("hc")).then(pl.col("p_rel") + 0.0006).otherwise(fin)
    return df.with_columns(p_fin=pl.when(done).then(fin).otherwise(INF)).with_columns(
        p_acc=pl.col("p_fin") + 0.0004
    )


def prefill_gauges(w: World, df: pl.DataFrame, eng: EngineCfg, pprocs: list[Proc], end: float) -> None:
    after = eng.version >= V0_5_9  # <= 0.5.8 printed the line before the forward
    for dp_rank, b in w.batches:
        g = df.filter(pl.col("to_p") & (pl.col("p_dp") == dp_rank))
        inf_in = g.filter(pl.col("p_inf") < INF)["p_inf"].sort().to_list()
        inf_out = g.filter(pl.col("p_inf") < INF)["p_rel"].sort().to_list()
        boot_in = g["p_bq"].sort().to_list()
        boot_out = (
            g.select(
                pl.when(pl.col("p_out").is_in(["boot_abort", "boot_timeout"]))
                .then(pl.col("p_rel"))
                .when(pl.col("p_out") == "died")
                .then(pl.min_horizontal("p_ready", "p_rel"))
                .otherwise(pl.col("p_ready"))
            )
            .to_series()
            .sort()
            .to_list()
        )
        queued = g.filter((pl.col("p_ready") < INF) & (pl.col("p_out") != "boot_abort"))
        q_in = queued["p_ready"].sort().to_list()
        q_out = (
            queued.select(
                pl.when(pl.col("p_out") == "wait_abort")
                .then(pl.col("p_rel"))
                .when(pl.col("p_out") == "died")
                .then(pl.min_horizontal("p_start", "p_rel"))
                .otherwise(pl.col("p_start"))
            )
            .to_series()
            .sort()
            .to_list()
        )
        mean_in = g["in_len"].mean() or 0.0
        ranks = eng.ranks(eng.lead_rank(dp_rank))
        prev = -INF
        for s, e, n, tokens, cached, proc in zip(
            b.start, b.end, b.n, b.tokens, b.cached, b.proc, strict=True
        ):
            t = e if after else s
            p = pprocs[proc]
            if not (0.0 <= t <= end) or t >= p.t_end:
                prev = t
                continue
            inflight = bisect_right(inf_in, t) - bisect_right(inf_out, t)
            queue = bisect_right(q_in, t) - bisect_right(q_out, t)
            body = L.prefill_stats(
                eng,
                new_seq=n,
                new_tok=tokens,
                cached=cached,
                usage=min(0.99, inflight * mean_in / eng.max_total_tokens + 0.004),
                queue=queue,
                pending=int(queue * mean_in),
                boot=bisect_right(boot_in, t) - bisect_right(boot_out, t),
                inflight=inflight,
                thr=tokens / max(t - prev if prev > -INF else 1.0, 1e-3),
                gauge=t < eng.gauge_until,
            )
            w.emit(t + 0.0003, p.stream, body, ranks)
            prev = t


# ---- decode -------------------------------------------------------------------------------------


def simulate_decode(w: World, df: pl.DataFrame, eng: EngineCfg, dprocs: list[Proc]) -> pl.DataFrame:
    k = w.key
    sigterm = _inf(_by_proc(dprocs, pl.col("d_proc"), "t_sigterm"))
    t_end = _inf(_by_proc(dprocs, pl.col("d_proc"), "t_end"))
    alive = pl.col("to_d") & ~pl.col("hc503")
    kv = (pl.col("p_out") == "ok") & (pl.col("p_rel") < sigterm)
    if w.sender_blind:  # the KV landed at kv_t although the prefill still holds the request
        kv = kv | (pl.col("kv_t") < sigterm)
    if w.decode_stuck:  # the prefill sent it (Success); the decode receiver never completes
        kv = kv & ~pl.col("room").is_in(sorted(w.decode_stuck))
    join = (
        pl.when(~alive)
        .then(INF)
        .when(pl.col("hc"))
        .then(pl.col("d_pre") + 0.0015)
        .when(kv)
        .then(pl.min_horizontal("p_rel", "kv_t") + 0.002 + 0.004 * uniform(k + 6))
        .otherwise(INF)
    )
    df = df.with_columns(d_join=join)
    forwards = (pl.col("out_len") / eng.accept_len).ceil()
    gen = (
        pl.when(pl.col("hc"))
        .then(eng.tpot_s)
        .otherwise(forwards * eng.tpot_s * (0.95 + 0.1 * uniform(k + 7)))
    )
    df = df.with_columns(d_fin=pl.col("d_join") + gen)
    lost = alive & (t_end < INF) & (pl.col("d_fin") >= t_end)
    out = (
        pl.when(~pl.col("to_d"))
        .then(pl.lit("none"))
        .when(pl.col("hc503"))
        .then(pl.lit("hc503"))
        .when(lost)
        .then(pl.lit("lost"))
        .when(pl.col("d_fin") < INF)
        .then(pl.lit("ok"))
        .otherwise(pl.lit("open"))
    )
    if w.retracted:  # retracted while decoding, its rebootstrap KV never comes: open from then on
        t_r = pl.col("room").replace_strict(w.retracted, default=None, return_dtype=pl.Float64)
        out = pl.when(t_r.is_not_null() & (t_r < pl.col("d_fin"))).then(pl.lit("retracted")).otherwise(out)
    df = df.with_columns(d_out=out).with_columns(
        d_end=pl.when(pl.col("d_out") == "lost")
        .then(t_end)
        .when(pl.col("d_out") == "hc503")
        .then(pl.col("d_recv") + 0.001)
        .when(pl.col("d_out") == "ok")
        .then(pl.col("d_fin"))
        .when(pl.col("d_out") == "retracted")  # its decode run ends there (gauges); no Finish
        .then(pl.col("room").replace_strict(w.retracted, default=INF, return_dtype=pl.Float64))
        .otherwise(INF),
        d_fin=pl.when(pl.col("d_out").is_in(["lost", "retracted"])).then(INF).otherwise(pl.col("d_fin")),
    )
    acc = (
        pl.when(pl.col("hc503"))
        .then(pl.col("d_end"))
        .when(pl.col("hc"))
        .then(pl.col("d_fin") + 0.0005)
        .when(pl.col("to_d"))
        .then(pl.col("d_recv") + 0.008 + 0.02 * uniform(k + 8))  # streaming: headers go out at once
        .otherwise(INF)
    )
    return df.with_columns(d_acc=acc, d_status=pl.when(pl.col("hc503")).then(503).otherwise(200))


def decode_gauges(w: World, df: pl.DataFrame, eng: EngineCfg, dprocs: list[Proc], end: float) -> None:
    for pi, p in enumerate(dprocs):
        for dp_rank in range(eng.dp):
            mine = df.filter(
                (pl.col("d_proc") == pi) & (pl.col("d_dp") == dp_rank) & (pl.col("d_out") != "hc503")
            )
            _decode_group_gauges(w, eng, p, dp_rank, mine, end)


def _merged_runs(mine: pl.DataFrame) -> list[tuple[float, float]]:
    runs = (
        mine.filter(pl.col("d_join") < INF)
        .select(s=pl.col("d_join"), e=pl.min_horizontal("d_end", "d_fin"))
        .sort("s")
    )
    if not runs.height:
        return []
    merged = (
        runs.with_columns(reach=pl.col("e").cum_max().shift(1, fill_value=-INF))
        .with_columns(grp=(pl.col("s") > pl.col("reach")).cum_sum())
        .group_by("grp", maintain_order=True)
        .agg(pl.col("s").min(), pl.col("e").max())
    )
    return list(zip(merged["s"].to_list(), merged["e"].to_list(), strict=True))


def _decode_group_gauges(
    w: World, eng: EngineCfg, p: Proc, dp_rank: int, mine: pl.DataFrame, end: float
) -> None:
    run = mine.filter(pl.col("d_join") < INF)
    run_in = run["d_join"].sort().to_list()
    run_out = run.select(pl.min_horizontal("d_end", "d_fin")).to_series().sort().to_list()
    pre_in = mine["d_recv"].sort().to_list()
    pre_out = mine.select(pl.min_horizontal("d_pre", "d_end")).to_series().sort().to_list()
    xq = mine.filter(pl.col("d_pre") < INF)
    xfer_in = xq["d_pre"].sort().to_list()
    xfer_out = xq.select(pl.min_horizontal("d_join", "d_end")).to_series().sort().to_list()
    ctx = mine.select((pl.col("in_len") + pl.col("out_len") // 2).mean()).item() or 0.0
    ranks = eng.ranks(eng.lead_rank(dp_rank))
    tpot, every = eng.tpot_s, eng.decode_log_interval
    rnd = w.rng.random
    fwd = 0  # forward_ct of this scheduler process
    for s, e in _merged_runs(mine):
        e = min(e, p.t_end)
        n = max(1, math.ceil((e - s) / tpot))
        k = every - fwd % every  # the next multiple of the log interval, counted into this burst
        while k <= n:
            t = s + (k - 1) * tpot
            if 0.0 <= t <= end:
                running = max(1, bisect_right(run_in, t) - bisect_right(run_out, t))
                body = L.decode_stats(
                    eng,
                    running=running,
                    tokens=min(int(running * ctx), int(eng.max_total_tokens * 0.985)),  # a full pool
                    prealloc=bisect_right(pre_in, t) - bisect_right(pre_out, t),
                    transfer=bisect_right(xfer_in, t) - bisect_right(xfer_out, t),
                    queue=0,
                    thr=running * eng.accept_len / tpot * (0.9 + 0.2 * rnd()),
                    accept_len=eng.accept_len * (0.93 + 0.14 * rnd()),
                )
                w.emit(t, p.stream, body, ranks)
            k += every
        fwd += n


# ---- failure lines and incident outcomes (a handful of rows, in Python) ---------------------------


def _group_lines(
    w: World, eng: EngineCfg, dp: int, room: int, t: float, stream: int, body_of, one_rank: bool
):
    ranks = eng.group_ranks(dp)
    if one_rank:  # 0.5.14+: ranks without the failure record log it at DEBUG only
        ranks = [ranks[room % len(ranks)]]
    for k, rank in enumerate(ranks):
        w.emit(t + 0.00023 * k, stream, body_of(rank), eng.ranks(rank), room=room, rid=True, engine=eng.role)


def incident_lines(
    w: World, df: pl.DataFrame, pre: EngineCfg, dec: EngineCfg, pprocs, dprocs
) -> pl.DataFrame:
    """Failure/watchdog lines, abort outcomes on decode, and the Finish reasons they imply."""
    rows = df.with_row_index("row").filter(
        ~pl.col("hc")
        & (
            pl.col("p_out").is_in(
                ["boot_abort", "wait_abort", "inflight_abort", "xfer_fail", "watchdog", "boot_timeout"]
            )
            | (pl.col("abort_t") < INF)
        )
    )
    p_reason: dict[int, str] = {}
    d_patch: dict[int, tuple] = {}
    for r in rows.iter_rows(named=True):
        if r["to_p"]:
            reason = _prefill_incident(w, pre, r, pprocs[r["p_proc"]].stream)
            if reason:
                p_reason[r["row"]] = reason
        if r["to_d"]:
            patch = _decode_incident(w, dec, r, dprocs[r["d_proc"]])
            if patch:
                d_patch[r["row"]] = patch
    df = df.with_row_index("row")
    if p_reason:
        df = df.with_columns(
            p_fin_reason=pl.col("row").replace_strict(p_reason, default=None, return_dtype=pl.String)
        )
    else:
        df = df.with_columns(p_fin_reason=pl.lit(None, pl.String))
    if d_patch:
        patch = pl.DataFrame(
            [(row, *v) for row, v in d_patch.items()],
            schema={"row": pl.UInt32, "d_out2": pl.String, "d_end2": pl.Float64, "d_fin_reason": pl.String},
            orient="row",
        )
        df = (
            df.join(patch, on="row", how="left")
            .with_columns(
                d_out=pl.coalesce("d_out2", "d_out"),
                d_end=pl.coalesce("d_end2", "d_end"),
                d_fin=pl.when(pl.col("d_out2").is_not_null())
                .then(pl.col("d_end2") + 0.001)
                .otherwise(pl.col("d_fin")),
                d_join=pl.when(pl.col("d_out2").is_not_null() & (pl.col("d_join") > pl.col("d_end2")))
                .then(INF)
                .otherwise(pl.col("d_join")),
            )
            .drop("d_out2", "d_end2")
        )
    else:
        df = df.with_columns(d_fin_reason=pl.lit(None, pl.String))
    return df.drop("row")


def _prefill_incident(w: World, eng: EngineCfg, r: dict, stream: int) -> str | None:
    room, rid, dp, out = r["room"], r["prid"], r["p_dp"], r["p_out"]
    lead = eng.lead_rank(dp)
    if out == "boot_abort":
        _group_lines(
            w,
            eng,
            dp,
            room,
            r["p_rel"],
            stream,
            lambda k: L.prefill_failed("bootstrap", k, rid, room, ABORT),
            one_rank=False,
        )
        return L.abort_finish_reason(L.prefill_failed("bootstrap", lead, rid, room, ABORT))
    if out == "inflight_abort":
        _group_lines(
            w,
            eng,
            dp,
            room,
            r["p_rel"],
            stream,
            lambda k: L.prefill_failed("transfer", k, rid, room, ABORT),
            one_rank=False,
        )
        return L.abort_finish_reason(L.prefill_failed("transfer", lead, rid, room, ABORT))
    if out == "wait_abort":
        return L.abort_finish_reason("Abort in waiting queue")
    if out == "xfer_fail":
        why = r["xfer_fail"]
        _group_lines(
            w,
            eng,
            dp,
            room,
            r["p_rel"],
            stream,
            lambda k: L.prefill_failed("transfer", k, rid, room, why),
            one_rank=eng.version >= V0_5_14,
        )
        return L.abort_finish_reason(L.prefill_failed("transfer", lead, rid, room, why))
    if out == "boot_timeout":
        timeout = eng.bootstrap_timeout_s or 0.0
        why = f"Request {room} timed out after {timeout:.1f}s in KVPoll.Bootstrapping"
        if not w.hinted:  # once per scheduler process (warning_once): every rank of the group
            w.hinted = True
            for k, rank in enumerate(eng.group_ranks(dp)):
                w.emit(r["p_rel"] - 0.0005 + 0.00023 * k, stream, L.BOOTSTRAP_TIMEOUT_HINT, eng.ranks(rank))
        _group_lines(
            w,
            eng,
            dp,
            room,
            r["p_rel"],
            stream,
            lambda k: L.prefill_failed("bootstrap", k, rid, room, why),
            one_rank=False,
        )
        return L.abort_finish_reason(L.prefill_failed("bootstrap", lead, rid, room, why))
    if out == "watchdog" and eng.watchdog_dialect == "slime":
        dwell = r["p_rel"] - r["p_inf"]
        code = L.KVPOLL_CODE[w.fire_states.get(room, STATE)]
        _group_lines(
            w,
            eng,
            dp,
            room,
            r["p_rel"],
            stream,
            lambda k: L.slime_prefill_timeout(dwell, code, k, rid, room),
            one_rank=False,
        )
        return L.abort_finish_reason(L.slime_prefill_timeout(dwell, code, lead, rid, room), 504)
    if out == "watchdog":
        timeout = eng.watchdog_s or 0
        dwell = r["p_rel"] - r["p_inf"]
        state = w.fire_states.get(room, STATE)
        _group_lines(
            w,
            eng,
            dp,
            room,
            r["p_rel"],
            stream,
            lambda k: L.watchdog_fired(rid, room, timeout, state, dwell),
            one_rank=False,
        )
        why = L.watchdog_reason(timeout, state)
        _group_lines(
            w,
            eng,
            dp,
            room,
            r["p_rel"] + 0.0011,
            stream,
            lambda k: L.prefill_failed("transfer", k, rid, room, why),
            one_rank=False,
        )
        return L.abort_finish_reason(L.prefill_failed("transfer", lead, rid, room, why))
    return None


def _decode_incident(w: World, eng: EngineCfg, r: dict, p: Proc) -> tuple | None:
    """(d_out, d_end, Finish reason) when an abort or a propagated failure ends it on decode."""
    room, rid, dp = r["room"], r["drid"], r["d_dp"]
    lead = eng.lead_rank(dp)
    natural_end = min(r["d_fin"], p.t_end)
    if r["abort_t"] < natural_end and not r["hc503"]:
        t = r["abort_t"] + 0.005
        if r["abort_t"] < r["d_pre"] or r["p_out"] == "boot_abort":  # prefill still bootstrapping
            kind, out = "handshake", "handshake_abort"
        elif r["abort_t"] < r["d_join"]:
            kind, out = "transfer", "transfer_abort"
        else:
            kind, out = "", "running_abort"
        if kind:
            _group_lines(
                w,
                eng,
                dp,
                room,
                t - 0.001,
                p.stream,
                lambda k: L.decode_failed(kind, k, rid, room, ABORT),
                one_rank=False,
            )
            msg = L.decode_failed(kind, lead, rid, room, ABORT)
        else:
            msg = "Abort in running batch"
        return out, t, L.abort_finish_reason(msg)
    if r["p_out"] == "xfer_fail" and r["p_rel"] < p.t_end:
        # the prefill failed the room; this decode only learns that prefill "might be dead"
        t = r["p_rel"] + 0.05
        why = "Failed to get kvcache from prefill instance, it might be dead"
        _group_lines(
            w,
            eng,
            dp,
            room,
            t,
            p.stream,
            lambda k: L.decode_failed("transfer", k, rid, room, why),
            one_rank=eng.version >= V0_5_14,
        )
        return "xfer_fail", t, L.abort_finish_reason(L.decode_failed("transfer", lead, rid, room, why))
    if r["p_out"] != "watchdog" or r["d_join"] < INF or r["d_pre"] == INF:
        return None
    if eng.watchdog_dialect == "slime" and eng.watchdog_s and not eng.watchdog_broken:
        # slime's decode-side timeout on the transfer queue, then kv_receiver.abort()
        t = r["d_pre"] + eng.watchdog_s + 0.35
        if t >= p.t_end:
            return None
        timeout = eng.watchdog_s

        def body(k: int) -> str:
            return L.slime_decode_timeout(k, rid, room, timeout)

        _group_lines(w, eng, dp, room, t, p.stream, body, one_rank=False)
        return "d_watchdog", t + 0.002, L.abort_finish_reason(body(lead), 504)
    if eng.hears_prefill_failure and r["p_rel"] < p.t_end:
        # the prefill's watchdog failed the room; the decode receiver learns it as a failure
        t = r["p_rel"] + 0.05
        why = "Failed to get kvcache from prefill instance, it might be dead"
        _group_lines(
            w,
            eng,
            dp,
            room,
            t,
            p.stream,
            lambda k: L.decode_failed("transfer", k, rid, room, why),
            one_rank=eng.version >= V0_5_14,
        )
        return "xfer_fail", t, L.abort_finish_reason(L.decode_failed("transfer", lead, rid, room, why))
    return None


def _health_503(w: World, df: pl.DataFrame, dprocs: list[Proc]) -> None:
    for proc, t in df.filter(pl.col("hc503")).select("d_proc", "d_recv").iter_rows():
        w.emit(t, dprocs[proc].stream, L.HEALTH_503)


def _write_back(w: World, df: pl.DataFrame) -> None:
    """Copy outcomes onto the incident Req objects (scenario hooks and tests read them)."""
    cols = [
        "p_recv",
        "p_bq",
        "p_ready",
        "p_start",
        "p_inf",
        "p_rel",
        "p_fin",
        "fire_t",
        "p_out",
        "d_recv",
        "d_pre",
        "d_join",
        "d_fin",
        "d_end",
        "d_out",
    ]
    for row in df.filter(pl.col("special").is_not_null()).select("special", *cols).iter_rows(named=True):
        r = w.reqs[row["special"]]
        for c in cols:
            setattr(r, c, row[c])


def run(w: World, pre: EngineCfg, dec: EngineCfg, pprocs: list[Proc], dprocs: list[Proc], end: float) -> None:
    """Simulate every request (bulk traffic + ``w.reqs``) through both engines into ``w.table``."""
    df = pl.concat([w.bulk_frame(), specials_frame(w)]) if w.bulk else specials_frame(w)
    df = _pre(df, pprocs, dprocs, w.key, w.rebootstrap)
    df = simulate_prefill(w, df, pre, dprocs, end, pprocs)
    prefill_gauges(w, df, pre, pprocs, end)
    df = simulate_decode(w, df, dec, dprocs)
    df = incident_lines(w, df, pre, dec, pprocs, dprocs)
    decode_gauges(w, df, dec, dprocs, end)
    _health_503(w, df, dprocs)
    _write_back(w, df)
    w.table = df


# ---- a fleet: many prefill and decode instances (issue 19) -----------------------------------------


def _side(col: str) -> pl.Expr:
    """The instance index a step groups by: a request one side never sees rides with instance 0
    there (``to_p``/``to_d`` false, so no step touches it)."""
    return pl.col(col).fill_null(0)


def run_fleet(w: World, fleet: Fleet, end: float) -> None:
    """:func:`run` for a fleet: each step runs per instance (its own build, watchdog and clock) over
    the requests the router gave it. Process indices (``p_proc``/``d_proc``) are into the flat lists
    of every instance's processes, so restarts, deaths and streams resolve across instances."""
    pprocs, p_off = fleet.flat(fleet.pprocs)
    dprocs, d_off = fleet.flat(fleet.dprocs)
    df = pl.concat([w.bulk_frame(), specials_frame(w)]) if w.bulk else specials_frame(w)
    df = df.join(fleet.route_frame(w), on="key", how="left", maintain_order="left").with_row_index(
        "fleet_row"
    )
    unrouted = df.filter(
        (pl.col("pe").is_null() & pl.col("to_p")) | (pl.col("de").is_null() & pl.col("to_d"))
    )
    if unrouted.height:
        raise ValueError(f"{w.name}: {unrouted.height} request(s) with no instance on a side they reach")
    pairs = df.select("pe", "de").unique().sort("pe", "de", nulls_last=True).iter_rows()
    parts = []
    for pe, de in pairs:
        g = df.filter(pl.col("pe").eq_missing(pe) & pl.col("de").eq_missing(de))
        g = _pre(g, fleet.pprocs[pe] if pe is not None else [], fleet.dprocs[de] if de is not None else [],
                 w.key, w.rebootstrap)  # fmt: skip
        parts.append(
            g.with_columns(
                p_proc=pl.col("p_proc") + (p_off[pe] if pe is not None else 0),
                d_proc=pl.col("d_proc") + (d_off[de] if de is not None else 0),
            )
        )
    df = pl.concat(parts).sort("fleet_row")
    parts = []
    for i, eng in enumerate(fleet.pres):
        w.batches = []  # prefill_gauges reads this instance's batches
        g = simulate_prefill(w, df.filter(_side("pe") == i), eng, dprocs, end, pprocs)
        prefill_gauges(w, g, eng, pprocs, end)
        parts.append(g)
    df = pl.concat(parts).sort("fleet_row")
    df = pl.concat(
        [simulate_decode(w, df.filter(_side("de") == j), eng, dprocs) for j, eng in enumerate(fleet.decs)]
    ).sort("fleet_row")
    parts = []
    for pe, de in df.select(_side("pe"), _side("de")).unique().sort("pe", "de").iter_rows():
        g = df.filter((_side("pe") == pe) & (_side("de") == de))
        parts.append(incident_lines(w, g, fleet.pres[pe], fleet.decs[de], pprocs, dprocs))
    df = pl.concat(parts).sort("fleet_row")
    for j, eng in enumerate(fleet.decs):
        for pi in range(d_off[j], d_off[j] + len(fleet.dprocs[j])):
            for dp_rank in range(eng.dp):
                mine = df.filter(
                    (pl.col("d_proc") == pi) & (pl.col("d_dp") == dp_rank) & (pl.col("d_out") != "hc503")
                )
                _decode_group_gauges(w, eng, dprocs[pi], dp_rank, mine, end)
    _health_503(w, df, dprocs)
    _write_back(w, df)
    w.table = df.drop("fleet_row")
