"""The simulated deployment: hosts, engines, processes, journal streams and requests.

Simulation time is float seconds of *true* time relative to the window start (T0).
Each host turns true time into its own clock (``skew_s``) and its own local time
(``tz_min``); rendering does that, the simulation never does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import polars as pl

INF = float("inf")

# Version tuples used for layout switches (reference §2.2).
V0_5_3 = (0, 5, 3)
V0_5_9 = (0, 5, 9)
V0_5_10 = (0, 5, 10)
V0_5_12 = (0, 5, 12)
V0_5_14 = (0, 5, 14)
V0_5_18 = (0, 5, 18)
V0_5_23 = (0, 5, 23)


def vstr(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


@dataclass
class Host:
    name: str
    tz_min: int  # local time = host clock + tz_min
    skew_s: float  # host clock - true time
    boot_id: str
    machine_id: str
    seqnum_id: str
    uptime_s: float  # host uptime at T0 (for __MONOTONIC_TIMESTAMP)
    seq_base: int  # journal seqnum of the first entry in the window
    ip: str
    journald_pid: int
    journald_invocation: str


@dataclass
class EngineCfg:
    """One SGLang server (a systemd unit): what it runs and how it logs."""

    role: str  # "prefill" | "decode"
    host: Host
    unit: str
    description: str
    version: tuple[int, int, int]
    model: str
    arch: str
    tp: int
    dp: int = 1
    ep: bool = False
    backend: str = "nixl"
    swa: bool = False  # hybrid SWA pool (DeepSeek-V4): full/swa token usage fields
    spec: bool = False  # speculative decoding (MTP): accept len fields
    log_requests: bool = False  # L1 (--log-requests --log-requests-level 0)
    time_stats: bool = False  # L2 (--enable-request-time-stats-logging)
    watchdog_s: int | None = None  # the operator's inflight-watchdog patch, armed at this timeout
    watchdog_broken: bool = False  # armed but never fires (scenario 4)
    # whose watchdog patch: "dsv4" (the operator's, an armed line) or "slime" (no armed line;
    # on a decode it times out the decode transfer queue itself)
    watchdog_dialect: str = "dsv4"
    bootstrap_timeout_s: float | None = None  # SGLang's own SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT fires
    hears_prefill_failure: bool = False  # decode: a prefill watchdog release reaches it (it fails the room)
    log_requests_until: float = INF  # a runtime `Config logging` turns --log-requests off here
    # from here on its `Prefill batch` lines lack #bootstrap-req / #inflight-req (a restart onto a
    # build that logs the unified layout): its inflight queue is no longer observed
    gauge_until: float = INF
    http_port: int = 30000
    bootstrap_port: int = 8998
    syslog_identifier: str = "python3"
    access_log_health: bool = True  # False: --uvicorn-access-log-exclude-prefixes /health
    health_generate: bool = (
        True  # False: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 (/health runs no request)
    )
    max_total_tokens: int = 1_048_576
    max_prefill_tokens: int = 16384
    context_len: int = 131072
    tpot_s: float = 0.030  # decode forward period
    accept_len: float = 1.0  # tokens per decode forward (MTP > 1)
    decode_log_interval: int = 40
    prefill_fwd_base_s: float = 0.018
    prefill_fwd_per_tok_s: float = 30e-6
    xfer_s: tuple[float, float] = (0.04, 0.25)  # KV transfer duration range

    @property
    def attn_tp(self) -> int:
        return self.tp // self.dp

    def ranks(self, tp_rank: int) -> str:
        """Rank prefix of a scheduler line (reference §1.2): ' DPn TPn EPn'."""
        parts = []
        if self.dp > 1:
            parts.append(f"DP{tp_rank // self.attn_tp}")
        if self.tp > 1:
            parts.append(f"TP{tp_rank}")
        if self.ep and self.tp > 1:
            parts.append(f"EP{tp_rank}")
        return "".join(" " + p for p in parts)

    def group_ranks(self, dp_rank: int) -> list[int]:
        return list(range(dp_rank * self.attn_tp, (dp_rank + 1) * self.attn_tp))

    def lead_rank(self, dp_rank: int) -> int:
        return dp_rank * self.attn_tp


@dataclass
class Proc:
    """One run of an engine unit (one PID, one invocation id)."""

    eng: EngineCfg
    pid: int
    invocation: str
    stream: int  # journal stream of its stdout/stderr
    t_start: float
    t_ready: float
    t_sigterm: float = INF
    t_end: float = INF  # process gone (SIGKILL or exit)

    def alive(self, t: float) -> bool:
        return self.t_ready <= t < self.t_end


@dataclass
class Hole:
    """Lines of ``unit`` on ``host`` in [t0, t1) that never reach the reader.

    ``silent=False``: journald's rate limiter dropped them (the process printed them, so the
    plain file keeps them) and logs ``Suppressed N messages from UNIT`` before the unit's next
    entry. ``silent=True``: nothing tells the reader — the process printed nothing (it hung), or
    the export left the unit out (``journalctl -u`` of the other unit): gone from every input,
    systemd's own lines about the unit too.
    """

    host: Host
    unit: str
    t0: float
    t1: float
    silent: bool = False


class Req:
    """An incident request or a health check (bulk traffic lives in a polars frame instead).

    Times are true seconds, INF = never. The scenario sets the inputs; :func:`sim.run` copies
    the outcomes (``p_*`` prefill, ``d_*`` decode) back for scenario hooks and tests.
    """

    __slots__ = (
        "abort_lands", "abort_t", "cached", "d_dp", "d_end", "d_fin", "d_join", "d_out", "d_pre", "d_recv",
        "drid", "fire_t", "hc", "in_len", "out_len", "p_bq", "p_dp", "p_fin", "p_inf", "p_out", "p_ready",
        "p_recv", "p_rel", "p_start", "pin", "prealloc_wait", "prid", "room", "t_arr", "to_decode",
        "to_prefill", "xfer", "xfer_fail",
    )  # fmt: skip

    def __init__(self, room: int, prid: str, drid: str, t_arr: float, in_len: int, out_len: int) -> None:
        self.room = room
        self.prid = prid
        self.drid = drid
        self.t_arr = t_arr
        self.in_len = in_len
        self.out_len = out_len
        self.cached = 0
        self.hc = False
        self.to_prefill = True
        self.to_decode = True
        self.p_dp = 0
        self.d_dp = 0
        self.prealloc_wait = 0.0  # decode memory pressure before it can send KV indices
        self.xfer = 0.1
        self.abort_t = INF  # client abort (router cancels both legs)
        self.abort_lands = True  # False: the abort races the prefill and misses it
        self.pin = False  # the KV transfer never completes (NIXL handle stuck)
        self.xfer_fail = ""  # non-abort transfer failure reason on prefill
        self.p_recv = self.p_bq = self.p_ready = self.p_start = self.p_inf = INF
        self.p_rel = self.p_fin = self.fire_t = INF
        self.p_out = "none"
        self.d_recv = self.d_pre = self.d_join = self.d_fin = self.d_end = INF
        self.d_out = "none"


@dataclass
class StreamDef:
    """A journal writer: every field of its entries except cursor, timestamps and MESSAGE."""

    host: Host
    unit: str  # the unit the entry belongs to (UNIT= for pid 1, the named unit for journald)
    fields: tuple[tuple[str, str], ...]
    delay_us: int  # journal receive delay after the app wrote the line
    plain: bool  # part of the unit's plain log file (the SGLang process's own output)


@dataclass
class Event:
    """One explicitly rendered line. ``fmt`` 1 = SGLang/uvicorn bracket prefix, 0 = raw."""

    t: float
    stream: int
    body: str
    ranks: str = ""
    fmt: int = 1
    raw: bytes | None = None  # bytes for ANSI/invalid-UTF-8 lines (body is then a placeholder)
    room: int | None = None  # room named by the line (visibility bookkeeping)
    rid: bool = False  # the line also names the rid of that room on its engine
    engine: str = ""


@dataclass
class World:
    """Everything one scenario run accumulates before rendering."""

    name: str
    seed: int
    now_us: int
    duration_s: float
    scale: float
    rng: random.Random = field(init=False)
    streams: list[StreamDef] = field(default_factory=list)
    stream_ids: dict[tuple, int] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    reqs: list[Req] = field(default_factory=list)
    holes: list[Hole] = field(default_factory=list)
    restarts: list[tuple[str, float]] = field(default_factory=list)  # (role, kill/stop time)
    rooms_used: set[int] = field(default_factory=set)
    bulk: list[pl.DataFrame] = field(default_factory=list)  # background traffic, generated in bulk
    batches: list = field(default_factory=list)  # (dp_rank, sim.Batches) of the prefill
    table: pl.DataFrame | None = None  # every request and its outcome, after sim.run()
    fire_states: dict[int, str] = field(default_factory=dict)  # room -> KVPoll state a firing names
    decode_stuck: set[int] = field(default_factory=set)  # rooms whose decode receiver never completes
    # rooms whose KV lands and whose decode finishes, but whose prefill sender never sees Success:
    # the prefill holds them in its inflight queue (a completion the sender missed)
    sender_blind: set[int] = field(default_factory=set)
    hinted: bool = False  # the bootstrap-timeout hint (warning_once) was printed
    # DeepSeek-V4 rebootstrap legs (upstream-0.5.23.md §1.2 B): prefill rid (= the decode's rid) -> the
    # decode host's IP that POSTs it; the room is already bootstrapped
    rebootstrap: dict[str, str] = field(default_factory=dict)
    retracted: dict[int, float] = field(default_factory=dict)  # room -> decode retraction that never resumes
    zone: str | None = None  # every host's local time is this IANA zone's (render.finish_lines)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"pdforensics-sim:{self.name}:{self.seed}")
        self.t0_us = self.now_us - round(self.duration_s * 1e6)
        self.key = self.rng.getrandbits(30)  # salt of the per-row hash RNG
        self.bootstrap_ip = "10.0.0.5"  # the prefill's address in every request (set by the run)
        self.next_row = 0

    def rows(self, n: int) -> int:
        """Reserve ``n`` row keys for bulk traffic; return the first."""
        first = self.next_row
        self.next_row += n
        return first

    def bulk_frame(self) -> pl.DataFrame:
        return pl.concat(self.bulk)

    # ---- ids -------------------------------------------------------------------------------
    def hex32(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def room(self) -> int:
        # sgl-router's generate_room_id: a random 63-bit integer
        while True:
            r = self.rng.getrandbits(63)
            if r > 10**17 and r not in self.rooms_used:
                self.rooms_used.add(r)
                return r

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.rng.random()

    def pick(self, seq):
        return seq[int(self.rng.random() * len(seq))]

    def host(self, name: str, tz_min: int, skew_s: float = 0.0, ip: str = "10.0.0.5") -> Host:
        return Host(
            name=name,
            tz_min=tz_min,
            skew_s=skew_s,
            boot_id=self.hex32(),
            machine_id=self.hex32(),
            seqnum_id=self.hex32(),
            uptime_s=self.uniform(3 * 86400, 40 * 86400),
            seq_base=int(self.uniform(2e5, 9e6)),
            ip=ip,
            journald_pid=int(self.uniform(300, 900)),
            journald_invocation=self.hex32(),
        )

    # ---- streams ---------------------------------------------------------------------------
    def stream(
        self,
        host: Host,
        unit: str,
        fields: tuple[tuple[str, str], ...],
        *,
        delay_us: int,
        plain: bool,
    ) -> int:
        key = (host.name, unit, fields)
        sid = self.stream_ids.get(key)
        if sid is None:
            sid = len(self.streams)
            self.streams.append(StreamDef(host, unit, fields, delay_us, plain))
            self.stream_ids[key] = sid
        return sid

    def app_stream(self, eng: EngineCfg, pid: int, invocation: str, comm: str = "python3") -> int:
        fields = (
            ("_SYSTEMD_UNIT", eng.unit),
            ("_SYSTEMD_INVOCATION_ID", invocation),
            ("_PID", str(pid)),
            ("_COMM", comm),
            ("SYSLOG_IDENTIFIER", eng.syslog_identifier),
            ("PRIORITY", "6"),
            ("_TRANSPORT", "stdout"),
        )
        return self.stream(eng.host, eng.unit, fields, delay_us=int(self.uniform(600, 3500)), plain=True)

    def other_stream(self, eng: EngineCfg, invocation: str, pid: int, comm: str, ident: str) -> int:
        """Another program writing to the same unit (ExecStartPre script): not SGLang."""
        fields = (
            ("_SYSTEMD_UNIT", eng.unit),
            ("_SYSTEMD_INVOCATION_ID", invocation),
            ("_PID", str(pid)),
            ("_COMM", comm),
            ("SYSLOG_IDENTIFIER", ident),
            ("PRIORITY", "6"),
            ("_TRANSPORT", "stdout"),
        )
        return self.stream(eng.host, eng.unit, fields, delay_us=400, plain=False)

    def systemd_stream(self, host: Host, unit: str, priority: int, invocation: str, message_id: str) -> int:
        fields = (
            ("_SYSTEMD_UNIT", "init.scope"),
            ("_PID", "1"),
            ("_COMM", "systemd"),
            ("SYSLOG_IDENTIFIER", "systemd"),
            ("PRIORITY", str(priority)),
            ("_TRANSPORT", "journal"),
            ("UNIT", unit),
            ("INVOCATION_ID", invocation),
            ("MESSAGE_ID", message_id),
        )
        return self.stream(host, unit, fields, delay_us=60, plain=False)

    def journald_stream(self, host: Host, unit: str, dropped: int) -> int:
        fields = (
            ("_SYSTEMD_UNIT", "systemd-journald.service"),
            ("_SYSTEMD_INVOCATION_ID", host.journald_invocation),
            ("_PID", str(host.journald_pid)),
            ("_COMM", "systemd-journal"),
            ("SYSLOG_IDENTIFIER", "systemd-journald"),
            ("PRIORITY", "5"),
            ("_TRANSPORT", "driver"),
            ("MESSAGE_ID", "a596d6fe7bfa4994828e72309e95d61e"),
            ("N_DROPPED", str(dropped)),
        )
        return self.stream(host, unit, fields, delay_us=0, plain=False)

    # ---- events ----------------------------------------------------------------------------
    def emit(self, t: float, stream: int, body: str, ranks: str = "", fmt: int = 1, **kw) -> None:
        self.events.append(Event(t, stream, body, ranks, fmt, **kw))

    def emit_raw(self, t: float, stream: int, data: bytes, engine: str = "") -> None:
        """A line with ANSI codes or invalid UTF-8: stored as bytes, MESSAGE as a byte array in JSON."""
        self.events.append(Event(t, stream, "", "", 0, raw=data, engine=engine))


@dataclass
class Fleet:
    """Many prefill and decode instances behind one router (issue 19): which pair serves each request.

    ``routes`` maps bulk-traffic row keys to their (prefill, decode) instance indices (``pe``, ``de``);
    ``special`` does the same for ``World.reqs`` by index (a health check has one side, the other None).
    Process lists are per instance; the simulation indexes them as one flat list, prefills in order.
    """

    pres: list[EngineCfg]
    decs: list[EngineCfg]
    pprocs: list[list[Proc]]
    dprocs: list[list[Proc]]
    routes: list[pl.DataFrame] = field(default_factory=list)
    special: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)

    def flat(self, procs: list[list[Proc]]) -> tuple[list[Proc], list[int]]:
        """Every process in one list, and the offset of each instance's first one in it."""
        offsets, flat = [], []
        for ps in procs:
            offsets.append(len(flat))
            flat.extend(ps)
        return flat, offsets

    def route_frame(self, w: World) -> pl.DataFrame:
        """``key -> pe, de`` for every request of the world (bulk and special)."""
        base = 1 << 40  # sim.specials_frame's keys
        special = pl.DataFrame(
            {
                "key": [base + i for i in range(len(w.reqs))],
                "pe": [self.special[i][0] for i in range(len(w.reqs))],
                "de": [self.special[i][1] for i in range(len(w.reqs))],
            },
            schema={"key": pl.UInt64, "pe": pl.Int32, "de": pl.Int32},
        )
        return pl.concat([*self.routes, special])
