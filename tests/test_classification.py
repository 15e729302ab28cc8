"""One small hand-built database per rule of design.md §3 and per kind of hole.

Each test writes the log lines a situation leaves (straight into `lines`/`events`), runs the
views, and checks the class, the flags and the verdict. Timeout 60 s, grace 10 s unless stated.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pdforensics import verdict
from pdforensics.errors import UsageError
from tests.verdict_helpers import DECODE, PREFILL, T0, Log, S, room

DECODE_2 = {**DECODE, "pid": 2300, "invocation_id": "inv-d2"}
PREFILL_2 = {**PREFILL, "pid": 1200, "invocation_id": "inv-p2"}
INIT_DECODE = {**DECODE, "pid": 1, "invocation_id": None, "syslog_identifier": "systemd"}


def traffic(log: Log, start: float, end: float, every: float = 20.0, first: int = 1000,
            p: dict = PREFILL, d: dict = DECODE) -> None:  # fmt: skip
    """Healthy requests and their batches (the floor back to 0) from `start` to `end`."""
    t, n = start, first
    while t < end:
        log.completed(t, room(n), p=p, d=d)
        log.batch(t + 0.3, inflight=1, who=p)
        t += every
        n += 1


def traffic_around_decode_restart(log: Log, stop: float, up: float, end: float) -> None:
    traffic(log, 10, stop)
    restart_decode(log, stop, up)
    traffic(log, up + 2, end, first=5000, d=DECODE_2)


def restart_decode(log: Log, stop: float, up: float) -> None:
    log.add(
        stop,
        DECODE,
        "sigterm",
        "SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
    )
    log.add(
        stop + 5, DECODE, "graceful_exit", "Gracefully exiting... Remaining number of requests 0.", count=0
    )
    log.add(stop + 8, INIT_DECODE, "unit_stopped", "Stopped sglang-decode.service.")
    log.add(up - 20, DECODE_2, "server_args", "server_args=ServerArgs(...)")
    log.add(up, DECODE_2, "server_ready", "The server is fired up and ready to roll!")


# ------------------------------------------------------------------------------------ classes


def test_completed_requests_and_nothing_stuck(log: Log) -> None:
    traffic(log, 10, 200)
    v = log.verdict()
    assert v.verdict == "nothing_stuck"
    assert v.counts["completed"] == 10 and v.requests == []
    assert v.evidence_level == "L1"


def test_young_open_request_is_in_flight(log: Log) -> None:
    traffic(log, 10, 200)
    log.receive(195, PREFILL, room(1), "p1").receive(195, DECODE, room(1), "d1").batch(195.3, inflight=1)
    reqs = log.requests()
    assert reqs[room(1)]["class"] == "in_flight"
    assert log.verdict().verdict == "nothing_stuck"


def pinned_request(log: Log, r: int = room(1), at: float = 30.0, released_at: float | None = None) -> None:
    """Received on both engines, prefilled (its batch ran), then nothing: every later batch's floor
    counts it (until `released_at`)."""
    log.receive(at, PREFILL, r, "p1").receive(at, DECODE, r, "d1").batch(at + 0.3, inflight=1)
    log.pinned.append((at + 0.3, released_at))


def test_silent_pin(log: Log) -> None:
    pinned_request(log)
    traffic(log, 10, 200)
    log.batch(200, inflight=1)  # a later health check: floor 1 (the pin)
    reqs = log.requests()
    pin = reqs[room(1)]
    assert pin["class"] == "silent_pin" and pin["prefill_status"] == "pinned"
    assert pin["dwell_basis"] == "prefill Receive (upper bound)" and pin["dwell_s"] == pytest.approx(
        170, abs=1
    )
    v = log.verdict()
    assert v.verdict == "watchdog_missed"
    assert any("silent_pin" in r and str(room(1)) in r for r in v.reasons)
    assert v.counts["anonymous_pins"] == 0  # the floor is the named request


def test_longer_timeout_makes_it_in_flight(log: Log) -> None:
    pinned_request(log)
    traffic(log, 10, 200)
    assert log.requests(timeout=300)[room(1)]["class"] == "in_flight"


def test_waiting_queue_explains_the_wait(log: Log) -> None:
    """At L1 the dwell is an upper bound: with #queue-req never empty, it may still be waiting."""
    log.completed(5, room(900))
    log.receive(30, PREFILL, room(1), "p1").receive(30, DECODE, room(1), "d1")
    for t in range(31, 200, 10):
        log.batch(t, inflight=1, queue=3)
    reqs = log.requests()
    assert reqs[room(1)]["class"] == "undecided" and reqs[room(1)]["prefill_status"] == "waiting_queue"
    v = log.verdict()
    assert v.verdict == "inconclusive"
    assert any("waiting queue" in r for r in v.reasons)


def watchdog_fires(log: Log, r: int, at: float, dwell: float, ranks: tuple[int, ...] = (0, 1, 2, 3)) -> None:
    for rank in ranks:
        log.add(at, PREFILL, "watchdog_fired", f"inflight watchdog: req.rid='p1' req.bootstrap_room={r} stalled",
                rid="p1", bootstrap_room=r, timeout_s=60.0, state="KVPoll.Transferring", dwell_s=dwell,
                tp_rank=rank)  # fmt: skip
    log.failure(at + 0.01, PREFILL, "prefill_transfer_failed", r, "p1",
                "inflight watchdog: stalled >60s in KVPoll.Transferring", ranks=len(ranks))  # fmt: skip


def test_watchdog_fired(log: Log) -> None:
    traffic(log, 10, 200)
    log.add(1, PREFILL, "watchdog_armed", "inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s",
            timeout_s=60.0, tp_rank=0)  # fmt: skip
    pinned_request(log)
    watchdog_fires(log, room(1), at=90.4, dwell=60.1)
    v = log.verdict(timeout=None)  # from the armed line
    assert (v.timeout_s, v.timeout_source, v.deployed) == (60.0, "armed line", True)
    assert v.verdict == "watchdog_fired"
    fired = [r for r in v.requests if r["class"] == "watchdog_fired"]
    assert [r["bootstrap_room"] for r in fired] == [str(room(1))] and fired[0]["dwell_s"] == pytest.approx(
        60.1
    )
    (firing,) = v.firings
    assert (
        firing["ranks"] == [0, 1, 2, 3]
        and firing["all_ranks"]
        and firing["same_second"]
        and not firing["late"]
    )
    assert any("every TP rank in the same second" in r for r in v.reasons)


def test_late_firing_and_missing_ranks_are_reported(log: Log) -> None:
    traffic(log, 10, 200)
    log.failure(
        2, PREFILL, "prefill_transfer_failed", room(500), "p500", "Failed to send kv chunk"
    )  # 4 ranks
    pinned_request(log)
    watchdog_fires(log, room(1), at=125.0, dwell=95.0, ranks=(0, 1))
    v = log.verdict()
    (firing,) = v.firings
    assert firing["late"] and not firing["all_ranks"]
    assert any("later than timeout + grace" in r and "without every TP rank" in r for r in v.reasons)


def test_transfer_failed_ranks_deduplicated(log: Log) -> None:
    traffic(log, 10, 200)
    r = room(1)
    log.receive(30, PREFILL, r, "p1").receive(30, DECODE, r, "d1")
    log.failure(
        31, PREFILL, "prefill_transfer_failed", r, "p1", "Failed to send kv chunk of 1 to 10.0.0.9:15004"
    )
    log.failure(
        31.5, DECODE, "decode_transfer_failed", r, "d1", "Failed to get kvcache from prefill instance"
    )
    req = log.requests()[r]
    assert req["class"] == "transfer_failed" and not req["abort_race"]
    assert req["p_fail_ranks"] == [0, 1, 2, 3] and req["d_fail_ranks"] == [0, 1, 2, 3]
    assert log.verdict().counts["transfer_failed"] == 1


def test_abort_in_inflight_queue_is_a_released_race(log: Log) -> None:
    traffic(log, 10, 200)
    r = room(1)
    log.receive(30, PREFILL, r, "p1").receive(30, DECODE, r, "d1").batch(30.3, inflight=1)
    log.failure(32, PREFILL, "prefill_transfer_failed", r, "p1", "Aborted by AbortReq.")
    log.failure(32.1, DECODE, "decode_transfer_failed", r, "d1", "Aborted by AbortReq.")
    req = log.requests()[r]
    assert (req["class"], req["abort_race"], req["abort_race_outcome"]) == ("aborted", True, "released")


def test_abort_in_bootstrap_queue_is_not_a_race(log: Log) -> None:
    traffic(log, 10, 200)
    r = room(1)
    log.receive(30, PREFILL, r, "p1").receive(30, DECODE, r, "d1")
    log.failure(32, PREFILL, "prefill_bootstrap_failed", r, "p1", "Aborted by AbortReq.")
    log.failure(32, DECODE, "decode_handshake_failed", r, "d1", "Aborted by AbortReq.")
    req = log.requests()[r]
    assert (req["class"], req["abort_race"]) == ("aborted", False)


def test_decode_transfer_abort_with_silent_prefill_is_a_pinned_race(log: Log) -> None:
    r = room(1)
    log.receive(30, PREFILL, r, "p1").receive(30, DECODE, r, "d1").batch(30.3, inflight=1)
    log.pinned.append((30.3, None))
    traffic(log, 10, 200)
    log.failure(32, DECODE, "decode_transfer_failed", r, "d1", "Aborted by AbortReq.")
    log.batch(199, inflight=1)  # the prefill never reports it; its floor stays
    req = log.requests()[r]
    assert (req["class"], req["abort_race"], req["abort_race_outcome"]) == ("silent_pin", True, "pinned")
    assert log.verdict().verdict == "watchdog_missed"


def test_l0_decode_abort_released_when_the_queue_empties(log: Log) -> None:
    """At L0 the prefill logs nothing for a decode-initiated abort (Mooncake); the gauge shows it left."""
    r = room(1)
    log.batch(29, inflight=1)
    log.failure(32, DECODE, "decode_transfer_failed", r, "d1", "Aborted by AbortReq.")
    for t in range(60, 200, 20):
        log.batch(t, inflight=1)  # health checks: floor 0, nothing bootstrapping or waiting
    req = log.requests()[r]
    assert (req["class"], req["abort_race_outcome"], req["one_sided"]) == ("aborted", "released", True)
    assert log.verdict().verdict == "nothing_stuck"


def test_decode_restart_loses_what_decode_held(log: Log) -> None:
    traffic_around_decode_restart(log, stop=110, up=150, end=300)
    r = room(1)  # the prefill sent its KV; decode was still generating when it was restarted
    log.receive(100, PREFILL, r, "p1").receive(100, DECODE, r, "d1").finish(100.5, PREFILL, r, "p1")
    req = log.requests()[r]
    assert (req["class"], req["lost_reason"]) == ("lost", "the decode holding it stopped or restarted")
    v = log.verdict()
    assert v.verdict == "nothing_stuck"  # a restart followed by healthy traffic is decidable
    assert any("decode on gpu-b restarted" in x for x in v.reasons)


def test_prefill_restart_loses_what_prefill_held(log: Log) -> None:
    r = room(1)
    log.receive(100, PREFILL, r, "p1").receive(100, DECODE, r, "d1").batch(100.3, inflight=1)
    log.pinned.append((100.3, 112.0))
    traffic(log, 10, 110)
    log.add(110, PREFILL, "sigterm", "SIGTERM received. signum=None frame=None.")
    log.add(140, PREFILL_2, "server_ready", "The server is fired up and ready to roll!")
    traffic(log, 142, 300, first=5000, p=PREFILL_2)
    req = log.requests()[r]
    assert (req["class"], req["prefill_status"]) == ("lost", "gone")


def test_pin_across_a_decode_restart(log: Log) -> None:
    pinned_request(log, at=100)  # the old decode still took it while draining
    traffic_around_decode_restart(log, stop=95, up=150, end=300)
    log.batch(299, inflight=1)
    req = log.requests()[room(1)]
    assert (req["class"], req["across_restart"]) == ("silent_pin", True)
    done_after = log.requests()[room(5002)]  # completed at ~192, after the restart
    assert (done_after["class"], done_after["across_restart"]) == ("completed", False)


def test_one_sided_request(log: Log) -> None:
    traffic(log, 10, 200)
    r = room(1)
    log.receive(50, DECODE, r, "d1").finish(53, DECODE, r, "d1")
    req = log.requests()[r]
    assert (req["class"], req["one_sided"], req["prefill_rid"], req["decode_rid"]) == (
        "completed",
        True,
        None,
        "d1",
    )


def test_health_checks_are_not_requests(log: Log) -> None:
    traffic(log, 10, 200)
    log.add(50, PREFILL, "request_received", "Receive: obj=GenerateReqInput(rid='HEALTH_CHECK_1')",
            rid="HEALTH_CHECK_1", bootstrap_room=0, bootstrap_host="2.2.2.2")  # fmt: skip
    log.add(51, PREFILL, "request_received", "Receive: obj=GenerateReqInput(rid='HEALTH_CHECK_2')",
            rid="HEALTH_CHECK_2", bootstrap_room=room(77), bootstrap_host="2.2.2.2")  # fmt: skip
    reqs = log.requests()
    assert 0 not in reqs and room(77) not in reqs and len(reqs) == 10


def test_l0_anonymous_pins(log: Log) -> None:
    """No per-request lines: only the floor (#inflight-req - #new-seq) of later batches shows the pins."""
    log.batch(10, inflight=1)
    log.batch(40, inflight=3)  # two requests from earlier batches never leave
    for t in range(60, 240, 20):
        log.batch(t, inflight=3)  # health checks: floor 2
    v = log.verdict()
    assert v.evidence_level == "L0"
    assert v.counts["anonymous_pins"] == 2 and v.verdict == "watchdog_missed"
    (pins,) = [a for a in v.anonymous_pins if a["anonymous_pins"]]
    assert pins["pinned_floor"] == 2 and pins["pinned_since"] is not None
    assert any("up to 2 anonymous pin(s), an upper bound from the gauge" in r for r in v.reasons)


def busy_queue(log: Log, seconds: range, pinned: int = 0, idle_every: int = 0) -> None:
    """A busy prefill on 1-s clocks (plain-file prefixes): 2 requests received every second,
    each in the queue for 2 s, and a batch line each second whose floor counts them (never 0).
    With `idle_every`, the last 4 of every `idle_every` seconds have no traffic (health checks
    only). `pinned` requests no line names sit in the queue throughout."""
    with log.bulk():
        _busy_queue(log, seconds, pinned, idle_every)


def _busy_queue(log: Log, seconds: range, pinned: int, idle_every: int) -> None:
    n = 0
    for k in seconds:
        busy = not idle_every or k % idle_every < idle_every - 4
        if busy:
            for _ in range(2):
                n += 1
                r = room(10_000 + n)
                log.receive(k, PREFILL, r, f"p{r}").receive(k, DECODE, r, f"d{r}")
                log.finish(k + 2, PREFILL, r, f"p{r}").finish(k + 4, DECODE, r, f"d{r}")
        # the queue at this batch line: those received in the 2 s before (none once idle)
        held = sum(
            2 for j in (k - 1, k - 2) if j in seconds and (not idle_every or j % idle_every < idle_every - 4)
        )
        log.batch(k, inflight=held + pinned + 1)


def test_busy_queue_is_not_anonymous_pins(log: Log) -> None:
    """L1, a queue that never empties (constant turnover for longer than timeout + grace), every
    request finishing within 2 s: the floor is the named requests, not pins. The gauge alone
    would claim 4."""
    busy_queue(log, range(0, 120))
    v = log.verdict()
    assert v.evidence_level == "L1"
    assert v.counts["anonymous_pins"] == 0 and v.counts["silent_pin"] == 0
    assert v.verdict == "nothing_stuck", v.reasons
    (row,) = v.anonymous_pins
    assert row["pinned_floor"] == 4 and row["anonymous_pins"] == 0
    assert not any("anonymous pin(s)" in r for r in v.reasons)
    assert any("no anonymous pin is proven" in r and "up to 4" in r for r in v.reasons)


def test_l1_anonymous_pins_still_counted(log: Log) -> None:
    """L1 with 3 requests no line names in the queue since before the window (received before the
    log begins, never released): at the idle batch lines nothing named can be held, so the floor
    of 3 is proven to be anonymous pins."""
    busy_queue(log, range(0, 120), pinned=3, idle_every=15)
    v = log.verdict()
    assert v.evidence_level == "L1"
    assert v.counts["anonymous_pins"] == 3 and v.counts["silent_pin"] == 0
    assert v.verdict == "watchdog_missed"
    assert any("3 anonymous pin(s)" in r for r in v.reasons)


def test_l1_busy_anonymous_pins_what_the_lines_prove(log: Log) -> None:
    """A busy queue with 3 unnamed pins and no quiet moment, on 1-s clocks: at each batch line up to
    6 named requests may be held (those received in its second count), so the floor of 7 proves 1
    anonymous pin; that is claimed, and the reason says the gauge alone would allow up to 7."""
    busy_queue(log, range(0, 120), pinned=3)
    v = log.verdict()
    assert v.counts["anonymous_pins"] == 1 and v.verdict == "watchdog_missed"
    assert any("1 anonymous pin(s)" in r and "up to 7" in r for r in v.reasons)


def test_old_builds_print_the_batch_before_it_joins(log: Log) -> None:
    """<= 0.5.8 prints `Prefill batch` before the forward: #inflight-req is the floor itself."""
    for t in range(10, 240, 20):
        log.batch(t, inflight=1, new_seq=1, entry="prefill_batch_053")
    v = log.verdict()
    assert v.counts["anonymous_pins"] == 1 and v.verdict == "watchdog_missed"


def test_floor_that_drains_is_not_a_pin(log: Log) -> None:
    for t in range(10, 240, 20):
        log.batch(t, inflight=3 if t < 100 else 1)
    # the decode observed too: without it no window is nothing_stuck (test_verdict_honesty)
    log.add(
        230,
        DECODE,
        "decode_stats",
        "Decode batch",
        running_req=0,
        transfer_req=0,
        prealloc_req=0,
        queue_req=0,
    )
    v = log.verdict()
    assert v.counts["anonymous_pins"] == 0 and v.verdict == "nothing_stuck"


def test_clock_skew_is_estimated_and_used(log: Log) -> None:
    """The decode host's clock is 100 s ahead; a decode restart long before a request is not across it."""
    skew = 100.0
    t, n = 5.0, 0
    while t < 300:
        log.completed(t, room(n), skew=skew)
        log.batch(t + 0.3, inflight=1)
        t, n = t + 10, n + 1
    log.add(10 + skew, DECODE, "sigterm", "SIGTERM received.")
    log.add(20 + skew, DECODE_2, "server_ready", "The server is fired up and ready to roll!")
    log.add(300 + skew, DECODE_2, "server_ready", "The server is fired up and ready to roll!")
    offsets = {o["host"]: o for o in log.verdict().host_offsets}
    assert offsets["gpu-b"]["offset_us"] == pytest.approx(skew * S, abs=0.01 * S)
    assert offsets["gpu-a"]["method"] == "reference"
    reqs = log.requests()
    late = reqs[room(10)]  # prefill at 105-105.5, decode at 105-108 true time: after the restart
    assert late["class"] == "completed" and not late["across_restart"]
    assert late["first_t"] == T0 + 105 * S


# -------------------------------------------------------------------------------------- holes


def test_hole_short_window(log: Log) -> None:
    traffic(log, 0, 40, every=5)
    v = log.verdict()
    assert v.verdict == "inconclusive"
    assert any("shorter than the watchdog timeout" in r for r in v.reasons)
    assert [h["kind"] for h in v.holes if h["decisive"]] == ["short_window"]


def suppress(log: Log, at: float, n: int = 390) -> None:
    """journald's own line, re-assigned by the parser to the unit it names."""
    log.add(at, {**PREFILL, "pid": 300, "syslog_identifier": "systemd-journald"}, "journal_suppressed",
            f"Suppressed {n} messages from sglang-prefill.service", count=n)  # fmt: skip


def test_hole_journald_suppression(log: Log) -> None:
    pinned_request(log, at=100)
    traffic(log, 10, 200)
    suppress(log, at=150)  # lines of [120, 150] are gone: its end may be among them
    reqs = log.requests()
    assert (reqs[room(1)]["class"], reqs[room(1)]["prefill_status"]) == ("undecided", "hidden")
    v = log.verdict()
    assert v.verdict == "inconclusive"
    assert any("journald suppressed 390 messages" in r and str(room(1)) in r for r in v.reasons)
    assert [h["kind"] for h in v.holes if h["decisive"]] == ["journald_suppression"]


def test_covered_suppression_is_decidable(log: Log) -> None:
    pinned_request(log, at=100)
    traffic(log, 10, 400)
    suppress(log, at=150)
    for t in (300, 380):
        log.batch(t + 0.1, inflight=1)  # a timeout later the floor still holds it
    reqs = log.requests()
    assert reqs[room(1)]["prefill_status"] == "pinned"
    assert log.verdict().verdict == "watchdog_missed"


def test_suppression_over_nothing_suspect_is_harmless(log: Log) -> None:
    traffic(log, 10, 400)
    suppress(log, at=150)
    v = log.verdict()
    assert v.verdict == "nothing_stuck"
    (hole,) = v.holes
    assert hole["kind"] == "journald_suppression" and hole["covered"] and not hole["decisive"]


def test_hole_engine_silent(log: Log) -> None:
    pinned_request(log, at=45)
    traffic(log, 10, 50)
    t, n = 60.0, 2000
    while t < 200:  # the router keeps sending; only the decode's lines arrive
        log.receive(t, DECODE, room(n), f"d{n}").finish(t + 3, DECODE, room(n), f"d{n}")
        t, n = t + 10, n + 1
    v = log.verdict()
    assert v.verdict == "inconclusive"
    silent = [h for h in v.holes if h["kind"] == "engine_silent"]
    assert silent and silent[0]["engine"] == "prefill" and silent[0]["decisive"]
    assert any("prefill logged nothing" in r for r in v.reasons)


def test_hole_engine_down(log: Log) -> None:
    traffic(log, 10, 180)
    log.receive(185, PREFILL, room(1), "p1").receive(185, DECODE, room(1), "d1").batch(185.3, inflight=1)
    log.add(188, DECODE, "sigterm", "SIGTERM received.")  # and no restart before the window ends
    log.batch(195, inflight=2)
    v = log.verdict()
    assert v.verdict == "inconclusive"
    down = [h for h in v.holes if h["kind"] == "engine_down"]
    assert down and down[0]["decisive"] and down[0]["engine"] == "decode"
    assert any("decode stopped and did not come back" in r for r in v.reasons)


def test_hole_parse_error(log: Log) -> None:
    traffic(log, 10, 180)
    log.receive(185, PREFILL, room(1), "p1").receive(185, DECODE, room(1), "d1")
    log.add(190, PREFILL, None, "Prefill batch, #new-seq: garbled", parse_error="prefill_batch_0518")
    v = log.verdict()
    assert v.verdict == "inconclusive"
    assert any("failed to parse" in r for r in v.reasons)


def test_other_programs_lines_are_not_holes(log: Log) -> None:
    traffic(log, 10, 200)
    log.add(50, {**PREFILL, "pid": 77, "syslog_identifier": "bash"}, None, "gpu-check: 4 GPUs visible")
    log.add(60, PREFILL, None, "\x1b[33m[deep_gemm] WARNING: JIT cache is slow\x1b[0m")
    v = log.verdict()
    assert v.verdict == "nothing_stuck" and v.holes == []
    (prefill,) = [c for c in log.query("SELECT n_other_lines FROM engine_coverage WHERE engine = 'prefill'")]
    assert prefill[0] == 2


def test_no_prefill_lines_is_inconclusive(log: Log) -> None:
    for i in range(10):
        log.receive(10 + 20 * i, DECODE, room(i), f"d{i}").finish(13 + 20 * i, DECODE, room(i), f"d{i}")
    v = log.verdict()
    assert v.verdict == "inconclusive"
    assert any("no prefill line" in r for r in v.reasons)


# ------------------------------------------------------------------------ parameters, timeline


def test_session_variables_in_a_plain_duckdb_session(tmp_path: Path) -> None:
    log = Log(tmp_path / "plain.duckdb")
    pinned_request(log, at=100)
    traffic(log, 10, 400)
    log.verdict()  # installs the views
    log.close()
    con = duckdb.connect(str(tmp_path / "plain.duckdb"), read_only=True)
    try:
        # as docs/reference.md tells a user's own session to (planning ~5x faster; same answers)
        con.execute("SET disabled_optimizers = 'projection_pullup,projection_placement'")
        con.execute("SET VARIABLE pdf_watchdog_timeout_s = 60")
        assert con.execute("SELECT verdict FROM verdict").fetchall() == [("watchdog_missed",)]
        con.execute("SET VARIABLE pdf_watchdog_timeout_s = 300")
        assert con.execute("SELECT verdict, timeout_s FROM verdict").fetchall() == [("nothing_stuck", 300.0)]
        con.execute(f"SET VARIABLE pdf_until_us = {T0 + 200 * S}")  # a window shorter than the timeout
        assert con.execute("SELECT verdict FROM verdict").fetchall() == [("inconclusive",)]
    finally:
        con.close()


def test_timeline_by_room_and_by_rid(log: Log) -> None:
    pinned_request(log)
    traffic_around_decode_restart(log, stop=40, up=80, end=200)
    log.verdict()
    t = verdict.request_timeline(log.con, str(room(1)), verdict.VerdictOptions(watchdog_timeout_s=60))
    assert t.request["class"] == "silent_pin"
    assert {ln["engine"] for ln in t.lines} >= {"prefill", "decode"}
    assert [p["phase"] for p in t.phases][:2] == ["received", "received"]
    assert any("past its deadline" in e for e in t.evidence)
    assert verdict.request_timeline(log.con, "d1").bootstrap_room == str(room(1))
    text = verdict.render_timeline(t)
    assert str(room(1)) in text and "Receive:" in text
    with pytest.raises(UsageError):
        verdict.request_timeline(log.con, "no-such-request")


def test_json_contract(log: Log) -> None:
    pinned_request(log)
    traffic(log, 10, 200)
    doc = log.verdict().to_json()
    assert set(doc) >= {"verdict", "window", "watchdog", "evidence_level", "counts", "requests", "reasons"}
    assert set(doc["window"]) == {"start", "end"} and doc["window"]["start"].endswith("Z")
    assert {"timeout_s", "deployed"} <= set(doc["watchdog"])
    assert set(verdict.CLASSES) | {"anonymous_pins"} <= set(doc["counts"])
    (req,) = doc["requests"]
    assert req["bootstrap_room"] == str(room(1)) and isinstance(req["bootstrap_room"], str)
    keys = {
        "bootstrap_room",
        "prefill_rid",
        "decode_rid",
        "class",
        "abort_race",
        "across_restart",
        "one_sided",
        "dwell_s",
    }
    assert keys <= set(req)
    assert isinstance(req["abort_race"], bool) and isinstance(req["dwell_s"], float)
    assert verdict.render_text(log.verdict()).startswith("verdict: watchdog_missed")
