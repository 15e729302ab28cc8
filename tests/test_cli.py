"""The CLI contract: instant --help, one-line errors with documented exit codes, never a traceback."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PDFORENSICS_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "pdforensics", *args], capture_output=True, text=True, cwd=cwd, env=full_env
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]


def test_help_lists_commands_without_importing_plotly() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for cmd in ("ingest", "verdict", "timeline", "report", "sql", "export", "simulate", "demo"):
        assert cmd in proc.stdout
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pdforensics.cli; print('plotly' in sys.modules, 'duckdb' in sys.modules)",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.split() == ["False", "False"]


def test_bad_time_window_is_usage_error(tmp_path: Path) -> None:
    proc = run("ingest", "--db", str(tmp_path / "a.duckdb"), "--since", "yesterday-ish", "--file", "x.log")
    assert_one_line_error(proc, 2, "yesterday-ish")


def test_missing_database_for_verdict(tmp_path: Path) -> None:
    proc = run("verdict", "--db", str(tmp_path / "none.duckdb"))
    assert_one_line_error(proc, 4, "run `pdforensics ingest` first")


def test_missing_input_file(tmp_path: Path) -> None:
    proc = run("ingest", "--db", str(tmp_path / "a.duckdb"), "--file", str(tmp_path / "nope.log"))
    assert_one_line_error(proc, 3, "nope.log")


def test_db_env_variable_is_honoured(tmp_path: Path) -> None:
    proc = run("verdict", env={"PDFORENSICS_DB": str(tmp_path / "from-env.duckdb")})
    assert_one_line_error(proc, 4, "from-env.duckdb")


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02garbage\xff" * 1000])
def test_empty_or_binary_files_never_traceback(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "input.log"
    f.write_bytes(content)
    proc = run("ingest", "--db", str(tmp_path / "a.duckdb"), "--file", str(f), "--quiet")
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 3), proc.stderr


def test_an_empty_ingest_says_so_and_the_verdict_names_no_window(tmp_path: Path) -> None:
    # "Found nothing" must not read like "nothing happened": the operator is told what to widen.
    f = tmp_path / "empty.log"
    f.write_bytes(b"")
    db = str(tmp_path / "a.duckdb")
    proc = run("ingest", "--db", db, "--file", str(f))
    assert proc.returncode == 0, proc.stderr
    assert "nothing was read" in proc.stdout
    verdict = run("verdict", "--db", db)
    assert verdict.returncode == 0, verdict.stderr
    assert "window:  none (no line in the database" in verdict.stdout
    assert "inconclusive" in verdict.stdout.splitlines()[0]


# ------------------------------------------------------------------ the operator's 3 a.m. (issue 16)
# Each behaviour is checked twice: through typer's CliRunner (the app object) and through the
# installed `pdforensics` command in a subprocess (what the operator types).

INSTALLED = Path(sys.executable).parent / "pdforensics"


def installed(
    *args: str, cwd: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PDFORENSICS_DEBUG", None)
    full_env.pop("COLUMNS", None)
    return subprocess.run([str(INSTALLED), *args], capture_output=True, text=True, cwd=cwd, env=full_env)


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def both(*args: str) -> list[Outcome]:
    """The same command line through CliRunner and through the installed command."""
    from typer.testing import CliRunner

    from pdforensics.cli import app

    res = CliRunner().invoke(app, list(args), env={"PDFORENSICS_DEBUG": ""})
    proc = installed(*args)
    return [
        Outcome(res.exit_code, res.stdout, res.stderr),
        Outcome(proc.returncode, proc.stdout, proc.stderr),
    ]


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture(scope="module")
def incident_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's incident, ingested: 18 requests, 3 in flight, 2 lost."""
    base = tmp_path_factory.mktemp("incident")
    proc = installed(
        "simulate", "decode_restart_old_build", "--out", str(base / "inc"), "--now", "@1764410000"
    )
    assert proc.returncode == 0, proc.stderr
    db = base / "a.duckdb"
    proc = installed("ingest", "--db", str(db), "--file", str(base / "inc" / "journal.export"), "-q")
    assert proc.returncode == 0, proc.stderr
    return db


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["ingest", "--sinc", "5"], "pdforensics: no such option --sinc (did you mean --since?)"),
        (["ingest", "--quiet", "true"], "pdforensics: got unexpected extra argument(s) (true)"),
        (["export"], "pdforensics: missing option '--format'"),
        (["nope"], "pdforensics: no such command 'nope'"),
        (["verdit"], "pdforensics: no such command 'verdit' (did you mean 'verdict'?); see `pdforensics -h`"),
        (
            ["ingest", "--file", "x.log", "--tz", "Asia/Shangai"],
            "pdforensics: --tz: unknown time zone 'Asia/Shangai' (did you mean Asia/Shanghai?)",
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], line: str) -> None:
    for out in both(*args):
        assert out.code == 2, out
        assert one_line(out.stderr).startswith(line), out.stderr
        assert "╭" not in out.stderr and "Try '" not in out.stderr


def _runs(db: Path) -> list[tuple[int, str]]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT ingest_id, status FROM ingests ORDER BY ingest_id").fetchall()
    finally:
        con.close()


TZ_COMMANDS = ("ingest", "watch", "drill")


def test_every_command_taking_tz_is_tested_below() -> None:
    import typer

    from pdforensics.cli import app

    group = typer.main.get_command(app)
    taking = {n for n, c in group.commands.items() if any(p.name == "tz" for p in c.params)}  # type: ignore[attr-defined]
    assert taking == set(TZ_COMMANDS)


@pytest.mark.parametrize("command", TZ_COMMANDS)
def test_a_bad_tz_is_a_usage_error_before_the_database_is_opened(tmp_path: Path, command: str) -> None:
    """Issue 28 item 5: --tz is checked as the command line is parsed: exit 2, one line naming the
    closest zone, and no run added to the database (a zone met mid-ingest left an `interrupted` one)."""
    log = tmp_path / "prefill.log"
    log.write_text("[2026-11-29 10:00:00] Prefill batch, #new-seq: 1, #inflight-req: 0\n")
    db = tmp_path / "a.duckdb"
    assert run("ingest", "--db", str(db), "--file", str(log), "-q").returncode == 0
    once = ["--once"] if command == "watch" else []
    proc = run(command, "--db", str(db), "--file", str(log), "--tz", "Asia/Shangai", *once)
    assert_one_line_error(proc, 2, "--tz: unknown time zone 'Asia/Shangai' (did you mean Asia/Shanghai?)")
    assert _runs(db) == [(1, "complete")]


@pytest.mark.parametrize("zone", ["local", "Z", "utc"])
def test_tz_local_and_z_are_read_by_every_reader(tmp_path: Path, zone: str) -> None:
    """`--tz local` passed the check and then failed the parser (exit 70, an `interrupted` run);
    `Z`, which --since reads as UTC, was refused with 'did you mean NZ?'."""
    log = tmp_path / "prefill.log"
    log.write_text("[2026-11-29 10:00:00] Prefill batch, #new-seq: 1, #inflight-req: 0\n")
    db = tmp_path / "a.duckdb"
    proc = run("ingest", "--db", str(db), "--file", str(log), "--tz", zone, "--since", "2026-11-29", "-q")
    assert proc.returncode == 0, proc.stderr
    assert _runs(db) == [(1, "complete")]


def test_dash_h_is_help_and_version_prints_the_version() -> None:
    from pdforensics import __version__

    for out in both("-h"):
        assert out.code == 0 and "Commands:" in out.stdout
    for out in both("verdict", "-h"):
        assert out.code == 0 and "--check" in out.stdout
    for out in both("--version"):
        assert out.code == 0 and out.stdout.strip() == f"pdforensics {__version__}"


def test_a_run_builds_only_its_command_and_it_is_the_whole_apps() -> None:
    """`main` gives typer the app with the one command argv names (cli.app_for): the same command,
    help for help, and the whole app for anything else (no command, -h, a misspelt one)."""
    import typer

    from pdforensics.cli import app, app_for

    whole = typer.main.get_command(app)
    for name in COMMANDS:
        lean = typer.main.get_command(app_for([name, "--db", "x"]))
        assert list(lean.commands) == [name]  # type: ignore[attr-defined]
        mine, theirs = lean.commands[name], whole.commands[name]  # type: ignore[attr-defined]
        ctx = typer.Context(mine, info_name=name)
        assert mine.get_help(ctx) == theirs.get_help(typer.Context(theirs, info_name=name))
        assert [p.opts for p in mine.params] == [p.opts for p in theirs.params]
    for argv in ([], ["-h"], ["--version"], ["verdikt"], ["--db", "verdict"]):
        assert app_for(argv) is app
    assert set(whole.commands) == set(COMMANDS) | {"compare"}  # type: ignore[attr-defined]


def _option_help(command: str) -> dict[str, str]:
    """Each option's help record of a command, as click renders it."""
    import typer

    from pdforensics.cli import app

    group = typer.main.get_command(app)
    cmd = group.commands[command]  # type: ignore[attr-defined]
    ctx = cmd.make_context(command, [], resilient_parsing=True)
    return {
        p.opts[0]: " ".join(p.get_help_record(ctx) or ("", "")) for p in cmd.params if p.opts[0] != "--help"
    }


COMMANDS = (
    "ingest",
    "verdict",
    "timeline",
    "simulate",
    "report",
    "sql",
    "export",
    "demo",
    "catalog",
    "watch",
    "drill",
)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_no_bool_every_default_and_ends_with_an_example(command: str) -> None:
    import typer

    from pdforensics.cli import app

    group = typer.main.get_command(app)
    cmd = group.commands[command]  # type: ignore[attr-defined]
    for opt, text in _option_help(command).items():
        param = next(p for p in cmd.params if p.opts[0] == opt)
        if param.param_type_name != "option":
            continue
        assert "<bool>" not in text and "<" not in text.split("  ")[0], text  # a metavar, never <type>
        if not getattr(param, "is_flag", False):
            assert "default:" in text or "[required]" in text, f"{command} {opt}: {text}"
    for out in both(command, "--help"):
        assert out.code == 0
        tail = [line.strip() for line in out.stdout.splitlines() if line.strip()][-2:]
        assert tail[0] == "Example:" and tail[1].startswith(f"pdforensics {command}"), out.stdout


def test_none_defaults_say_what_they_mean_and_check_names_3_inconclusive() -> None:
    ingest = _option_help("ingest")
    assert "default: the whole journal" in ingest["--since"]
    assert "else 300 s" in ingest["--watchdog-timeout"]
    assert "3 inconclusive" in _option_help("verdict")["--check"]


def test_piped_output_is_not_wrapped_at_80_columns(tmp_path: Path) -> None:
    host = "h" + "-very-long-host-name" * 6  # 121 characters: rich folded it at 80 columns
    log = tmp_path / "prefill.log"
    log.write_text("[2026-11-29 10:00:00] Prefill batch, #new-seq: 1, #inflight-req: 0\n")
    proc = installed("ingest", "--db", str(tmp_path / "a.duckdb"), "--file", str(log), "--host", host)
    assert proc.returncode == 0, proc.stderr
    assert host in proc.stdout, proc.stdout
    assert any(line.startswith("read 1 records") for line in proc.stdout.splitlines()), proc.stdout


def test_a_unit_glob_matching_nothing_lists_the_units_and_fails(tmp_path: Path) -> None:
    export = REPO / "fixtures" / "decode_restart_old_build" / "journal.export"
    for i, runner in enumerate((_cli_runner, installed)):
        out = runner(
            "ingest", "--db", str(tmp_path / f"{i}.duckdb"), "--file", str(export), "--unit", "sglan-*"
        )
        assert out_code(out) == 1, out
        text = out_stdout(out)
        assert "matched no unit" in text and "sglang-dsv4-prefill.service" in text, text
        # "read" counts every record read: not "read 0 records ... all 432 records read"
        assert "read 432 records" in text and "stored 0, already stored 0, outside selection 432," in text, (
            text
        )


def _cli_runner(*args: str) -> Outcome:
    from typer.testing import CliRunner

    from pdforensics.cli import app

    res = CliRunner().invoke(app, list(args))
    return Outcome(res.exit_code, res.stdout, res.stderr)


def out_code(out: Outcome | subprocess.CompletedProcess[str]) -> int:
    return out.code if isinstance(out, Outcome) else out.returncode


def out_stdout(out: Outcome | subprocess.CompletedProcess[str]) -> str:
    return out.stdout


def test_report_into_a_missing_folder_is_one_line_exit_2(incident_db: Path, tmp_path: Path) -> None:
    for out in both("report", "--db", str(incident_db), "--out", str(tmp_path / "missing" / "r.html")):
        assert out.code == 2, out
        assert "folder" in one_line(out.stderr) and "does not exist" in out.stderr


CHECK_LINE = re.compile(r"^(OK|WARNING|CRITICAL|UNKNOWN) - [^|\n]+( \| (\w+=\d+ ?)+)?$")


def test_verdict_check_is_one_plugin_line(incident_db: Path) -> None:
    for out in both("verdict", "--db", str(incident_db), "--check"):
        line = one_line(out.stdout)
        assert CHECK_LINE.match(line), line
        status = line.split(" ", 1)[0]
        assert out.code == ("OK", "WARNING", "CRITICAL", "UNKNOWN").index(status)
        assert "requests=18" in line
        assert "evidence level" not in line.split(" | ")[0], line  # the reason that decides, not the setting


def test_verdict_check_maps_its_own_failures_to_unknown(incident_db: Path, tmp_path: Path) -> None:
    for out in both("verdict", "--db", str(tmp_path / "none.duckdb"), "--check"):
        assert out.code == 3 and one_line(out.stdout).startswith("UNKNOWN - pdforensics: no database"), out
    for out in both("verdict", "--db", str(incident_db), "--check", "--since", "soon-ish"):
        assert out.code == 3 and one_line(out.stdout).startswith("UNKNOWN - "), out
    import duckdb

    holder = duckdb.connect(str(incident_db))  # an ingest holding the file
    try:
        proc = installed("verdict", "--db", str(incident_db), "--check")
    finally:
        holder.close()
    assert proc.returncode == 3 and one_line(proc.stdout).startswith("UNKNOWN - pdforensics: "), proc


STATUSES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")


def test_ingest_check_and_json(tmp_path: Path) -> None:
    export = str(REPO / "fixtures" / "decode_restart_old_build" / "journal.export")
    for out in both("ingest", "--db", str(tmp_path / "c.duckdb"), "--file", export, "--check"):
        line = one_line(out.stdout)
        assert CHECK_LINE.match(line), line
        assert out.code == STATUSES.index(line.split()[0]), line
    for out in both("ingest", "--db", str(tmp_path / "j.duckdb"), "--file", export, "--json"):
        assert out.code == 0, out
        doc = json.loads(out.stdout)
        assert doc["ingest"]["read"] == 432 and doc["verdict"]["counts"]["requests"] == 18


def _rids(db: Path) -> list[str]:
    proc = installed(
        "sql",
        "--db",
        str(db),
        "--format",
        "csv",
        "SELECT prefill_rid FROM requests WHERE prefill_rid IS NOT NULL ORDER BY 1",
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()[1:]


def test_timeline_takes_a_unique_prefix_and_lists_an_ambiguous_one(incident_db: Path) -> None:
    rids = _rids(incident_db)
    unique = next(r[:8] for r in rids if sum(o.startswith(r[:8]) for o in rids) == 1)
    for out in both("timeline", "--db", str(incident_db), unique, "--json"):
        assert out.code == 0, out
        assert json.loads(out.stdout)["request"]["prefill_rid"].startswith(unique)
    first = rids[0][0]
    for out in both("timeline", "--db", str(incident_db), first):
        assert out.code == 2, out
        line = one_line(out.stderr)
        assert "start of several requests" in line and line.count(", ") >= 1, line


def test_export_takes_since_and_until(incident_db: Path, tmp_path: Path) -> None:
    whole, early = tmp_path / "whole.json", tmp_path / "early.json"
    for path, extra in ((whole, []), (early, ["--until", "@1764409000"])):
        proc = installed(
            "export", "--db", str(incident_db), "--format", "perfetto", "--out", str(path), *extra
        )
        assert proc.returncode == 0, proc.stderr
    assert len(json.loads(early.read_text())["traceEvents"]) < len(
        json.loads(whole.read_text())["traceEvents"]
    )


def test_simulate_writes_plain_logs_and_prints_the_next_command(tmp_path: Path) -> None:
    out = tmp_path / "inc"
    for runner in (_cli_runner, installed):
        res = runner("simulate", "healthy", "--out", str(out))
        assert out_code(res) == 0, res
        assert sorted(p.name for p in (out / "plain").glob("*.log")), list(out.iterdir())
        nxt = [line for line in res.stdout.splitlines() if line.startswith("next:")]
        assert nxt and "pdforensics ingest" in nxt[0]
    command = shlex.split(nxt[0].removeprefix("next:"))
    proc = subprocess.run([str(INSTALLED), *command[1:], "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("scenario", ["two_incidents", "window_starts_after_armed", "journald_suppression"])
def test_simulate_hints_every_option_the_expected_verdict_needs(tmp_path: Path, scenario: str) -> None:
    """The commands `simulate` prints after `next:`, run in order, give expected.json's verdict:
    its ingest windows, the timeout the operator knows, the judged window (issue 28)."""
    out = tmp_path / "inc"
    res = _cli_runner("simulate", scenario, "--out", str(out), "--now", "2026-11-29T12:10:00Z")
    assert res.code == 0, res
    hints = [
        line.split(None, 1)[1] for line in res.stdout.splitlines() if line.startswith(("next:", "then:"))
    ]
    assert hints[-1].startswith("pdforensics verdict ")
    for command in hints[:-1]:
        assert _cli_runner(*shlex.split(command)[1:], "-q").code == 0, command
    judged = _cli_runner(*shlex.split(hints[-1])[1:], "--json")
    assert json.loads(judged.stdout)["verdict"] == json.loads((out / "expected.json").read_text())["verdict"]


def test_a_whole_journal_ingest_says_what_it_is_about_to_read(tmp_path: Path) -> None:
    from conftest import export_to_journal

    export = REPO / "fixtures" / "decode_restart_old_build" / "journal.export"
    journal = export_to_journal(export.read_bytes(), tmp_path / "system.journal")
    proc = installed("ingest", "--db", str(tmp_path / "a.duckdb"), "--journal-file", str(journal))
    assert proc.returncode == 0, proc.stderr
    line = one_line(proc.stderr)
    assert line.startswith("pdforensics: no --since: reading the whole journal, 432 entries in 1 file ("), (
        line
    )
    assert "from 2026-" in line and "--since 1h" in line
    narrowed = installed(
        "ingest", "--db", str(tmp_path / "b.duckdb"), "--journal-file", str(journal), "--since", "1d"
    )
    assert "reading the whole journal" not in narrowed.stderr


def test_input_positions_follow_the_kernels_read_offsets(tmp_path: Path) -> None:
    from pdforensics.progress import InputPositions

    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"x" * 10_000)
    b.write_bytes(b"y" * 5_000)
    pos = InputPositions([a, b])
    assert (pos.total, pos.read_bytes()) == (15_000, 0)
    fd = os.open(a, os.O_RDONLY)
    try:
        os.read(fd, 4_096)
        assert pos.read_bytes() == 4_096  # an open file: how far it was read
    finally:
        os.close(fd)
    assert pos.read_bytes() == 10_000  # seen open, now closed: read whole


def test_ingest_on_a_terminal_shows_a_progress_bar_with_a_total(tmp_path: Path) -> None:
    log = tmp_path / "sglang-prefill.log"
    line = "[2026-11-29 10:00:00] Prefill batch, #new-seq: 1, #new-token: 2, #inflight-req: 0\n"
    log.write_text(line * 2_000)
    master, slave = os.openpty()  # stderr is a terminal: the bar is drawn
    proc = subprocess.Popen([str(INSTALLED), "ingest", "--db", str(tmp_path / "a.duckdb"), "--file", str(log)],
                            stdout=subprocess.PIPE, stderr=slave, env={**os.environ, "COLUMNS": "160"})  # fmt: skip
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65_536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode(errors="replace"))
    from rich.filesize import decimal

    size = decimal(log.stat().st_size)  # "164.0 kB": the total is there from the first frame
    assert re.search(rf"ingesting 0 records .*read 0\.0/{re.escape(size)}", text), text[-500:]
    done = rf"ingesting 2,000 records .*read {re.escape(size.split()[0])}/{re.escape(size)}"
    assert re.search(done, text), text[-500:]


def test_database_errors_name_the_db_path_not_a_temporary_one(tmp_path: Path) -> None:
    # /proc refuses new files: DuckDB's error named open_db's `.x.duckdb.creating-PID-N` temp file
    export = str(REPO / "fixtures" / "decode_restart_old_build" / "journal.export")
    for out in both("ingest", "--db", "/proc/x.duckdb", "--file", export, "-q"):
        assert out.code == 4, out
        line = one_line(out.stderr)
        assert "creating" not in line and '"/proc/x.duckdb"' in line, line


def test_control_sequences_from_log_lines_never_reach_the_terminal(tmp_path: Path) -> None:
    """Issue 29, item 7: an OSC 52 (writes the clipboard) and a CSI 2J (clears the screen) in a
    request's rid reach `verdict` and `timeline` as visible `\\x1b`, never as the bytes."""
    from pdforensics.paths import fixtures_dir

    src = fixtures_dir() / "healthy" / "plain" / "dsv4-node-01-sglang-dsv4-prefill.log"
    lines = src.read_text().splitlines(keepends=True)
    k = next(
        i for i, ln in enumerate(lines) if "Receive: obj=GenerateReqInput(rid='" in ln and "HEALTH" not in ln
    )
    rid = re.search(r"rid='([^']+)'", lines[k]).group(1)
    evil = "evil\x1b]52;c;aGk=\x07\x1b[2J"
    lines.insert(k + 1, lines[k].replace(rid, evil).replace("bootstrap_room=", "bootstrap_room=1"))
    log = tmp_path / "dsv4-node-01-sglang-dsv4-prefill.log"
    log.write_text("".join(lines))
    db = str(tmp_path / "evil.duckdb")
    assert run("ingest", "--db", db, "--file", str(log), "--tz", "UTC", "-q").returncode == 0
    for args in (["verdict", "--watchdog-timeout", "60"], ["timeline", "evil"]):
        proc = run(*args, "--db", db, env={"COLUMNS": "400"})
        assert proc.returncode in (0, 1, 2, 3), proc.stderr
        assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout, args
        assert "evil\\x1b]52;c;aGk=\\x07" in proc.stdout, (args, proc.stdout[-2000:])


@pytest.mark.parametrize(
    ("option", "special", "needle"),
    [
        ("--journal-file", "fifo", "is not a regular file (a pipe or a device?); pass a .journal file"),
        ("--catalog", "fifo", "catalog file {p} is not a regular file"),
        ("--prefixes", "fifo", "prefix file {p} is not a regular file"),
        ("--catalog", "/dev/zero", "catalog file /dev/zero is not a regular file"),
        ("--prefixes", "/dev/zero", "prefix file /dev/zero is not a regular file"),
        ("--catalog", "big", "catalog file {p} is larger than 4 MiB"),
    ],
)
def test_a_pipe_a_device_or_a_huge_file_is_refused_in_one_line(
    tmp_path: Path, option: str, special: str, needle: str
) -> None:
    """Issue 29, item 4: a FIFO blocked the read forever, /dev/zero filled memory. (The timeout
    only keeps a regression from hanging the suite; nothing here depends on how fast it runs.)"""
    if special == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    elif special == "big":
        path = tmp_path / "big.toml"
        path.write_bytes(b"# padding\n" * (500 * 1024))
    else:
        path = Path(special)
    log = tmp_path / "a.log"
    log.write_text("[2026-11-29 12:00:00] Prefill batch. #new-seq: 1\n")
    extra = [] if option == "--journal-file" else ["--file", str(log)]
    proc = subprocess.run(
        [sys.executable, "-m", "pdforensics", "ingest", "--db", str(tmp_path / "x.duckdb"), option, str(path), *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == (3 if option == "--journal-file" else 2), proc.stderr
    assert_one_line_error(proc, proc.returncode, needle.format(p=path))


# ------------------------------------------------------------------ what an operator reads (issue 28, item 8)


def test_no_local_journal_is_said_as_journalctl_says_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ingest --since 6min` on a host that keeps no journal: one line, exit 3, nothing created
    (it said "nothing was read" and exit 0, as if the window had been empty)."""
    from typer.testing import CliRunner

    from pdforensics import api
    from pdforensics.cli import app

    var, run_dir = tmp_path / "var-log-journal", tmp_path / "run-log-journal"
    (var / "0123456789abcdef").mkdir(parents=True)  # journald's machine-id folder, no file in it
    monkeypatch.setattr(api, "LOCAL_JOURNAL_DIRS", (var, run_dir))
    db = tmp_path / "a.duckdb"
    res = CliRunner().invoke(
        app, ["ingest", "--since", "6min", "--db", str(db)], env={"PDFORENSICS_DEBUG": ""}
    )
    assert res.exit_code == 3, res.output
    assert res.stderr.splitlines() == [
        f"pdforensics: no journal files were found in {var} or {run_dir}: no local journal to read; "
        "read a collection with -D DIR, a file with --journal-file or a log with --file"
    ]
    assert res.stdout == "" and not db.exists()
    check = CliRunner().invoke(app, ["ingest", "--since", "6min", "--db", str(db), "--check"])
    assert check.exit_code == 3 and check.stdout.startswith(
        "UNKNOWN - pdforensics: no journal files were found"
    )
    (var / "0123456789abcdef" / "system.journal").touch()  # a journal file there: the local journal is read
    assert api.local_journal().label == "journal"


def test_ingest_notes_say_each_thing_once_per_source(tmp_path: Path) -> None:
    """A fleet's export holds 16 host/units; 9 of them have lines with no known prefix. The note
    was printed 9 times, each naming the same file: once now, with the host/units named."""
    export = REPO / "fixtures" / "fleet_16_hosts" / "journal.export"
    proc = run("ingest", "--db", str(tmp_path / "a.duckdb"), "--file", str(export))
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if "no prefix I know" in line]
    assert notes == [
        f"  36 of 2,523 lines of {export} (9 of its 16 host/units: d-node-03/sglang-dsv4-decode.service, "
        "p-node-01/sglang-dsv4-prefill.service, p-node-02/sglang-dsv4-prefill.service, …) have no prefix "
        "I know and no catalog entry (`pdforensics sql unrecognised_lines` shows them)"
    ]
    plain = REPO / "fixtures" / "fleet_16_hosts" / "plain" / "p-node-01-sglang-dsv4-prefill.log"
    proc = run("ingest", "--db", str(tmp_path / "b.duckdb"), "--file", str(plain))
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if "no prefix I know" in line] == [
        f"  1 of 209 lines of {plain} have no prefix I know and no catalog entry "
        "(`pdforensics sql unrecognised_lines` shows them)"
    ]


def test_the_summary_names_the_reader_that_read_the_journal_files(tmp_path: Path) -> None:
    """It said "read N records with python-systemd", then "journal files: 1 read directly"."""
    from conftest import export_to_journal

    from pdforensics.sources.journal import python_systemd_available

    if not python_systemd_available():
        pytest.skip("python-systemd not installed: the journal files are read by journalctl")
    journal = export_to_journal(
        (REPO / "fixtures" / "healthy" / "journal.export").read_bytes(), tmp_path / "a.journal"
    )
    proc = run("ingest", "--db", str(tmp_path / "a.duckdb"), "--journal-file", str(journal))
    assert proc.returncode == 0, proc.stderr
    read = next(line for line in proc.stdout.splitlines() if line.startswith("read "))
    assert read.startswith("read 280 records with the direct journal reader in "), read
    assert "  journal files: 1 read directly" in proc.stdout.splitlines()
    forced = run(
        "ingest", "--db", str(tmp_path / "b.duckdb"), "--journal-file", str(journal),
        env={"PDFORENSICS_JOURNAL_READER": "python-systemd"},
    )  # fmt: skip
    assert " records with python-systemd in " in forced.stdout, forced.stdout + forced.stderr


# The --help defaults of the window and the timeout, as the code decides them (queries/views:
# `time_window`, `context`'s timeout_s) and as the README says them.
WINDOWED = ("verdict", "report", "export")
TIMED = ("ingest", "verdict", "timeline", "report", "sql", "export", "compare", "watch")


def test_window_and_timeout_help_say_what_the_code_does_and_the_readme_agrees() -> None:
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    for command in WINDOWED:
        helps = _option_help(command)
        assert "[default: the last ingest's window" in helps["--since"], (command, helps["--since"])
        assert "[default: where the last ingest's reading ended" in helps["--until"], (
            command,
            helps["--until"],
        )
    for command in TIMED:
        text = _option_help(command)["--watchdog-timeout"]
        at = [text.find(s) for s in ("armed line", "environment", "stalled >Ns", "else 300 s")]
        assert -1 not in at and at == sorted(at), (command, text)  # the order the views take them in
    ingest = _option_help("ingest")
    assert "[default: the whole journal" in ingest["--since"] and "[default: the end" in ingest["--until"]
    assert "now]" not in ingest["--until"]
    for said in ("judge the last ingest's window", "The window ends where the reading ended",
                 "else from the armed line", "else the live prefill unit's environment", "else 300 s"):  # fmt: skip
        assert said in readme, said
    views = " ".join(
        (REPO / "queries" / "views" / name).read_text(encoding="utf-8")
        for name in ("00_params.sql", "01_context.sql")
    )
    # the order the help states is the views': operator, armed line, unit environment, firings, ..., default
    assert "coalesce(w.operator_timeout_s, armed.timeout_s, w.env_timeout_s, fired.timeout_s" in views


def test_the_default_window_is_the_last_ingests_and_the_timeout_the_armed_lines(tmp_path: Path) -> None:
    """What the help texts above promise, on an incident with an armed line (60 s) and no firing:
    ingested two hours after another incident (with no armed line; its journal cursors are other ones),
    read with --since/--until, judged with no option."""
    import datetime as dt

    import duckdb

    db = tmp_path / "w.duckdb"
    earlier = REPO / "fixtures" / "decode_restart_old_build" / "journal.export"  # no armed line; ends 12:10
    assert run("simulate", "watchdog_armed_never_fires", "--out", str(tmp_path / "later"),
               "--now", "2026-11-29T14:10:00Z").returncode == 0  # fmt: skip
    since, until = "2026-11-29T14:06:00Z", "2026-11-29T14:09:00Z"
    for args in (["--file", str(earlier)], ["--file", str(tmp_path / "later" / "journal.export"),
                                            "--since", since, "--until", until]):  # fmt: skip
        proc = run("ingest", "--db", str(db), *args, "-q")
        assert proc.returncode == 0, proc.stderr
    out = run("verdict", "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["window_basis"] == "last ingest" and got["window"]["start"] == since
    con = duckdb.connect(str(db), read_only=True)
    try:
        (last_us,) = con.execute("SELECT max(ts_us) FROM lines").fetchone()  # type: ignore[misc]
    finally:
        con.close()
    end = dt.datetime.fromisoformat(got["window"]["end"])
    last_line = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=last_us)
    # where the reading ended: at or after the last line read, never past the ingest's --until
    assert last_line <= end <= dt.datetime.fromisoformat(until)
    assert (got["watchdog"]["timeout_s"], got["watchdog"]["timeout_source"]) == (60.0, "armed line")
