"""`pdforensics sql`: saved queries, output formats, read-only connection, DuckDB's own errors."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import synthdb

from pdforensics import query
from pdforensics.errors import UsageError
from pdforensics.verdict import VerdictOptions

REQUIRED_SAVED = {
    "stuck_requests", "watchdog_firings", "abort_races", "failures_by_reason", "inflight_gauge",
    "requests_per_incarnation", "unrecognised_lines",
}  # fmt: skip
OPTS = VerdictOptions(watchdog_timeout_s=60)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthdb.build(tmp_path_factory.mktemp("sql") / "synth.duckdb")


def run(db: Path, sql: str, fmt: str = "csv", opts: VerdictOptions | None = OPTS) -> str:
    out = io.StringIO()
    query.run_query(db, sql, fmt, opts, out)
    return out.getvalue()


def rows(db: Path, sql: str, opts: VerdictOptions | None = OPTS) -> list[dict]:
    return [json.loads(line) for line in run(db, sql, "ndjson", opts).splitlines()]


# ------------------------------------------------------------------ saved queries


def test_saved_queries_have_descriptions_and_cover_the_issue() -> None:
    saved = query.saved_queries()
    assert set(saved) >= REQUIRED_SAVED
    for q in saved.values():
        first = q.path.read_text().splitlines()[0]
        assert first.startswith("-- ") and len(first) > 20, q.path
        assert q.description == first[3:].strip()
        assert "\n" not in q.description


def test_list_shows_every_saved_query_with_its_description() -> None:
    out = io.StringIO()
    query.list_saved(out)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(query.saved_queries())
    for name, q in query.saved_queries().items():
        assert any(line.startswith(name + " ") and line.endswith(q.description) for line in lines)


@pytest.mark.parametrize("name", sorted(query.saved_queries()))
def test_every_saved_query_runs(db: Path, name: str) -> None:
    out = run(db, name, "csv")
    header = next(csv.reader(io.StringIO(out)))
    assert header and all(header)


def test_stuck_requests_lists_the_pin_and_the_firing_with_dwell(db: Path) -> None:
    got = {r["room"]: r for r in rows(db, "stuck_requests") if r["kind"] == "request"}
    assert got[str(synthdb.ROOM_PINNED)]["class"] == "silent_pin"
    assert got[str(synthdb.ROOM_PINNED)]["dwell_s"] > 60 + 10
    assert got[str(synthdb.ROOM_FIRED)]["class"] == "watchdog_fired"
    assert got[str(synthdb.ROOM_FIRED)]["dwell_s"] == pytest.approx(60.4)
    assert all(r["timeout_s"] == 60 for r in got.values())
    assert str(synthdb.ROOM_OK) not in got


def test_watchdog_firings(db: Path) -> None:
    (f,) = rows(db, "watchdog_firings")
    assert f["room"] == str(synthdb.ROOM_FIRED)
    assert f["dwell_s"] == pytest.approx(60.4)
    assert f["state"] == "KVPoll.Transferring"
    assert f["same_second"] is True


def test_abort_races(db: Path) -> None:
    (r,) = rows(db, "abort_races")
    assert r["room"] == str(synthdb.ROOM_RACE)
    assert r["outcome"] == "released"


def test_failures_by_reason_groups_numbers_away(db: Path) -> None:
    got = rows(db, "failures_by_reason")
    reasons = {(r["event"], r["reason"]): r for r in got}
    assert reasons[("prefill_transfer_failed", "Aborted by AbortReq.")]["rooms"] == 1
    assert ("prefill_transfer_failed", "inflight watchdog: stalled >Ns in KVPoll.Transferring") in reasons
    assert reasons[("watchdog_fired", "KVPoll.Transferring")]["lines"] == 1


def test_inflight_gauge_over_time(db: Path) -> None:
    got = rows(db, "inflight_gauge")
    assert [r["inflight_req"] for r in got] == [1, 2, 3, 2, 2]
    assert [r["floor"] for r in got] == [0, 0, 2, 1, 1]
    assert got == sorted(got, key=lambda r: r["time_utc"])


def test_requests_per_incarnation_sees_the_decode_restart(db: Path) -> None:
    got = rows(db, "requests_per_incarnation")
    decode = [r for r in got if r["engine"] == "decode"]
    assert [r["incarnation"] for r in decode] == [1, 2]
    assert decode[0]["received"] == 3 and decode[1]["received"] == 0
    (prefill,) = [r for r in got if r["engine"] == "prefill"]
    assert prefill["received"] == 4


def test_unrecognised_lines_are_not_parse_errors(db: Path) -> None:
    (u,) = rows(db, "unrecognised_lines")
    assert u["sample"] == "some library warning nobody catalogued"
    (p,) = rows(db, "parse_errors")
    assert p["entry"] == "prefill_batch_0_5_23"


# ------------------------------------------------------------------ formats


SQL = (
    "SELECT bootstrap_room, room, class, dwell_s, abort_race, wd_ranks FROM requests ORDER BY bootstrap_room"
)


def test_csv_round_trips(db: Path) -> None:
    got = list(csv.DictReader(io.StringIO(run(db, SQL, "csv"))))
    assert [int(r["bootstrap_room"]) for r in got] == sorted(synthdb.ROOMS)
    race = next(r for r in got if r["room"] == str(synthdb.ROOM_RACE))
    assert race["abort_race"] == "true"
    fired = next(r for r in got if r["room"] == str(synthdb.ROOM_FIRED))
    assert json.loads(fired["wd_ranks"]) == [0]


def test_json_and_ndjson_keep_64_bit_rooms_exact(db: Path) -> None:
    as_json = json.loads(run(db, SQL, "json"))
    as_ndjson = [json.loads(line) for line in run(db, SQL, "ndjson").splitlines()]
    assert as_json == as_ndjson
    assert [r["bootstrap_room"] for r in as_json] == sorted(synthdb.ROOMS)  # above 2**63 too
    assert as_json[0]["wd_ranks"] is None or isinstance(as_json[0]["wd_ranks"], list)


def test_json_embeds_json_columns_and_empty_results(db: Path) -> None:
    assert json.loads(run(db, "SELECT extra FROM events LIMIT 1", "json")) == [{"extra": {}}]
    assert json.loads(run(db, "SELECT 1 AS x WHERE false", "json")) == []
    assert run(db, "SELECT 1 AS x WHERE false", "ndjson") == ""
    nan = json.loads(run(db, "SELECT 'nan'::DOUBLE AS x, 1.5 AS d, DATE '2026-11-30' AS day", "json"))
    assert nan == [{"x": None, "d": 1.5, "day": "2026-11-30"}]


def test_markdown_is_a_valid_pipe_table(db: Path) -> None:
    out = run(db, "SELECT 'a|b' AS text, 2 AS n UNION ALL SELECT 'line\nbreak', NULL ORDER BY n", "markdown")
    lines = out.splitlines()
    assert lines[0] == "| text | n |"
    assert lines[1] == "|---|---:|"
    assert lines[2] == "| a\\|b | 2 |"
    assert lines[3] == "| line<br>break | NULL |"


def test_table_aligns_and_counts_rows(db: Path) -> None:
    out = run(db, "SELECT room, class FROM requests ORDER BY room", "table")
    lines = out.splitlines()
    assert lines[0].split() == ["room", "class"]
    assert set(lines[1].replace(" ", "")) == {"─"}
    assert lines[-1] == "(4 rows)"
    col = lines[0].index("class")
    classes = {line[col:].strip() for line in lines[2:-1]}
    assert classes == {"completed", "watchdog_fired", "silent_pin", "aborted"}


def test_table_shows_control_characters_instead_of_sending_them(db: Path) -> None:
    out = run(db, "SELECT chr(27) || '[33mwarn' AS m", "table")
    assert "\x1b" not in out and "\\x1b[33mwarn" in out


LONG = "x" * 150 + "END"  # a cell wider than any terminal here
WIDE = f"SELECT 'a' AS host, '{LONG}' AS message, 42 AS n"


def _on_a_terminal(args: list[str], columns: int) -> str:
    """The command's stdout as a terminal `columns` wide shows it (a real pseudo-terminal)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "PDFORENSICS_DEBUG")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdforensics", "sql", *args], stdout=slave, stderr=subprocess.PIPE, env=env
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_table_fits_the_terminal_and_says_how_to_see_whole_cells(db: Path) -> None:
    """Issue 28: cells were cut at 60 characters whatever the terminal's width."""
    for columns in (100, 140):
        lines = _on_a_terminal(["--db", str(db), WIDE], columns).splitlines()
        assert all(len(line) <= columns for line in lines), lines
        assert max(len(line) for line in lines[:3]) == columns  # the room is used, not 60 characters
        assert lines[2].split()[0] == "a" and lines[2].endswith("…  42")
        assert lines[-1] == (
            f"(1 row; cells cut with … to fit {columns} columns: `| less -S` or --format csv shows them whole)"
        )


def test_table_piped_keeps_every_character(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = run(db, WIDE, "table")
    assert LONG in out and "…" not in out
    assert out.splitlines()[-1] == "(1 row)"
    res = _cli("--db", str(db), WIDE)  # the command, its stdout a pipe
    assert res.returncode == 0 and LONG in res.stdout, res.stderr


def test_columns_set_is_the_width_to_fit(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "70")
    lines = run(db, WIDE, "table").splitlines()
    assert max(map(len, lines[:3])) == 70 and "cut with … to fit 70 columns" in lines[-1]
    monkeypatch.setenv("COLUMNS", "1000")  # wide enough: nothing is cut, nothing is said
    assert run(db, WIDE, "table").splitlines()[-1] == "(1 row)"


def test_fit_widths_narrows_the_widest_first_and_never_a_name() -> None:
    assert query.fit_widths(["a", "b"], [5, 6], 20) == [5, 6]  # fits: unchanged
    assert query.fit_widths(["a", "b", "c"], [30, 80, 4], 60) == [26, 26, 4]  # 56 + two gaps of 2
    assert query.fit_widths(["a", "b", "c"], [30, 80, 4], 61) == [27, 26, 4]  # every column used
    assert query.fit_widths(["a", "b", "c"], [20, 80, 4], 60) == [20, 32, 4]  # the widest narrowed
    # the floor: 10 characters, or the column's name when longer; past it the row stays too wide
    assert query.fit_widths(["a", "a_long_column_name"], [50, 50], 20) == [10, 18]


def test_unknown_format_is_a_usage_error(db: Path) -> None:
    with pytest.raises(UsageError, match="table, csv, json, ndjson, markdown"):
        run(db, "SELECT 1", "xml")


# ------------------------------------------------------------------ names, errors, read-only


def test_a_table_or_view_name_runs_as_a_query(db: Path) -> None:
    assert len(rows(db, "requests")) == 4
    assert {r["key"] for r in rows(db, "meta")} == {"schema_version", "views_digest"}


def test_an_unknown_name_lists_the_saved_queries(db: Path) -> None:
    with pytest.raises(UsageError, match=r"no saved query.*stuck_requests"):
        run(db, "stuck")


def test_query_file(db: Path, tmp_path: Path) -> None:
    f = tmp_path / "mine.sql"
    f.write_text("-- mine\nSELECT count(*) AS n FROM lines\n")
    assert rows(db, str(f)) == [{"n": len(synthdb.scenario())}]


def test_syntax_error_gives_duckdb_message_and_position(db: Path) -> None:
    with pytest.raises(query.QueryError) as err:
        run(db, "SELECT room\nFORM requests")
    text = str(err.value)
    assert "Parser Error: syntax error at or near" in text
    assert "LINE 2: FORM requests" in text
    assert "^" in text.splitlines()[-1]


def test_binder_error_names_the_candidates(db: Path) -> None:
    with pytest.raises(query.QueryError, match=r"(?s)Binder Error.*nope.*LINE 1"):
        run(db, "SELECT nope FROM requests")


def test_saved_query_errors_name_the_file(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken.sql").write_text("-- broken on purpose\nSELECT * FROM no_such_table\n")
    monkeypatch.setattr(query, "saved_dir", lambda: tmp_path)
    with pytest.raises(
        query.QueryError, match=r"(?s)saved query broken \(broken.sql\).*Catalog Error.*LINE 2"
    ):
        run(db, "broken")


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO meta VALUES ('x', 'y')",
        "CREATE TABLE t (x INT)",
        "DELETE FROM lines",
        "DROP VIEW requests",
    ],
)
def test_connection_is_read_only(db: Path, sql: str) -> None:
    before = duckdb.connect(str(db), read_only=True)
    n = before.execute("SELECT count(*) FROM lines").fetchone()
    meta = before.execute("SELECT * FROM meta ORDER BY key").fetchall()
    before.close()
    with pytest.raises(query.QueryError, match="read-only"):
        run(db, sql)
    after = duckdb.connect(str(db), read_only=True)
    assert after.execute("SELECT count(*) FROM lines").fetchone() == n
    assert after.execute("SELECT * FROM meta ORDER BY key").fetchall() == meta
    after.close()


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT message FROM lines) TO '{out}/copy.csv'",
        "COPY lines TO '{out}/table.parquet'",
        "EXPORT DATABASE '{out}/export'",
        "ATTACH '{out}/other.duckdb' AS other",
        "SELECT * FROM read_text('{secret}')",
        "SELECT * FROM read_csv('{secret}')",
        "SELECT * FROM glob('{out}/*')",
        "INSTALL httpfs",
        "SELECT 1; COPY (SELECT 1) TO '{out}/second.csv'",
    ],
)
def test_a_query_reaches_no_file_beyond_the_database(db: Path, tmp_path: Path, sql: str) -> None:
    """Issue 29, item 8: DuckDB's external access is off for the user's query (the views and the
    kept judgements are in place before), so nothing is written or read outside the database."""
    secret = tmp_path / "secret.txt"
    secret.write_text("password\n")
    with pytest.raises(query.QueryError, match="reads the database only") as err:
        run(db, sql.format(out=tmp_path, secret=secret))
    assert "password" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.txt"]


@pytest.mark.parametrize("sql", ["SET enable_external_access = true", "SET lock_configuration = false"])
def test_a_query_cannot_turn_the_confinement_off(db: Path, sql: str) -> None:
    with pytest.raises(query.QueryError, match="reads the database only"):
        run(db, f"{sql}; SELECT * FROM read_text('/etc/hostname')")


def test_a_confined_query_still_reads_the_views_and_duckdbs_functions(db: Path) -> None:
    got = rows(
        db,
        "SELECT (SELECT count(*) FROM requests) > 0 AS r, json_extract('{\"a\": 2}', '$.a')::INT AS j, "
        "timezone('Europe/Berlin', TIMESTAMPTZ '2026-01-01 00:00:00+00') AS berlin",
    )
    assert got == [{"r": True, "j": 2, "berlin": "2026-01-01T01:00:00"}]


def test_options_become_session_variables(db: Path) -> None:
    got = rows(db, "SELECT getvariable('pdf_watchdog_timeout_s') AS t, getvariable('pdf_grace_s') AS g")
    assert got == [{"t": 60.0, "g": 10.0}]
    # The classification follows them: with a 300 s timeout the 189 s hold is no silent pin yet.
    classes = {r["room"]: r["class"] for r in rows(db, "SELECT room, class FROM requests", OPTS)}
    assert classes[str(synthdb.ROOM_PINNED)] == "silent_pin"
    longer = VerdictOptions(watchdog_timeout_s=300)
    classes = {r["room"]: r["class"] for r in rows(db, "SELECT room, class FROM requests", longer)}
    assert classes[str(synthdb.ROOM_PINNED)] != "silent_pin"


def test_several_statements_return_the_last_result(db: Path) -> None:
    assert rows(db, "SET VARIABLE x = 41; SELECT getvariable('x') + 1 AS y") == [{"y": 42}]


# ------------------------------------------------------------------ the command


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PDFORENSICS_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "pdforensics", "sql", *args], capture_output=True, text=True, env=env
    )


def test_cli_bad_query_is_one_message_not_a_traceback(db: Path) -> None:
    res = _cli("--db", str(db), "SELECT * FORM lines")
    assert res.returncode == 1
    assert res.stderr.startswith("pdforensics: query failed: Parser Error")
    assert "LINE 1: SELECT * FORM lines" in res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout == ""


def test_cli_saved_query_and_formats(db: Path) -> None:
    res = _cli("--db", str(db), "--watchdog-timeout", "60", "--format", "ndjson", "watchdog_firings")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["room"] == str(synthdb.ROOM_FIRED)
    listing = _cli("--list")
    assert listing.returncode == 0
    assert "stuck_requests" in listing.stdout


def test_cli_missing_database(tmp_path: Path) -> None:
    res = _cli("--db", str(tmp_path / "none.duckdb"), "SELECT 1")
    assert res.returncode == 4
    assert "run `pdforensics ingest` first" in res.stderr


# ------------------------------------------------------------------ SET VARIABLE in the query (issue 16)


def test_a_leading_set_variable_counts_like_the_option(db: Path) -> None:
    # The views are computed once per answer before the query runs: a SET VARIABLE in the query
    # text used to be applied after that, and silently ignored.
    sql = "SET VARIABLE pdf_watchdog_timeout_s = 60; SELECT room, class FROM requests"
    classes = {r["room"]: r["class"] for r in rows(db, sql, VerdictOptions())}
    assert classes[str(synthdb.ROOM_PINNED)] == "silent_pin"
    sql = "SET VARIABLE pdf_watchdog_timeout_s = 300; SELECT room, class FROM requests"
    classes = {r["room"]: r["class"] for r in rows(db, sql, OPTS)}
    assert classes[str(synthdb.ROOM_PINNED)] != "silent_pin"


def test_a_set_variable_after_a_query_is_refused_with_the_option(db: Path) -> None:
    with pytest.raises(UsageError, match=r"put it before the first query, or use --grace"):
        run(db, "SELECT 1; SET VARIABLE pdf_grace_s = 500; SELECT * FROM pins")


def test_errors_name_the_view_not_its_temporary_shadow(db: Path) -> None:
    with pytest.raises(query.QueryError) as err:
        run(db, "SELECT * FROM requests, requests")
    assert "temp" not in str(err.value) and '"requests"' in str(err.value)
