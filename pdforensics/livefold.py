"""Every open request's state, kept incrementally from parsed events: the watch's per-room fold.

The classification views (queries/views/) decide a window after the fact; the watch must know
the moment a rule becomes true. This fold applies each new event once, in log-time order, to
the rooms still open, and evaluates the deadlines as log time passes them. A room folds away
when the prefill releases it (its Finish, time stats, a failure line, the watchdog; a decode
completion proves the KV arrived, it does not release the prefill's hold), or when it is gone (its prefill stopped, the prefill's queues were seen
empty): memory holds the open requests only.

The rules follow the views (05_requests.sql, 01_context.sql) where a live answer can:
* pin start: the prefill `Receive:`; once a gauge sample follows it, the first sample with an
  empty waiting queue (`#queue-req: 0`): before that it may be waiting, not pinned (no deadline);
* deadline = pin start + timeout + grace; timeout = --watchdog-timeout, else the `inflight
  watchdog armed` line, else a firing's own `stalled >Ns`, else 300 s (the `context` view's order);
* released without a line: a later sample with every prefill queue empty (a second of margin);
* anonymous pins: the inflight floor (#inflight-req less the batch just run, pdf_floor) above
  zero for a whole timeout + grace on one prefill, more than the named pins there account for;
* engine down (a stop line, no start since) or silent (no line) longer than timeout + grace while
  requests are open; journald `Suppressed N messages` lines are holes.
Alerts are raised once each (their `key`); `Alert.at_us` is when the rule became true in log
time, `detected_us` the log time (or wall clock) at which the watch saw it.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_GRACE_S = 10.0
S = 1_000_000
RECENT_US = 600 * S  # the live verdict looks back this far (log time) for firings and holes
_RAISED_KEPT = 1_000  # alert keys remembered once their subject folded away (bounded)

# Alert kinds, in the order a human reads them. A firing carries the decode's load at that moment
# (backpressure); `wedged`: the watchdog keeps firing on a prefill and nothing completes there
# since its first firing (the verdict's `watchdog.recovery`, live).
KINDS = (
    "silent_pin",
    "watchdog_fired",
    "wedged",
    "anonymous_pin",
    "metric_pin",
    "engine_down",
    "engine_silent",
    "journald_suppression",
)

_STOP = frozenset({"sigterm", "graceful_exit", "unit_stopping", "unit_stopped", "unit_killed", "unit_failed"})
_START = frozenset({"server_args", "server_ready", "unit_started"})
_PREFILL_END = frozenset({"prefill_bootstrap_failed", "prefill_transfer_failed", "transfer_error"})
# Catalog entries printing #inflight-req before the batch joins it (pdf_floor in 01_context.sql).
_FLOOR_WHOLE = frozenset(
    {"prefill_batch_056", "prefill_batch_053", "prefill_batch_0410", "prefill_batch_046"}
)
_LEVEL = {"abort_request": "L3", "req_time_stats": "L2", "request_received": "L1", "request_finished": "L1"}

EVENT_COLUMNS = (
    "ts_us", "host", "unit", "engine", "event", "entry", "dp_rank", "tp_rank", "bootstrap_room",
    "bootstrap_host", "rid", "finish_type", "state", "dwell_s", "timeout_s", "count", "inflight_req",
    "new_seq", "queue_req", "bootstrap_req", "token_usage", "prealloc_req", "transfer_req",
)  # fmt: skip
# A decode batch line older than this says nothing about the decode's load at a firing.
_LOAD_FRESH_US = 30 * S


@dataclass
class Alert:
    kind: str
    key: str
    at_us: int  # when it became true (log time)
    detected_us: int  # when the watch saw it
    host: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class Room:
    room: int
    host: str
    rid: str | None
    recv_us: int
    pin_us: int | None  # None: may still wait in the prefill's waiting queue (no deadline)
    pin_basis: str
    d_rid: str | None = None
    abort_seen: bool = False  # a decode-side abort: the abort race the watchdog exists for
    pinned: bool = False  # the silent-pin alert was raised


@dataclass
class Stream:
    """One prefill stats stream (host, DP rank, TP rank): its floor since it rose above zero."""

    pos_since: int | None = None
    min_floor: int = 0
    last_floor: int = 0
    last_us: int = 0


@dataclass
class DecodeLoad:
    """A decode host's last batch line: its load, for the firings that follow."""

    ts_us: int
    token_usage: float | None
    prealloc_req: int | None
    transfer_req: int | None
    backlog_before: int = 0  # prealloc + transfer at the line before: shrinking or not

    @property
    def backlog(self) -> int:
        return (self.prealloc_req or 0) + (self.transfer_req or 0)

    def saturated(self) -> bool:
        """The verdict's rule: token usage >= 0.95, or a backlog of 4 or more that is not shrinking."""
        return (self.token_usage or 0) >= 0.95 or (self.backlog >= 4 and self.backlog >= self.backlog_before)


@dataclass
class Engine:
    last_us: int
    down_us: int | None = None


class LiveFold:
    def __init__(self, operator_timeout_s: float | None = None, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.operator_timeout_s = operator_timeout_s
        self.grace_s = grace_s
        self.armed_timeout_s: float | None = None
        self.fired_timeout_s: float | None = None
        self.rooms: dict[int, Room] = {}
        self.undrained: dict[str, set[int]] = {}  # host -> rooms received since its last sample
        self.streams: dict[tuple[str, int, int], Stream] = {}
        self.engines: dict[tuple[str, str], Engine] = {}
        self.units: dict[tuple[str, str], int] = {}  # (host, unit) -> last line (log time)
        self.levels: dict[str, str] = {}  # host -> evidence level seen
        self.holes: list[dict[str, Any]] = []  # recent suppression holes (bounded by RECENT_US)
        self.raised: OrderedDict[str, dict[str, Any]] = OrderedDict()  # key -> alert (as JSON)
        self.firings: list[int] = []  # log times of recent firings
        self.decode_load: dict[str, DecodeLoad] = {}  # decode host -> its last batch line
        # prefill host -> [first firing of the current episode, firings since, completions since]
        self.episodes: dict[str, list[int]] = {}
        self.firings_total = 0
        self.holes_total: dict[str, int] = {}
        self.alerts_total: dict[str, int] = {}
        self.first_us: int | None = None
        self.newest_us: int | None = None  # "now": the newest line, or the wall clock when later
        self.log_us: int | None = None  # the newest line's own time
        self.lines_total = 0
        self._heap: list[tuple[int, int]] = []  # (deadline, room)
        self._new: list[Alert] = []
        self._checked_sec = -1

    # ------------------------------------------------------------------ settings

    @property
    def timeout_s(self) -> float:
        for t in (self.operator_timeout_s, self.armed_timeout_s, self.fired_timeout_s):
            if t is not None:
                return t
        return DEFAULT_TIMEOUT_S

    @property
    def timeout_source(self) -> str:
        if self.operator_timeout_s is not None:
            return "operator (--watchdog-timeout)"
        if self.armed_timeout_s is not None:
            return "armed line"
        return "firing lines" if self.fired_timeout_s is not None else "default"

    @property
    def stuck_us(self) -> int:
        return int((self.timeout_s + self.grace_s) * S)

    def _set_timeout(self, attr: str, value: float) -> None:
        before = self.stuck_us
        setattr(self, attr, value)
        if self.stuck_us != before:
            self._rebuild_heap()

    # ------------------------------------------------------------------ applying lines

    def apply(self, lines: pl.DataFrame, events: pl.DataFrame) -> list[Alert]:
        """Fold one parsed batch in; returns the alerts that became true while its time passed."""
        self._lines(lines)
        if events.height:
            ev = (
                events.select(EVENT_COLUMNS)
                .filter(pl.col("ts_us").is_not_null())
                .sort("ts_us", maintain_order=True)
            )
            firings = self._firing_ranks(ev)
            for row in ev.iter_rows():
                self.advance(row[0])
                self._event(row, firings)
        out, self._new = self._new, []
        return out

    def _lines(self, lines: pl.DataFrame) -> None:
        timed = lines.filter(pl.col("ts_us").is_not_null())
        self.lines_total += lines.height
        if not timed.height:
            return
        lo, hi = timed["ts_us"].min(), timed["ts_us"].max()
        self.first_us = lo if self.first_us is None else min(self.first_us, lo)  # type: ignore[type-var]
        self.log_us = hi if self.log_us is None else max(self.log_us, hi)  # type: ignore[type-var]
        per_unit = timed.group_by("host", "unit", "engine").agg(pl.col("ts_us").max())
        for host, unit, engine, last in per_unit.iter_rows():
            host = host or ""
            if unit:
                self.units[(host, unit)] = max(self.units.get((host, unit), 0), last)
            if engine in ("prefill", "decode"):
                e = self.engines.setdefault((host, engine), Engine(last))
                e.last_us = max(e.last_us, last)

    def _firing_ranks(self, ev: pl.DataFrame) -> dict[int, list[int]]:
        fired = ev.filter(pl.col("event") == "watchdog_fired")
        if not fired.height:
            return {}
        ranks = fired.group_by("bootstrap_room").agg(pl.col("tp_rank").drop_nulls().unique().sort())
        return {int(r): list(t) for r, t in ranks.iter_rows() if r is not None}

    def _event(self, row: tuple[Any, ...], firings: dict[int, list[int]]) -> None:
        (ts, host, unit, engine, event, entry, dp, tp, room, bhost, rid, finish_type, state, dwell,
         timeout, count, inflight, new_seq, queue, boot, usage, prealloc, transfer) = row  # fmt: skip
        host = host or ""
        level = _LEVEL.get(event)
        if level and engine in ("prefill", "decode") and level > self.levels.get(host, "L0"):
            self.levels[host] = level
        if event in _STOP or event in _START:
            self._lifecycle(ts, host, engine, event)
            return
        if event == "watchdog_armed" and timeout is not None:
            self._set_timeout("armed_timeout_s", float(timeout))
            return
        if event == "journal_suppressed":
            self._suppressed(ts, host, unit, engine, count)
            return
        if event == "decode_stats" and engine == "decode":
            before = self.decode_load.get(host)
            self.decode_load[host] = DecodeLoad(
                ts, usage, prealloc, transfer, before.backlog if before else 0
            )
            return
        if event == "prefill_stats" and engine == "prefill" and inflight is not None:
            self._sample(ts, host, dp, tp, entry, inflight, new_seq, queue, boot)
            return
        if room is None or room == 0 or bhost == "2.2.2.2" or (rid or "").startswith("HEALTH_CHECK"):
            return
        room = int(room)
        if event == "watchdog_fired":
            self._fired(ts, host, room, rid, state, dwell, timeout, firings.get(room, []))
        elif event == "request_received":
            if engine == "prefill" and room not in self.rooms:
                self._open(ts, host, room, rid)
            elif engine == "decode" and room in self.rooms:
                self.rooms[room].d_rid = rid
        elif room in self.rooms:
            r = self.rooms[room]
            if engine == "prefill" and (
                event in ("request_finished", "req_time_stats") or event in _PREFILL_END
            ):
                self._completed(r, event, finish_type, engine)
                self._close(r)
            elif engine == "decode" and event in ("request_finished", "req_time_stats"):
                # the KV arrived: traffic flows on the path, but only the prefill's own end (or an
                # empty sample of its queues) releases its hold (design.md, "Held")
                if event == "req_time_stats" or (finish_type or "") != "abort":
                    self._completed(r, event, finish_type, engine)
                else:
                    r.abort_seen = True

    def _open(self, ts: int, host: str, room: int, rid: str | None) -> None:
        self.rooms[room] = Room(room, host, rid, ts, ts, "prefill Receive")
        self.undrained.setdefault(host, set()).add(room)
        heapq.heappush(self._heap, (ts + self.stuck_us, room))

    def _completed(self, r: Room, event: str, finish_type: str | None, engine: str | None) -> None:
        """A request that ended normally counts as traffic flowing again on its prefill."""
        normal = event == "req_time_stats" or (event == "request_finished" and (finish_type or "") != "abort")
        episode = self.episodes.get(r.host)
        if normal and episode is not None:
            episode[2] += 1

    def _load_at(self, ts: int) -> DecodeLoad | None:
        """The decode's load at a firing: with one decode host, its last batch line (if fresh)."""
        if len(self.decode_load) != 1:
            return None  # several decodes: the room's decode is not tracked live
        load = next(iter(self.decode_load.values()))
        return load if ts - load.ts_us <= _LOAD_FRESH_US else None

    def _wedge(self, ts: int, host: str) -> None:
        """Firings go on and nothing completes on this prefill since its first: a wedge (once)."""
        episode = self.episodes.get(host)
        if episode is None or episode[2] > 0:  # a new episode: the first firing, or after traffic flowed
            self.episodes[host] = [ts, 1, 0]
            return
        episode[1] += 1
        key = f"wedged:{host}:{episode[0]}"
        if ts > episode[0] + S and key not in self.raised:
            self._raise(Alert("wedged", key, ts, ts, host, {
                "first_firing_us": episode[0], "firings": episode[1],
                "detail": "the watchdog keeps firing and nothing completed on this prefill since its first firing",
            }))  # fmt: skip

    def _close(self, r: Room) -> None:
        self.rooms.pop(r.room, None)
        self.undrained.get(r.host, set()).discard(r.room)

    def _fired(self, ts: int, host: str, room: int, rid: str | None, state: str | None, dwell: float | None,
               timeout: float | None, ranks: list[int]) -> None:  # fmt: skip
        if timeout is not None and self.fired_timeout_s is None:
            self._set_timeout("fired_timeout_s", float(timeout))
        r = self.rooms.get(room)
        key = f"watchdog_fired:{room}"
        if key not in self.raised:
            self.firings_total += 1
            self.firings.append(ts)
            load = self._load_at(ts)
            self._raise(Alert("watchdog_fired", key, ts, ts, host, {
                "bootstrap_room": str(room), "rid": rid or (r.rid if r else None),
                "decode_rid": r.d_rid if r else None, "state": state, "dwell_s": dwell,
                "timeout_s": timeout, "ranks": ranks, "was_alerted_as_silent_pin": bool(r and r.pinned),
                "evidence_level": self.levels.get(host, "L0"),
                "backpressure": load.saturated() if load else None,
                "decode_token_usage": load.token_usage if load else None,
                "decode_prealloc_req": load.prealloc_req if load else None,
                "decode_transfer_req": load.transfer_req if load else None,
            }))  # fmt: skip
            self._wedge(ts, host)
        if r is not None:
            self._close(r)

    def _sample(self, ts: int, host: str, dp: int | None, tp: int | None, entry: str | None, inflight: int,
                new_seq: int | None, queue: int | None, boot: int | None) -> None:  # fmt: skip
        floor = max(inflight, 0) if entry in _FLOOR_WHOLE else max(inflight - (new_seq or 0), 0)
        st = self.streams.setdefault((host, -1 if dp is None else dp, -1 if tp is None else tp), Stream())
        st.last_floor, st.last_us = floor, ts
        if floor > 0:
            if st.pos_since is None:
                st.pos_since, st.min_floor = ts, floor
            st.min_floor = min(st.min_floor, floor)
        else:
            st.pos_since = None
        # the rooms received since the last sample: scheduled once the waiting queue is empty
        waiting = self.undrained.get(host)
        if waiting:
            for room in waiting:
                r = self.rooms.get(room)
                if r is None:
                    continue
                if not queue:
                    r.pin_us, r.pin_basis = ts, "prefill Receive, then an empty waiting queue"
                    heapq.heappush(self._heap, (ts + self.stuck_us, room))
                else:
                    r.pin_us = None
            if not queue:
                waiting.clear()
        if floor == 0 and not queue and not boot:
            # every prefill queue empty: whatever it held before left without a line (released)
            gone = [
                r
                for r in self.rooms.values()
                if r.host == host and r.pin_us is not None and r.pin_us + S < ts
            ]
            for r in gone:
                self._close(r)

    def _lifecycle(self, ts: int, host: str, engine: str | None, event: str) -> None:
        if engine not in ("prefill", "decode"):
            return
        e = self.engines.setdefault((host, engine), Engine(ts))
        if event in _STOP:
            if e.down_us is None:
                e.down_us = ts
            if engine == "prefill":  # the requests it held are gone with it: lost, not stuck
                for r in [r for r in self.rooms.values() if r.host == host]:
                    self._close(r)
        elif event in ("server_ready", "unit_started") or e.down_us is not None:
            e.down_us = None

    def _suppressed(
        self, ts: int, host: str, unit: str | None, engine: str | None, count: int | None
    ) -> None:
        self.holes_total["journald_suppression"] = self.holes_total.get("journald_suppression", 0) + 1
        hole = {"kind": "journald_suppression", "host": host, "unit": unit, "at_us": ts, "count": count}
        self.holes.append(hole)
        key = f"journald_suppression:{host}:{unit}:{ts}"
        self._raise(Alert("journald_suppression", key, ts, ts, host, {
            "unit": unit, "suppressed": count,
            "detail": f"journald suppressed {count if count is not None else 'some'} messages from {unit or '?'}",
        }))  # fmt: skip

    # ------------------------------------------------------------------ time passing

    def advance(self, now_us: int) -> None:
        """Log time (or the wall clock) reached `now_us`: raise what became true by then."""
        if self.newest_us is None or now_us > self.newest_us:
            self.newest_us = now_us
        now = self.newest_us
        while self._heap and self._heap[0][0] <= now:
            deadline, room = heapq.heappop(self._heap)
            r = self.rooms.get(room)
            if r is None or r.pinned or r.pin_us is None or r.pin_us + self.stuck_us != deadline:
                continue  # folded away, alerted, waiting, or a stale deadline (moved)
            self._pin(r, deadline, now)
        if now // S != self._checked_sec:  # the per-host rules: once a log second
            self._checked_sec = now // S
            self._check(now)

    def _pin(self, r: Room, deadline: int, now: int) -> None:
        r.pinned = True
        holes = [h for h in self.holes if h["host"] in (r.host, "") and h["at_us"] >= r.pin_us]
        self._raise(Alert("silent_pin", f"silent_pin:{r.room}", deadline, now, r.host, {
            "bootstrap_room": str(r.room), "rid": r.rid, "decode_rid": r.d_rid,
            "dwell_s": round((now - r.pin_us) / S, 3), "pinned_from_us": r.pin_us, "pin_basis": r.pin_basis,
            "timeout_s": self.timeout_s, "timeout_source": self.timeout_source, "grace_s": self.grace_s,
            "abort_race": r.abort_seen, "evidence_level": self.levels.get(r.host, "L0"),
            "possibly_hidden": bool(holes),
        }))  # fmt: skip

    def _check(self, now: int) -> None:
        stuck = self.stuck_us
        self.holes = [h for h in self.holes if h["at_us"] >= now - RECENT_US]
        self.firings = [t for t in self.firings if t >= now - RECENT_US]
        self._check_floor(now, stuck)
        if not self.rooms:
            return
        for (host, engine), e in self.engines.items():
            if e.down_us is not None and now - e.down_us > stuck:
                self._engine_hole("engine_down", host, engine, e.down_us, e.down_us + stuck, now)
            elif e.down_us is None and now - e.last_us > stuck:
                self._engine_hole("engine_silent", host, engine, e.last_us, e.last_us + stuck, now)

    def _engine_hole(self, kind: str, host: str, engine: str, since: int, at: int, now: int) -> None:
        key = f"{kind}:{host}:{engine}:{since}"
        if key in self.raised:
            return
        self.holes_total[kind] = self.holes_total.get(kind, 0) + 1
        self.holes.append({"kind": kind, "host": host, "unit": None, "at_us": at, "count": None})
        self._raise(Alert(kind, key, at, now, host, {
            "engine": engine, "since_us": since, "for_s": round((now - since) / S, 3),
            "open_requests": len(self.rooms), "timeout_s": self.timeout_s,
        }))  # fmt: skip

    def _check_floor(self, now: int, stuck: int) -> None:
        per_host: dict[str, dict[int, tuple[int, int]]] = {}
        for (host, dp, _tp), st in self.streams.items():
            if st.pos_since is None or st.last_us - st.pos_since < stuck:
                continue
            # duplicate TP-rank streams of one DP rank count once; DP ranks add up
            best = per_host.setdefault(host, {}).get(dp)
            if best is None or st.min_floor > best[0]:
                per_host[host][dp] = (st.min_floor, st.pos_since)
        for host, dps in per_host.items():
            floor = sum(f for f, _ in dps.values())
            since = min(s for _, s in dps.values())
            named = sum(
                1
                for r in self.rooms.values()
                if r.host == host and r.pin_us is not None and r.pin_us <= since
            )
            if floor <= named:
                continue
            key = f"anonymous_pin:{host}:{since}"
            if key not in self.raised:
                self._raise(Alert("anonymous_pin", key, since + stuck, now, host, {
                    "floor": floor, "named_pins": named, "anonymous": floor - named, "since_us": since,
                    "timeout_s": self.timeout_s, "evidence_level": self.levels.get(host, "L0"),
                }))  # fmt: skip

    def _raise(self, alert: Alert) -> None:
        if alert.key in self.raised:
            return
        self.raised[alert.key] = alert_json(alert)
        while len(self.raised) > _RAISED_KEPT:
            self.raised.popitem(last=False)
        self.alerts_total[alert.kind] = self.alerts_total.get(alert.kind, 0) + 1
        self._new.append(alert)

    def _rebuild_heap(self) -> None:
        self._heap = [(r.pin_us + self.stuck_us, r.room) for r in self.rooms.values() if r.pin_us is not None]
        heapq.heapify(self._heap)

    # ------------------------------------------------------------------ reading it

    def raise_alert(self, alert: Alert) -> None:
        """An alert another rule found (livemetrics.py): kept, counted and delivered as the fold's own."""
        self._raise(alert)

    def take_new(self) -> list[Alert]:
        out, self._new = self._new, []
        return out

    def tick(self, now_us: int) -> list[Alert]:
        self.advance(now_us)
        out, self._new = self._new, []
        return out

    def silent_pins(self) -> list[Room]:
        return [r for r in self.rooms.values() if r.pinned]

    def open_by_host(self) -> dict[str, tuple[int, int]]:
        """prefill host -> (open requests, the oldest one's receive time)."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.rooms.values():
            n, oldest = out.get(r.host, (0, r.recv_us))
            out[r.host] = (n + 1, min(oldest, r.recv_us))
        return out

    def floors(self) -> dict[str, int]:
        """prefill host -> the inflight floor now (last sample per DP rank, TP duplicates once)."""
        per: dict[str, dict[int, int]] = {}
        for (host, dp, _tp), st in self.streams.items():
            d = per.setdefault(host, {})
            d[dp] = max(d.get(dp, 0), st.last_floor)
        return {h: sum(v.values()) for h, v in per.items()}

    def live_verdict(self, now_us: int) -> str:
        """The watch's running estimate (`pdforensics verdict` is the authority for a window)."""
        anon = any(
            a["alert"] == "anonymous_pin" and a["at_us"] >= now_us - RECENT_US for a in self.raised.values()
        )
        if self.silent_pins() or anon:
            return "watchdog_missed"
        if self.holes or self.first_us is None or self.log_us is None:
            return "inconclusive"
        if now_us - self.log_us > self.stuck_us:
            return "inconclusive"  # no line for longer than a timeout: silence is not evidence
        if now_us - self.first_us < self.stuck_us:
            return "inconclusive"  # seen less than one timeout: nothing can be said yet
        if self.firings:
            return "watchdog_fired"
        return "nothing_stuck"

    # ------------------------------------------------------------------ persistence

    def to_state(self) -> dict[str, Any]:
        return {
            "armed_timeout_s": self.armed_timeout_s, "fired_timeout_s": self.fired_timeout_s,
            "rooms": [asdict(r) for r in self.rooms.values()],
            "undrained": {h: sorted(v) for h, v in self.undrained.items() if v},
            "streams": [[*k, asdict(v)] for k, v in self.streams.items()],
            "engines": [[h, e, asdict(v)] for (h, e), v in self.engines.items()],
            "units": [[h, u, t] for (h, u), t in self.units.items()],
            "levels": self.levels, "holes": self.holes, "raised": list(self.raised.values()),
            "firings": self.firings, "firings_total": self.firings_total, "holes_total": self.holes_total,
            "decode_load": {h: asdict(v) for h, v in self.decode_load.items()}, "episodes": self.episodes,
            "alerts_total": self.alerts_total, "first_us": self.first_us, "newest_us": self.newest_us, "log_us": self.log_us,
            "lines_total": self.lines_total,
        }  # fmt: skip

    def load_state(self, s: dict[str, Any]) -> None:
        self.armed_timeout_s, self.fired_timeout_s = s["armed_timeout_s"], s["fired_timeout_s"]
        self.rooms = {r["room"]: Room(**r) for r in s["rooms"]}
        self.undrained = {h: set(v) for h, v in s["undrained"].items()}
        self.streams = {(h, dp, tp): Stream(**v) for h, dp, tp, v in s["streams"]}
        self.engines = {(h, e): Engine(**v) for h, e, v in s["engines"]}
        self.units = {(h, u): t for h, u, t in s["units"]}
        self.levels, self.holes = s["levels"], s["holes"]
        self.raised = OrderedDict((a["id"], a) for a in s["raised"])
        self.firings, self.firings_total = s["firings"], s["firings_total"]
        self.holes_total, self.alerts_total = s["holes_total"], s["alerts_total"]
        self.first_us, self.newest_us, self.lines_total = s["first_us"], s["newest_us"], s["lines_total"]
        self.log_us = s.get("log_us")
        self.decode_load = {h: DecodeLoad(**v) for h, v in s.get("decode_load", {}).items()}
        self.episodes = s.get("episodes", {})
        self._rebuild_heap()

    def wedged_hosts(self) -> set[str]:
        """Prefills whose current firing episode raised `wedged` and saw no completion since."""
        return {
            h
            for h, (first, _n, done) in self.episodes.items()
            if not done and f"wedged:{h}:{first}" in self.raised
        }


def alert_json(a: Alert) -> dict[str, Any]:
    from pdforensics.verdict import iso

    out: dict[str, Any] = {"alert": a.kind, "id": a.key, "at": iso(a.at_us), "detected": iso(a.detected_us),
                           "at_us": a.at_us, "detected_us": a.detected_us, "host": a.host}  # fmt: skip
    for k, v in a.fields.items():
        out[k[:-3] if k.endswith("_us") else k] = iso(v) if k.endswith("_us") else v
    return out
