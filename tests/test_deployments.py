"""Identity is (deployment, room) (issue 26, item 4; design.md, "Same request").

Two deployments that number rooms alike (two routers, one file or one journal-remote directory):
the same room is two requests. Each prefill's request is judged by its own lines; a decode side
goes with the prefill its Receive: names (address, and a Receive: within 30 s of the prefill's);
where nothing tells which, it is paired only when every way reads the same, and otherwise no
request is completed by a guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verdict_helpers import DECODE, PREFILL, Log, room

from pdforensics import verdict

P2 = {
    "host": "gpu-c",
    "unit": "sglang-prefill.service",
    "engine": "prefill",
    "pid": 3300,
    "invocation_id": "inv-c1",
}
D2 = {
    "host": "gpu-d",
    "unit": "sglang-decode.service",
    "engine": "decode",
    "pid": 4400,
    "invocation_id": "inv-d2",
}
R = room(7)


def receive(log: Log, t: float, who: dict, r: int, rid: str, address: str) -> None:
    log.add(t, who, "request_received", f"Receive: obj=GenerateReqInput(rid='{rid}', bootstrap_room={r})",
            rid=rid, bootstrap_room=r, bootstrap_host=address)  # fmt: skip


def leg(log: Log, t: float, p: dict, d: dict, rid: str, address: str, *, finished: bool) -> None:
    """Both legs of one deployment's request for room R; finished on both sides, or pinned in the prefill."""
    receive(log, t, p, R, f"p-{rid}", address)
    receive(log, t + 0.001, d, R, f"d-{rid}", address)
    if finished:
        log.finish(t + 0.5, p, R, f"p-{rid}").finish(t + 3, d, R, f"d-{rid}")


def observed(log: Log, pinned_on: list[dict]) -> None:
    """Each prefill logs a batch line every 10 s to t=300; the pinned room stays in its queue."""
    for who in (PREFILL, P2):
        for k in range(1, 30):
            n = 2 if who in pinned_on else 1
            log.add(k * 10 + 0.1, who, "prefill_stats", f"Prefill batch, #new-seq: 1, #inflight-req: {n}",
                    new_seq=1, inflight_req=n, queue_req=0, bootstrap_req=0, tp_rank=0, entry="prefill_batch_0518")  # fmt: skip


def rows_of(log: Log) -> dict[str | None, dict[str, Any]]:
    """Room R's rows by deployment (`Log.requests` keys by room: one row per room)."""
    log.install()
    verdict.apply_options(log.con, verdict.VerdictOptions(watchdog_timeout_s=60))
    with verdict.materialised(log.con):
        cur = log.con.execute("SELECT * FROM requests WHERE bootstrap_room = ?", [R])
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    return {r["deployment"]: r for r in rows}


def test_two_deployments_one_address_pinned_in_one_is_never_completed(tmp_path: Path) -> None:
    """One room, two deployments on the same private addresses, at the same moment: one pins it,
    the other completes it. Neither decode side can be placed, so the pin stays a pin (its own
    prefill's lines decide it) and the other is undecided, not completed by the pin's decode."""
    log = Log(tmp_path / "db.duckdb")
    leg(log, 5, PREFILL, DECODE, "a", "10.0.0.5", finished=False)
    leg(log, 5, P2, D2, "b", "10.0.0.5", finished=True)
    observed(log, pinned_on=[PREFILL])
    rows = rows_of(log)
    assert rows["prefill gpu-a"]["class"] == "silent_pin"
    assert rows["prefill gpu-a"]["prefill_rid"] == "p-a"
    other = rows["prefill gpu-c"]
    assert other["class"] == "undecided" and other["decode_unpaired"]
    assert "no decode line says which" in other["undecided_reason"]
    # the decode sides placed nowhere are requests of their own, none completed by elimination
    assert {"decode gpu-b", "decode gpu-d"} <= set(rows)
    assert all(rows[k]["class"] != "completed" for k in ("decode gpu-b", "decode gpu-d"))
    v = log.verdict()
    assert v.verdict == "watchdog_missed"
    assert any("no decode line says which" in r for r in v.to_json()["reasons"])
    log.close()


def test_addresses_tell_two_deployments_apart(tmp_path: Path) -> None:
    log = Log(tmp_path / "db.duckdb")
    leg(log, 5, PREFILL, DECODE, "a", "10.0.0.1", finished=False)
    leg(log, 5, P2, D2, "b", "10.0.0.3", finished=True)
    observed(log, pinned_on=[PREFILL])
    rows = rows_of(log)
    assert set(rows) == {"prefill gpu-a", "prefill gpu-c"}
    assert (rows["prefill gpu-a"]["class"], rows["prefill gpu-a"]["decode_rid"]) == ("silent_pin", "d-a")
    assert (rows["prefill gpu-c"]["class"], rows["prefill gpu-c"]["decode_rid"]) == ("completed", "d-b")
    log.close()


def test_time_tells_two_deployments_apart(tmp_path: Path) -> None:
    """Same addresses, the second deployment's request 100 s later: a decode Receive: is within
    seconds of its prefill's, so each decode side has one prefill it can be."""
    log = Log(tmp_path / "db.duckdb")
    leg(log, 5, PREFILL, DECODE, "a", "10.0.0.5", finished=False)
    leg(log, 105, P2, D2, "b", "10.0.0.5", finished=True)
    observed(log, pinned_on=[PREFILL])
    rows = rows_of(log)
    assert set(rows) == {"prefill gpu-a", "prefill gpu-c"}
    assert rows["prefill gpu-a"]["class"] == "silent_pin"
    assert (rows["prefill gpu-c"]["class"], rows["prefill gpu-c"]["d_host"]) == ("completed", "gpu-d")
    log.close()


def test_every_pairing_the_same_is_completed_without_naming_a_decode_side(tmp_path: Path) -> None:
    """Both deployments completed the room at once: whichever way the decode sides pair, both
    requests completed, and neither row claims one decode rid as its own."""
    log = Log(tmp_path / "db.duckdb")
    leg(log, 5, PREFILL, DECODE, "a", "10.0.0.5", finished=True)
    leg(log, 5, P2, D2, "b", "10.0.0.5", finished=True)
    observed(log, pinned_on=[])
    rows = rows_of(log)
    assert set(rows) == {"prefill gpu-a", "prefill gpu-c"}
    for row in rows.values():
        assert row["class"] == "completed" and not row["decode_unpaired"]
        assert row["decode_rid"] is None and row["d_host"] is None
    assert log.verdict().verdict == "nothing_stuck"
    log.close()


def test_one_deployment_keeps_one_row_per_room(tmp_path: Path) -> None:
    """The usual case: a room one prefill and one decode logged is one request, deployment NULL."""
    log = Log(tmp_path / "db.duckdb")
    leg(log, 5, PREFILL, DECODE, "a", "10.0.0.5", finished=True)
    observed(log, pinned_on=[])
    rows = rows_of(log)
    assert set(rows) == {None} and rows[None]["class"] == "completed"
    log.close()


def test_another_deployments_decode_restart_ends_no_request_of_this_one(tmp_path: Path) -> None:
    """The same room at the same moment in two deployments on one address, as above; gpu-a's decode
    (gpu-b) is then restarted, killed while it still holds its side. gpu-c's prefill finished its
    request and no decode line says which side is its own: it is `undecided`, not `lost` by a
    restart of a decode that may be the other deployment's."""
    log = Log(tmp_path / "db.duckdb")
    leg(log, 5, PREFILL, DECODE, "a", "10.0.0.5", finished=False)
    leg(log, 5, P2, D2, "b", "10.0.0.5", finished=True)
    log.add(30, DECODE, "sigterm", "SIGTERM received. signum=None frame=None. Draining requests...")
    log.add(50, DECODE, None, "Gracefully exiting... Remaining number of requests 1.")
    log.add(80, {**DECODE, "pid": 2201, "invocation_id": "inv-d1b"}, "server_ready",
            "The server is fired up and ready to roll!")  # fmt: skip
    observed(log, pinned_on=[PREFILL])
    rows = rows_of(log)
    assert rows["prefill gpu-a"]["class"] == "silent_pin"
    other = rows["prefill gpu-c"]
    assert other["decode_unpaired"] and (other["class"], other["lost_reason"]) == ("undecided", None)
    log.close()


def test_rooms_two_deployments_share_place_no_clock(tmp_path: Path) -> None:
    """Both deployments number their rooms alike; the second's decode received each room 50 s
    before the first's, and its prefill's journal is missing. A room's Receive: lines on two decode
    hosts are not one simultaneous pair with the prefill's, so they place no clock (before: the
    earliest Receive: of the room, the other deployment's, put gpu-b's clock 50 s off, and every
    time on it with it)."""
    log = Log(tmp_path / "db.duckdb")
    for k in range(5):
        r = room(100 + k)
        receive(log, 60 + 20 * k, PREFILL, r, f"pa{k}", "10.0.0.5")
        receive(log, 60 + 20 * k + 0.001, DECODE, r, f"da{k}", "10.0.0.5")
        receive(log, 10 + 20 * k, D2, r, f"db{k}", "10.0.0.5")
    log.install()
    verdict.apply_options(log.con, verdict.VerdictOptions(watchdog_timeout_s=60))
    offsets = dict(log.con.execute("SELECT host, offset_us FROM host_offsets").fetchall())
    assert all(abs(v) < 1_000_000 for v in offsets.values()), offsets
    log.close()


def test_each_instance_places_a_shared_room_as_the_whole_file_does(tmp_path: Path) -> None:
    """As the first case, with gpu-a's decode lines missing (its journal not collected): the one
    decode side left (gpu-d's) fits both prefills. gpu-c's own judgement sees only its prefill's
    lines, so without the other prefill's side of the room it would pair gpu-d with gpu-c by
    elimination and call gpu-c `nothing_stuck`; it judges the room as the whole file does."""
    log = Log(tmp_path / "db.duckdb")
    receive(log, 5, PREFILL, R, "p-a", "10.0.0.5")
    leg(log, 5, P2, D2, "b", "10.0.0.5", finished=True)
    observed(log, pinned_on=[PREFILL])
    rows = rows_of(log)
    assert (rows["prefill gpu-c"]["class"], rows["prefill gpu-c"]["decode_unpaired"]) == ("undecided", True)
    instances = {i["host"]: i for i in log.verdict().to_json()["instances"]}
    assert instances["gpu-a"]["verdict"] == "watchdog_missed"
    assert instances["gpu-c"]["verdict"] == "inconclusive"
    assert any("no decode line says which" in r for r in instances["gpu-c"]["reasons"])
    log.close()


def test_more_decode_sides_than_prefills_are_never_pooled_into_one(tmp_path: Path) -> None:
    """Both deployments completed the room at once, and gpu-c's prefill lines are missing (a hole,
    a file not collected): two finished decode sides, one prefill. A side beyond the prefills seen
    is another prefill's request, so which one is gpu-a's is not known: gpu-a's request is not
    completed by pooling both sides into it."""
    log = Log(tmp_path / "db.duckdb")
    leg(log, 5, PREFILL, DECODE, "a", "10.0.0.5", finished=True)
    receive(log, 5.001, D2, R, "d-b", "10.0.0.5")
    log.finish(8, D2, R, "d-b")
    observed(log, pinned_on=[])
    rows = rows_of(log)
    assert (rows["prefill gpu-a"]["class"], rows["prefill gpu-a"]["decode_unpaired"]) == ("undecided", True)
    assert {"decode gpu-b", "decode gpu-d"} <= set(rows)
    log.close()
