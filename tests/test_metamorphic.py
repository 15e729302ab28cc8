"""Metamorphic suite (issue 26): losing, mangling or mixing evidence never earns a greener answer.

Over every simulated scenario (fixtures/*/expected.json), each mutation of
`pdforensics.simulate.mutate`, at several positions, is applied to the scenario's journal entries
(or, for the CRI cut, to its plain logs written as a CRI container log); the original and the
mutated input are each ingested into a fresh database and judged. Then:

* the window's verdict is not greener than the original's, in the order
  `nothing_stuck` > `watchdog_fired` > `inconclusive` = `watchdog_missed`;
* every prefill instance of the original is, in the mutated verdict, not greener either; an
  instance that vanished is a failure while something still names it (its own prefill lines, or
  its address in another line's `bootstrap_host`: what exists is every instance a line names);
* no request that was not `completed` becomes `completed` (absent from the verdict's requests
  although a line in the judged window still names its room). For two concatenated deployments,
  per deployment: a room pinned in one must stay open for that one, whatever the other did
  (rows are told apart by their rids).

A concatenation is judged against the worse of its two deployments' original verdicts.

The grid (`GRID`: scenario x mutation x position, deterministic) has ~700 cases at ~2 s of CPU each
(the fleet's ~15 s), and each scenario's original verdict costs as much again. By default (what
`.ci/run` runs) a fixed seeded share of it runs: `random.Random(26)` draws `SAMPLE_SCENARIOS`
scenarios, then `SAMPLE` of their cases (~85 s of CPU); `PDF_METAMORPHIC=all` runs the whole grid:

    PDF_METAMORPHIC=all .venv/bin/pytest tests/test_metamorphic.py -q -rf

A failure's first line names the scenario, the mutation with its parameters, both verdicts, the
rooms that moved to `completed` and the instances that got greener or vanished; the next lines give
the instances before and after and the mutated verdict's first reasons.

Positions: stretches start at 20/50/80 % of one engine unit's lines (prefill, decode, prefill;
an eighth of its lines long); times (field removal, restart) at 25/50/75 % of one prefill host's
lines; hosts, units and rooms are spread over their sorted lists. Clock shifts (+30 s, -5 min,
+5 min) run on scenarios with several hosts only: shifting the one host of a single-host scenario
shifts the whole incident, which is no mutation. `drop_unit` runs where a host has several engine
units (elsewhere dropping the host is the same thing). Concatenations: the scenario with itself
(same start, and half its lines later) and with `healthy` (its rooms and addresses mapped onto the
scenario's). The CRI cut's original is the same logs as whole `F` records; plain logs that are CRI
logs already (`cri_split_records`) are read back into whole lines first. `non_pd_prefill_name`
stays in: no mutation of a log the tool cannot judge may make it green.

`dst_shift` (issue 29): each scenario the simulator builds, re-simulated with its hosts' local time
in Europe/Berlin and `now` at tests/test_dst.py's `SIMULATED_CHANGE` (01:03Z, 3 min after 03:00 CEST
became 02:00 CET: an incident of 5 min or more runs through the change, its plain files show
02:00-03:00 twice; short_window's 40 s lie in the second pass only). Its original is the
re-simulation's journal (UTC instants); the case reads its plain files with `--tz Europe/Berlin`.
Both take the re-simulation's expected.json for their options and ingest windows; the plain files
hold every SGLang line the journal does (not systemd's own), so the case is checked as the CRI cut
is (no instance may go missing, every open room must stay open). Where the plain files hold
lines journald dropped (`by_input.plain`: hole_hides_firing's firing, which they rightly report),
the journal is no original for them: the same re-simulation's plain files in UTC (no repeated hour)
are. Re-simulations are made once per scenario (and zone) per session.

Each case ingests into a copy of an empty database on which the views are already installed (made
once per session): the same schema and views a fresh ingest creates, without its second of
installing them. Original verdicts are computed once per scenario per session.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.paths import fixtures_dir
from pdforensics.simulate import SCENARIOS as SIMULATED
from pdforensics.simulate import mutate as mu
from pdforensics.simulate import simulate, simulate_plain
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source
from pdforensics.timewindow import parse_instant
from pdforensics.verdict import compute_verdict, install_views
from tests.test_dst import SIMULATED_CHANGE
from tests.test_scenarios import expected_of, options, windows

ENV = "PDF_METAMORPHIC"
SAMPLE, SAMPLE_SCENARIOS = 22, 8
SEED = 26
GREENNESS = {"nothing_stuck": 2, "watchdog_fired": 1, "inconclusive": 0, "watchdog_missed": 0}
SCENARIOS = sorted(p.name for p in fixtures_dir().iterdir() if (p / "expected.json").is_file())
STRETCH_STARTS = (0.2, 0.5, 0.8)
TIME_POINTS = (0.25, 0.5, 0.75)
CLOCK_SHIFTS_S = (30, -300, 300)
CRI_STYLES = ("walk", "walk2", "edges")
PARTNER, PARTNER_OF_PARTNER = "healthy", "abort_storm_clean"
DST_ZONE = "Europe/Berlin"


def greener(a: str, b: str) -> bool:
    return GREENNESS[a] > GREENNESS[b]


# ------------------------------------------------------------------ the grid


@dataclass(frozen=True)
class Case:
    scenario: str
    mutation: str
    params: tuple[tuple[str, Any], ...]

    def __getitem__(self, key: str) -> Any:
        return dict(self.params)[key]

    @property
    def id(self) -> str:
        return f"{self.scenario}-{self.mutation}-" + ",".join(str(v) for _, v in self.params)

    def __str__(self) -> str:
        return f"{self.mutation}({', '.join(f'{k}={v!r}' for k, v in self.params)})"


@cache
def entries_of(scenario: str) -> list[mu.Entry]:
    return mu.read_entries(fixtures_dir() / scenario / "journal.json")


def spread(items: list, k: int, n: int = 3) -> Any:
    """The k-th of n picks spread over `items` (first, middle, last)."""
    return items[(k * (len(items) - 1) + (n - 1) // 2) // (n - 1)]


def unit_lines(entries: list[mu.Entry], host: str, unit: str) -> list[mu.Entry]:
    return [e for e in entries if e.get("_HOSTNAME") == host and e.get("_SYSTEMD_UNIT") == unit]


def cases_of(scenario: str) -> list[Case]:
    entries = entries_of(scenario)
    exp = expected_of(scenario)
    hosts = mu.hosts(entries)
    prefills = mu.engine_units(entries, "prefill")
    decodes = mu.engine_units(entries, "decode")
    units = mu.engine_units(entries)
    out: list[Case] = []

    def add(mutation: str, **params: Any) -> None:
        case = Case(scenario, mutation, tuple(params.items()))
        if case not in out:
            out.append(case)

    for told in (False, True):
        for k, start in enumerate(STRETCH_STARTS):
            pool = (decodes if k == 1 else prefills) or units
            host, unit = spread(pool, k)
            n = len(unit_lines(entries, host, unit))
            add("delete_stretch", told=told, host=host, unit=unit, start=int(n * start), count=max(5, n // 8))
    if len(hosts) > 1:
        for k in range(min(3, len(hosts))):
            add("drop_host", host=spread(hosts, k))
    shared = [(h, u) for h, u in units if sum(h == other for other, _ in units) > 1]
    for k in range(min(3, len(shared))):
        host, unit = spread(shared, k)
        add("drop_unit", host=host, unit=unit)
    done = mu.decode_completed_rooms(entries)
    ended = mu.prefill_ended_rooms(entries)
    ends = sorted((t, room) for room, t in done.items() if room in ended)
    if ends:
        rooms = [spread(ends, k)[1] for k in range(3)]
        open_rooms = {int(r["bootstrap_room"]) for r in exp["requests"] if r["class"] != "completed"}
        pinned = [room for _, room in ends if room in open_rooms]
        if pinned and pinned[0] not in rooms:  # a room the truth holds open: the telling case
            rooms[1] = pinned[0]
        for room in rooms:
            add("drop_prefill_end", room=room)
    for k, at in enumerate(TIME_POINTS):
        if not prefills:
            break
        host, unit = spread(prefills, k)
        lines = unit_lines(entries, host, unit)
        if int(len(lines) * at) == 0:
            continue
        t = mu.ts(lines[int(len(lines) * at)])
        if any(mu.body(e).startswith("Prefill batch") and mu.QUEUE_FIELD.search(mu.body(e)) for e in lines):
            add("strip_queue_field", host=host, since_us=t)
        add("restart_onto_build_without_field", host=host, at_us=t)
    first = min(mu.ts(e) for e in entries)
    middle = sorted(mu.ts(e) for e in entries)[len(entries) // 2]
    add("concatenate", second=scenario, offset_s=0)
    add("concatenate", second=scenario, offset_s=(middle - first) // 1_000_000)
    partner = PARTNER if scenario != PARTNER else PARTNER_OF_PARTNER
    start_b = min(mu.ts(e) for e in entries_of(partner))
    add("concatenate", second=partner, offset_s=round((first - start_b) / 1e6), collide=True)
    if len(hosts) > 1:
        for k, delta in enumerate(CLOCK_SHIFTS_S):
            add("shift_clock", host=spread(hosts, k), delta_s=delta)
    if sorted((fixtures_dir() / scenario / "plain").glob("*.log")):
        for style in CRI_STYLES:
            add("cri_cut", style=style)
    if scenario in SIMULATED:  # the simulator re-runs it in local time across the DST change
        add("dst_shift", tz=DST_ZONE, now=SIMULATED_CHANGE)
    return out


def sample(grid: list[Case]) -> list[Case]:
    """The default share: `SAMPLE` cases of `SAMPLE_SCENARIOS` scenarios, both drawn by
    `random.Random(SEED)` (a scenario's original verdict costs as much as a case, so the cases
    share few originals)."""
    rng = random.Random(SEED)
    scenarios = set(rng.sample(SCENARIOS, SAMPLE_SCENARIOS))
    pool = [c for c in grid if c.scenario in scenarios]
    return rng.sample(pool, min(SAMPLE, len(pool)))


GRID = [case for scenario in SCENARIOS for case in cases_of(scenario)]
CASES = GRID if os.environ.get(ENV) == "all" else sample(GRID)

# Families the evidence model does not reach yet, found by the whole grid (issue 26's closing note
# says what each needs). Each is a known wrong answer, kept visible: a listed case that starts to
# pass fails here (strict), and its entry must go.
KNOWN_GAPS: dict[str, str] = {
    "two_deployments_colliding_rooms-shift_clock-dc2-prefill-0,300": (
        "two deployments share no room that places a clock (their shared rooms are left out of the "
        "pairs), so dc1's hosts keep offset 0 ('assumed') while dc2's are placed on dc2-prefill-0's clock: "
        "shifted 300 s, dc2's request of the room dc1 received 2.5 s later reads 300 s apart, is placed by "
        "time and completed (the truth, but not earned). Needs: time rules a decode side out only between "
        "hosts whose clocks are linked; the scenario's expected placement by time would then change"
    ),
}


def marked(case: Case) -> object:
    if case.id in KNOWN_GAPS:
        return pytest.param(case, marks=pytest.mark.xfail(reason=KNOWN_GAPS[case.id], strict=True))
    return case


# ------------------------------------------------------------------ judging


@dataclass
class Judged:
    verdict: str
    instances: dict[str, str]  # prefill host -> its verdict
    requests: list[dict[str, Any]]  # the rows not completed
    window: tuple[int | None, int | None]
    reasons: list[str]


@cache
def catalog():
    return load_catalog()


@cache
def empty_db() -> Path:
    """An empty database with the views installed: what every ingest here starts from."""
    work = tempfile.mkdtemp(prefix="pdf-metamorphic-")
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    path = Path(work) / "empty.duckdb"
    con = store.open_db(path)
    try:
        install_views(con)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return path


def judge(exp: dict, work: Path, feed: Callable[[Path, Any], None]) -> Judged:
    """Ingest (one run per ingest window of the scenario, `feed(db, window)`) and judge."""
    db = work / "case.duckdb"
    shutil.copyfile(empty_db(), db)
    for window in windows(exp):
        feed(db, window)
    con = store.open_db(db, read_only=True)
    try:
        v = compute_verdict(con, options(exp))
    finally:
        con.close()
    got = v.to_json()
    return Judged(
        verdict=got["verdict"],
        instances={i["host"]: i["verdict"] for i in got["instances"]},
        requests=[r for r in got["requests"] if r["class"] != "completed"],
        window=(v.window_start_us, v.window_end_us),
        reasons=got["reasons"],
    )


def judge_entries(entries: list[mu.Entry], exp: dict, work: Path) -> Judged:
    path = work / "journal.json"
    mu.write_entries(entries, path)

    def feed(db: Path, window: Any) -> None:
        ingest(db, [open_file_source(path)], Selection(window=window), catalog(), views=False)

    return judge(exp, work, feed)


def plain_logs(scenario: str) -> list[tuple[str, str, list[bytes], list[str] | None]]:
    """(host, unit, lines, their CRI times when the file is a CRI log already) of each plain log."""
    exp = expected_of(scenario)
    out = []
    for log in sorted((fixtures_dir() / scenario / "plain").glob("*.log")):
        host = next(h for h in exp["hosts"] if log.name.startswith(h + "-"))
        lines = log.read_bytes().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        cri = mu.cri_lines(lines)
        stamps = None
        if cri is not None:  # the scenario's own pod logs: cut its whole lines anew
            lines, stamps = cri
        out.append((host, log.stem[len(host) + 1 :], lines, stamps))
    return out


def utc_offset_s(tz: str) -> float:
    sign = -1 if tz.startswith("-") else 1
    hours, minutes = tz.lstrip("+-").split(":")
    return sign * (int(hours) * 3600 + int(minutes) * 60)


def cuts_of(style: str, lines: list[bytes]) -> list[list[int]]:
    if style == "edges":
        return mu.edge_cuts(lines)
    return mu.walk_cuts(lines, seed=len(style), pieces=2 if style == "walk2" else 1)


def judge_cri(scenario: str, style: str | None, work: Path) -> Judged:
    """The plain logs as CRI container logs (one per unit), each line cut as `style` says (None:
    whole `F` records), ingested as test_scenarios ingests plain files (each with its host's zone)."""
    exp = expected_of(scenario, "plain")
    files = []
    for host, unit, lines, cri_stamps in plain_logs(scenario):
        tz = exp["hosts"][host]["tz"]
        stamps = cri_stamps or mu.cri_stamps(lines, utc_offset_s(tz))
        path = work / f"{host}-{unit}.log"
        path.write_bytes(mu.cri_records(lines, stamps, cuts_of(style, lines) if style else None))
        files.append((path, host, unit, tz))

    def feed(db: Path, window: Any) -> None:
        for path, host, unit, tz in files:
            source = open_file_source(path, host=host, unit=unit)
            ingest(db, [source], Selection(window=window), catalog(), tz=tz, views=False)

    return judge(exp, work, feed)


@cache
def baseline(scenario: str) -> Judged:
    with tempfile.TemporaryDirectory() as work:
        return judge_entries(entries_of(scenario), expected_of(scenario), Path(work))


@cache
def cri_baseline(scenario: str) -> Judged:
    with tempfile.TemporaryDirectory() as work:
        return judge_cri(scenario, None, Path(work))


@cache
def dst_run(scenario: str, zone: str = DST_ZONE) -> Path:
    """The scenario re-simulated with its hosts' local time in `zone` and `now` at
    `SIMULATED_CHANGE`: journal.json, expected.json and plain/ (once per session, removed at exit)."""
    work = tempfile.mkdtemp(prefix=f"pdf-metamorphic-dst-{scenario}-")
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    now = parse_instant(SIMULATED_CHANGE, 0)
    out = simulate(scenario, Path(work), now_us=now, tz=zone, formats=("json",))
    simulate_plain(scenario, out, now_us=now, tz=zone)
    return out


@cache
def dst_entries(scenario: str) -> list[mu.Entry]:
    return mu.read_entries(dst_run(scenario) / "journal.json")


@cache
def dst_expected(scenario: str) -> dict:
    return json.loads((dst_run(scenario) / "expected.json").read_text())


@cache
def dst_baseline(scenario: str) -> Judged:
    """The re-simulation's journal, judged; where its plain files hold what journald dropped
    (`by_input.plain`: they answer otherwise, and rightly), the same plain files in UTC instead."""
    with tempfile.TemporaryDirectory() as work:
        if "plain" in dst_expected(scenario).get("by_input", {}):
            return judge_dst_plain(scenario, Path(work), "UTC")
        return judge_entries(dst_entries(scenario), dst_expected(scenario), Path(work))


def judge_dst_plain(scenario: str, work: Path, zone: str = DST_ZONE) -> Judged:
    """The plain files of the re-simulation in `zone`, read with `--tz zone` as test_scenarios
    reads plain files (one ingest per file per window); options and windows from `DST_ZONE`'s."""
    exp = dst_expected(scenario)
    files = []
    for log in sorted((dst_run(scenario, zone) / "plain").glob("*.log")):
        host = next(h for h in exp["hosts"] if log.name.startswith(h + "-"))
        files.append((log, host, log.stem[len(host) + 1 :]))

    def feed(db: Path, window: Any) -> None:
        for log, host, unit in files:
            source = open_file_source(log, host=host, unit=unit)
            ingest(db, [source], Selection(window=window), catalog(), tz=zone, views=False)

    return judge(exp, work, feed)


# ------------------------------------------------------------------ mutating


def mutated(case: Case) -> tuple[list[mu.Entry], mu.Concatenation | None]:
    entries = entries_of(case.scenario)
    p = dict(case.params)
    if case.mutation == "concatenate":
        second = entries_of(p["second"])
        rooms, addresses = {}, {}
        if p.get("collide"):  # another scenario's rooms and addresses mapped onto this one's
            rooms = dict(zip(mu.rooms_by_appearance(second), mu.rooms_by_appearance(entries), strict=False))
            ours = sorted(mu.prefill_addresses(entries).values())
            theirs = sorted(mu.prefill_addresses(second).values())
            if ours:
                addresses = {a: ours[i % len(ours)] for i, a in enumerate(theirs)}
        conc = mu.concatenate(entries, second, p["offset_s"], rooms=rooms, addresses=addresses)
        return conc.entries, conc
    fn = getattr(mu, case.mutation)
    return fn(entries, **p), None


# ------------------------------------------------------------------ the relations


def in_window(entries: list[mu.Entry], window: tuple[int | None, int | None]) -> list[mu.Entry]:
    """The entries the verdict judged: inside its window (ingest windows drop the others)."""
    lo, hi = window
    return [e for e in entries if (lo is None or mu.ts(e) >= lo) and (hi is None or mu.ts(e) <= hi)]


def rooms_named(entries: list[mu.Entry]) -> set[int]:
    return {room for e in entries for room in mu.rooms_in(mu.text(e))}


def same(x: Any) -> Any:
    return x


@dataclass
class Deployment:
    """One deployment's original judgement and how its names read in the mutated input."""

    label: str
    scenario: str
    judged: Judged
    addresses: dict[str, str]  # prefill host -> address (as the mutated input names it)
    host: Callable[[str], str] = same
    room: Callable[[int], int] = same
    rid: Callable[[str | None], str | None] = same


def instance_problems(dep: Deployment, got: Judged, entries: list[mu.Entry] | None) -> list[str]:
    out = []
    named = set()
    prefill_hosts = set()
    if entries is not None:
        # An address names a missing instance unless an instance the verdict lists holds it
        # (concatenated deployments share addresses).
        claimed = {a for h, a in mu.prefill_addresses(entries).items() if h in got.instances}
        named = {a for e in entries for a in mu.ADDRESS.findall(mu.text(e))} - claimed
        prefill_hosts = {e.get("_HOSTNAME") for e in entries if mu.engine_of(e) == "prefill"}
    for host, was in dep.judged.instances.items():
        here, address = dep.host(host), dep.addresses.get(host)
        now = got.instances.get(here) or (got.instances.get(address) if address else None)
        if now is None:
            if entries is None or here in prefill_hosts or (address and address in named):
                why = "its prefill lines remain" if here in prefill_hosts else f"lines still name {address}"
                if entries is None:
                    why = "the same lines were ingested"
                out.append(f"instance {here} ({was}) is missing, though {why}")
        elif greener(now, was):
            out.append(f"instance {here}: {was} -> {now}")
    return out


def moved_rooms(
    deps: list[Deployment], got: Judged, named: set[int] | None, text: str | None = None
) -> list[str]:
    """Rooms open in a deployment's original that no open row of the mutated verdict holds. A row
    whose every line is gone (its rids named nowhere in the mutated `text`) needs none: another
    host's lines may still name its room (two deployments' requests of one room)."""
    needs: dict[int, list[tuple[Deployment, dict[str, Any]]]] = {}
    for dep in deps:
        for row in dep.judged.requests:
            room = dep.room(int(row["bootstrap_room"]))
            rids = {dep.rid(row["prefill_rid"]), dep.rid(row["decode_rid"])} - {None}
            if text is not None and rids and not any(rid in text for rid in rids):
                continue
            if named is None or room in named:
                needs.setdefault(room, []).append((dep, row))
    rows: dict[int, list[dict[str, Any]]] = {}
    for row in got.requests:
        rows.setdefault(int(row["bootstrap_room"]), []).append(row)
    out = []
    for room, wanting in sorted(needs.items()):
        free = list(rows.get(room, []))
        rids = [{dep.rid(row["prefill_rid"]), dep.rid(row["decode_rid"])} - {None} for dep, row in wanting]
        unmet = []
        for (dep, row), mine in zip(wanting, rids, strict=True):
            match = next((r for r in free if {r["prefill_rid"], r["decode_rid"]} & mine), None)
            if match is None:
                unmet.append((dep, row))
            else:
                free.remove(match)
        anyone = set().union(*rids)
        free = [r for r in free if not ({r["prefill_rid"], r["decode_rid"]} & anyone)]
        for dep, row in unmet:
            if free:
                free.pop(0)
                continue
            who = f"{dep.label}:" if len(deps) > 1 else ""
            out.append(f"{who}{room} ({row['class']} -> completed)")
    return out


def check(case: Case, deps: list[Deployment], got: Judged, entries: list[mu.Entry] | None) -> None:
    judged = None if entries is None else in_window(entries, got.window)
    seen = None if judged is None else {e.get("_HOSTNAME") for e in judged}
    # The window answers for the deployments it holds lines of (an ingest window may leave one out).
    bound = [d for d in deps if seen is None or {d.host(h) for h in mu.hosts(entries_of(d.scenario))} & seen]
    worst = min((d.judged.verdict for d in bound or deps), key=GREENNESS.__getitem__)
    was = " + ".join(f"{d.label}={d.judged.verdict}" for d in deps) if len(deps) > 1 else worst
    problems = []
    if greener(got.verdict, worst):
        problems.append(f"window {worst} -> {got.verdict}")
    for dep in deps:
        problems += instance_problems(dep, got, judged)
    named = None if judged is None else rooms_named(judged)
    text = None if judged is None else "\n".join(mu.text(e) for e in judged)
    moved = moved_rooms(deps, got, named, text)
    if problems or moved:
        head = (
            f"METAMORPHIC {case.scenario} | {case} | {was} -> {got.verdict} | "
            f"moved to completed: {', '.join(moved) or '-'} | {'; '.join(problems) or '-'}"
        )
        detail = [
            f"instances before: {' + '.join(str(d.judged.instances) for d in deps)}",
            f"instances after: {got.instances}",
            *(f"reason: {r}" for r in got.reasons[:4]),
        ]
        pytest.fail("\n".join([head, *detail]), pytrace=False)


@pytest.mark.parametrize("case", [marked(c) for c in CASES], ids=lambda c: c.id)
def test_mutation_is_never_greener(case: Case, tmp_path: Path) -> None:
    if case.mutation == "cri_cut":
        orig = cri_baseline(case.scenario)
        got = judge_cri(case.scenario, case["style"], tmp_path)
        check(case, [Deployment("", case.scenario, orig, {})], got, None)
        return
    if case.mutation == "dst_shift":
        orig = dst_baseline(case.scenario)
        got = judge_dst_plain(case.scenario, tmp_path)
        addresses = mu.prefill_addresses(dst_entries(case.scenario))
        check(case, [Deployment("", case.scenario, orig, addresses)], got, None)
        return
    entries, conc = mutated(case)
    got = judge_entries(entries, expected_of(case.scenario), tmp_path)
    first = Deployment(
        "A", case.scenario, baseline(case.scenario), mu.prefill_addresses(entries_of(case.scenario))
    )
    deps = [first]
    if conc is not None:
        second = case["second"]
        addresses = {h: conc.addresses.get(a, a) for h, a in mu.prefill_addresses(entries_of(second)).items()}
        deps.append(
            Deployment(
                "B",
                second,
                baseline(second),
                addresses,
                host=lambda h: conc.hosts.get(h, h),
                room=lambda r: conc.rooms.get(r, r),
                rid=conc.rid,
            )
        )
    check(case, deps, got, entries)


def test_grid_covers_every_scenario_and_mutation() -> None:
    """The grid is what the issue asks: every scenario, every mutation, several positions."""
    assert {c.scenario for c in GRID} == set(SCENARIOS)
    kinds = {c.mutation for c in GRID}
    assert kinds == {
        "delete_stretch", "drop_host", "drop_unit", "drop_prefill_end", "strip_queue_field",
        "restart_onto_build_without_field", "concatenate", "shift_clock", "cri_cut", "dst_shift",
    }  # fmt: skip
    dst = [c.scenario for c in GRID if c.mutation == "dst_shift"]  # one per scenario the simulator builds
    assert dst and sorted(dst) == sorted(set(SCENARIOS) & set(SIMULATED))
    assert len({c.id for c in GRID}) == len(GRID)
