"""`nothing_stuck` only where the logs show that nothing was stuck (issue: verdict honesty).

Hand-built databases (tests/verdict_helpers.py), one per way evidence can mislead: a prefill
that goes silent with requests held, a hole over a request's deadline, no prefill queue observed,
a window the data does not reach, an engine that dies, two incidents in one file. Each checks the
class, the counts and the verdict, and that the reason that decided comes first.
Timeout 60 s, grace 10 s unless stated.
"""

from __future__ import annotations

import pytest

from tests.test_classification import pinned_request, suppress, traffic
from tests.verdict_helpers import DECODE, PREFILL, T0, Log, S, room

INIT_PREFILL = {**PREFILL, "pid": 1, "invocation_id": None, "syslog_identifier": "systemd"}


def classes_add_up(v) -> None:
    """Every request is in exactly one class, and the summary states the same numbers."""
    counted = sum(v.counts[c] for c in ("watchdog_fired", "silent_pin", "undecided", "transfer_failed", "retracted",
                                        "aborted", "lost", "completed", "in_flight"))  # fmt: skip
    assert counted == v.counts["requests"]
    assert len(v.requests) == v.counts["requests"] - v.counts["completed"]
    summary = next(r for r in v.reasons if r.startswith(f"{v.counts['requests']} requests:"))
    assert f"{v.counts['undecided']} undecided" in summary and f"{v.counts['in_flight']} in flight" in summary


# ------------------------------------------------------------------ a prefill that goes silent


def test_prefill_silent_with_requests_held_is_not_healthy(log: Log) -> None:
    """Three requests enter the inflight queue, then the prefill prints nothing more: their
    deadlines pass in the silence, so their end (or the watchdog's line) cannot be known."""
    traffic(log, 10, 100)
    for i in range(3):
        pinned_request(log, room(i + 1), at=100 + i)
    log.batch(110, inflight=3)
    # the decode goes on logging its own batches; the prefill says nothing to the window end
    for t in range(120, 400, 10):
        log.add(t, DECODE, "decode_stats", "Decode batch, #running-req: 0", running_req=0)
    v = log.verdict()
    assert v.verdict == "inconclusive", v.reasons
    assert {r["class"] for r in v.requests} == {"undecided"}
    assert v.counts["undecided"] == 3
    assert "showed nothing of its queues" in v.reasons[0]
    classes_add_up(v)


def test_floor_held_a_timeout_then_silence_is_anonymous_pins(log: Log) -> None:
    """At L0 the floor stays at 2 for longer than timeout + grace before the prefill goes quiet:
    the samples themselves prove two requests stuck."""
    for t in range(10, 200, 10):
        log.batch(t, inflight=3 if t >= 40 else 1)  # floor = #inflight-req - #new-seq (1)
    for t in range(10, 400, 10):
        log.add(t, DECODE, "decode_stats", "Decode batch, #running-req: 0", running_req=0)
    v = log.verdict()
    assert v.verdict == "watchdog_missed"
    assert v.counts["anonymous_pins"] == 2
    assert "floor stayed at 2" in v.reasons[0]


def test_an_idle_prefill_silence_is_named_but_does_not_decide(log: Log) -> None:
    traffic(log, 10, 100)
    log.batch(400, inflight=1)  # a health check much later: the queue was empty all along
    v = log.verdict()
    assert v.verdict == "nothing_stuck", v.reasons
    assert v.reasons[0].startswith("nothing was held past the 60.0 s timeout")
    assert any("showed nothing of its queues" in r and "does not decide" in r for r in v.reasons)


# ------------------------------------------------------------------ holes


def test_a_hole_over_the_deadline_is_undecided_whatever_a_later_gauge_shows(log: Log) -> None:
    """Its watchdog line may be among the suppressed ones; the queue was empty afterwards, which a
    firing explains as well as a normal finish."""
    pinned_request(log, at=100, released_at=175)
    traffic(log, 10, 300)
    suppress(log, at=180)  # lines of [150, 180] are gone: the deadline (160..170) is in there
    reqs = log.requests()
    assert (reqs[room(1)]["class"], reqs[room(1)]["prefill_status"]) == ("undecided", "hidden")
    v = log.verdict()
    assert v.verdict == "inconclusive"
    assert v.counts["undecided"] == 1
    assert "journald suppressed 390 messages" in v.reasons[0] and str(room(1)) in v.reasons[0]
    classes_add_up(v)


def test_a_hole_that_does_not_decide_is_named(log: Log) -> None:
    traffic(log, 10, 400)
    suppress(log, at=150)
    v = log.verdict()
    assert v.verdict == "nothing_stuck"
    assert any("journald suppressed 390 messages" in r and "does not decide" in r for r in v.reasons)


def test_hole_suspect_counts_each_request_once(log: Log) -> None:
    pinned_request(log, at=100, released_at=175)
    traffic(log, 10, 300)
    suppress(log, at=180)
    v = log.verdict()
    hole = next(h for h in v.holes if h["kind"] == "journald_suppression")
    assert hole["suspects"] == 1 and hole["decisive"]
    assert "overlapping 1 request(s)" in v.reasons[0]


def l0_traffic(log: Log, start: float, end: float) -> None:
    """Default INFO logging: batch lines only (the floor 0), no line names a request."""
    for t in range(int(start), int(end), 10):
        log.batch(t, inflight=1)
        log.add(t + 1, DECODE, "decode_stats", "Decode batch, #running-req: 1", running_req=1)


def test_an_l0_prefill_hole_no_later_sample_covers_decides(log: Log) -> None:
    """At L0 a request that entered the prefill while its lines were suppressed, and stayed, is
    named by no line: only a later floor shows it. With the prefill's lines gone from the hole to
    the window end (the decode still batching), nothing rules such a pin out."""
    l0_traffic(log, 10, 200)
    suppress(log, at=230)
    for t in range(230, 400, 10):
        log.add(t + 1, DECODE, "decode_stats", "Decode batch, #running-req: 1", running_req=1)
    v = log.verdict()
    assert v.verdict == "inconclusive", v.reasons
    assert "journald suppressed 390 messages" in v.reasons[0]
    assert "no line names the requests" in v.reasons[0]
    hole = next(h for h in v.holes if h["kind"] == "journald_suppression")
    assert hole["decisive"] and hole["suspects"] == 0


def test_an_l0_prefill_hole_a_later_empty_floor_covers_is_named_only(log: Log) -> None:
    """The same hole, then the prefill's batches again for more than a timeout + grace with the
    floor at 0: a pin born in the hole would hold it up, so the hole does not decide."""
    l0_traffic(log, 10, 200)
    suppress(log, at=230)
    l0_traffic(log, 240, 400)
    v = log.verdict()
    assert v.verdict == "nothing_stuck", v.reasons
    assert any("journald suppressed 390 messages" in r and "does not decide" in r for r in v.reasons)


# ------------------------------------------------------------------ a run that did not complete


def test_an_interrupted_ingest_is_inconclusive_until_a_run_of_its_sources_completes(log: Log) -> None:
    """Healthy traffic, stored by a run that was interrupted (Ctrl-C, kill -9, a full disk): what
    it had not read yet is missing from the window without a trace in the lines themselves. The
    window is inconclusive and names the run; a later run of other sources does not complete it,
    one of the same sources does."""
    traffic(log, 10, 200)
    log.con.execute("UPDATE ingests SET status = 'interrupted'")
    v = log.verdict()
    assert v.verdict == "inconclusive", v.reasons
    assert any(r.startswith("ingest run 1 was interrupted after storing") for r in v.reasons), v.reasons
    log.con.execute(
        "INSERT INTO ingests (ingest_id, started_at, sources, status) VALUES (2, now(), 'other.log', 'complete')"
    )
    assert log.verdict().verdict == "inconclusive"
    log.con.execute(
        "INSERT INTO ingests (ingest_id, started_at, sources, status) VALUES (3, now(), 'hand-built', 'complete')"
    )
    v = log.verdict()
    assert v.verdict == "nothing_stuck", v.reasons


# ------------------------------------------------------------------ nothing observed


def test_no_prefill_at_all_is_inconclusive(log: Log) -> None:
    for i in range(5):
        log.receive(10 + i * 30, DECODE, room(i), f"d{i}").finish(12 + i * 30, DECODE, room(i), f"d{i}")
    v = log.verdict()
    assert v.verdict == "inconclusive"
    assert v.reasons[0].startswith("the prefill inflight queue was never observed")


@pytest.mark.parametrize("prefill_from", [29, 3600])
def test_the_only_prefill_holds_a_decode_failure_only_once_observed(log: Log, prefill_from: float) -> None:
    """At L0 a decode's `Decode transfer failed` names no prefill: with one prefill host it can
    only be that one, but only if that prefill's lines had begun. A prefill first seen an hour
    later (another day's file, a later deployment) is not known to have held it: its empty queue
    then says nothing of this request."""
    r = room(1)
    timed_out = "Request timed out after 300.0s in KVPoll.WaitingForInput"
    log.failure(32, DECODE, "decode_transfer_failed", r, "d1", timed_out)
    for t in range(prefill_from, prefill_from + 600, 20):
        log.batch(t, inflight=1)  # floor 0: the prefill's queues are empty
    req = log.requests()[r]
    if prefill_from < 32:
        assert (req["prefill_status"], req["class"]) == ("released", "transfer_failed")
    else:
        assert (req["prefill_status"], req["class"]) == ("no_prefill", "undecided")
        assert log.verdict().verdict == "inconclusive"


def test_no_decode_at_all_is_inconclusive_and_handed_off_requests_undecided(log: Log) -> None:
    """Only the prefill's journal: every request it received it also finished, its queue drains to
    0. Its Finish: ends its own hold, but whether each transfer reached a decode and finished
    there (or sits in a decode's queue) is not observed: the requests are undecided, not
    completed, and the window is not nothing_stuck. The same data with the decode's lines is."""
    for i in range(5):
        log.receive(10 + i * 30, PREFILL, room(i), f"p{i}").finish(11 + i * 30, PREFILL, room(i), f"p{i}")
    for t in range(5, 240, 20):
        log.batch(t, inflight=0)
    v = log.verdict()
    assert v.verdict == "inconclusive" and v.counts["undecided"] == 5 and v.counts["completed"] == 0
    assert {r["class"] for r in v.requests} == {"undecided"}
    assert {r["undecided_reason"] for r in v.requests} == {
        "the prefill handed it off, but no decode line in the window shows whether the decode received and finished it"
    }
    assert any(r.startswith("the decode was never observed") and "5 request(s)" in r for r in v.reasons), (
        v.reasons
    )
    classes_add_up(v)
    for i in range(5):
        log.receive(10.01 + i * 30, DECODE, room(i), f"d{i}").finish(13 + i * 30, DECODE, room(i), f"d{i}")
    v = log.verdict()
    assert v.verdict == "nothing_stuck" and v.counts["completed"] == 5, v.reasons


def test_a_prefill_without_queue_evidence_is_inconclusive(log: Log) -> None:
    """A non-PD server's lines tagged prefill: batch lines without #inflight-req, no room lines."""
    for t in range(10, 3000, 30):
        log.add(
            t, PREFILL, "prefill_stats", "Prefill batch, #new-seq: 1, #new-token: 8", new_seq=1, new_token=8
        )
    v = log.verdict()
    assert v.verdict == "inconclusive"
    assert any(f"never observed on {PREFILL['host']}" in r for r in v.reasons), v.reasons
    observed = {(o["host"], o["engine"]): o for o in v.to_json()["observed"]}
    assert (
        observed[(PREFILL["host"], "prefill")]["queues"] == ["waiting"]
        or "inflight" not in (observed[(PREFILL["host"], "prefill")]["queues"])
    )


@pytest.mark.parametrize("carries", [False, True], ids=["gaugeless_build", "same_build"])
def test_request_lines_do_not_stand_in_for_a_gauge_the_new_build_lacks(log: Log, carries: bool) -> None:
    """L1: the prefill restarts at 100 s onto a build whose batch lines carry no #inflight-req, and
    requests go on being received and finished to 250 s. Request lines name what entered and left
    the inflight queue, not what an unlogged abort or completion left in it: from the restart the
    queue is unobserved, the window is not nothing_stuck and the reason names the line shape.
    The same traffic on a build that carries the field is nothing_stuck."""
    traffic(log, 10, 100)
    new_build = {**PREFILL, "pid": 3100, "invocation_id": "inv-p2"}
    t, n = 102.0, 2000
    while t < 250:
        log.completed(t, room(n), p=new_build)
        if carries:
            log.batch(t + 0.3, inflight=1, who=new_build)
        else:
            log.add(t + 0.3, new_build, "prefill_stats", "Prefill batch, #new-seq: 1, #new-token: 8",
                    new_seq=1, new_token=8, entry="prefill_batch")  # fmt: skip
        t, n = t + 20, n + 1
    v = log.verdict()
    if carries:
        assert v.verdict == "nothing_stuck", v.reasons
        return
    assert v.verdict == "inconclusive", v.reasons
    assert any("carry no #inflight-req (line shape prefill_batch)" in r and "request lines name" in r
               for r in v.reasons), v.reasons  # fmt: skip


def test_observed_lists_queues_samples_and_gaps(log: Log) -> None:
    traffic(log, 10, 200)
    log.add(
        50, DECODE, "decode_stats", "Decode batch", running_req=1, transfer_req=0, prealloc_req=0, queue_req=0
    )
    doc = log.verdict().to_json()
    rows = {(o["host"], o["engine"]): o for o in doc["observed"]}
    p = rows[(PREFILL["host"], "prefill")]
    assert p["queues"] == ["inflight", "bootstrap", "waiting"] and p["samples"] == 10
    assert p["longest_gap_s"] == pytest.approx(20, abs=1)
    d = rows[(DECODE["host"], "decode")]
    assert d["queues"] == ["transfer", "prealloc", "waiting"] and d["samples"] == 1


# ------------------------------------------------------------------ the window


def test_a_window_after_the_data_says_so(log: Log) -> None:
    """`--since 6m` on a database ingested hours ago: an empty window is not judged and its length
    is no reason ("nothing in it could have been stuck" beside an empty window contradicts
    itself); the one reason says where the data ends and what to do."""
    traffic(log, 10, 200)
    v = log.verdict(since_us=T0 + 5000 * S)
    assert v.verdict == "inconclusive"
    assert v.window_end_us >= v.window_start_us
    assert v.reasons[0].startswith("no lines in the window"), v.reasons
    assert "the database ends 80 min before the window starts: ingest again" in v.reasons[0], v.reasons[0]
    assert not any("nothing in it could have been stuck" in r for r in v.reasons), v.reasons


def test_a_short_window_with_an_unknown_timeout_names_the_option(log: Log) -> None:
    """A 100-s window, no armed line: the timeout is the 300-s default, and what settles it is
    --watchdog-timeout, not a longer window."""
    traffic(log, 10, 110)
    v = log.verdict(timeout=None)
    assert v.verdict == "inconclusive"
    short = next(r for r in v.reasons if "shorter than the watchdog timeout" in r)
    assert "pass --watchdog-timeout" in short and "re-run with a window" not in short, short
    v = log.verdict(timeout=60, since_us=T0 + 10 * S, until_us=T0 + 40 * S)
    short = next(r for r in v.reasons if "shorter than the watchdog timeout" in r)
    assert "pass --watchdog-timeout" not in short and "re-run with a window of at least" in short, short


def test_a_request_that_left_unseen_is_not_healthy_while_the_timeout_is_unknown(log: Log) -> None:
    """No armed line and no firing line: the timeout is the 300-s default. A request held ~60 s
    that then left the queue with no line (its end, perhaps a 60-s watchdog's line, lost) is what
    such a watchdog would have ended: its last line is its Receive:, but its hold lasted until the
    queues were seen empty, not until that line."""
    pinned_request(log, at=30, released_at=90)
    traffic(log, 10, 400)
    v = log.verdict(timeout=None)
    assert v.timeout_source == "default"
    assert v.verdict == "inconclusive", v.reasons
    why = next(r for r in v.reasons if "ended by a failure or unseen" in r)
    assert str(room(1)) in why and "pass --watchdog-timeout" in why, why
    lost = log.requests(timeout=None)[room(1)]
    assert lost["prefill_status"] == "released" and lost["released_by_t"] >= T0 + 90 * S, lost


@pytest.mark.parametrize(("released_at", "judged"), [(60, "lost"), (85, "undecided"), (130, "undecided")])
def test_a_request_that_left_unseen_after_its_deadline_is_not_healthy(
    log: Log, released_at: float, judged: str
) -> None:
    """Timeout 60 s (armed line). A request held from 30 s left the queue with no line: seen empty
    by 70 s, it left before the watchdog could fire (lost, not stuck); first seen empty at 90 s
    (it left at 85 s, which no line shows) or at 130 s, the watchdog may have released it, and its
    end (perhaps the watchdog's line) is missing."""
    log.add(5, PREFILL, "watchdog_armed", "inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s",
            timeout_s=60.0)  # fmt: skip
    pinned_request(log, at=30, released_at=released_at)
    traffic(log, 10, 400)
    v = log.verdict(timeout=None)
    left = log.requests(timeout=None)[room(1)]
    assert left["class"] == judged, left
    assert T0 + released_at * S <= left["released_by_t"] <= T0 + (released_at + 20.5) * S, left
    classes_add_up(v)
    if judged == "lost":
        assert v.verdict == "nothing_stuck", v.reasons
        return
    assert left["prefill_status"] == "released_late" and left["holder_at_end"] is None, left
    assert v.verdict == "inconclusive"
    assert v.reasons[0].startswith("1 request(s) undecided: it left the prefill without a line"), v.reasons
    assert str(room(1)) in v.reasons[0] and "the watchdog's line" in v.reasons[0], v.reasons[0]


def test_context_before_the_window_keeps_the_armed_line_and_open_requests(log: Log) -> None:
    log.add(5, PREFILL, "watchdog_armed", "inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s",
            timeout_s=60.0)  # fmt: skip
    log.add(20, PREFILL, "server_ready", "The server is fired up and ready to roll!")
    pinned_request(log, at=30)
    traffic(log, 35, 300)
    # the window starts between the armed line and ready, and after the pin's Receive:
    v = log.verdict(timeout=None, since_us=T0 + 12 * S)
    assert (v.timeout_s, v.timeout_source, v.deployed) == (60.0, "armed line", True)
    v = log.verdict(timeout=None, since_us=T0 + 60 * S)
    pins = [r for r in v.requests if r["class"] == "silent_pin"]
    assert [r["bootstrap_room"] for r in pins] == [str(room(1))]
    assert v.verdict == "watchdog_missed"
    # what ended before the window is context, not judged
    assert v.counts["completed"] < 14


def test_the_last_ingest_is_the_default_window(log: Log) -> None:
    """Two incidents in one file: the first ingest's silent pin is not today's answer."""
    pinned_request(log, at=30)
    traffic(log, 10, 300)
    log.con.execute("UPDATE ingests SET stored = 1")
    log.con.execute(
        "INSERT INTO ingests (ingest_id, sources, stored, status) VALUES (2, 'hand-built', 1, 'complete')"
    )
    first = log.n
    traffic(log, 3 * 3600, 3 * 3600 + 300, first=9000)
    log.con.execute("UPDATE lines SET ingest_id = 2 WHERE line_id > ?", [first])
    v = log.verdict()
    assert v.verdict == "nothing_stuck", v.reasons
    assert v.window_start_us >= T0 + 3 * 3600 * S
    assert v.to_json()["window_basis"] == "last ingest"
    assert any("the last ingest's (run 2)" in r for r in v.reasons)
    assert log.verdict(since_us=T0).verdict == "watchdog_missed"  # asked for: the whole file


# ------------------------------------------------------------------ engine deaths


def test_a_prefill_that_dies_and_does_not_come_back(log: Log) -> None:
    traffic(log, 10, 100)
    pinned_request(log, at=100)
    log.add(
        120, PREFILL, "engine_died", "Caught signal 11 (Segmentation fault: address not mapped to object)"
    )
    log.add(
        121,
        INIT_PREFILL,
        "unit_killed",
        "sglang-prefill.service: Main process exited, code=killed, status=11/SEGV",
    )
    for t in range(130, 400, 10):
        log.add(t, DECODE, "decode_stats", "Decode batch, #running-req: 0", running_req=0)
    v = log.verdict()
    reqs = {r["bootstrap_room"]: r for r in v.requests}
    assert reqs[str(room(1))]["class"] == "lost"
    assert v.verdict == "inconclusive"
    assert any("died at" in r and "was not seen again" in r for r in v.reasons)
    classes_add_up(v)
