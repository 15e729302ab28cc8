"""The verdict from SGLang's Prometheus gauges, scenario by scenario, from a real server (issue 31).

One Prometheus server (Debian's `prometheus`, 127.0.0.1), its TSDB backfilled by `promtool tsdb
create-blocks-from openmetrics` from the simulator's `--openmetrics` output of every L0 scenario
(each an hour after the last, so their series never overlap), and of `decode_restart_old_build`
(a restart: a scrape gap and counter resets). For each scenario the same incident is judged from
its journal alone, from the server's samples alone (the journal rotated away), and from both:

* metrics alone never say more than the logs: the same verdict, or a more cautious one, and the
  reason that says what the gauge showed (a gauge is the last count SGLang set: metrics alone
  never earn `nothing_stuck`);
* metrics beside the logs never make the answer greener than the logs alone, gaps or not;
* the OpenMetrics file gives what the server gives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.metric_ingest import ingest_metrics
from pdforensics.paths import fixtures_dir
from pdforensics.simulate import simulate
from pdforensics.simulate.openmetrics import write_openmetrics
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source
from pdforensics.verdict import Verdict, VerdictOptions, compute_verdict, install_views
from tests.test_prometheus_source import NOW, PROMETHEUS, PROMTOOL, backfilled_server

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None, reason="Debian package prometheus is not installed"
)

GREENNESS = {"nothing_stuck": 2, "watchdog_fired": 1, "inconclusive": 0, "watchdog_missed": 0}
L0 = sorted(
    p.name
    for p in fixtures_dir().iterdir()
    if (p / "expected.json").is_file()
    and json.loads((p / "expected.json").read_text())["evidence_level"] == "L0"
)
SCENARIOS = [*L0, "decode_restart_old_build"]
HOUR_US = 3_600_000_000


@dataclass
class Incident:
    journal: Path
    metrics: Path
    expected: dict
    since_us: int
    until_us: int


@dataclass
class Served:
    url: str
    incidents: dict[str, Incident]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("metric-scenarios")
    incidents = {}
    for k, name in enumerate(SCENARIOS):
        now = NOW + k * HOUR_US
        out = simulate(name, root / name, now_us=now)
        metrics = write_openmetrics(name, root / f"{name}.om", now_us=now)
        expected = json.loads((out / "expected.json").read_text())
        window = expected["window"]
        incidents[name] = Incident(
            out / "journal.export",
            metrics,
            expected,
            window["since_us"] - 60_000_000,
            window["until_us"] + 60_000_000,
        )
    # one file for the backfill: promtool wants each series' samples in time order, and each
    # scenario's hour is after the previous one's
    merged = root / "all.om"
    body = [
        line
        for name in SCENARIOS
        for line in incidents[name].metrics.read_text().splitlines()
        if line != "# EOF" and not line.startswith(("# TYPE", "# HELP", "# UNIT"))
    ]
    merged.write_text("\n".join([*body, "# EOF"]) + "\n")
    proc, url = backfilled_server(merged, root)
    try:
        yield Served(url, incidents)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def judged(
    db: Path, inc: Incident, *, logs: bool, server: str | None = None, file: Path | None = None
) -> Verdict:
    con = store.open_db(db)
    try:
        install_views(con)
        if logs:
            ingest(db, [open_file_source(inc.journal)], Selection(), load_catalog(), views=False, con=con)
        if server or file:
            ingest_metrics(con, prometheus=server, openmetrics=[file] if file else None, since_us=inc.since_us, until_us=inc.until_us,
                           now_us=inc.until_us)  # fmt: skip
        opts = inc.expected.get("verdict_options") or {}
        return compute_verdict(con, VerdictOptions(watchdog_timeout_s=opts.get("watchdog_timeout_s")))
    finally:
        con.close()


def at_most_as_green(got: Verdict, logs: Verdict) -> bool:
    return GREENNESS[got.verdict] <= GREENNESS[logs.verdict]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_metrics_alone_are_never_greener_than_the_logs(served: Served, tmp_path: Path, scenario: str) -> None:
    inc = served.incidents[scenario]
    logs = judged(tmp_path / "logs.duckdb", inc, logs=True)
    assert logs.verdict == inc.expected["verdict"], logs.reasons
    alone = judged(tmp_path / "metrics.duckdb", inc, logs=False, server=served.url)
    assert at_most_as_green(alone, logs) and alone.verdict != "nothing_stuck", (logs.verdict, alone.reasons)
    said = [r for r in alone.reasons if r.startswith("the metrics show prefill ")]
    assert said and all("metrics alone never earn nothing_stuck" in r for r in said), alone.reasons
    both = judged(tmp_path / "both.duckdb", inc, logs=True, server=served.url)
    assert at_most_as_green(both, logs), (logs.verdict, both.reasons)
    assert any(r.startswith("metrics beside the logs:") for r in both.reasons), both.reasons


def test_the_file_judges_as_the_server(served: Served, tmp_path: Path) -> None:
    inc = served.incidents[L0[0]]
    by_server = judged(tmp_path / "s.duckdb", inc, logs=False, server=served.url)
    by_file = judged(tmp_path / "f.duckdb", inc, logs=False, file=inc.metrics)
    assert (by_file.verdict, by_file.reasons) == (by_server.verdict, by_server.reasons)


def test_a_quiet_prefill_whose_gauge_holds_is_not_healthy(served: Served, tmp_path: Path) -> None:
    """l0_anonymous_pins with the prefill's own lines gone from the window's middle on (its
    `Prefill batch` lines stop; nothing says why): the server's gauge still reads the pins there,
    and the window names it from the metrics, never greener than the logs alone."""
    from pdforensics.simulate import mutate as mu

    inc = served.incidents["l0_anonymous_pins"]
    entries = mu.read_entries(inc.journal.with_name("journal.json"))
    middle = (inc.since_us + inc.until_us) // 2
    quiet = [e for e in entries if not (mu.engine_of(e) == "prefill" and mu.ts(e) > middle)]
    assert len(quiet) < len(entries)
    mu.write_entries(quiet, tmp_path / "journal.json")
    edited = Incident(tmp_path / "journal.json", inc.metrics, inc.expected, inc.since_us, inc.until_us)
    logs = judged(tmp_path / "logs.duckdb", edited, logs=True)
    both = judged(tmp_path / "both.duckdb", edited, logs=True, server=served.url)
    assert at_most_as_green(both, logs) and both.verdict != "nothing_stuck", both.reasons
    held = [r for r in both.reasons if r.startswith("the metrics show glm-p01 holding at least")]
    assert held and "with no line of its own showing that queue" in held[0], both.reasons
