"""expected.json: the ground truth of a scenario, in the shape docs/internals.md documents.

Classes follow design.md §3 (first match wins) and are decided from what really happened by
the window end. A request is listed when at least one journal line names its room; a rid
only when a line on that engine names it. The simulator refuses a scenario whose open
requests sit too close to the watchdog timeout to classify without argument.
"""

from __future__ import annotations

import io
import json

import polars as pl

from pdforensics.simulate.model import INF, EngineCfg, Fleet, World

# An open request must be this far from the timeout on either side (seconds).
MARGIN_S = 15.0

# the verdict's grace after the timeout (VerdictOptions.grace_s)
GRACE_S = 10.0

ABORTS_P = ["boot_abort", "wait_abort", "inflight_abort"]
ABORTS_D = ["handshake_abort", "transfer_abort", "running_abort"]


class AmbiguousScenario(ValueError):
    """A request's class would depend on the verdict's grace period."""


def _seen(w: World, eng: EngineCfg, t: pl.Expr, end: float, lo: float = 0.0) -> pl.Expr:
    ok = (t >= lo) & (t <= end)
    for h in w.holes:
        if h.host is eng.host and h.unit == eng.unit:
            ok = ok & ~((t >= h.t0) & (t < h.t1))
    return ok


def _event_rooms(w: World, eng: EngineCfg, end: float, lo: float = 0.0) -> tuple[set[int], set[int]]:
    """Rooms (and rooms with their rid) that explicit lines of this engine name in the journal."""
    rooms, rids = set(), set()
    for e in w.events:
        if e.room is None or e.engine != eng.role or not lo <= e.t <= end:
            continue
        if any(h.host is eng.host and h.unit == eng.unit and h.t0 <= e.t < h.t1 for h in w.holes):
            continue
        rooms.add(e.room)
        if e.rid:
            rids.add(e.room)
    return rooms, rids


def _visible(w: World, eng: EngineCfg, side: str, end: float, lo: float = 0.0) -> tuple[pl.Expr, pl.Expr]:
    recv, fin = pl.col(f"{side}_recv"), pl.col(f"{side}_fin")
    lines = pl.lit(False)
    if eng.log_requests:  # until a runtime `Config logging` turns the request log off
        logged = min(end, eng.log_requests_until)
        lines = _seen(w, eng, recv, logged, lo) | _seen(w, eng, fin, logged, lo)
    if eng.time_stats:
        lines = lines | ((pl.col(f"{side}_out") == "ok") & _seen(w, eng, fin, end, lo))
    if side == "d":
        lines = lines & (pl.col("d_out") != "hc503")
    rooms, rids = _event_rooms(w, eng, end, lo)
    room = pl.col("room")
    return lines | room.is_in(list(rooms)), lines | room.is_in(list(rids))


def _in_holes(w: World, eng: EngineCfg, t: pl.Expr) -> pl.Expr:
    """``t`` falls in a hole of this engine's unit (a stretch whose lines no reader has)."""
    inside = pl.lit(False)
    for h in w.holes:
        if h.host is eng.host and h.unit == eng.unit:
            inside = inside | ((t >= h.t0) & (t < h.t1))
    return inside


def _classes(w: World, pre: EngineCfg, end: float, timeout: float) -> tuple[pl.Expr, pl.Expr]:
    held = pl.col("p_out").is_in(["pinned", "watchdog", "none"])
    # a rebootstrap leg has no decode request of its own: its room's first leg is that
    leg2 = pl.col("prid").is_in(sorted(w.rebootstrap))
    p_open = (
        pl.col("to_p") & (pl.col("p_recv") <= end) & ((pl.col("p_out") == "none") | (pl.col("p_rel") > end))
    )
    p_open = p_open & (pl.col("p_out") != "died")
    entry = pl.when(pl.col("p_inf") < INF).then(pl.col("p_inf")).otherwise(pl.col("p_bq"))
    age = end - entry
    p_done, d_done = pl.col("p_rel") <= end, pl.col("d_end") <= end
    fired = (pl.col("p_out") == "watchdog") & (pl.col("fire_t") <= end)
    # The moment its deadline passed lies in a hole: its end (a firing, a normal finish) may be
    # among the missing lines, whatever a later gauge shows (design.md §3, `inconclusive`).
    deadline = entry + timeout
    # Held past its deadline before its prefill died (a hung scheduler killed by SGLang's own
    # watchdog): it was stuck, and the watchdog did not release it. Dying first makes it `lost`.
    died = pl.col("p_out") == "died"
    stuck_then_died = (
        died & pl.col("to_p") & (pl.col("p_rel") - entry >= timeout + MARGIN_S) & (pl.col("p_rel") <= end)
    )
    undecided = (
        pl.col("to_p")
        & (held | died)
        & (deadline <= end)
        & (pl.col("p_rel") > deadline)
        & _in_holes(w, pre, deadline)
        & ~(fired & ~_in_holes(w, pre, pl.col("fire_t")))
    )
    return (
        pl.when(fired & ~_in_holes(w, pre, pl.col("fire_t")))
        .then(pl.lit("watchdog_fired"))
        .when(undecided)
        .then(pl.lit("undecided"))
        .when((p_open & held & (age >= timeout + MARGIN_S)) | stuck_then_died)
        .then(pl.lit("silent_pin"))
        .when(
            (pl.col("p_out").is_in(["xfer_fail", "boot_timeout"]) & p_done)
            | ((pl.col("d_out") == "xfer_fail") & d_done)
        )
        .then(pl.lit("transfer_failed"))
        .when((pl.col("p_out").is_in(ABORTS_P) & p_done) | (pl.col("d_out").is_in(ABORTS_D) & d_done))
        .then(pl.lit("aborted"))
        .when(((pl.col("d_out") == "lost") & d_done) | (pl.col("p_out") == "died"))
        .then(pl.lit("lost"))
        .when(
            (pl.col("p_out") == "ok")
            & p_done
            & (((pl.col("d_out") == "ok") & (pl.col("d_fin") <= end)) | leg2)
        )
        .then(pl.lit("completed"))
        .otherwise(pl.lit("in_flight"))
        .alias("class"),
        (p_open & (age > timeout - MARGIN_S)).alias("near_timeout"),
    )


def _open_at(k: float) -> pl.Expr:
    return pl.col("to_p") & (pl.col("p_recv") <= k) & ((pl.col("p_out") == "none") | (pl.col("p_rel") > k))


def classify(w: World, sc, pre: EngineCfg, dec: EngineCfg, fleet: Fleet | None = None) -> pl.DataFrame:
    """Every non-health-check request with its class, flags and visibility.

    With ``sc.ingests_s`` the verdict judges the last ingest's window: a request is listed when a
    line in that window names it. In a fleet, a prefill no input holds a line of (``_missing_prefills``)
    is judged as `_unobserved_holders` says.
    """
    end = sc.duration_s
    lo = sc.ingests_s[-1][0] if sc.ingests_s else 0.0
    vis_p, rid_p = _visible(w, pre, "p", end, lo)
    vis_d, rid_d = _visible(w, dec, "d", end, lo)
    cls, near = _classes(w, pre, end, sc.watchdog_timeout_s)
    race = ((pl.col("p_out") == "inflight_abort") & (pl.col("p_rel") <= end)) | (
        pl.col("pin") & (pl.col("abort_t") < INF) & ~pl.col("abort_lands")
    )
    across = pl.lit(False)
    if fleet is None:
        for role, k in w.restarts:
            if role == "decode":
                across = across | _open_at(k)
    else:  # a fleet: a restart of the decode instance the router sent it to
        for j, procs in enumerate(fleet.dprocs):
            for proc in procs:
                if proc.t_end < INF:
                    across = across | ((pl.col("de") == j) & _open_at(proc.t_end))
    df = w.table.filter(~pl.col("hc")).with_columns(
        cls, near, vis_p=vis_p, vis_d=vis_d, rid_p=rid_p, rid_d=rid_d, abort_race=race, across_restart=across
    )
    df = df.with_columns(
        pl.when(_prefill_side_lost(w, pre, end, sc.watchdog_timeout_s))
        .then(pl.lit("undecided"))
        .otherwise(pl.col("class"))
        .alias("class")
    )
    if missing := _missing_prefills(w, fleet):
        df = _unobserved_holders(df, missing, _decode_restarts(fleet))
    bad = df.filter(
        pl.col("near_timeout") & ~pl.col("class").is_in(["silent_pin", "watchdog_fired", "undecided"])
    )
    if bad.height:
        raise AmbiguousScenario(f"{sc.name}: {bad.height} request(s) open on prefill close to the timeout")
    return df.sort("t_arr")


def _prefill_side_lost(w: World, pre: EngineCfg, end: float, timeout: float) -> pl.Expr:
    """The decode names it, no prefill line does, and the prefill's lines were lost from when it
    received it to the window end, a timeout + grace after: its prefill Receive: and end may both
    be in the hole, so the decode's Finish: says nothing of the prefill's hold (design.md, "Held").
    A younger one is not judged yet."""
    lost = pl.lit(False)
    for h in w.holes:
        if h.host is pre.host and h.unit == pre.unit and h.t1 >= end:
            lost = lost | ((pl.col("p_recv") >= h.t0) & (pl.col("p_recv") < h.t1))
    judged = pl.col("p_recv") + timeout + GRACE_S <= end
    return pl.col("to_p") & ~pl.col("vis_p") & pl.col("vis_d") & lost & judged


def _unobserved_holders(
    df: pl.DataFrame, missing: frozenset[int], restarts: list[tuple[int, float]]
) -> pl.DataFrame:
    """A request of a prefill whose lines no input holds: only its decode side is seen, and what
    that prefill did with it (released, held, fired) is not: `undecided`, whatever happened
    (design.md, "Exists": nothing is attributed to an instance, or away from one, by elimination).
    Its life is open to the window end, so a restart of its decode after it arrived there (up to
    the new process being ready) is one it lived across."""
    gone = pl.col("pe").is_in(sorted(missing))
    across = pl.lit(False)
    for de, up in restarts:
        across = across | ((pl.col("de") == de) & (pl.col("d_recv") <= up))
    return df.with_columns(
        across_restart=pl.when(gone).then(across).otherwise(pl.col("across_restart")),
        vis_p=pl.col("vis_p") & ~gone,
        rid_p=pl.col("rid_p") & ~gone,
        near_timeout=pl.col("near_timeout") & ~gone,
        **{"class": pl.when(gone).then(pl.lit("undecided")).otherwise(pl.col("class"))},
    )


def _missing_prefills(w: World, fleet: Fleet | None) -> frozenset[int]:
    """Fleet prefills whose unit a silent hole covers from before the start to after the end: a
    journal the collection lacks."""
    if fleet is None:
        return frozenset()
    return frozenset(
        i for i, eng in enumerate(fleet.pres)
        if any(h.silent and h.host is eng.host and h.unit == eng.unit and h.t0 <= -1e7 and h.t1 >= 1e8
               for h in w.holes)
    )  # fmt: skip


def _decode_restarts(fleet: Fleet | None) -> list[tuple[int, float]]:
    """(decode instance, when its new process was ready) for each fleet decode that restarted."""
    if fleet is None:
        return []
    return [(j, p.t_ready) for j, procs in enumerate(fleet.dprocs) for p in procs[1:]]


def _offset(minutes: int) -> str:
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _never_seen(w: World, eng: EngineCfg, lo: float, end: float) -> bool:
    """No line of this engine's unit lies in the judged window: a hole covers all of it."""
    return any(h.host is eng.host and h.unit == eng.unit and h.t0 <= lo and h.t1 >= end for h in w.holes)


def _listed(
    w: World, sc, pre: EngineCfg, dec: EngineCfg, fleet: Fleet | None = None
) -> tuple[pl.DataFrame, int]:
    """The requests some line names (expected.json's rows) and the anonymous pins."""
    df = classify(w, sc, pre, dec, fleet)
    listed = df.filter(pl.col("vis_p") | pl.col("vis_d"))
    shared = _shared_rooms(listed)
    listed = _by_room(listed) if not shared else _same_request(sc, listed, fleet, shared)
    # a pin no judged line names, still held in the judged window (one that died before it is not)
    lo = sc.ingests_s[-1][0] if sc.ingests_s else 0.0
    anonymous = df.filter(
        ~(pl.col("vis_p") | pl.col("vis_d")) & (pl.col("class") == "silent_pin") & (pl.col("p_rel") >= lo)
    ).height
    cls = pl.col("class")
    if _never_seen(w, pre, lo, sc.duration_s):
        # the decode's Finish: proves the KV arrived, not that the prefill released its slot
        cls = pl.when(cls == "completed").then(pl.lit("undecided")).otherwise(cls)
    rows = listed.select(
        bootstrap_room=pl.col("room").cast(pl.String),
        # identity is (deployment, room): only where two deployments' requests share the room
        **({"deployment": pl.col("deployment")} if shared else {}),
        prefill_rid=pl.when(pl.col("rid_p")).then(pl.col("prid")),
        decode_rid=pl.when(pl.col("rid_d")).then(pl.col("drid")),
        **{"class": cls},
        abort_race=pl.col("abort_race"),
        across_restart=pl.col("across_restart"),
        one_sided=pl.col("vis_p") != pl.col("vis_d"),
    )
    return rows, anonymous


# A room with several legs takes the first of its legs' classes in this order: an open leg keeps
# the room from being completed (issue 14: a request is classed from all its legs).
LEG_ORDER = [
    "watchdog_fired", "undecided", "silent_pin", "transfer_failed", "aborted", "lost", "in_flight", "completed",
]  # fmt: skip


def _by_room(listed: pl.DataFrame) -> pl.DataFrame:
    """One row per room: a rebootstrap leg joins its room's first leg (rids, flags and visibility of any leg)."""
    if not listed["room"].is_duplicated().any():
        return listed
    rank = {c: i for i, c in enumerate(LEG_ORDER)}
    return listed.group_by("room", maintain_order=True).agg(
        pl.col("prid", "drid", "rid_p", "rid_d").first(),
        pl.col("class").sort_by(pl.col("class").replace_strict(rank, return_dtype=pl.Int32)).first(),
        pl.col("vis_p", "vis_d", "abort_race", "across_restart").any(),
    )


# ---- identity is (deployment, room) (issue 26; design.md, "Same request") -------------------------

# A decode side can be a prefill's request's when their Receive: lines are this close (the router
# sends both legs at once), and no pair of a shared room is within PAIR_MARGIN_S of that bound.
PAIR_WINDOW_S = 30.0
PAIR_MARGIN_S = 10.0
# classes its prefill's own lines decide, whatever its decode side did
PREFILL_DECIDED = ("watchdog_fired", "undecided", "silent_pin")


def _shared_rooms(listed: pl.DataFrame) -> set[int]:
    """Rooms that two prefill instances (or two decode instances) name: two deployments whose
    routers number rooms alike. Only a fleet knows its instances."""
    if "pe" not in listed.columns:
        return set()
    n = listed.group_by("room").agg(
        n_p=pl.col("pe").filter(pl.col("vis_p")).n_unique(),
        n_d=pl.col("de").filter(pl.col("vis_d")).n_unique(),
    )
    return set(n.filter((pl.col("n_p") > 1) | (pl.col("n_d") > 1))["room"].to_list())


def _same_request(sc, listed: pl.DataFrame, fleet: Fleet, shared: set[int]) -> pl.DataFrame:
    """`listed` with a `deployment` per row: a shared room is one request per prefill that logged it
    (`prefill <host>`, the router's choice in the model). A decode side goes with the prefill it
    can be: its Receive: names that prefill's address and lies within PAIR_WINDOW_S of that
    prefill's Receive:. A side that can be one prefill's only, which no other such side can be, is
    that prefill's. The sides left over pair with the prefills left over only when every way reads
    the same (each finished, as many as those prefills, each able to be each one's); then each such
    request is judged as paired with a finished decode, naming no decode rid. Otherwise no line
    says which decode side is whose: each such prefill's request is decided by its own lines alone
    (a completion it cannot claim is `undecided`), and each side left over is a request of its own
    (`decode <host>`): `undecided`, never completed by a guess."""
    end = sc.duration_s
    mine = listed.filter(pl.col("room").is_in(list(shared)))
    if sc.ingests_s or mine.select(pl.struct("room", "pe").is_duplicated().any()).item():
        raise AmbiguousScenario(f"{sc.name}: a shared room with several legs, or ingest runs: not modelled")
    seen_whole = pl.col("vis_p") & pl.col("vis_d") & pl.col("p_recv").is_between(0.0, end)
    if not mine.select((seen_whole & pl.col("d_recv").is_between(0.0, end)).all()).item():
        raise AmbiguousScenario(f"{sc.name}: a shared room's request not seen whole (both Receive: lines)")
    address = [e.host.ip for e in fleet.pres]
    rows = listed.to_dicts()
    rooms: dict[int, list[dict]] = {}
    for row in rows:
        if row["room"] in shared:
            rooms.setdefault(row["room"], []).append(row)
    sides: dict[int, dict] = {}  # id(request) -> its decode side, a request of its own
    for reqs in rooms.values():
        _place(sc, reqs, address, sides)
    out = []
    for row in rows:
        if row["room"] not in shared:
            out.append(row | {"deployment": None})
            continue
        out.append(row | {"deployment": f"prefill {fleet.pres[row['pe']].host.name}"})
        if id(row) in sides:
            out.append(sides[id(row)] | {"deployment": f"decode {fleet.decs[row['de']].host.name}"})
    return pl.DataFrame(out, schema=listed.schema | {"deployment": pl.String})


def _place(sc, reqs: list[dict], address: list[str], sides: dict[int, dict]) -> None:
    """Decide, in place, whose decode side each request of one shared room is (see _same_request)."""
    end = sc.duration_s

    def fits(side: dict, holder: dict) -> bool:
        gap = abs(side["d_recv"] - holder["p_recv"])
        if abs(gap - PAIR_WINDOW_S) < PAIR_MARGIN_S:
            raise AmbiguousScenario(f"{sc.name}: room {side['room']}: Receive: lines {gap:.1f} s apart")
        return address[side["pe"]] == address[holder["pe"]] and gap <= PAIR_WINDOW_S

    can = {id(s): [h for h in reqs if fits(s, h)] for s in reqs}  # the prefills each side can be
    alone = [id(c[0]) for c in can.values() if len(c) == 1]
    placed = {k: c[0] for k, c in can.items() if len(c) == 1 and alone.count(id(c[0])) == 1}
    if any(placed.get(id(s), s) is not s for s in reqs):
        raise AmbiguousScenario(f"{sc.name}: room {reqs[0]['room']}: a side placed with another's prefill")
    lone = [h for h in reqs if id(h) not in placed]  # its own side is not placed: neither is any other
    if not lone:
        return
    finished = all(s["d_out"] == "ok" and s["d_fin"] <= end for s in lone)
    pairs = finished and all(fits(s, h) for s in lone for h in lone)
    for r in lone:
        own = r["class"]
        if own not in PREFILL_DECIDED and not (r["p_out"] == "ok" and r["p_rel"] <= end):
            raise AmbiguousScenario(f"{sc.name}: room {r['room']}: a prefill end the pairing does not model")
        if not pairs:
            judged = r["d_recv"] + sc.watchdog_timeout_s + MARGIN_S <= end
            if not judged or r["abort_race"]:
                raise AmbiguousScenario(f"{sc.name}: room {r['room']}: an unplaced decode side not modelled")
            # its decode side, a request of its own that no line places: its life is the request's
            sides[id(r)] = r | {"class": "undecided", "vis_p": False, "rid_p": False}
        r["class"] = own if own in PREFILL_DECIDED else ("completed" if pairs else "undecided")
        r["rid_d"] = False  # paired whichever way: no one decode side is its own
        r["vis_d"] = pairs  # unpaired: its row holds its prefill's lines only


def _plain_view(w: World, sc, pre: EngineCfg, dec: EngineCfg, rows: pl.DataFrame) -> dict:
    """``by_input.plain``: what the plain files (which keep what journald dropped) must give.

    ``requests`` lists only the rows that differ from the journal's (or that only the files name).
    """
    kept = w.holes
    w.holes = [h for h in kept if h.silent]  # the process printed them: only journald lost them
    try:
        plain, anonymous = _listed(w, sc, pre, dec)
    finally:
        w.holes = kept
    check_consistency(
        f"{sc.name} (plain)",
        sc.plain_verdict,
        list(sc.plain_reasons),
        set(plain["class"].unique()),
        anonymous,
    )
    changed = plain.join(rows, on=plain.columns, how="anti")
    return {
        "verdict": sc.plain_verdict,
        "reasons_contain": list(sc.plain_reasons),
        "anonymous_pins": anonymous,
        "requests": changed.to_dicts(),
    }


def build_expected(
    w: World, sc, pre: EngineCfg, dec: EngineCfg, window: tuple[int, int], fleet: Fleet | None = None
) -> str:
    """The expected.json text (one request per line, so 10M-line incidents stay fast)."""
    missing = _missing_prefills(w, fleet)
    if fleet is not None:
        _check_fleet(w, sc, fleet, pre, dec, missing)
    rows, anonymous = _listed(w, sc, pre, dec, fleet)
    head = {
        "scenario": sc.name,
        "description": sc.description,
        "window": {"since_us": window[0], "until_us": window[1]},
        "watchdog": {"timeout_s": sc.watchdog_timeout_s, "deployed": sc.watchdog_deployed},
        "evidence_level": sc.evidence_level,
        "verdict": sc.verdict,
        "reasons_contain": list(sc.reasons_contain)
        + (
            # the first five by arrival: a reason lists five rooms and counts the rest
            rows.filter(pl.col("class") == "undecided")["bootstrap_room"].to_list()[:5]
            if sc.name_undecided
            else []
        ),
        "anonymous_pins": anonymous,
        # What a reader of the plain logs must be told: each host's zone (the prefix has none).
        "hosts": {
            e.host.name: {"tz": w.zone or _offset(e.host.tz_min), "skew_s": e.host.skew_s}
            for e in ((pre, dec) if fleet is None else (*fleet.pres, *fleet.decs))
        },
    }
    options = dict(sc.verdict_options)
    if sc.since_s is not None:  # a window that starts inside the data: context lies before it
        options["since_us"] = w.t0_us + round(sc.since_s * 1e6)
    if options:
        head["verdict_options"] = options
    if sc.ingests_s:  # separate `ingest --since/--until` runs into one database, in this order
        head["ingests"] = [
            {"since_us": w.t0_us + round(a * 1e6), "until_us": w.t0_us + round(b * 1e6), "verdict": v}
            for (a, b), v in zip(sc.ingests_s, sc.ingest_verdicts, strict=True)
        ]
    if sc.plain_verdict is not None:
        head["by_input"] = {"plain": _plain_view(w, sc, pre, dec, rows)}
    if sc.recovery is not None:  # did the deployment recover after the watchdog fired
        head["recovery"] = sc.recovery
    if sc.stuck_elsewhere:  # some queue outside the watchdog's is stuck
        head["stuck_elsewhere"] = True
    if sc.details:
        head["request_details"] = _details(sc, rows)
    check_consistency(sc.name, sc.verdict, head["reasons_contain"], set(rows["class"].unique()), anonymous)
    pairs = ""
    if fleet is not None and "deployment" not in rows.columns:  # one deployment: each room one request
        head["instances"], pairs = _fleet_truth(w, sc, fleet, pre, dec, rows, missing)
    buf = io.BytesIO()
    rows.write_ndjson(buf)
    body = buf.getvalue().decode().strip().replace("\n", ",\n  ")
    text = json.dumps(head, indent=1)[:-2] + pairs
    return (
        text + ',\n "requests": [\n  ' + body + "\n ]\n}\n"
        if rows.height
        else text + ',\n "requests": []\n}\n'
    )


def _details(sc, rows: pl.DataFrame) -> list[dict]:
    """Per-room keys the verdict's row must hold (``Scenario.details``), for each room of the class."""
    out: dict[str, dict] = {}
    for cls, key, value in sc.details:
        rooms = rows.filter(pl.col("class") == cls)["bootstrap_room"].to_list()
        if not rooms:
            raise AmbiguousScenario(f"{sc.name}: no {cls} request for detail {key}")
        for room in rooms:
            out.setdefault(room, {"bootstrap_room": room})[key] = value
    return list(out.values())


def check_consistency(name: str, verdict: str, reasons: list[str], classes: set[str], anonymous: int) -> None:
    """The declared verdict must follow from the classes (design.md §3)."""
    pinned = "silent_pin" in classes or anonymous > 0
    undecided = "undecided" in classes  # only `inconclusive` can hold a request the logs cannot decide
    ok = {
        "watchdog_missed": pinned,
        "watchdog_fired": "watchdog_fired" in classes and not pinned and not undecided,
        "nothing_stuck": not pinned and "watchdog_fired" not in classes and not undecided,
        "inconclusive": bool(reasons),
    }[verdict]
    if not ok:
        raise AmbiguousScenario(f"{name}: verdict {verdict} does not follow from classes {sorted(classes)}")


# ---- a fleet (issue 19): one judgement per prefill instance, and each request's true pair ----------

# Worst first: the window's verdict is the worst of its instances'.
VERDICT_RANK = {"watchdog_missed": 0, "inconclusive": 1, "watchdog_fired": 2, "nothing_stuck": 3}
# The keys of the verdict's `counts` (pdforensics.verdict: every class, anonymous pins, requests).
COUNT_KEYS = (
    "watchdog_fired", "silent_pin", "transfer_failed", "retracted", "aborted", "lost", "completed", "in_flight",
    "anonymous_pins", "undecided", "requests",
)  # fmt: skip


def _check_fleet(w: World, sc, fleet: Fleet, pre: EngineCfg, dec: EngineCfg, missing: frozenset[int]) -> None:
    """The fleet's ground truth classifies with one prefill's and one decode's visibility rules and
    derives each instance's verdict from its classes alone: true only when every instance logs alike
    (the same request log, no hole but a prefill's whole journal missing) and no prefill dies or
    restarts (that would be `inconclusive`)."""
    same = ("log_requests", "time_stats", "log_requests_until")
    for eng in (*fleet.pres, *fleet.decs):
        ref = pre if eng.role == "prefill" else dec
        if any(getattr(eng, a) != getattr(ref, a) for a in same):
            raise AmbiguousScenario(f"{sc.name}: {eng.host.name} logs unlike its peers")
    whole = {(fleet.pres[i].host.name, fleet.pres[i].unit) for i in missing}
    if any((h.host.name, h.unit) not in whole for h in w.holes) or any(
        role == "prefill" for role, _ in w.restarts
    ):
        raise AmbiguousScenario(f"{sc.name}: a hole or a prefill end: per-instance verdicts need more rules")


def instance_verdict(classes: dict[str, int]) -> str:
    """design.md §3 for one prefill: a pin it held (named or not) is missed, one the logs cannot
    decide leaves it open, a firing is the watchdog's work, otherwise nothing was stuck."""
    if classes.get("silent_pin", 0) or classes.get("anonymous_pins", 0):
        return "watchdog_missed"
    if classes.get("undecided", 0):
        return "inconclusive"
    return "watchdog_fired" if classes.get("watchdog_fired", 0) else "nothing_stuck"


def _unobserved_instance(eng: EngineCfg, mine: pl.DataFrame, dec_host: list[str]) -> dict:
    """A prefill no input holds a line of: the decodes its requests went to name its address."""
    decodes = sorted({dec_host[d] for d in mine.filter(pl.col("vis_d"))["de"].to_list()})
    return {
        "host": eng.host.ip,
        "engine": "prefill",
        "verdict": "inconclusive",
        "observed": False,
        "named_by": [f"decode {d} (bootstrap_host=)" for d in decodes],
        "watchdog": {"deployed": None, "timeout_s": None},
        "counts": {},
    }


def _fleet_truth(
    w: World, sc, fleet: Fleet, pre: EngineCfg, dec: EngineCfg, rows: pl.DataFrame, missing: frozenset[int]
) -> tuple[list, str]:
    """``instances`` (one object per prefill host, worst first, then host) and the ``pairs`` text:
    every listed room's true prefill and decode host, from the router's choice in the model. A
    missing prefill is the instance its address names, judged on nothing of its own."""
    df = classify(w, sc, pre, dec, fleet)
    listed = df.filter(pl.col("vis_p") | pl.col("vis_d"))
    anon = df.filter(~(pl.col("vis_p") | pl.col("vis_d")) & (pl.col("class") == "silent_pin"))
    pre_host = [e.host.name for e in fleet.pres]
    dec_host = [e.host.name for e in fleet.decs]
    instances = []
    for i, eng in enumerate(fleet.pres):
        if i in missing:
            instances.append(_unobserved_instance(eng, listed.filter(pl.col("pe") == i), dec_host))
            continue
        mine = listed.filter(pl.col("pe") == i)["class"].value_counts().iter_rows()
        counts = dict.fromkeys(COUNT_KEYS, 0) | dict(mine)
        counts["anonymous_pins"] = anon.filter(pl.col("pe") == i).height
        counts["requests"] = sum(counts[c] for c in COUNT_KEYS if c not in ("anonymous_pins", "requests"))
        timeout = (
            eng.watchdog_s if eng.watchdog_s is not None else sc.verdict_options.get("watchdog_timeout_s")
        )
        instances.append(
            {
                "host": eng.host.name,
                "engine": "prefill",
                "verdict": instance_verdict(counts),
                "watchdog": {
                    "deployed": eng.watchdog_s is not None,
                    "timeout_s": None if timeout is None else float(timeout),
                },
                "counts": counts,
            }
        )
    instances.sort(key=lambda x: (VERDICT_RANK[x["verdict"]], x["host"]))
    if instances and instances[0]["verdict"] != sc.verdict:
        raise AmbiguousScenario(f"{sc.name}: verdict {sc.verdict} is not the worst instance's")
    if rows.height != listed.height:
        raise AmbiguousScenario(f"{sc.name}: a room with several legs: pairs need one row per room")
    lines = (
        listed.sort("t_arr")
        .select(
            pl.concat_str(
                pl.lit('  "'),
                pl.col("room").cast(pl.String),
                pl.lit('": {"prefill": "'),
                pl.col("pe").replace_strict(list(range(len(pre_host))), pre_host, return_dtype=pl.String),
                pl.lit('", "decode": "'),
                pl.col("de").replace_strict(list(range(len(dec_host))), dec_host, return_dtype=pl.String),
                pl.lit('"}'),
            )
        )
        .to_series()
        .to_list()
    )
    return instances, ',\n "pairs": {\n' + ",\n".join(lines) + "\n }"
