"""`pdforensics export`: each format checked against its own rules, Parquet read back with DuckDB.

The validators below encode the formats' rules (Trace Event Format async/flow/counter
semantics, OTLP/JSON encoding, Timesketch's required keys), and run on the hand-made
database (exact expectations) and on ingested simulator fixtures (realistic volume,
overlapping requests, restarts, abort storms).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
import synthdb

from pdforensics import store
from pdforensics.api import run_ingest
from pdforensics.errors import UsageError
from pdforensics.export import export
from pdforensics.exporters.otlp import trace_id
from pdforensics.paths import fixtures_dir
from pdforensics.query import prepared
from pdforensics.verdict import VerdictOptions

OPTS = VerdictOptions(watchdog_timeout_s=60)
SCENARIOS = ["decode_restart_watchdog_fires", "abort_storm_pins", "multihost_skew"]


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthdb.build(tmp_path_factory.mktemp("export") / "synth.duckdb")


@pytest.fixture(scope="module", params=SCENARIOS)
def scenario_db(request: pytest.FixtureRequest, built) -> Path:
    """The scenario's journal.export through `ingest --file`, once per test run (shared: read it only)."""

    def build(out: Path) -> None:
        run_ingest(
            db=out / "db.duckdb", since=None, until=None, units=None, directories=None, journal_files=None,
            files=[fixtures_dir() / request.param / "journal.export"], tz=None, host=None, catalogs=None,
            watchdog_timeout=None, grace=None, progress=False, now_us=time.time_ns() // 1000,
        )  # fmt: skip

    return built(f"export-{request.param}", build) / "db.duckdb"


def do_export(db: Path, fmt: str, out: Path, opts: VerdictOptions | None = OPTS) -> Path:
    con = store.open_db(db, read_only=True)
    try:
        return export(con, fmt, out, opts)
    finally:
        con.close()


def window_end(db: Path) -> int:
    con = store.open_db(db, read_only=True)
    try:
        with prepared(con, OPTS):
            row = con.execute("SELECT end_t FROM clock_window").fetchone()
    finally:
        con.close()
    assert row
    return row[0]


# ------------------------------------------------------------------ Parquet


def relation_counts(db: Path) -> dict[str, tuple[str, int, list[tuple[str, str]]]]:
    """name -> (kind, rows, [(column, type)]) as the live database has them, with the export's options."""
    con = store.open_db(db, read_only=True)
    try:
        with prepared(con, OPTS):
            names = con.execute(
                "SELECT DISTINCT table_name, table_type FROM information_schema.tables "
                "WHERE table_catalog = current_database()"
            ).fetchall()
            got = {}
            for name, kind in names:
                n = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()
                cols = [(r[0], r[1]) for r in con.execute(f'DESCRIBE "{name}"').fetchall()]
                got[name] = ("view" if kind == "VIEW" else "table", n[0] if n else -1, cols)
            return got
    finally:
        con.close()


def test_parquet_has_every_table_and_view_and_reads_back(synth: Path, tmp_path: Path) -> None:
    out = do_export(synth, "parquet", tmp_path / "pq")
    live = relation_counts(synth)
    files = {p.stem: p for p in out.glob("*.parquet")}
    assert set(files) == set(live)
    assert {"lines", "events", "requests", "verdict", "watchdog_firings", "abort_races"} <= set(files)
    reader = duckdb.connect()
    for name, (kind, n, cols) in live.items():
        path = str(files[name])
        assert reader.execute("SELECT count(*) FROM read_parquet(?)", [path]).fetchone() == (n,), name
        back = [
            (r[0], r[1]) for r in reader.execute("DESCRIBE SELECT * FROM read_parquet(?)", [path]).fetchall()
        ]
        assert [c for c, _ in back] == [c for c, _ in cols], name
        meta = dict(
            reader.execute("SELECT decode(key), decode(value) FROM parquet_kv_metadata(?)", [path]).fetchall()
        )
        assert meta["pdforensics_kind"] == kind
        assert float(json.loads(meta["pdforensics_variables"])["pdf_watchdog_timeout_s"]) == 60
    # 64-bit rooms survive (UBIGINT, above 2**63 too), and the classification is the one asked for.
    rooms = reader.execute("SELECT bootstrap_room FROM read_parquet(?) ORDER BY 1", [str(files["requests"])])
    assert [r[0] for r in rooms.fetchall()] == sorted(synthdb.ROOMS)
    verdict = reader.execute("SELECT verdict FROM read_parquet(?)", [str(files["verdict"])]).fetchone()
    assert verdict == ("watchdog_missed",)


def test_parquet_of_an_ingested_incident(scenario_db: Path, tmp_path: Path) -> None:
    out = do_export(scenario_db, "parquet", tmp_path / "pq")
    reader = duckdb.connect()
    n = reader.execute("SELECT count(*) FROM read_parquet(?)", [str(out / "lines.parquet")]).fetchone()
    con = duckdb.connect(str(scenario_db), read_only=True)
    assert n == con.execute("SELECT count(*) FROM lines").fetchone()
    con.close()


def test_parquet_refuses_a_file_as_folder(synth: Path, tmp_path: Path) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    with pytest.raises(UsageError, match="writes a folder"):
        do_export(synth, "parquet", f)


# ------------------------------------------------------------------ Perfetto / Chrome trace


PHASES = {"b", "e", "X", "C", "i", "M"}


def validate_chrome_trace(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The Trace Event Format's rules, as Perfetto's JSON importer applies them."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    events = doc["traceEvents"]
    named = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    stacks: dict[tuple, list[dict]] = defaultdict(list)
    flows: dict[str, Counter] = defaultdict(Counter)
    threads: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    ordered = sorted(enumerate(events), key=lambda ie: (ie[1].get("ts", 0), ie[0]))  # stable, as Perfetto
    for _, e in ordered:
        ph = e["ph"]
        assert ph in PHASES, e
        assert isinstance(e["pid"], int) and e["pid"] in named, e
        if ph == "M":
            continue
        assert isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["ts"], int) and e["ts"] >= 0, e
        if ph in ("b", "e"):
            assert e.get("cat") and e.get("id"), e
            key = (e["pid"], e["cat"], e["id"])
            if ph == "b":
                stacks[key].append(e)
                if "bind_id" in e:
                    assert e.get("flow_out") or e.get("flow_in"), e
                    flows[e["bind_id"]]["out" if e.get("flow_out") else "in"] += 1
            else:
                assert stacks[key], f"'e' without an open 'b': {e}"
                top = stacks[key].pop()
                assert top["name"] == e["name"], (top, e)  # proper nesting: innermost closes first
                assert e["ts"] >= top["ts"], (top, e)
        elif ph == "X":
            assert isinstance(e["dur"], int) and e["dur"] >= 0, e
            threads[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        elif ph == "C":
            assert e["args"] and all(isinstance(v, int | float) and not isinstance(v, bool)
                                     for v in e["args"].values()), e  # fmt: skip
        elif ph == "i":
            assert e["s"] in ("t", "p", "g"), e
            if e["s"] == "t":
                assert isinstance(e["tid"], int), e
    assert not [s for s in stacks.values() if s], "async slices left open"
    for bind_id, c in flows.items():
        assert c == Counter({"out": 1, "in": 1}), (bind_id, c)
    for spans in threads.values():  # complete slices on one thread must nest or be disjoint
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[int] = []
        for start, end in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], (start, end, open_ends)
            open_ends.append(end)
    return events


def test_perfetto_synthetic_incident(synth: Path, tmp_path: Path) -> None:
    out = do_export(synth, "perfetto", tmp_path / "trace.json")
    events = validate_chrome_trace(json.loads(out.read_text()))
    procs = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    prefill = procs["prefill gpu-a (sglang-dsv4-prefill.service)"]
    decode = procs["decode gpu-b (sglang-dsv4-decode.service)"]
    end = window_end(synth)

    def side(pid: int, room: int) -> tuple[dict, dict]:
        mine = [e for e in events if e["ph"] in "be" and e["pid"] == pid and e["id"].endswith(f":{room}")]
        return mine[0], mine[-1]  # the outer slice opens first and closes last

    # The silent pin: open at the window end, and said so.
    begin, finish = side(prefill, synthdb.ROOM_PINNED)
    assert begin["name"] == finish["name"] == "prefill Req p-pin [open]"
    assert begin["args"]["open"] is True and begin["args"]["class"] == "silent_pin"
    assert finish["ts"] == end
    # A finished request is closed at its own end, with a flow from its prefill to its decode side.
    begin, finish = side(prefill, synthdb.ROOM_OK)
    assert begin["args"]["open"] is False and finish["ts"] == synthdb.T0 + 4 * synthdb.S
    dbegin, _ = side(decode, synthdb.ROOM_OK)
    assert begin["bind_id"] == dbegin["bind_id"] and begin["flow_out"] and dbegin["flow_in"]
    # Overlapping requests on one engine never share an async id.
    ids = {e["id"] for e in events if e["ph"] == "b" and e["pid"] == prefill and e["cat"] == "request"}
    assert len(ids) == 4
    # Instants: the watchdog firing with its dwell, the abort race's failure line.
    (fired,) = [e for e in events if e["ph"] == "i" and e["cat"] == "watchdog"]
    assert fired["args"]["dwell_s"] == 60.4 and fired["args"]["bootstrap_room"] == str(synthdb.ROOM_FIRED)
    aborts = [e for e in events if e["ph"] == "i" and "Aborted by AbortReq" in e["args"].get("reason", "")]
    assert aborts and aborts[0]["args"]["bootstrap_room"] == str(synthdb.ROOM_RACE)
    # Counter tracks: the inflight gauge as logged.
    inflight = [e["args"]["value"] for e in events if e["ph"] == "C" and e["name"] == "#inflight-req"]
    assert inflight == [1, 2, 3, 2, 2]
    # Incarnations: the decode restart shows as two slices on the decode process.
    incarnations = [e for e in events if e["ph"] == "X" and e["cat"] == "incarnation" and e["pid"] == decode]
    assert len(incarnations) == 2
    (window,) = [e for e in events if e.get("cat") == "window"]
    assert window["name"] == "window: watchdog_missed"


def test_perfetto_of_ingested_incidents(scenario_db: Path, tmp_path: Path) -> None:
    out = do_export(scenario_db, "perfetto", tmp_path / "trace.json")
    events = validate_chrome_trace(json.loads(out.read_text()))
    con = duckdb.connect(str(scenario_db), read_only=True)
    rooms = con.execute(
        "SELECT count(DISTINCT bootstrap_room) FROM events WHERE bootstrap_room > 0"
    ).fetchone()
    con.close()
    outer = {e["id"] for e in events if e["ph"] == "b" and e["cat"] == "request"}
    assert rooms and len(outer) >= rooms[0] > 0
    assert any(e["ph"] == "C" for e in events)


# ------------------------------------------------------------------ OTLP JSON


HEX32 = re.compile(r"[0-9a-f]{32}")
HEX16 = re.compile(r"[0-9a-f]{16}")
INT64 = re.compile(r"-?[0-9]+")


def validate_any_value(v: dict[str, Any]) -> None:
    (kind,) = v.keys()
    if kind == "intValue":
        assert isinstance(v[kind], str) and INT64.fullmatch(v[kind]), v  # 64-bit integers as strings
        assert -(2**63) <= int(v[kind]) < 2**63, v
    elif kind == "doubleValue":
        assert isinstance(v[kind], float | int) and not isinstance(v[kind], bool), v
    elif kind == "boolValue":
        assert isinstance(v[kind], bool), v
    elif kind == "stringValue":
        assert isinstance(v[kind], str), v
    elif kind == "arrayValue":
        for item in v[kind]["values"]:
            validate_any_value(item)
    else:
        raise AssertionError(f"unknown AnyValue {v}")


def validate_attributes(attrs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [a["key"] for a in attrs]
    assert len(keys) == len(set(keys)), keys
    for a in attrs:
        assert set(a) == {"key", "value"} and isinstance(a["key"], str) and a["key"]
        validate_any_value(a["value"])
    return {a["key"]: next(iter(a["value"].values())) for a in attrs}


def validate_otlp_line(line: str) -> list[dict[str, Any]]:
    """One ExportTraceServiceRequest in OTLP/JSON; returns its spans (with their resource's attributes)."""
    doc = json.loads(line)
    assert set(doc) == {"resourceSpans"}
    spans = []
    for rs in doc["resourceSpans"]:
        resource = validate_attributes(rs["resource"]["attributes"])
        assert resource["service.name"]
        for ss in rs["scopeSpans"]:
            assert ss["scope"]["name"] == "pdforensics"
            for s in ss["spans"]:
                assert HEX32.fullmatch(s["traceId"]) and s["traceId"] != "0" * 32, s
                assert HEX16.fullmatch(s["spanId"]) and s["spanId"] != "0" * 16, s
                assert "parentSpanId" not in s or HEX16.fullmatch(s["parentSpanId"]), s
                assert isinstance(s["kind"], int) and 0 <= s["kind"] <= 5
                for k in ("startTimeUnixNano", "endTimeUnixNano"):
                    assert isinstance(s[k], str) and s[k].isdigit(), s
                assert int(s["endTimeUnixNano"]) >= int(s["startTimeUnixNano"]), s
                assert s["status"]["code"] in (0, 1, 2)
                assert "message" not in s["status"] or s["status"]["code"] == 2
                for ev in s.get("events", []):
                    assert isinstance(ev["timeUnixNano"], str) and ev["timeUnixNano"].isdigit()
                    assert ev["name"]
                    validate_attributes(ev["attributes"])
                spans.append({**s, "attrs": validate_attributes(s["attributes"]), "resource": resource})
    assert len({s["traceId"] for s in spans}) == 1, "one trace per line"
    ids = {s["spanId"] for s in spans}
    assert len(ids) == len(spans)
    roots = [s for s in spans if "parentSpanId" not in s]
    assert len(roots) == 1
    assert all(s["parentSpanId"] in ids for s in spans if "parentSpanId" in s)
    by_id = {s["spanId"]: s for s in spans}
    for s in spans:  # children inside their parents
        if "parentSpanId" in s:
            parent = by_id[s["parentSpanId"]]
            assert int(parent["startTimeUnixNano"]) <= int(s["startTimeUnixNano"])
            assert int(s["endTimeUnixNano"]) <= int(parent["endTimeUnixNano"])
    return spans


def test_otlp_synthetic_incident(synth: Path, tmp_path: Path) -> None:
    out = do_export(synth, "otlp", tmp_path / "traces.jsonl")
    traces = [validate_otlp_line(line) for line in out.read_text().splitlines()]
    assert len(traces) == len(synthdb.ROOMS)
    by_room = {int(t[0]["traceId"][16:], 16): t for t in traces}  # low 64 bits: the room
    assert set(by_room) == set(synthdb.ROOMS)
    assert all(t[0]["traceId"] == trace_id(room) for room, t in by_room.items())
    end_ns = str(window_end(synth) * 1000)

    pinned = by_room[synthdb.ROOM_PINNED]
    (root,) = [s for s in pinned if "parentSpanId" not in s]
    assert root["attrs"]["pdforensics.class"] == "silent_pin"
    assert root["attrs"]["pdforensics.bootstrap_room"] == str(synthdb.ROOM_PINNED)  # intValue, as a string
    assert root["status"]["code"] == 2
    (prefill,) = [s for s in pinned if s["name"] == "prefill Req p-pin"]
    assert prefill["attrs"]["pdforensics.open"] is True
    assert prefill["endTimeUnixNano"] == end_ns
    assert prefill["resource"]["service.name"] == "sglang-prefill"
    assert prefill["status"]["code"] == 2

    fired = by_room[synthdb.ROOM_FIRED]
    (prefill,) = [s for s in fired if s["name"] == "prefill Req p-fired"]
    assert prefill["attrs"]["pdforensics.open"] is False
    names = {e["name"] for e in prefill["events"]}
    assert {"watchdog_fired", "prefill_transfer_failed"} <= names

    # Above 2**63 a room cannot be an int64: it is text, never a wrapped number.
    race = by_room[synthdb.ROOM_RACE]
    (root,) = [s for s in race if "parentSpanId" not in s]
    assert root["attrs"]["pdforensics.bootstrap_room"] == str(synthdb.ROOM_RACE)
    assert root["attrs"]["pdforensics.abort_race"] is True


def test_otlp_of_ingested_incidents(scenario_db: Path, tmp_path: Path) -> None:
    out = do_export(scenario_db, "otlp", tmp_path / "traces.jsonl")
    lines = out.read_text().splitlines()
    assert lines
    trace_ids = [validate_otlp_line(line)[0]["traceId"] for line in lines]
    assert len(trace_ids) == len(set(trace_ids))  # one trace per room
    con = duckdb.connect(str(scenario_db), read_only=True)
    with_room = con.execute("SELECT count(DISTINCT bootstrap_room) FROM events WHERE bootstrap_room > 0")
    assert len(lines) == with_room.fetchone()[0]
    con.close()


# ------------------------------------------------------------------ Timesketch


def validate_timesketch_line(line: str) -> dict[str, Any]:
    obj = json.loads(line)
    assert isinstance(obj, dict)
    assert isinstance(obj["message"], str)
    assert isinstance(obj["timestamp_desc"], str) and obj["timestamp_desc"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", obj["datetime"]), obj["datetime"]
    when = datetime.strptime(obj["datetime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert isinstance(obj["timestamp"], int)
    assert abs(when.timestamp() * 1_000_000 - obj["timestamp"]) < 1  # the same instant, in µs
    assert all(v is not None for v in obj.values())
    assert not any(isinstance(v, dict) for v in obj.values()), "fields are flat"
    return obj


def test_timesketch_synthetic_incident(synth: Path, tmp_path: Path) -> None:
    out = do_export(synth, "timesketch", tmp_path / "sketch.jsonl")
    rows = [validate_timesketch_line(line) for line in out.read_text().splitlines()]
    kinds = Counter(r["data_type"] for r in rows)
    assert kinds == {
        "sglang:log:line": len(synthdb.scenario()),
        "pdforensics:request": len(synthdb.ROOMS),
        "pdforensics:hole": kinds["pdforensics:hole"],
        "pdforensics:verdict": 1,
    }
    lines = [r for r in rows if r["data_type"] == "sglang:log:line"]
    assert sorted(r["line_id"] for r in lines) == list(range(1, len(synthdb.scenario()) + 1))
    (fired,) = [r for r in lines if r.get("event") == "watchdog_fired"]
    assert fired["bootstrap_room"] == str(synthdb.ROOM_FIRED) and fired["dwell_s"] == 60.4
    assert fired["timestamp_desc"] == "Journal Receive Time" and fired["hostname"] == "gpu-a"
    (pin,) = [r for r in rows if r["data_type"] == "pdforensics:request" and r["class"] == "silent_pin"]
    assert pin["room"] == str(synthdb.ROOM_PINNED) and "silent_pin" in pin["message"]
    (verdict,) = [r for r in rows if r["data_type"] == "pdforensics:verdict"]
    assert verdict["message"] == "verdict: watchdog_missed"


def test_timesketch_of_ingested_incidents(scenario_db: Path, tmp_path: Path) -> None:
    out = do_export(scenario_db, "timesketch", tmp_path / "sketch.jsonl")
    rows = [validate_timesketch_line(line) for line in out.read_text().splitlines()]
    con = duckdb.connect(str(scenario_db), read_only=True)
    n = con.execute("SELECT count(*) FROM lines WHERE ts_us IS NOT NULL").fetchone()[0]
    con.close()
    assert sum(r["data_type"] == "sglang:log:line" for r in rows) == n
    assert not any("\x1b" in r["message"] for r in rows)  # ANSI colours stripped


# ------------------------------------------------------------------ the command


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PDFORENSICS_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "pdforensics", "export", *args], capture_output=True, text=True, env=env
    )


def test_cli_export_and_errors(synth: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    res = _cli("--db", str(synth), "--format", "perfetto", "--out", str(out), "--watchdog-timeout", "60")
    assert res.returncode == 0, res.stderr
    validate_chrome_trace(json.loads(out.read_text()))
    res = _cli("--db", str(synth), "--format", "xml", "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and "parquet, perfetto, otlp, timesketch" in res.stderr
    res = _cli("--db", str(synth), "--format", "otlp", "--out", str(tmp_path / "no" / "such" / "x"))
    assert res.returncode == 2 and "does not exist" in res.stderr
    assert "Traceback" not in res.stderr


# ------------------------------------------------------------------ the validators can fail


def _trace(*events: dict) -> dict:
    meta = {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p"}}
    return {"traceEvents": [meta, *events]}


def _async(ph: str, name: str, ts: int, id_: str = "1:1", **extra: Any) -> dict:
    return {"ph": ph, "cat": "request", "name": name, "pid": 1, "tid": 0, "id": id_, "ts": ts, **extra}


@pytest.mark.parametrize(
    "trace",
    [
        # a phase outliving its request: "e" of the outer slice closes the inner one
        _trace(
            _async("b", "req", 0), _async("b", "phase", 1), _async("e", "req", 2), _async("e", "phase", 3)
        ),
        _trace(_async("b", "req", 0)),  # never closed
        _trace(_async("b", "req", 5), _async("e", "req", 4)),  # negative duration
        _trace(
            _async("b", "req", 0, bind_id="a", flow_out=True), _async("e", "req", 1)
        ),  # flow without its end
        _trace({"ph": "C", "name": "g", "pid": 1, "ts": 0, "args": {"value": "3"}}),  # counter not numeric
        _trace({"ph": "b", "name": "x", "pid": 2, "ts": 0, "cat": "c", "id": "1"}),  # pid without a name
    ],
)
def test_chrome_trace_validator_rejects_broken_traces(trace: dict) -> None:
    with pytest.raises(AssertionError):
        validate_chrome_trace(trace)


def _otlp(**span: Any) -> str:
    base = {"traceId": "1" * 32, "spanId": "2" * 16, "name": "s", "kind": 1, "startTimeUnixNano": "5",
            "endTimeUnixNano": "6", "attributes": [], "status": {"code": 0}}  # fmt: skip
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "x"}}]}
    scope = {"scope": {"name": "pdforensics"}, "spans": [{**base, **span}]}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]})


@pytest.mark.parametrize(
    "line",
    [
        _otlp(startTimeUnixNano=5),  # 64-bit integers must be strings
        _otlp(endTimeUnixNano="4"),  # ends before it starts
        _otlp(traceId="ABC"),  # not 32 hex digits
        _otlp(attributes=[{"key": "n", "value": {"intValue": 3}}]),
        _otlp(status={"code": 0, "message": "only ERROR may carry one"}),
        _otlp(parentSpanId="3" * 16),  # a parent that is not in the trace
    ],
)
def test_otlp_validator_rejects_broken_lines(line: str) -> None:
    with pytest.raises((AssertionError, KeyError)):
        validate_otlp_line(line)


def test_otlp_validator_accepts_a_minimal_span() -> None:
    assert len(validate_otlp_line(_otlp())) == 1


@pytest.mark.parametrize(
    "obj",
    [
        {"datetime": "2026-11-30T00:00:00.000000Z", "timestamp_desc": "t", "timestamp": 1796083200000000},
        {
            "message": "m",
            "datetime": "2026-11-30 00:00:00",
            "timestamp_desc": "t",
            "timestamp": 1796083200000000,
        },
        {"message": "m", "datetime": "2026-11-30T00:00:00.000000Z", "timestamp_desc": "t", "timestamp": 1},
        {
            "message": "m",
            "datetime": "2026-11-30T00:00:00.000000Z",
            "timestamp_desc": "",
            "timestamp": 1796083200000000,
        },
    ],
)
def test_timesketch_validator_rejects_broken_events(obj: dict) -> None:
    with pytest.raises((AssertionError, KeyError)):
        validate_timesketch_line(json.dumps(obj))


# ------------------------------------------------------------------ phases always nest


def _one_request_spans(markers: list[tuple[str, int]], received_t: int, end_t: int | None) -> list[Any]:
    """The spans queries/exports/request_spans.sql draws for one prefill side with these markers."""
    from pdforensics.exporters.requests import iter_requests

    con = duckdb.connect()
    con.execute(
        """CREATE TABLE requests AS SELECT 7::UBIGINT AS bootstrap_room, ? AS first_t, 'p1' AS p_host,
               NULL::VARCHAR AS d_host, 'abc' AS prefill_rid, NULL::VARCHAR AS decode_rid, ? AS prefill_received_t,
               NULL::BIGINT AS decode_received_t, ? AS prefill_end_t, NULL::BIGINT AS decode_end_t,
               NULL::BIGINT AS p_gone_t, NULL::BIGINT AS d_gone_t, 'silent_pin' AS class, NULL AS abort_race,
               NULL AS abort_race_outcome, NULL AS across_restart, NULL AS one_sided, NULL AS dwell_s,
               NULL AS dwell_basis, NULL AS evidence_level, NULL AS reason, NULL AS lost_reason,
               NULL AS holder_at_end""",
        [received_t, received_t, end_t],
    )
    con.execute(
        "CREATE TABLE request_phases (bootstrap_room UBIGINT, engine VARCHAR, phase VARCHAR, t_us BIGINT)"
    )
    con.executemany("INSERT INTO request_phases VALUES (7, 'prefill', ?, ?)", [list(m) for m in markers])
    con.execute(
        """CREATE TABLE room_events (bootstrap_room UBIGINT, engine VARCHAR, host VARCHAR, event VARCHAR,
               reason VARCHAR, state VARCHAR, dwell_s DOUBLE, t_us BIGINT, rank INT, tp_rank INT, line_id BIGINT,
               reason_kind VARCHAR)"""
    )
    con.execute("CREATE TABLE lines (line_id BIGINT, message VARCHAR)")
    (request,) = iter_requests(con, 1_000)
    (side,) = request.sides
    return [side.span, *side.phases]


def test_phases_are_sequential_and_inside_their_side() -> None:
    markers = [
        ("received", 100),
        ("inflight_entry", 96),  # estimated from a dwell: before the Receive
        ("watchdog_deadline", 250),  # after the side's end
        ("pinned_from", 150),
        ("kv_done", 180),  # terminal markers are not stretches
    ]
    side, *spans = _one_request_spans(markers, 100, 200)
    assert (side.start, side.end, side.open) == (100, 200, False)
    assert [s.args["phase"] for s in spans] == ["inflight_entry", "pinned_from", "watchdog_deadline"]
    assert spans[0].start == 100 and spans[-1].end == 200
    for a, b in itertools.pairwise(spans):
        assert a.end == b.start
    assert all(side.start <= s.start <= s.end <= side.end for s in spans)
    assert not any(s.open for s in spans)


def test_an_open_side_runs_to_the_window_end_and_its_last_phase_is_open() -> None:
    """Two estimates of one marker: the first stands; a lone received stretch is no phase."""
    side, *spans = _one_request_spans(
        [("received", 100), ("pinned_from", 300), ("pinned_from", 150)], 100, None
    )
    assert (side.end, side.open) == (1_000, True)
    assert [(s.args["phase"], s.start, s.end, s.open) for s in spans] == [
        ("received", 100, 150, False),
        ("pinned_from", 150, 1_000, True),
    ]
    side, *spans = _one_request_spans([("received", 100)], 100, 200)
    assert spans == []
