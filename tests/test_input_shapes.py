"""Corpus test: a fixture's plain SGLang logs re-prefixed in every shape operators paste ingest
to the same events as the lines in SGLang's own format, and the summary names what it could not read.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import IngestSummary, ingest
from pdforensics.render import source_notes
from pdforensics.sources import Selection
from pdforensics.sources.plain import PlainFileSource

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "abort_storm_pins" / "plain"
SGLANG = re.compile(r"^\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})((?: [A-Z_]+\d+)*)\] ?(.*)$", re.S)
COMPARED = ["event", "entry", "rid", "bootstrap_room", "tp_rank", "app_ts_us", "inflight_req", "bootstrap_req",
            "running_req", "reason"]  # fmt: skip


class Line:
    """One line of the fixture and the time it (or the last line before it) was written at."""

    def __init__(self, text: str, when: datetime) -> None:
        self.text = text
        self.when = when
        m = SGLANG.match(text)
        self.prefixed = m is not None
        self.ranks = m.group(3) if m else ""
        self.body = m.group(4) if m else text

    @property
    def iso(self) -> str:
        return self.when.strftime("%Y-%m-%dT%H:%M:%S") + ".123456789Z"


def fixture_lines(path: Path) -> list[Line]:
    out, when = [], datetime(2026, 11, 29, tzinfo=UTC)
    for text in path.read_text().splitlines():
        if m := SGLANG.match(text):
            when = datetime.fromisoformat(f"{m.group(1)} {m.group(2)}").replace(tzinfo=UTC)
        out.append(Line(text, when))
    return out


def csv_field(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def cri(line: Line) -> list[str]:
    # Long lines are written as a partial (P) line and the rest (F), as the kubelet does past 16 KiB.
    if len(line.text) > 120:
        return [f"{line.iso} stdout P {line.text[:80]}", f"{line.iso} stdout F {line.text[80:]}"]
    return [f"{line.iso} stdout F {line.text}"]


def wrapped(line: Line) -> list[str]:
    # A reporter wrapping at 100 columns, continuation lines indented (never inside a word).
    if not line.prefixed:
        return [line.text]
    return textwrap.wrap(
        line.text, 100, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
    )


SHAPES: dict[str, Callable[[Line], list[str]]] = {
    "cri": cri,
    "kubectl_timestamps": lambda ln: [f"{ln.iso} {ln.text}"],
    "kubectl_prefix": lambda ln: [f"[pod/sglang-0/dsv4] {ln.iso} {ln.text}"],
    "kibana": lambda ln: [ln.when.strftime("%b %d, %Y @ %H:%M:%S") + f".123\t{ln.text}"],
    "grafana_loki": lambda ln: [
        ln.when.strftime("%Y-%m-%d %H:%M:%S") + f'.123\t{{pod="sglang-0"}}\t{ln.text}'
    ],
    "cloudwatch_csv": lambda ln: [f"{int(ln.when.timestamp() * 1000)},{csv_field(ln.text)}"],
    "datadog_csv": lambda ln: [f"{ln.iso[:23]}Z,gpu-1,sglang,{csv_field(ln.text)}"],
    "journalctl_short": lambda ln: [
        ln.when.strftime("%b %d %H:%M:%S") + f" gpu-1 sglang-dsv4[4242]: {ln.text}"
    ],
    "docker_compose": lambda ln: [f"sglang-dsv4   | {ln.text}"],
    "lost_bracket": lambda ln: [ln.text[1:] if ln.prefixed else ln.text],
    "time_only": lambda ln: [f"[{ln.when:%H:%M:%S}{ln.ranks}] {ln.body}" if ln.prefixed else ln.text],
    "wrapped": wrapped,
}


def write_shape(shape: str, out: Path) -> list[Path]:
    paths = []
    for src in sorted(FIXTURE.glob("*.log")):
        lines = fixture_lines(src)
        text = [t for ln in lines for t in SHAPES[shape](ln)]
        if shape == "time_only":
            text[0] = lines[0].text  # the file's first line keeps its date: the others take it from there
        # The engine is in the file name, as in the fixture (the container's name for CRI files).
        engine = "prefill" if "prefill" in src.name else "decode"
        if shape == "cri":
            path = (
                out / "var/log/pods" / f"ns_sglang-{engine}-0_0a1b-2c3d" / f"sglang-dsv4-{engine}" / "0.log"
            )
        else:
            path = out / shape / src.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(text) + "\n")
        paths.append(path)
    return paths


def run(
    paths: list[Path], db: Path, date: str | None = None
) -> tuple[pl.DataFrame, IngestSummary, pl.DataFrame]:
    summary = ingest(db, [PlainFileSource(p) for p in paths], Selection(), load_catalog(), tz="UTC", views=False,
                     date=date)  # fmt: skip
    con = store.open_db(db, read_only=True)
    try:
        events = store.query_pl(
            con,
            f"SELECT l.source, {', '.join('e.' + c for c in COMPARED)} FROM events e JOIN lines l USING (line_id) "
            "ORDER BY line_id",
        )
        stats = store.query_pl(con, "SELECT * FROM source_stats ORDER BY source")
    finally:
        con.close()
    return events, summary, stats


@pytest.fixture(scope="module")
def own_format(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, pl.DataFrame]:
    db = tmp_path_factory.mktemp("own") / "own.duckdb"
    events, _, stats = run(sorted(FIXTURE.glob("*.log")), db)
    return events, stats


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_shape_gives_the_same_events(
    shape: str, tmp_path: Path, own_format: tuple[pl.DataFrame, pl.DataFrame]
) -> None:
    expected, own_stats = own_format
    events, summary, stats = run(write_shape(shape, tmp_path), tmp_path / "db.duckdb")
    assert expected.height > 300  # the fixture's stats lines, requests, failures
    # File by file (sources sort the same way: both named by engine), every SGLang line's event.
    for (_, want), (_, got) in zip(expected.group_by("source", maintain_order=True),
                                   events.group_by("source", maintain_order=True), strict=True):  # fmt: skip
        assert got.drop("source").to_dicts() == want.drop("source").to_dicts(), shape
    # Every line understood as well as in SGLang's own format (CRI/wrap pieces are counted as joined).
    assert stats["no_prefix"].to_list() == own_stats["no_prefix"].to_list()
    assert stats["no_time"].sum() == own_stats["no_time"].sum()
    if shape in ("cri", "wrapped"):
        assert stats["joined"].sum() > 50
    if shape == "time_only":
        assert stats["time_only"].sum() > 200 and set(stats["date_from"]) == {"earlier lines"}
    assert not [n for n in source_notes(summary) if "no timestamp" in n or "no prefix" in n]


def test_cri_path_names_pod_and_container(tmp_path: Path) -> None:
    paths = write_shape("cri", tmp_path)
    src = PlainFileSource(paths[0])
    assert src.host.startswith("sglang-") and src.host.endswith("-0")
    assert src.unit.startswith("sglang-dsv4-")


def test_time_only_lines_take_the_date_option(
    tmp_path: Path, own_format: tuple[pl.DataFrame, pl.DataFrame]
) -> None:
    paths = write_shape("time_only", tmp_path)
    for p in paths:  # no dated line left at all
        lines = p.read_text().splitlines()
        lines[0] = SGLANG.sub(lambda m: f"[{m.group(2)}{m.group(3)}] {m.group(4)}", lines[0])
        p.write_text("\n".join(lines) + "\n")
    events, summary, stats = run(paths, tmp_path / "db.duckdb", date="2026-11-29")
    assert set(stats["date_from"]) == {"--date"}
    assert events.drop("source").to_dicts() == own_format[0].drop("source").to_dicts()
    assert any("dated from --date" in n for n in source_notes(summary))


def test_summary_names_unrecognised_prefix_lines_per_file(tmp_path: Path) -> None:
    """A shape no form knows (RFC 5424 syslog) is named, per file, with how many lines it cost."""
    src = sorted(FIXTURE.glob("*.log"))[0]
    lines = fixture_lines(src)
    odd = tmp_path / "decode-rfc5424.log"
    odd.write_text("".join(f"<134>1 {ln.iso} gpu-1 sglang 4242 - - {ln.text}\n" for ln in lines))
    plain = tmp_path / "prefill-own.log"
    plain.write_text(src.read_text())
    _, summary, stats = run([odd, plain], tmp_path / "db.duckdb")
    by_file = {Path(s.removeprefix("file:")).name: row for s, row in zip(stats["source"], stats.iter_rows(named=True),
                                                                         strict=True)}  # fmt: skip
    assert by_file["decode-rfc5424.log"]["no_prefix"] > len(lines) // 2
    assert by_file["decode-rfc5424.log"]["no_time"] == len(lines)
    assert by_file["prefill-own.log"]["no_time"] == 0
    notes = source_notes(summary)
    named = [n for n in notes if "decode-rfc5424.log" in n and "no timestamp I know" in n]
    assert named and f"{len(lines):,} of {len(lines):,} lines" in named[0]
    assert not [n for n in notes if "prefill-own.log" in n and "no timestamp" in n]


def test_zone_assumed_is_said(tmp_path: Path) -> None:
    """A plain file read without --tz says which zone its times were read in, and why."""
    src = sorted(FIXTURE.glob("*.log"))[0]
    summary = ingest(tmp_path / "db.duckdb", [PlainFileSource(src)], Selection(), load_catalog(), views=False)
    zone = summary.source_stats[0].zone
    assert zone and "this machine's zone (no --tz" in zone
    assert any(n.startswith("zone-less times read as") for n in source_notes(summary))
    # CRI's UTC times beside SGLang's zone-less prefix: the offset is inferred, not assumed.
    paths = write_shape("cri", tmp_path / "cri")
    summary = ingest(
        tmp_path / "cri.duckdb", [PlainFileSource(paths[0])], Selection(), load_catalog(), views=False
    )
    assert summary.source_stats[0].zone == "UTC+00:00, inferred from UTC times of an outer prefix"
