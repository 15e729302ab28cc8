"""Kubernetes CRI pod logs (`<RFC 3339 time> <stdout|stderr> <P|F> <text>`): a `P` record is joined
with what follows it in its stream, whatever that text looks like (issue 26, item 6).

A record cut anywhere (inside SGLang's `[… TP0]` prefix, inside `bootstrap_room=NNNN`, right after
a space, with an empty `P` part, in three pieces, with the other stream's records in between, at a
batch boundary) gives exactly the events of the whole line, and every record is stored. The
record's last piece holds it (the pieces before it are stored with an empty text), so each line
parses the same wherever a batch ends. The variants are parsed together, one file (source_key and
host) each, so that one parse covers hundreds of cuts.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from pdforensics import store
from pdforensics.catalog import load_catalog
from pdforensics.ingest import ingest
from pdforensics.parse import Parsed, ParseOptions, StreamCarry, parse_records
from pdforensics.paths import fixtures_dir
from pdforensics.schema import RECORD_SCHEMA
from pdforensics.sources import RecordBatch, Selection
from pdforensics.sources.plain import PlainFileSource

OPTS = ParseOptions(catalog=load_catalog(), tz="UTC")
TS = "2026-11-29T20:05:16.100200300Z"
UNIT = "sglang-dsv4-prefill"


def fixture_line(scenario: str, pattern: str) -> str:
    """The first line of a fixture's plain prefill log that matches `pattern` (SGLang's own format)."""
    path = next((fixtures_dir() / scenario / "plain").glob("*-prefill.log"))
    return next(line for line in path.read_text().splitlines() if re.search(pattern, line))


# A Receive: whose 19-digit room is followed by a comma (a cut 6 digits in leaves the shape of a
# CloudWatch CSV line: 13 digits and a comma), a stats line and a watchdog firing with `TP0`,
# and uvicorn's access line (stdout).
RECEIVE = fixture_line(
    "healthy", r"\] Receive: obj=GenerateReqInput\(rid='[0-9a-f]{32}'.*bootstrap_room=\d{19},"
)
BATCH = fixture_line("healthy", r"^\[[\d-]+ [\d:]+ TP0\] Prefill batch, ")
FIRED = fixture_line("decode_restart_watchdog_fires", r"^\[[\d-]+ [\d:]+ TP0\] inflight watchdog: req\.rid=")
ACCESS = fixture_line("healthy", r'\] INFO: +[\d.:]+ - "POST /generate HTTP/1\.1" 200')
ROOM = int(re.search(r"bootstrap_room=(\d+)", RECEIVE).group(1))  # type: ignore[union-attr]
# The unsplit pod log: SGLang's logger writes to stderr, uvicorn's access log to stdout.
LOG = [("stderr", BATCH), ("stderr", RECEIVE), ("stdout", ACCESS), ("stderr", FIRED)]
SPLIT = 1  # the record cut in the variants below (RECEIVE; FIRED and BATCH in their own tests)
PREFILL_POD_LOG = "sglang-prefill-0-sglang-dsv4-prefill.log"  # fixtures/cri_split_records/plain


def cri(stream: str, tag: str, text: str) -> str:
    return f"{TS} {stream} {tag} {text}"


def records(files: list[tuple[str, list[str]]]) -> pl.DataFrame:
    """Each (name, messages) as the records of one file, its name as source_key and host."""
    rows = [
        {"source": name, "source_key": name, "seq": i, "message": m, "host": name, "unit": UNIT}
        for name, msgs in files
        for i, m in enumerate(msgs)
    ]
    df = pl.DataFrame(rows, schema={"source": pl.String, "source_key": pl.String, "seq": pl.Int64,
                                    "message": pl.String, "host": pl.String, "unit": pl.String})  # fmt: skip
    missing = [pl.lit(None, t).alias(n) for n, t in RECORD_SCHEMA.items() if n not in df.columns]
    return df.with_columns(missing).select([pl.col(n).cast(t) for n, t in RECORD_SCHEMA.items()])


def whole(log: list[tuple[str, str]]) -> list[str]:
    return [cri(stream, "F", text) for stream, text in log]


def split(log: list[tuple[str, str]], at: int, cuts: tuple[int, ...], between: int = 0) -> list[str]:
    """The pod log with record `at` cut at `cuts` (character positions of its text) into `P`
    records and a last `F`; the `between` records after it are written between its pieces."""
    stream, text = log[at]
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    parts = [cri(stream, "P" if k < len(pieces) - 1 else "F", p) for k, p in enumerate(pieces)]
    others = whole(log[at + 1 : at + 1 + between])
    return [*whole(log[:at]), *parts[:1], *others, *parts[1:], *whole(log[at + 1 + between :])]


def events_by_file(parsed: list[Parsed]) -> dict[str, pl.DataFrame]:
    """Each file's events (line ids and the per-file host left out), in event order."""
    ev = pl.concat([p.events for p in parsed]).sort("line_id").drop("line_id")
    return {k[0]: v.drop("host") for k, v in ev.partition_by("host", as_dict=True).items()}


def parse_once(files: list[tuple[str, list[str]]]) -> list[Parsed]:
    return [parse_records(records(files), OPTS, carry=StreamCarry())]


def parse_in_two(files: list[tuple[str, list[str]]], first: int) -> list[Parsed]:
    """Two batches of one ingest (one carry): each file's first `first` records, then the rest."""
    carry = StreamCarry()
    head = parse_records(records([(k, m[:first]) for k, m in files]), OPTS, carry=carry)
    tail = records([(k, m[first:]) for k, m in files]).with_columns(pl.col("seq") + first)
    return [head, parse_records(tail, OPTS, line_id_base=10**9, carry=carry)]


def lines_by_key(parsed: list[Parsed]) -> pl.DataFrame:
    """Every line as parsed, by (file, seq); its continuation link as its head's seq."""
    lines = pl.concat([p.lines for p in parsed])
    heads = lines.select(pl.col("line_id").alias("cont_of"), pl.col("seq").alias("head_seq"))
    cols = ["host", "seq", "event", "entry", "parse_error", "engine", "ts_us", "app_ts_us", "ts_origin",
            "tp_rank", "head_seq"]  # fmt: skip
    return lines.join(heads, on="cont_of", how="left").select(cols).sort("host", "seq")


@pytest.fixture(scope="module")
def want() -> pl.DataFrame:
    got = events_by_file(parse_once([("whole", whole(LOG))]))["whole"]
    assert got["event"].to_list() == ["prefill_stats", "request_received", "http_access", "watchdog_fired"]
    assert got.filter(pl.col("event") == "request_received")["bootstrap_room"].to_list() == [ROOM]
    assert got["tp_rank"].to_list() == [0, None, None, 0]
    return got


def assert_same(
    files: list[tuple[str, list[str]]], parsed: list[Parsed], want: pl.DataFrame, ordered: bool = True
) -> None:
    """Every file gives the whole log's events; each of its records is one stored line.
    `ordered=False` where another record was written between the pieces: a split record's event
    comes with its last piece."""
    got = events_by_file(parsed)
    lines = pl.concat([p.lines for p in parsed])
    count = dict(lines.group_by("host").len().iter_rows())
    for name, msgs in files:
        assert count[name] == len(msgs), name  # nothing lost
        ev, exp = got.get(name, want.head(0)), want
        if not ordered:
            ev, exp = ev.sort(pl.all()), want.sort(pl.all())
        assert ev.equals(exp), (name, ev.select("event", "bootstrap_room", "rid", "tp_rank"))
    stored = sorted(lines["message"].to_list())
    assert stored == sorted(m for _, msgs in files for m in msgs)  # every record as it came


def test_phantom_room_is_not_made_from_a_cloudwatch_shaped_continuation(want: pl.DataFrame) -> None:
    """The issue's case: the `F` record starts with 13 digits and a comma."""
    cut = RECEIVE.index(str(ROOM)) + 6
    assert re.match(r"\d{13},", RECEIVE[cut:])
    msgs = split(LOG, SPLIT, (cut,))
    parsed = parse_once([("pod", msgs)])
    assert_same([("pod", msgs)], parsed, want, ordered=True)
    lines = parsed[0].lines
    assert lines["cont_of"].to_list() == [None, None, 1, None, None]  # the F record continues the P
    assert lines["event"].to_list()[1:3] == [None, "request_received"]  # the last piece holds it
    assert lines["message"].to_list() == msgs
    assert parsed[0].stats["joined"].sum() == 1


@pytest.mark.parametrize(
    "at, text", [(0, BATCH), (1, RECEIVE), (3, FIRED)], ids=["batch", "receive", "fired"]
)
def test_cut_at_every_position_gives_the_whole_lines_events(want: pl.DataFrame, at: int, text: str) -> None:
    """P + F at every position of the text: inside `[2026-… TP0]`, inside the room, right after a
    space, an empty `P` part (0) and an empty `F` part (the text's length)."""
    files = [(f"v{i}", split(LOG, at, (i,))) for i in range(len(text) + 1)]
    assert_same(files, parse_once(files), want)


def critical(text: str) -> list[int]:
    """Positions worth cutting at: the SGLang prefix, the room's digits, the spaces, and a stride."""
    room = text.index(str(ROOM))
    spaces = [m.end() for m in re.finditer(" ", text)][:12]
    return sorted({*range(0, 30), *range(room - 2, room + 21), *spaces, *range(0, len(text) + 1, 97)})


def test_three_pieces(want: pl.DataFrame) -> None:
    """P, P, F: every pair of the critical positions (an empty middle piece included)."""
    pos = critical(RECEIVE)
    files = [(f"v{i}_{j}", split(LOG, SPLIT, (i, j))) for i in pos for j in pos if i <= j]
    assert len(files) > 2000
    assert_same(files, parse_once(files), want)


def test_other_stream_between_the_pieces(want: pl.DataFrame) -> None:
    """stdout's access line is written between the stderr record's pieces: it is not a piece,
    and the last piece continues the record's first (its stream's), not the stdout line."""
    pos = critical(RECEIVE)
    files = [(f"v{i}", split(LOG, SPLIT, (i,), between=1)) for i in pos]
    files += [(f"w{i}_{j}", split(LOG, SPLIT, (i, j), between=1)) for i, j in zip(pos, pos[7:], strict=False)]
    parsed = parse_once(files)
    assert_same(files, parsed, want, ordered=False)
    lines = lines_by_key(parsed).filter(pl.col("host") == f"v{pos[40]}")
    assert lines["head_seq"].to_list() == [None, None, None, 1, None]


def test_both_streams_cut_at_once(want: pl.DataFrame) -> None:
    """stderr's record and stdout's record both open, their pieces interleaved."""
    files = []
    for i in critical(RECEIVE):
        k = i % (len(ACCESS) + 1)
        msgs = [
            *whole(LOG[:1]),
            cri("stderr", "P", RECEIVE[:i]),
            cri("stdout", "P", ACCESS[:k]),
            cri("stderr", "F", RECEIVE[i:]),
            cri("stdout", "F", ACCESS[k:]),
            *whole(LOG[3:]),
        ]
        files.append((f"v{i}", msgs))
    assert_same(files, parse_once(files), want, ordered=False)


def test_records_cut_across_batches(want: pl.DataFrame) -> None:
    """The batch ends after any record: a record the batch ends inside is read whole in the next
    one (its text waits in the carry), no half of it becomes an event, and every line is parsed
    exactly as in one batch (event, time, engine, continuation link)."""
    pos = critical(RECEIVE)
    variants = {
        "two": [(f"v{i}", split(LOG, SPLIT, (i,))) for i in pos],
        "three": [(f"v{i}_{j}", split(LOG, SPLIT, (i, j))) for i, j in zip(pos, pos[5:], strict=False)],
        "between": [(f"v{i}", split(LOG, SPLIT, (i,), between=1)) for i in pos],
    }
    for files in variants.values():
        n = len(files[0][1])
        one = parse_once(files)
        for first in range(1, n):
            two = parse_in_two(files, first)
            assert_same(files, two, want, ordered=False)
            assert lines_by_key(two).equals(lines_by_key(one)), first


def test_a_record_whose_end_never_came_is_stored_without_an_event() -> None:
    """A `P` record at the end of the input (the runtime stopped mid-line): its line is stored;
    half a Receive: line must not become a request."""
    cut = RECEIVE.index(str(ROOM)) + 6
    msgs = [*whole(LOG[:1]), cri("stderr", "P", RECEIVE[:cut])]
    parsed = parse_records(records([("pod", msgs)]), OPTS, carry=StreamCarry())
    assert parsed.lines.height == 2
    assert parsed.events["event"].to_list() == ["prefill_stats"]


def test_a_whole_record_still_reads_its_own_prefix_forms() -> None:
    """Only continuations are protected: a whole `F` record's text is read like any line."""
    msgs = [cri("stdout", "F", "1795953916100,Decode batch, #running-req: 1")]
    parsed = parse_records(records([("pod", msgs)]), OPTS, carry=StreamCarry())
    assert parsed.events["event"].to_list() == ["decode_stats"]
    assert parsed.stats["prefixes"].to_list() == ["cri+cloudwatch_csv=1"]


def test_journald_linemax_piece_is_not_read_as_a_prefix() -> None:
    """journald's LineMax split follows the same rule: the next entry of the stream continues it,
    even when it starts with 13 digits and a comma."""
    lead = "[2026-11-29 10:00:00] Receive: obj=GenerateReqInput(rid='r9', text='"
    room = "4611300501895570458"
    mid = "', bootstrap_room="
    cut = 48 * 1024  # LineMax: the first entry is exactly this long
    pad = "x" * (cut - 6 - len(lead) - len(mid))
    text = f"{lead}{pad}{mid}{room}, bootstrap_host='10.0.0.1')"
    assert re.match(r"\d{13},", text[cut:])
    recs = records([("j", [text[:cut], text[cut:]])]).with_columns(
        pl.lit(1_795_953_916_000_000, pl.Int64).alias("ts_us"), pl.lit(7, pl.Int64).alias("pid")
    )
    parsed = parse_records(recs, OPTS, carry=StreamCarry())
    assert parsed.events["bootstrap_room"].to_list() == [int(room)]
    assert parsed.lines["cont_of"].to_list() == [None, 0]


def test_pod_log_ingest_with_tiny_batches(tmp_path: Path) -> None:
    """Through the plain-file reader and ingest, with batches of 2 records (boundaries everywhere):
    the split pod log stores every line and the whole log's events, and no phantom room."""
    cut = RECEIVE.index(str(ROOM)) + 6
    pods = tmp_path / "var/log/pods/ns_sglang-prefill-0_0a1b-2c3d/sglang-dsv4-prefill"
    pods.mkdir(parents=True)
    logs = {
        "whole": whole(LOG),
        "split": split(LOG, SPLIT, (cut, cut + 4), between=1),
    }
    got = {}
    for name, msgs in logs.items():
        path = pods / f"{name}.log"
        path.write_text("\n".join(msgs) + "\n")
        db = tmp_path / f"{name}.duckdb"
        ingest(db, [PlainFileSource(path)], Selection(), OPTS.catalog, tz="UTC", views=False, batch_size=2)
        con = store.open_db(db, read_only=True)
        try:
            assert con.execute("SELECT count(*) FROM lines").fetchone() == (len(msgs),)
            got[name] = store.query_pl(
                con, "SELECT event, bootstrap_room, rid, tp_rank, ts_us FROM events ORDER BY event"
            )
        finally:
            con.close()
    assert got["split"].equals(got["whole"])
    assert ROOM in got["split"]["bootstrap_room"].to_list()


class _Dying:
    """A plain file whose reading fails before batch `fail_after` (the ingest is interrupted there)."""

    def __init__(self, inner: PlainFileSource, fail_after: int) -> None:
        self.inner, self.fail_after = inner, fail_after

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def batches(self, selection: Selection, batch_size: int = 100_000) -> Iterator[RecordBatch]:
        for i, batch in enumerate(self.inner.batches(selection, batch_size)):
            if i == self.fail_after:
                raise OSError("disk went away")
            yield batch


def test_an_ingest_interrupted_inside_a_record_resumes_to_the_clean_run(tmp_path: Path) -> None:
    """The scenario's prefill pod log, 7 records a batch, interrupted right after a `P` record
    (its `F` unread) and ingested again: every line as a clean run parses it."""
    lines = (fixtures_dir() / "cri_split_records" / "plain" / PREFILL_POD_LOG).read_text().splitlines()
    after_p = [n for n in range(1, len(lines) // 7) if re.match(r"\S+ std(?:out|err) P ", lines[n * 7 - 1])][
        :3
    ]
    assert len(after_p) == 3
    log = tmp_path / "sglang-prefill.log"
    log.write_text("\n".join(lines[: after_p[-1] * 7 + 14]) + "\n")  # enough for the three cuts
    query = """SELECT l.seq, l.ts_us, l.ts_origin, l.engine, l.event, l.entry, l.parse_error, h.seq AS head_seq
               FROM lines l LEFT JOIN lines h ON h.line_id = l.cont_of ORDER BY l.seq"""

    def run(db: Path, source: object) -> pl.DataFrame:
        ingest(db, [source], Selection(), OPTS.catalog, tz="UTC", views=False, batch_size=7)  # type: ignore[list-item]
        con = store.open_db(db, read_only=True)
        try:
            return store.query_pl(con, query)
        finally:
            con.close()

    clean = run(tmp_path / "clean.duckdb", PlainFileSource(log))
    assert clean["event"].is_not_null().sum() > 20
    for n in after_p:
        db = tmp_path / f"cut{n}.duckdb"
        with pytest.raises(OSError, match="disk went away"):
            run(db, _Dying(PlainFileSource(log), n))
        assert run(db, PlainFileSource(log)).equals(clean), n


def test_the_scenario_fixture_cuts_a_pinned_room() -> None:
    """fixtures/cri_split_records: a silent pin's Receive: is cut inside its room, the next record
    starting with 13 digits and a comma (what the scenario is for)."""
    fx = fixtures_dir() / "cri_split_records"
    exp = json.loads((fx / "expected.json").read_text())
    pins = [r["bootstrap_room"] for r in exp["requests"] if r["class"] == "silent_pin"]
    text = (fx / "plain" / PREFILL_POD_LOG).read_text()
    cut = [p for p in pins if re.search(rf"P .*bootstrap_room={p[:6]}\n\S+ stderr F {p[6:]},", text)]
    assert any(len(p) - 6 == 13 for p in cut), cut
