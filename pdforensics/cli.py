"""The `pdforensics` command: a thin typer layer over the library.

Each command parses options, calls one library function and prints. Errors
from the library (`PdfError`) become one line on stderr and the exit code of
their class; heavy imports (plotly, the report) happen inside the commands
that need them so `--help` stays instant.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from pdforensics.errors import PdfError, UsageError, install_stop_signals, interrupt_exit_code, is_interrupt

app = typer.Typer(
    name="pdforensics",
    help="Was anything stuck on your SGLang PD deployment, and did the inflight watchdog fire?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

DbOpt = Annotated[
    Path,
    typer.Option(
        "--db",
        envvar="PDFORENSICS_DB",
        help="DuckDB file (env PDFORENSICS_DB).",
        show_default=True,
        readable=False,  # our own check says what to do about it, in one line (click's is a box)
    ),
]
SinceOpt = Annotated[
    str | None,
    typer.Option(help="Window start: 6min, 2h, '6 min ago', -6min, '2026-11-29 10:00:00', ISO 8601, @EPOCH."),
]
UntilOpt = Annotated[str | None, typer.Option(help="Window end, same forms as --since (default: now).")]
TimeoutOpt = Annotated[
    float | None,
    typer.Option("--watchdog-timeout", help="The watchdog timeout in seconds, if the logs do not say it."),
]
WatchdogDialectOpt = Annotated[
    str | None,
    typer.Option(
        "--watchdog",
        help="The deployment's watchdog dialect (dsv4, slime, ...): only its watchdog lines count (default: any known).",
    ),
]
GraceOpt = Annotated[
    float | None, typer.Option("--grace", help="Slack after the timeout before a pin counts (s).")
]
DEFAULT_DB = Path("pdforensics.duckdb")


def _err(text: str) -> None:
    sys.stderr.write(f"pdforensics: {text}\n")


def _now_us() -> int:
    return time.time_ns() // 1000


# ------------------------------------------------------------------- ingest


@app.command()
def ingest(
    db: DbOpt = DEFAULT_DB,
    since: SinceOpt = None,
    until: UntilOpt = None,
    unit: Annotated[
        list[str] | None,
        typer.Option("--unit", "-u", help="Unit glob, repeatable (default sglang*; * = all)."),
    ] = None,
    directory: Annotated[
        list[Path] | None,
        typer.Option("--directory", "-D", help="Journal directory (e.g. journal-remote).", readable=False),
    ] = None,
    journal_file: Annotated[
        list[Path] | None, typer.Option("--journal-file", help="A .journal file.", readable=False)
    ] = None,
    file: Annotated[
        list[Path] | None,
        typer.Option(
            "--file",
            "-f",
            help="journalctl -o json / -o export output, or a plain SGLang log (.gz ok).",
            readable=False,
        ),
    ] = None,
    tz: Annotated[
        str | None, typer.Option(help="Time zone of zone-less log prefixes (default: inferred/local).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Host name for plain log files.")] = None,
    catalog: Annotated[
        list[Path] | None, typer.Option("--catalog", help="Extra catalog TOML, repeatable.")
    ] = None,
    watchdog: WatchdogDialectOpt = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no summary table.")] = False,
) -> None:
    """Read the journal and/or log files into the database, then print the one-line verdict."""
    from pdforensics.api import run_ingest
    from pdforensics.render import print_ingest_summary, print_verdict_line

    summary, verdict = run_ingest(
        db=db, since=since, until=until, units=unit, directories=directory, journal_files=journal_file,
        files=file, tz=tz, host=host, catalogs=catalog, watchdog_timeout=watchdog_timeout, grace=grace,
        progress=not quiet and sys.stderr.isatty(), now_us=_now_us(), watchdog_dialect=watchdog,
    )  # fmt: skip
    if not quiet:
        print_ingest_summary(summary)
    if verdict is not None:
        print_verdict_line(verdict)


# ------------------------------------------------------------------ verdict


@app.command()
def verdict(
    db: DbOpt = DEFAULT_DB,
    since: SinceOpt = None,
    until: UntilOpt = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output (stable keys).")] = False,
    check: Annotated[
        bool,
        typer.Option("--check", help="Exit 0 nothing_stuck, 1 watchdog_fired, 2 watchdog_missed, 3 other."),
    ] = False,
) -> None:
    """Was anything stuck, and did the watchdog fire? One verdict for the window, with reasons."""
    from pdforensics.api import run_verdict
    from pdforensics.render import print_verdict

    result = run_verdict(db, since, until, watchdog_timeout, grace, now_us=_now_us())
    print_verdict(result, as_json=json_out)
    if check:
        raise typer.Exit(check_code(result))


CHECK_CODES = {"nothing_stuck": 0, "watchdog_fired": 1, "watchdog_missed": 2, "inconclusive": 3}


def check_code(result) -> int:  # type: ignore[no-untyped-def]
    """The monitoring-plugin code; critical (2) too for a watchdog that fires but never recovers,
    and for a queue the watchdog does not watch frozen with requests in it."""
    if (result.verdict == "watchdog_fired" and result.recovery == "wedged") or result.stuck_elsewhere:
        return 2
    return CHECK_CODES.get(result.verdict, 3)


@app.command()
def timeline(
    request: Annotated[str, typer.Argument(help="A bootstrap_room or a rid (either engine's).")],
    db: DbOpt = DEFAULT_DB,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """One request's timeline on both engines, with the evidence for its class."""
    from pdforensics.api import run_timeline
    from pdforensics.render import print_timeline

    print_timeline(run_timeline(db, request, watchdog_timeout, grace), as_json=json_out)


# ------------------------------------------------------------------ simulate


@app.command()
def simulate(
    scenario: Annotated[str | None, typer.Argument(help="Scenario name (see --list).")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Output folder.")] = None,
    now: Annotated[str | None, typer.Option(help="End of the incident (default: now).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    scale: Annotated[float, typer.Option(help="Multiply the request rate.")] = 1.0,
    list_: Annotated[bool, typer.Option("--list", help="List the scenarios.")] = False,
) -> None:
    """Write a realistic incident (journal export + json + plain logs + expected.json)."""
    from pdforensics.api import run_simulate
    from pdforensics.simulate import SCENARIOS

    if list_ or scenario is None:
        for name, sc in SCENARIOS.items():
            typer.echo(f"{name:32s} {sc.description}")
        return
    if out is None:
        raise UsageError("--out DIR is required")
    path = run_simulate(scenario, out, now, seed, scale, now_us=_now_us())
    typer.echo(f"wrote {path}")


# ------------------------------------------------------------------ report / sql / export


@app.command()
def report(
    db: DbOpt = DEFAULT_DB,
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write.")] = Path("incident.html"),
    since: SinceOpt = None,
    until: UntilOpt = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    show_prompts: Annotated[bool, typer.Option("--show-prompts", help="Do not redact prompt text.")] = False,
) -> None:
    """Write a self-contained HTML incident report (opens offline)."""
    from pdforensics.api import run_report

    path = run_report(db, out, since, until, watchdog_timeout, grace, show_prompts, now_us=_now_us())
    typer.echo(f"wrote {path}")


@app.command()
def sql(
    query: Annotated[str | None, typer.Argument(help="SQL text, or the name of a saved query.")] = None,
    db: DbOpt = DEFAULT_DB,
    fmt: Annotated[str, typer.Option("--format", help="table|csv|json|ndjson|markdown")] = "table",
    list_: Annotated[bool, typer.Option("--list", help="List the saved queries.")] = False,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
) -> None:
    """Ask your own question in SQL (read-only), or run a saved query by name."""
    from pdforensics.api import run_sql

    run_sql(db, query, fmt, list_, watchdog_timeout, grace, sys.stdout)


@app.command()
def export(
    fmt: Annotated[str, typer.Option("--format", help="parquet|perfetto|otlp|timesketch")],
    out: Annotated[Path, typer.Option("--out", "-o", help="File (or folder for parquet).")],
    db: DbOpt = DEFAULT_DB,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
) -> None:
    """Export what was found for other tools: Parquet, Perfetto, OTLP, Timesketch."""
    from pdforensics.api import run_export

    typer.echo(f"wrote {run_export(db, fmt, out, watchdog_timeout, grace)}")


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the demo's files.")] = Path("demo"),
) -> None:
    """Simulate the bundled incident, ingest it, print the verdict and write the report."""
    from pdforensics.api import run_demo

    run_demo(out, now_us=_now_us())


@app.command("catalog")
def catalog_cmd(
    extra: Annotated[
        list[Path] | None, typer.Option("--catalog", help="Extra catalog TOML, repeatable.")
    ] = None,
    watchdog: WatchdogDialectOpt = None,
) -> None:
    """List the line catalog: every entry, its event, its watchdog dialect and where it comes from."""
    from pdforensics.catalog import load_catalog

    for e in load_catalog(extra or [], watchdog=watchdog).entries:
        dialect = f"watchdog={e.watchdog}" if e.watchdog else "-"
        typer.echo(f"{e.name:44s} {e.event:28s} {dialect:16s} {e.versions or '':14s} {e.origin}")


# ------------------------------------------------------------------ watch


@app.command()
def watch(
    db: DbOpt = DEFAULT_DB,
    since: Annotated[
        str | None,
        typer.Option(
            help="Where a first start begins (default: the local journal's last 10min, files whole)."
        ),
    ] = None,
    unit: Annotated[
        list[str] | None, typer.Option("--unit", "-u", help="Unit glob, repeatable (default sglang*).")
    ] = None,
    directory: Annotated[
        list[Path] | None,
        typer.Option("--directory", "-D", help="Journal directory to follow.", readable=False),
    ] = None,
    journal_file: Annotated[
        list[Path] | None, typer.Option("--journal-file", help="A .journal file to follow.", readable=False)
    ] = None,
    file: Annotated[
        list[Path] | None,
        typer.Option("--file", "-f", help="A plain SGLang log, followed like tail -F.", readable=False),
    ] = None,
    tz: Annotated[str | None, typer.Option(help="Time zone of zone-less log prefixes.")] = None,
    host: Annotated[str | None, typer.Option(help="Host name for plain log files.")] = None,
    catalog: Annotated[list[Path] | None, typer.Option("--catalog", help="Extra catalog TOML.")] = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="One JSON object per alert (for pipelines).")
    ] = False,
    exec_cmd: Annotated[
        str | None, typer.Option("--exec", help="Command run per alert, the alert as JSON on stdin.")
    ] = None,
    listen: Annotated[
        str | None, typer.Option(help="Serve /metrics on HOST:PORT, e.g. 127.0.0.1:9464.")
    ] = None,
    textfile: Annotated[
        Path | None, typer.Option(help="Write node_exporter textfile metrics here (atomically).")
    ] = None,
    status_file: Annotated[Path | None, typer.Option(help="Write the watch's progress (JSON) here.")] = None,
    alert_log: Annotated[
        Path | None, typer.Option(help="Delivered alerts, one JSON a line (default <db>.alerts.jsonl).")
    ] = None,
    poll: Annotated[float, typer.Option(help="Seconds between polls when idle.")] = 1.0,
    commit_interval: Annotated[
        float, typer.Option(help="Seconds between write transactions (alerts never wait for them).")
    ] = 2.0,
    clock: Annotated[
        str | None,
        typer.Option(
            help="'log' (newest line) or 'wall' for deadlines (default: wall for the local journal)."
        ),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="One pass over --since, then exit with verdict --check's code.")
    ] = False,
) -> None:
    """Follow the logs into the database and alert the moment a request outlives the watchdog."""
    from pdforensics.api import checked_window, verdict_options
    from pdforensics.catalog import load_catalog
    from pdforensics.watch import WatchConfig, Watcher, build_followers, once_exit_code

    local = not (directory or journal_file or file)
    if since is None and local:
        since = "10min"
    window = checked_window(since, None, _now_us(), tz)
    opts = verdict_options(window.since_us, None, watchdog_timeout, grace)
    if clock not in (None, "log", "wall"):
        raise UsageError("--clock is 'log' or 'wall'")
    port = (listen or "").rpartition(":")[2]
    if listen is not None and not (port.isdigit() and int(port) < 65536):
        raise UsageError(f"--listen takes HOST:PORT (e.g. 127.0.0.1:9464), not {listen!r}")
    if poll < 0 or commit_interval < 0:
        raise UsageError("--poll and --commit-interval must be >= 0")
    followers = build_followers(
        directory, journal_file, file, tuple(unit or ("sglang*",)), window.since_us, host
    )
    cfg = WatchConfig(
        db=db, followers=followers, catalog=load_catalog(catalog or []), tz=tz,
        watchdog_timeout_s=watchdog_timeout, grace_s=opts.grace_s, poll_s=poll, commit_s=commit_interval,
        wall_clock=(clock or ("wall" if local else "log")) == "wall", json_out=json_out, exec_cmd=exec_cmd,
        listen=listen, textfile=textfile, status_file=status_file, alert_log=alert_log, once=once,
    )  # fmt: skip
    Watcher(cfg).run()
    if once:
        verdict_name, code = once_exit_code(db, window.since_us, watchdog_timeout, grace)
        typer.echo(f"verdict: {verdict_name}", err=True)
        raise typer.Exit(code)


INTERRUPTED = "interrupted; every batch committed so far is kept, rerun to continue"


def _quiet_unraisable(info: sys.UnraisableHookArgs) -> None:
    # Ctrl-C landing while a reader thread's generator is closed is reported by Python as
    # "Exception ignored in ..." with a traceback; the interruption itself is reported once, below.
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        return
    sys.__unraisablehook__(info)


def main() -> None:
    if not os.environ.get("PDFORENSICS_DEBUG"):
        sys.unraisablehook = _quiet_unraisable
    install_stop_signals()  # SIGTERM, SIGHUP: the same orderly stop as Ctrl-C (exit 143, 129)
    try:
        app()
    except PdfError as exc:
        _err(str(exc))
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _err(INTERRUPTED)
        sys.exit(interrupt_exit_code())
    except SystemExit as exc:
        if exc.code == EXIT_INTERRUPTED:  # typer turns Ctrl-C into a silent exit 130: say what was kept
            _err(INTERRUPTED)
            sys.exit(interrupt_exit_code())
        raise
    except Exception as exc:  # never a traceback for the user; PDFORENSICS_DEBUG=1 shows it
        if is_interrupt(exc):
            _err(INTERRUPTED)
            sys.exit(interrupt_exit_code())
        if os.environ.get("PDFORENSICS_DEBUG"):
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        _err(f"internal error: {type(exc).__name__}: {first} (set PDFORENSICS_DEBUG=1 for the traceback)")
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
