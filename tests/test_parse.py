"""The parse stage: prefixes, clocks, ranks, continuation lines, matching and typed fields."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from pdforensics.catalog import Catalog, read_catalog_file
from pdforensics.parse import ParseOptions, StreamCarry, parse_messages, parse_records
from pdforensics.schema import RECORD_SCHEMA

MINI = """
[[entry]]
name = "prefill_stats"
event = "prefill_stats"
engine = "prefill"
starts_with = "Prefill batch"
pattern = '^Prefill batch[.,] (?:\\[\\d+\\], )?#new-seq: (?P<new_seq>\\d+)'
[entry.fields]
inflight_req = '#(?:inflight|transferring)-req: (\\d+)'
bootstrap_req = '#(?:bootstrap|prealloc|unbootstrapped)-req: (\\d+)'
cuda_graph = 'cuda graph: (\\w+)'

[[entry]]
name = "prefill_transfer_failed"
event = "prefill_transfer_failed"
engine = "prefill"
starts_with = "Prefill transfer failed"
pattern = "^Prefill transfer failed for request (?:rank=(?P<rank>\\\\d+) )?req\\\\.rid='(?P<rid>[^']*)' req\\\\.bootstrap_room=(?P<bootstrap_room>\\\\d+|None) with exception (?:KVTransferError\\\\(bootstrap_room=\\\\d+\\\\): )?(?P<reason>.*)"

[[entry]]
name = "suppressed"
event = "journal_suppressed"
starts_with = "Suppressed"
pattern = '^Suppressed (?P<count>\\d+) messages from (?P<unit_named>\\S+)'

[[entry]]
name = "router"
event = "router_log"
engine = "router"
contains = "sglang_router_rs"
pattern = '^\\S+ \\S+\\s+(?P<level>[A-Z]+) (?P<target>[\\w:]+): (?P<reason>.*)'

[[entry]]
name = "hit_exception"
event = "scheduler_exception"
starts_with = "Scheduler hit an exception"
pattern = '^Scheduler hit an exception:'
"""


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    path = tmp_path_factory.mktemp("cat") / "mini.toml"
    path.write_text(MINI)
    return Catalog(tuple(read_catalog_file(path)))


def utc_us(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()) * 1_000_000


def records(messages: list[str], **cols: list) -> pl.DataFrame:
    n = len(messages)
    base: dict[str, list] = {
        "source": ["t"] * n, "source_key": ["k"] * n, "seq": list(range(n)), "message": messages,
        "host": ["h1"] * n, "unit": ["sglang-dsv4-prefill.service"] * n,
    }  # fmt: skip
    base.update(cols)
    df = pl.DataFrame(base)
    for name, dtype in RECORD_SCHEMA.items():
        if name not in df.columns:
            df = df.with_columns(pl.lit(None, dtype).alias(name))
    return df.select([pl.col(n).cast(t) for n, t in RECORD_SCHEMA.items()])


def test_sglang_prefix_ranks_and_time(cat: Catalog) -> None:
    out = parse_messages(
        [
            "[2026-11-29 10:00:01 DP1 TP3 EP3] Prefill batch, #new-seq: 2, #inflight-req: 4, cuda graph: True",
            "[2026-11-29 10:00:02.123 TP5] Prefill batch, #new-seq: 1, #bootstrap-req: 7",
            "[2026-11-29 10:00:03 TP3 DP1 PP2] Prefill batch. #new-seq: 3, #transferring-req: 9",
        ],
        cat,
    )
    assert out["event"].to_list() == ["prefill_stats"] * 3
    assert out["tp_rank"].to_list() == [3, 5, 3]
    assert out["dp_rank"].to_list() == [1, None, 1]
    assert out["app_ts_us"].to_list() == [
        utc_us("2026-11-29 10:00:01"),
        utc_us("2026-11-29 10:00:02") + 123_000,
        utc_us("2026-11-29 10:00:03"),
    ]
    assert out["new_seq"].to_list() == [2, 1, 3]
    assert out["inflight_req"].to_list() == [4, None, 9]
    assert out["bootstrap_req"].to_list() == [None, 7, None]
    assert out["cuda_graph"].to_list() == [True, None, None]


def test_custom_docker_syslog_and_ansi_prefixes(cat: Catalog) -> None:
    out = parse_messages(
        [
            "[2026-04-15 17:13:10][scheduler_metrics_mixin.py:424][INFO]: Prefill batch, #new-seq: 1, #prealloc-req: 18",
            "qwen3-prefill-0-1  | [2026-04-30 16:02:25] Prefill batch, #new-seq: 1, #inflight-req: 8",
            "Nov 29 10:00:00 gpu7 sglang-prefill[123]: [2026-11-29 10:00:00 TP0] Prefill batch, #new-seq: 3",
            "\x1b[33m[2026-11-29 10:00:00] Prefill batch, #new-seq: 4\x1b[0m",
            "[not a date] Prefill batch, #new-seq: 5",
        ],
        cat,
    )
    assert out["event"].to_list() == ["prefill_stats"] * 4 + [None]
    assert out["new_seq"].to_list() == [1, 1, 3, 4, None]
    assert out["bootstrap_req"][0] == 18


def test_failure_fields_and_64bit_room(cat: Catalog) -> None:
    room = 18446744073709551557  # > 2**63: must survive as an unsigned 64-bit integer
    out = parse_messages(
        [
            f"[2026-11-29 10:15:02 TP0] Prefill transfer failed for request rank=0 req.rid='5f0c' "
            f"req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): inflight "
            "watchdog: stalled >60s in KVPoll.Transferring"
        ],
        cat,
    )
    row = out.row(0, named=True)
    assert row["event"] == "prefill_transfer_failed"
    assert row["bootstrap_room"] == room
    assert row["rank"] == 0 and row["rid"] == "5f0c"
    assert row["reason"] == "inflight watchdog: stalled >60s in KVPoll.Transferring"


def test_anchor_without_pattern_is_a_parse_error(cat: Catalog) -> None:
    out = parse_messages(["[2026-11-29 10:00:00] Prefill batch, garbled", "[2026-11-29 10:00:00] hello"], cat)
    assert out["event"].to_list() == [None, None]
    assert out["parse_error"].to_list() == ["prefill_stats", None]


def test_router_lines_are_utc_and_matched_whole(cat: Catalog) -> None:
    out = parse_messages(
        ["2025-08-31 07:32:08 ERROR sglang_router_rs::routers::http::pd_router: src/x.rs:1: Stream error"],
        cat,
        tz="Asia/Shanghai",  # the zone of engine lines must not shift router (UTC) lines
    )
    assert out["event"][0] == "router_log"
    assert out["app_ts_us"][0] == utc_us("2025-08-31 07:32:08")
    assert out["level"][0] == "ERROR"


def test_tz_option_converts_local_prefix(cat: Catalog) -> None:
    out = parse_messages(["[2026-11-29 18:00:00 TP0] Prefill batch, #new-seq: 1"], cat, tz="Asia/Shanghai")
    assert out["app_ts_us"][0] == utc_us("2026-11-29 10:00:00")


def test_host_offset_inferred_from_journal_time(cat: Catalog) -> None:
    # Host clock is UTC+8: the prefix says 18:00:00 while the journal received it at 10:00:00.004 UTC.
    t = utc_us("2026-11-29 10:00:00") + 4_000
    recs = records(["[2026-11-29 18:00:00 TP0] Prefill batch, #new-seq: 1"], ts_us=[t])
    parsed = parse_records(recs, ParseOptions(catalog=cat))
    assert parsed.lines["app_ts_us"][0] == utc_us("2026-11-29 10:00:00")
    assert parsed.lines["ts_us"][0] == t  # the exact journal time is kept as the line's time
    assert parsed.lines["ts_origin"][0] == "journal"


def test_traceback_lines_attach_to_their_record(cat: Catalog) -> None:
    recs = records(
        [
            "[2026-11-29 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/sglang/srt/managers/scheduler.py", line 10, in run',
            "    self.event_loop()",
            "RuntimeError: boom",
            "[2026-11-29 10:00:01 TP0] Prefill batch, #new-seq: 1",
            "Unexpected transfer worker error for room 1788380104266545413",
            "Traceback (most recent call last):",
            '  File "conn.py", line 1153, in transfer_worker',
        ],
        pid=[7] * 8,
    )
    lines = parse_records(recs, ParseOptions(catalog=cat, tz="UTC"), line_id_base=100).lines
    assert lines["cont_of"].to_list() == [None, 100, 100, 100, None, None, 105, 105]
    # continuation lines inherit the record's time instead of having none
    assert lines["ts_origin"].to_list()[1:4] == ["inherited"] * 3


def test_debug_dump_after_colon_attaches(cat: Catalog) -> None:
    recs = records(
        [
            "[2026-11-29 10:00:00 TP0] Scheduler debug info:",
            "cur_batch_for_debug.batch_size()=3",
            "reqs=[...]",
        ],
        pid=[7] * 3,
    )
    lines = parse_records(recs, ParseOptions(catalog=cat, tz="UTC"), line_id_base=1).lines
    assert lines["cont_of"].to_list() == [None, 1, 1]


def test_continuation_carries_across_batches(cat: Catalog) -> None:
    carry = StreamCarry()
    opts = ParseOptions(catalog=cat, tz="UTC")
    first = records(["[2026-11-29 10:00:00 TP0] Scheduler hit an exception: Traceback"], pid=[7])
    second = records(['  File "x.py", line 1'], pid=[7], seq=[1])
    parse_records(first, opts, line_id_base=10, carry=carry)
    lines = parse_records(second, opts, line_id_base=11, carry=carry).lines
    assert lines["cont_of"].to_list() == [10]
    assert lines["ts_us"].to_list() == [utc_us("2026-11-29 10:00:00")]


def test_suppressed_line_belongs_to_named_unit(cat: Catalog) -> None:
    recs = records(
        ["Suppressed 1234 messages from sglang-dsv4-prefill.service"],
        unit=["systemd-journald.service"],
        ts_us=[utc_us("2026-11-29 10:00:00")],
    )
    parsed = parse_records(recs, ParseOptions(catalog=cat))
    assert parsed.lines["unit"][0] == "sglang-dsv4-prefill.service"
    assert parsed.events["count"][0] == 1234


def test_engine_from_unit_name_then_from_lines(cat: Catalog) -> None:
    pd_line = "[2026-11-29 10:00:00] Prefill batch, #new-seq: 1, #bootstrap-req: 0, #inflight-req: 2"
    recs = records(
        ["[2026-11-29 10:00:00] hello", pd_line, "x"],
        unit=["sglang-dsv4-decode.service", "sglang-a.service", "sglang-a.service"],
    )
    lines = parse_records(recs, ParseOptions(catalog=cat, tz="UTC")).lines
    # decode by name; the unnamed unit is prefill because its own lines (PD queue fields) say so
    assert lines["engine"].to_list() == ["decode", "prefill", "prefill"]


def test_non_pd_lines_under_a_prefill_name_are_unified() -> None:
    """Issue 12: a non-PD server's log named prefill is `unified`, never prefill, and says so."""
    from pdforensics.catalog import load_catalog

    msgs = [
        "[2026-11-29 10:00:00] The server is fired up and ready to roll!",
        "[2026-11-29 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0",
        "[2026-11-29 10:00:02 TP0] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, "
        "cuda graph: True, gen throughput (token/s): 40.00, #queue-req: 0",
    ]
    parsed = parse_records(records(msgs), ParseOptions(catalog=load_catalog(), tz="UTC"))
    # The first line has only the name to go by; from the first stats line on the lines decide.
    assert parsed.lines["engine"].to_list() == ["prefill", "unified", "unified"]
    row = parsed.stats.row(0, named=True)
    assert (row["engine_by_name"], row["engine_by_lines"]) == ("prefill", "unified")


def test_pd_fields_make_prefill_and_decode_whatever_the_name() -> None:
    from pdforensics.catalog import load_catalog

    prefill = (
        "[2026-11-29 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0, #bootstrap-req: 0, #inflight-req: 1"
    )
    decode = "[2026-11-29 10:00:02 TP0] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, cuda graph: True, gen throughput (token/s): 40.00, #queue-req: 0"
    msgs = [prefill, decode, decode]
    # A unit named decode whose first line is PD prefill evidence, then plain decode lines: the
    # PD evidence (1 prefill vote, no decode votes) keeps it prefill.
    parsed = parse_records(records(msgs, unit=["decode"] * 3), ParseOptions(catalog=load_catalog(), tz="UTC"))
    assert parsed.lines["engine"].to_list() == ["prefill"] * 3
    # Decode batch lines alone under a neutral name: decode.
    parsed = parse_records(records([decode], unit=["worker"]), ParseOptions(catalog=load_catalog(), tz="UTC"))
    assert parsed.lines["engine"].to_list() == ["decode"]


def test_bundled_catalog_reads_every_real_log(real_logs_dir: Path) -> None:
    lines = [
        line
        for f in sorted(real_logs_dir.glob("*.log"))
        for line in f.read_text().splitlines()
        if line and not line.startswith("#")
    ]
    out = parse_messages(lines)
    rooms = pl.Series(lines).str.extract(r"bootstrap_room=(\d+)", 1).cast(pl.UInt64)
    has_room = rooms.is_not_null()
    assert has_room.sum() > 10
    assert (out["bootstrap_room"].filter(has_room) == rooms.filter(has_room)).all()
    stats = pl.Series(lines).str.contains(r"(?:Prefill|Decode) batch")
    assert out["event"].filter(stats).is_in(["prefill_stats", "decode_stats"]).all()
    assert out["parse_error"].null_count() == len(lines)


def test_cri_partial_lines_are_one_record() -> None:
    from pdforensics.catalog import load_catalog

    msgs = [
        "2026-05-16T12:44:55.100000000Z stderr P [2026-05-16 12:44:55 TP0] Prefill bootstrap failed for reque",
        "2026-05-16T12:44:55.100000000Z stderr P st rank=0 req.rid='r1' req.bootstrap_room=12",
        "2026-05-16T12:44:55.100000000Z stderr F 345 with exception KVTransferError(bootstrap_room=12345): boom",
        "2026-05-16T12:44:56.000000000Z stdout F [2026-05-16 12:44:56] next",
    ]
    parsed = parse_records(records(msgs, unit=["c"] * 4), ParseOptions(catalog=load_catalog(), tz="UTC"))
    ev = parsed.events
    assert ev["event"].to_list() == ["prefill_bootstrap_failed"]
    assert ev["bootstrap_room"].to_list() == [12345] and ev["rid"].to_list() == ["r1"]
    lines = parsed.lines
    assert lines["cont_of"].to_list() == [None, 0, 0, None]
    assert lines["message"].to_list() == msgs  # every piece is stored as it was
    assert parsed.stats["joined"].to_list() == [2]


def test_journald_linemax_split_is_joined() -> None:
    """journald cuts a stream line at LineMax (48K): the entries that follow continue it."""
    from pdforensics.catalog import load_catalog

    head = "[2026-11-29 10:00:00] Receive: obj=GenerateReqInput(rid='r9', text='" + "x" * 60_000
    cut = 48 * 1024
    msgs = [head[:cut], head[cut:] + "', bootstrap_room=777, bootstrap_host='10.0.0.1')"]
    recs = records(msgs, ts_us=[utc_us("2026-11-29 10:00:00")] * 2, pid=[7, 7])
    parsed = parse_records(recs, ParseOptions(catalog=load_catalog(), tz="UTC"))
    assert parsed.events["event"].to_list() == ["request_received"]
    assert parsed.events["bootstrap_room"].to_list() == [777]
    assert parsed.lines["cont_of"].to_list() == [None, 0]


def test_wrapped_room_keeps_its_digits() -> None:
    from pdforensics.catalog import load_catalog

    msgs = [
        "[2026-11-29 10:00:00 TP0] Prefill bootstrap failed for request rank=0 req.rid='r1' req.bootstrap_room=1234",
        "    5678 with exception KVTransferError(bootstrap_room=12345678): Failed to get kvcache from decode",
    ]
    parsed = parse_records(records(msgs), ParseOptions(catalog=load_catalog(), tz="UTC"))
    assert parsed.events["bootstrap_room"].to_list() == [12345678]
    assert parsed.lines["cont_of"].to_list() == [None, 0]


def test_traceback_is_not_taken_for_a_wrap() -> None:
    from pdforensics.catalog import load_catalog

    msgs = [
        "[2026-11-29 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/scheduler.py", line 1, in run',
        "    self.event_loop()",
        "RuntimeError: boom",
    ]
    parsed = parse_records(records(msgs), ParseOptions(catalog=load_catalog(), tz="UTC"))
    assert parsed.lines["cont_of"].to_list() == [None, 0, 0, 0]
    assert parsed.stats["joined"].to_list() == [0]


def test_loki_labels_name_host_and_unit() -> None:
    from pdforensics.catalog import load_catalog

    msg = '2026-05-16 12:44:55.560\t{container="sglang-decode", pod="dec-0"}\t[2026-05-16 12:44:55 TP0] hello'
    lines = parse_records(
        records([msg], host=["local"]), ParseOptions(catalog=load_catalog(), tz="UTC")
    ).lines
    assert (lines["host"][0], lines["unit"][0], lines["engine"][0]) == ("dec-0", "sglang-decode", "decode")
