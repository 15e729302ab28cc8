"""Line prefixes as data (catalog/prefixes.toml): every form's samples read as they say."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from pdforensics.catalog import load_catalog
from pdforensics.catalog.prefixes import Prefix, PrefixSample, load_prefixes, read_prefix_file
from pdforensics.errors import UsageError
from pdforensics.parse import ParseOptions, read_prefixes, records_of

FORMS = load_prefixes().forms
SAMPLES = [(f, s) for f in FORMS for s in f.samples]


def utc_text(us: int | None) -> str | None:
    """UTC time to the microsecond: '2026-05-16 12:44:55.560000'."""
    if us is None:
        return None
    return (
        datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y-%m-%d %H:%M:%S") + f".{us % 1_000_000:06d}"
    )


def full(text: str) -> str:
    """'2026-05-16 12:44:55.56' -> '2026-05-16 12:44:55.560000' (as utc_text writes it)."""
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(6, '0')}"


def read(line: str, date: str | None = None, prefix_files: tuple[Path, ...] = ()) -> dict:
    opts = ParseOptions(catalog=load_catalog(), tz="UTC", prefixes=load_prefixes(prefix_files), date=date)
    return read_prefixes(records_of([line]), opts).row(0, named=True)


def test_every_form_has_samples() -> None:
    assert all(f.samples for f in FORMS), [f.name for f in FORMS if not f.samples]
    kinds = {f.kind for f in FORMS}
    assert kinds == {"sglang", "outer", "repair", "clock"}


@pytest.mark.parametrize(
    ("form", "sample"), SAMPLES, ids=[f"{f.name}-{i}" for i, (f, _) in enumerate(SAMPLES)]
)
def test_sample_reads_as_expected(form: Prefix, sample: PrefixSample) -> None:
    got = read(sample.line, sample.date)
    assert form.name in (got["prefixes"] or "sglang").split("+"), got
    for key, want in sample.expect.items():
        if key == "time":
            assert utc_text(got["app_ts_us"]) == full(want), got
        else:
            assert got[key] == want, (key, got)


def test_time_only_prefix_dated_by_earlier_lines() -> None:
    lines = ["[2026-05-16 03:51:50] Prefill batch, #new-seq: 1", "[03:51:54] Decode batch, #running-req: 1"]
    opts = ParseOptions(catalog=load_catalog(), tz="UTC")
    got = read_prefixes(records_of(lines), opts)
    assert utc_text(got["app_ts_us"][1]) == full("2026-05-16 03:51:54")
    assert got["body"][1] == "Decode batch, #running-req: 1"


def test_time_only_prefix_without_any_date_stays_undated() -> None:
    got = read("[03:51:54] Decode batch, #running-req: 1")
    assert got["app_ts_us"] is None
    assert got["prefixes"] is None


def test_user_prefix_file_adds_a_form(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        """
[[prefix]]
name = "pipe_time"
kind = "outer"
zone = "utc"
pattern = '^(?P<ts>\\d{4}/\\d{2}/\\d{2} \\d{2}:\\d{2}:\\d{2}) \\| (?P<host>[\\w-]+) \\| '
time_format = "%Y/%m/%d %H:%M:%S"
[[prefix.sample]]
line = "2026/05/16 12:44:55 | gpu-9 | Decode batch, #running-req: 1"
expect = { body = "Decode batch, #running-req: 1", host = "gpu-9", time = "2026-05-16 12:44:55" }
"""
    )
    forms, _ = read_prefix_file(path)
    sample = forms[0].samples[0]
    got = read(sample.line, prefix_files=(path,))
    assert got["body"] == sample.expect["body"] and got["host"] == "gpu-9"
    assert utc_text(got["app_ts_us"]) == full("2026-05-16 12:44:55")
    # Without the file the line is not understood: its text stays whole.
    assert read(sample.line)["body"] == sample.line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[prefix]]\nname = 'x'\nkind = 'outer'\npattern = 'no-caret'\n", "starting with '^'"),
        ("[[prefix]]\nname = 'x'\nkind = 'weird'\npattern = '^a'\n", "kind must be one of"),
        ("[[prefix]]\nname = 'x'\nkind = 'outer'\npattern = '^(?P<when>a)'\n", "unknown groups"),
        ("[[prefix]]\nname = 'x'\nkind = 'outer'\npattern = '^(?P<ts>a)'\n", "needs time_format"),
        ("[[prefix]]\nname = 'x'\nkind = 'outer'\npattern = '^(?=a)'\n", "bad regex"),
    ],
)
def test_bad_prefix_file_is_one_usage_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("^", r"\^")):
        read_prefix_file(path)


def test_time_only_prefix_past_midnight_is_the_next_day() -> None:
    lines = ["[2026-05-16 23:59:50] Prefill batch, #new-seq: 1", "[23:59:58] a", "[00:00:03] b"]
    got = read_prefixes(records_of(lines), ParseOptions(catalog=load_catalog(), tz="UTC"))
    assert [utc_text(t) for t in got["app_ts_us"][1:]] == [
        full("2026-05-16 23:59:58"),
        full("2026-05-17 00:00:03"),
    ]


def test_time_only_prefix_dated_across_batches() -> None:
    from pdforensics.parse import StreamCarry, parse_records

    opts = ParseOptions(catalog=load_catalog(), tz="UTC")
    carry = StreamCarry()
    parse_records(records_of(["[2026-05-16 10:00:00] hello"]), opts, 0, carry)  # every line dated
    second = parse_records(records_of(["[10:00:05] Decode batch, #running-req: 1"]), opts, 2, carry)
    assert utc_text(second.lines["app_ts_us"][0]) == full("2026-05-16 10:00:05")
