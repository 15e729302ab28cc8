"""A fleet (issue 19): 8 prefill and 8 decode instances on 16 hosts, collected as a journal-remote
directory of real `.journal` files (one `remote-<host>.journal` per host, written by
`systemd-journal-remote`), ingested with `ingest -D` through the library.

The ground truth is `fixtures/fleet_16_hosts/expected.json` (the simulator's model, not pdforensics):
every request's class, its true (prefill, decode) pair (`pairs`) and one judgement per prefill
instance (`instances`).
"""

from __future__ import annotations

import json
import re
import struct
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from pdforensics import api, store
from pdforensics.errors import UsageError
from pdforensics.paths import fixtures_dir
from pdforensics.simulate.__main__ import main as simulate_main
from pdforensics.simulate.remote import JOURNAL_REMOTE, by_host, split_export, write_journal_remote
from pdforensics.store import query_pl
from pdforensics.verdict import VerdictOptions, apply_options, ensure_views, materialised

NAME = "fleet_16_hosts"
FIXTURE = fixtures_dir() / NAME
needs_remote = pytest.mark.skipif(
    not JOURNAL_REMOTE.exists(), reason="systemd-journal-remote is not installed"
)


def expected() -> dict:
    return json.loads((FIXTURE / "expected.json").read_text())


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> Path:
    if not JOURNAL_REMOTE.exists():
        pytest.skip("systemd-journal-remote is not installed")
    out = tmp_path_factory.mktemp("fleet") / "remote"
    write_journal_remote(FIXTURE / "journal.export", out)
    return out


@pytest.fixture(scope="module")
def ingested(collection: Path, tmp_path_factory):
    """`ingest -D DIR` into a DuckDB file, with the verdict the ingest prints."""
    exp = expected()
    db = tmp_path_factory.mktemp("fleet-db") / "fleet.duckdb"
    timeout = exp["verdict_options"]["watchdog_timeout_s"]
    summary, verdict = api.run_ingest(
        db, None, None, None, [collection], None, None, None, None, None, timeout, None, False,
        exp["window"]["until_us"],
    )  # fmt: skip
    assert verdict is not None
    return db, summary, verdict.to_json()


@pytest.fixture(scope="module")
def rows(ingested) -> dict[str, dict]:
    """Every judged room of the `requests` view: its class and the hosts it was joined to."""
    con = store.open_db(ingested[0], read_only=True)
    try:
        ensure_views(con)
        apply_options(
            con, VerdictOptions(watchdog_timeout_s=expected()["verdict_options"]["watchdog_timeout_s"])
        )
        with materialised(con):  # the views once, as the verdict computes them
            df = query_pl(
                con, "SELECT bootstrap_room::VARCHAR AS room, class, p_host, d_host FROM requests", []
            )
    finally:
        con.close()
    return {r["room"]: r for r in df.to_dicts()}


# ---- the collection ----------------------------------------------------------------------------


def test_one_journal_file_per_host(collection: Path, ingested) -> None:
    exp = expected()
    assert sorted(p.name for p in collection.iterdir()) == sorted(f"remote-{h}.journal" for h in exp["hosts"])
    _, summary, _ = ingested
    # nothing lost: every entry of the export is read and stored or selected out, none rejected
    entries = (FIXTURE / "journal.export").read_bytes().count(b"\n__CURSOR=") + 1
    assert summary.rejected == 0 and summary.records + summary.skipped == entries
    con = store.open_db(ingested[0], read_only=True)
    try:
        hosts = {h for (h,) in con.execute("SELECT DISTINCT host FROM lines").fetchall()}
    finally:
        con.close()
    assert hosts == set(exp["hosts"])


def test_split_by_host_keeps_every_entry_in_order() -> None:
    data = (FIXTURE / "journal.export").read_bytes()
    parts = by_host(data)
    assert sorted(parts) == sorted(expected()["hosts"])
    for host, text in parts.items():
        assert all(f"\n_HOSTNAME={host}\n".encode() in e for e in split_export(text))
    assert sum(len(split_export(t)) for t in parts.values()) == len(split_export(data))
    ts = [int(m) for m in re.findall(rb"\n__REALTIME_TIMESTAMP=(\d+)\n", parts["d-node-03"])]
    assert ts and ts == sorted(ts)


def test_split_walks_binary_fields_that_hold_a_blank_line() -> None:
    """A binary MESSAGE may hold "\\n\\n": the fast split on blank lines must not cut it."""
    blob = b"first\n\nsecond"
    binary = b"__CURSOR=c2\n_HOSTNAME=h2\nMESSAGE\n" + struct.pack("<Q", len(blob)) + blob + b"\n\n"
    text = b"__CURSOR=c1\n_HOSTNAME=h1\nMESSAGE=plain\n\n" + binary
    assert split_export(text) == [b"__CURSOR=c1\n_HOSTNAME=h1\nMESSAGE=plain\n\n", binary]
    assert by_host(text) == {"h1": b"__CURSOR=c1\n_HOSTNAME=h1\nMESSAGE=plain\n\n", "h2": binary}


def test_an_entry_without_a_host_is_one_clear_error() -> None:
    with pytest.raises(UsageError, match="without _HOSTNAME"):
        by_host(b"__CURSOR=c1\nMESSAGE=plain\n\n")


@needs_remote
def test_simulator_option_writes_the_collection(tmp_path: Path) -> None:
    out, remote = tmp_path / "fleet", tmp_path / "remote"
    argv = [
        NAME,
        "--out",
        str(out),
        "--now",
        "2026-11-29T12:10:00Z",
        "--no-plain",
        "--journal-remote",
        str(remote),
    ]
    assert simulate_main(argv) == 0
    assert (out / "journal.export").read_bytes() == (FIXTURE / "journal.export").read_bytes()
    files = sorted(remote.glob("remote-*.journal"))
    assert len(files) == 16 and all(f.stat().st_size > 0 for f in files)


@needs_remote
def test_cli_simulate_writes_the_collection_and_names_ingest_d(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pdforensics.cli import app

    out, remote = tmp_path / "fleet", tmp_path / "remote"
    args = [
        "simulate",
        NAME,
        "--out",
        str(out),
        "--now",
        "2026-11-29T12:10:00Z",
        "--journal-remote",
        str(remote),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert f"-D {remote}" in res.stdout
    assert sorted(p.name for p in remote.iterdir()) == sorted(
        f"remote-{h}.journal" for h in expected()["hosts"]
    )


# ---- the ground truth itself -----------------------------------------------------------------------


def test_the_router_spreads_each_instance_over_several_peers() -> None:
    exp = expected()
    decodes_of, prefills_of = defaultdict(set), defaultdict(set)
    for pair in exp["pairs"].values():
        decodes_of[pair["prefill"]].add(pair["decode"])
        prefills_of[pair["decode"]].add(pair["prefill"])
    assert len(decodes_of) == 8 and all(len(d) >= 3 for d in decodes_of.values())
    assert len(prefills_of) == 8 and all(len(p) >= 3 for p in prefills_of.values())
    assert set(exp["pairs"]) == {r["bootstrap_room"] for r in exp["requests"]}
    # at least one prefill never sends to the restarted decode and has nothing stuck
    calm = {i["host"] for i in exp["instances"] if i["verdict"] == "nothing_stuck"}
    assert any("d-node-03" not in decodes_of[h] for h in calm)


def test_instances_follow_the_build_of_each_prefill() -> None:
    exp = expected()
    inst = {i["host"]: i for i in exp["instances"]}
    assert [i["host"] for i in exp["instances"]] == sorted(
        inst, key=lambda h: (["watchdog_missed", "inconclusive", "watchdog_fired", "nothing_stuck"].index(
            inst[h]["verdict"]), h)
    )  # fmt: skip
    assert exp["verdict"] == exp["instances"][0]["verdict"] == "watchdog_missed"
    patched = {f"p-node-0{k}" for k in range(1, 5)}
    for host, i in inst.items():
        assert i["watchdog"]["deployed"] is (host in patched) and i["watchdog"]["timeout_s"] == 60.0
        # a patched build never holds a pin silently; a stock build never fires
        assert i["verdict"] != ("watchdog_missed" if host in patched else "watchdog_fired"), i
    rows = Counter((exp["pairs"][r["bootstrap_room"]]["prefill"], r["class"]) for r in exp["requests"])
    for host, i in inst.items():
        assert {c: n for c, n in i["counts"].items() if n and c != "requests"} == {
            c: n for (h, c), n in rows.items() if h == host
        }
    assert {i["verdict"] for i in exp["instances"]} == {"watchdog_missed", "watchdog_fired", "nothing_stuck"}


def test_both_legs_name_the_prefill_as_bootstrap_host() -> None:
    """sgl-router injects the prefill's address into both legs: one address per prefill host."""
    exp = expected()
    seen: dict[str, set[tuple[str, str]]] = defaultdict(set)  # room -> {(host, bootstrap_host)}
    for line in (FIXTURE / "journal.json").read_text().splitlines():
        e = json.loads(line)
        m = re.search(
            r"Receive: obj=.*bootstrap_host='([\d.]+)', bootstrap_port=\d+, bootstrap_room=(\d+),",
            str(e["MESSAGE"]),
        )
        if m and m.group(2) in exp["pairs"]:
            seen[m.group(2)].add((e["_HOSTNAME"], m.group(1)))
    address: dict[str, set[str]] = defaultdict(set)
    for room, legs in seen.items():
        pair = exp["pairs"][room]
        assert {h for h, _ in legs} == {pair["prefill"], pair["decode"]}, room
        assert len({ip for _, ip in legs}) == 1, (room, legs)
        address[pair["prefill"]] |= {ip for _, ip in legs}
    assert len(address) == 8 and all(len(a) == 1 for a in address.values())
    assert len(set().union(*address.values())) == 8


# ---- pdforensics on the collection -------------------------------------------------------------------


def test_every_request_class_and_the_window_verdict(ingested, rows) -> None:
    got = ingested[2]
    exp = expected()
    assert got["verdict"] == exp["verdict"], got["reasons"]
    wrong = {
        r["bootstrap_room"]: (r["class"], rows.get(r["bootstrap_room"], {}).get("class"))
        for r in exp["requests"]
        if rows.get(r["bootstrap_room"], {}).get("class") != r["class"]
    }
    assert not wrong, wrong
    assert set(rows) == {r["bootstrap_room"] for r in exp["requests"]}
    counts = Counter(r["class"] for r in exp["requests"])
    for cls in ("watchdog_fired", "silent_pin", "lost", "undecided"):
        assert got["counts"][cls] == counts[cls], (cls, got["counts"])


def test_no_room_is_joined_across_the_wrong_pair(rows) -> None:
    wrong = {
        room: (pair, (rows[room]["p_host"], rows[room]["d_host"]))
        for room, pair in expected()["pairs"].items()
        if (rows[room]["p_host"], rows[room]["d_host"]) != (pair["prefill"], pair["decode"])
    }
    assert not wrong, wrong


def test_one_verdict_per_prefill_instance(ingested) -> None:
    """The contract's `instances` (the lead's per-instance verdict): host, verdict, watchdog and counts
    of each prefill, worst first, then host."""
    _, _, got = ingested
    assert "instances" in got, "verdict.to_json() has no `instances` key (per-instance verdicts)"
    want = expected()["instances"]
    assert [i["host"] for i in got["instances"]] == [i["host"] for i in want]
    for g, w in zip(got["instances"], want, strict=True):
        assert g["engine"] == w["engine"] and g["verdict"] == w["verdict"], (g, w)
        assert g["watchdog"]["deployed"] == w["watchdog"]["deployed"], (g["host"], g["watchdog"])
        assert g["watchdog"]["timeout_s"] == w["watchdog"]["timeout_s"], (g["host"], g["watchdog"])
        assert {k: g["counts"].get(k) for k in w["counts"]} == w["counts"], (g["host"], g["counts"])


def test_the_window_says_on_which_instances_the_watchdog_is_deployed(ingested) -> None:
    """Builds differ (p-node-01..04 patched): the window's `deployed` is true of those only, and it
    says so in the JSON, the text and the report's banner; the recovery under a `watchdog_missed`
    verdict is each firing path's, never the window's `Recovered`."""
    from pdforensics.report.html import banner
    from tests.test_cli import run

    db, _, got = ingested
    on = f"4 of 8 prefill instances ({', '.join(f'p-node-0{k}' for k in range(1, 5))})"
    assert got["watchdog"]["deployed_on"] == on
    assert got["verdict"] == "watchdog_missed" and got["watchdog"]["recovery"] == "drained"
    text = run("verdict", "--db", str(db), "--watchdog-timeout", "60").stdout
    assert f"deployed: on {on}" in text and "deployed: yes" not in text, text
    html = banner(got)
    assert f"deployed on {on}" in html
    assert "Recovered" not in html and "per path: p-node-02 → d-node-03: drained" in html


def test_the_text_verdict_names_each_requests_prefill_and_decode_host(scenario_db) -> None:
    """Issue 28, item 3: the requests `verdict` prints name their pair, as `--json requests[]` does."""
    from pdforensics.verdict import compute_verdict, render_text

    con = store.open_db(scenario_db("json", NAME), read_only=True)
    try:
        v = compute_verdict(con, VerdictOptions(watchdog_timeout_s=60))
    finally:
        con.close()
    text = render_text(v).splitlines()
    head = text.index(next(x for x in text if x.startswith("requests not completed")))
    assert "prefill -> decode host" in text[head + 1]
    rows = {x.split()[0]: x for x in text[head + 2 : head + 2 + len(v.requests)]}
    assert len(rows) == len(v.requests) == 9
    for r in v.requests:
        assert r["prefill_host"] and r["decode_host"]
        assert f"  {r['prefill_host']} -> {r['decode_host']} " in rows[r["bootstrap_room"]]


# ---- the same fleet with one prefill's journal missing (issue 26, "the universe of instances") ----

MISSING = "fleet_prefill_journal_missing"


def _missing_instance(exp: dict) -> dict:
    return next(i for i in exp["instances"] if i.get("observed") is False)


def _verdict_json(db: Path, **window: int) -> dict:
    from pdforensics.verdict import compute_verdict

    con = store.open_db(db, read_only=True)
    try:
        return compute_verdict(con, VerdictOptions(watchdog_timeout_s=60, **window)).to_json()
    finally:
        con.close()


def test_a_prefill_no_journal_holds_is_an_instance_named_by_its_decodes(scenario_db) -> None:
    """Every instance of the truth, the missing one as its address (`observed` false, named by the
    decodes it sent to); its requests are undecided and on no other prefill's account."""
    exp = json.loads((fixtures_dir() / MISSING / "expected.json").read_text())
    got = _verdict_json(scenario_db("json", MISSING))
    assert [(i["host"], i["verdict"]) for i in got["instances"]] == [
        (i["host"], i["verdict"]) for i in exp["instances"]
    ]
    gone, want = _missing_instance(got), _missing_instance(exp)
    assert gone["host"] == want["host"] == "10.0.30.15"
    assert gone["named_by"] == want["named_by"] and len(want["named_by"]) == 4
    theirs = {room for room, pair in exp["pairs"].items() if pair["prefill"] == "p-node-05"}
    rows = {r["bootstrap_room"]: r for r in got["requests"]}
    assert theirs and theirs <= set(rows)
    assert {(rows[r]["class"], rows[r]["prefill_host"]) for r in theirs} == {("undecided", None)}
    assert all("names has no line in the data" in rows[r]["undecided_reason"] for r in theirs)


def test_a_window_after_the_incident_still_names_the_missing_prefill(scenario_db) -> None:
    """From 250 s (every firing and pin is before it): the observed instances that only fired or
    completed are calm, p-node-08 still holds its pins, and the missing instance is still there,
    `inconclusive`: what it holds is not seen in any window."""
    exp = json.loads((fixtures_dir() / MISSING / "expected.json").read_text())
    since = exp["window"]["since_us"] + 250_000_000
    got = _verdict_json(scenario_db("json", MISSING), since_us=since, until_us=exp["window"]["until_us"])
    verdicts = {i["host"]: i["verdict"] for i in got["instances"]}
    assert verdicts.pop("10.0.30.15") == "inconclusive"
    assert verdicts.pop("p-node-08") == "watchdog_missed"
    assert set(verdicts.values()) == {"nothing_stuck"} and len(verdicts) == 6
    assert got["verdict"] == "watchdog_missed"
