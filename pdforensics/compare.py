"""Did the fix work? Two windows judged by the same rules, side by side, each rate's change tested.

    judge_side(con, opts) -> Side              one window: its Verdict and what compare reads beside it
    compare_sides(before, after) -> Comparison the measures side by side, each rate's change judged

A rate is events per exposure (requests, or hours for restarts); two sides' rates are compared
with the exact conditional test for two Poisson rates: given n = k1 + k2 events, k1 is
Binomial(n, t1 / (t1 + t2)) when the rates are equal. Unequal evidence (levels, coverage, the
timeout judged against) is said first, and no change across it is judged: fewer pins seen at L0
than at L1 is what L0 sees, not a fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import duckdb

from pdforensics.verdict import Verdict, VerdictOptions, iso

ALPHA = 0.05  # each measure is tested on its own at this level
JUDGEMENTS = ("improved", "worse", "no_change", "changed", "too_few", "not_comparable")
# lower: fewer is better (a fix shows as `improved`); neutral: the load or the operator's doing
# (a significant change is `changed`, never improved or worse)
LOWER, NEUTRAL = "lower_is_better", "neutral"


@dataclass
class Side:
    """One window: its verdict, the inflight floor's distribution and the abort races by outcome."""

    verdict: Verdict
    db: str | None = None
    floor: dict[str, Any] = field(default_factory=dict)
    abort_races: dict[str, int] = field(default_factory=dict)

    @property
    def window_s(self) -> float:
        v = self.verdict
        if v.window_start_us is None or v.window_end_us is None:
            return 0.0
        return max(0, v.window_end_us - v.window_start_us) / 1e6

    def coverage(self) -> dict[str, Any]:
        """What the window's evidence could see: every prefill's inflight queue observed, the
        longest stretch without an inflight sample, the holes and those that decide the verdict."""
        v = self.verdict
        prefills = [o for o in v.observed if o["engine"] == "prefill"]
        blind = [o["host"] for o in prefills if "inflight" not in o["queues"]]
        blind += [u["host"] for u in v.unobserved]
        gaps = [o["inflight_gap_s"] for o in prefills if o["inflight_gap_s"] is not None]
        return {
            "prefills": len(prefills) + len(v.unobserved),
            "inflight_unobserved": blind,
            "inflight_observed": bool(prefills) and not blind,
            "longest_inflight_gap_s": max(gaps) if gaps else None,
            "holes": len(v.holes),
            "decisive_holes": sum(1 for h in v.holes if h.get("decisive")),
        }

    def dwell(self) -> dict[str, Any]:
        """The watchdog firings' dwell (seconds in the inflight queue when force-failed)."""
        d = sorted(float(f["dwell_s"]) for f in self.verdict.firings if f.get("dwell_s") is not None)
        if not d:
            return {"firings": len(self.verdict.firings), "min_s": None, "median_s": None, "max_s": None}
        mid = len(d) // 2
        median = d[mid] if len(d) % 2 else (d[mid - 1] + d[mid]) / 2
        return {
            "firings": len(self.verdict.firings),
            "min_s": d[0],
            "median_s": round(median, 3),
            "max_s": d[-1],
        }

    def races(self) -> dict[str, int]:
        """Abort races by outcome; from the verdict's requests when no query filled them."""
        if self.abort_races:
            return self.abort_races
        out: dict[str, int] = {}
        for r in self.verdict.requests:
            if r["abort_race"]:
                out[r["abort_race_outcome"] or "open"] = out.get(r["abort_race_outcome"] or "open", 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        v = self.verdict
        races = self.races()
        return {
            "db": self.db,
            "window": {"start": iso(v.window_start_us), "end": iso(v.window_end_us)},
            "window_s": round(self.window_s, 3),
            "verdict": v.verdict,
            "reason": v.reasons[0] if v.reasons else None,
            "evidence_level": v.evidence_level,
            "coverage": self.coverage(),
            "watchdog": {
                "timeout_s": v.timeout_s,
                "timeout_source": v.timeout_source,
                "deployed": v.deployed,
                "recovery": v.recovery,
                "dwell": self.dwell(),
            },
            "counts": v.counts,
            "abort_races": {"total": sum(races.values()), **races},
            "restarts": len(v.restarts),
            "inflight_floor": self.floor,
        }


def judge_side(con: duckdb.DuckDBPyConnection, opts: VerdictOptions, db: str | None = None) -> Side:
    """The window `opts` selects: its verdict, and from the same views (computed once) the
    inflight floor's distribution over the prefills' batch lines and the abort races by outcome."""
    from pdforensics import verdict as vd

    vd.ensure_views(con)
    vd.apply_options(con, opts)
    with vd.materialised(con):
        verdict = vd.compute_verdict(con, opts)
        row = con.execute(
            """SELECT count(*), count(*) FILTER (WHERE floor > 0),
                      quantile_disc(floor, [0.5, 0.9, 0.99]), max(floor)
               FROM inflight_gauge WHERE floor IS NOT NULL"""
        ).fetchone()
        races = con.execute("SELECT outcome, count(*) FROM abort_races GROUP BY ALL ORDER BY 1").fetchall()
        histogram = con.execute(
            "SELECT floor, count(*) FROM inflight_gauge WHERE floor IS NOT NULL GROUP BY ALL ORDER BY 1"
        ).fetchall()
    samples, nonzero, q, top = row if row else (0, 0, None, None)
    floor = {
        "samples": int(samples),
        "nonzero_share": round(nonzero / samples, 4) if samples else None,
        "p50": q[0] if q else None,
        "p90": q[1] if q else None,
        "p99": q[2] if q else None,
        "max": top,
        "histogram": [[int(f), int(n)] for f, n in histogram],  # [floor, samples]: the report's axis
    }
    return Side(verdict=verdict, db=db, floor=floor, abort_races={str(o): int(n) for o, n in races})


# ------------------------------------------------------------------ the test


def _log_pmf(n: int, k: int, logp: float, logq: float) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * logp + (n - k) * logq


def _first(lo: int, hi: int, ok: Any) -> int:
    """The smallest k in [lo, hi] with ok(k), ok monotone (False then True); hi + 1 when none."""
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid - 1
        else:
            lo = mid + 1
    return lo


def poisson_rates_p(k1: int, t1: float, k2: int, t2: float) -> float:
    """Two-sided p-value of the exact conditional test that two Poisson rates are equal: given
    n = k1 + k2, k1 ~ Binomial(n, t1 / (t1 + t2)); the p-value sums the probability of every split
    no more likely than the one observed (the binomial test's two-sided rule).

    The binomial is unimodal, so those splits are its two tails: each tail's edge is found by
    bisection and the tail summed outward until its terms no longer count, which keeps a count of
    millions cheap."""
    n = k1 + k2
    if n == 0:
        return 1.0
    p = t1 / (t1 + t2)
    if p <= 0.0 or p >= 1.0:  # one side had no exposure: any split is certain
        return 1.0
    logp, logq = math.log(p), math.log1p(-p)

    def lp(k: int) -> float:
        return _log_pmf(n, k, logp, logq)

    cut = lp(k1) + 1e-7  # a relative tolerance: equal probabilities computed two ways
    mode = min(n, math.floor((n + 1) * p))
    if lp(mode) <= cut:
        return 1.0
    total = 0.0
    # left tail: pmf rises on [0, mode], so its splits are [0, edge]; right: falls on [mode, n]
    edge = _first(0, mode - 1, lambda k: lp(k) > cut) - 1
    for k in range(edge, -1, -1):
        term = math.exp(lp(k))
        total += term
        if term <= total * 1e-17:  # outward terms only shrink (0.0: they underflow)
            break
    for k in range(_first(mode + 1, n, lambda k: lp(k) <= cut), n + 1):
        term = math.exp(lp(k))
        total += term
        if term <= total * 1e-17:  # outward terms only shrink (0.0: they underflow)
            break
    return min(1.0, total)


# Beyond this, more events than any window holds are needed: "too few" whatever the count.
_MAX_EVENTS = 10**9


def events_needed(t1: float, t2: float, fell: bool, alpha: float = ALPHA) -> int | None:
    """The fewest events at which the change's direction could be told from chance at these
    exposures: the most extreme split that way (every event before when the rate fell, every one
    after when it rose) reaches `alpha` (its p-value only falls as events are added: bisection).
    None: no count does (an exposure is zero)."""
    if t1 <= 0 or t2 <= 0:
        return None

    def reaches(n: int) -> bool:
        k1 = n if fell else 0
        return poisson_rates_p(k1, t1, n - k1, t2) < alpha

    hi = 1
    while not reaches(hi):
        if hi >= _MAX_EVENTS:
            return None
        hi *= 2
    return _first(hi // 2 + 1 if hi > 1 else 1, hi, reaches)


@dataclass
class Change:
    """One measure's two rates (per `per` units of exposure) and its judgement."""

    metric: str
    before_count: int
    after_count: int
    before_exposure: float
    after_exposure: float
    exposure: str  # "requests" or "hours"
    per: float  # the rate's unit: events per `per` of exposure
    direction: str
    p_value: float | None = None
    judgement: str = "too_few"
    events_needed: int | None = None

    @property
    def before(self) -> float | None:
        return _rate(self.before_count, self.before_exposure, self.per)

    @property
    def after(self) -> float | None:
        return _rate(self.after_count, self.after_exposure, self.per)

    @property
    def unit(self) -> str:
        return f"per {self.per:,g} {self.exposure}" if self.per != 1 else f"per {self.exposure[:-1]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "before": self.before,
            "after": self.after,
            "p_value": None if self.p_value is None else float(f"{self.p_value:.4g}"),
            "judgement": self.judgement,
            "unit": self.unit,
            "direction": self.direction,
            "before_count": self.before_count,
            "after_count": self.after_count,
            "before_exposure": round(self.before_exposure, 4),
            "after_exposure": round(self.after_exposure, 4),
            "events_needed": self.events_needed,
        }


def _rate(k: int, t: float, per: float) -> float | None:
    return None if t <= 0 else round(k / t * per, 4)


def rate_change(
    metric: str, k1: int, t1: float, k2: int, t2: float, direction: str = LOWER,
    exposure: str = "requests", per: float = 1000.0, comparable: bool = True,
) -> Change:  # fmt: skip
    """A measure's change judged: `not_comparable` across unequal evidence (the p-value is still
    given); `too_few` when even the most extreme split of its events could not be told from chance
    (`events_needed`); else `improved`/`worse` (or `changed`, neutral measures) at p < ALPHA, or
    `no_change`."""
    c = Change(metric, k1, k2, t1, t2, exposure, per, direction)
    if t1 <= 0 or t2 <= 0:  # no exposure on a side: no rate to compare
        c.judgement = "not_comparable" if not comparable else "too_few"
        return c
    c.p_value = poisson_rates_p(k1, t1, k2, t2)
    fell = k2 / t2 < k1 / t1
    if k2 / t2 == k1 / t1:  # no direction: a change either way must have been visible
        needs = [events_needed(t1, t2, True), events_needed(t1, t2, False)]
        c.events_needed = None if None in needs else max(n for n in needs if n is not None)
    else:
        c.events_needed = events_needed(t1, t2, fell)
    if not comparable:
        c.judgement = "not_comparable"
    elif c.events_needed is None or k1 + k2 < c.events_needed:
        c.judgement = "too_few"
    elif c.p_value >= ALPHA:
        c.judgement = "no_change"
    elif direction == NEUTRAL:
        c.judgement = "changed"
    else:
        c.judgement = "improved" if fell else "worse"
    return c


# ------------------------------------------------------------------ the comparison


@dataclass
class Comparison:
    before: Side
    after: Side
    unequal: list[str]  # why the two sides' evidence differs (said first; empty: comparable)
    changes: list[Change]

    @property
    def comparable(self) -> bool:
        return not self.unequal

    def judgement(self, metric: str) -> str:
        return next(c.judgement for c in self.changes if c.metric == metric)

    @property
    def worse(self) -> list[str]:
        return [c.metric for c in self.changes if c.judgement == "worse"]

    def to_json(self) -> dict[str, Any]:
        return {
            "comparable": self.comparable,
            "unequal_evidence": self.unequal,
            "alpha": ALPHA,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "changes": [c.to_json() for c in self.changes],
        }


def unequal_evidence(before: Side, after: Side) -> list[str]:
    """Why the two windows' counts cannot be set against each other, one sentence each."""
    b, a = before.verdict, after.verdict
    out: list[str] = []
    if b.evidence_level != a.evidence_level:
        out.append(
            f"evidence levels differ: before {b.evidence_level}, after {a.evidence_level} "
            "(a level sees what the other cannot: L0 names no request, only the gauge)"
        )
    if b.timeout_s != a.timeout_s:
        out.append(
            f"the timeouts differ: before {b.timeout_s:g} s ({b.timeout_source}), after {a.timeout_s:g} s "
            f"({a.timeout_source}): pass --watchdog-timeout to judge both by one"
            if b.timeout_s is not None and a.timeout_s is not None
            else "the timeout is unknown on a side: pass --watchdog-timeout"
        )
    for name, side in (("before", before), ("after", after)):
        cov = side.coverage()
        if not cov["inflight_observed"]:
            where = ", ".join(h or "?" for h in cov["inflight_unobserved"]) or "no prefill line"
            out.append(
                f"the {name} window did not observe every prefill's inflight queue ({where}): its pins cannot be counted"
            )
        if cov["decisive_holes"]:
            out.append(
                f"the {name} window has {cov['decisive_holes']} hole(s) that may hide a request's end "
                "(its verdict is inconclusive on them): its counts may miss what they hide"
            )
    return out


def compare_sides(before: Side, after: Side) -> Comparison:
    """Both windows' measures side by side, each rate's change judged (see `rate_change`)."""
    unequal = unequal_evidence(before, after)
    ok = not unequal
    t1 = float(before.verdict.counts.get("requests", 0))
    t2 = float(after.verdict.counts.get("requests", 0))
    changes = [
        rate_change(metric, _count(before, metric), t1, _count(after, metric), t2, direction, comparable=ok)
        for metric, direction in RATES
    ]
    changes.append(
        rate_change(
            "restarts",
            len(before.verdict.restarts),
            before.window_s / 3600,
            len(after.verdict.restarts),
            after.window_s / 3600,
            NEUTRAL,
            exposure="hours",
            per=1.0,
            comparable=ok,
        )
    )
    return Comparison(before, after, unequal, changes)


# The rates per 1,000 requests, in the order shown. `pins` (silent + anonymous: stuck with no
# watchdog line) is the headline; `stuck` adds what the watchdog released (the fault itself), so
# a watchdog deployed shows as pins improved, firings changed, stuck unchanged.
RATES = (
    ("pins", LOWER),
    ("silent_pins", LOWER),
    ("anonymous_pins", LOWER),
    ("stuck", LOWER),
    ("watchdog_fired", NEUTRAL),
    ("abort_races", NEUTRAL),
    ("abort_races_pinned", LOWER),
    ("abort_races_released", NEUTRAL),
    ("transfer_failed", LOWER),
    ("lost", LOWER),
    ("aborted", NEUTRAL),
)


def _count(side: Side, metric: str) -> int:
    c = side.verdict.counts
    races = side.races()
    return {
        "pins": c["silent_pin"] + c["anonymous_pins"],
        "silent_pins": c["silent_pin"],
        "anonymous_pins": c["anonymous_pins"],
        "stuck": c["silent_pin"] + c["anonymous_pins"] + c["watchdog_fired"],
        "watchdog_fired": c["watchdog_fired"],
        "abort_races": sum(races.values()),
        "abort_races_pinned": races.get("pinned", 0),
        "abort_races_released": races.get("released", 0),
        "transfer_failed": c["transfer_failed"],
        "lost": c["lost"],
        "aborted": c["aborted"],
    }[metric]


# ------------------------------------------------------------------ text


def render_text(cmp: Comparison) -> str:
    """Unequal evidence first, then each side's window and evidence, then the measures."""
    b, a = cmp.before, cmp.after
    out: list[str] = []
    if cmp.unequal:
        out += [
            "NOT COMPARABLE: no change is judged across unequal evidence",
            *[f"  - {u}" for u in cmp.unequal],
            "",
        ]
    rows = [
        ("window", *(f"{s['window']['start']} .. {s['window']['end']}" for s in (b.to_json(), a.to_json()))),
        *_side_rows(b, a),
    ]
    width = max(len(r[0]) for r in rows)
    col = max(len(x) for _, x, y in rows if max(len(x), len(y)) <= SHORT)
    out += [f"{'':<{width}}  {'before':<{col}}  after"]
    for name, x, y in rows:  # a long pair on two lines, each side named
        if max(len(x), len(y)) <= SHORT:
            out.append(f"{name:<{width}}  {x:<{col}}  {y}")
        else:
            out += [f"{name:<{width}}  before: {x}", f"{'':<{width}}  after:  {y}"]
    out += ["", f"changes (exact test for two Poisson rates, two-sided, significant at p < {ALPHA:g}):"]
    out.append(f"  {'measure':<22} {'before':>10} {'after':>10}  {'p':>8}  judgement")
    for c in cmp.changes:
        p = "-" if c.p_value is None else f"{c.p_value:.3g}"
        out.append(f"  {c.metric:<22} {_num(c.before):>10} {_num(c.after):>10}  {p:>8}  {_why(c)}")
    out.append(f"  (rates {RATES_UNIT}; restarts per hour; counts: before {b.verdict.counts['requests']:,} "
               f"requests, after {a.verdict.counts['requests']:,})")  # fmt: skip
    return "\n".join(out)


RATES_UNIT = "per 1,000 requests"
SHORT = 40  # a side's value longer than this: the pair is shown on two lines


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.4g}"


def _why(c: Change) -> str:
    counts = f"({c.before_count:,} -> {c.after_count:,})"
    if c.before_exposure <= 0 or c.after_exposure <= 0:
        return f"{c.judgement.replace('_', ' ')}: no {c.exposure} on a side, no rate {counts}"
    if c.judgement == "too_few":
        need = f"; {c.events_needed} needed at these exposures" if c.events_needed else ""
        return f"too few events to tell {counts}{need}"
    if c.judgement == "not_comparable":
        return f"not comparable {counts}"
    return f"{c.judgement.replace('_', ' ')} {counts}"


def _side_rows(b: Side, a: Side) -> list[tuple[str, str, str]]:
    def both(f: Any) -> tuple[str, str]:
        return f(b), f(a)

    def cov(s: Side) -> str:
        c = s.coverage()
        seen = (
            "every prefill's inflight queue observed"
            if c["inflight_observed"]
            else (
                "inflight queue unobserved: "
                + (", ".join(h or "?" for h in c["inflight_unobserved"]) or "no prefill")
            )
        )
        gap = (
            ""
            if c["longest_inflight_gap_s"] is None
            else f", longest gap {c['longest_inflight_gap_s']:.0f} s"
        )
        return f"{seen}{gap}; {c['holes']} hole(s), {c['decisive_holes']} decisive"

    def wd(s: Side) -> str:
        v = s.verdict
        deployed = {True: "deployed", False: "not deployed"}.get(v.deployed, "deployment unknown")
        t = "?" if v.timeout_s is None else f"{v.timeout_s:g} s"
        return f"{t} ({v.timeout_source}), {deployed}"

    def dwell(s: Side) -> str:
        d = s.dwell()
        if not d["firings"]:
            return "no firing"
        if d["median_s"] is None:
            return f"{d['firings']} firing(s)"
        return f"{d['firings']} firing(s), dwell {d['min_s']:.1f}/{d['median_s']:.1f}/{d['max_s']:.1f} s (min/median/max)"

    def races(s: Side) -> str:
        r = s.races()
        return f"{sum(r.values())}" + (
            " (" + ", ".join(f"{n} {o}" for o, n in sorted(r.items())) + ")" if r else ""
        )

    def floor(s: Side) -> str:
        f = s.floor
        if not f.get("samples"):
            return "no inflight sample"
        return (f"{f['samples']:,} samples, {f['nonzero_share']:.0%} above 0, "
                f"p50 {f['p50']} p90 {f['p90']} p99 {f['p99']} max {f['max']}")  # fmt: skip

    c = lambda k: lambda s: f"{s.verdict.counts[k]:,}"  # noqa: E731
    return [
        ("verdict", *both(lambda s: s.verdict.verdict)),
        ("evidence", *both(lambda s: s.verdict.evidence_level)),
        ("coverage", *both(cov)),
        ("watchdog", *both(wd)),
        ("requests", *both(c("requests"))),
        ("silent pins", *both(c("silent_pin"))),
        ("anonymous pins", *both(c("anonymous_pins"))),
        ("watchdog fired", *both(dwell)),
        ("recovery", *both(lambda s: s.verdict.recovery or "-")),
        ("abort races", *both(races)),
        ("transfer failed", *both(c("transfer_failed"))),
        ("lost", *both(c("lost"))),
        ("restarts", *both(lambda s: f"{len(s.verdict.restarts)}")),
        ("inflight floor", *both(floor)),
    ]


def check_code(cmp: Comparison) -> int:
    """`compare --check`: 2 (CRITICAL) when a measure is worse, 3 (UNKNOWN) when the evidence is
    unequal (nothing can be judged), else 0."""
    if cmp.worse:
        return 2
    return 3 if cmp.unequal else 0


def check_line(cmp: Comparison) -> str:
    status = ("OK", "WARNING", "CRITICAL", "UNKNOWN")[check_code(cmp)]
    if cmp.worse:
        text = "worse: " + ", ".join(cmp.worse)
    elif cmp.unequal:
        text = "not comparable: " + cmp.unequal[0]
    else:
        improved = [c.metric for c in cmp.changes if c.judgement == "improved"]
        text = ("improved: " + ", ".join(improved)) if improved else "no measure worse"
    perf = " ".join(
        f"{c.metric}_before={c.before_count} {c.metric}_after={c.after_count}" for c in cmp.changes
    )
    text = text.replace("|", "/")
    return f"{status} - compare {text} | {perf}" if perf else f"{status} - compare {text}"


def print_compare(cmp: Comparison, as_json: bool = False, check: bool = False) -> None:
    import json
    import sys

    from pdforensics.render import terminal_safe

    if check:
        text = terminal_safe(check_line(cmp), one_line=True)
    elif as_json:
        text = json.dumps(cmp.to_json(), indent=2, default=str)
    else:
        text = terminal_safe(render_text(cmp))
    sys.stdout.write(text + "\n")
