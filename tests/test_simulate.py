"""The incident simulator: determinism, real journals, committed fixtures, ground truth, layouts.

The checks on log text use plain regexes over the written files, never pdforensics' parser.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pdforensics.errors import UsageError
from pdforensics.paths import fixtures_dir
from pdforensics.simulate import SCENARIOS, simulate, simulate_plain
from pdforensics.simulate.__main__ import main as cli_main
from pdforensics.simulate.__main__ import parse_now
from tests.conftest import have_journalctl

NOW = parse_now("2026-11-29T12:10:00Z")
NAMES = list(SCENARIOS)
CLASSES = {
    "watchdog_fired",
    "silent_pin",
    "undecided",
    "transfer_failed",
    "aborted",
    "lost",
    "completed",
    "in_flight",
}
OPTIONAL_KEYS = {
    "verdict_options", "ingests", "by_input", "recovery", "stuck_elsewhere", "request_details", "instances", "pairs",
}  # fmt: skip
DETAIL_KEYS = {"backpressure", "legs", "reason_startswith", "firing_state"}
VERDICTS = {"watchdog_missed", "watchdog_fired", "nothing_stuck", "inconclusive"}
TOP_KEYS = {
    "scenario",
    "description",
    "window",
    "watchdog",
    "evidence_level",
    "verdict",
    "reasons_contain",
    "anonymous_pins",
    "hosts",
    "requests",
}
REQ_KEYS = [
    "bootstrap_room",
    "prefill_rid",
    "decode_rid",
    "class",
    "abort_race",
    "across_restart",
    "one_sided",
]
PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)((?: (?:DP|TP|EP)\d+)*)\] ")


def fixture(name: str) -> Path:
    return fixtures_dir() / name


def entries(name: str) -> list[dict]:
    return [json.loads(line) for line in fixture(name).joinpath("journal.json").read_text().splitlines()]


def message(e: dict) -> str:
    m = e["MESSAGE"]
    return bytes(m).decode("utf-8", "replace") if isinstance(m, list) else m


def expected(name: str) -> dict:
    return json.loads(fixture(name).joinpath("expected.json").read_text())


def unit_lines(name: str, role: str, host: str | None = None) -> list[tuple[int, str]]:
    """(journal µs, MESSAGE) of one engine's own entries (systemd and journald lines excluded); with
    ``host``, of that host's instance only (a fleet has several)."""
    return [
        (int(e["__REALTIME_TIMESTAMP"]), message(e))
        for e in entries(name)
        if e.get("_SYSTEMD_UNIT", "").endswith(f"-{role}.service") and host in (None, e["_HOSTNAME"])
    ]


def row_keys(doc: dict) -> list[str]:
    """A request row's keys, in order: `deployment` after the room where two deployments share rooms."""
    shared = any("deployment" in r for r in doc["requests"])
    return REQ_KEYS[:1] + ["deployment"] * shared + REQ_KEYS[1:]


def is_prefill(e: dict) -> bool:
    return e.get("_SYSTEMD_UNIT", "").endswith("-prefill.service")


def floors(name: str, host: str | None = None) -> list[tuple[int, int]]:
    """(journal µs, requests in the inflight queue that are not this batch) of every prefill stats line.

    From 0.5.10 the line is printed after the forward and counts the batch (floor = #inflight-req
    - #new-seq); 0.5.3 (``Prefill batch.``) printed it before the forward (floor = #inflight-req).
    """
    out = []
    for ts, msg in unit_lines(name, "prefill", host):
        m = re.search(r"Prefill batch([.,]) #new-seq: (\d+),.*#inflight-req: (\d+)", msg)
        if m:
            before = m.group(1) == "."
            out.append((ts, int(m.group(3)) - (0 if before else int(m.group(2)))))
    return out


# ---- API and determinism -------------------------------------------------------------------


def test_scenarios_have_descriptions():
    assert len(NAMES) >= 10
    for required in (
        "healthy",
        "decode_restart_old_build",
        "decode_restart_watchdog_fires",
        "watchdog_armed_never_fires",
        "abort_storm_clean",
        "abort_storm_pins",
        "short_window",
        "journald_suppression",
        "l0_anonymous_pins",
        "multihost_skew",
        "prefill_goes_silent",
        "hole_hides_firing",
        "decode_only_export",
        "non_pd_prefill_name",
        "window_starts_after_armed",
        "prefill_dies_no_restart",
        "prefill_dies_scheduler_watchdog",
        "two_incidents",
        "wedge_after_decode_restart",
        "fired_under_saturation_then_drains",
        "upstream_bootstrap_timeout_with_watchdog",
        "slime_dialect",
        "frozen_decode_transfer_queue",
        "rebootstrap_leg",
        "log_level_change_mid_window",
    ):
        assert len(SCENARIOS[required].description) > 40


def test_same_seed_and_now_give_identical_bytes(tmp_path):
    a = simulate("abort_storm_pins", tmp_path / "a", now_us=NOW, seed=3)
    b = simulate("abort_storm_pins", tmp_path / "b", now_us=NOW, seed=3)
    c = simulate("abort_storm_pins", tmp_path / "c", now_us=NOW, seed=4)
    for f in ("journal.export", "journal.json", "expected.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes()
    assert (a / "journal.json").read_bytes() != (c / "journal.json").read_bytes()


def test_window_follows_now(tmp_path):
    now = NOW + 3_600_000_000
    out = simulate("short_window", tmp_path / "s", now_us=now)
    doc = json.loads((out / "expected.json").read_text())
    assert now - 45_000_000 < doc["window"]["since_us"] < doc["window"]["until_us"] <= now + 3_000_000


def test_unknown_scenario_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="unknown scenario"):
        simulate("no_such_thing", tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_committed_fixtures_equal_a_fresh_regeneration(name, tmp_path):
    out = simulate(name, tmp_path / name, now_us=NOW)
    simulate_plain(name, out, now_us=NOW)
    fresh = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    committed = {
        p.relative_to(fixture(name)): p.read_bytes() for p in fixture(name).rglob("*") if p.is_file()
    }
    assert sorted(fresh) == sorted(committed)
    for rel, data in fresh.items():
        assert data == committed[rel], f"{name}/{rel} drifted: regenerate (fixtures/README.md)"


def test_cli_writes_a_scenario(tmp_path, capsys):
    assert cli_main(["healthy", "--out", str(tmp_path / "h"), "--now", "2026-11-29T12:10:00Z"]) == 0
    assert (tmp_path / "h" / "journal.export").read_bytes() == fixture("healthy").joinpath(
        "journal.export"
    ).read_bytes()
    assert cli_main(["--list"]) == 0
    assert "journald_suppression" in capsys.readouterr().out
    assert cli_main(["healthy"]) == 2  # no --out


# ---- journal form ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_export_becomes_a_real_journal(name, make_journal):
    if not have_journalctl():
        pytest.skip("journalctl is not installed")
    journal = make_journal(fixture(name).joinpath("journal.export").read_bytes(), f"{name}.journal")
    out = subprocess.run(
        ["journalctl", "--file", str(journal), "-o", "json", "--all", "--no-pager"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    back = [json.loads(line) for line in out.splitlines()]
    ours = entries(name)
    assert len(back) == len(ours)
    key = lambda e: (e["__REALTIME_TIMESTAMP"], e["_HOSTNAME"], json.dumps(e["MESSAGE"]))  # noqa: E731
    assert Counter(map(key, back)) == Counter(map(key, ours))
    assert {e["_BOOT_ID"] for e in back} == {e["_BOOT_ID"] for e in ours}


@pytest.mark.parametrize("name", NAMES)
def test_entries_are_in_time_order_with_per_host_clocks(name):
    ours = entries(name)
    ts = [int(e["__REALTIME_TIMESTAMP"]) for e in ours]
    assert ts == sorted(ts)
    by_host = defaultdict(list)
    for e in ours:
        by_host[e["_HOSTNAME"]].append(e)
    for host_entries in by_host.values():
        seq = [int(re.search(r";i=([0-9a-f]+);", e["__CURSOR"]).group(1), 16) for e in host_entries]
        assert seq == list(range(seq[0], seq[0] + len(seq)))  # one seqnum run per host
        mono = [int(e["__MONOTONIC_TIMESTAMP"]) for e in host_entries]
        assert mono == sorted(mono)
        assert len({e["__CURSOR"].split(";")[0] for e in host_entries}) == 1
    export = fixture(name).joinpath("journal.export").read_bytes()
    assert export.count(b"\n__CURSOR=") + 1 == len(ours)


def test_binary_messages_are_byte_arrays_and_binary_export_fields():
    ours = entries("healthy")
    binary = [bytes(e["MESSAGE"]) for e in ours if isinstance(e["MESSAGE"], list)]
    assert any(b"\x1b[33m" in b for b in binary)  # the ANSI-coloured library warning
    assert any(b"\xb0C" in b for b in binary)  # Latin-1 from another program: invalid UTF-8
    export = fixture("healthy").joinpath("journal.export").read_bytes()
    assert b"\nMESSAGE\n" in export  # binary-safe serialisation


def test_systemd_and_journald_lines_have_their_own_identity():
    ours = entries("decode_restart_old_build")
    pid1 = [e for e in ours if e.get("_SYSTEMD_UNIT") == "init.scope"]
    texts = [message(e) for e in pid1]
    assert all(e["_PID"] == "1" and e["SYSLOG_IDENTIFIER"] == "systemd" for e in pid1)
    assert {e["UNIT"] for e in pid1} >= {"sglang-dsv4-decode.service"}
    for needle in (
        "Stopping sglang-dsv4-decode.service",
        "State 'stop-sigterm' timed out. Killing.",
        "Main process exited, code=killed, status=9/KILL",
        "Stopped sglang-dsv4-decode.service",
        "Started sglang-dsv4-decode.service",
    ):
        assert any(needle in t for t in texts), needle
    decode = [
        e for e in ours if e.get("_SYSTEMD_UNIT") == "sglang-dsv4-decode.service" and e["_COMM"] == "python3"
    ]
    assert len({e["_PID"] for e in decode}) == 2  # started in the window, then restarted
    assert len({e["_SYSTEMD_INVOCATION_ID"] for e in decode}) == 2
    others = [e for e in ours if e.get("SYSLOG_IDENTIFIER") == "gpu-check.sh"]
    assert others and all(e["_COMM"] == "bash" for e in others)  # another program on the same unit
    sup = [e for e in entries("journald_suppression") if e.get("_SYSTEMD_UNIT") == "systemd-journald.service"]
    assert len(sup) == 1 and re.fullmatch(
        r"Suppressed \d+ messages from sglang-qwen3-prefill\.service", message(sup[0])
    )


# ---- expected.json ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_expected_has_the_documented_shape(name):
    doc = expected(name)
    sc = SCENARIOS[name]
    assert set(doc) - OPTIONAL_KEYS == TOP_KEYS
    assert doc["scenario"] == name and doc["verdict"] == sc.verdict in VERDICTS
    assert doc["evidence_level"] in {"L0", "L1", "L2", "L3"}
    assert set(doc["watchdog"]) == {"timeout_s", "deployed"} and doc["watchdog"]["deployed"] in (
        True,
        False,
        None,
    )
    since = {} if sc.since_s is None else {"since_us": doc["window"]["since_us"]}
    opts = doc.get("verdict_options", {})
    if since:  # seconds from the window start; the data starts a little after it
        assert 0 < opts["since_us"] - doc["window"]["since_us"] < sc.since_s * 1e6
        since = {"since_us": opts["since_us"]}
    assert opts == sc.verdict_options | since
    for run in doc.get("ingests", []):
        assert set(run) == {"since_us", "until_us", "verdict"} and run["verdict"] in VERDICTS
        assert run["since_us"] < run["until_us"]
    if "ingests" in doc:
        assert doc["ingests"][-1]["verdict"] == doc["verdict"]
    for source, over in doc.get("by_input", {}).items():
        assert source == "plain" and over["verdict"] in VERDICTS
        assert set(over) == {"verdict", "reasons_contain", "anonymous_pins", "requests"}
        assert all(list(r) == row_keys(doc) and r["class"] in CLASSES for r in over["requests"])
    ts = [int(e["__REALTIME_TIMESTAMP"]) for e in entries(name)]
    assert doc["window"] == {"since_us": min(ts), "until_us": max(ts)}
    assert all(isinstance(s, str) and s == s.lower() for s in doc["reasons_contain"])
    # an inconclusive verdict must say why; another verdict may name what it rests on too
    assert doc["verdict"] != "inconclusive" or doc["reasons_contain"]
    rooms = [r["bootstrap_room"] for r in doc["requests"]]
    # a request is (deployment, room): a room is several rows only where two deployments share it
    keys = [(r["bootstrap_room"], r.get("deployment")) for r in doc["requests"]]
    assert len(keys) == len(set(keys)) and all(r.isdigit() and r != "0" for r in rooms)
    shared = {room for room, n in Counter(rooms).items() if n > 1}
    for r in doc["requests"]:
        assert list(r) == row_keys(doc) and r["class"] in CLASSES
        assert all(isinstance(r[k], bool) for k in ("abort_race", "across_restart", "one_sided"))
        if "deployment" in r:  # `prefill <host>` / `decode <host>` where its room is shared, else null
            engine, _, host = (r["deployment"] or " ").partition(" ")
            assert (r["bootstrap_room"] in shared) == (r["deployment"] is not None), r
            assert r["deployment"] is None or (engine in ("prefill", "decode") and host in doc["hosts"]), r
    assert doc.get("recovery", "drained") in {"drained", "wedged"}
    assert ("recovery" in doc) <= (doc["verdict"] == "watchdog_fired")
    assert doc.get("stuck_elsewhere", True) is True
    listed = set(rooms)
    for d in doc.get("request_details", []):
        assert d["bootstrap_room"] in listed and set(d) - {"bootstrap_room"} <= DETAIL_KEYS and len(d) > 1


@pytest.mark.parametrize("name", NAMES)
def test_every_listed_room_and_rid_is_in_the_text(name):
    text = fixture(name).joinpath("journal.json").read_text()
    for r in expected(name)["requests"]:
        assert f"bootstrap_room={r['bootstrap_room']}" in text
        for side in ("prefill_rid", "decode_rid"):
            if r[side]:
                assert r[side] in text


@pytest.mark.parametrize("name", NAMES)
def test_pinned_rooms_have_no_terminal_prefill_line(name):
    """A silent pin: after its last line the prefill never names the room again, except to receive it."""
    doc = expected(name)
    pins = [r for r in doc["requests"] if r["class"] == "silent_pin"]
    timeout_us = doc["watchdog"]["timeout_s"] * 1_000_000
    for r in pins:
        # where two deployments share the room, its own prefill's lines (the other may finish it)
        prefill = unit_lines(name, "prefill", (r.get("deployment") or "").removeprefix("prefill ") or None)
        named = [(ts, m) for ts, m in prefill if f"bootstrap_room={r['bootstrap_room']}" in m]
        # a room can have several legs (a rebootstrap): after its last leg's Receive: nothing more
        last = max(i for i, (_, m) in enumerate(named) if " Receive: obj=" in m)
        assert all(" Receive: obj=" in m for _, m in named[last:]), named
        assert named and doc["window"]["until_us"] - named[-1][0] > timeout_us
    # the gauge shows them to the end, unless the prefill hung (no batch line after the hang) and died
    died = any("-prefill.service: Main process exited" in message(e) for e in entries(name))
    if "pairs" in doc:  # a fleet: each prefill's own gauge shows its own pins
        held = Counter(doc["pairs"][r["bootstrap_room"]]["prefill"] for r in pins)
        assert all(floors(name, host)[-1][1] >= n for host, n in held.items()), held
    elif len(prefill_hosts := {e["_HOSTNAME"] for e in entries(name) if is_prefill(e)}) > 1:
        # several deployments: the prefill whose Receive: names the pin's prefill rid holds it
        held = Counter(
            next(e["_HOSTNAME"] for e in entries(name) if is_prefill(e) and r["prefill_rid"] in message(e))
            for r in pins
        )
        assert set(held) <= prefill_hosts and not doc["anonymous_pins"], held
        assert all(floors(name, host)[-1][1] >= n for host, n in held.items()), held
    elif (pins or doc["anonymous_pins"]) and not died:
        assert floors(name)[-1][1] >= len(pins) + doc["anonymous_pins"]


def test_the_watchdog_fires_once_per_rank_in_the_same_second():
    doc = expected("decode_restart_watchdog_fires")
    fired = [r for r in doc["requests"] if r["class"] == "watchdog_fired"]
    assert len(fired) == 3 and all(r["across_restart"] for r in fired)
    prefill = unit_lines("decode_restart_watchdog_fires", "prefill")
    for r in fired:
        lines = [m for _, m in prefill if f"req.bootstrap_room={r['bootstrap_room']} stalled >60s" in m]
        ranks = [PREFIX.match(m).group(2) for m in lines]
        assert sorted(ranks) == [" TP0", " TP1", " TP2", " TP3"]
        assert len({PREFIX.match(m).group(1) for m in lines}) == 1
        dwell = {float(re.search(r"dwell=([\d.]+)s", m).group(1)) for m in lines}
        assert len(dwell) == 1 and 60.0 < dwell.pop() < 61.0
        fails = [
            m
            for _, m in prefill
            if "] Prefill transfer failed" in m
            and "inflight watchdog: stalled >60s" in m
            and f"req.bootstrap_room={r['bootstrap_room']} with exception" in m
        ]
        assert len(fails) == 4
    last_fire = max(ts for ts, m in prefill if "forcing Failed + release" in m)
    after = [f for ts, f in floors("decode_restart_watchdog_fires") if ts > last_fire]
    assert after and set(after) == {0}


def test_decode_restart_floor_and_lost_requests():
    doc = expected("decode_restart_old_build")
    assert doc["watchdog"] == {"timeout_s": 60, "deployed": False}
    assert not any("inflight watchdog" in m for _, m in unit_lines("decode_restart_old_build", "prefill"))
    pins = [r for r in doc["requests"] if r["class"] == "silent_pin"]
    assert len(pins) == 3 and all(r["across_restart"] and r["prefill_rid"] != r["decode_rid"] for r in pins)
    decode = unit_lines("decode_restart_old_build", "decode")
    graceful = [m for _, m in decode if m.split("] ", 1)[-1].startswith("Gracefully exiting... Remaining")]
    assert len(graceful) == 3
    lost = [r for r in doc["requests"] if r["class"] == "lost"]
    assert lost and all(r["decode_rid"] in graceful[-1] for r in lost)  # decode rids, not rooms
    assert sum(r["decode_rid"] in graceful[-1] for r in pins) == 2  # the third arrived after the last one
    kill = next(
        int(e["__REALTIME_TIMESTAMP"])
        for e in entries("decode_restart_old_build")
        if "State 'stop-sigterm' timed out" in message(e)
    )
    assert {f for ts, f in floors("decode_restart_old_build") if ts > kill} == {3}


def test_abort_storms():
    clean = expected("abort_storm_clean")
    aborted = [r for r in clean["requests"] if r["class"] == "aborted"]
    assert len(aborted) == 30 and sum(r["abort_race"] for r in aborted) == 6
    text = "\n".join(m for _, m in unit_lines("abort_storm_clean", "prefill"))
    for r in aborted:
        room = r["bootstrap_room"]
        released = f"Prefill transfer failed for request rank=0 req.rid='{r['prefill_rid']}' req.bootstrap_room={room}"
        assert (released in text) == r["abort_race"]
    assert floors("abort_storm_clean")[-1][1] == 0
    pins = [r for r in expected("abort_storm_pins")["requests"] if r["class"] == "silent_pin"]
    assert len(pins) == 3 and all(r["abort_race"] for r in pins)
    decode = "\n".join(m for _, m in unit_lines("abort_storm_pins", "decode"))
    for r in pins:
        assert (
            f"decode_req.req.bootstrap_room={r['bootstrap_room']} with exception KVTransferError(" in decode
        )


def test_l0_pins_are_anonymous():
    doc = expected("l0_anonymous_pins")
    assert doc["anonymous_pins"] == 3 and [r["class"] for r in doc["requests"]] == ["aborted"]
    prefill = unit_lines("l0_anonymous_pins", "prefill")
    assert not any("Receive: obj=" in m for _, m in prefill)
    room = doc["requests"][0]["bootstrap_room"]
    assert sum(f"req.bootstrap_room={room} with exception" in m for _, m in prefill) == 8  # every TP rank
    assert floors("l0_anonymous_pins")[-1][1] == 3


def test_suppression_hole_and_short_window():
    doc = expected("journald_suppression")
    assert doc["verdict"] == "inconclusive" and "suppressed" in doc["reasons_contain"]
    prefill = unit_lines("journald_suppression", "prefill")
    hole_end = next(
        int(e["__REALTIME_TIMESTAMP"])
        for e in entries("journald_suppression")
        if message(e).startswith("Suppressed ")
    )
    assert doc["window"]["until_us"] - hole_end < doc["watchdog"]["timeout_s"] * 1_000_000
    assert not any(hole_end - 29_000_000 < ts < hole_end - 1_000 for ts, _ in prefill)  # the hole
    plain = fixture("journald_suppression") / "plain" / "qwen-p01-sglang-qwen3-prefill.log"
    assert len(plain.read_bytes().splitlines()) > len(prefill)  # the file kept what journald dropped
    short = expected("short_window")
    assert short["window"]["until_us"] - short["window"]["since_us"] < 60_000_000
    assert "shorter than the watchdog timeout" in short["reasons_contain"]
    assert any(r["class"] == "in_flight" for r in short["requests"])


# ---- verdict honesty (issue 12): what each new scenario's files really hold -------------------------


def _rooms_of(doc: dict, cls: str) -> list[str]:
    return [r["bootstrap_room"] for r in doc["requests"] if r["class"] == cls]


def _first_ts(name: str, needle: str) -> int:
    return next(int(e["__REALTIME_TIMESTAMP"]) for e in entries(name) if needle in message(e))


def test_prefill_goes_silent_before_any_deadline():
    doc = expected("prefill_goes_silent")
    timeout_us = doc["watchdog"]["timeout_s"] * 1_000_000
    prefill = unit_lines("prefill_goes_silent", "prefill")
    last = prefill[-1][0]
    assert doc["window"]["until_us"] - last > timeout_us + 10_000_000  # longer than timeout + grace
    assert floors("prefill_goes_silent")[-1][1] >= 3  # the last sample shows the three open
    later = [m for ts, m in unit_lines("prefill_goes_silent", "decode") if ts > last and "Receive: obj=" in m]
    assert len(later) >= 5  # the decode keeps taking new requests
    undecided = _rooms_of(doc, "undecided")
    pins = [room for room in undecided if any(f"bootstrap_room={room}," in m for _, m in prefill)]
    assert len(pins) == 3
    for room in pins:
        recv = next(ts for ts, m in prefill if f"bootstrap_room={room}," in m)
        assert last - recv < timeout_us  # the silence starts before its deadline
    # the others the decode received in the silence, a timeout + grace before the end: no prefill
    # line names them, so whether the prefill released them is not seen
    decode = unit_lines("prefill_goes_silent", "decode")
    for room in set(undecided) - set(pins):
        recv = next(ts for ts, m in decode if f"bootstrap_room={room}," in m)
        assert last < recv < doc["window"]["until_us"] - timeout_us - 10_000_000
    plain = fixture("prefill_goes_silent") / "plain" / "dsv4-node-11-sglang-dsv4-prefill.log"
    assert len(plain.read_text().splitlines()) <= len(prefill)  # the process printed nothing more


def test_hole_hides_the_firing_and_plain_keeps_it():
    name = "hole_hides_firing"
    doc = expected(name)
    (room,) = _rooms_of(doc, "undecided")
    assert room in doc["reasons_contain"]
    journal = fixture(name).joinpath("journal.json").read_text()
    assert "forcing Failed + release" not in journal
    plain = (fixture(name) / "plain" / "dsv4-node-12-sglang-dsv4-prefill.log").read_text().splitlines()
    fired = [m for m in plain if f"req.bootstrap_room={room} stalled >60s" in m]
    assert sorted(PREFIX.match(m).group(2) for m in fired) == [" TP0", " TP1", " TP2", " TP3"]
    failed = [m for m in plain if "] Prefill transfer failed" in m and f"req.bootstrap_room={room} with" in m]
    assert len(failed) == 4 and all("inflight watchdog: stalled >60s" in m for m in failed)
    sup = [message(e) for e in entries(name) if message(e).startswith("Suppressed ")]
    assert sup == [
        f"Suppressed {sup[0].split()[1]} messages from sglang-dsv4-prefill.service",
        "Suppressed 40 messages from sglang-dsv4-decode.service",
    ]
    hole_end = _first_ts(name, "messages from sglang-dsv4-prefill.service")
    after = [f for ts, f in floors(name) if ts > hole_end]
    # the gauge is empty right after the hole and at the end: it proves nothing about the room
    assert after and after[0] == 0 and after[-1] == 0 and max(after) < 2
    plain_row = next(r for r in doc["by_input"]["plain"]["requests"] if r["bootstrap_room"] == room)
    assert plain_row["class"] == "watchdog_fired" and doc["by_input"]["plain"]["verdict"] == "watchdog_fired"


def test_decode_only_export_has_no_prefill_line():
    name = "decode_only_export"
    ours = entries(name)
    assert ours and not any("prefill" in e.get("_SYSTEMD_UNIT", "") + e.get("UNIT", "") for e in ours)
    doc = expected(name)
    assert doc["requests"] and all(r["one_sided"] and r["prefill_rid"] is None for r in doc["requests"])
    assert [p.name for p in (fixture(name) / "plain").iterdir()] == ["dsv4-node-13-sglang-dsv4-decode.log"]


def test_non_pd_server_under_a_prefill_name():
    name = "non_pd_prefill_name"
    lines = unit_lines(name, "prefill")
    texts = [m for _, m in lines]
    assert lines and not any("#inflight-req" in m or "#bootstrap-req" in m for m in texts)
    assert any("] Decode batch, #running-req: " in m for m in texts)  # a unified server decodes too
    receives = [m for m in texts if "Receive: obj=" in m]
    assert receives and all("bootstrap_room=None" in m for m in receives)
    assert not re.search(r"bootstrap_room=\d", fixture(name).joinpath("journal.json").read_text())
    ts = [t for t, _ in lines]
    assert ts[-1] - ts[0] > 50 * 60 * 1_000_000
    assert max(b - a for a, b in itertools.pairwise(ts)) >= 52 * 60 * 1_000_000
    assert expected(name)["requests"] == []
    assert [p.name for p in (fixture(name) / "plain").iterdir()] == ["dsv4-lab-14-sglang-dsv4-prefill.log"]


def test_window_starts_between_armed_and_ready():
    name = "window_starts_after_armed"
    doc = expected(name)
    since = doc["verdict_options"]["since_us"]
    prefill = unit_lines(name, "prefill")
    armed = next(ts for ts, m in prefill if "inflight watchdog armed: " in m)
    ready = next(ts for ts, m in prefill if m.endswith("] The server is fired up and ready to roll!"))
    assert armed < since < ready and ready - armed > 25_000_000
    pins = _rooms_of(doc, "silent_pin")
    assert len(pins) == 3
    for room in pins:
        recv = next(ts for ts, m in prefill if f"bootstrap_room={room}," in m)
        assert recv > since and doc["window"]["until_us"] - recv > 210_000_000  # held ~3.5 min
    assert not any("inflight watchdog: req.rid=" in m for _, m in prefill)


@pytest.mark.parametrize(
    ("name", "death", "status", "held"),
    [
        (
            "prefill_dies_no_restart",
            "] Caught signal 11 (Segmentation fault: address not mapped",
            "11/SEGV",
            "lost",
        ),
        # held five minutes past their deadline in the hung scheduler before it was killed: stuck
        (
            "prefill_dies_scheduler_watchdog",
            "] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
            "9/KILL",
            "silent_pin",
        ),
    ],
)
def test_prefill_dies_and_does_not_come_back(name, death, status, held):
    doc = expected(name)
    ours = entries(name)
    t_death = _first_ts(name, death)
    t_exit = _first_ts(
        name, f"sglang-dsv4-prefill.service: Main process exited, code=killed, status={status}"
    )
    assert t_death < t_exit < _first_ts(name, "sglang-dsv4-prefill.service: Failed with result 'signal'.")
    assert not any(
        int(e["__REALTIME_TIMESTAMP"]) > t_exit and "Started sglang-dsv4-prefill" in message(e) for e in ours
    )
    prefill = unit_lines(name, "prefill")
    assert all(ts <= t_exit for ts, _ in prefill)
    assert doc["window"]["until_us"] - t_exit > 60_000_000  # the decode's lines go on
    # received, then nothing: gone with the process (`lost`), or, held past its deadline by the hung
    # scheduler before it was killed, a `silent_pin`
    rooms = _rooms_of(doc, held)
    assert len(rooms) == 3
    for room in rooms:
        named = [m for _, m in prefill if f"bootstrap_room={room}" in m]
        assert named and all("Receive: obj=" in m for m in named)  # received, then nothing
    assert not any("inflight watchdog: req.rid=" in m for _, m in prefill)  # SGLang's own watchdog only


def test_two_incidents_hours_apart():
    name = "two_incidents"
    doc = expected(name)
    first, second = doc["ingests"]
    assert second["since_us"] - first["until_us"] > 2.5 * 3600 * 1_000_000
    assert [first["verdict"], second["verdict"]] == ["watchdog_missed", "nothing_stuck"]
    kill = _first_ts(name, "sglang-dsv4-decode.service: State 'stop-sigterm' timed out. Killing.")
    assert first["since_us"] <= kill < first["until_us"]
    stuck = [f for ts, f in floors(name) if kill < ts < first["until_us"]]
    assert stuck and set(stuck) == {3}  # incident 1: three pins to its window end
    calm = [f for ts, f in floors(name) if second["since_us"] <= ts < second["until_us"]]
    assert calm and calm[-1] == 0 and max(calm) < 3  # transfers come and go; nothing stays
    text = [
        message(e)
        for e in entries(name)
        if second["since_us"] <= int(e["__REALTIME_TIMESTAMP"]) < second["until_us"]
    ]
    assert doc["requests"] and all(
        any(f"bootstrap_room={r['bootstrap_room']}," in m for m in text) for r in doc["requests"]
    )


# ---- version layouts and prefixes ---------------------------------------------------------------


LAYOUTS = {
    "healthy": [
        "#bootstrap-req: ",
        "#optimistic-req: 0, cuda graph",
        "full token usage: ",
        "swa token usage: ",
        "#full token: ",
        "accept len: ",
        "inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=60s",
    ],
    "decode_restart_old_build": ["#pending-token: ", "#bootstrap-req: "],
    "short_window": ["#bootstrap-req: ", "#inflight-req: "],
    "l0_anonymous_pins": [", #prealloc-req: ", "cuda graph: False, input throughput (token/s): ", "#token: "],
    "journald_suppression": ["Prefill batch. #new-seq: ", "#prealloc-req: ", "Decode batch. #running-req: "],
    "multihost_skew": [
        "ReqTimeStats(rid=",
        "attempts=0, type=prefill): ",
        "type=decode): ",
        " DP1 TP1 EP1] ",
    ],
}
ABSENT = {
    "decode_restart_old_build": ["#optimistic-req", "inflight watchdog"],
    "l0_anonymous_pins": ["Receive: obj=", "#bootstrap-req"],
    "journald_suppression": ["input throughput", "#bootstrap-req"],
    "multihost_skew": ["Receive: obj="],
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_version_layouts_appear_where_claimed(name):
    text = fixture(name).joinpath("journal.json").read_text()
    for needle in LAYOUTS[name]:
        assert needle in text, needle
    for needle in ABSENT.get(name, []):
        assert needle not in text, needle


def test_armed_line_once_on_tp0_and_one_rank_failures_from_0_5_14():
    healthy = [m for _, m in unit_lines("healthy", "prefill") if "inflight watchdog armed" in m]
    assert len(healthy) == 1 and PREFIX.match(healthy[0]).group(2) == " TP0"
    prefill = unit_lines("watchdog_armed_never_fires", "prefill")
    err = [m for _, m in prefill if "NIXL transfer encountered ERR" in m and "] Prefill transfer failed" in m]
    assert len(err) == 1  # 0.5.18: other ranks log the propagated copy at DEBUG
    start = next(i for i, (_, m) in enumerate(prefill) if "Unexpected transfer worker error for room" in m)
    assert prefill[start + 1][1] == "Traceback (most recent call last):"
    assert prefill[start + 6][1].startswith("RuntimeError: ")  # continuation entries, no prefix


def _utc(prefix_time: str) -> float:
    return datetime.strptime(prefix_time, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("name", "host", "offset_h"),
    [
        ("healthy", "dsv4-node-01", 8),
        ("multihost_skew", "d-node-01", 8),
        ("multihost_skew", "p-node-01", 0),
        ("watchdog_armed_never_fires", "b200-07", -5),
    ],
)
def test_prefixes_are_host_local_time(name, host, offset_h):
    for e in entries(name):
        m = PREFIX.match(message(e))
        if e["_HOSTNAME"] == host and m:
            diff = _utc(m.group(1)) - int(e["__REALTIME_TIMESTAMP"]) / 1e6 - offset_h * 3600
            assert -1.01 < diff <= 0.0


def test_decode_host_clock_runs_ahead():
    stats = defaultdict(dict)
    for _, m in unit_lines("multihost_skew", "prefill") + unit_lines("multihost_skew", "decode"):
        r = re.search(r"ReqTimeStats\(rid=\w+, bootstrap_room=(\d+),.*type=(\w+)\): .*entry_time=([\d.]+)", m)
        if r and r.group(1) != "0":
            stats[r.group(1)][r.group(2)] = float(r.group(3))
    skews = [s["decode"] - s["prefill"] for s in stats.values() if len(s) == 2]
    assert len(skews) > 10 and all(2.45 < x < 2.55 for x in skews)


# ---- plain files and scale ----------------------------------------------------------------------


def test_plain_files_are_the_sglang_lines(tmp_path):
    out = simulate_plain("multihost_skew", tmp_path, now_us=NOW)
    files = sorted(p.name for p in out.iterdir())
    assert files == ["d-node-01-sglang-dsv4-decode.log", "p-node-01-sglang-dsv4-prefill.log"]
    lines = (out / files[0]).read_text().splitlines()
    assert sum(bool(PREFIX.match(line)) for line in lines) >= len(lines) - 2  # the ANSI warning has none
    journal = [
        message(e)
        for e in entries("multihost_skew")
        if e.get("_SYSTEMD_UNIT") == "sglang-dsv4-decode.service" and e["_COMM"] == "python3"
    ]
    assert lines == journal  # no other program, no systemd: exactly the process's own lines


@pytest.mark.slow
def test_scale_multiplies_the_traffic(tmp_path):
    small = simulate("decode_restart_old_build", tmp_path / "a", now_us=NOW, scale=1)
    big = simulate("decode_restart_old_build", tmp_path / "b", now_us=NOW, scale=25)
    n_small = len((small / "journal.json").read_bytes().splitlines())
    n_big = len((big / "journal.json").read_bytes().splitlines())
    assert n_big > 5 * n_small  # health checks and lifecycle lines do not scale
    doc = json.loads((big / "expected.json").read_text())
    assert len(doc["requests"]) > 12 * len(json.loads((small / "expected.json").read_text())["requests"])
    assert doc["verdict"] == "watchdog_missed"
    assert Counter(r["class"] for r in doc["requests"])["silent_pin"] == 3
    ts = [
        int(json.loads(line)["__REALTIME_TIMESTAMP"])
        for line in (big / "journal.json").read_text().splitlines()
    ]
    assert ts == sorted(ts)


@pytest.mark.parametrize("fraction_us", [0, 12_345, 987_654])
def test_firing_ranks_share_a_second_whatever_the_window_end(tmp_path, fraction_us):
    out = simulate("decode_restart_watchdog_fires", tmp_path, now_us=NOW + 7_000_000 + fraction_us, seed=1)
    seconds = defaultdict(set)
    for line in (out / "journal.json").read_text().splitlines():
        m = PREFIX.match(message(json.loads(line)))
        room = re.search(r"req\.bootstrap_room=(\d+) stalled", line)
        if m and room:
            seconds[room.group(1)].add(m.group(1))
    assert len(seconds) == 3 and all(len(s) == 1 for s in seconds.values())


@pytest.mark.parametrize(
    ("how", "last_words", "status"),
    [
        (
            "segv",
            "Caught signal 11 (Segmentation fault: address not mapped to object at address 0x18)",
            "11/SEGV",
        ),
        (
            "scheduler_watchdog",
            "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
            "9/KILL",
        ),
        ("sigquit_0_4", "Received sigquit from a child proces. It usually means the child failed.", "9/KILL"),
    ],
)
def test_every_death_family_ends_the_process_without_a_restart(how, last_words, status):
    from pdforensics.simulate import build as B
    from pdforensics.simulate.model import World
    from pdforensics.simulate.scenarios import _patched_pair

    w = World("death", 0, NOW, 330.0, 1.0)
    pre, _ = _patched_pair(w, "h")
    p = B.running_proc(w, pre)
    B.die(w, p, 100.0, how)
    texts = [e.body for e in w.events]
    assert any(last_words in t for t in texts)
    assert f"{pre.unit}: Main process exited, code=killed, status={status}" in texts
    assert f"{pre.unit}: Failed with result 'signal'." in texts
    assert not any(t.startswith("Started ") for t in texts) and 100.0 < p.t_end < 101.0
    assert w.restarts == [("prefill", p.t_end)]
    with pytest.raises(ValueError, match="unknown death"):
        B.die(w, p, 200.0, "meteor")


# ---- verdict depth (issue 14) ---------------------------------------------------------------------


def _ranks_of(lines: list[str]) -> list[str]:
    return sorted(PREFIX.match(m).group(2) for m in lines)


def test_wedge_fires_on_every_new_room_and_nothing_completes():
    name = "wedge_after_decode_restart"
    doc = expected(name)
    assert doc["recovery"] == "wedged"
    prefill, decode = unit_lines(name, "prefill"), unit_lines(name, "decode")
    ready = [ts for ts, m in decode if m.endswith(READY_LINE)]
    assert len(ready) == 1  # the restarted decode's
    after = [m for ts, m in prefill if ts > ready[0] and " Receive: obj=" in m and "HEALTH_CHECK" not in m]
    rooms = [re.search(r"bootstrap_room=(\d+)", m).group(1) for m in after]
    assert len(rooms) >= 6 and set(rooms) <= set(_rooms_of(doc, "watchdog_fired"))
    states = [
        re.search(r"stalled >60s in (KVPoll\.\w+) \(dwell", m).group(1)
        for room in rooms
        for _, m in prefill
        if f"req.bootstrap_room={room} stalled" in m and "] inflight watchdog:" in m and " TP0]" in m
    ]
    assert states == ["KVPoll.Transferring"] + ["KVPoll.WaitingForInput"] * (len(rooms) - 1)
    first_fire = min(ts for ts, m in prefill if "forcing Failed + release" in m)
    done = [m for ts, m in decode if ts > first_fire and "Finish: obj=" in m and "HEALTH_CHECK" not in m]
    assert done and all("'type': 'abort'" in m for m in done)  # nothing completes on the path
    health = [m for ts, m in decode if ts > ready[0] and '"GET /health HTTP/1.1"' in m]
    assert health and all(m.endswith('"GET /health HTTP/1.1" 200 OK') for m in health)


READY_LINE = "The server is fired up and ready to roll!"


def _decode_load(name: str) -> list[tuple[int, float, int, int]]:
    """(µs, full token usage, #prealloc-req, #transfer-req) of every decode batch line."""
    out = []
    for ts, m in unit_lines(name, "decode"):
        g = re.search(r"full token usage: ([\d.]+),.*#prealloc-req: (\d+), #transfer-req: (\d+)", m)
        if g:
            out.append((ts, float(g.group(1)), int(g.group(2)), int(g.group(3))))
    return out


def test_saturated_decode_around_each_firing_then_drained():
    name = "fired_under_saturation_then_drains"
    doc = expected(name)
    assert doc["recovery"] == "drained"
    assert {d["bootstrap_room"] for d in doc["request_details"]} == set(_rooms_of(doc, "watchdog_fired"))
    fires = sorted({ts for ts, m in unit_lines(name, "prefill") if "forcing Failed + release" in m})
    load = _decode_load(name)
    for fire in fires:
        before = [x for x in load if fire - 30_000_000 <= x[0] <= fire][-1]
        nxt = next(x for x in load if x[0] > fire)
        assert before[1] >= 0.95 and before[2] >= 4 and nxt[2] >= before[2]  # full, and not draining
    later = [f for ts, f in floors(name) if ts > fires[-1]]
    assert 0 in later and later[-1] == 0
    assert max(x[1] for x in load if x[0] > fires[-1] + 60_000_000) < 0.95  # the load falls


def test_upstream_bootstrap_timeout_lines():
    name = "upstream_bootstrap_timeout_with_watchdog"
    doc = expected(name)
    (room,) = _rooms_of(doc, "transfer_failed")
    prefill = [m for _, m in unit_lines(name, "prefill")]
    failed = [m for m in prefill if "] Prefill bootstrap failed for request" in m and f"={room} with" in m]
    assert _ranks_of(failed) == [" TP0", " TP1", " TP2", " TP3"]
    assert all(m.endswith(f"Request {room} timed out after 300.0s in KVPoll.Bootstrapping") for m in failed)
    hint = [m for m in prefill if "] Some requests timed out when bootstrapping" in m]
    assert _ranks_of(hint) == [" TP0", " TP1", " TP2", " TP3"]  # once per scheduler process
    assert any("] inflight watchdog armed: " in m for m in prefill)
    assert not any("] inflight watchdog: req.rid=" in m for m in prefill)
    assert not any(f"bootstrap_room={room}" in m for _, m in unit_lines(name, "decode"))
    t_fail = _first_ts(name, "timed out after 300.0s in KVPoll.Bootstrapping")
    boots = [
        int(re.search(r"#bootstrap-req: (\d+)", m).group(1))
        for ts, m in unit_lines(name, "prefill")
        if ts > t_fail and "#bootstrap-req" in m
    ]
    assert boots and set(boots) == {0}


def test_slime_dialect_lines():
    name = "slime_dialect"
    doc = expected(name)
    prefill, decode = unit_lines(name, "prefill"), unit_lines(name, "decode")
    assert not any("inflight watchdog" in m for _, m in prefill)  # slime prints no armed line
    for room in _rooms_of(doc, "watchdog_fired"):
        pre = [
            m for _, m in prefill if f"req.bootstrap_room={room}" in m and "] Prefill transfer timed out" in m
        ]
        assert _ranks_of(pre) == [" TP0", " TP1", " TP2", " TP3"]
        assert all(re.search(r"timed out after 600\.\ds \(state=3\) for request rank=\d ", m) for m in pre)
        dec = [m for _, m in decode if f" room={room} after 600s" in m and "] Decode transfer" in m]
        assert _ranks_of(dec) == [" TP0", " TP1", " TP2", " TP3"]
        assert all(
            re.search(r"\] Decode transfer timeout for request rank=\d rid=[0-9a-f]+ room=", m) for m in dec
        )


def test_frozen_decode_transfer_queue():
    name = "frozen_decode_transfer_queue"
    doc = expected(name)
    assert doc["stuck_elsewhere"] is True
    rooms = _rooms_of(doc, "in_flight")
    t_in = max(_first_ts(name, f"bootstrap_room={r},") for r in rooms)
    load = [x for x in _decode_load(name) if x[0] > t_in + 2_000_000]
    assert len(load) > 10 and min(x[3] for x in load) == 2  # the floor stays 2 to the window end
    assert doc["window"]["until_us"] - load[0][0] > 120_000_000
    assert [f for ts, f in floors(name) if ts > t_in][-1] == 0  # the prefill's inflight queue is empty
    prefill, decode = unit_lines(name, "prefill"), unit_lines(name, "decode")
    for room in rooms:
        assert any("Finish: obj=" in m and f"bootstrap_room={room}," in m for _, m in prefill)
        assert not any("Finish: obj=" in m and f"bootstrap_room={room}," in m for _, m in decode)


def test_rebootstrap_legs():
    name = "rebootstrap_leg"
    doc = expected(name)
    (pin,) = _rooms_of(doc, "silent_pin")
    assert doc["request_details"] == [{"bootstrap_room": pin, "legs": 3}]
    prefill = [m for _, m in unit_lines(name, "prefill")]
    decode = [m for _, m in unit_lines(name, "decode")]
    retracts = [m for m in decode if "] KV cache pool is full. Retract requests. #retracted_reqs: 1" in m]
    assert len(retracts) == 2
    legs2 = [
        (room, rid)
        for m in prefill
        if " Receive: obj=" in m
        for rid, room in [re.search(r"rid='(\w+)'.*bootstrap_room=(\d+),", m).groups()]
        if any(f"rid='{rid}'" in d and " Receive: obj=" in d for d in decode)
    ]
    assert len(legs2) == 2 and pin in {room for room, _ in legs2}  # the decode's rid on the prefill
    # uvicorn logs a call when it answers: the leg that completes, from the decode host, not the router
    assert len([m for m in prefill if "10.0.26.21:" in m and '"POST /generate HTTP/1.1" 200' in m]) == 1
    pin_lines = [m for m in prefill if f"bootstrap_room={pin}," in m]
    assert [("Receive" in m, "Finish" in m) for m in pin_lines] == [
        (True, False),
        (False, True),
        (True, False),
    ]


def test_request_log_switched_off_mid_window():
    name = "log_level_change_mid_window"
    doc = expected(name)
    assert doc["anonymous_pins"] == 3
    t_off = _first_ts(name, "Config logging: obj=ConfigureLoggingReq(log_requests=False")
    for role in ("prefill", "decode"):
        lines = unit_lines(name, role)
        conf = [m for _, m in lines if "Config logging: obj=" in m]
        assert len(conf) == 1 and PREFIX.match(conf[0]).group(2) == ""  # the root logger: no ranks
        assert not any(ts > t_off and ("Receive: obj=" in m or "Finish: obj=" in m) for ts, m in lines)
        assert any(ts < t_off and "Receive: obj=" in m for ts, m in lines)
    later = [f for ts, f in floors(name) if ts > t_off + 40_000_000]
    assert later and min(later) == 3 and doc["window"]["until_us"] - t_off > 180_000_000


def test_two_deployments_reuse_rooms_on_one_address():
    """dc1 and dc2: every Receive: names the same prefill address; the shared rooms are received by
    both prefills, 45 s or more apart except the two reused on purpose within 30 s (the second pin's,
    dc2 2.5 s first, and one both complete); dc1's prefill holds its three pins to the end."""
    name = "two_deployments_colliding_rooms"
    doc = expected(name)
    received: dict[str, dict[str, int]] = defaultdict(dict)  # room -> prefill host -> journal µs
    for e in entries(name):
        m = re.search(r" Receive: obj=.*bootstrap_host='([^']+)'.*bootstrap_room=(\d+),", message(e))
        if m and m.group(2) != "0":
            assert m.group(1) == "10.0.0.5", message(e)
            if is_prefill(e):
                received[m.group(2)][e["_HOSTNAME"]] = int(e["__REALTIME_TIMESTAMP"])
    shared = {room for room, hosts in received.items() if len(hosts) == 2}
    rows = [r for r in doc["requests"] if r["deployment"]]
    assert shared == {r["bootstrap_room"] for r in rows} and len(shared) == 14
    gap = {room: (received[room]["dc2-prefill-0"] - received[room]["dc1-prefill-0"]) / 1e6 for room in shared}
    near = {room: round(g, 1) for room, g in gap.items() if abs(g) < 30}
    assert all(abs(g) >= 44 for room, g in gap.items() if room not in near)
    by_class = {(r["bootstrap_room"], r["deployment"]): r["class"] for r in rows}
    pinned = next(room for room in near if by_class[room, "prefill dc1-prefill-0"] == "silent_pin")
    assert near[pinned] == -2.5 and sorted(near.values()) == [-2.5, 3.6]
    assert sorted(c for (room, _), c in by_class.items() if room == pinned) == [
        "silent_pin", "undecided", "undecided", "undecided",
    ]  # fmt: skip
    pins = [r for r in doc["requests"] if r["class"] == "silent_pin"]
    assert len(pins) == 3 and floors(name, "dc1-prefill-0")[-1][1] >= 3
    assert floors(name, "dc2-prefill-0")[-1][1] == 0
