"""The incident scenarios. Times are true seconds from the window start; the window is
``[0, duration_s]`` and ends at ``now``. Each builder returns the deployment it simulated."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from pdforensics.simulate import build as B
from pdforensics.simulate import lines as L
from pdforensics.simulate.model import (
    V0_5_3,
    V0_5_10,
    V0_5_12,
    V0_5_14,
    V0_5_18,
    V0_5_23,
    EngineCfg,
    Event,
    Fleet,
    Hole,
    Host,
    Proc,
    Req,
    World,
)


@dataclass
class Built:
    pre: EngineCfg
    dec: EngineCfg
    pprocs: list[Proc]
    dprocs: list[Proc]
    after: Callable[[World], None] | None = None  # post-simulation lines (they need outcomes)
    # many instances (pre/dec are then the first of each; pprocs/dprocs every instance's, flat)
    fleet: Fleet | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    build: Callable[[World], Built]
    verdict: str
    evidence_level: str
    watchdog_timeout_s: int
    watchdog_deployed: bool | None
    duration_s: float = 330.0
    reasons_contain: tuple[str, ...] = ()
    verdict_options: dict = field(default_factory=dict)
    notes: str = ""  # what makes the scenario's evidence what it is (README / report)
    since_s: float | None = None  # the verdict's --since, seconds from the data start (verdict_options)
    # What the plain files must give where they hold what journald dropped (expected.json by_input)
    plain_verdict: str | None = None
    plain_reasons: tuple[str, ...] = ()
    # Separate `ingest --since/--until` runs into one database ((from_s, to_s) each), and the
    # verdict of each window; the database's verdict without window options is the last one's.
    ingests_s: tuple[tuple[float, float], ...] = ()
    ingest_verdicts: tuple[str, ...] = ()
    name_undecided: bool = False  # the reasons name the `undecided` rooms (the first five by arrival)
    recovery: str | None = None  # watchdog.recovery the verdict must give (expected.json `recovery`)
    # per-request keys the verdict's row must hold: (class, key, value) for every listed room of that class
    details: tuple[tuple[str, str, object], ...] = ()
    stuck_elsewhere: bool = False  # the verdict must name a queue stuck outside the watchdog's
    # The plain files are CRI pod logs whose runtime cuts lines at this many bytes (writer.cri_records)
    plain_cri_line_max: int | None = None


def dsv4(role: str, host: Host, version: tuple[int, int, int], tp: int, **kw) -> EngineCfg:
    decode = role == "decode"
    args = dict(
        role=role,
        host=host,
        unit=f"sglang-dsv4-{role}.service",
        description=f"SGLang DeepSeek-V4-Flash {role}",
        version=version,
        model="deepseek-ai/DeepSeek-V4-Flash",
        arch="DeepseekV4ForCausalLM",
        tp=tp,
        swa=True,
        spec=decode,
        accept_len=2.6 if decode else 1.0,
        tpot_s=0.034,
        http_port=30001 if decode else 30000,
        log_requests=True,
    )
    args.update(kw)
    return EngineCfg(**args)


def _pinned(w: World, t: float, eng: EngineCfg, out_len: int = 300, in_len: int = 6000) -> Req:
    r = B.new_req(w, t, in_len, out_len, eng)
    w.reqs.append(r)
    return r


# ---- 1 ----------------------------------------------------------------------------------------


def build_healthy(w: World) -> Built:
    host = w.host("dsv4-node-01", tz_min=480)
    pre = dsv4("prefill", host, V0_5_18, 4, watchdog_s=60, access_log_health=False)
    dec = dsv4("decode", host, V0_5_18, 4, access_log_health=False, health_generate=False)
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0)
    end = 330.0
    B.health_checks(w, pre, p.t_ready, end)
    B.health_checks(w, dec, d.t_ready, end)
    B.traffic(w, pre, dec, d.t_ready + 2, end, rate=1 / 16)
    return Built(pre, dec, [p], [d])


# ---- 2 / 3: the operator's incident -----------------------------------------------------------


def _decode_restart(w: World, pre: EngineCfg, dec: EngineCfg, p: Proc, d: Proc, s: float, end: float) -> Proc:
    """Decode-only restart while KV transfers are in flight (design.md's worked example)."""
    d2 = B.restart(w, d, s, kill_after=20.0, ready_after=36.0)
    # two long generations still decoding when systemd kills the unit: lost with it
    for k, t in enumerate((s - 8.0, s - 5.5)):
        _pinned(w, t, pre, out_len=2600 + 300 * k)
    # three requests the router still sends while decode drains: their KV never lands
    for t in (s + 12.2, s + 14.9, s + 16.8):
        _pinned(w, t, pre)
    B.health_checks(w, pre, -60.0, end)
    B.health_checks(w, dec, -60.0, d.t_end)
    B.health_checks(w, dec, d2.t_ready, end)
    B.traffic(w, pre, dec, -60.0 if p.t_ready < 0 else p.t_ready + 3, s - 3.0, rate=1 / 14)
    B.traffic(w, pre, dec, d2.t_ready + 2.0, end, rate=1 / 14)
    return d2


def build_decode_restart_old_build(w: World) -> Built:
    host = w.host("dsv4-node-01", tz_min=0)
    pre = dsv4("prefill", host, V0_5_14, 4)
    dec = dsv4("decode", host, V0_5_14, 4)
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0)
    d2 = _decode_restart(w, pre, dec, p, d, s=150.0, end=330.0)
    return Built(pre, dec, [p], [d, d2])


def build_decode_restart_watchdog_fires(w: World) -> Built:
    hp = w.host("dsv4-p01", tz_min=480, ip="10.0.2.11")
    hd = w.host("dsv4-d01", tz_min=480, skew_s=0.04, ip="10.0.2.21")
    pre = dsv4("prefill", hp, V0_5_18, 4, watchdog_s=60, access_log_health=False)
    dec = dsv4("decode", hd, V0_5_18, 4, http_port=30000, access_log_health=False, health_generate=False)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    d2 = _decode_restart(w, pre, dec, p, d, s=95.0, end=330.0)
    return Built(pre, dec, [p], [d, d2])


# ---- 4 -------------------------------------------------------------------------------------------

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 1153, in transfer_worker',
    "    state_xfer_handles = self.maybe_send_extra(",
    '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 2062, in maybe_send_extra',
    "    raise RuntimeError(",
    "RuntimeError: NIXL transfer of extra state failed: NIXL_ERR_REMOTE_DISCONNECT",
]


def build_watchdog_armed_never_fires(w: World) -> Built:
    host = w.host("b200-07", tz_min=-300, ip="10.0.3.7")
    pre = dsv4(
        "prefill", host, V0_5_18, 8, ep=True, watchdog_s=60, watchdog_broken=True, access_log_health=False
    )
    dec = dsv4("decode", host, V0_5_18, 8, ep=True, access_log_health=False, health_generate=False)
    p = B.start_proc(w, pre, 2.0, ready_after=41.0)
    d = B.start_proc(w, dec, 3.0, ready_after=42.0)
    end = 330.0
    B.health_checks(w, pre, p.t_ready, end)
    B.health_checks(w, dec, d.t_ready, end)
    B.traffic(w, pre, dec, d.t_ready + 2, end, rate=1 / 16)
    failed = _pinned(w, 119.6, pre)
    failed.xfer = 0.9
    failed.xfer_fail = f"NIXL transfer encountered ERR room={failed.room}"
    for t in (119.2, 119.8, 120.1):
        r = _pinned(w, t, pre)
        r.pin = True

    def after(w: World) -> None:
        t_err = failed.p_rel - 0.004
        for k in range(4):  # the NIC drops its queue pairs: UCX speaks first, on stderr
            B.ucx_error(
                w,
                p,
                t_err - 0.3 + 0.07 * k,
                f"mlx5_0:1/RoCE: RC QP 0x{0x1A40 + k:x} wqe[{311 + k}]: transport retry count exceeded",
            )
        rank = pre.group_ranks(0)[failed.room % pre.tp]
        w.emit(
            t_err,
            p.stream,
            f"Unexpected transfer worker error for room {failed.room}",
            pre.ranks(rank),
            room=failed.room,
            engine="prefill",
        )
        for k, line in enumerate(TRACEBACK):  # continuation lines: separate entries, no prefix
            w.emit(t_err + 0.00001 * (k + 1), p.stream, line, fmt=0)

    return Built(pre, dec, [p], [d], after)


# ---- 5 / 6: abort storms --------------------------------------------------------------------------


def _storm(w: World, pre: EngineCfg, t_s: float, races: tuple[int, ...] = ()) -> list[Req]:
    """15 concurrent long prompts, then the client kills all 15 connections 3.6 s later.

    Decode is short of KV memory, so the last six wait for pre-allocation (prefill keeps them
    Bootstrapping); the rest are prefilled one per batch and their KV takes 1 s to move.
    At the abort the first ones are decoding, two or three are in the prefill inflight queue
    (Transferring), some wait in the prefill waiting queue and the last are still bootstrapping.
    """
    out = []
    for k in range(15):
        r = B.new_req(w, t_s + 0.012 * k, 13000, 600, pre)
        r.xfer = 1.0
        r.prealloc_wait = 0.0 if k < 9 else 1.2 + 0.7 * (k - 9)
        r.abort_t = t_s + 3.6 + 0.001 * k
        r.abort_lands = k not in races
        out.append(r)
    w.reqs.extend(out)
    return out


def build_abort_storm_clean(w: World) -> Built:
    hp = w.host("gb200-a", tz_min=0, ip="10.0.4.11")
    hd = w.host("gb200-b", tz_min=0, skew_s=0.35, ip="10.0.4.12")
    pre = dsv4("prefill", hp, V0_5_18, 4, watchdog_s=60, access_log_health=False)
    dec = dsv4("decode", hd, V0_5_18, 4, http_port=30000, access_log_health=False, health_generate=False)
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0)
    end = 330.0
    B.health_checks(w, pre, p.t_ready, end)
    B.health_checks(w, dec, d.t_ready, end)
    for a, b in ((d.t_ready + 2, 128.0), (138.0, 163.0), (173.0, end)):
        B.traffic(w, pre, dec, a, b, rate=1 / 20)
    _storm(w, pre, 130.0)
    _storm(w, pre, 165.0)
    return Built(pre, dec, [p], [d])


def build_abort_storm_pins(w: World) -> Built:
    host = w.host("dsv4-node-02", tz_min=480, ip="10.0.5.2")
    pre = dsv4("prefill", host, V0_5_14, 4, access_log_health=False)
    dec = dsv4("decode", host, V0_5_14, 4, access_log_health=False, health_generate=False)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = 330.0
    B.health_checks(w, pre, -60.0, end)
    B.health_checks(w, dec, -60.0, end)
    for a, b in ((-60.0, 88.0), (98.0, 118.0), (128.0, end)):
        B.traffic(w, pre, dec, a, b, rate=1 / 20)
    _storm(w, pre, 90.0, races=(6, 7))
    _storm(w, pre, 120.0, races=(7,))
    return Built(pre, dec, [p], [d])


# ---- 7 ---------------------------------------------------------------------------------------------


def build_short_window(w: World) -> Built:
    host = w.host("h100-lab-3", tz_min=0, ip="10.0.6.3")
    pre = dsv4("prefill", host, V0_5_12, 2)
    dec = dsv4("decode", host, V0_5_12, 2)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = 40.0
    B.health_checks(w, pre, -30.0, end)
    B.health_checks(w, dec, -30.0, end)
    B.traffic(w, pre, dec, -30.0, end, rate=1 / 5, out_range=(200, 1400))
    return Built(pre, dec, [p], [d])


# ---- 8 -----------------------------------------------------------------------------------------------

FLOOD_START = 250.0
HOLE = (251.2, 281.2)  # LogRateLimitIntervalSec=30s: the rest of the interval is dropped


def qwen(role: str, host: Host, **kw) -> EngineCfg:
    args = dict(
        role=role,
        host=host,
        unit=f"sglang-qwen3-{role}.service",
        description=f"SGLang Qwen3-235B-A22B {role}",
        version=V0_5_3,
        model="Qwen/Qwen3-235B-A22B-Instruct-2507",
        arch="Qwen3MoeForCausalLM",
        tp=4,
        ep=True,
        log_requests=True,
        http_port=30000,
        tpot_s=0.028,
    )
    args.update(kw)
    return EngineCfg(**args)


def build_journald_suppression(w: World) -> Built:
    hp = w.host("qwen-p01", tz_min=0, ip="10.0.7.11")
    hd = w.host("qwen-d01", tz_min=0, skew_s=-0.8, ip="10.0.7.21")
    pre = qwen("prefill", hp)
    dec = qwen("decode", hd)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = 310.0
    # the router probes every 30 s; one prefill probe lands right after the hole
    for k in range(12):
        t = HOLE[1] + 1.3 - 30.0 * k
        r = Req(0, f"HEALTH_CHECK_{w.hex32()}", "", t, 1, 1)
        r.hc, r.to_decode = True, False
        w.reqs.append(r)
    B.health_checks(w, dec, -60.0, end, interval=30.0)
    B.traffic(w, pre, dec, -60.0, 246.0, rate=1 / 14)
    for t in (200.4, 202.1, 203.6):  # NIXL handles that never complete: pinned, no line
        r = _pinned(w, t, pre)
        r.pin = True
    for t in (258.3, 266.9):  # routed during the hole: only decode's lines survive
        _pinned(w, t, pre, out_len=120)
    w.holes.append(Hole(hp, pre.unit, *HOLE))

    def after(w: World) -> None:
        n = 420
        for k in range(n):  # the NIC flaps: a UCX error flood on the prefill's stderr
            B.ucx_error(
                w,
                p,
                FLOOD_START + 12.0 * k / n,
                f"mlx5_0:1/RoCE: RC QP 0x{0x2B00 + k % 37:x} wqe[{k % 64}]: local protection error",
            )

    return Built(pre, dec, [p], [d], after)


# ---- 9 -------------------------------------------------------------------------------------------------


def glm(role: str, host: Host, **kw) -> EngineCfg:
    args = dict(
        role=role,
        host=host,
        unit=f"sglang-glm-{role}.service",
        description=f"SGLang GLM-4.5 {role}",
        version=V0_5_10,
        model="zai-org/GLM-4.5-FP8",
        arch="Glm4MoeForCausalLM",
        tp=8,
        ep=True,
        http_port=30000,
        tpot_s=0.031,
        access_log_health=False,
    )
    args.update(kw)
    return EngineCfg(**args)


def build_l0_anonymous_pins(w: World) -> Built:
    hp = w.host("glm-p01", tz_min=480, ip="10.0.8.11")
    hd = w.host("glm-d01", tz_min=480, skew_s=0.012, ip="10.0.8.21")
    pre = glm("prefill", hp)
    dec = glm("decode", hd)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = 330.0
    d2 = _decode_restart(w, pre, dec, p, d, s=110.0, end=end)
    # one client abort while its KV is in flight: the only request a default-INFO log names
    r = _pinned(w, 60.0, pre, in_len=9000)
    r.xfer, r.abort_t = 1.4, 60.95
    return Built(pre, dec, [p], [d, d2])


# ---- 10 --------------------------------------------------------------------------------------------------


def build_multihost_skew(w: World) -> Built:
    hp = w.host("p-node-01", tz_min=0, ip="10.0.9.11")
    hd = w.host("d-node-01", tz_min=480, skew_s=2.5, ip="10.0.9.21")
    common = dict(
        dp=4, ep=True, backend="mooncake", log_requests=False, time_stats=True, access_log_health=False
    )
    pre = dsv4("prefill", hp, V0_5_23, 4, **common)
    dec = dsv4("decode", hd, V0_5_23, 4, http_port=30000, health_generate=False, **common)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = 330.0
    s = 150.0
    d2 = B.restart(w, d, s, kill_after=None, exit_after=5.02, ready_after=40.0)
    B.health_checks(w, pre, -60.0, end)
    B.health_checks(w, dec, -60.0, s)
    B.health_checks(w, dec, d2.t_ready, end)
    B.traffic(w, pre, dec, -60.0, s - 20.0, rate=1 / 10)
    B.traffic(w, pre, dec, d2.t_ready + 2.0, end, rate=1 / 10)
    return Built(pre, dec, [p], [d, d2])


# ---- 11-17: verdict honesty (issue 12) ----------------------------------------------------------


def _patched_pair(
    w: World, name: str, tz_min: int = 0, ip: str = "10.0.10.1", health_generate: bool = False, **pre_kw
) -> tuple:
    """A patched 0.5.18 DeepSeek-V4 pair on one host (watchdog armed at 60 s), as an operator runs it."""
    host = w.host(name, tz_min=tz_min, ip=ip)
    pre = dsv4("prefill", host, V0_5_18, 4, watchdog_s=60, access_log_health=False, **pre_kw)
    dec = dsv4("decode", host, V0_5_18, 4, access_log_health=False, health_generate=health_generate)
    return pre, dec


SILENT_FROM = 140.0


def build_prefill_goes_silent(w: World) -> Built:
    pre, dec = _patched_pair(w, "dsv4-node-11", tz_min=60, ip="10.0.11.1")
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0)
    end = 330.0
    B.health_checks(w, pre, p.t_ready, end)
    B.traffic(w, pre, dec, d.t_ready + 2, end, rate=1 / 16)
    for t in (119.4, 120.2, 121.1):  # NIXL handles that never complete: the floor shows 3
        _pinned(w, t, pre).pin = True
    # ~20 s later the prefill's output stops for good (before any deadline): it keeps serving
    # (decode's lines go on), but no line of it reaches any reader again
    w.holes.append(Hole(pre.host, pre.unit, SILENT_FROM, float("inf"), silent=True))
    return Built(pre, dec, [p], [d])


FIRING_HOLE = (158.0, 168.0)
DECODE_HOLE = (255.0, 262.0)


def build_hole_hides_firing(w: World) -> Built:
    pre, dec = _patched_pair(w, "dsv4-node-12", ip="10.0.12.1")
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0)
    end = 330.0
    B.health_checks(w, pre, p.t_ready, end)
    # traffic pauses around both holes, so nothing else is open in them
    for a, b in ((d.t_ready + 2, 150.0), (172.0, 245.0), (290.0, end)):
        B.traffic(w, pre, dec, a, b, rate=1 / 16)
    _pinned(w, 100.0, pre).pin = True  # the watchdog fires at ~160.5 s: inside the hole
    w.holes.append(Hole(pre.host, pre.unit, *FIRING_HOLE))
    w.holes.append(Hole(dec.host, dec.unit, *DECODE_HOLE))

    def after(w: World) -> None:
        for k in range(250):  # a NIC flap on the prefill trips journald's rate limit
            B.ucx_error(
                w,
                p,
                157.6 + 2.5 * k / 250,
                f"mlx5_0:1/RoCE: RC QP 0x{0x3C00 + k % 29:x} wqe[{k % 64}]: local protection error",
            )
        for k in range(40):  # a short burst on the decode while nothing is open: a hole that decides nothing
            B.ucx_error(
                w,
                d,
                DECODE_HOLE[0] + 0.5 + 0.6 * k / 40,
                f"mlx5_1:1/RoCE: RC QP 0x{0x4D00 + k:x} wqe[{k}]: retry exceeded",
            )

    return Built(pre, dec, [p], [d], after)


def build_decode_only_export(w: World) -> Built:
    pre, dec = _patched_pair(w, "dsv4-node-13", tz_min=480, ip="10.0.13.1")
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = 330.0
    B.health_checks(w, pre, -60.0, end)
    B.traffic(w, pre, dec, -60.0, end, rate=1 / 12)
    # `journalctl -u sglang-dsv4-decode.service -o export`: the prefill's lines are in no input
    w.holes.append(Hole(pre.host, pre.unit, float("-inf"), float("inf"), silent=True))
    return Built(pre, dec, [p], [d])


UNIFIED_DURATION = 3600.0
UNIFIED_SILENCE = (300.0, 300.0 + 53 * 60.0)  # no request: no line for 52+ minutes


def _unified_requests(w: World, eng: EngineCfg, proc: Proc, t0: float, t1: float, rate: float) -> None:
    """A non-PD server's own lines for Poisson traffic: Receive/Finish (room None), its own
    `Prefill batch` per request and `Decode batch` every 40 forwards, access lines."""
    t = t0
    s = proc.stream
    while True:
        t += -math.log(1.0 - w.rng.random()) / rate
        if t >= t1:
            return
        rid = w.hex32()
        in_len = int(w.uniform(800, 7000))
        out_len = int(w.uniform(60, 400))
        obj = L.unified_obj(eng, rid)
        w.emit(t, s, f"Receive: obj={obj}")
        fwd_end = t + 0.02 + in_len * 30e-6
        w.emit(
            fwd_end + 0.0003,
            s,
            L.unified_prefill_stats(1, in_len, in_len / eng.max_total_tokens, 0, in_len / 0.5),
            eng.ranks(0),
        )
        n = math.ceil(out_len / eng.accept_len)
        for k in range(40, n + 1, 40):
            w.emit(
                fwd_end + k * eng.tpot_s,
                s,
                L.unified_decode_stats(1, in_len + k, (in_len + k) / eng.max_total_tokens, 1 / eng.tpot_s),
                eng.ranks(0),
            )
        fin = fwd_end + n * eng.tpot_s
        meta = (
            f"{{'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': 'stop', 'matched': 1}}, 'prompt_tokens': "
            f"{in_len}, 'weight_version': 'default', 'total_retractions': 0, 'completion_tokens': {out_len}, "
            f"'cached_tokens': 0, 'e2e_latency': {fin - t:.4f}, 'response_sent_to_client_ts': "
            f"{w.t0_us / 1e6 + fin:.6f}}}}}"
        )
        w.emit(fin, s, f"Finish: obj={obj}, out={meta}")
        w.emit(t + 0.011, s, L.access(f"10.0.0.9:{int(w.uniform(33000, 61000))}", "POST", "/generate", 200))


def build_non_pd_prefill_name(w: World) -> Built:
    host = w.host("dsv4-lab-14", tz_min=0, ip="10.0.14.1")
    # one unified (non-PD) server whose unit name says "prefill": the lines say otherwise
    eng = dsv4("prefill", host, V0_5_18, 1, swa=False, access_log_health=False, health_generate=False)
    idle = dsv4("decode", host, V0_5_18, 1, access_log_health=False, health_generate=False)
    p = B.running_proc(w, eng)
    _unified_requests(w, eng, p, 0.0, UNIFIED_SILENCE[0], 1 / 15)
    # 52 minutes with no line at all, then traffic again
    _unified_requests(w, eng, p, UNIFIED_SILENCE[1], UNIFIED_DURATION - 30.0, 1 / 15)
    return Built(eng, idle, [p], [])


ARMED_TO_READY = 30.0


def build_window_starts_after_armed(w: World) -> Built:
    pre, dec = _patched_pair(w, "dsv4-node-15", tz_min=-300, ip="10.0.15.1", watchdog_broken=True)
    # load_end + 1.5 s is the armed line (build._startup_lines): ready 30 s after it
    span = (ARMED_TO_READY + 1.5) / 0.38
    p = B.start_proc(w, pre, 2.0, ready_after=span)
    d = B.start_proc(w, dec, 3.0, ready_after=40.0)
    end = 330.0
    B.health_checks(w, pre, p.t_ready, end)
    B.traffic(w, pre, dec, p.t_ready + 2, end, rate=1 / 16)
    for t in (108.3, 109.6, 111.0):  # held ~3.6 min to the window end; the watchdog never fires
        _pinned(w, t, pre).pin = True
    return Built(pre, dec, [p], [d])


DEATH_AT = 150.0  # segv
HANG_AT = 60.0  # scheduler_watchdog: a batch hangs here; SGLang's watchdog fires 300 s later


def _prefill_dies(how: str) -> Callable[[World], Built]:
    def build(w: World) -> Built:
        # a hung scheduler loop polls nothing: the inflight watchdog cannot fire either
        pre, dec = _patched_pair(
            w, "dsv4-node-16", ip="10.0.16.1", health_generate=True, watchdog_broken=how != "segv"
        )
        p = B.start_proc(w, pre, 2.0)
        d = B.start_proc(w, dec, 3.0)
        end = 330.0 if how == "segv" else 540.0
        quiet = DEATH_AT if how == "segv" else HANG_AT  # the prefill's last batch
        # the router sees the prefill fail and sends it nothing more; the decode's own /health
        # probes (1-token generations) go on to the window end
        B.health_checks(w, pre, p.t_ready, quiet)
        B.health_checks(w, dec, d.t_ready, end, interval=15.0)
        B.traffic(w, pre, dec, d.t_ready + 2, quiet - 12.0, rate=1 / 16)
        for t in (quiet - 6.2, quiet - 4.1, quiet - 1.9):  # KV still moving when it stops
            r = _pinned(w, t, pre)
            r.xfer, r.pin = 40.0, how != "segv"
        B.die(w, p, DEATH_AT if how == "segv" else HANG_AT + 300.0, how)
        return Built(pre, dec, [p], [d])

    return build


INCIDENT_GAP = 3 * 3600.0
TWO_INCIDENTS_END = INCIDENT_GAP + 330.0


def build_two_incidents(w: World) -> Built:
    host = w.host("dsv4-node-17", tz_min=0, ip="10.0.17.1")
    pre = dsv4("prefill", host, V0_5_14, 4)
    dec = dsv4("decode", host, V0_5_14, 4)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    s = 150.0
    # incident 1: the operator's decode-only restart on the old build (three silent pins)
    d2 = B.restart(w, d, s, kill_after=20.0, ready_after=36.0)
    for t in (s + 12.2, s + 14.9, s + 16.8):
        _pinned(w, t, pre)
    B.health_checks(w, pre, -60.0, 330.0, interval=30.0)
    B.traffic(w, pre, dec, -60.0, s - 3.0, rate=1 / 20)
    B.traffic(w, pre, dec, d2.t_ready + 2.0, 330.0, rate=1 / 20)
    # an hour later the operator restarts the prefill too (the pins go with it), then idle hours
    p2 = B.restart(w, p, 3600.0, kill_after=20.0, ready_after=36.0)
    # incident 2, ~3 h later: ordinary traffic, nothing stuck
    a = INCIDENT_GAP
    B.health_checks(w, pre, a, TWO_INCIDENTS_END, interval=30.0)
    B.traffic(w, pre, dec, a + 5.0, TWO_INCIDENTS_END, rate=1 / 20)
    return Built(pre, dec, [p, p2], [d, d2])


# ---- 19-25: verdict depth (issue 14) -------------------------------------------------------------

WEDGE_RESTART = 80.0


def build_wedge_after_decode_restart(w: World) -> Built:
    """NIXL: a handle stuck across a decode-only restart blocks the transfer worker for that decode
    endpoint (upstream-0.5.23.md §1.4): every later room to it stays in the inflight queue, the first
    in Transferring, the ones queued behind it in WaitingForInput, and the watchdog fires on each."""
    hp = w.host("dsv4-p21", tz_min=480, ip="10.0.21.11")
    hd = w.host("dsv4-d21", tz_min=480, skew_s=0.02, ip="10.0.21.21")
    pre = dsv4("prefill", hp, V0_5_18, 4, watchdog_s=60, access_log_health=False)
    dec = dsv4("decode", hd, V0_5_18, 4, http_port=30000, hears_prefill_failure=True)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    s, end = WEDGE_RESTART, 330.0
    d2 = B.restart(w, d, s, kill_after=20.0, ready_after=36.0)
    for t in (s + 12.2, s + 14.9, s + 16.8):  # routed while decode drains: their KV never lands
        _pinned(w, t, pre)
    B.health_checks(w, pre, -60.0, end, interval=30.0)
    # the router's /health probes of the decode: answered 200 by the new process all along
    B.health_checks(w, dec, -60.0, d.t_end, interval=15.0)
    B.health_checks(w, dec, d2.t_ready, end, interval=15.0)
    B.traffic(w, pre, dec, -60.0, s - 3.0, rate=1 / 14)
    first = True
    t = d2.t_ready + 4.0
    while t < end - 75.0:  # every new room to the restarted decode: the blocked worker holds it
        r = _pinned(w, t, pre, out_len=int(w.uniform(60, 400)), in_len=int(w.uniform(1500, 8000)))
        r.pin = True
        w.fire_states[r.room] = "KVPoll.Transferring" if first else "KVPoll.WaitingForInput"
        first = False
        t += w.uniform(9.0, 15.0)
    return Built(pre, dec, [p], [d, d2])


SATURATED_AT = 100.0


def build_fired_under_saturation_then_drains(w: World) -> Built:
    hp = w.host("dsv4-p22", tz_min=0, ip="10.0.22.11")
    hd = w.host("dsv4-d22", tz_min=0, skew_s=-0.03, ip="10.0.22.21")
    pre = dsv4("prefill", hp, V0_5_18, 4, watchdog_s=60, access_log_health=False)
    dec = dsv4(
        "decode",
        hd,
        V0_5_18,
        4,
        http_port=30000,
        access_log_health=False,
        health_generate=False,
        max_total_tokens=131072,  # a small decode KV pool: a burst of long generations fills it
        hears_prefill_failure=True,
    )
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end, a = 330.0, SATURATED_AT
    B.health_checks(w, pre, -60.0, end, interval=20.0)
    B.traffic(w, pre, dec, -60.0, a - 5.0, rate=1 / 16)
    for k in range(22):  # long generations: the decode pool is full for ~80 s
        _pinned(w, a + 0.4 * k, pre, out_len=int(w.uniform(5600, 6400)), in_len=int(w.uniform(5000, 7000)))
    for t in (a + 1.0, a + 3.5):  # slow transfers the 60 s watchdog kills
        _pinned(w, t, pre, out_len=300).pin = True
    for k in range(7):  # no KV memory on decode: they wait for pre-allocation past the firings
        t = a + 40.0 + 1.5 * k
        _pinned(w, t, pre, out_len=200).prealloc_wait = a + 78.0 + k + w.rng.random() - t
    B.traffic(w, pre, dec, a + 95.0, end, rate=1 / 14)  # load falls: ordinary traffic completes
    return Built(pre, dec, [p], [d])


BOOTSTRAP_TIMEOUT_S = 300.0


def build_upstream_bootstrap_timeout_with_watchdog(w: World) -> Built:
    pre, dec = _patched_pair(
        w, "dsv4-node-23", tz_min=60, ip="10.0.23.1", bootstrap_timeout_s=BOOTSTRAP_TIMEOUT_S
    )
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0)
    end = 360.0
    B.health_checks(w, pre, p.t_ready, end, interval=20.0)
    B.traffic(w, pre, dec, d.t_ready + 2, end, rate=1 / 18)
    # the router's decode leg of this request never reached the decode (connection reset): no
    # decode ever sends its KV indices, the prefill sender stays Bootstrapping for 300 s
    r = _pinned(w, 44.5, pre)
    r.to_decode = False
    return Built(pre, dec, [p], [d])


def build_slime_dialect(w: World) -> Built:
    host = w.host("slime-node-04", tz_min=480, ip="10.0.24.1")
    slime = dict(watchdog_s=600, watchdog_dialect="slime", access_log_health=False)
    pre = dsv4("prefill", host, V0_5_14, 4, **slime)
    dec = dsv4("decode", host, V0_5_14, 4, health_generate=False, **slime)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = SLIME_END
    B.health_checks(w, pre, -60.0, end, interval=30.0)
    B.traffic(w, pre, dec, -60.0, end, rate=1 / 24)
    for t in (150.2, 152.7):  # NIXL handles that never complete; slime's 600 s timeout fires on both sides
        _pinned(w, t, pre).pin = True
    return Built(pre, dec, [p], [d])


SLIME_END = 900.0
FROZEN_AT = 120.0


def build_frozen_decode_transfer_queue(w: World) -> Built:
    pre, dec = _patched_pair(w, "dsv4-node-25", tz_min=-300, ip="10.0.25.1")
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0)
    end = 330.0
    B.health_checks(w, pre, p.t_ready, end)
    B.traffic(w, pre, dec, d.t_ready + 2, end, rate=1 / 12)
    for t in (
        FROZEN_AT,
        FROZEN_AT + 1.3,
    ):  # prefill sends the KV (Success); the decode receiver never completes
        w.decode_stuck.add(_pinned(w, t, pre).room)
    return Built(pre, dec, [p], [d])


REBOOTSTRAP_AT = (96.0, 150.0)  # the two retracted requests arrive here


def build_rebootstrap_leg(w: World) -> Built:
    """DeepSeek-V4 on 0.5.23: a retracted decode request POSTs /generate straight to the prefill with
    its room and the decode's rid (upstream-0.5.23.md §1.2 B); the prefill recomputes the KV."""
    hp = w.host("dsv4-p26", tz_min=480, ip="10.0.26.11")
    hd = w.host("dsv4-d26", tz_min=480, skew_s=0.01, ip="10.0.26.21")
    pre = dsv4("prefill", hp, V0_5_23, 4, access_log_health=False)
    dec = dsv4("decode", hd, V0_5_23, 4, http_port=30000, access_log_health=False, health_generate=False)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = 330.0
    B.health_checks(w, pre, -60.0, end)
    B.traffic(w, pre, dec, -60.0, end, rate=1 / 16)
    for k, t in enumerate(REBOOTSTRAP_AT):
        r = _pinned(w, t, pre, out_len=3200, in_len=7000)  # a long generation: ~42 s of decode
        t_r = t + 12.0
        # the pool is full: the decode retracts it (no host copy on a DSV4 pool) ...
        w.emit(
            t_r,
            d.stream,
            "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: "
            f"{7000 + 900 + 40 * k}, #new_token_ratio: 0.7000 -> 0.8500",
            dec.ranks(0),
        )
        # ... and POSTs /generate to the prefill itself: same room, its own rid, bypassing the router
        leg = Req(r.room, r.drid, "", t_r + 0.04, 7000 + 900, 1)
        leg.to_decode = False
        leg.pin = k == 1  # the second one's recompute never finishes its transfer; no watchdog
        w.reqs.append(leg)
        w.rebootstrap[r.drid] = hd.ip
        if k == 1:
            w.retracted[r.room] = t_r
    return Built(pre, dec, [p], [d])


LOGGING_OFF_AT = 120.0


def build_log_level_change_mid_window(w: World) -> Built:
    host = w.host("dsv4-node-27", tz_min=0, ip="10.0.27.1")
    quiet = dict(access_log_health=False, log_requests_until=LOGGING_OFF_AT)
    pre = dsv4("prefill", host, V0_5_23, 4, **quiet)
    dec = dsv4("decode", host, V0_5_23, 4, health_generate=False, **quiet)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = 330.0
    B.health_checks(w, pre, -60.0, end)
    B.traffic(w, pre, dec, -60.0, end, rate=1 / 16)
    for proc in (p, d):  # `POST /configure_logging {"log_requests": false}` to both engines
        w.emit(LOGGING_OFF_AT - 0.002, proc.stream, L.config_logging(False))
    for t in (150.4, 151.9, 153.3):  # NIXL handles that never complete, after the request log went quiet
        _pinned(w, t, pre).pin = True
    return Built(pre, dec, [p], [d])


# ---- 26: a fleet (issue 19) --------------------------------------------------------------------------

FLEET_SIZE = 8  # prefill instances, and as many decode instances, one per host
# prefill i sends to decodes i, i+1, i+3, i+6 (mod 8): four decodes each, each decode hears four prefills
FLEET_OFFSETS = (0, 1, 3, 6)
FLEET_WATCHDOG = 4  # p-node-01..04 run the patched build (armed at 60 s), 05..08 a stock one
FLEET_RESTARTED = 2  # d-node-03: a decode-only restart mid-window
FLEET_RESTART_AT = 150.0
# (prefill index, arrival) of the requests the router sends d-node-03 while it drains: their KV never lands
FLEET_PINS = ((1, 12.2), (2, 13.1), (2, 16.8), (4, 14.9), (7, 12.9), (7, 15.6))
FLEET_AFTER = (241.0, 268.0)  # ordinary requests on each fired path after its firings
# a couple of hosts in other zones, two decode clocks off (host name: tz minutes, skew s)
FLEET_CLOCKS = {"p-node-07": (60, 0.04), "d-node-02": (480, 2.5), "d-node-06": (-300, -0.8)}


def build_fleet_16_hosts(w: World) -> Built:
    end, s = 330.0, FLEET_RESTART_AT
    pres, decs = [], []
    for k in range(FLEET_SIZE):
        name = f"p-node-{k + 1:02d}"
        tz, skew = FLEET_CLOCKS.get(name, (0, 0.0))
        host = w.host(name, tz_min=tz, skew_s=skew, ip=f"10.0.30.{11 + k}")
        watchdog = 60 if k < FLEET_WATCHDOG else None
        pres.append(dsv4("prefill", host, V0_5_18, 4, watchdog_s=watchdog, access_log_health=False))
    for k in range(FLEET_SIZE):
        name = f"d-node-{k + 1:02d}"
        tz, skew = FLEET_CLOCKS.get(name, (0, 0.0))
        host = w.host(name, tz_min=tz, skew_s=skew, ip=f"10.0.31.{21 + k}")
        decs.append(
            dsv4("decode", host, V0_5_18, 4, http_port=30000, access_log_health=False, health_generate=False)
        )
    # every prefill starts in the window: its armed line (or its absence) says which build it runs
    pprocs = [[B.start_proc(w, pre, 2.0 + 0.4 * k)] for k, pre in enumerate(pres)]
    dprocs = [[B.running_proc(w, dec)] for dec in decs]
    fleet = Fleet(pres, decs, pprocs, dprocs)

    def routed(first: int, pe: int | None, de: int | None) -> None:
        for i in range(first, len(w.reqs)):
            fleet.special[i] = (pe, de)

    for k, pre in enumerate(pres):
        n = len(w.reqs)
        B.health_checks(w, pre, pprocs[k][0].t_ready, end, interval=20.0)
        routed(n, k, None)
    d = dprocs[FLEET_RESTARTED][0]
    d2 = B.restart(w, d, s, kill_after=20.0, ready_after=36.0)
    dprocs[FLEET_RESTARTED].append(d2)
    ready = max(p[0].t_ready for p in pprocs)
    # the router stops sending to d-node-03 a moment after it starts draining, until it is back
    down = ((FLEET_RESTARTED, s - 3.0, d2.t_ready + 2.0),)
    B.fleet_traffic(w, fleet, ready + 3.0, end, rate=0.7, offsets=FLEET_OFFSETS, down=down)
    n = len(w.reqs)
    _pinned(w, s - 8.0, pres[1], out_len=2600)  # still decoding on d-node-03 when it is killed: lost
    routed(n, 1, FLEET_RESTARTED)
    for pe, dt in FLEET_PINS:
        n = len(w.reqs)
        _pinned(w, s + dt, pres[pe])
        routed(n, pe, FLEET_RESTARTED)
    # the restarted decode serves both fired paths again: the firings were one-off, not a wedge
    for pe in sorted({pe for pe, _ in FLEET_PINS if pe < FLEET_WATCHDOG}):
        for t in FLEET_AFTER:
            n = len(w.reqs)
            _pinned(w, t + 0.7 * pe, pres[pe], out_len=200, in_len=3000)
            routed(n, pe, FLEET_RESTARTED)
    flat_p, _ = fleet.flat(pprocs)
    flat_d, _ = fleet.flat(dprocs)
    return Built(pres[0], decs[0], flat_p, flat_d, fleet=fleet)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "healthy",
            "Steady load on both engines (0.5.18, DeepSeek-V4-Flash, TP4+TP4, NIXL, --log-requests); both "
            "units start in the window and the prefill arms the inflight watchdog at 60 s; nothing needs it.",
            build_healthy,
            verdict="nothing_stuck",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=True,
        ),
        Scenario(
            "decode_restart_old_build",
            "The operator's incident on the build without the watchdog (0.5.14, NIXL, TP4+TP4, L1): a "
            "decode-only restart kills the decode while three KV transfers are in flight; those rooms stay "
            "pinned in the prefill inflight queue with no further line, and the #inflight-req floor stays 3.",
            build_decode_restart_old_build,
            verdict="watchdog_missed",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=False,
            verdict_options={"watchdog_timeout_s": 60},
        ),
        Scenario(
            "decode_restart_watchdog_fires",
            "The same decode-only restart on the patched build (0.5.18, watchdog armed at 60 s, prefill and "
            "decode on two hosts): the watchdog force-fails each pinned room on all 4 TP ranks at dwell ~60.4 s "
            "and the inflight floor returns to 0.",
            build_decode_restart_watchdog_fires,
            verdict="watchdog_fired",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=True,
        ),
        Scenario(
            "watchdog_armed_never_fires",
            "Patched build armed at 60 s (startup in the window, 0.5.18, TP8 EP8): a RoCE link error fails "
            "one transfer (traceback + Prefill transfer failed) and leaves three NIXL transfers stuck in "
            "Transferring for minutes; the watchdog never fires.",
            build_watchdog_armed_never_fires,
            verdict="watchdog_missed",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=True,
        ),
        Scenario(
            "abort_storm_clean",
            "After the fix: 15 concurrent long requests x 2 rounds aborted by the client mid-flight (0.5.18, "
            "watchdog armed); the router cancels both legs, every abort releases its request, the inflight "
            "gauge stays bounded and drains to 0, decode keeps generating.",
            build_abort_storm_clean,
            verdict="nothing_stuck",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=True,
        ),
        Scenario(
            "abort_storm_pins",
            "The same abort storm on the old build (0.5.14, no watchdog): three aborts race a KV chunk, "
            "decode logs 'Decode transfer failed ... Aborted by AbortReq.' and the prefill never reports "
            "those rooms again.",
            build_abort_storm_pins,
            verdict="watchdog_missed",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=None,
            verdict_options={"watchdog_timeout_s": 60},
        ),
        Scenario(
            "short_window",
            "40 s of healthy traffic (0.5.12, TP2+TP2, L1) with a 60 s watchdog timeout stated by the "
            "operator: some requests are still open at the window end and nothing can be called stuck.",
            build_short_window,
            verdict="inconclusive",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=None,
            duration_s=40.0,
            reasons_contain=("shorter than the watchdog timeout",),
            verdict_options={"watchdog_timeout_s": 60},
        ),
        Scenario(
            "journald_suppression",
            "A UCX error flood on the prefill (0.5.3, Qwen3, TP4 EP4, L1) trips journald's rate limit: 30 s of "
            "prefill lines are suppressed while three requests might be stuck, and the prefill is quiet after "
            "the hole until the window ends less than a timeout later.",
            build_journald_suppression,
            verdict="inconclusive",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=None,
            duration_s=310.0,
            reasons_contain=("suppressed",),
            verdict_options={"watchdog_timeout_s": 60},
        ),
        Scenario(
            "l0_anonymous_pins",
            "Default INFO logging only (0.5.10, GLM-4.5, TP8 EP8): a decode restart pins three requests that "
            "no line names; only the '#inflight-req - #new-seq' floor of later health-check batches shows "
            "them. One client abort is the only request a line names.",
            build_l0_anonymous_pins,
            verdict="watchdog_missed",
            evidence_level="L0",
            watchdog_timeout_s=60,
            watchdog_deployed=None,
            verdict_options={"watchdog_timeout_s": 60},
        ),
        Scenario(
            "multihost_skew",
            "Prefill (UTC) and decode (UTC+8, clock 2.5 s ahead) on two hosts, DP attention (DPn TPn EPn), "
            "0.5.23, Mooncake, --enable-request-time-stats-logging only (L2): a clean drained decode restart "
            "followed by healthy traffic.",
            build_multihost_skew,
            verdict="nothing_stuck",
            evidence_level="L2",
            watchdog_timeout_s=60,
            watchdog_deployed=None,
            verdict_options={"watchdog_timeout_s": 60},
        ),
        Scenario(
            "prefill_goes_silent",
            "Patched build armed at 60 s (0.5.18, TP4+TP4, L1): three NIXL transfers hang (the inflight floor "
            "reads 3), and 20 s later, before any of their deadlines, the prefill's output stops for the rest of "
            "the window while the decode keeps receiving and serving new requests.",
            build_prefill_goes_silent,
            verdict="inconclusive",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=True,
            reasons_contain=("prefill logged nothing",),
            name_undecided=True,
            notes="The three rooms enter the inflight queue at ~119-121 s; the prefill's last line is just before "
            "140 s (floor 3); their deadlines (~180 s) pass in the 190 s of prefill silence, so whether the "
            "watchdog fired or they finished cannot be read: `undecided`. Requests routed during the silence "
            "are seen on decode only (`completed`, `one_sided`). The silence is in every input: the process "
            "printed nothing.",
        ),
        Scenario(
            "hole_hides_firing",
            "Patched build (0.5.18, TP4+TP4, L1): a request pins and its watchdog firing (every TP rank, and "
            "'Prefill transfer failed ... inflight watchdog') falls in a journald 'Suppressed N messages' hole; "
            "afterwards the inflight gauge is 0. A second, small hole on the decode overlaps nothing.",
            build_hole_hides_firing,
            verdict="inconclusive",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=True,
            reasons_contain=("suppressed", "sglang-dsv4-decode.service"),
            name_undecided=True,
            plain_verdict="watchdog_fired",
            notes="The room enters the inflight queue at ~100 s and the watchdog fires at ~160.5 s; a UCX flood "
            "from 157.6 s trips the rate limit and the prefill's entries in [158, 168) are dropped (`Suppressed "
            "N messages from sglang-dsv4-prefill.service` at the next health check). Later gauges read floor 0, "
            "but the room's end may be the dropped firing or a normal finish: `undecided` in the journal. The "
            "plain file holds the firing: `watchdog_fired` there (`by_input.plain`). The decode hole (40 UCX "
            "lines at ~255 s, `Suppressed 40 messages from sglang-dsv4-decode.service` at the next decode "
            "entry) falls in a traffic pause and decides nothing, but must be named.",
        ),
        Scenario(
            "decode_only_export",
            "A decode-only export (journalctl -u sglang-dsv4-decode.service) of a 330 s window with traffic "
            "(0.5.18, L1): no prefill line at all, so no prefill queue was ever observed.",
            build_decode_only_export,
            verdict="inconclusive",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=None,
            reasons_contain=("prefill inflight queue was never observed",),
            verdict_options={"watchdog_timeout_s": 60},
            notes="Every request is seen on decode only (`one_sided`); nothing on decode is stuck, but nothing "
            "can be said about the prefill's queues.",
        ),
        Scenario(
            "non_pd_prefill_name",
            "A unified (non-PD) SGLang 0.5.18 server whose unit is named sglang-dsv4-prefill.service: Prefill "
            "batch lines without #bootstrap-req/#inflight-req, Decode batch lines, --log-requests with "
            "bootstrap_room=None; 60 minutes with a 52-minute silence.",
            build_non_pd_prefill_name,
            verdict="inconclusive",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=None,
            duration_s=UNIFIED_DURATION,
            reasons_contain=("prefill inflight queue was never observed",),
            verdict_options={"watchdog_timeout_s": 60},
            notes="No line names a room and no line shows an inflight or bootstrap queue: the name says "
            "prefill, the lines say a unified server (its own Decode batch lines). The plain file is "
            "`dsv4-lab-14-sglang-dsv4-prefill.log`.",
        ),
        Scenario(
            "window_starts_after_armed",
            "Patched build (0.5.18): the prefill prints 'inflight watchdog armed ... =60s' 30 s before it is "
            "ready, and the window asked for (--since) starts between the two; three transfers then hang for "
            "~3.6 min and the watchdog never fires.",
            build_window_starts_after_armed,
            verdict="watchdog_missed",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=True,
            since_s=70.0,
            notes="The armed line is at ~54.9 s, ready at ~84.9 s, `verdict_options.since_us` is 70 s into the "
            "data: the deployment evidence and the timeout come from before the window. The three rooms enter "
            "the inflight queue at ~108-111 s and are open at the window end: `silent_pin`.",
        ),
        Scenario(
            "prefill_dies_no_restart",
            "Patched build (0.5.18): UCX's handler prints 'Caught signal 11 (Segmentation fault ...)' on the "
            "prefill while three KV transfers are in flight; systemd: 'Main process exited, code=killed, "
            "status=11/SEGV', 'Failed with result 'signal''; the unit does not come back.",
            _prefill_dies("segv"),
            verdict="inconclusive",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=True,
            reasons_contain=("did not come back",),
            notes="Death at 150 s; the three rooms (received at ~144-148 s) are held in the inflight queue and "
            "go with the process: `lost`. The router stops routing, so nothing else arrives; the prefill is "
            "down for 180 s to the window end.",
        ),
        Scenario(
            "prefill_dies_scheduler_watchdog",
            "Patched build (0.5.18): a prefill batch hangs at 60 s; 300 s later SGLang's own scheduler watchdog "
            "prints 'Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)', SIGQUIT ('SIGQUIT "
            "received ... one child failed.') and the unit is killed (status=9/KILL) and not restarted.",
            _prefill_dies("scheduler_watchdog"),
            verdict="watchdog_missed",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=True,
            duration_s=540.0,
            notes="The scheduler watchdog is SGLang's, not the inflight watchdog: it must not count as armed or "
            "fired. The three rooms (received at ~54-58 s) stay in the hung scheduler until the kill at 360 s, "
            "five minutes past their deadline: `silent_pin` (stuck, and the inflight watchdog, which runs in "
            "that same hung loop, never released them), so `watchdog_missed` although the prefill then died. "
            "The prefill prints nothing from 60 s to the watchdog's lines.",
        ),
        Scenario(
            "two_incidents",
            "Two incidents ~3 h apart on one host (0.5.14, no watchdog), ingested as two `ingest --since/--until` "
            "runs into one database: a decode-only restart that pins three transfers (watchdog_missed), then, "
            "after a prefill restart, ordinary healthy traffic.",
            build_two_incidents,
            verdict="nothing_stuck",
            evidence_level="L1",
            watchdog_timeout_s=60,
            watchdog_deployed=None,
            duration_s=TWO_INCIDENTS_END,
            verdict_options={"watchdog_timeout_s": 60},
            ingests_s=((0.0, 335.0), (INCIDENT_GAP - 10.0, TWO_INCIDENTS_END + 5.0)),
            ingest_verdicts=("watchdog_missed", "nothing_stuck"),
            notes="`ingests` lists both windows; with no window options the verdict judges the last ingest's "
            "window (the second incident) and says so. `requests` lists the requests some line of that window "
            "names. The first window alone is `watchdog_missed` (its three rooms are `silent_pin` there). The "
            "prefill restart at 3600 s (which ends the pins: `lost`) lies in neither window.",
        ),
    ]
}


_DEPTH = [
    Scenario(
        "wedge_after_decode_restart",
        "Patched build armed at 60 s (0.5.18, NIXL, two hosts): a decode-only restart leaves a NIXL handle "
        "stuck; afterwards every new room to that decode stays in the prefill inflight queue (one "
        "KVPoll.Transferring, then KVPoll.WaitingForInput behind it) and the watchdog fires on each, while "
        "the decode's /health answers 200.",
        build_wedge_after_decode_restart,
        verdict="watchdog_fired",
        evidence_level="L1",
        watchdog_timeout_s=60,
        watchdog_deployed=True,
        recovery="wedged",
        notes="Restart at 80 s (SIGKILL at 100 s, ready ~138 s). Three rooms routed during the drain fire at "
        "~152-157 s (Transferring); from ~142 s every new room pins and fires 60 s later: the first "
        "Transferring, the rest WaitingForInput (`watchdog.firings[].state`). No request completes on the "
        "prefill -> decode path after the first firing; the decode's /health access lines stay 200 and each "
        "release reaches the decode as `Decode transfer failed ... it might be dead`.",
    ),
    Scenario(
        "fired_under_saturation_then_drains",
        "Patched build armed at 60 s (0.5.18, two hosts): a burst of 22 long generations fills the decode's KV "
        "pool (token usage 0.98), seven more wait for pre-allocation, and two slow transfers are killed by the "
        "watchdog at 60 s while the decode is saturated; then the load falls and requests complete.",
        build_fired_under_saturation_then_drains,
        verdict="watchdog_fired",
        evidence_level="L1",
        watchdog_timeout_s=60,
        watchdog_deployed=True,
        recovery="drained",
        details=(("watchdog_fired", "backpressure", True),),
        notes="Burst from 100 s; the two firings at ~161 s and ~164 s have decode batch lines with token usage "
        "0.98 and #prealloc-req 7 (not shrinking) around them: `backpressure: true`. The pre-allocation waiters "
        "proceed from ~180 s; ordinary traffic from 195 s completes and the inflight floor returns to 0.",
    ),
    Scenario(
        "upstream_bootstrap_timeout_with_watchdog",
        "Patched build armed at 60 s (0.5.18): one request's decode leg never reached the decode, so its prefill "
        "sender stays Bootstrapping until SGLang's own 300 s bootstrap timeout fails it on every rank (with the "
        "one-time SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT hint); the watchdog has nothing to do.",
        build_upstream_bootstrap_timeout_with_watchdog,
        verdict="nothing_stuck",
        evidence_level="L1",
        watchdog_timeout_s=60,
        watchdog_deployed=True,
        duration_s=360.0,
        details=(("transfer_failed", "reason_startswith", "upstream_timeout (bootstrap_timeout)"),),
        notes="The request arrives at 44.5 s and is failed at ~344.5 s (`Prefill bootstrap failed ... timed "
        "out after 300.0s in KVPoll.Bootstrapping`, WARNING, each TP rank): `transfer_failed` with reason "
        "`upstream_timeout (bootstrap_timeout)`, never `watchdog_fired`; only prefill lines name it "
        "(`one_sided`).",
    ),
    Scenario(
        "slime_dialect",
        "slime's watchdog patch (0.5.14 base, TP4+TP4, L1, no armed line): two NIXL transfers hang; 600 s "
        "later the decode prints 'Decode transfer timeout for request rank=… rid=… room=… after 600s' and the "
        "prefill 'Prefill transfer timed out after 600.4s (state=3) for request …' on every rank.",
        build_slime_dialect,
        verdict="watchdog_fired",
        evidence_level="L1",
        watchdog_timeout_s=600,
        watchdog_deployed=True,
        duration_s=SLIME_END,
        verdict_options={"watchdog_timeout_s": 600},
        recovery="drained",
        details=(("watchdog_fired", "firing_state", "KVPoll.Transferring"),),
        notes="The operator states the 600 s timeout (slime prints no armed line). The rooms enter the "
        "inflight queue at ~150 s and ~153 s; state=3 is KVPoll.Transferring; both sides release them with 504.",
    ),
    Scenario(
        "frozen_decode_transfer_queue",
        "Patched build armed at 60 s (0.5.18): two requests' KV is sent (the prefill finishes them) but the "
        "decode receivers never complete: the prefill inflight floor is 0 while the decode's #transfer-req "
        "stays 2 for 3.5 minutes as decode keeps serving other requests.",
        build_frozen_decode_transfer_queue,
        verdict="inconclusive",
        evidence_level="L1",
        watchdog_timeout_s=60,
        watchdog_deployed=True,
        reasons_contain=("stuck outside the watchdog's queue",),
        stuck_elsewhere=True,
        notes="The rooms enter the decode transfer queue at 120 s and 121.3 s; the prefill's Finish says "
        "success; the decode never names them again (`in_flight` in the ground truth: neither side ends "
        "them). The decode transfer queue's floor is 2 from then on: stuck outside the watchdog's queue.",
    ),
    Scenario(
        "rebootstrap_leg",
        "DeepSeek-V4 on 0.5.23 (no watchdog, L1): the decode's KV pool fills and it retracts two long "
        "generations; for each it POSTs /generate to the prefill with the same room and its own rid (an access "
        "line from the decode host). One recompute completes and its request finishes; the other's second "
        "prefill leg is held in the inflight queue to the window end.",
        build_rebootstrap_leg,
        verdict="watchdog_missed",
        evidence_level="L1",
        watchdog_timeout_s=60,
        watchdog_deployed=None,
        verdict_options={"watchdog_timeout_s": 60},
        details=(("silent_pin", "legs", 3),),
        notes="Retractions at 108 s and 162 s (`KV cache pool is full. Retract requests.`); the legs arrive 40 ms "
        "later as prefill `Receive:` lines whose rid is the decode's. The first room ends on both sides "
        "(`completed`, three legs); the second room's rebootstrap leg never ends: `silent_pin` with `legs` 3 "
        "although its first prefill leg finished. The retracted decode request prints nothing more.",
    ),
    Scenario(
        "log_level_change_mid_window",
        "0.5.23, no watchdog, L1 at first: at 120 s 'Config logging: obj=ConfigureLoggingReq(log_requests=False, "
        "…)' turns the request log off on both engines; 30 s later three NIXL transfers hang, and only the "
        "inflight gauge's floor (3, never back to 0) shows them.",
        build_log_level_change_mid_window,
        verdict="watchdog_missed",
        evidence_level="L1",
        watchdog_timeout_s=60,
        watchdog_deployed=None,
        reasons_contain=("the logging changed at run time",),
        verdict_options={"watchdog_timeout_s": 60},
        stuck_elsewhere=True,  # their decode receivers wait in the decode transfer queue too
        notes="Before 120 s every request has Receive:/Finish: lines; after it no line names a request, so the "
        "three pins (received at ~150-153 s) are anonymous (`anonymous_pins` 3) and the request log can no "
        "longer narrow the gauge: the floor bound stands, and the reasons name the logging change. Their decode "
        "receivers wait in the decode transfer queue (`#transfer-req` 3 to the end): `stuck_elsewhere` too.",
    ),
]
SCENARIOS.update({s.name: s for s in _DEPTH})


# ---- the evidence model (issue 26): a hold ends where the holder says so ---------------------------


def _sender_blind(log_requests: bool) -> Callable[[World], Built]:
    """Two requests whose KV lands and whose decode finishes while the prefill's sender never sees
    Success: the prefill holds them in its inflight queue, with no further line, to the window end."""

    def build(w: World) -> Built:
        host = w.host("dsv4-node-03", tz_min=0)
        pre = dsv4("prefill", host, V0_5_14, 4, log_requests=log_requests)
        dec = dsv4("decode", host, V0_5_14, 4, log_requests=log_requests)
        p = B.running_proc(w, pre)
        d = B.running_proc(w, dec)
        end = 330.0
        B.health_checks(w, pre, -60.0, end)
        B.health_checks(w, dec, -60.0, end)
        B.traffic(w, pre, dec, -60.0, end, rate=1 / 12)
        for t in (96.3, 131.8):
            w.sender_blind.add(_pinned(w, t, pre, out_len=120).room)
        return Built(pre, dec, [p], [d])

    return build


def build_two_hung_sends_fired(w: World) -> Built:
    """1P1D, watchdog armed at 60 s: two KV sends hang one after the other (their holds overlap),
    the watchdog fires on both; the decode fails each when it hears, so its transfer queue never
    empties between the first send and the second firing."""
    pre, dec = _patched_pair(w, "dsv4-node-27", tz_min=0, ip="10.0.27.1")
    dec.hears_prefill_failure = True
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0)
    end = 330.0
    B.health_checks(w, pre, p.t_ready, end)
    B.traffic(w, pre, dec, d.t_ready + 2, end, rate=1 / 12)
    for t in (104.2, 139.6):
        _pinned(w, t, pre).pin = True
    return Built(pre, dec, [p], [d])


GAUGELESS_RESTART = 150.0


def build_restart_onto_gaugeless_build(w: World) -> Built:
    """L0: the prefill is restarted onto a build whose `Prefill batch` lines lack the PD queue
    fields; traffic flows on, and nothing of its inflight queue is seen to the window end."""
    hp = w.host("glm-p02", tz_min=480, ip="10.0.8.12")
    hd = w.host("glm-d02", tz_min=480, skew_s=0.008, ip="10.0.8.22")
    pre = glm("prefill", hp, health_generate=True)
    dec = glm("decode", hd)
    p = B.running_proc(w, pre)
    d = B.running_proc(w, dec)
    end = 330.0
    p2 = B.restart(w, p, GAUGELESS_RESTART, kill_after=None, exit_after=4.0, ready_after=30.0)
    pre.gauge_until = p2.t_ready
    B.health_checks(w, pre, -60.0, end, interval=20.0)
    B.health_checks(w, dec, -60.0, end, interval=20.0)
    B.traffic(w, pre, dec, -60.0, GAUGELESS_RESTART - 3.0, rate=1 / 10)
    B.traffic(w, pre, dec, p2.t_ready + 2.0, end, rate=1 / 10)
    return Built(pre, dec, [p, p2], [d])


SCENARIOS.update(
    {
        s.name: s
        for s in [
            Scenario(
                "two_hung_sends_fired",
                "Patched 0.5.18 pair (watchdog armed at 60 s, L1): two NIXL sends hang ~35 s apart, so their "
                "holds overlap; the watchdog force-fails each at dwell ~60.4 s and the decode fails each as it "
                "hears: its transfer queue stays at 1 or more for ~95 s, held by one named request, then the other.",
                build_two_hung_sends_fired,
                verdict="watchdog_fired",
                evidence_level="L1",
                watchdog_timeout_s=60,
                watchdog_deployed=True,
                notes="Each instance is charged with its own (design.md): a queue held by named requests "
                "the watchdog released is explained by them, one after the other, and decides nothing.",
            ),
            Scenario(
                "restart_onto_gaugeless_build",
                "The prefill is restarted mid-window (a rollback, 0.5.10 GLM-4.5, TP8 EP8, default INFO) onto a "
                "build whose `Prefill batch` lines carry no #bootstrap-req / #inflight-req: traffic flows on "
                "for ~150 s, and no line shows its inflight queue after the restart.",
                build_restart_onto_gaugeless_build,
                verdict="inconclusive",
                evidence_level="L0",
                watchdog_timeout_s=60,
                watchdog_deployed=False,
                verdict_options={"watchdog_timeout_s": 60},
                reasons_contain=("carry no #inflight-req",),
                notes='Observation is per queue (design.md, "Observed"): a batch line without the field '
                "observes the running queue, not the inflight one, so the new incarnation's queue is unobserved "
                "to the window end and nothing may be called healthy there.",
            ),
            Scenario(
                "prefill_holds_decode_finished",
                "The prefill keeps two requests the decode finished (0.5.14 without the watchdog, TP4+TP4, "
                "L1): their KV landed and the decode logged Finish:, but the prefill's sender never saw "
                "Success, so it logs no Finish: and counts them in #inflight-req to the window end.",
                _sender_blind(True),
                verdict="watchdog_missed",
                evidence_level="L1",
                watchdog_timeout_s=60,
                watchdog_deployed=None,
                verdict_options={"watchdog_timeout_s": 60},
                notes="A decode completion proves the KV arrived; it never releases the prefill's hold "
                '(design.md, "Held"): both rooms are `silent_pin` although the decode completed them.',
            ),
            Scenario(
                "prefill_holds_decode_finished_l0",
                "The same two requests the decode finished and the prefill holds, at the default log level "
                "(L0): only the #inflight-req floor of 2 that never drains shows them.",
                _sender_blind(False),
                verdict="watchdog_missed",
                evidence_level="L0",
                watchdog_timeout_s=60,
                watchdog_deployed=None,
                verdict_options={"watchdog_timeout_s": 60},
                notes="The L1 scenario with the request log off: the same answer from the gauge alone "
                "(more evidence never makes the answer greener).",
            ),
        ]
    }
)

SCENARIOS["fleet_16_hosts"] = Scenario(
    "fleet_16_hosts",
    "A fleet (0.5.18, DeepSeek-V4-Flash, TP4, NIXL, L1): 8 prefill and 8 decode instances on 16 hosts behind "
    "one router, each prefill sending to four decodes; p-node-01..04 run the patched build (armed at 60 s), "
    "05..08 a stock one. A decode-only restart of d-node-03 pins the transfers routed to it while it drains: "
    "the patched prefills' watchdog fires, the stock prefills hold theirs to the window end.",
    build_fleet_16_hosts,
    verdict="watchdog_missed",
    evidence_level="L1",
    watchdog_timeout_s=60,
    watchdog_deployed=True,  # in the window, by four armed lines; each instance's own is in `instances`
    verdict_options={"watchdog_timeout_s": 60},  # the operator states it for the stock build
    notes="Restart at 150 s (SIGKILL at 170 s, ready ~208 s); the router avoids d-node-03 from 147 s until it "
    "is back. Six requests routed to it during the drain pin: on p-node-02 and p-node-03 the watchdog fires "
    "~60.4 s after their inflight entry (`watchdog_fired`), on p-node-05 and p-node-08 they are held to the "
    "window end (`silent_pin`); one long generation from p-node-02 is still decoding at the kill (`lost`). "
    "p-node-01, 04, 06 and 07 never send to d-node-03: `nothing_stuck`. Both legs of every request carry "
    "`bootstrap_host=` its prefill's address.",
)

FLEET_MISSING = 4  # p-node-05: the stock prefill holding two of the pins; its journal is not collected


def build_fleet_prefill_journal_missing(w: World) -> Built:
    built = build_fleet_16_hosts(w)
    assert built.fleet is not None
    gone = built.fleet.pres[FLEET_MISSING]
    w.holes.append(Hole(gone.host, gone.unit, float("-inf"), float("inf"), silent=True))
    return built


SCENARIOS["fleet_prefill_journal_missing"] = Scenario(
    "fleet_prefill_journal_missing",
    "The fleet of `fleet_16_hosts` collected without p-node-05's journal (its journal-remote upload "
    "failed): the decodes it sends to name its address (bootstrap_host=10.0.30.15) and finish most of "
    "its requests, two of which it holds to the window end after the decode-only restart.",
    build_fleet_prefill_journal_missing,
    verdict="watchdog_missed",
    evidence_level="L1",
    watchdog_timeout_s=60,
    watchdog_deployed=True,
    verdict_options={"watchdog_timeout_s": 60},
    notes='The universe of instances (design.md, "Exists"): 10.0.30.15 is an instance some lines name and '
    "none of whose lines were read: it is listed `inconclusive` (`observed` false, named by its four "
    "decodes), every request its decodes name is `undecided` (finished by the decode or not: the prefill's "
    "hold is not seen), and none is attributed to another prefill. The window's verdict is p-node-08's "
    "`watchdog_missed`; it could never be `nothing_stuck`.",
)

__all__ = ["SCENARIOS", "Built", "Event", "Scenario"]


# ---- a pod log with `P` records split inside numbers ----------------------------------------------

# containerd's max_container_log_line_size for these pods (its default, 16 KiB, no simulated line
# reaches): a Receive: line (its room at byte 576 with the prefill's address 10.0.0.5) is cut 6
# digits into a 19-digit room, so the next `P`/`F` record starts with 13 digits and a comma.
CRI_LINE_MAX = 582


def build_cri_split_records(w: World) -> Built:
    """Kubernetes pods (0.5.18 without the watchdog patch, TP4+TP4, L1, UTC clocks): prefill and
    decode pods on two nodes; two NIXL transfers hang and are held to the window end."""
    hp = w.host("sglang-prefill-0", tz_min=0, ip="10.0.0.5")
    hd = w.host("sglang-decode-0", tz_min=0, ip="10.0.0.6")
    pre = dsv4("prefill", hp, V0_5_18, 4, access_log_health=False)
    dec = dsv4("decode", hd, V0_5_18, 4, http_port=30000, access_log_health=False, health_generate=False)
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0)
    end = 330.0
    B.health_checks(w, pre, p.t_ready, end)
    B.health_checks(w, dec, d.t_ready, end)
    B.traffic(w, pre, dec, d.t_ready + 2, end, rate=1 / 16)
    for t in (120.4, 122.9):
        _pinned(w, t, pre).pin = True
    return Built(pre, dec, [p], [d])


SCENARIOS["cri_split_records"] = Scenario(
    "cri_split_records",
    "A pod log with `P` records split inside numbers: Kubernetes pods (0.5.18 without the watchdog, "
    "TP4+TP4, L1) whose runtime cuts lines at 582 bytes, so every Receive: line's room number is split "
    "between a `P` record and the next one, which starts with 13 digits and a comma; two NIXL transfers "
    "hang and stay pinned in the prefill inflight queue to the window end.",
    build_cri_split_records,
    verdict="watchdog_missed",
    evidence_level="L1",
    watchdog_timeout_s=60,
    watchdog_deployed=False,
    verdict_options={"watchdog_timeout_s": 60},
    plain_cri_line_max=CRI_LINE_MAX,
    notes="The plain files are the pods' CRI logs (`<UTC time> stderr|stdout P|F <text>`): each line "
    "longer than 582 bytes is cut into `P` records of 582 bytes and a last `F` one, at any byte; a "
    "Receive: line's cut falls 6 digits into its room, leaving `NNNNNNNNNNNNN, bootstrap_pair_key=…` "
    "(the shape of a CloudWatch CSV line) in the next record. The pins arrive at ~120 s and ~123 s "
    "and are held to the end (`silent_pin`); the journal holds the same lines whole.",
)


UP_FOR = 5 * 3600.0  # the deployment started this long before the incident's window
LONG_RUNNING_END = UP_FOR + 330.0


def build_long_running_watchdog_missed(w: World) -> Built:
    """The operator's `ingest --since 6min` on a deployment up for hours (issue 28, item 1): the
    armed line and server_args are 5 h before the window, which only the journal's indexes reach."""
    pre, dec = _patched_pair(w, "dsv4-node-31", ip="10.0.31.1", watchdog_broken=True)
    p = B.start_proc(w, pre, 2.0)
    d = B.start_proc(w, dec, 3.0, ready_after=40.0)
    B.traffic(w, pre, dec, d.t_ready + 2, LONG_RUNNING_END, rate=1 / 120)
    for t in (UP_FOR + 100.3, UP_FOR + 101.6, UP_FOR + 103.0):  # held ~3.7 min; the watchdog never fires
        _pinned(w, t, pre).pin = True
    return Built(pre, dec, [p], [d])


SCENARIOS["long_running_watchdog_missed"] = Scenario(
    "long_running_watchdog_missed",
    "A patched pair (0.5.18, watchdog armed at 60 s) started 5 h before the incident and has served light "
    "traffic since; then three NIXL transfers hang for ~3.7 min and the watchdog never fires. The armed "
    "line lies hours before `ingest --since 6min`: the ingest must reach it through the journal's indexes.",
    build_long_running_watchdog_missed,
    verdict="watchdog_missed",
    evidence_level="L1",
    watchdog_timeout_s=60,
    watchdog_deployed=True,
    duration_s=LONG_RUNNING_END,
    notes="The units start at 2 s and 3 s (server_args, the armed line, `fired up`), then one request "
    "every ~2 min for 5 h. The three rooms enter the inflight queue at ~18,100-18,103 s and are open at "
    "the end (`silent_pin`). A journal ingest of the last 6 minutes stores, besides the window, the 15 "
    "minutes before it and each unit's first entries: its verdict is the whole journal's.",
)


# ---- two deployments with colliding rooms and addresses (issue 26, "Same request") -----------------

TWIN_RESTART_AT = 150.0  # dc1's decode-only restart (SIGTERM; SIGKILL 20 s later)
TWIN_PINS = (12.2, 14.9, 16.8)  # dc1's requests routed while its decode drains: their KV never lands
TWIN_FAR_S = 45.0  # a bulk room is reused only when its two requests arrive at least this far apart
TWIN_NEAR = -2.5  # dc2's request reusing the second pin's room arrives this much later (< 30 s)
TWIN_FAR = 95.0  # dc2's request reusing the first pin's room arrives this much later (> 30 s)
# dc1's request at 251.3 s and dc2's reusing its room 3.6 s later: both complete
TWIN_BOTH_DONE = (251.3, 3.6)


def build_two_deployments_colliding_rooms(w: World) -> Built:
    """Two PD deployments (dc1, dc2), each a prefill and a decode host behind its own router, in one
    collection. Both clusters use the same private addresses (each prefill is 10.0.0.5, each decode
    10.0.0.6) and dc2's router numbers rooms as dc1's does: dc2's requests reuse dc1's room numbers.
    dc1 has the operator's incident (a decode-only restart on a build without the watchdog leaves
    three requests pinned in its prefill); dc2 is healthy."""
    end, s = 330.0, TWIN_RESTART_AT
    pres, decs = [], []
    for k, (dc, tz) in enumerate((("dc1", 0), ("dc2", 60))):
        hp = w.host(f"{dc}-prefill-0", tz_min=tz, ip="10.0.0.5")
        hd = w.host(f"{dc}-decode-0", tz_min=tz, skew_s=0.02 * (k + 1), ip="10.0.0.6")
        pres.append(dsv4("prefill", hp, V0_5_14, 4, access_log_health=False))
        decs.append(dsv4("decode", hd, V0_5_14, 4, access_log_health=False, health_generate=False))
    pprocs = [[B.running_proc(w, pre)] for pre in pres]
    dprocs = [[B.running_proc(w, dec)] for dec in decs]
    fleet = Fleet(pres, decs, pprocs, dprocs)

    def routed(first: int, pe: int | None, de: int | None) -> None:
        for i in range(first, len(w.reqs)):
            fleet.special[i] = (pe, de)

    def bulk(k: int, t0: float, t1: float) -> None:
        B.traffic(w, pres[k], decs[k], t0, t1, rate=1 / 14)
        fleet.routes.append(w.bulk[-1].select("key", pe=pl.lit(k, pl.Int32), de=pl.lit(k, pl.Int32)))

    d = dprocs[0][0]
    d2 = B.restart(w, d, s, kill_after=20.0, ready_after=36.0)
    dprocs[0].append(d2)
    for k in range(2):  # the router's /health probes keep each prefill's gauge printing
        n = len(w.reqs)
        B.health_checks(w, pres[k], -60.0, end)
        routed(n, k, None)
    bulk(0, -60.0, s - 3.0)
    bulk(0, d2.t_ready + 2.0, end)
    bulk(1, -60.0, end)
    n = len(w.reqs)
    for k, t in enumerate((s - 8.0, s - 5.5)):  # still decoding on dc1's decode when it is killed: lost
        _pinned(w, t, pres[0], out_len=2600 + 300 * k)
    pins = [_pinned(w, s + dt, pres[0]) for dt in TWIN_PINS]
    both = _pinned(w, TWIN_BOTH_DONE[0], pres[0], out_len=200, in_len=3000)
    routed(n, 0, 0)
    n = len(w.reqs)
    for r, dt in ((pins[1], TWIN_NEAR), (pins[0], TWIN_FAR), (both, TWIN_BOTH_DONE[1])):
        twin = _pinned(w, r.t_arr + dt, pres[1], out_len=200, in_len=3000)
        w.rooms_used.discard(twin.room)
        twin.room = r.room
    routed(n, 1, 1)
    _reuse_rooms(w, end)
    flat_p, _ = fleet.flat(pprocs)
    flat_d, _ = fleet.flat(dprocs)
    return Built(pres[0], decs[0], flat_p, flat_d, fleet=fleet)


def _reuse_rooms(w: World, end: float) -> None:
    """dc2's k-th request (by arrival) takes the room of dc1's k-th, where both arrive well inside
    the window (their lines all in it) and at least TWIN_FAR_S apart: nothing but their time tells
    the two apart. The rest keep rooms of their own."""
    first, second = pl.concat(w.bulk[:2]), w.bulk[2]
    inside = (pl.col("t_arr") >= 10.0) & (pl.col("t_arr") <= end - 40.0)
    a = first.filter(inside).sort("t_arr").select(a_t="t_arr", a_room="room").with_row_index("k")
    b = second.filter(inside).sort("t_arr").select("key", b_t="t_arr").with_row_index("k")
    reuse = a.join(b, on="k").filter((pl.col("a_t") - pl.col("b_t")).abs() >= TWIN_FAR_S)
    w.bulk[2] = (
        second.join(reuse.select("key", "a_room"), on="key", how="left", maintain_order="left")
        .with_columns(room=pl.coalesce("a_room", "room"))
        .drop("a_room")
    )


SCENARIOS["two_deployments_colliding_rooms"] = Scenario(
    "two_deployments_colliding_rooms",
    "Two PD deployments in one collection (0.5.14 without the watchdog, TP4+TP4, L1; dc1 and dc2, a "
    "prefill and a decode host each, behind their own routers) on the same private addresses (both "
    "prefills 10.0.0.5) whose routers number rooms alike: dc2's requests reuse dc1's rooms. dc1's "
    "decode-only restart pins three requests in dc1's prefill; dc2 is healthy and completes rooms "
    "dc1 pinned, one of them 2.5 s before dc1's request of that room.",
    build_two_deployments_colliding_rooms,
    verdict="watchdog_missed",
    evidence_level="L1",
    watchdog_timeout_s=60,
    watchdog_deployed=None,
    verdict_options={"watchdog_timeout_s": 60},
    notes='Identity is (deployment, room) (design.md, "Same request"): a room both prefills logged is one '
    "request per prefill (`deployment` = `prefill <host>`). A decode side goes with the prefill its "
    "Receive: can be (the address it names, within 30 s): dc2 reusing a room 45 s or more after (or "
    "before) dc1 is placed by time, so the first pin stays dc1's `silent_pin` and dc2's request of that "
    "room `completed`. The second pin's room, received by dc2 2.5 s before dc1, cannot be placed: dc1's "
    "request is `silent_pin` on its own prefill's lines, dc2's `undecided` (its prefill finished it; which "
    "decode side is its own, and whether it finished, is not known), and each decode side is a request of "
    "its own (`decode <host>`, `undecided`). A room both deployments completed 3.6 s apart is `completed` "
    "twice, naming no decode rid (every pairing reads the same).",
)
