"""The ingest benchmark (bench/ingest_bench.py): its smoke mode runs end to end as the documented
command, writes every figure and every baseline (lnav, the polars and DuckDB one-liners, grep,
journalctl, python-systemd), checks each baseline read every line, and with a separate --db-dir
writes nothing into the input directory. No timing assertions: only what holds at any speed."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "ingest_bench.py"
sys.path.insert(0, str(REPO / "bench"))
import ingest_bench as bench  # noqa: E402  (bench/ is outside the package, like fuzz/)

FIGURES = {
    "plain_ingest_s", "plain_lines_per_s", "plain_cpu_s", "plain_process_cpu_s", "plain_startup_s",
    "plain_peak_rss_mb", "grep_s", "grep_lines_per_s", "plain_reingest_s", "plain_vs_grep_x", "plain_vs_grep",
    "plain_reingest_share", "plain_mb_per_s", "journal_ingest_s", "journal_entries_per_s", "journal_cpu_s",
    "journal_process_cpu_s", "journal_peak_rss_mb", "journalctl_json_s", "journalctl_json_per_s",
    "journalctl_export_s", "journalctl_export_per_s", "reader_s", "reader_per_s", "journal_reingest_s",
    "journal_vs_journalctl_json", "journal_vs_journalctl_export", "journal_vs_reader", "journal_reingest_share",
    "views_s", "verdict_s", "report_s", "report_peak_rss_mb", "grep_cpu_s", "journalctl_json_cpu_s",
    "journalctl_export_cpu_s", "reader_cpu_s", "plain_vs_grep_cpu_x", "journal_vs_journalctl_export_cpu",
    "journal_vs_reader_cpu", "plain_lines_per_cpu_s", "journal_entries_per_cpu_s",
    "polars_s", "polars_cpu_s", "polars_lines_per_s", "polars_peak_rss_mb", "plain_vs_polars",
    "plain_vs_polars_cpu", "duckdb_s", "duckdb_cpu_s", "duckdb_lines_per_s", "duckdb_peak_rss_mb",
    "plain_vs_duckdb", "plain_vs_duckdb_cpu",
    "collection_j1_s", "collection_j2_s", "collection_j1_cpu_s", "collection_j2_cpu_s", "collection_j1_per_s",
    "collection_j2_per_s", "collection_speedup", "collection_cpu_ratio",
    "plain_read_cpu_s", "plain_parse_cpu_s", "plain_store_cpu_s", "plain_floor_s",
    "mixed_ingest_s", "mixed_entries_per_s", "mixed_cpu_s", "journalctl_u_s", "journalctl_u_per_s",
    "journalctl_u_cpu_s", "mixed_vs_journalctl_u",
    "answer_plain_s", "answer_plain_cpu_s", "answer_journal_s", "answer_journal_cpu_s",
    "answer_journalctl_grep_s", "answer_journalctl_grep_cpu_s", "answer_journal_vs_grep",
}  # fmt: skip
LNAV_FIGURES = {
    "lnav_s", "lnav_cpu_s", "lnav_lines_per_s", "lnav_peak_rss_mb", "plain_vs_lnav", "plain_vs_lnav_cpu",
    "plain_floor_vs_lnav", "plain_parse_vs_lnav_cpu", "plain_store_vs_lnav_cpu",
    "answer_lnav_s", "answer_lnav_cpu_s", "answer_plain_vs_lnav", "answer_plain_vs_lnav_cpu",
}  # fmt: skip


def _snapshot(d: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One `--quick` run of the script, on inputs cached beforehand and read from a read-only --dir."""
    if not bench.JOURNAL_REMOTE.exists() or shutil.which("journalctl") is None:
        pytest.skip("systemd-journal-remote / journalctl are not installed")
    tmp = tmp_path_factory.mktemp("bench")
    inputs, dbs, out = tmp / "inputs", tmp / "dbs", tmp / "bench.json"
    plain = bench.make_plain(inputs, 3_000)
    bench.make_journal(inputs, 3_000)
    bench.make_mixed(inputs, 3_000)
    before = _snapshot(inputs)
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--quick",
        "--dir",
        str(inputs),
        "--db-dir",
        str(dbs),
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return {
        "doc": json.loads(out.read_text()),
        "stdout": done.stdout,
        "plain": plain,
        "inputs_before": before,
        "inputs_after": _snapshot(inputs),
        "dbs": dbs,
    }


@pytest.mark.slow
def test_quick_mode_writes_every_figure(quick: dict[str, Any]) -> None:
    doc = quick["doc"]
    figures = {f["name"]: f for f in doc["figures"]}
    assert set(figures) >= FIGURES, f"missing figures: {sorted(FIGURES - set(figures))}"
    for f in figures.values():
        assert f["size"] == "3k"
        assert f["runs"] and all(math.isfinite(v) and v >= 0 for v in f["runs"]), f
        assert len(f["load_1min"]) == len(f["runs"])
        if f["name"] in bench.TARGETS:
            assert isinstance(f["met"], bool) and f["target"]
            assert f["aim"] is (f["name"] in bench.AIMS)
    inputs = doc["inputs"]["3k"]
    assert inputs["plain_records"] == inputs["plain_lines"] > 2000
    assert inputs["journal_entries"] > 2000 and inputs["grep_matches"] > 0
    assert inputs["requests"] > 0 and inputs["verdict"]
    assert inputs["collection_entries"] == inputs["journal_entries"] and inputs["collection_files"] >= 2
    # the mixed journal: the incident's units a small share of other units' entries, all read
    assert 0 < inputs["mixed_selected"] * (bench.MIXED_SHARE - 2) < inputs["mixed_entries"]
    # wait4's CPU of the whole ingest process holds the CPU measured inside it (children included)
    for kind in ("plain", "journal"):
        assert figures[f"{kind}_process_cpu_s"]["median"] >= figures[f"{kind}_cpu_s"]["median"] > 0
    assert doc["errors"] == []
    assert doc["machine"]["cpus"] and "| plain ingest |" in doc["table"]
    assert "| plain ingest speed / polars one-liner |" in doc["table"]
    assert "| journal ingest speed / journalctl -o export |" in doc["table"]
    assert "| mixed journal ingest speed / journalctl -u |" in doc["table"]
    # the stages alone each covered every line (the bench checks it) and add up to the floor
    stages = figures["plain_parse_cpu_s"]["median"] + figures["plain_store_cpu_s"]["median"]
    assert math.isclose(figures["plain_floor_s"]["median"] * doc["machine"]["cpus"], stages)
    assert doc["table"] in quick["stdout"]


@pytest.mark.slow
def test_lnav_indexes_every_line(quick: dict[str, Any]) -> None:
    if shutil.which("lnav") is None:
        pytest.skip("lnav is not installed (Debian: lnav)")
    doc = quick["doc"]
    figures = {f["name"] for f in doc["figures"]}
    assert figures >= LNAV_FIGURES, f"missing figures: {sorted(LNAV_FIGURES - figures)}"
    inputs = doc["inputs"]["3k"]
    assert inputs["lnav_lines"] == inputs["plain_lines"]
    # all_logs folds continuation lines (e.g. a traceback's) into their message: never more messages
    assert 0 < inputs["lnav_messages"] <= inputs["lnav_lines"]
    assert doc["machine"]["lnav"].startswith("lnav ") and "lnav" not in doc["skipped"]
    assert "| plain ingest speed / lnav |" in doc["table"]
    # the question lnav answers (issue 30): the incident leaves requests the decode never finished
    assert inputs["lnav_unfinished_rooms"] > 0
    assert "| answer, plain: lnav time / pdforensics time |" in doc["table"]


@pytest.mark.slow
def test_one_liners_extract_the_same_rooms(quick: dict[str, Any]) -> None:
    """Both one-liners read every line (the bench checks the count) and find the rooms grep finds."""
    pattern = re.compile(rb"bootstrap_room=\d")
    expected = sum(1 for p in quick["plain"] for line in p.read_bytes().splitlines() if pattern.search(line))
    inputs = quick["doc"]["inputs"]["3k"]
    assert inputs["polars_rooms"] == inputs["duckdb_rooms"] == expected > 0


@pytest.mark.slow
def test_db_dir_keeps_inputs_read_only(quick: dict[str, Any]) -> None:
    assert quick["inputs_after"] == quick["inputs_before"]
    assert {p.name for p in quick["dbs"].glob("*.duckdb")} == {
        "plain-3k.duckdb", "journal-3k.duckdb", "collection-3k.duckdb",
    }  # fmt: skip
    # The collection (the journal split per unit) is made beside the databases, not in --dir.
    assert len(list((quick["dbs"] / "collection-3k").glob("remote-*.journal"))) >= 2
    assert (quick["dbs"] / "report-3k.html").stat().st_size > 0


def test_read_only_dir_without_inputs_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "inputs"
    empty.mkdir()
    assert bench.main(["--quick", "--dir", str(empty), "--db-dir", str(tmp_path / "dbs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no cached input" in err[0] and "plain-3k" in err[0], err
    assert list(empty.iterdir()) == []


def test_without_lnav_the_table_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No lnav on PATH: no lnav figures, no ratio to it, and one line in the table saying why."""
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: lnav is really not found
    res = bench.Results()
    res.inputs["3k"] = {"plain_lines": 1, "plain_bytes": 1}
    bench.measure_lnav(res, "3k", [tmp_path / "unread.log"], tmp_path / "home")
    bench.derive(res, "3k")
    assert not any(name.startswith("lnav") or "lnav" in name for _, name in res.figures)
    assert "not measured: lnav is not installed" in bench.table(res, ["3k"])
    assert not (tmp_path / "home").exists()


def test_cpu_time_includes_waited_children() -> None:
    """The journal reader runs in a child per file: its CPU counts once the ingest has waited for it."""
    burn = "import time\nx = 0\nfor i in range(3_000_000): x += i\nprint(time.process_time())"
    started_cpu, started = bench.cpu_now(), time.process_time()
    done = subprocess.run([sys.executable, "-c", burn], capture_output=True, text=True, check=True)
    child_cpu = float(done.stdout)
    assert bench.cpu_now() - started_cpu >= child_cpu > time.process_time() - started


def test_sizes_parse_and_print() -> None:
    assert [bench.parse_size(s) for s in ("3k", "1M", "10M", "2500", "1.5M")] == [
        3_000, 1_000_000, 10_000_000, 2_500, 1_500_000
    ]  # fmt: skip
    assert [bench.size_label(n) for n in (3_000, 1_000_000, 10_000_000, 2_500)] == ["3k", "1M", "10M", "2500"]
