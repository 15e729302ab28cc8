"""Watchdog dialects: the catalog groups each deployment's watchdog lines (`watchdog = "dsv4"`,
`"slime"`), `load_catalog(watchdog=NAME)` / `--watchdog NAME` keep one dialect, and SGLang's own
watchdogs and timeouts never read as the operator's watchdog."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from pdforensics.catalog import load_catalog, read_catalog_file
from pdforensics.errors import UsageError
from pdforensics.parse import parse_messages
from pdforensics.schema import KVPOLL_STATES

DSV4_FIRED = (
    "[2026-11-29 10:15:02 TP0] inflight watchdog: req.rid='5f0c' req.bootstrap_room=7561186998443553199 "
    "stalled >60s in KVPoll.Transferring (dwell=61.4s); forcing Failed + release"
)
DSV4_FAILED = (
    "[2026-11-29 10:15:02 TP0] Prefill transfer failed for request rank=0 req.rid='5f0c' "
    "req.bootstrap_room=7561186998443553199 with exception KVTransferError(bootstrap_room=7561186998443553199): "
    "inflight watchdog: stalled >60s in KVPoll.Transferring"
)
SLIME_FIRED = (
    "[2026-03-10 09:12:44 TP0] Prefill transfer timed out after 612.3s (state=3) for request rank=0 "
    "req.rid='5f0c' req.bootstrap_room=7561186998443553199"
)
SLIME_DECODE = (
    "[2026-03-10 09:12:51 TP0] Decode transfer timeout for request rank=0 rid=9b9b room=42 after 600s"
)
LINES = [DSV4_FIRED, DSV4_FAILED, SLIME_FIRED, SLIME_DECODE]
WATCHDOG_EVENTS = {"watchdog_armed", "watchdog_fired", "decode_watchdog_fired"}


def _events(watchdog: str | None) -> list[tuple[str | None, str | None]]:
    out = parse_messages(LINES, load_catalog(watchdog=watchdog))
    return list(zip(out["event"].to_list(), out["entry"].to_list(), strict=True))


def test_bundled_dialects_are_named() -> None:
    cat = load_catalog()
    assert cat.dialects == ["dsv4", "slime"]
    dsv4 = {e.name for e in cat.entries if e.watchdog == "dsv4"}
    assert dsv4 == {"inflight_watchdog_armed", "inflight_watchdog_fired", "prefill_transfer_failed_watchdog"}
    assert {e.event for e in cat.entries if e.watchdog == "slime"} == {
        "watchdog_fired",
        "decode_watchdog_fired",
    }


def test_default_reads_every_known_dialect() -> None:
    got = _events(None)
    assert got == [
        ("watchdog_fired", "inflight_watchdog_fired"),
        ("prefill_transfer_failed", "prefill_transfer_failed_watchdog"),
        ("watchdog_fired", "slime_prefill_transfer_timeout_transferring"),
        ("decode_watchdog_fired", "slime_decode_transfer_timeout"),
    ]


def test_one_dialect_drops_the_others_watchdog_lines() -> None:
    slime = _events("slime")
    # dsv4's firing line is no event at all; its failure line is an ordinary transfer failure
    assert slime[0] == (None, None)
    assert slime[1] == ("prefill_transfer_failed", "prefill_transfer_failed")
    assert slime[2:] == _events(None)[2:]
    dsv4 = _events("dsv4")
    assert dsv4[:2] == _events(None)[:2]
    assert dsv4[2:] == [(None, None), (None, None)]
    # entries of no dialect stay whatever the choice
    for name in ("dsv4", "slime"):
        kept = {e.name for e in load_catalog(watchdog=name).entries}
        assert {"prefill_transfer_failed", "decode_batch_059", "scheduler_watchdog_timeout"} <= kept


def test_unknown_dialect_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(UsageError, match=re.escape("unknown watchdog dialect 'hygon'; known: dsv4, slime")):
        load_catalog(watchdog="hygon")


MINE = """
[[entry]]
name = "my_watchdog_fired"
event = "watchdog_fired"
engine = "prefill"
watchdog = "mine"
starts_with = "IWD fired"
pattern = '^IWD fired room=(?P<bootstrap_room>\\d+)'

[[entry]]
name = "inflight_watchdog_fired"
event = "watchdog_fired"
starts_with = "inflight watchdog: "
pattern = '^inflight watchdog: (?:req\\.)?rid=(?P<rid>\\S+)'
"""


def test_user_catalog_can_add_a_dialect_and_override_by_name(tmp_path: Path) -> None:
    user = tmp_path / "mine.toml"
    user.write_text(MINE, encoding="utf-8")
    cat = load_catalog([user], watchdog="mine")
    names = [e.name for e in cat.entries]
    assert names[:2] == ["my_watchdog_fired", "inflight_watchdog_fired"]
    # the user's override of a bundled dsv4 entry names no dialect, so it stays; the other bundled
    # dialects' entries go
    assert not any(e.watchdog in ("dsv4", "slime") for e in cat.entries)
    assert load_catalog([user]).dialects == ["dsv4", "mine", "slime"]
    out = parse_messages(["[2026-11-29 10:15:02 TP0] IWD fired room=7", SLIME_FIRED], cat).to_dicts()
    assert (out[0]["event"], out[0]["bootstrap_room"]) == ("watchdog_fired", 7)
    assert out[1]["event"] is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('watchdog = "Not A Name"\n', "watchdog must be a short lower-case name"),
        ("[entry.set]\nstate = 3\n", "'set' must be a table of name = 'value' strings"),
        ('[entry.set]\nbootstrap_room = "1"\n', "both captured and set"),
    ],
    ids=["bad-dialect-name", "set-not-string", "set-and-captured"],
)
def test_loader_checks_dialect_and_constants(tmp_path: Path, extra: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    first = MINE.split('\n[[entry]]\nname = "inflight')[0]
    if extra.startswith("watchdog"):
        first = first.replace('watchdog = "mine"\n', extra)
        extra = ""
    path.write_text(first + "\n" + extra, encoding="utf-8")
    with pytest.raises(UsageError, match=re.escape(message)):
        read_catalog_file(path)


def test_slime_integer_states_are_named_by_kvpoll() -> None:
    cat = load_catalog()
    per_state = [e for e in cat.entries if e.name.startswith("slime_prefill_transfer_timeout_")]
    assert len(per_state) == 3
    lines = []
    for e in per_state:
        code = int(re.search(r"\(\?P<state_code>(\d)\)", e.pattern).group(1))
        assert e.constants["state"] == KVPOLL_STATES[code]
        lines.append(SLIME_FIRED.replace("(state=3)", f"(state={code})"))
    out = parse_messages([*lines, SLIME_FIRED.replace("(state=3)", "(state=0)")], cat).to_dicts()
    assert [r["entry"] for r in out] == [e.name for e in per_state] + ["slime_prefill_transfer_timeout"]
    assert [r["state_code"] for r in out] == [1, 2, 3, 0]
    assert all(r["dwell_s"] == 612.3 and r["bootstrap_room"] == 7561186998443553199 for r in out)
    assert KVPOLL_STATES == {0: "KVPoll.Failed", 1: "KVPoll.Bootstrapping", 2: "KVPoll.WaitingForInput",
                             3: "KVPoll.Transferring", 4: "KVPoll.Success"}  # fmt: skip


SGLANG_OWN = [
    "[2026-11-29 12:09:20] Watchdog TokenizerManager initialized.",
    "[2026-11-29 12:20:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    "[2026-11-29 12:20:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)",
    "[2025-08-14 21:40:00 TP0] Watchdog timeout (self.watchdog_timeout=300)",
    "[2026-11-29 12:13:52 TP0] Prefill bootstrap failed for request rank=0 req.rid='a' req.bootstrap_room=5 "
    "with exception KVTransferError(bootstrap_room=5): Request 5 timed out after 300.0s in KVPoll.Bootstrapping",
    "[2026-11-29 12:13:52 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='b' "
    "decode_req.req.bootstrap_room=6 with exception KVTransferError(bootstrap_room=6): "
    "Request 6 timed out after 300.0s in KVPoll.WaitingForInput",
    "[2026-11-29 12:13:52 TP0] Request waiting timeout reached.",
]


def test_sglang_own_watchdogs_and_timeouts_are_never_the_operators_watchdog() -> None:
    out = parse_messages(SGLANG_OWN, load_catalog()).to_dicts()
    assert [r["event"] for r in out] == [
        "soft_watchdog_init", "engine_died", "scheduler_watchdog_timeout", "engine_died",
        "prefill_bootstrap_failed", "decode_transfer_failed", "request_timeout",
    ]  # fmt: skip
    assert not WATCHDOG_EVENTS & {r["event"] for r in out}
    assert [r["entry"] for r in out][4:] == [
        "prefill_bootstrap_timeout",
        "decode_waiting_timeout",
        "request_waiting_timeout",
    ]
    cat = load_catalog()
    kinds = [cat.by_name(r["entry"]).constants.get("timeout_kind") for r in out[4:]]
    assert kinds == ["bootstrap_timeout", "waiting_timeout", "request_waiting_timeout"]


def test_decode_side_firings_are_their_own_event_on_decode() -> None:
    from test_parse import records

    from pdforensics.parse import ParseOptions, parse_records

    recs = records([SLIME_DECODE, SLIME_FIRED], unit=["svc-a", "svc-b"])
    events = parse_records(recs, ParseOptions(catalog=load_catalog(), tz="UTC")).events
    got = events.select("event", "engine", "watchdog_queue", "timeout_s").rows()
    assert got == [
        ("decode_watchdog_fired", "decode", "transfer", 600.0),
        ("watchdog_fired", "prefill", "transfer", None),
    ]


# ------------------------------------------------------------------ the CLI


def test_catalog_command_shows_and_filters_the_dialect() -> None:
    from test_cli import run

    every = run("catalog")
    assert every.returncode == 0, every.stderr
    assert "watchdog=dsv4" in every.stdout and "watchdog=slime" in every.stdout
    for name in ("slime", "dsv4"):  # that dialect's lines only: each of them, nothing else
        one = run("catalog", "--watchdog", name)
        assert one.returncode == 0, one.stderr
        theirs = [line for line in every.stdout.splitlines() if f" watchdog={name} " in line]
        assert theirs and one.stdout.splitlines() == theirs, one.stdout


def test_catalog_command_shows_a_user_dialect_alone(tmp_path: Path) -> None:
    from test_cli import assert_one_line_error, run

    user = tmp_path / "mine.toml"
    user.write_text(MINE, encoding="utf-8")
    mine = run("catalog", "--catalog", str(user), "--watchdog", "mine")
    assert mine.returncode == 0, mine.stderr
    # the user's override of inflight_watchdog_fired names no dialect: not "mine"'s, not listed
    assert [line.split()[0] for line in mine.stdout.splitlines()] == ["my_watchdog_fired"], mine.stdout
    assert_one_line_error(run("catalog", "--watchdog", "mine"), UsageError.exit_code, "known: dsv4, slime")


def test_ingest_with_an_unknown_dialect_fails_with_one_line_before_opening_the_db(tmp_path: Path) -> None:
    from test_cli import assert_one_line_error, run

    db = tmp_path / "x.duckdb"
    log = tmp_path / "prefill.log"
    log.write_text(SLIME_FIRED + "\n", encoding="utf-8")
    proc = run("ingest", "--db", str(db), "--file", str(log), "--tz", "UTC", "--watchdog", "hygon", "-q")
    assert_one_line_error(proc, UsageError.exit_code, "unknown watchdog dialect 'hygon'")
    assert not db.exists()


@pytest.mark.parametrize(("dialect", "want"), [("slime", 2), ("dsv4", 1)])
def test_ingest_watchdog_option_decides_which_firing_lines_count(
    tmp_path: Path, dialect: str, want: int
) -> None:
    from test_cli import run

    db = tmp_path / "x.duckdb"
    log = tmp_path / "prefill.log"
    log.write_text("\n".join([DSV4_FIRED, SLIME_FIRED, SLIME_DECODE]) + "\n", encoding="utf-8")
    proc = run("ingest", "--db", str(db), "--file", str(log), "--tz", "UTC", "--watchdog", dialect, "-q")
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute(
            "SELECT entry FROM events WHERE event IN ('watchdog_fired', 'decode_watchdog_fired') ORDER BY line_id"
        ).fetchall()
    finally:
        con.close()
    assert len(got) == want
    assert all(e.startswith("slime_") == (dialect == "slime") for (e,) in got)
