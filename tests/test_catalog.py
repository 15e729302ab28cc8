"""The bundled line catalog (pdforensics/catalog/sglang.toml) and its loader.

Every sample of every entry goes through the real parser (`parse_messages`), so a
sample passing here means the line parses the same way during an ingest.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from pdforensics.catalog import BUNDLED, Catalog, Entry, Sample, load_catalog, read_catalog_file
from pdforensics.errors import UsageError
from pdforensics.parse import parse_messages
from pdforensics.schema import EVENT_FIELDS

CATALOG = load_catalog()
SAMPLES: list[tuple[Entry, int, Sample]] = [
    (e, i, s) for e in CATALOG.entries for i, s in enumerate(e.samples)
]

# Events the stages downstream rely on (docs/internals.md, "Event names and their fields").
DOCUMENTED_EVENTS = {
    "prefill_stats", "decode_stats",
    "prefill_bootstrap_failed", "prefill_transfer_failed", "decode_handshake_failed", "decode_transfer_failed",
    "watchdog_armed", "watchdog_fired", "decode_watchdog_fired",
    "request_received", "request_finished", "req_time_stats", "abort_request",
    "server_ready", "sigterm", "server_args", "scheduler_watchdog_timeout", "engine_died",
    "health_check_failed", "graceful_exit", "journal_suppressed",
    "unit_started", "unit_stopping", "unit_stopped", "unit_killed", "unit_failed",
    "http_access", "session_failed", "transfer_error", "lost_prefill",
    "bootstrap_timeout_hint", "waiting_timeout_hint", "router_log", "native_log",
    "retraction", "retract_abort", "rebootstrap_failed", "role_switch", "config_logging", "trace_dropped",
    "mixed_versions", "nixl_peer_invalidated", "soft_watchdog_init", "request_metrics", "bootstrap_http_access",
}  # fmt: skip


@pytest.fixture(scope="module")
def parsed_samples() -> pl.DataFrame:
    # One batch for all samples: the matcher sees every anchor competing, as in a real ingest.
    return parse_messages([s.line for _, _, s in SAMPLES], CATALOG)


def _value(row: dict[str, Any], key: str) -> Any:
    if key in row:
        return row[key]
    extra = json.loads(row["extra"]) if row.get("extra") else {}
    return extra.get(key, "<absent>")


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(want, got, rel_tol=1e-9)
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got
    return want == got


# ------------------------------------------------------------------ the bundled catalog


def test_bundled_catalog_is_broad() -> None:
    names = [e.name for e in CATALOG.entries]
    assert len(names) == len(set(names))
    assert len(names) > 100
    assert len(SAMPLES) > len(names)
    assert all(e.origin == str(BUNDLED) for e in CATALOG.entries)


def test_documented_events_are_covered() -> None:
    missing = DOCUMENTED_EVENTS - CATALOG.events
    assert not missing, sorted(missing)


@pytest.mark.parametrize("entry", CATALOG.entries, ids=lambda e: e.name)
def test_entry_is_well_formed(entry: Entry) -> None:
    assert entry.samples, "every entry needs at least one sample"
    assert entry.description and entry.versions and entry.level
    assert all(s.expect.get("event") == entry.event for s in entry.samples)
    compiled = re.compile(entry.pattern)
    # Unnamed groups would surface as struct fields "1", "2"... in polars: use (?:...).
    assert compiled.groups == len(compiled.groupindex), "every capture group must be named"
    overlap = set(compiled.groupindex) & set(entry.fields)
    assert not overlap, f"{overlap} both a pattern group and a field (the field would be ignored)"
    if entry.starts_with:
        # Anchored patterns let the regex fail fast on the anchor's candidates.
        assert entry.pattern.startswith("^")


@pytest.mark.parametrize("pos", range(len(SAMPLES)), ids=[f"{e.name}[{i}]" for e, i, _ in SAMPLES])
def test_sample_parses_to_its_entry(parsed_samples: pl.DataFrame, pos: int) -> None:
    entry, _, sample = SAMPLES[pos]
    row = parsed_samples.row(pos, named=True)
    # The entry itself, not only the event: an earlier entry claiming the sample means wrong order.
    assert row["entry"] == entry.name, f"claimed by {row['entry']!r} (parse_error={row['parse_error']!r})"
    assert row["parse_error"] is None
    for key, want in sample.expect.items():
        got = _value(row, key)
        assert _same(want, got), f"{key}: expected {want!r}, got {got!r}"


def test_typed_expectations_use_schema_types() -> None:
    # Expect values of typed fields must be written with the column's type (rooms as integers, ...).
    for entry, _, sample in SAMPLES:
        for key, want in sample.expect.items():
            dtype = EVENT_FIELDS.get(key)
            if dtype is None:
                continue
            if dtype.is_integer():
                assert isinstance(want, int) and not isinstance(want, bool), (entry.name, key)
            elif dtype.is_float():
                assert isinstance(want, float), (entry.name, key)
            elif dtype == pl.Boolean():
                assert isinstance(want, bool), (entry.name, key)
            else:
                assert isinstance(want, str), (entry.name, key)


def test_starts_with_anchor_mid_line_is_not_a_parse_error() -> None:
    lines = [
        "[2026-01-01 00:00:00] Using cache; Started worker, Session 10.0.0.1:1 ready",
        "[2026-01-01 00:00:00] queue drained: Prefill batch sizes reset",
        "RuntimeError: code E0123 from INFO: handler",
    ]
    out = parse_messages(lines, CATALOG)
    assert out["parse_error"].to_list() == [None, None, None]


# ------------------------------------------------------------------ real lines


def _real_lines(real_logs_dir: Path) -> list[tuple[str, str]]:
    out = []
    for path in sorted(real_logs_dir.glob("*.log")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                out.append((path.name, line))
    return out


def test_real_logs(real_logs_dir: Path) -> None:
    pairs = _real_lines(real_logs_dir)
    out = parse_messages([line for _, line in pairs], CATALOG)
    problems = []
    for (name, line), row in zip(pairs, out.iter_rows(named=True), strict=True):
        where = f"{name}: {line[:100]}"
        if row["parse_error"] is not None:
            problems.append(f"parse_error {row['parse_error']}: {where}")
        room = re.search(r"bootstrap_room=(\d+)", line)
        if room and row["bootstrap_room"] != int(room.group(1)):
            problems.append(f"room {row['bootstrap_room']} != {room.group(1)}: {where}")
        if re.search(r"\] Prefill batch", line) and row["event"] != "prefill_stats":
            problems.append(f"not prefill_stats ({row['event']}): {where}")
        if re.search(r"\] Decode batch", line) and row["event"] != "decode_stats":
            problems.append(f"not decode_stats ({row['event']}): {where}")
    assert not problems, "\n".join(problems)


def test_real_logs_truncated_lines_keep_their_fields(real_logs_dir: Path) -> None:
    lines = {name[:2]: line for name, line in _real_lines(real_logs_dir)}  # the last line of each file
    out = parse_messages([lines["09"], lines["06"]], CATALOG).to_dicts()
    assert out[0]["event"] == "prefill_transfer_failed"
    assert out[0]["rid"] == "0abb148e5eb6479ab8b193fef7feadfc"
    assert out[0]["bootstrap_room"] == 6721395813317762539
    assert out[0]["reason"] == "Failed to send kv chunk of 672139581331"
    assert out[1]["event"] == "bootstrap_timeout_hint"
    first_13 = next(line for name, line in _real_lines(real_logs_dir) if name.startswith("13"))
    row = parse_messages([first_13], CATALOG).row(0, named=True)
    assert (row["event"], row["rid"]) == ("request_received", "8eb9f6fd8c2d4d749657d26d20e8fe10")


# ------------------------------------------------------------------ the loader

GOOD = """
[[entry]]
name = "x"
event = "x_event"
starts_with = "hello"
pattern = '^hello (?P<rid>\\w+)'
"""


def _write(tmp_path: Path, text: str, name: str = "user.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_loader_accepts_a_minimal_entry(tmp_path: Path) -> None:
    (entry,) = read_catalog_file(_write(tmp_path, GOOD))
    assert (entry.name, entry.event, entry.starts_with) == ("x", "x_event", "hello")


REJECT_IDS = [
    "no-anchor", "look-behind", "backreference", "unbalanced", "unknown-key", "duplicate-name",
    "field-two-groups", "field-no-group", "no-event", "bad-engine", "bad-toml",
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace('starts_with = "hello"\n', ""), "literal anchor"),
        (GOOD.replace("'^hello (?P<rid>\\w+)'", "'(?<=hello )(?P<rid>\\w+)'"), "bad regex"),
        (GOOD.replace("'^hello (?P<rid>\\w+)'", "'^(?P<a>x)(?P=a)'"), "bad regex"),
        (GOOD.replace("'^hello (?P<rid>\\w+)'", "'^hello ((?P<rid>'"), "bad regex"),
        (GOOD + 'colour = "red"\n', "unknown keys"),
        (GOOD + GOOD, "duplicate entry names"),
        (GOOD + "[entry.fields]\nrid = '(a)(b)'\n", "exactly one group"),
        (GOOD + "[entry.fields]\nrid = 'no group'\n", "exactly one group"),
        (GOOD.replace('event = "x_event"\n', ""), "missing or empty 'event'"),
        (GOOD + 'engine = "gpu"\n', "engine must be one of"),
        ("[[entry]\nname = ", "not valid TOML"),
    ],
    ids=REJECT_IDS,
)
def test_loader_rejects(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(UsageError, match=re.escape(message)):
        load_catalog([path])


def test_loader_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not found"):
        load_catalog([tmp_path / "nope.toml"])


CATALOG_FILE_PROBLEMS = {
    "directory": (lambda d: d, "is a directory"),
    "symlink-loop": (lambda d: _loop(d), "cannot be read: Too many levels of symbolic links"),
    "not-utf8": (lambda d: _bytes(d, b"\xff\xfe[[entry]]"), "not valid TOML: not UTF-8 text"),
    "entry-not-array": (lambda d: _bytes(d, b"entry = 3\n"), "'entry' must be an array of tables"),
    "entry-not-table": (lambda d: _bytes(d, b"entry = [1, 2]\n"), "each [[entry]] must be a table"),
    "anchor-not-string": (lambda d: _bytes(d, GOOD.replace('"hello"', "7").encode()), "'starts_with' must be a string"),
    "fields-not-table": (lambda d: _bytes(d, (GOOD + "fields = 'x'\n").encode()), "'fields' must be a table"),
    "field-not-string": (lambda d: _bytes(d, (GOOD + "[entry.fields]\nrid = 3\n").encode()), "'fields' must be a table"),
    "sample-without-line": (lambda d: _bytes(d, (GOOD + "[[entry.sample]]\nexpect = {}\n").encode()), "needs line ="),
}  # fmt: skip


def _loop(folder: Path) -> Path:
    (folder / "a.toml").symlink_to(folder / "b.toml")
    (folder / "b.toml").symlink_to(folder / "a.toml")
    return folder / "a.toml"


def _bytes(folder: Path, data: bytes) -> Path:
    (folder / "c.toml").write_bytes(data)
    return folder / "c.toml"


@pytest.mark.parametrize("problem", sorted(CATALOG_FILE_PROBLEMS))
def test_a_catalog_file_that_cannot_be_used_is_a_usage_error(tmp_path: Path, problem: str) -> None:
    make, message = CATALOG_FILE_PROBLEMS[problem]
    with pytest.raises(UsageError, match=re.escape(message)) as info:
        load_catalog([make(tmp_path)])
    assert "\n" not in str(info.value)


def test_an_unreadable_catalog_file_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (chmod 000 does not stop root, which the tests may run as: the read is made to fail instead)
    path = _write(tmp_path, GOOD)

    def denied(file: Any, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr("pdforensics.catalog.files.open", denied, raising=False)
    with pytest.raises(UsageError, match="cannot be read: permission denied"):
        load_catalog([path])


@pytest.mark.parametrize("command", ["catalog", "ingest"])
def test_cli_catalog_that_is_a_directory_fails_with_one_line_and_exit_2(tmp_path: Path, command: str) -> None:
    from test_cli import assert_one_line_error, run

    db = tmp_path / "x.duckdb"
    args = ["--db", str(db), "--file", str(tmp_path / "none.json")] if command == "ingest" else []
    proc = run(command, *args, "--catalog", str(tmp_path))
    assert_one_line_error(proc, UsageError.exit_code, f"catalog file {tmp_path} is a directory")
    assert not db.exists()  # refused before anything was opened or created


def test_user_catalog_overrides_by_name_and_goes_first(tmp_path: Path) -> None:
    user = _write(
        tmp_path,
        """
[[entry]]
name = "inflight_watchdog_fired"
event = "watchdog_fired"
starts_with = "IWD fired"
pattern = '^IWD fired room=(?P<bootstrap_room>\\d+) dwell=(?P<dwell_s>[\\d.]+)'

[[entry]]
name = "my_prefill_batch"
event = "my_stats"
starts_with = "Prefill batch"
pattern = '^Prefill batch, #new-seq: (?P<new_seq>\\d+)'
""",
    )
    cat: Catalog = load_catalog([user])
    assert [e.name for e in cat.entries[:2]] == ["inflight_watchdog_fired", "my_prefill_batch"]
    assert cat.by_name("inflight_watchdog_fired").origin == str(user)
    assert len(cat.entries) == len(CATALOG.entries) + 1
    out = parse_messages(
        [
            "[2026-11-29 10:15:02 TP0] IWD fired room=7561186998443553199 dwell=61.4",
            "[2026-11-29 10:15:02 TP0] inflight watchdog: req.rid='5f0c' req.bootstrap_room=1 "
            "stalled >60s in KVPoll.Transferring (dwell=61.4s); forcing Failed + release",
            "[2026-11-29 10:15:03 TP0] Prefill batch, #new-seq: 3, #new-token: 10, #cached-token: 0, "
            "token usage: 0.10, #running-req: 0, #queue-req: 0, #pending-token: 0, #bootstrap-req: 0, "
            "#inflight-req: 3, cuda graph: False, input throughput (token/s): 1.00",
        ],
        cat,
    ).to_dicts()
    assert (out[0]["event"], out[0]["bootstrap_room"], out[0]["dwell_s"]) == (
        "watchdog_fired", 7561186998443553199, 61.4,
    )  # fmt: skip
    # The bundled pattern is gone: the old text is no longer recognised as a firing.
    assert out[1]["event"] is None
    assert (out[2]["entry"], out[2]["event"], out[2]["new_seq"]) == ("my_prefill_batch", "my_stats", 3)


def test_later_user_file_wins(tmp_path: Path) -> None:
    a = _write(tmp_path, GOOD, "a.toml")
    b = _write(tmp_path, GOOD.replace('event = "x_event"', 'event = "y_event"'), "b.toml")
    assert load_catalog([a, b]).by_name("x").event == "y_event"


def test_bundled_file_is_shipped_beside_the_loader() -> None:
    assert BUNDLED.name == "sglang.toml" and BUNDLED.is_file()


TIMEOUT_KINDS = {
    "bootstrap_timeout", "waiting_timeout", "request_waiting_timeout", "request_running_timeout",
    "mooncake_transfer_timeout", "mori_sla", "prefill_completion_timeout", "nixl_settle_timeout",
    "deferred_release_timeout",
}  # fmt: skip


def test_constant_fields_are_known_text_values() -> None:
    from pdforensics.schema import KVPOLL_STATES

    with_constants = [e for e in CATALOG.entries if e.constants]
    assert with_constants
    for entry in with_constants:
        for key, value in entry.constants.items():
            assert EVENT_FIELDS.get(key) == pl.String(), (entry.name, key)
            if key == "state":
                assert value in KVPOLL_STATES.values(), (entry.name, value)
            if key == "timeout_kind":
                assert value in TIMEOUT_KINDS, (entry.name, value)
                # an upstream timeout is never the operator's watchdog
                assert entry.event not in ("watchdog_fired", "decode_watchdog_fired"), entry.name


def test_a_catalog_file_is_read_once_while_it_stays_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read and checked once per process (the bundled file's checks cost ~0.13 s an ingest); a file
    written again is read again."""
    import os

    import pdforensics.catalog as catalog

    path = _write(tmp_path, GOOD)
    first = catalog.read_catalog_file(path)
    bundled = catalog.read_catalog_file(catalog.BUNDLED)

    def unread(*_args: Any, **_kwargs: Any) -> str:
        raise AssertionError("read again")

    with monkeypatch.context() as m:
        m.setattr(catalog, "read_toml_text", unread)
        assert catalog.read_catalog_file(path) == first
        assert catalog.read_catalog_file(catalog.BUNDLED) == bundled
    # the same size, in place (the same inode): only the modification time tells it changed
    path.write_text(GOOD.replace('name = "x"', 'name = "y"', 1))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert [e.name for e in first] == ["x"]
    assert [e.name for e in catalog.read_catalog_file(path)] == ["y"]
