"""Building blocks the scenarios are made of: starting units, traffic, health checks, restarts."""

from __future__ import annotations

import math

import polars as pl

from pdforensics.simulate import lines as L
from pdforensics.simulate.fast import hash_u32, hex_series, uniform
from pdforensics.simulate.model import INF, EngineCfg, Event, Fleet, Proc, Req, World
from pdforensics.simulate.sim import REQ_SCHEMA

# systemd MESSAGE_IDs (catalog of systemd 252)
MID_STARTED = "39f53479d3a045ac8e11786248231fbf"
MID_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"
MID_STOPPED = "9d1aaa27d60140bd96365438aad20286"
MID_EXITED = "98e322203f7a4ed290d09fe03c09fe15"
MID_RESULT = "d9b373ed55a64feb8242e02dbe79a49c"
MID_CONSUMED = "ae8f7b866b0347b9af31fe1c80b127c0"

ANSI_WARNING = (
    b"\x1b[33m[deep_gemm] WARNING: JIT cache /root/.cache/deep_gemm is on a network filesystem; "
    b"kernel compilation may be slow\x1b[0m"
)


def systemd(w: World, eng: EngineCfg, t: float, msg: str, priority: int, invocation: str, mid: str) -> None:
    sid = w.systemd_stream(eng.host, eng.unit, priority, invocation, mid)
    w.emit(t, sid, msg, fmt=0)


def running_proc(w: World, eng: EngineCfg) -> Proc:
    """A unit that has been up since long before the window."""
    inv = w.hex32()
    pid = int(w.uniform(3000, 60000))
    return Proc(eng, pid, inv, w.app_stream(eng, pid, inv), t_start=-7200.0, t_ready=-7100.0)


def start_proc(w: World, eng: EngineCfg, t: float, ready_after: float = 36.0) -> Proc:
    """``systemctl start``: ExecStartPre output, systemd's Started line, then SGLang's startup lines."""
    inv = w.hex32()
    pid = int(w.uniform(3000, 60000))
    proc = Proc(eng, pid, inv, w.app_stream(eng, pid, inv), t_start=t, t_ready=t + ready_after)
    _exec_start_pre(w, eng, inv, t)
    systemd(w, eng, t, f"Started {eng.unit} - {eng.description}.", 6, inv, MID_STARTED)
    _startup_lines(w, eng, proc)
    return proc


def _exec_start_pre(w: World, eng: EngineCfg, inv: str, t: float) -> None:
    # A shell helper in the same unit: not SGLang, and one line in Latin-1 (invalid UTF-8).
    pid = int(w.uniform(3000, 60000))
    sid = w.other_stream(eng, inv, pid, "bash", "gpu-check.sh")
    w.emit(t - 1.2, sid, f"gpu-check: {eng.tp} GPUs visible on {eng.host.name}", fmt=0)
    w.events.append(_raw_event(t - 1.1, sid, "gpu-check: GPU0 temperature 41\xb0C, ECC ok".encode("latin-1")))
    w.emit(t - 1.0, sid, f"+ exec python3 -m sglang.launch_server --disaggregation-mode {eng.role}", fmt=0)


def _raw_event(t: float, sid: int, data: bytes) -> Event:
    return Event(t, sid, "", "", 0, raw=data)


def _startup_lines(w: World, eng: EngineCfg, proc: Proc) -> None:
    t, s = proc.t_start, proc.stream
    span = proc.t_ready - t
    w.emit(t + 3.1, s, L.server_args(eng))
    w.events.append(_raw_event(t + 3.4, s, ANSI_WARNING))
    load_end = t + span * 0.62
    for rank in range(eng.tp):
        w.emit(
            t + 6.0 + 0.01 * rank,
            s,
            f"Load weight begin. avail mem={176.2 - 0.13 * rank:.2f} GB",
            eng.ranks(rank),
        )
    for rank in range(eng.tp):
        w.emit(
            load_end + 0.03 * rank,
            s,
            f"Load weight end. type={eng.arch}, dtype=torch.bfloat16, avail mem={95.4 - 0.13 * rank:.2f} GB, "
            f"mem usage={80.8:.2f} GB.",
            eng.ranks(rank),
        )
    r0 = eng.ranks(0)
    w.emit(load_end + 1.2, s, L.max_tokens_line(eng), r0)
    if eng.backend == "nixl":
        w.emit(load_end + 1.4, s, "NIXL KVManager initialized with backend: UCX", r0)
    if eng.role == "prefill" and eng.watchdog_s is not None and eng.watchdog_dialect == "dsv4":
        w.emit(load_end + 1.5, s, L.watchdog_armed(eng.watchdog_s), r0)
    if eng.role == "decode":
        w.emit(
            load_end + 1.6,
            s,
            "Capture cuda graph begin. This can take up to several minutes. avail mem=14.20 GB",
            r0,
        )
        w.emit(
            t + span * 0.86,
            s,
            "Capture cuda graph end. Time elapsed: 9.41 s. mem usage=3.12 GB. avail mem=11.08 GB.",
            r0,
        )
    base = t + span * 0.9
    for k, msg in enumerate(
        [
            f"Started server process [{proc.pid}]",
            "Waiting for application startup.",
            "Application startup complete.",
            f"Uvicorn running on http://0.0.0.0:{eng.http_port} (Press CTRL+C to quit)",
        ]
    ):
        w.emit(base + 0.01 * k, s, L.uvicorn(msg))
    for k, msg in enumerate(L.warmup_lines(eng)):
        w.emit(base + 1.0 + 1.5 * k, s, msg)
    w.emit(proc.t_ready, s, L.READY)


def restart(
    w: World,
    old: Proc,
    t_sigterm: float,
    *,
    kill_after: float | None,
    ready_after: float = 36.0,
    exit_after: float = 5.0,
) -> Proc:
    """``systemctl restart``: SIGTERM now; SIGKILL by systemd after ``kill_after`` (TimeoutStopSec),
    or, when ``kill_after`` is None, a drained exit ``exit_after`` later (SGLang kills itself).

    The draining lines (``Gracefully exiting...``) depend on the simulation; see :func:`drain_lines`.
    """
    eng = old.eng
    old.t_sigterm = t_sigterm
    stop = t_sigterm + (kill_after if kill_after is not None else exit_after)
    old.t_end = stop
    w.restarts.append((eng.role, stop))
    systemd(
        w,
        eng,
        t_sigterm - 0.004,
        f"Stopping {eng.unit} - {eng.description}...",
        6,
        old.invocation,
        MID_STOPPING,
    )
    w.emit(t_sigterm + 0.002, old.stream, L.SIGTERM)
    u = eng.unit
    if kill_after is not None:
        systemd(w, eng, stop, f"{u}: State 'stop-sigterm' timed out. Killing.", 4, old.invocation, MID_RESULT)
        systemd(
            w,
            eng,
            stop + 0.0002,
            f"{u}: Killing process {old.pid} (python3) with signal SIGKILL.",
            4,
            old.invocation,
            MID_RESULT,
        )
        for k in range(2):  # children: schedulers and the detokenizer, comm cut to 15 characters
            comm = "sglang::schedul" if k == 0 else "sglang::detoken"
            systemd(
                w,
                eng,
                stop + 0.0004 + 0.0001 * k,
                f"{u}: Killing process {old.pid + 40 + k} ({comm}) with signal SIGKILL.",
                4,
                old.invocation,
                MID_RESULT,
            )
        result = "timeout"
    else:
        result = "signal"
    systemd(
        w,
        eng,
        stop + 0.08,
        f"{u}: Main process exited, code=killed, status=9/KILL",
        5,
        old.invocation,
        MID_EXITED,
    )
    systemd(w, eng, stop + 0.081, f"{u}: Failed with result '{result}'.", 4, old.invocation, MID_RESULT)
    systemd(w, eng, stop + 0.09, f"Stopped {u} - {eng.description}.", 6, old.invocation, MID_STOPPED)
    systemd(
        w, eng, stop + 0.091, f"{u}: Consumed 3h 12min 41.512s CPU time.", 6, old.invocation, MID_CONSUMED
    )
    return start_proc(w, eng, stop + 1.6, ready_after)


def drain_lines(w: World, procs: list[Proc]) -> None:
    """``Gracefully exiting...`` every 5 s after SIGTERM until the process is gone (decode rids)."""
    for i, proc in enumerate(procs):
        if proc.t_sigterm == INF:
            continue
        mine = w.table.filter((pl.col("d_proc") == i) & ~pl.col("hc"))
        t = proc.t_sigterm + 5.0
        while t < proc.t_end:
            open_now = (pl.col("d_recv") <= t) & (pl.col("d_end") > t)
            rids = mine.filter(open_now).sort("d_recv")["drid"].to_list()
            w.emit(t, proc.stream, L.graceful(rids))
            t += 5.0


def new_req(w: World, t: float, in_len: int, out_len: int, eng: EngineCfg) -> Req:
    r = Req(w.room(), w.hex32(), w.hex32(), t, in_len, out_len)
    r.xfer = w.uniform(*eng.xfer_s)
    return r


def traffic(
    w: World,
    pre: EngineCfg,
    dec: EngineCfg,
    t0: float,
    t1: float,
    rate: float,
    in_range: tuple[int, int] = (1200, 9000),
    out_range: tuple[int, int] = (40, 420),
) -> int:
    """Poisson arrivals at ``rate * scale`` per second through the router into both engines.

    Generated in bulk (one polars frame), so a scaled-up scenario costs no Python per request.
    """
    lam = rate * w.scale
    expect = lam * (t1 - t0)
    n = int(expect + 6 * math.sqrt(expect) + 8)
    first = w.rows(n)
    k = w.key + 100 + 20 * len(w.bulk)
    u = lambda j: uniform(k + j)  # noqa: E731 - one independent stream per column
    df = pl.DataFrame({"key": pl.int_range(first, first + n, eager=True, dtype=pl.UInt64)})
    df = df.with_columns(t_arr=t0 + (-(1.0 - u(0)).log() / lam).cum_sum()).filter(pl.col("t_arr") < t1)
    in_len = (in_range[0] + (in_range[1] - in_range[0]) * u(1)).floor().cast(pl.Int64)
    hit = u(3) < 0.35  # radix-cache hit on a shared system prompt
    df = df.with_columns(
        in_len=in_len,
        out_len=(out_range[0] + (out_range[1] - out_range[0]) * u(2)).floor().cast(pl.Int64),
        room=((hash_u32(pl.col("key"), k + 5) % 2**31) * 2**32 + hash_u32(pl.col("key"), k + 6)).cast(
            pl.UInt64
        ),
        xfer=pre.xfer_s[0] + (pre.xfer_s[1] - pre.xfer_s[0]) * u(7),
    ).with_columns(
        cached=pl.when(hit)
        .then((pl.col("in_len") * 0.4 * u(4) / 64).floor().cast(pl.Int64) * 64)
        .otherwise(0),
        prid=_hex_id(df.height, k + 8, first),
        drid=_hex_id(df.height, k + 12, first),
    )
    df = df.with_columns(
        hc=pl.lit(False),
        to_p=pl.lit(True),
        to_d=pl.lit(True),
        p_dp=(pl.col("room") % pre.dp).cast(pl.Int32),  # follow_bootstrap_room
        d_dp=(pl.col("room") % dec.dp).cast(pl.Int32),
        prealloc_wait=pl.lit(0.0),
        abort_t=pl.lit(INF),
        abort_lands=pl.lit(True),
        pin=pl.lit(False),
        xfer_fail=pl.lit(None, pl.String),
        special=pl.lit(None, pl.Int32),
    )
    w.bulk.append(df.select(list(REQ_SCHEMA)).cast(REQ_SCHEMA))
    return df.height


def fleet_traffic(
    w: World,
    fleet: Fleet,
    t0: float,
    t1: float,
    rate: float,
    offsets: tuple[int, ...],
    down: tuple[tuple[int, float, float], ...] = (),
) -> int:
    """Poisson arrivals over the whole fleet, spread by the router over (prefill, decode) pairs.

    Prefill ``pe`` is a hash of the row; its decode is ``(pe + offsets[k]) % n_decodes`` for a hashed
    ``k``, so each prefill sends to ``len(offsets)`` decodes and each decode hears from as many
    prefills. ``down`` lists ``(decode, from, to)`` spans the router avoids (a decode it sees
    restarting): a request hashed there goes to the prefill's next decode instead.
    """
    n = traffic(w, fleet.pres[0], fleet.decs[0], t0, t1, rate)
    rows = w.bulk[-1].select("key", "t_arr")
    salt = w.key + 700 + 10 * len(fleet.routes)
    n_pre, n_dec, n_off = len(fleet.pres), len(fleet.decs), len(offsets)
    key = pl.col("key")
    pe = (hash_u32(key, salt) % n_pre).cast(pl.Int32)
    pick = (hash_u32(key, salt + 1) % n_off).cast(pl.Int32)
    off = list(range(n_off))

    def decode_of(k: pl.Expr) -> pl.Expr:
        return ((pe + k.replace_strict(off, list(offsets), return_dtype=pl.Int32)) % n_dec).cast(pl.Int32)

    de = decode_of(pick)
    avoid = pl.lit(False)
    for j, a, b in down:
        avoid = avoid | ((de == j) & (pl.col("t_arr") >= a) & (pl.col("t_arr") < b))
    de = pl.when(avoid).then(decode_of((pick + 1) % n_off)).otherwise(de)
    fleet.routes.append(rows.select("key", pe=pe, de=de))
    return n


def _hex_id(n: int, key: int, first: int) -> pl.Series:
    """32 hex digits per row (a uuid4().hex look-alike) from four 32-bit hashes."""
    keys = pl.DataFrame({"key": pl.int_range(first, first + n, eager=True, dtype=pl.UInt64)})
    hi, lo = keys.select(
        hi=hash_u32(pl.col("key"), key) * 2**32 + hash_u32(pl.col("key"), key + 1),
        lo=hash_u32(pl.col("key"), key + 2) * 2**32 + hash_u32(pl.col("key"), key + 3),
    ).get_columns()
    return pl.concat_str([pl.lit(hex_series(hi, pad=True)), pl.lit(hex_series(lo, pad=True))])


def health_checks(w: World, eng: EngineCfg, t0: float, t1: float, interval: float = 10.0) -> None:
    """The router's /health probe: a 1-token generate with the fake bootstrap host (room 0)."""
    if not eng.health_generate:
        return  # a plain liveness answer: no request, no line (its access line is excluded too)
    t = t0 + interval * w.rng.random()
    k = 0
    while t < t1:
        r = Req(0, f"HEALTH_CHECK_{w.hex32()}", "", t, 1, 1)
        r.hc = True
        if eng.role == "prefill":
            r.to_decode, r.p_dp = False, k % eng.dp
        else:
            r.to_prefill, r.d_dp, r.drid, r.prid = False, k % eng.dp, r.prid, ""
        w.reqs.append(r)
        t += interval * (0.97 + 0.06 * w.rng.random())
        k += 1


def ucx_error(w: World, proc: Proc, t: float, msg: str) -> None:
    """A raw UCX line on the engine's stderr (NIXL backend): epoch time of the host clock, no SGLang prefix."""
    epoch = w.t0_us / 1e6 + t + proc.eng.host.skew_s
    tid = 1 + int(2 * w.rng.random())
    w.emit(
        t,
        proc.stream,
        f"[{epoch:.6f}] [{proc.eng.host.name}:{proc.pid:<5}:{tid}]      rc_mlx5_iface.c:306  UCX  ERROR {msg}",
        fmt=0,
    )


DEATHS = ("segv", "scheduler_watchdog", "sigquit_0_4")


def die(w: World, proc: Proc, t: float, how: str) -> None:
    """The engine process dies at ``t`` and systemd does not restart it (no ``Restart=``).

    ``segv``: UCX's handler prints ``Caught signal 11`` and a backtrace, the kernel kills the
    process (status=11/SEGV). ``scheduler_watchdog``: SGLang's own scheduler watchdog (a batch
    stuck 300 s) dumps, fires, SIGQUITs the main process, which kills its tree (status=9/KILL).
    ``sigquit_0_4``: the same end as 0.4.x words it. Requests the process held go with it.
    """
    eng = proc.eng
    u = eng.unit
    if how == "segv":
        tid = proc.pid + 57
        for k, line in enumerate(L.ucx_segfault(eng.host.name, proc.pid, tid, 0x18)):
            w.emit(t - 0.004 + 0.00001 * k, proc.stream, line, fmt=0)
        status, end = "11/SEGV", t + 0.35
    elif how in ("scheduler_watchdog", "sigquit_0_4"):
        r0 = eng.ranks(0)
        w.emit(t - 0.02, proc.stream, L.SCHED_DEBUG, r0)
        w.emit(t - 0.0199, proc.stream, "cur_batch_for_debug.batch_size()=1", fmt=0)
        w.emit(t, proc.stream, L.SCHED_WATCHDOG, r0)
        w.emit(t + 0.004, proc.stream, L.SIGQUIT_RUNNING if how == "scheduler_watchdog" else L.SIGQUIT_0_4)
        status, end = "9/KILL", t + 0.2
    else:
        raise ValueError(f"unknown death {how!r}; known: {', '.join(DEATHS)}")
    proc.t_end = end
    w.restarts.append((eng.role, end))
    inv = proc.invocation
    systemd(w, eng, end, f"{u}: Main process exited, code=killed, status={status}", 5, inv, MID_EXITED)
    systemd(w, eng, end + 0.001, f"{u}: Failed with result 'signal'.", 4, inv, MID_RESULT)
    systemd(w, eng, end + 0.002, f"{u}: Consumed 41min 7.230s CPU time.", 6, inv, MID_CONSUMED)
