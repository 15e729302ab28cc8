"""`ingest --prometheus` against a real Prometheus server (Debian's `prometheus`, on 127.0.0.1),
its TSDB backfilled by the real `promtool tsdb create-blocks-from openmetrics` from the
simulator's `--openmetrics` output; and `ingest --openmetrics` of the same file.

The file's samples are read back here with a regex of this test's own, not pdforensics' parser."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from pdforensics.simulate import simulate
from pdforensics.simulate.__main__ import parse_now
from pdforensics.simulate.openmetrics import write_openmetrics
from pdforensics.simulate.run import run_world
from pdforensics.sources import prometheus as prom
from tests.test_cli import assert_one_line_error, run

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None, reason="Debian package prometheus is not installed"
)

SCENARIO = "decode_restart_old_build"  # the decode restarts: a scrape gap and counter resets
NOW = parse_now("2026-11-29T12:10:00Z")
assert NOW is not None
INTERVAL_S = 10.0
READY_S = 60.0
SAMPLE = re.compile(r"^(\S+?)(\{.*\})? (\S+) (\d+)\.(\d{3})$")


@dataclass
class Server:
    url: str
    metrics: Path
    incident: Path
    since: str
    until: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def file_samples(path: Path) -> list[tuple[str, int, float]]:
    """(series with labels sorted, ts_us, value) of every sample line of an OpenMetrics file."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = ",".join(sorted(re.findall(r'\w+="[^"]*"', m.group(2) or "")))
        out.append(
            (
                f"{m.group(1)}{{{labels}}}",
                int(m.group(4)) * 1_000_000 + int(m.group(5)) * 1000,
                float(m.group(3)),
            )
        )
    return sorted(out)


def stored(db: Path, where: str = "true") -> list[tuple[str, int, float]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return sorted(
            con.execute(f"SELECT series, ts_us, value FROM metric_samples WHERE {where}").fetchall()
        )
    finally:
        con.close()


def query(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def wait_ready(url: str, proc: subprocess.Popen, err: Path) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"prometheus exited: {err.read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)  # polling interval of the readiness check (bounded by the deadline)
    raise AssertionError(f"prometheus not ready within {READY_S}s: {err.read_text()[-2000:]}")


def start_prometheus(config: Path, tsdb: Path, err: Path) -> tuple[subprocess.Popen, str]:
    """A ready server on a free loopback port; another port when the chosen one was taken meanwhile."""
    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen(
            # retention counts back from the newest block; a century keeps the 2026 blocks whatever the clock
            [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y"],
            stdout=subprocess.DEVNULL, stderr=open(err, "w"),  # noqa: SIM115
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc, err)
            return proc, url
        except AssertionError:
            proc.terminate()
            proc.wait(timeout=30)
            if "address already in use" not in err.read_text():
                raise
    raise AssertionError(f"prometheus found no free port: {err.read_text()[-2000:]}")


def backfilled_server(metrics: Path, root: Path) -> tuple[subprocess.Popen, str]:
    """A server whose TSDB holds `metrics` (OpenMetrics, backfilled by promtool) and scrapes nothing."""
    tsdb = root / "tsdb"
    subprocess.run([str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", str(metrics), str(tsdb)],
                   check=True, capture_output=True)  # fmt: skip
    config = root / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\n")
    return start_prometheus(config, tsdb, root / "prometheus.err")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("prometheus")
    incident = simulate(SCENARIO, root / "incident", now_us=NOW)
    metrics = write_openmetrics(SCENARIO, root / "metrics.om", now_us=NOW, interval_s=INTERVAL_S)
    proc, url = backfilled_server(metrics, root)
    try:
        expected = json.loads((incident / "expected.json").read_text())["window"]
        yield Server(
            url,
            metrics,
            incident,
            f"@{expected['since_us'] // 10**6 - 60}",
            f"@{expected['until_us'] // 10**6 + 60}",
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def ingest(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run("ingest", "--db", str(db), *args)


def test_the_servers_samples_are_stored_exactly_and_once(server: Server, tmp_path: Path) -> None:
    want = file_samples(server.metrics)
    assert len(want) > 400 and {s for s, _, _ in want} >= {'up{instance="dsv4-node-01:30001",job="sglang"}'}
    db = tmp_path / "m.duckdb"
    first = ingest(db, "--prometheus", server.url, "--since", server.since, "--until", server.until)
    assert first.returncode == 0, first.stderr
    assert f"{len(want):,} samples read, {len(want):,} stored" in first.stdout
    assert stored(db) == want  # count, series, timestamps and values
    again = ingest(db, "--prometheus", server.url, "--since", server.since, "--until", server.until)
    assert again.returncode == 0, again.stderr
    assert f"0 stored, {len(want):,} already stored" in again.stdout
    assert stored(db) == want
    runs = query(db, "SELECT readers, records, stored, duplicates, status FROM ingests ORDER BY ingest_id")
    assert runs == [
        ("prometheus", len(want), len(want), 0, "complete"),
        ("prometheus", len(want), 0, len(want), "complete"),
    ]


def test_small_chunks_read_the_same_samples(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pdforensics import store
    from pdforensics.metric_ingest import ingest_metrics

    monkeypatch.setattr(
        prom, "FIRST_CHUNK_S", 61.0
    )  # 7 chunks over the window, a boundary on a scrape or not
    monkeypatch.setattr(prom, "MAX_SAMPLES_PER_RESPONSE", 50)
    db = tmp_path / "c.duckdb"
    con = store.open_db(db)
    window = [int(server.since[1:]) * 10**6, int(server.until[1:]) * 10**6]
    try:
        (summary,) = ingest_metrics(con, prometheus=server.url, openmetrics=None, since_us=window[0],
                                    until_us=window[1], now_us=window[1])  # fmt: skip
    finally:
        con.close()
    assert summary.read == summary.stored == len(file_samples(server.metrics))
    assert stored(db) == file_samples(server.metrics)


def test_the_file_gives_the_same_rows_as_the_server(server: Server, tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    proc = ingest(db, "--openmetrics", str(server.metrics))
    assert proc.returncode == 0, proc.stderr
    assert stored(db) == file_samples(server.metrics)
    by_server = tmp_path / "s.duckdb"
    assert (
        ingest(
            by_server, "--prometheus", server.url, "--since", server.since, "--until", server.until
        ).returncode
        == 0
    )
    cols = "series, metric, labels::VARCHAR, job, instance, engine_type, dp_rank, ts_us, value"
    assert query(db, f"SELECT {cols} FROM metric_samples ORDER BY ALL") == query(
        by_server, f"SELECT {cols} FROM metric_samples ORDER BY ALL"
    )
    # the file after the server: nothing new
    assert "0 stored" in ingest(by_server, "--openmetrics", str(server.metrics)).stdout


def test_targets_join_the_hosts_of_the_logs_and_the_rest_are_listed(server: Server, tmp_path: Path) -> None:
    db = tmp_path / "j.duckdb"
    assert ingest(db, "--file", str(server.incident / "journal.export"), "-q").returncode == 0
    proc = ingest(db, "--prometheus", server.url)  # the window of the log ingest
    assert proc.returncode == 0, proc.stderr
    assert "unmatched" not in proc.stdout
    got = query(db, "SELECT DISTINCT instance, host, engine, matched_by FROM metric_samples ORDER BY 1")
    assert got == [("dsv4-node-01:30000", "dsv4-node-01", "prefill", "name"),
                   ("dsv4-node-01:30001", "dsv4-node-01", "decode", "name")]  # fmt: skip
    mapping = tmp_path / "map.toml"
    mapping.write_text('[instances]\n"dsv4-node-01:30001" = { host = "elsewhere", engine = "decode" }\n')
    proc = ingest(db, "--openmetrics", str(server.metrics), "--prometheus-map", str(mapping))
    assert proc.returncode == 0, proc.stderr
    assert "dsv4-node-01:30001 (job sglang): host elsewhere, decode (by map)" in proc.stdout
    # a target no log host is called: stored, and listed
    other = tmp_path / "other.om"
    other.write_text(server.metrics.read_text().replace("dsv4-node-01:30000", "10.9.9.9:30000"))
    proc = ingest(db, "--openmetrics", str(other))
    assert "unmatched: 10.9.9.9:30000 (job sglang)" in proc.stdout
    assert (
        query(db, "SELECT count(*) FROM metric_samples WHERE instance = '10.9.9.9:30000' AND host IS NULL")[
            0
        ][0]
        > 0
    )


# The queries docs/prometheus.md gives (kept equal to it: test_the_documented_queries_are_these).
GAPS_SQL = """
WITH s AS (
    SELECT host, engine, instance, series, ts_us, value,
           lead(ts_us) OVER (PARTITION BY series ORDER BY ts_us) AS next_us
    FROM metric_samples WHERE metric = 'up'
),
i AS (SELECT series, median(next_us - ts_us) AS interval_us FROM s GROUP BY series)
SELECT host, engine, instance, ts_us AS gap_from_us, next_us AS gap_to_us,
       CASE WHEN value = 0 THEN 'up = 0' ELSE 'no sample' END AS why
FROM s JOIN i USING (series)
WHERE value = 0 OR next_us - ts_us > 2 * interval_us
ORDER BY instance, ts_us
"""
RESETS_SQL = """
SELECT host, engine, series, ts_us, previous, value FROM (
    SELECT host, engine, series, ts_us, value,
           lag(value) OVER (PARTITION BY series ORDER BY ts_us) AS previous
    FROM metric_samples WHERE ends_with(metric, '_total') OR ends_with(metric, '_count')
) WHERE value < previous
ORDER BY series, ts_us
"""


def test_a_metrics_run_does_not_move_the_verdicts_window(server: Server, tmp_path: Path) -> None:
    """The default window is the last *log* ingest's: samples read over another window after it
    (a metrics run is a row of `ingests` too) leave the verdict's window where the logs put it."""
    db = tmp_path / "w.duckdb"
    window = ("--since", server.since, "--until", server.until)
    assert ingest(db, "--file", str(server.incident / "journal.export"), *window, "-q").returncode in (0, 1)

    def judged_window() -> dict:
        proc = run("verdict", "--db", str(db), "--json")
        assert proc.returncode in (0, 1, 2, 3), proc.stderr
        return json.loads(proc.stdout)["window"]

    before = judged_window()
    proc = ingest(db, "--openmetrics", str(server.metrics), "--since", "2026-11-29T09:00:00Z",
                  "--until", "2026-11-29T09:30:00Z")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert query(
        db, "SELECT count(*) FROM ingests WHERE readers = 'openmetrics' AND since_us IS NOT NULL"
    ) == [(1,)]
    assert judged_window() == before


def test_a_restart_shows_as_a_scrape_gap_and_a_counter_reset(server: Server, tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    assert ingest(db, "--openmetrics", str(server.metrics)).returncode == 0
    w, _, built = run_world(SCENARIO, NOW, 0, 1.0)
    old, new = built.dprocs
    down_from, down_to = w.t0_us + old.t_end * 1e6, w.t0_us + new.t_ready * 1e6
    gaps = query(db, GAPS_SQL)
    decode = [(lo, why) for _, _, inst, lo, _, why in gaps if inst == "dsv4-node-01:30001"]
    restart = [lo for lo, _ in decode if down_from <= lo < down_to]
    assert restart and all(why == "up = 0" for _, why in decode)
    # every decode scrape while it was down, and no other after its first start
    after_start = [lo for lo, _ in decode if lo >= w.t0_us + old.t_ready * 1e6]
    scraped_down = [ts for s, ts, _ in file_samples(server.metrics)
                    if s == 'up{instance="dsv4-node-01:30001",job="sglang"}' and down_from <= ts < down_to]  # fmt: skip
    assert after_start == restart == scraped_down and len(restart) >= 3
    resets = query(db, RESETS_SQL)
    assert resets, "no counter reset found"
    assert {r[2].split("{")[0] for r in resets} == {"sglang:num_requests_total"}
    assert all(
        down_to <= ts < down_to + INTERVAL_S * 1e6 and engine == "decode" for _, engine, _, ts, _, _ in resets
    )
    # the samples of the decode's gauges stop while it is down: no sample in the gap
    inside = query(db, f"SELECT count(*) FROM metric_samples WHERE instance = 'dsv4-node-01:30001' AND metric <> 'up' "
                       f"AND ts_us >= {down_from} AND ts_us < {down_to}")  # fmt: skip
    assert inside == [(0,)]


def test_the_documented_queries_are_these() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "prometheus.md").read_text()
    squash = lambda s: " ".join(s.split())  # noqa: E731
    assert squash(GAPS_SQL) in squash(text)
    assert squash(RESETS_SQL) in squash(text)


def test_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    proc = ingest(tmp_path / "u.duckdb", "--prometheus", f"http://127.0.0.1:{free_port()}", "--since", "1h")
    assert_one_line_error(proc, 3, "unreachable")


def test_a_selector_the_server_refuses_is_one_line(server: Server, tmp_path: Path) -> None:
    proc = ingest(
        tmp_path / "b.duckdb", "--prometheus", server.url, "--since", server.since, "--match", "sglang:x{"
    )
    assert_one_line_error(proc, 2, "the server refused the query (400 bad_data")


def test_a_url_that_is_no_url_and_a_missing_file_are_one_line(tmp_path: Path) -> None:
    assert_one_line_error(ingest(tmp_path / "x.duckdb", "--prometheus", "localhost:9090", "--since", "1h"), 2,
                          "give the server's URL")  # fmt: skip
    assert_one_line_error(
        ingest(tmp_path / "x.duckdb", "--openmetrics", str(tmp_path / "none.om")), 3, "no such file"
    )


def test_the_simulator_writes_valid_openmetrics_opt_in(tmp_path: Path) -> None:
    proc = run("simulate", "healthy", "--out", str(tmp_path / "h"), "--now", "2026-11-29T12:10:00Z",
               "--openmetrics", str(tmp_path / "h.om"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "h.om").read_text()
    assert text.endswith("# EOF\n") and "# TYPE sglang:num_prefill_inflight_queue_reqs gauge" in text
    assert not list((tmp_path / "h").glob("*.om"))  # nothing beside the incident's usual files
    check = subprocess.run([str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "h.om"),
                            str(tmp_path / "tsdb")], capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert len(file_samples(tmp_path / "h.om")) == sum(
        int(x) for x in re.findall(r"^\w+\s+\d+\s+\d+\s+\S+\s+(\d+)", check.stdout, re.MULTILINE)
    )
