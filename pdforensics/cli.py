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

from pdforensics.errors import PdfError, UsageError, is_interrupt

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
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no summary table.")] = False,
    date: Annotated[
        str | None, typer.Option(help="Date (YYYY-MM-DD) of time-only prefixes no other line dates.")
    ] = None,
    prefixes: Annotated[
        list[Path] | None, typer.Option("--prefixes", help="Extra line prefix forms (TOML), repeatable.")
    ] = None,
) -> None:
    """Read the journal and/or log files into the database, then print the one-line verdict."""
    from pdforensics.api import run_ingest
    from pdforensics.render import print_ingest_summary, print_verdict_line

    summary, verdict = run_ingest(
        db=db, since=since, until=until, units=unit, directories=directory, journal_files=journal_file,
        files=file, tz=tz, host=host, catalogs=catalog, watchdog_timeout=watchdog_timeout, grace=grace,
        progress=not quiet and sys.stderr.isatty(), now_us=_now_us(), date=date, prefix_files=prefixes,
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
        raise typer.Exit(CHECK_CODES.get(result.verdict, 3))


CHECK_CODES = {"nothing_stuck": 0, "watchdog_fired": 1, "watchdog_missed": 2, "inconclusive": 3}


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
) -> None:
    """List the line catalog: every entry, its event and where it comes from."""
    from pdforensics.catalog import load_catalog

    for e in load_catalog(extra or []).entries:
        typer.echo(f"{e.name:44s} {e.event:28s} {e.versions or '':14s} {e.origin}")


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
    try:
        app()
    except PdfError as exc:
        _err(str(exc))
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _err(INTERRUPTED)
        sys.exit(EXIT_INTERRUPTED)
    except SystemExit as exc:
        if exc.code == EXIT_INTERRUPTED:  # typer turns Ctrl-C into a silent exit 130: say what was kept
            _err(INTERRUPTED)
        raise
    except Exception as exc:  # never a traceback for the user; PDFORENSICS_DEBUG=1 shows it
        if is_interrupt(exc):
            _err(INTERRUPTED)
            sys.exit(EXIT_INTERRUPTED)
        if os.environ.get("PDFORENSICS_DEBUG"):
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        _err(f"internal error: {type(exc).__name__}: {first} (set PDFORENSICS_DEBUG=1 for the traceback)")
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
