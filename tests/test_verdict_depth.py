"""Verdict depth: did it recover, was it backpressure, stuck where (hand-built databases).

Timeout 60 s, grace 10 s. A firing is the watchdog's line on TP0 plus the failure line naming it.
"""

from __future__ import annotations

from pathlib import Path

from pdforensics.render import check_code
from tests.test_classification import traffic
from tests.verdict_helpers import DECODE, PREFILL, Log, room


def fired(log: Log, r: int, at: float, dwell: float = 60.4) -> None:
    """A request received at `at - dwell` on both engines, released by the watchdog at `at`."""
    log.receive(at - dwell, PREFILL, r, f"p{r}").receive(at - dwell, DECODE, r, f"d{r}")
    log.add(at, {**PREFILL}, "watchdog_fired", f"inflight watchdog: req.rid='p{r}' req.bootstrap_room={r} stalled >60s",
            rid=f"p{r}", bootstrap_room=r, state="KVPoll.Transferring", dwell_s=dwell, timeout_s=60.0, tp_rank=0)  # fmt: skip


def decode_load(log: Log, t: float, usage: float, prealloc: int = 0, transfer: int = 0) -> None:
    log.add(t, DECODE, "decode_stats", "Decode batch", running_req=8, token_usage=usage, prealloc_req=prealloc,
            transfer_req=transfer)  # fmt: skip


def test_fired_then_drained(log: Log) -> None:
    traffic(log, 10, 100)
    fired(log, room(1), at=130)
    traffic(log, 140, 300, first=2000)  # the floor is back to 0 and requests complete on the path
    v = log.verdict()
    assert v.verdict == "watchdog_fired"
    assert v.recovery == "drained" and v.to_json()["watchdog"]["recovery"] == "drained"
    assert any(r.startswith("recovered: after the last firing") for r in v.reasons)
    assert check_code(v) == 1


def test_fired_on_every_new_request_is_wedged(log: Log) -> None:
    """A stuck transfer worker: every room to that decode fires, nothing completes after the first."""
    traffic(log, 10, 60)
    for i in range(5):
        fired(log, room(10 + i), at=100 + i * 30)
        log.batch(100 + i * 30 + 0.5, inflight=1)
    v = log.verdict()
    assert v.verdict == "watchdog_fired"
    assert v.recovery == "wedged"
    assert v.reasons[0].startswith("the watchdog force-failed 5 request(s)")
    assert any(r.startswith("not recovered: the watchdog fired 5 time(s)") for r in v.reasons)
    assert check_code(v) == 2  # critical, though every stuck request was released


def test_nothing_fired_has_no_recovery(log: Log) -> None:
    traffic(log, 10, 300)
    v = log.verdict()
    assert v.recovery is None and v.to_json()["watchdog"]["recovery"] is None


def test_a_firing_on_a_saturated_decode_is_likely_backpressure(log: Log) -> None:
    traffic(log, 10, 100)
    decode_load(log, 125, usage=0.97, prealloc=6)
    fired(log, room(1), at=130)
    decode_load(log, 135, usage=0.97, prealloc=6)
    fired(log, room(2), at=200)  # the decode idle at this one: a dead peer, not backpressure
    decode_load(log, 198, usage=0.02)
    traffic(log, 210, 350, first=3000)
    doc = log.verdict().to_json()
    by_room = {r["bootstrap_room"]: r for r in doc["requests"]}
    assert by_room[str(room(1))]["backpressure"] is True
    assert by_room[str(room(2))]["backpressure"] is False
    firing = next(f for f in doc["watchdog"]["firings"] if f["bootstrap_room"] == str(room(1)))
    assert (firing["decode_token_usage"], firing["decode_prealloc_req"]) == (0.97, 6)
    assert any(
        "1 firing(s) fired while decode was saturated: likely backpressure" in r for r in doc["reasons"]
    )


def test_a_frozen_decode_transfer_queue_is_stuck_outside_the_watchdog(log: Log) -> None:
    """The prefill inflight queue empties, the decode's #transfer-req stays at 2: not nothing_stuck."""
    traffic(log, 10, 300)
    for t in range(100, 300, 10):
        log.add(t, DECODE, "decode_stats", "Decode batch, #transfer-req: 2", running_req=1, transfer_req=2)
    v = log.verdict()
    assert v.verdict == "inconclusive"
    assert v.reasons[0].startswith("stuck outside the watchdog's queue: decode on gpu-b")
    assert v.stuck_elsewhere and v.stuck_elsewhere[0]["queue"] == "transfer"
    assert check_code(v) == 2


def test_a_saturated_queue_that_moves_is_not_frozen(log: Log) -> None:
    traffic(log, 10, 300)
    for i, t in enumerate(range(100, 300, 10)):
        log.add(t, DECODE, "decode_stats", "Decode batch", running_req=1, transfer_req=2 + i % 3)
    v = log.verdict()
    assert v.verdict == "nothing_stuck" and v.stuck_elsewhere == []


def test_a_rebootstrap_leg_is_judged_on_its_own(log: Log) -> None:
    """DeepSeek-V4 rebootstrap: the decode sends the room to the prefill again with its own rid.
    The first leg's Finish must not close the second, which here never ends: a silent pin."""
    r = room(1)
    log.receive(30, PREFILL, r, "p1").receive(30, DECODE, r, "d1").finish(31, PREFILL, r, "p1")
    log.receive(60, PREFILL, r, "d1")  # the rebootstrap leg: the decode's rid, the same room
    log.batch(60.5, inflight=1)
    log.pinned.append((60.5, None))  # every later batch's floor counts it
    traffic(log, 10, 300)
    log.batch(300, inflight=1)
    reqs = log.requests()
    assert reqs[r]["legs"] == 3 and reqs[r]["class"] == "silent_pin"
    assert reqs[r]["prefill_received_t"] < reqs[r]["pinned_from_t"]  # timed from the open leg
    doc = log.verdict().to_json()
    assert doc["verdict"] == "watchdog_missed"
    assert next(x for x in doc["requests"] if x["bootstrap_room"] == str(r))["legs"] == 3


def test_one_leg_per_side_is_two(log: Log) -> None:
    traffic(log, 10, 100)
    assert {x["legs"] for x in log.requests().values()} == {2}


def test_the_report_banner_says_whether_it_recovered(log: Log, tmp_path: Path) -> None:
    from pdforensics.report import write_report
    from pdforensics.verdict import VerdictOptions

    traffic(log, 10, 60)
    for i in range(5):
        fired(log, room(10 + i), at=100 + i * 30)
        log.batch(100 + i * 30 + 0.5, inflight=1)
    log.install()
    page = write_report(log.con, tmp_path / "r.html", VerdictOptions(watchdog_timeout_s=60)).read_text()
    assert 'id="recovery">Not recovered: the watchdog kept firing' in page
    assert "decode saturated" in page  # the firings table's backpressure column
