"""The evidence model's four notions (design.md): held, observed, exists, same request.

The scenarios that each notion decides are fixtures (tests/test_scenarios.py checks them against
the simulator's ground truth): `prefill_holds_decode_finished` (and `_l0`), `two_hung_sends_fired`,
`restart_onto_gaugeless_build`. What this file adds are the edits of a fixture that a real
collection suffers — a prefill whose journal never arrived — and the facts `verdict --json` must
carry about them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.simulate import mutate as mu
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source
from pdforensics.verdict import (
    SEVERITY,
    VerdictOptions,
    apply_options,
    compute_verdict,
    ensure_views,
    materialised,
)

FLEET = fixtures_dir() / "fleet_16_hosts"
MISSING = "p-node-05"  # its two requests routed to the restarted decode are silent pins
MISSING_ADDRESS = "10.0.30.15"


def _judged(db: Path, **options):
    con = store.open_db(db, read_only=True)
    try:
        return compute_verdict(con, VerdictOptions(**options))
    finally:
        con.close()


def _verdict(db: Path, **options) -> dict:
    return _judged(db, **options).to_json()


@pytest.fixture(scope="module")
def fleet_without_one_prefill(tmp_path_factory) -> Path:
    """The fleet's collection with one prefill host's journal missing (its upload failed)."""
    out = tmp_path_factory.mktemp("missing_prefill")
    kept = [
        line
        for line in (FLEET / "journal.json").read_text().splitlines()
        if json.loads(line).get("_HOSTNAME") != MISSING
    ]
    (out / "journal.json").write_text("\n".join(kept) + "\n")
    db = out / "db.duckdb"
    ingest(db, [open_file_source(out / "journal.json")], Selection(), load_catalog())
    return db


def _expected() -> dict:
    return json.loads((FLEET / "expected.json").read_text())


def _options() -> dict:
    return {"watchdog_timeout_s": _expected().get("verdict_options", {}).get("watchdog_timeout_s")}


def test_a_prefill_named_only_by_other_lines_is_an_unobserved_instance(
    fleet_without_one_prefill: Path,
) -> None:
    got = _verdict(fleet_without_one_prefill, **_options())
    unobserved = [i for i in got["instances"] if i.get("observed") is False]
    assert [i["host"] for i in unobserved] == [MISSING_ADDRESS], got["instances"]
    assert unobserved[0]["verdict"] == "inconclusive"
    assert any(n.startswith("decode d-node-") for n in unobserved[0]["named_by"]), unobserved[0]
    assert any(MISSING_ADDRESS in r and "no line of their own" in r for r in got["reasons"]), got["reasons"]


def test_the_missing_prefills_pins_are_never_attributed_elsewhere(fleet_without_one_prefill: Path) -> None:
    """Its rooms cannot be released by another prefill's empty gauge (`lost`) nor completed."""
    exp = _expected()
    pins = {room for room, pair in exp["pairs"].items() if pair["prefill"] == MISSING}
    pinned = {r["bootstrap_room"] for r in exp["requests"] if r["class"] == "silent_pin"} & pins
    assert pinned, "the fixture must pin requests on the prefill the test drops"
    got = _verdict(fleet_without_one_prefill, **_options())
    classes = {r["bootstrap_room"]: r["class"] for r in got["requests"]}
    for room in pinned:
        assert classes.get(room) == "undecided", (room, classes.get(room))


def test_a_window_after_the_incident_is_not_green_while_a_named_prefill_is_missing(
    fleet_without_one_prefill: Path,
) -> None:
    end = _judged(fleet_without_one_prefill, **_options()).window_end_us
    later = _verdict(fleet_without_one_prefill, since_us=end - 90_000_000, until_us=end, **_options())
    assert later["verdict"] != "nothing_stuck", later["reasons"][:3]
    assert MISSING_ADDRESS in [i["host"] for i in later["instances"]]


def test_with_every_prefill_collected_no_instance_is_unobserved(tmp_path: Path) -> None:
    db = tmp_path / "fleet.duckdb"
    ingest(db, [open_file_source(FLEET / "journal.json")], Selection(), load_catalog())
    got = _verdict(db, **_options())
    assert not [i for i in got["instances"] if i.get("observed") is False]
    assert got["verdict"] == _expected()["verdict"]


def test_observed_names_the_line_shapes_that_carried_each_queue(tmp_path: Path) -> None:
    """A restart onto a build whose batch line lacks #inflight-req: the new incarnation's shape is
    named, and it carries the waiting queue, not the inflight one."""
    scenario = fixtures_dir() / "restart_onto_gaugeless_build"
    db = tmp_path / "x.duckdb"
    ingest(db, [open_file_source(scenario / "journal.json")], Selection(), load_catalog())
    got = _verdict(db, watchdog_timeout_s=60)
    prefill = next(o for o in got["observed"] if o["engine"] == "prefill")
    incarnations = {i["incarnation"]: i for i in prefill["incarnations"]}
    assert "inflight" in incarnations[1]["queues"]
    assert "inflight" not in incarnations[2]["queues"], incarnations[2]
    assert [s["entry"] for s in incarnations[2]["line_shapes"]] == ["prefill_batch"]
    assert prefill["inflight_gap_s"] > prefill["longest_gap_s"]


def test_requests_name_each_sides_holder(tmp_path: Path) -> None:
    scenario = fixtures_dir() / "prefill_holds_decode_finished"
    db = tmp_path / "x.duckdb"
    ingest(db, [open_file_source(scenario / "journal.json")], Selection(), load_catalog())
    got = _verdict(db, watchdog_timeout_s=60)
    pins = [r for r in got["requests"] if r["class"] == "silent_pin"]
    assert len(pins) == 2
    for r in pins:
        assert r["holder_at_end"] == "prefill" and r["prefill_host"] == "dsv4-node-03"
        assert r["decode_host"] == "dsv4-node-03"
    assert SEVERITY.index(got["verdict"]) == SEVERITY.index("watchdog_missed")


def _decode_finished_unnamed(db: Path) -> list[tuple[int, str]]:
    """Requests the decode received and finished, that no prefill line names, judged undecided."""
    return _requests(
        db,
        "SELECT room::UBIGINT, d_host FROM requests WHERE class = 'undecided' AND prefill_rid IS NULL"
        " AND decode_received_t IS NOT NULL AND decode_finished_t IS NOT NULL ORDER BY room",
    )


def _classes(db: Path) -> dict[int, str]:
    return dict(_requests(db, "SELECT room::UBIGINT, class FROM requests"))


def _requests(db: Path, sql: str) -> list[tuple]:
    """`sql` over the `requests` rows, computed as a command computes them (the heavy views once, as
    tables): the bare view inlines the whole stack into one plan, several times slower to plan."""
    con = store.open_db(db, read_only=True)
    try:
        apply_options(con, None)
        ensure_views(con)
        with materialised(con, ("context", "requests")):
            return con.execute(sql).fetchall()
    finally:
        con.close()


def _ingested(entries: list[mu.Entry], work: Path) -> Path:
    work.mkdir()
    mu.write_entries(entries, work / "journal.json")
    db = work / "db.duckdb"
    ingest(db, [open_file_source(work / "journal.json")], Selection(), load_catalog())
    return db


def _index_of(lines: list[mu.Entry], room: int, kind) -> int:
    return next(i for i, e in enumerate(lines) if kind(e) and room in mu.rooms_in(mu.text(e)))


def test_a_decode_finish_whose_receive_was_lost_does_not_complete_what_the_prefill_may_hold(
    tmp_path: Path,
) -> None:
    """The decode finished it while the prefill's lines were lost: only those lines could say the
    prefill let it go (undecided). Lose its decode Receive: too (journald suppressed the decode's
    lines from that Receive: up to its Finish:) and nothing new is known; the Finish: alone, with
    no start, must not make it completed. When the decode received it is then bounded by the hole
    on its decode, not unknown."""
    entries = mu.read_entries(fixtures_dir() / "prefill_goes_silent" / "journal.json")
    unnamed = _decode_finished_unnamed(_ingested(entries, tmp_path / "as_logged"))
    assert unnamed, "the fixture must hold decode-finished requests the prefill's silence hides"
    for room, host in unnamed:
        unit = next(u for h, u in mu.engine_units(entries, "decode") if h == host)
        own = [e for e in entries if e.get("_HOSTNAME") == host and e.get("_SYSTEMD_UNIT") == unit]
        start = _index_of(own, room, lambda e: mu.is_request_line(e, "Receive"))
        end = _index_of(own, room, mu.completes)
        cut = mu.delete_stretch(entries, host, unit, start, end - start, told=True)
        got = _classes(_ingested(cut, tmp_path / str(room)))
        assert got.get(room) == "undecided", (room, got.get(room))
