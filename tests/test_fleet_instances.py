"""Fleets: each prefill instance judged on its own lines, the window's verdict the worst of them.

Hand-built databases (tests/verdict_helpers.py) with two prefill hosts and one decode: which
requests, holes and watchdog evidence each instance's judgement sees is stated line by line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from verdict_helpers import DECODE, PREFILL, Log, S, room

A = PREFILL  # gpu-a, named by the router as 10.0.0.1
C = {
    "host": "gpu-c",
    "unit": "sglang-prefill.service",
    "engine": "prefill",
    "pid": 3300,
    "invocation_id": "inv-c1",
}
ADDRESS = {"gpu-a": "10.0.0.1", "gpu-c": "10.0.0.3"}


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log(tmp_path / "fleet.duckdb")


def receive(log: Log, t: float, who: dict, r: int, rid: str, via: str) -> None:
    """A Receive: line naming the prefill the router sent the request to (`via`)."""
    log.add(t, who, "request_received", f"Receive: obj=GenerateReqInput(rid='{rid}', bootstrap_room={r})",
            rid=rid, bootstrap_room=r, bootstrap_host=ADDRESS[via])  # fmt: skip


def completed(log: Log, t: float, r: int, p: dict, d: dict = DECODE, skew: float = 0.0) -> None:
    """Both legs, the decode's on a clock `skew` seconds ahead."""
    receive(log, t, p, r, f"p{r}", p["host"])
    receive(log, t + 0.001 + skew, d, r, f"d{r}", p["host"])
    log.finish(t + 0.5, p, r, f"p{r}").finish(t + 3 + skew, d, r, f"d{r}")


def pinned(log: Log, t: float, r: int, p: dict, rid: str = "") -> None:
    """Both legs received; the prefill never lets go (its batch lines count it, see batches)."""
    receive(log, t, p, r, f"p{r}{rid}", p["host"])
    receive(log, t + 0.001, DECODE, r, f"d{r}{rid}", p["host"])


def batches(log: Log, who: dict, held: list[tuple[float, float | None]], until: float = 400) -> None:
    """A batch line every 10 s; `held`: (from, until) of the requests its inflight queue holds."""
    for k in range(1, int(until // 10)):
        t = k * 10 + (0.2 if who is C else 0.1)
        n = sum(1 for a, b in held if a < t and (b is None or t < b))
        log.add(t, who, "prefill_stats", f"Prefill batch, #new-seq: 1, #inflight-req: {n + 1}", new_seq=1,
                inflight_req=n + 1, queue_req=0, bootstrap_req=0, tp_rank=0, entry="prefill_batch_0518")  # fmt: skip
        if who is A:
            log.add(
                t + 0.3, DECODE, "decode_stats", "Decode batch, #running-req: 1", running_req=1, tp_rank=0
            )


def traffic(log: Log, who: dict, first: int, every: float = 20, until: float = 380) -> None:
    t, n = 5.0, 0
    while t < until:
        completed(log, t, room(first + n), who)
        t, n = t + every, n + 1


def healthy_and_pinned(log: Log) -> None:
    traffic(log, A, 100)
    traffic(log, C, 500)
    pinned(log, 50, room(1), C)
    batches(log, A, [])
    batches(log, C, [(50, None)])


def test_each_prefill_is_judged_on_its_own_requests(log: Log) -> None:
    healthy_and_pinned(log)
    v = log.verdict()
    assert v.verdict == "watchdog_missed"
    got = {i["host"]: i for i in v.instances}
    assert [i["host"] for i in v.instances] == ["gpu-c", "gpu-a"]  # worst first
    assert got["gpu-c"]["verdict"] == "watchdog_missed" and got["gpu-c"]["counts"]["silent_pin"] == 1
    assert got["gpu-a"]["verdict"] == "nothing_stuck" and got["gpu-a"]["counts"]["silent_pin"] == 0
    # every request is one instance's: the instances' requests add up to the whole window's
    assert got["gpu-a"]["counts"]["requests"] + got["gpu-c"]["counts"]["requests"] == v.counts["requests"]
    assert v.reasons[1].startswith(
        "2 prefill instances, the verdict is the worst: watchdog_missed on 1 (gpu-c)"
    )


def test_the_worst_instance_decides_when_the_whole_window_would_not(log: Log) -> None:
    """gpu-c's prefill goes silent for the rest of the window while holding a request: gpu-c
    cannot be judged, even though gpu-a's queue, observed throughout, was empty."""
    traffic(log, A, 100)
    completed(log, 5, room(500), C)
    pinned(log, 30, room(2), C)
    batches(log, A, [])
    batches(log, C, [(30, None)], until=60)
    v = log.verdict()
    got = {i["host"]: i["verdict"] for i in v.instances}
    assert got == {"gpu-c": "inconclusive", "gpu-a": "nothing_stuck"}
    assert v.verdict == "inconclusive"
    assert v.instances[0]["host"] == "gpu-c"


def test_a_room_on_two_prefills_is_joined_to_the_pair_its_lines_name(log: Log) -> None:
    """A custom router reused room 7 on both prefills: gpu-a's request completed, gpu-c's was
    pinned. The decode's legs name their prefill by address; neither instance sees the other's."""
    healthy_and_pinned(log)
    completed(log, 40, room(7), A)
    pinned(log, 41, room(7), C, rid="-again")  # each leg its own rid, as SGLang makes them
    v = log.verdict()
    got = {i["host"]: i for i in v.instances}
    assert got["gpu-c"]["counts"]["silent_pin"] == 2  # room 1 and its own leg of room 7
    assert got["gpu-a"]["verdict"] == "nothing_stuck"
    assert got["gpu-a"]["counts"]["silent_pin"] == 0


def test_each_instance_has_its_own_watchdog_evidence(log: Log) -> None:
    """gpu-a runs the watchdog build (armed at 60 s); gpu-c started without the armed line (a
    stock build): gpu-c is held to the fleet's 60 s and its pin is a miss, not gpu-a's."""
    log.add(
        1,
        A,
        "watchdog_armed",
        "inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s",
        timeout_s=60.0,
    )
    log.add(1, C, "server_ready", "The server is fired up and ready to roll!")
    healthy_and_pinned(log)
    v = log.verdict(timeout=None)
    got = {i["host"]: i["watchdog"] for i in v.instances}
    assert (got["gpu-a"]["deployed"], got["gpu-a"]["timeout_s"], got["gpu-a"]["timeout_source"]) == (
        True, 60.0, "armed line")  # fmt: skip
    assert got["gpu-c"]["deployed"] is False
    assert got["gpu-c"]["timeout_s"] == 60.0
    assert got["gpu-c"]["timeout_source"] == "fleet: armed line elsewhere in the fleet"
    assert {i["host"]: i["verdict"] for i in v.instances} == {
        "gpu-c": "watchdog_missed",
        "gpu-a": "nothing_stuck",
    }
    assert v.reasons[1].endswith("; the watchdog deployed on 1 (gpu-a); not deployed on 1 (gpu-c)")


def test_a_decode_request_no_prefill_claims_is_judged_in_the_whole_window_only(log: Log) -> None:
    healthy_and_pinned(log)
    log.add(100, DECODE, "request_received", "Receive: obj=GenerateReqInput(rid='dx', bootstrap_room=99)",
            rid="dx", bootstrap_room=room(99), bootstrap_host="10.9.9.9")  # fmt: skip
    v = log.verdict()
    got = {i["host"]: i for i in v.instances}
    assert got["gpu-a"]["counts"]["requests"] + got["gpu-c"]["counts"]["requests"] == v.counts["requests"] - 1


def test_one_prefill_is_one_instance_with_the_window_verdict(log: Log) -> None:
    traffic(log, A, 100)
    batches(log, A, [])
    v = log.verdict()
    assert [(i["host"], i["verdict"]) for i in v.instances] == [("gpu-a", v.verdict)]
    assert v.instances[0]["counts"] == v.counts
    assert v.to_json()["instances"] == v.instances


def test_a_decode_the_reference_prefill_never_sent_to_is_placed_through_another_prefill(log: Log) -> None:
    """gpu-a (the busiest prefill: the reference clock) sends only to gpu-b; gpu-c sends to gpu-b
    and to gpu-d, whose clock runs 5 s ahead: gpu-d is placed through gpu-c, not assumed at 0."""
    d2 = {
        "host": "gpu-d",
        "unit": "sglang-decode.service",
        "engine": "decode",
        "pid": 4400,
        "invocation_id": "inv-d2",
    }
    traffic(log, A, 100, every=10)
    traffic(log, C, 500)
    t = 7.0
    for n in range(15):
        completed(log, t, room(900 + n), C, d2, skew=5.0)
        t += 20
    batches(log, A, [])
    batches(log, C, [])
    v = log.verdict()
    by_host = {o["host"]: o for o in v.host_offsets}
    assert by_host["gpu-a"]["method"] == "reference"
    assert by_host["gpu-c"]["method"] == "receive pairs via decode"
    assert by_host["gpu-d"]["method"] == "receive pairs via prefill"
    assert abs(by_host["gpu-d"]["offset_us"] - 5 * S) < 10_000
    assert v.verdict == "nothing_stuck"


def test_the_terminal_lists_the_instances_worst_first(log: Log) -> None:
    from pdforensics.verdict import render_text

    healthy_and_pinned(log)
    text = render_text(log.verdict())
    head, _, rest = text.partition("prefill instances (2, worst first):\n")
    assert head.startswith("verdict: watchdog_missed")
    lines = rest.splitlines()
    assert lines[0].split()[:2] == ["gpu-c", "watchdog_missed"] and "1 silent pin" in lines[0]
    assert lines[1].split()[:2] == ["gpu-a", "nothing_stuck"]


def decode_transfer_queue(log: Log, frozen_from: float) -> None:
    """gpu-a's batch lines, each with a decode batch line whose #transfer-req is 1 from `frozen_from`."""
    for k in range(1, 40):
        t = k * 10 + 0.1
        log.add(t, A, "prefill_stats", "Prefill batch, #new-seq: 1, #inflight-req: 1", new_seq=1, inflight_req=1,
                queue_req=0, bootstrap_req=0, tp_rank=0, entry="prefill_batch_0518")  # fmt: skip
        log.add(t + 0.3, DECODE, "decode_stats", "Decode batch, #transfer-req: 1", running_req=1,
                transfer_req=int(t > frozen_from), prealloc_req=0, tp_rank=0)  # fmt: skip


def test_a_decode_queue_another_instance_explains_is_not_charged_to_this_one(log: Log) -> None:
    """The decode's transfer queue stays at 1 from 52 s: gpu-c's pinned request sits in it, and
    the whole window names it. gpu-a's scope does not see that request, but the queue is not
    gpu-a's to answer for (issue 26, item 5): gpu-a is nothing_stuck, gpu-c watchdog_missed."""
    traffic(log, A, 100)
    traffic(log, C, 500)
    pinned(log, 50, room(1), C)
    batches(log, C, [(50, None)])
    decode_transfer_queue(log, 52)
    v = log.verdict()
    assert {i["host"]: i["verdict"] for i in v.instances} == {
        "gpu-c": "watchdog_missed",
        "gpu-a": "nothing_stuck",
    }
    assert v.stuck_elsewhere == []


def test_a_decode_queue_nothing_explains_is_charged_to_every_instance(log: Log) -> None:
    """The same queue frozen with no request any line names in it: stuck where no one can say
    whose, so no instance that sends to that decode is healthy."""
    traffic(log, A, 100)
    traffic(log, C, 500)
    batches(log, C, [])
    decode_transfer_queue(log, 52)
    v = log.verdict()
    assert v.stuck_elsewhere and all(i["verdict"] == "inconclusive" for i in v.instances)
