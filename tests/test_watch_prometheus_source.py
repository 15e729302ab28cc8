"""`watch --prometheus`: a real Prometheus (Debian's `prometheus`, on 127.0.0.1) scraping, every
second, a /metrics endpoint this test serves with SGLang's inflight gauge and an `instance` named
like the log's host; the watch follows a quiet prefill's plain log (its first lines, then nothing)
on the wall clock, so only the gauge can show the pin. Every wait is on the watch's status file or
stderr, with a deadline."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pdforensics.verdict import iso
from tests.test_prometheus_source import free_port, wait_ready
from tests.watch_helpers import S, WatchProc, prefill_stats, prefix, receive, start_watch

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="Debian package prometheus is not installed")

STUCK_US = 6 * S  # --watchdog-timeout 5 + --grace 1
INFLIGHT = "sglang:num_prefill_inflight_queue_reqs"


@dataclass
class Exposition:
    """SGLang's /metrics, as a prefill's HTTP server answers it: the gauge the test sets."""

    server: ThreadingHTTPServer
    value: int = 0
    failing: bool = False  # answer 500: Prometheus records up = 0

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


@pytest.fixture
def exposition() -> Iterator[Exposition]:
    state: dict[str, Exposition] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            e = state["e"]
            if e.failing or self.path != "/metrics":
                self.send_response(500)
                self.end_headers()
                return
            body = (f"# TYPE {INFLIGHT} gauge\n"
                    f'{INFLIGHT}{{engine_type="prefill",model_name="m",tp_rank="0"}} {e.value}\n'
                    "# TYPE sglang:num_running_reqs gauge\n"
                    'sglang:num_running_reqs{engine_type="prefill",model_name="m",tp_rank="0"} 0\n').encode()  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["e"] = Exposition(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["e"]
    finally:
        server.shutdown()
        server.server_close()


def launch(root: Path, target_port: int, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """Prometheus scraping the exposition every second, its `instance` named like the log's host."""
    config = root / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: sglang\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
        "        labels: {instance: 'gpu-a:30000'}\n"
    )
    port = port or free_port()
    err = root / "prometheus.err"
    proc = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(err, "w"),  # noqa: SIM115
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, err)
    except AssertionError:
        proc.terminate()
        proc.wait(timeout=30)
        raise
    return proc, url


def quiet_prefill(path: Path) -> None:
    """The prefill's first lines (now, on the wall clock), then nothing."""
    now = time.time_ns() // 1000
    path.write_text(f"{prefix(now)} {prefill_stats(0)}\n")


def watch(tmp: Path, db: Path, log: Path, url: str, name: str = "watch") -> WatchProc:
    return start_watch(tmp, db, "--file", str(log), "--host", "gpu-a", "--tz", "UTC", "--clock", "wall",
                       "--watchdog-timeout", "5", "--grace", "1", "--prometheus", url,
                       "--prometheus-poll", "1", name=name)  # fmt: skip


def prom(st: dict[str, Any]) -> dict[str, Any]:
    return st.get("prometheus") or {}


def metric_pins(w: WatchProc) -> list[dict[str, Any]]:
    return [a for a in w.alerts() if a["alert"] == "metric_pin"]


def test_a_quiet_prefills_gauge_alerts_once_per_episode(tmp_path: Path, exposition: Exposition) -> None:
    proc, url = launch(tmp_path, exposition.port)
    log, db = tmp_path / "prefill.log", tmp_path / "w.duckdb"
    quiet_prefill(log)
    w = watch(tmp_path, db, log, url)
    try:
        start = w.wait_said("following")
        assert f"gauges: prometheus {url} every 1 s" in start
        # (2) the gauge at 0 for longer than timeout + grace: no alert
        first = w.wait_for("a 0 sample", lambda st: prom(st).get("inflight", {}).get("gpu-a") == 0)
        zero_until = first["prometheus"]["queried_to_us"] + STUCK_US + 2 * S
        st = w.wait_for(
            "zeros past timeout + grace", lambda st: (prom(st).get("queried_to_us") or 0) > zero_until
        )
        assert st["alerts"] == 0 and w.alerts() == []
        # (1) 2 in flight, and the logs say nothing: one metric_pin naming the host
        raised_at = time.time_ns() // 1000
        exposition.value = 2
        w.wait_for("the first alert", lambda st: st["alerts"] >= 1)
        (pin,) = metric_pins(w)
        assert pin["host"] == "gpu-a" and pin["floor"] == 2 and pin["named_requests"] == 0
        assert pin["instances"] == ["gpu-a:30000"] and pin["scrape_interval_s"] == pytest.approx(1.0, abs=0.2)
        # at = the first sample >= 1 (scraped within a second or two of the change) + timeout + grace
        assert raised_at - 2 * S <= pin["at_us"] - STUCK_US <= raised_at + 3 * S
        assert pin["since"] == iso(pin["at_us"] - STUCK_US) and pin["detected_us"] >= pin["at_us"]
        assert "refreshed only by batch lines" in pin["basis"] and pin["prometheus"] == url
        # still 2 for another timeout + grace: the same episode, no second alert
        later = pin["detected_us"] + STUCK_US + 2 * S
        w.wait_for("the gauge still 2", lambda st: (prom(st).get("queried_to_us") or 0) > later)
        assert len(metric_pins(w)) == 1 and w.state()["prometheus"]["inflight"]["gpu-a"] == 2
        # (3) back to 0, then up again: a second episode, a second alert
        exposition.value = 0
        w.wait_for("the gauge back to 0", lambda st: prom(st).get("inflight", {}).get("gpu-a") == 0)
        exposition.value = 3
        w.wait_for("the second alert", lambda st: st["alerts"] >= 2)
        first_pin, second = metric_pins(w)
        assert first_pin == pin and second["floor"] == 3 and second["id"] != pin["id"]
        assert second["at_us"] > pin["at_us"] + STUCK_US
        # a scrape gap: said once, not alerted; and said again when it is scraped again
        exposition.failing = True
        gap = w.wait_said("up = 0")
        assert "target gpu-a:30000 (job sglang)" in gap
        exposition.failing = False
        w.wait_said("scraped again")
        assert w.said().count("up = 0") == 1 and len(w.alerts()) == 2
        assert w.stop() == 0
    finally:
        w.kill()
        proc.terminate()
        proc.wait(timeout=30)
    # the samples are stored with the lines, mapped to the log's host, each once
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT metric, host, engine, matched_by, count(*), count(DISTINCT (series, ts_us)) "
            "FROM metric_samples GROUP BY ALL ORDER BY metric"
        ).fetchall()
    finally:
        con.close()
    by_metric = {r[0]: r[1:] for r in rows}
    assert set(by_metric) == {INFLIGHT, "sglang:num_running_reqs", "up"}
    host, engine, matched_by, n, distinct = by_metric[INFLIGHT]
    assert (host, engine, matched_by) == ("gpu-a", "prefill", "name") and n == distinct > 10
    assert sum(r[4] for r in rows) == w.state()["prometheus"]["stored"]


def test_an_unreachable_server_is_said_once_and_the_logs_are_followed(
    tmp_path: Path, exposition: Exposition
) -> None:
    log, db = tmp_path / "prefill.log", tmp_path / "u.duckdb"
    quiet_prefill(log)
    port = free_port()
    w = watch(tmp_path, db, log, f"http://127.0.0.1:{port}")
    proc = None
    try:
        said = w.wait_said("following the logs without it")
        assert f"--prometheus http://127.0.0.1:{port}: unreachable" in said
        w.wait_lines(1)
        with open(log, "a") as f:
            f.write(f"{prefix(time.time_ns() // 1000)} {prefill_stats(0)}\n")
        polls = w.wait_lines(2)["polls"]
        w.wait_for("more polls", lambda st: st["polls"] > polls + 5)
        assert w.said().count("without it") == 1 and w.state()["prometheus"]["unreachable"]
        # the server comes up: said once, and its samples are read
        proc, _url = launch(tmp_path, exposition.port, port)
        w.wait_said("answers again")
        w.wait_for("samples", lambda st: prom(st).get("samples", 0) > 0 and not prom(st)["unreachable"])
        assert w.alerts() == []
        assert w.stop() == 0
    finally:
        w.kill()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)


def test_a_gauge_the_logs_open_requests_explain_is_not_a_metric_pin(
    tmp_path: Path, exposition: Exposition
) -> None:
    exposition.value = 1
    proc, url = launch(tmp_path, exposition.port)
    log, db = tmp_path / "prefill.log", tmp_path / "n.duckdb"
    now = time.time_ns() // 1000
    log.write_text(f"{prefix(now)} {prefill_stats(0)}\n{prefix(now)} {receive(7, 'prefill')}\n")
    w = watch(tmp_path, db, log, url)
    try:
        w.wait_for("the silent pin", lambda st: st["alerts"] >= 1)
        (pin,) = [a for a in w.alerts() if a["alert"] == "silent_pin"]
        assert pin["host"] == "gpu-a"
        after = pin["detected_us"] + STUCK_US + 2 * S  # the gauge has been 1 for longer than that
        w.wait_for("the gauge past the pin", lambda st: (prom(st).get("queried_to_us") or 0) > after)
        assert w.state()["prometheus"]["inflight"] == {"gpu-a": 1}
        # the log names the one request held; its prefill is also silent while it is open
        assert metric_pins(w) == [] and {a["alert"] for a in w.alerts()} <= {"silent_pin", "engine_silent"}
        assert w.stop() == 0
    finally:
        w.kill()
        proc.terminate()
        proc.wait(timeout=30)
