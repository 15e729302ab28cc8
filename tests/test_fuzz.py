"""Property-based tests (hypothesis) of the time-window parser, the line parser and the record
readers, and a bounded run of the atheris fuzz target (fuzz/fuzz_readers.py).

The reader properties live in fuzz/readers.py, shared by both fuzzers: hypothesis runs them here
on every test run (derandomized: the same examples each time, so CI is stable), atheris explores
coverage-guided for a bounded time with a fixed seed.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from pdforensics.api import MAX_US, MIN_US, checked_window
from pdforensics.catalog import load_catalog
from pdforensics.errors import UsageError
from pdforensics.parse import ParseOptions, StreamCarry, parse_records
from pdforensics.schema import RECORD_SCHEMA
from pdforensics.timewindow import parse_instant

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "fuzz"))
import readers  # noqa: E402  (fuzz/readers.py: the readers' contract, shared with atheris)

NOW = 1_764_410_000_123_457
SETTINGS = settings(
    database=None, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def props(examples: int, **overrides: object) -> settings:
    """SETTINGS with this many examples (hypothesis allows one settings decorator per test)."""
    return settings(SETTINGS, max_examples=examples, **overrides)  # type: ignore[arg-type]


CATALOG = load_catalog()
OPTS = ParseOptions(catalog=CATALOG, tz="UTC")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Text as the readers hand it over: any Unicode but lone surrogates (input is decoded with replacement).
TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80)


# ------------------------------------------------------------------ the time-window parser

TIME_TOKENS = st.sampled_from(
    ["@", "-", "+", ".", ":", " ", "T", "Z", "ago", "min", "h", "d", "w", "s", "ms", "us", "now", "today",
     "yesterday", "utc", "2026", "-11", "-29", "9999", "0000", "99999999999999999999", "1", "0", "12", "60",
     "24", "+14:00", "-23:59", "1.5", ",", "\x00", "\n", "٣"]
)  # fmt: skip
ZONES = st.sampled_from([None, "UTC", "Europe/Berlin", "Pacific/Kiritimati", "America/St_Johns"])


@props(600)
@given(st.one_of(TEXT, st.lists(TIME_TOKENS, max_size=8).map("".join)), ZONES)
def test_any_text_is_an_instant_or_one_usage_line(text: str, tz: str | None) -> None:
    try:
        assert isinstance(parse_instant(text, NOW, tz), int)
    except UsageError as e:
        assert "\n" not in str(e)


@props(300)
@given(st.one_of(TEXT, st.lists(TIME_TOKENS, max_size=8).map("".join)), st.booleans())
def test_window_options_reach_the_database_only_in_range(text: str, as_until: bool) -> None:
    """What `--since`/`--until` hand on is a BIGINT the views can compute with, or a usage error."""
    try:
        w = checked_window(None, text, NOW) if as_until else checked_window(text, None, NOW)
    except UsageError as e:
        assert "\n" not in str(e)
        return
    value = w.until_us if as_until else w.since_us
    assert value is not None and MIN_US <= value <= MAX_US


UNITS = [("s", 10**6), ("min", 60 * 10**6), ("h", 3600 * 10**6), ("d", 86400 * 10**6)]


@props(200)
@given(st.integers(0, 10**5), st.integers(0, 10**5), st.sampled_from(UNITS))
def test_durations_are_monotonic_and_forms_agree(a: int, b: int, unit: tuple[str, int]) -> None:
    name, _ = unit
    small, large = sorted((a, b))
    assert parse_instant(f"{large}{name}", NOW) <= parse_instant(f"{small}{name}", NOW) <= NOW
    forms = {
        parse_instant(f, NOW)
        for f in (f"{a}{name}", f"{a} {name} ago", f"-{a}{name}", f"  {a}{name.upper()} ")
    }
    assert len(forms) == 1


@props(300)
@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2099, 12, 31)),
       st.sampled_from(["Europe/Berlin", "America/St_Johns", "Australia/Lord_Howe"]))  # fmt: skip
def test_zone_less_times_in_dst_gaps_and_folds(local: datetime, zone: str) -> None:
    """A wall-clock time names the instant it shows; one skipped by DST still gives an instant."""
    local = local.replace(microsecond=0)
    us = parse_instant(local.strftime("%Y-%m-%d %H:%M:%S"), NOW, zone)
    back = (EPOCH + timedelta(microseconds=us)).astimezone(ZoneInfo(zone)).replace(tzinfo=None)
    first = local.replace(tzinfo=ZoneInfo(zone))  # fold=0: the earlier of two, as journalctl reads it
    exists = first.astimezone(UTC).astimezone(ZoneInfo(zone)).replace(tzinfo=None) == local
    if exists:
        assert back == local
        assert us == (first - EPOCH) // timedelta(microseconds=1)
    else:  # in a gap: near the wall time, never an error
        assert abs(back - local) <= timedelta(hours=1)


# ------------------------------------------------------------------ the line parser

SAMPLES = sorted({s.line for e in CATALOG.entries for s in e.samples})
SAMPLE = st.sampled_from(SAMPLES)
WHEN = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2099, 12, 31))
CONTINUATION = st.sampled_from(
    ["Traceback (most recent call last):", '  File "/sgl/x.py", line 1, in f', "    raise ValueError('x')",
     "ValueError: x", "", "   ", "\t", "\x1b[31mred\x1b[0m"]
)  # fmt: skip
LINE = st.one_of(
    TEXT,
    SAMPLE,
    st.tuples(SAMPLE, st.integers(0, 300), TEXT).map(
        lambda t: t[0][: t[1]] + t[2]
    ),  # a sample cut or extended
    st.tuples(WHEN, st.integers(0, 127), st.one_of(TEXT, SAMPLE.map(lambda s: s.split("] ", 1)[-1]))).map(
        lambda t: f"[{t[0]:%Y-%m-%d %H:%M:%S} TP{t[1]}] {t[2]}"
    ),
    CONTINUATION,
)
ENGINE_UNITS = ["sglang-prefill.service", "sglang-decode.service", "sglang-router.service"]
# and a unit whose name says no engine: its lines decide it (parse._engine)
UNITS_DRAWN = [*ENGINE_UNITS, "sglang-worker-0.service"]


def records(messages: list[str], units: list[str], ts: list[int | None]) -> pl.DataFrame:
    n = len(messages)
    frame = pl.DataFrame(
        {"source": ["t"] * n, "source_key": [f"k-{u}" for u in units], "seq": list(range(n)), "message": messages,
         "host": ["h1"] * n, "unit": units, "ts_us": ts},
        schema_overrides={"ts_us": pl.Int64},
    )  # fmt: skip
    missing = [pl.lit(None, t).alias(c) for c, t in RECORD_SCHEMA.items() if c not in frame.columns]
    return frame.with_columns(missing).select([pl.col(c).cast(t) for c, t in RECORD_SCHEMA.items()])


@st.composite
def batches(draw: st.DrawFn) -> pl.DataFrame:
    n = draw(st.integers(1, 25))
    messages = draw(st.lists(LINE, min_size=n, max_size=n))
    units = draw(st.lists(st.sampled_from(UNITS_DRAWN), min_size=n, max_size=n))
    journal = draw(st.booleans())
    ts = [1_790_000_000_000_000 + i * 1000 for i in range(len(units))] if journal else [None] * len(units)
    return records(messages, units, ts)


@props(100)
@given(batches(), st.integers(0, 10**6))
def test_parser_keeps_every_record_whatever_its_text(batch: pl.DataFrame, base: int) -> None:
    parsed = parse_records(batch, OPTS, line_id_base=base, carry=StreamCarry())
    lines = parsed.lines
    assert lines.height == batch.height
    assert lines["line_id"].to_list() == list(range(base, base + batch.height))
    # (host and unit may change: a docker-compose or syslog prefix names them, journald's
    # "Suppressed" line belongs to the unit it names)
    for col in ("source_key", "seq", "message"):
        assert lines[col].to_list() == batch[col].to_list(), col
    assert set(lines["ts_origin"].unique().to_list()) <= {"journal", "app", "inherited", "none"}
    journal = batch["ts_us"].is_not_null()
    assert lines.filter(journal)["ts_us"].to_list() == batch.filter(journal)["ts_us"].to_list()
    assert (
        sorted(parsed.events["line_id"].to_list())
        == lines.filter(pl.col("event").is_not_null())["line_id"].to_list()
    )
    linked = lines.filter(pl.col("cont_of").is_not_null())
    assert (linked["cont_of"] < linked["line_id"]).all(), "a continuation points forward"
    assert lines.filter(pl.col("event").is_not_null() & pl.col("parse_error").is_not_null()).height == 0


@props(150)
@given(
    WHEN.map(lambda d: d.replace(microsecond=0)),
    st.integers(0, 255),
    st.none() | st.integers(0, 63),
    st.sampled_from(["Prefill batch, #new-seq: 1", "Decode batch, #running-req: 2", "hello", "x" * 300]),
)
def test_sglang_prefix_time_and_ranks_round_trip(when: datetime, tp: int, dp: int | None, body: str) -> None:
    ranks = (f"DP{dp} " if dp is not None else "") + f"TP{tp}"
    batch = records([f"[{when:%Y-%m-%d %H:%M:%S} {ranks}] {body}"], ["sglang-prefill.service"], [None])
    line = parse_records(batch, OPTS, carry=StreamCarry()).lines.row(0, named=True)
    assert line["app_ts_us"] == (when.replace(tzinfo=UTC) - EPOCH) // timedelta(microseconds=1)
    assert (line["ts_us"], line["ts_origin"]) == (line["app_ts_us"], "app")
    assert (line["tp_rank"], line["dp_rank"]) == (tp, dp)


@props(200)
@given(batches(), st.integers(0, 40))
def test_two_batches_parse_like_one(batch: pl.DataFrame, cut: int) -> None:
    """The carry links batches: where a batch ends must not change what a line is parsed as
    (time, continuation block, the engine of a unit its name does not tell, ...)."""
    cut = min(cut, batch.height)
    whole = parse_records(batch, OPTS, carry=StreamCarry()).lines
    carry = StreamCarry()
    first = parse_records(batch.head(cut), OPTS, line_id_base=0, carry=carry).lines
    split = pl.concat([first, parse_records(batch.slice(cut), OPTS, line_id_base=cut, carry=carry).lines])
    for col in whole.columns:
        note(f"{col}: {whole[col].to_list()} vs {split[col].to_list()}")
        assert split[col].equals(whole[col]), col


def _two_ways(messages: list[str], unit: str, cut: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    batch = records(messages, [unit] * len(messages), [None] * len(messages))
    whole = parse_records(batch, OPTS, carry=StreamCarry()).lines
    carry = StreamCarry()
    split = pl.concat([parse_records(batch.head(cut), OPTS, carry=carry).lines,
                       parse_records(batch.slice(cut), OPTS, line_id_base=cut, carry=carry).lines])  # fmt: skip
    return whole, split


def test_time_of_lines_before_the_first_timestamp_does_not_depend_on_the_batch() -> None:
    whole, split = _two_ways(["no time on this line", "[2026-11-29 10:00:00 TP0] Prefill batch, #new-seq: 1"],
                             "sglang-prefill.service", 1)  # fmt: skip
    assert split["ts_us"].to_list() == whole["ts_us"].to_list()


def test_block_opened_by_a_line_ending_with_a_colon_continues_in_the_next_batch() -> None:
    # Found by test_two_batches_parse_like_one: "Scheduler debug info:" then loose (blank) lines.
    lines = ["[2026-11-29 12:19:58 TP0] start", "[2026-11-29 12:19:59 TP0] Scheduler debug info:", "", "", ""]
    whole, split = _two_ways(lines, "sglang-prefill.service", 2)
    assert whole["cont_of"].to_list() == [None, None, 1, 1, 1]
    assert split["cont_of"].to_list() == whole["cont_of"].to_list()


def test_engine_of_a_unit_does_not_depend_on_the_batch() -> None:
    lines = ["[2026-11-29 10:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 2, #cached-token: 0, "
             "token usage: 0.00, #running-req: 0, #queue-req: 0, #bootstrap-req: 0, #inflight-req: 0,",
             "[2026-11-29 10:00:01 TP0] something else", "[2026-11-29 10:00:02 TP0] and more"]  # fmt: skip
    # (PD queue fields: a `Prefill batch` without them is a non-PD server's, engine `unified`.)
    whole, split = _two_ways(lines, "sglang-worker-0", 1)
    assert split["engine"].to_list() == whole["engine"].to_list() == ["prefill"] * 3


# ------------------------------------------------------------------ the record readers (hypothesis)

FIELD_NAMES = st.sampled_from(["MESSAGE", "__CURSOR", "__REALTIME_TIMESTAMP", "_SYSTEMD_UNIT", "_PID", "PRIORITY",
                               "__SEQNUM", "__SEQNUM_ID", "_HOSTNAME", "UNIT", "X_OTHER"])  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(
        ["1790000000000000", "s=abc;i=1;b=b;m=1;t=65c1;x=1", "sglang-prefill.service", "1", "-5", ""]
    ),
    TEXT,
)


@st.composite
def export_text(draw: st.DrawFn) -> bytes:
    """Journal Export Format, mostly well-formed: text and binary fields, cuts, stray bytes."""
    out = b""
    for _ in range(draw(st.integers(0, 6))):
        for _ in range(draw(st.integers(0, 5))):
            name, value = draw(FIELD_NAMES).encode(), draw(VALUES).encode()
            if draw(st.integers(0, 5)) == 0:  # binary form, sometimes with a lying length
                size = len(value) + draw(st.sampled_from([0, 0, 0, 1, -1, 1 << 40]))
                out += name + b"\n" + max(size, 0).to_bytes(8, "little") + value + b"\n"
            else:
                out += name + b"=" + value.replace(b"\n", b" ") + b"\n"
        out += b"\n"
    if draw(st.booleans()):
        out = out[: draw(st.integers(0, len(out)))]
    return out + draw(st.binary(max_size=8))


@st.composite
def json_text(draw: st.DrawFn) -> bytes:
    import json

    lines = []
    for _ in range(draw(st.integers(0, 6))):
        obj = {draw(FIELD_NAMES): draw(st.one_of(VALUES, st.none(), st.lists(st.integers(0, 255), max_size=5)))
               for _ in range(draw(st.integers(0, 5)))}  # fmt: skip
        line = json.dumps(obj)
        if draw(st.integers(0, 4)) == 0:
            line = line[: draw(st.integers(0, len(line)))]
        lines.append(line.encode())
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n", b"\r\n", b"\n\n"]))


PLAIN = st.lists(st.one_of(LINE.map(str.encode), st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))),
                 max_size=12).map(b"\n".join)  # fmt: skip


@props(250, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.sampled_from(readers.READERS),
    st.sampled_from(readers.CHUNKS),
    st.one_of(export_text(), json_text(), PLAIN, st.binary(max_size=600)),
)
def test_readers_store_or_count_anything(reader: str, chunk: int, content: bytes) -> None:
    """Hypothesis-based fuzz of the record readers (fuzz/readers.py states the contract)."""
    with tempfile.TemporaryDirectory(prefix="pdf-fuzz-") as folder:
        readers.check_reader(reader, chunk, content, Path(folder))


@props(40)
@given(
    st.one_of(
        st.binary(max_size=90),
        st.lists(st.tuples(st.integers(0, 65535), st.integers(1, 255)), max_size=30).map(
            lambda xs: b"".join(f.to_bytes(2, "little") + bytes([x]) for f, x in xs)
        ),
    )
)
def test_journal_file_reader_survives_any_damage(spec: bytes) -> None:
    """A real .journal file, truncated and XOR-damaged as `spec` says (fuzz/readers.py: damage):
    the reader never takes the process down and reads at least what journalctl reads."""
    if readers.base_journal() is None:
        pytest.skip("systemd-journal-remote, journalctl or python-systemd missing")
    with tempfile.TemporaryDirectory(prefix="pdf-fuzz-") as folder:
        readers.check_journal(spec, Path(folder))


def test_reader_fuzz_seed_inputs_pass() -> None:
    seeds = readers.seed_inputs(REPO / "fixtures")
    assert len(seeds) >= 30
    for data in seeds:
        readers.check(data)


# ------------------------------------------------------------------ atheris, bounded


@pytest.mark.slow
def test_atheris_fuzz_target_runs_clean_on_400_seeded_inputs(tmp_path: Path) -> None:
    """A number of inputs, not a time: the same inputs on a busy machine as on a quiet one."""
    pytest.importorskip("atheris")
    proc = subprocess.run(
        [sys.executable, str(REPO / "fuzz" / "run.py"), "--runs", "400", "--seed", "1", "--artifacts",
         str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    crashes = sorted(p.name for p in tmp_path.glob("crash-*")) + sorted(
        p.name for p in tmp_path.glob("timeout-*")
    )
    assert proc.returncode == 0 and not crashes, proc.stderr[-6000:]
    done = [line for line in proc.stderr.splitlines() if line.startswith("Done ")]
    assert done and int(done[0].split()[1]) == 400, proc.stderr[-3000:]  # it really ran them
