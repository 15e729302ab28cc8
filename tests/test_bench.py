"""The benchmark's smoke mode runs end to end and writes every figure (no timing assertions)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from pdforensics import bench

FIGURES = {
    "plain_ingest_s", "plain_lines_per_s", "plain_cpu_s", "plain_startup_s", "plain_peak_rss_mb",
    "grep_s", "grep_lines_per_s", "plain_reingest_s", "plain_vs_grep_x", "plain_reingest_share",
    "plain_mb_per_s", "journal_ingest_s", "journal_entries_per_s", "journal_cpu_s", "journal_peak_rss_mb",
    "journalctl_json_s", "journalctl_json_per_s", "journalctl_export_s", "journalctl_export_per_s",
    "reader_s", "reader_per_s", "journal_reingest_s", "journal_vs_journalctl_json",
    "journal_vs_journalctl_export", "journal_vs_reader", "journal_reingest_share", "views_s", "verdict_s",
    "report_s", "report_peak_rss_mb", "grep_cpu_s", "journalctl_json_cpu_s", "journalctl_export_cpu_s",
    "reader_cpu_s", "plain_vs_grep_cpu_x", "journal_vs_journalctl_export_cpu", "journal_vs_reader_cpu",
    "plain_lines_per_cpu_s", "journal_entries_per_cpu_s",
}  # fmt: skip


@pytest.mark.slow
def test_quick_mode_writes_every_figure(tmp_path: Path) -> None:
    if not bench.JOURNAL_REMOTE.exists() or shutil.which("journalctl") is None:
        pytest.skip("systemd-journal-remote / journalctl are not installed")
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--dir", str(tmp_path / "work"), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    got = {f["name"] for f in doc["figures"]}
    assert got >= FIGURES, f"missing figures: {sorted(FIGURES - got)}"
    for f in doc["figures"]:
        assert f["size"] == "3k"
        assert f["runs"] and all(math.isfinite(v) and v >= 0 for v in f["runs"]), f
        assert len(f["load_1min"]) == len(f["runs"])
        if f["name"] in bench.TARGETS:
            assert isinstance(f["met"], bool) and f["target"]
    inputs = doc["inputs"]["3k"]
    assert inputs["plain_records"] == inputs["plain_lines"] > 2000
    assert inputs["journal_entries"] > 2000 and inputs["grep_matches"] > 0
    assert inputs["requests"] > 0 and inputs["verdict"]
    assert doc["errors"] == []
    assert doc["machine"]["cpus"] and "| plain ingest |" in doc["table"]


def test_sizes_parse_and_print() -> None:
    assert [bench.parse_size(s) for s in ("3k", "1M", "10M", "2500", "1.5M")] == [
        3_000, 1_000_000, 10_000_000, 2_500, 1_500_000
    ]  # fmt: skip
    assert [bench.size_label(n) for n in (3_000, 1_000_000, 10_000_000, 2_500)] == ["3k", "1M", "10M", "2500"]
