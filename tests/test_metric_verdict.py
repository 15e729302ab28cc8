"""SGLang's Prometheus gauges in the verdict (issue 31): evidence of their own kind that can make
the answer more cautious, never greener (queries/views/05_metric_holds.sql, docs/prometheus.md).

Hand-built databases (tests/verdict_helpers.py) with `metric_samples` rows as `ingest
--prometheus` stores them (tests/test_prometheus_source.py reads them from a real server). The
prefill logs healthy batches to 100 s, then nothing: an idle cluster, which the logs alone call
`nothing_stuck` when a later health check shows the floor at 0.
"""

from __future__ import annotations

import pytest

from pdforensics import store
from tests.test_classification import traffic
from tests.verdict_helpers import PREFILL, T0, Log, S

INFLIGHT = "sglang:num_prefill_inflight_queue_reqs"


def scrapes(
    log: Log, start: float, end: float, value: float, every: float = 10.0, host: str = "gpu-a"
) -> None:
    """A Prometheus target's samples of the prefill's inflight gauge, every `every` seconds."""
    series = f'{INFLIGHT}{{engine_type="prefill",instance="{host}:30000",job="sglang"}}'
    t = start
    while t <= end:
        log.con.execute(
            "INSERT INTO metric_samples (ingest_id, source, series, metric, labels, job, instance, engine_type, "
            "host, engine, matched_by, ts_us, value) VALUES (1, 'prometheus:test', ?, ?, '{}', 'sglang', ?, "
            "'prefill', ?, 'prefill', 'name', ?, ?)",
            [series, INFLIGHT, f"{host}:30000", host, T0 + int(t * S), value],
        )
        t += every


def idle_after_traffic(log: Log) -> None:
    traffic(log, 10, 100)
    log.batch(400, inflight=1)  # a health check much later: its floor is 0


def test_the_logs_alone_call_the_idle_window_healthy(log: Log) -> None:
    idle_after_traffic(log)
    v = log.verdict()
    assert v.verdict == "nothing_stuck"
    assert all(o["metrics"] is None for o in v.to_json()["observed"])


def test_a_gauge_held_through_the_quiet_stretch_is_not_healthy(log: Log) -> None:
    """Every scrape from 120 s to 390 s reads 1 while the prefill printed nothing: SGLang kept or
    re-measured a count of 1 with no batch line, past timeout + grace: inconclusive, and the
    reason that decides names the host, the stretch and why."""
    idle_after_traffic(log)
    scrapes(log, 120, 390, 1)
    v = log.verdict()
    assert v.verdict == "inconclusive", v.reasons
    first = v.reasons[0]
    assert first.startswith("the metrics show gpu-a holding at least 1 request(s) in its inflight queue"), (
        first
    )
    assert "28 scrape(s), every 10 s" in first
    assert any(
        r.startswith("metrics beside the logs: 28 scrape(s) of the inflight gauge of gpu-a")
        for r in v.reasons
    )
    # observed says which evidence, of which kind, at which resolution
    [prefill] = [o for o in v.to_json()["observed"] if o["engine"] == "prefill"]
    m = prefill["metrics"]
    assert (m["source"], m["queues"], m["series"], m["scrapes"], m["resolution_s"]) == (
        "prometheus", ["inflight"], 1, 28, 10.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("value", "start", "end"),
    [
        (0, 120, 390),  # the gauge read empty: what the logs said
        (1, 120, 170),  # held 50 s, under timeout + grace (70 s)
    ],
)
def test_metrics_that_show_nothing_held_long_change_nothing(
    log: Log, value: int, start: float, end: float
) -> None:
    idle_after_traffic(log)
    scrapes(log, start, end, value)
    v = log.verdict()
    assert v.verdict == "nothing_stuck", v.reasons
    assert any(r.startswith("metrics beside the logs:") for r in v.reasons)


def test_a_scrape_gap_breaks_the_stretch(log: Log) -> None:
    """Two stretches of 1 with no scrape between 200 s and 260 s: neither is a full timeout + grace,
    and a gap is no evidence of a hold."""
    idle_after_traffic(log)
    scrapes(log, 150, 200, 1)
    scrapes(log, 260, 310, 1)
    assert log.verdict().verdict == "nothing_stuck"


def test_another_hosts_gauge_is_not_this_prefills(log: Log) -> None:
    """A series of a prefill with no line in the window (its journal rotated away, or another
    deployment's target) is not gpu-a's: gpu-a's answer is its own, and the window names gpu-z as a
    prefill only the metrics show, judged from its gauge alone and never healthy."""
    idle_after_traffic(log)
    scrapes(log, 120, 390, 1, host="gpu-z")
    v = log.verdict()
    assert v.verdict == "inconclusive", v.reasons
    [only] = [r for r in v.reasons if r.startswith("the metrics show prefill gpu-z")]
    assert "28 scrape(s) of its inflight gauge" in only and "it held at least 1 request(s) for 270 s" in only
    assert not any(r.startswith("the metrics show gpu-a") for r in v.reasons)


@pytest.mark.parametrize(("value", "says"), [(0, "the gauge read 0 throughout"), (1, "it held at least 1")])
def test_metrics_alone_never_earn_nothing_stuck(log: Log, value: int, says: str) -> None:
    """The journal rotated away: only the gauge is left. A 0 is the last count SGLang set, not the
    queue since; a run held past timeout + grace may be a pin no line names: inconclusive either way,
    the reason saying which."""
    scrapes(log, 0, 300, value)
    v = log.verdict()
    assert v.verdict == "inconclusive", v.reasons
    [only] = [r for r in v.reasons if r.startswith("the metrics show prefill gpu-a")]
    assert says in only and "metrics alone never earn nothing_stuck" in only
    # in the universe of instances, named by its target, never observed
    [gpu_a] = v.to_json()["instances"]
    assert (gpu_a["host"], gpu_a["observed"], gpu_a["verdict"]) == ("gpu-a", False, "inconclusive")
    assert gpu_a["named_by"] == ["prometheus target gpu-a:30000 (job sglang)"] and gpu_a["lines_naming"] == 31


def test_the_gauge_is_read_where_the_logs_were_quiet_only(log: Log) -> None:
    """Batch lines every 20 s through the stretch show the floor at 0: the logs observe the queue,
    the gauge's 1 is each batch's own request (0.5.9+ counts it), and decides nothing."""
    traffic(log, 10, 390)
    log.batch(400, inflight=1)
    scrapes(log, 120, 390, 1)
    assert log.verdict().verdict == "nothing_stuck"
    assert PREFILL["host"] == "gpu-a"


def test_a_metrics_ingest_after_a_judgement_is_judged_again(log: Log) -> None:
    """The judgement cache is keyed on what the file holds: samples stored after a cached verdict
    give the new answer, not the kept one."""
    from pdforensics.verdict import VerdictOptions, compute_verdict
    from tests.verdict_helpers import connect_read_only

    def judged() -> str:
        con = connect_read_only(log.path)
        try:
            return compute_verdict(con, VerdictOptions(watchdog_timeout_s=60)).verdict
        finally:
            con.close()

    idle_after_traffic(log)
    log.install()
    log.close()
    assert judged() == "nothing_stuck"
    log.con = store.open_db(log.path)
    scrapes(log, 120, 390, 1)
    log.con.close()
    assert judged() == "inconclusive"
