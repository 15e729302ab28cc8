"""`watch --listen` scraped by a real Prometheus server, `watch --textfile` read by a real
node_exporter, and the example alerting rules checked by promtool (Debian packages
`prometheus`, `prometheus-node-exporter`; all on 127.0.0.1)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import JOURNAL_REMOTE, REPO
from tests.watch_helpers import WAIT_S, append_journal, start_watch, traffic

PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
PROMTOOL = shutil.which("promtool")
ARGS = ("--watchdog-timeout", "5")

needs_journal = pytest.mark.skipif(
    not JOURNAL_REMOTE.exists(), reason="systemd-journal-remote is not installed"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def until(what: str, fn, timeout: float = WAIT_S):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < end:
        try:
            last = fn()
            if last:
                return last
        except OSError as exc:  # not listening yet
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{what} not seen within {timeout}s (last: {last!r})")


def pinned_watch(tmp_path: Path, *args: str):  # type: ignore[no-untyped-def]
    """A watch that has seen one silent pin (request p4) and nothing else."""
    journal, db = tmp_path / "remote.journal", tmp_path / "w.duckdb"
    lines = traffic(30, pin=4)
    append_journal(journal, lines)
    watch = start_watch(tmp_path, db, "--journal-file", str(journal), *ARGS, *args)
    watch.wait_for("the silent pin", lambda st: st.get("lines", 0) >= len(lines) and st.get("alerts") == 1)
    return watch


def metric_value(text: str, name: str) -> float | None:
    """The value of the first sample named `name` (with its labels, if given)."""
    for line in text.splitlines():
        if line.startswith(name + " ") or ("{" not in name and line.startswith(name + "{")):
            return float(line.rsplit(" ", 1)[1])
    return None


@needs_journal
@pytest.mark.skipif(PROMETHEUS is None, reason="Debian package prometheus is not installed")
def test_prometheus_scrapes_the_silent_pin(tmp_path: Path) -> None:
    watch = pinned_watch(tmp_path, "--listen", "127.0.0.1:0")
    port = free_port()
    prom = None
    try:
        target = watch.state()["listen"]
        assert metric_value(get(f"http://{target}/metrics"), "pdforensics_silent_pins") == 1.0
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: pdforensics\n    static_configs:\n      - targets: ['{target}']\n"
        )
        prom = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.err", "w"),  # noqa: SIM115
        )  # fmt: skip
        query = urllib.parse.urlencode({"query": "pdforensics_silent_pins"})

        def series() -> list:
            got = json.loads(get(f"http://127.0.0.1:{port}/api/v1/query?{query}"))
            return got["data"]["result"] if got.get("status") == "success" else []

        result = until("pdforensics_silent_pins in Prometheus", series)
        assert len(result) == 1
        assert result[0]["metric"]["job"] == "pdforensics" and result[0]["metric"]["instance"] == target
        assert float(result[0]["value"][1]) == 1.0
        verdict = json.loads(get(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": "pdforensics_verdict == 1"})))["data"]["result"]  # fmt: skip
        assert [r["metric"]["verdict"] for r in verdict] == ["watchdog_missed"]
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=30)
        assert watch.stop() == 0


@needs_journal
@pytest.mark.skipif(NODE_EXPORTER is None, reason="Debian package prometheus-node-exporter is not installed")
def test_node_exporter_textfile_collector_reads_the_metric(tmp_path: Path) -> None:
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    watch = pinned_watch(tmp_path, "--textfile", str(textdir / "pdforensics.prom"))
    port = free_port()
    exporter = subprocess.Popen(
        [str(NODE_EXPORTER), "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={textdir}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "exporter.err", "w"),  # noqa: SIM115
    )  # fmt: skip
    try:
        text = until("the exporter's /metrics", lambda: get(f"http://127.0.0.1:{port}/metrics"))
        assert metric_value(text, "pdforensics_silent_pins") == 1.0
        assert 'pdforensics_silent_pins_by_host{host="gpu-a"} 1' in text
        # p4 is the one open request: received at 4 s, the newest line at 29.5 s (log time)
        assert metric_value(text, 'pdforensics_open_requests{host="gpu-a"}') == 1.0
        assert metric_value(text, 'pdforensics_oldest_open_request_age_seconds{host="gpu-a"}') == 25.5
        assert metric_value(text, 'pdforensics_inflight_floor{host="gpu-a"}') == 1.0
        assert metric_value(text, 'pdforensics_verdict{verdict="watchdog_missed"}') == 1.0
        assert metric_value(text, 'pdforensics_verdict{verdict="nothing_stuck"}') == 0.0
        assert (
            metric_value(
                text, 'pdforensics_unit_last_line_age_seconds{host="gpu-a",unit="sglang-prefill.service"}'
            )
            == 0.0
        )
        assert metric_value(text, "pdforensics_watchdog_firings_total") == 0.0
        assert metric_value(text, "node_textfile_scrape_error") == 0.0  # the file parsed cleanly
        assert not list(textdir.glob("*.tmp*"))  # written aside and renamed
    finally:
        exporter.terminate()
        exporter.wait(timeout=30)
        assert watch.stop() == 0


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")
def test_example_alerting_rules_pass_promtool() -> None:
    rules = REPO / "contrib" / "prometheus" / "pdforensics.rules.yml"
    proc = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
    assert "pdforensics_silent_pins" in rules.read_text()


def test_totals_are_counters_that_only_grow() -> None:
    """Issue 28 item 4: `*_total` series are Prometheus counters (rate() and increase() read them),
    grown to the fold's totals, which a restart restores: a smaller total never lowers them."""
    from prometheus_client import generate_latest

    from pdforensics.metrics import WatchMetrics

    m = WatchMetrics()
    text = generate_latest(m.registry).decode()
    for name in ("watchdog_firings", "coverage_holes", "alerts", "lines", "database_busy"):
        assert f"# TYPE pdforensics_{name}_total counter" in text, name
    for total in (3, 2, 5):
        m.count_to(m.firings, total)
        m.count_to(m.alerts, total, "silent_pin")
    text = generate_latest(m.registry).decode()
    assert metric_value(text, "pdforensics_watchdog_firings_total") == 5.0
    assert metric_value(text, 'pdforensics_alerts_total{kind="silent_pin"}') == 5.0
