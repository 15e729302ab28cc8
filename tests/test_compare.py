"""`pdforensics compare`: two windows judged by the same rules, each rate's change tested.

The databases: the abort storm on the old build (fixtures/abort_storm_pins: three abort races
left pinned), the same storm on the fixed build with 20x the background traffic (simulated:
the pins' absence then rests on enough requests), the old build twice more (two seeds, two hours
apart, in one database), and the L0 scenario (fixtures/l0_anonymous_pins)."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdforensics import store
from pdforensics.api import run_compare, verdict_options
from pdforensics.catalog import load_catalog
from pdforensics.cli import app
from pdforensics.compare import (
    ALPHA,
    JUDGEMENTS,
    Side,
    compare_sides,
    events_needed,
    judge_side,
    poisson_rates_p,
    rate_change,
)
from pdforensics.ingest import ingest
from pdforensics.simulate import simulate
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source
from pdforensics.timewindow import parse_instant
from pdforensics.verdict import compute_verdict

NOW = parse_instant("2026-11-29T12:00:00Z", 0)
HOUR_US = 3_600_000_000
# the same build twice, two hours apart, in one database: the windows compare reads
SAME_BUILD = ("2026-11-29T11:54:00Z..2026-11-29T12:00:00Z", "2026-11-29T13:54:00Z..2026-11-29T14:00:00Z")


def _ingest_simulated(scenario: str, out: Path, db: Path, seed: int, scale: float, now_us: int) -> None:
    incident = simulate(scenario, out / f"{scenario}-{seed}", now_us=now_us, seed=seed, scale=scale)
    ingest(db, [open_file_source(incident / "journal.export")], Selection(), load_catalog())


@pytest.fixture(scope="module")
def old_db(scenario_db) -> Path:
    return scenario_db("json", "abort_storm_pins")


@pytest.fixture(scope="module")
def l0_db(scenario_db) -> Path:
    return scenario_db("json", "l0_anonymous_pins")


@pytest.fixture(scope="module")
def fixed_db(built) -> Path:
    def build(out: Path) -> None:
        _ingest_simulated("abort_storm_clean", out, out / "db.duckdb", seed=0, scale=20, now_us=NOW)

    return built("compare-abort_storm_clean-x20", build) / "db.duckdb"


@pytest.fixture(scope="module")
def same_build_db(built) -> Path:
    def build(out: Path) -> None:
        for seed, now in ((1, NOW), (2, NOW + 2 * HOUR_US)):
            _ingest_simulated("abort_storm_pins", out, out / "db.duckdb", seed=seed, scale=1, now_us=now)

    return built("compare-abort_storm_pins-twice", build) / "db.duckdb"


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args), env={"PDFORENSICS_DEBUG": ""})
    return res.exit_code, res.stdout, res.stderr


def compare_json(*args: str) -> dict:
    code, out, err = cli("compare", "--watchdog-timeout", "60", "--json", *args)
    assert code == 0, err
    return json.loads(out)


def change(doc: dict, metric: str) -> dict:
    return next(c for c in doc["changes"] if c["metric"] == metric)


# ------------------------------------------------------------------ the test itself


def _reference_p(k1: int, t1: Fraction, k2: int, t2: Fraction) -> Fraction:
    """The conditional binomial test in exact rational arithmetic: the sum of the probabilities of
    every split no more likely than the observed one."""
    n, p = k1 + k2, t1 / (t1 + t2)
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    return sum((x for x in pmf if x <= pmf[k1]), Fraction(0))


@pytest.mark.parametrize(
    ("k1", "k2", "t1", "t2"),
    [
        (k1, k2, t1, t2)
        for k1, k2 in itertools.product((0, 1, 3, 7), (0, 2, 5, 11))
        for t1, t2 in ((38, 314), (50, 50), (7, 3))
    ],
)
def test_the_p_value_is_the_exact_conditional_binomial_test(k1: int, k2: int, t1: int, t2: int) -> None:
    expected = 1.0 if k1 + k2 == 0 else float(_reference_p(k1, Fraction(t1), k2, Fraction(t2)))
    assert poisson_rates_p(k1, t1, k2, t2) == pytest.approx(expected, rel=1e-9)


def _every_split_p(k1: int, t1: float, k2: int, t2: float) -> float:
    """The same test by summing every split's probability (what the tails' bisection shortens)."""
    n, p = k1 + k2, t1 / (t1 + t2)
    logs = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
            + (n - k) * math.log1p(-p) for k in range(n + 1)]  # fmt: skip
    return min(1.0, sum(math.exp(x) for x in logs if x <= logs[k1] + 1e-7))


@pytest.mark.parametrize(("k1", "k2", "t1", "t2"), [(2000, 2100, 1e5, 1e5), (12, 3000, 38.0, 9e4), (0, 900, 1.0, 314.0),
                                                   (1500, 0, 5e3, 5e4), (700, 650, 3.3, 3.1)])  # fmt: skip
def test_large_counts_match_the_sum_over_every_split(k1: int, k2: int, t1: float, t2: float) -> None:
    assert poisson_rates_p(k1, t1, k2, t2) == pytest.approx(
        _every_split_p(k1, t1, k2, t2), rel=1e-9, abs=1e-300
    )


def test_too_few_events_is_stated_with_the_count_needed() -> None:
    # equal exposures: every one of n events on one side has p = 2 * 0.5**n, below 0.05 from n = 6
    assert events_needed(100, 100, fell=True) == 6
    few = rate_change("pins", 5, 100, 0, 100)
    assert few.judgement == "too_few" and few.events_needed == 6 and few.p_value == pytest.approx(2 / 32)
    enough = rate_change("pins", 6, 100, 0, 100)
    assert enough.judgement == "improved" and enough.p_value == pytest.approx(2 / 64)
    assert rate_change("pins", 0, 100, 6, 100).judgement == "worse"
    assert rate_change("aborted", 0, 100, 6, 100, direction="neutral").judgement == "changed"
    assert rate_change("pins", 10, 100, 9, 100).judgement == "no_change"
    # a side with no requests has no rate: nothing to tell
    assert rate_change("pins", 3, 0, 0, 100).judgement == "too_few"


# ------------------------------------------------------------------ the done criteria


def test_the_fixed_build_lowers_the_pin_rate_with_a_p_value(old_db: Path, fixed_db: Path) -> None:
    doc = compare_json("--before-db", str(old_db), "--after-db", str(fixed_db))
    assert doc["comparable"] and doc["unequal_evidence"] == []
    before, after = doc["before"], doc["after"]
    assert before["evidence_level"] == after["evidence_level"] == "L1"
    k1, k2 = before["counts"]["silent_pin"], after["counts"]["silent_pin"]
    t1, t2 = before["counts"]["requests"], after["counts"]["requests"]
    assert k1 > 0 and k2 == 0 and t2 > t1  # the old build pinned; the fixed one, busier, did not
    pins = change(doc, "pins")
    assert pins["judgement"] == "improved"
    assert pins["before"] == pytest.approx(1000 * k1 / t1, abs=1e-3) and pins["after"] == 0
    assert pins["p_value"] < ALPHA and pins["p_value"] == pytest.approx(
        poisson_rates_p(k1, t1, k2, t2), rel=1e-3
    )
    assert before["abort_races"]["pinned"] == k1 and after["abort_races"].get("pinned", 0) == 0
    assert change(doc, "abort_races_pinned")["judgement"] == "improved"
    assert {c["judgement"] for c in doc["changes"]} <= set(JUDGEMENTS)
    assert not [c for c in doc["changes"] if c["judgement"] == "worse"]
    # the text says so too, with the p-value; --check is OK
    code, text, _ = cli(
        "compare", "--watchdog-timeout", "60", "--before-db", str(old_db), "--after-db", str(fixed_db)
    )
    assert code == 0 and "NOT COMPARABLE" not in text
    line = next(x for x in text.splitlines() if x.split()[:1] == ["pins"])
    assert "improved" in line and f"{pins['p_value']:.3g}" in line
    code, out, _ = cli(
        "compare",
        "--watchdog-timeout",
        "60",
        "--before-db",
        str(old_db),
        "--after-db",
        str(fixed_db),
        "--check",
    )
    assert code == 0 and out.startswith("OK - compare improved: pins") and len(out.splitlines()) == 1
    assert re.match(r"^(OK|WARNING|CRITICAL|UNKNOWN) - [^|\n]+ \| (\w+=\d+ ?)+$", out.strip()), out


def test_two_windows_of_the_same_build_show_no_change(same_build_db: Path) -> None:
    doc = compare_json("--db", str(same_build_db), "--before", SAME_BUILD[0], "--after", SAME_BUILD[1])
    assert doc["comparable"]
    before, after = doc["before"], doc["after"]
    assert (
        before["window"]["start"] == "2026-11-29T11:54:00Z"
        and after["window"]["end"] == "2026-11-29T14:00:00Z"
    )
    assert before["counts"]["silent_pin"] > 0 and after["counts"]["silent_pin"] > 0
    pins = change(doc, "pins")
    assert pins["judgement"] == "no_change" and pins["p_value"] >= ALPHA
    # enough events that a change could have shown: not "too few"
    assert pins["events_needed"] <= pins["before_count"] + pins["after_count"]
    assert not {"improved", "worse"} & {c["judgement"] for c in doc["changes"]}
    code, _, _ = cli("compare", "--watchdog-timeout", "60", "--db", str(same_build_db),
                     "--before", SAME_BUILD[0], "--after", SAME_BUILD[1], "--check")  # fmt: skip
    assert code == 0


def test_unequal_evidence_levels_never_claim_an_improvement(l0_db: Path, fixed_db: Path) -> None:
    doc = compare_json("--before-db", str(l0_db), "--after-db", str(fixed_db))
    assert doc["before"]["evidence_level"] == "L0" and doc["after"]["evidence_level"] == "L1"
    assert not doc["comparable"] and doc["unequal_evidence"][0].startswith("evidence levels differ")
    assert {c["judgement"] for c in doc["changes"]} == {"not_comparable"}
    # what the refusal withholds: the same counts at equal evidence would be called an improvement
    pins = change(doc, "pins")
    assert pins["before_count"] > 0 and pins["after_count"] == 0
    naive = rate_change("pins", pins["before_count"], pins["before_exposure"], 0, pins["after_exposure"])
    assert naive.judgement == "improved"
    code, text, _ = cli(
        "compare", "--watchdog-timeout", "60", "--before-db", str(l0_db), "--after-db", str(fixed_db)
    )
    assert code == 0 and text.startswith("NOT COMPARABLE") and "improved" not in text
    code, out, _ = cli(
        "compare",
        "--watchdog-timeout",
        "60",
        "--before-db",
        str(l0_db),
        "--after-db",
        str(fixed_db),
        "--check",
    )
    assert code == 3 and out.startswith("UNKNOWN - compare not comparable: evidence levels differ")


def test_different_timeouts_are_unequal_rules(old_db: Path, fixed_db: Path) -> None:
    # no --watchdog-timeout: the old build is judged by the 300 s default, the fixed one by its armed 60 s
    code, out, err = cli("compare", "--json", "--before-db", str(old_db), "--after-db", str(fixed_db))
    assert code == 0, err
    doc = json.loads(out)
    assert any(u.startswith("the timeouts differ") for u in doc["unequal_evidence"])
    assert "improved" not in {c["judgement"] for c in doc["changes"]}


def test_a_worse_after_window_exits_2(old_db: Path, fixed_db: Path) -> None:
    code, out, _ = cli(
        "compare",
        "--watchdog-timeout",
        "60",
        "--before-db",
        str(fixed_db),
        "--after-db",
        str(old_db),
        "--check",
    )
    assert code == 2 and out.startswith("CRITICAL - compare worse: pins") and "pins_after=3" in out


def test_the_library_compares_two_verdicts_alone(old_db: Path, fixed_db: Path) -> None:
    """compare_sides on bare Verdicts (abort races from their requests) judges as the CLI does."""
    sides, bare = [], []
    for db in (old_db, fixed_db):
        con = store.open_db(db, read_only=True)
        try:
            opts = verdict_options(None, None, 60, None)
            sides.append(judge_side(con, opts))
            bare.append(Side(compute_verdict(con, opts)))
        finally:
            con.close()
    full, alone = compare_sides(*sides), compare_sides(*bare)
    assert [c.to_json() for c in alone.changes] == [c.to_json() for c in full.changes]
    assert alone.to_json()["after"]["inflight_floor"] == {}  # the floor needs the views: judge_side
    assert full.to_json()["after"]["inflight_floor"]["samples"] > 0
    assert run_compare(old_db, None, None, old_db, fixed_db, 60, None, NOW).judgement("pins") == "improved"


# ------------------------------------------------------------------ usage


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--before-db", "a.duckdb"], "--before-db and --after-db go together"),
        (["--before", "2026-11-29T10:00:00Z..2026-11-29T11:00:00Z"], "give --before and --after"),
        (["--before", "2026-11-29T10:00:00Z", "--after", "1h.."], "give a window as WHEN..WHEN"),
        (["--before", "..", "--after", "1h.."], "give a window as WHEN..WHEN"),
        (["--before", "yesterday-ish..", "--after", "1h.."], "yesterday-ish"),
    ],
)
def test_usage_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PDFORENSICS_DEBUG"}
    proc = subprocess.run([sys.executable, "-m", "pdforensics", "compare", "--db", str(tmp_path / "x.duckdb"), *args],
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_help_names_every_default_and_ends_with_an_example() -> None:
    import test_cli

    test_cli.test_help_shows_no_bool_every_default_and_ends_with_an_example("compare")


# ------------------------------------------------------------------ the report's section


def _json_script(html: str, block_id: str) -> dict:
    at = html.index(f'id="{block_id}"')
    return json.loads(html[html.index(">", at) + 1 : html.index("</script>", at)])


def test_report_compare_sets_both_floors_on_one_axis(
    old_db: Path, fixed_db: Path, l0_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "fixed.html"
    code, _, err = cli("report", "--db", str(fixed_db), "--compare-db", str(old_db), "--watchdog-timeout", "60",
                       "--out", str(out))  # fmt: skip
    assert code == 0, err
    html = out.read_text()
    assert 'id="compare"' in html and 'id="fig-compare"' in html and "Not comparable" not in html
    table = next(t for t in _json_script(html, "pdf-data")["tables"] if t["id"] == "compare")
    keys = [c["key"] for c in table["columns"]]
    pins = next(r for r in table["rows"] if r[0] == "pins")
    assert pins[keys.index("judgement")] == "improved"
    # one bar trace per window on one floor axis, each window's shares summing to 1
    fig = _json_script(html, "pdf-fig-compare")
    assert [t["name"].split()[0] for t in fig["data"]] == ["before", "after"]
    assert all(sum(t["y"]) == pytest.approx(1.0) for t in fig["data"])
    assert 0 in fig["data"][1]["x"] and max(fig["data"][0]["x"]) > 0  # the old build's floor stayed up
    # unequal evidence is said in the section first, and nothing is judged
    code, _, err = cli("report", "--db", str(fixed_db), "--compare-db", str(l0_db), "--watchdog-timeout", "60",
                       "--out", str(out))  # fmt: skip
    assert code == 0, err
    html = out.read_text()
    section = html[html.index('id="compare"') :]
    assert section.index("Not comparable") < section.index('id="fig-compare"')
    table = next(t for t in _json_script(html, "pdf-data")["tables"] if t["id"] == "compare")
    assert {r[[c["key"] for c in table["columns"]].index("judgement")] for r in table["rows"]} == {
        "not_comparable"
    }
