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

from pdforensics.simulate.model import INF, EngineCfg, World

# An open request must be this far from the timeout on either side (seconds).
MARGIN_S = 15.0

ABORTS_P = ["boot_abort", "wait_abort", "inflight_abort"]
ABORTS_D = ["handshake_abort", "transfer_abort", "running_abort"]


class AmbiguousScenario(ValueError):
    """A request's class would depend on the verdict's grace period."""


def _seen(w: World, eng: EngineCfg, t: pl.Expr, end: float) -> pl.Expr:
    ok = (t >= 0.0) & (t <= end)
    for h in w.holes:
        if h.host is eng.host and h.unit == eng.unit:
            ok = ok & ~((t >= h.t0) & (t < h.t1))
    return ok


def _event_rooms(w: World, eng: EngineCfg, end: float) -> tuple[set[int], set[int]]:
    """Rooms (and rooms with their rid) that explicit lines of this engine name in the journal."""
    rooms, rids = set(), set()
    for e in w.events:
        if e.room is None or e.engine != eng.role or not 0.0 <= e.t <= end:
            continue
        if any(h.host is eng.host and h.unit == eng.unit and h.t0 <= e.t < h.t1 for h in w.holes):
            continue
        rooms.add(e.room)
        if e.rid:
            rids.add(e.room)
    return rooms, rids


def _visible(w: World, eng: EngineCfg, side: str, end: float) -> tuple[pl.Expr, pl.Expr]:
    recv, fin = pl.col(f"{side}_recv"), pl.col(f"{side}_fin")
    lines = pl.lit(False)
    if eng.log_requests:
        lines = _seen(w, eng, recv, end) | _seen(w, eng, fin, end)
    if eng.time_stats:
        lines = lines | ((pl.col(f"{side}_out") == "ok") & _seen(w, eng, fin, end))
    if side == "d":
        lines = lines & (pl.col("d_out") != "hc503")
    rooms, rids = _event_rooms(w, eng, end)
    room = pl.col("room")
    return lines | room.is_in(list(rooms)), lines | room.is_in(list(rids))


def _classes(end: float, timeout: float) -> pl.Expr:
    p_open = (
        pl.col("to_p") & (pl.col("p_recv") <= end) & ((pl.col("p_out") == "none") | (pl.col("p_rel") > end))
    )
    held = pl.col("p_out").is_in(["pinned", "watchdog", "none"])
    age = end - pl.when(pl.col("p_inf") < INF).then(pl.col("p_inf")).otherwise(pl.col("p_bq"))
    p_done, d_done = pl.col("p_rel") <= end, pl.col("d_end") <= end
    return (
        pl.when((pl.col("p_out") == "watchdog") & (pl.col("fire_t") <= end))
        .then(pl.lit("watchdog_fired"))
        .when(p_open & held & (age >= timeout + MARGIN_S))
        .then(pl.lit("silent_pin"))
        .when(((pl.col("p_out") == "xfer_fail") & p_done) | ((pl.col("d_out") == "xfer_fail") & d_done))
        .then(pl.lit("transfer_failed"))
        .when((pl.col("p_out").is_in(ABORTS_P) & p_done) | (pl.col("d_out").is_in(ABORTS_D) & d_done))
        .then(pl.lit("aborted"))
        .when((pl.col("d_out") == "lost") & d_done)
        .then(pl.lit("lost"))
        .when((pl.col("p_out") == "ok") & p_done & (pl.col("d_out") == "ok") & (pl.col("d_fin") <= end))
        .then(pl.lit("completed"))
        .otherwise(pl.lit("in_flight"))
        .alias("class"),
        (p_open & (age > timeout - MARGIN_S)).alias("near_timeout"),
    )


def _open_at(k: float) -> pl.Expr:
    return pl.col("to_p") & (pl.col("p_recv") <= k) & ((pl.col("p_out") == "none") | (pl.col("p_rel") > k))


def classify(w: World, sc, pre: EngineCfg, dec: EngineCfg) -> pl.DataFrame:
    """Every non-health-check request with its class, flags and visibility."""
    end = sc.duration_s
    vis_p, rid_p = _visible(w, pre, "p", end)
    vis_d, rid_d = _visible(w, dec, "d", end)
    cls, near = _classes(end, sc.watchdog_timeout_s)
    race = ((pl.col("p_out") == "inflight_abort") & (pl.col("p_rel") <= end)) | (
        pl.col("pin") & (pl.col("abort_t") < INF) & ~pl.col("abort_lands")
    )
    across = pl.lit(False)
    for role, k in w.restarts:
        if role == "decode":
            across = across | _open_at(k)
    df = w.table.filter(~pl.col("hc")).with_columns(
        cls, near, vis_p=vis_p, vis_d=vis_d, rid_p=rid_p, rid_d=rid_d, abort_race=race, across_restart=across
    )
    bad = df.filter(pl.col("near_timeout") & ~pl.col("class").is_in(["silent_pin", "watchdog_fired"]))
    if bad.height:
        raise AmbiguousScenario(f"{sc.name}: {bad.height} request(s) open on prefill close to the timeout")
    return df.sort("t_arr")


def _offset(minutes: int) -> str:
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def build_expected(w: World, sc, pre: EngineCfg, dec: EngineCfg, window: tuple[int, int]) -> str:
    """The expected.json text (one request per line, so 10M-line incidents stay fast)."""
    df = classify(w, sc, pre, dec)
    listed = df.filter(pl.col("vis_p") | pl.col("vis_d"))
    anonymous = df.filter(~(pl.col("vis_p") | pl.col("vis_d")) & (pl.col("class") == "silent_pin")).height
    rows = listed.select(
        bootstrap_room=pl.col("room").cast(pl.String),
        prefill_rid=pl.when(pl.col("rid_p")).then(pl.col("prid")),
        decode_rid=pl.when(pl.col("rid_d")).then(pl.col("drid")),
        **{"class": pl.col("class")},
        abort_race=pl.col("abort_race"),
        across_restart=pl.col("across_restart"),
        one_sided=pl.col("vis_p") != pl.col("vis_d"),
    )
    head = {
        "scenario": sc.name,
        "description": sc.description,
        "window": {"since_us": window[0], "until_us": window[1]},
        "watchdog": {"timeout_s": sc.watchdog_timeout_s, "deployed": sc.watchdog_deployed},
        "evidence_level": sc.evidence_level,
        "verdict": sc.verdict,
        "reasons_contain": list(sc.reasons_contain),
        "anonymous_pins": anonymous,
        # What a reader of the plain logs must be told: each host's zone (the prefix has none).
        "hosts": {e.host.name: {"tz": _offset(e.host.tz_min), "skew_s": e.host.skew_s} for e in (pre, dec)},
    }
    if sc.verdict_options:
        head["verdict_options"] = dict(sc.verdict_options)
    check_consistency(sc.name, sc.verdict, head["reasons_contain"], set(rows["class"].unique()), anonymous)
    buf = io.BytesIO()
    rows.write_ndjson(buf)
    body = buf.getvalue().decode().strip().replace("\n", ",\n  ")
    text = json.dumps(head, indent=1)[:-2]
    return (
        text + ',\n "requests": [\n  ' + body + "\n ]\n}\n"
        if rows.height
        else text + ',\n "requests": []\n}\n'
    )


def check_consistency(name: str, verdict: str, reasons: list[str], classes: set[str], anonymous: int) -> None:
    """The declared verdict must follow from the classes (design.md §3)."""
    pinned = "silent_pin" in classes or anonymous > 0
    ok = {
        "watchdog_missed": pinned,
        "watchdog_fired": "watchdog_fired" in classes and not pinned,
        "nothing_stuck": not pinned and "watchdog_fired" not in classes,
        "inconclusive": bool(reasons),
    }[verdict]
    if not ok:
        raise AmbiguousScenario(f"{name}: verdict {verdict} does not follow from classes {sorted(classes)}")
