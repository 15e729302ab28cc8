"""The `pdforensics` command: a thin typer layer over the library.

Each command parses options, calls one library function and prints. Errors
from the library (`PdfError`) become one line on stderr and the exit code of
their class; heavy imports (plotly, the report) happen inside the commands
that need them so `--help` stays instant.
"""

from __future__ import annotations

import copy
import errno
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer._click import exceptions as click  # typer 0.29 vendors click; pinned <0.30
from typer.core import TyperGroup

from pdforensics.cli_coercion import plain_coercion
from pdforensics.errors import (
    DatabaseError,
    OutputError,
    PdfError,
    UsageError,
    install_stop_signals,
    interrupt_exit_code,
    is_database_fault,
    is_interrupt,
)

EXIT_INTERNAL = 70
_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
EXIT_INTERRUPTED = 130
EXIT_USAGE = 2
# `--check` follows the monitoring-plugin convention (render.check_line): 0 OK, 1 WARNING,
# 2 CRITICAL, 3 UNKNOWN.
CHECK_HELP = (
    "Print one monitoring-plugin line (STATUS - text | perfdata) and exit 0 nothing_stuck, "
    "1 watchdog_fired, 2 watchdog_missed, 3 inconclusive (or the check itself failed)."
)


class _OneLineErrors(TyperGroup):
    """Every failure is one line on stderr and a documented exit code, under CliRunner too.

    click's standalone mode prints usage errors as a box with a "Try --help" line; here
    `standalone_mode=False` hands them to us instead, with PdfError, Ctrl-C and internal errors.
    """

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(
                args=argv, prog_name=prog_name or "pdforensics", standalone_mode=False, **extra
            )
        except BaseException as exc:
            _fail(exc, argv)
        if code == EXIT_INTERRUPTED:  # typer turns Ctrl-C into a silent exit 130: say what was kept
            _err(INTERRUPTED)
            sys.exit(interrupt_exit_code())
        sys.exit(code if isinstance(code, int) else 0)

    # typer would build a pydantic adapter per option of the command run (pdforensics.cli_coercion)
    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        plain_coercion([*self.params, option])
        return option

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            plain_coercion([*command.params, command.get_help_option(ctx)])
        return name, command, rest


app = typer.Typer(
    name="pdforensics",
    cls=_OneLineErrors,
    help="Was anything stuck on your SGLang PD deployment, and did the inflight watchdog fire?",
    epilog="\b\nStart with:\n  pdforensics ingest --since 1h && pdforensics verdict",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain click help: no boxes, flags without a `<bool>` type column
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)


def example(*commands: str) -> str:
    """A command's epilog: its example(s), kept verbatim by click's `\\b` marker."""
    return "\b\nExample:\n" + "\n".join(f"  {c}" for c in commands)


# Options shared by several commands. Convention: a metavar that says what to type, and a help
# text that ends with its default in brackets when typer cannot show one (a None default means
# something: say what).
DbOpt = Annotated[
    Path,
    typer.Option(
        "--db",
        envvar="PDFORENSICS_DB",
        metavar="FILE",
        help="DuckDB file.",
        show_default=True,
        readable=False,  # our own check says what to do about it, in one line
    ),
]
TIME_FORMS = "6min, 2h, '6 min ago', -6min, '2026-11-29 10:00:00', ISO 8601, @EPOCH"
SinceOpt = Annotated[
    str | None,
    typer.Option(
        metavar="WHEN",
        help=f"Window start: {TIME_FORMS}. [default: the last ingest's window (with the runs overlapping "
        "it); lines before it are context]",
    ),
]
UntilOpt = Annotated[
    str | None,
    typer.Option(
        metavar="WHEN",
        help="Window end, same forms as --since. [default: where the last ingest's reading ended (its "
        "last line; a live journal: when it was read)]",
    ),
]
IngestSinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since", metavar="WHEN",
        help=f"Read from: {TIME_FORMS}. [default: the whole journal / every line of the files]",
    ),
]  # fmt: skip
IngestUntilOpt = Annotated[
    str | None,
    typer.Option(
        "--until", metavar="WHEN",
        help="Read up to, same forms as --since. [default: the end: all the journal / files hold when read]",
    ),
]  # fmt: skip
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--watchdog-timeout", metavar="SECONDS",
        help="The watchdog timeout. [default: from the armed line (`inflight watchdog armed: ...=60s`), "
        "else the live prefill unit's environment, else a firing's `stalled >Ns`, else 300 s]",
    ),
]  # fmt: skip
WatchdogDialectOpt = Annotated[
    str | None,
    typer.Option(
        "--watchdog", metavar="NAME",
        help="The deployment's watchdog dialect (dsv4, slime, ...): only its watchdog lines count. [default: any known]",
    ),
]  # fmt: skip
GraceOpt = Annotated[
    float | None,
    typer.Option(
        "--grace", metavar="SECONDS", help="Slack after the timeout before a pin counts. [default: 10 s]"
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Machine-readable output (stable keys). [default: text]")
]
CheckOpt = Annotated[bool, typer.Option("--check", help=CHECK_HELP)]
DEFAULT_DB = Path("pdforensics.duckdb")


def _zone_option(value: str | None) -> str | None:
    """--tz checked as the command line is parsed, before any command opens a database (a bad
    zone met mid-ingest left an `interrupted` run); `local` and `Z` named as every reader takes them."""
    if value is None:
        return None
    from pdforensics.parse import LOCAL_TZ, checked_zone

    if value.lower() == "local":
        return LOCAL_TZ
    if value.upper() in ("UTC", "Z"):
        return "UTC"
    checked_zone(value)
    return value


TzOpt = Annotated[
    str | None,
    typer.Option(
        "--tz", metavar="ZONE", callback=_zone_option,
        help="Time zone of zone-less log prefixes: an IANA name, UTC or local. [default: inferred, else local]",
    ),
]  # fmt: skip
# Where `ingest` (and `drill`, which ingests its own window) read from
DirectoryOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--directory", "-D", metavar="DIR", readable=False,
        help="Journal directory (e.g. /var/log/journal/remote), repeatable. [default: the local journal, "
        "when no --directory/--journal-file/--file is given]",
    ),
]  # fmt: skip
JournalFileOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--journal-file", metavar="FILE", readable=False, help="A .journal file, repeatable. [default: none]"
    ),
]
FileOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--file", "-f", metavar="FILE", readable=False,
        help="journalctl -o json / -o export output, or a plain SGLang log (.gz ok), repeatable. [default: none]",
    ),
]  # fmt: skip
HostOpt = Annotated[
    str | None,
    typer.Option(
        "--host",
        metavar="NAME",
        help="Host name for plain log files. [default: HOST of a file named HOST-sglang….log, else local]",
    ),
]
UnitOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--unit", "-u", metavar="GLOB",
        help="Unit glob, repeatable; '*' takes every unit. [default: sglang*]",
    ),
]  # fmt: skip
CatalogOpt = Annotated[
    list[Path] | None,
    typer.Option("--catalog", metavar="TOML", help="Extra catalog TOML, repeatable. [default: the bundled one only]"),
]  # fmt: skip


def _err(text: str) -> None:
    sys.stderr.write(f"pdforensics: {text}\n")


def _now_us() -> int:
    return time.time_ns() // 1000


def _version(value: bool) -> None:
    if value:
        from pdforensics import __version__

        typer.echo(f"pdforensics {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Was anything stuck on your SGLang PD deployment, and did the inflight watchdog fire?"""


# ------------------------------------------------------------------- ingest


@app.command(epilog=example("pdforensics ingest --since 1h --unit 'sglang*'"))
def ingest(
    db: DbOpt = DEFAULT_DB,
    since: IngestSinceOpt = None,
    until: IngestUntilOpt = None,
    unit: UnitOpt = None,
    directory: DirectoryOpt = None,
    journal_file: JournalFileOpt = None,
    file: FileOpt = None,
    tz: TzOpt = None,
    host: HostOpt = None,
    catalog: CatalogOpt = None,
    watchdog: WatchdogDialectOpt = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no summary table.")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print {ingest, verdict} as JSON instead of the summary.")
    ] = False,
    check: CheckOpt = False,
    date: Annotated[
        str | None,
        typer.Option(
            metavar="YYYY-MM-DD",
            help="Date of time-only prefixes no other line dates. [default: from the other lines]",
        ),
    ] = None,
    prefixes: Annotated[
        list[Path] | None,
        typer.Option(
            "--prefixes",
            metavar="FILE",
            help="Extra line prefix forms (TOML), repeatable. [default: the bundled forms]",
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            metavar="N",
            help="How many things run at once: 1 reads, parses and stores each batch in turn; 2 "
            "parses the next batch while this one is stored; 3 or more on a --directory of several "
            "hosts: N-1 worker processes read and parse its files. [default: the number of cores]",
        ),
    ] = None,
    parquet: Annotated[
        Path | None,
        typer.Option(
            "--parquet",
            metavar="DIR",
            help="Also write the data as hive-partitioned Parquet (lines/events by host and hour, "
            "other tables as snapshots), for Spark. [default: none]",
        ),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Also read SGLang's samples from this Prometheus server (docs/prometheus.md). "
            "[default: none; window: --since/--until, else the last log ingest's]",
        ),
    ] = None,
    openmetrics: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="FILE",
            readable=False,
            help="Also read a promtool tsdb dump-openmetrics export or a "
            "saved /metrics scrape, repeatable. [default: none]",
        ),
    ] = None,
    match: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SELECTOR",
            help="Series to read from --prometheus, repeatable. [default: the sglang: "
            "queue gauges, token usage, failure and request counters, kv_transfer_*; and up]",
        ),
    ] = None,
    prometheus_map: Annotated[
        Path | None,
        typer.Option(
            metavar="TOML",
            readable=False,
            help="Scrape targets to hosts/engines ([instances] "
            '"host:port" = { host = ..., engine = ... }). [default: by name and address]',
        ),
    ] = None,
) -> None:
    """Read the journal and/or log files into the database, then print the one-line verdict."""
    if prometheus is not None or openmetrics:  # metrics: their own path; logs too only when named
        from pdforensics.metric_ingest import run_metrics_ingest

        for text in run_metrics_ingest(db, since, until, prometheus, openmetrics, match, prometheus_map,
                                       now_us=_now_us(), as_json=json_out):  # fmt: skip
            typer.echo(text) if not quiet else None
        if not (directory or journal_file or file):
            return
    from pdforensics.api import run_ingest
    from pdforensics.render import (
        check_code,
        print_check,
        print_ingest_json,
        print_ingest_summary,
        print_verdict_line,
    )

    machine = json_out or check
    summary, verdict = run_ingest(
        db=db, since=since, until=until, units=unit, directories=directory, journal_files=journal_file,
        files=file, tz=tz, host=host, catalogs=catalog, watchdog_timeout=watchdog_timeout, grace=grace,
        progress=not (quiet or machine) and sys.stderr.isatty(), now_us=_now_us(), watchdog_dialect=watchdog,
        announce=None if quiet or machine else _err, date=date,
        prefix_files=prefixes, jobs=jobs, parquet=parquet,
    )  # fmt: skip
    if json_out:
        print_ingest_json(summary, verdict)
    elif check:
        pass
    elif not quiet:
        print_ingest_summary(summary)
    if check:
        if verdict is None:
            raise UsageError("no verdict could be computed for this ingest")
        print_check(verdict)
        raise typer.Exit(check_code(verdict))
    if verdict is not None and not json_out:
        print_verdict_line(verdict)
    if summary.unmatched_units:  # a --unit glob that matched nothing: not a success
        raise typer.Exit(1)


# ------------------------------------------------------------------ verdict


@app.command(epilog=example("pdforensics verdict --since 1h --check"))
def verdict(
    db: DbOpt = DEFAULT_DB,
    since: SinceOpt = None,
    until: UntilOpt = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    json_out: JsonOpt = False,
    check: CheckOpt = False,
    engine: Annotated[
        str,
        typer.Option(
            metavar="ENGINE",
            help="duckdb, or spark: the same rules translated to Spark SQL, on a local Spark session "
            "(pip install 'pdforensics[spark]' and Java 17; docs/spark.md; exit 5 when it cannot run).",
        ),
    ] = "duckdb",
    parquet: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Read the tables from the Parquet folder `ingest --parquet` wrote instead of --db. "
            "[default: --db]",
        ),
    ] = None,
) -> None:
    """Was anything stuck, and did the watchdog fire? One verdict for the window, with reasons."""
    from pdforensics.api import run_verdict, run_verdict_on
    from pdforensics.render import check_code, print_check, print_verdict

    if engine == "duckdb" and parquet is None:
        result = run_verdict(db, since, until, watchdog_timeout, grace, now_us=_now_us())
    else:
        result = run_verdict_on(engine, parquet, db, since, until, watchdog_timeout, grace, now_us=_now_us())
    if check:
        print_check(result)
        raise typer.Exit(check_code(result))
    print_verdict(result, as_json=json_out)


@app.command(epilog=example("pdforensics timeline 495bb5cf"))
def timeline(
    request: Annotated[
        str,
        typer.Argument(
            metavar="REQUEST", help="A bootstrap_room or a rid (either engine's), or a unique prefix."
        ),
    ],
    db: DbOpt = DEFAULT_DB,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """One request's timeline on both engines, with the evidence for its class."""
    from pdforensics.api import run_timeline
    from pdforensics.render import print_timeline

    print_timeline(run_timeline(db, request, watchdog_timeout, grace), as_json=json_out)


WINDOW_RANGE = "WHEN..WHEN"


@app.command(
    epilog=example("pdforensics compare --before-db old.duckdb --after-db fixed.duckdb --watchdog-timeout 60")
)
def compare(
    db: DbOpt = DEFAULT_DB,
    before: Annotated[
        str | None,
        typer.Option(
            metavar=WINDOW_RANGE,
            help="The window before the fix (either end may be left out). "
            "[default: with --before-db, its last ingest's window]",
        ),
    ] = None,
    after: Annotated[
        str | None,
        typer.Option(
            metavar=WINDOW_RANGE,
            help="The window after the fix. [default: with --after-db, its last ingest's window]",
        ),
    ] = None,
    before_db: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", readable=False, help="The database of the window before. [default: --db]"
        ),
    ] = None,
    after_db: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", readable=False, help="The database of the window after. [default: --db]"
        ),
    ] = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    json_out: JsonOpt = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="One monitoring-plugin line; exit 2 when a measure is worse after, 3 when the two "
            "windows' evidence differs (nothing judged), else 0.",
        ),
    ] = False,
) -> None:
    """Did the fix work? Two windows judged by the same rules, side by side, each rate's change tested."""
    from pdforensics.api import run_compare
    from pdforensics.compare import check_code, print_compare

    result = run_compare(db, before, after, before_db, after_db, watchdog_timeout, grace, now_us=_now_us())
    print_compare(result, as_json=json_out, check=check)
    if check:
        raise typer.Exit(check_code(result))


# ------------------------------------------------------------------ drill


@app.command(epilog=example("pdforensics drill --router http://127.0.0.1:30000 --dry-run"))
def drill(
    router: Annotated[
        str | None,
        typer.Option(metavar="URL", help="The router (or an engine) serving SGLang's HTTP API. [required]"),
    ] = None,
    concurrency: Annotated[int, typer.Option(metavar="N", help="Requests at once (never more).")] = 15,
    rounds: Annotated[int, typer.Option(metavar="N", help="Rounds of --concurrency requests.")] = 2,
    abort_at: Annotated[
        str,
        typer.Option(
            metavar="WHEN",
            help="transfer (at 70% of the warm-up's time to first token: racing the KV transfer), "
            "first-token (a control), or random.",
        ),
    ] = "transfer",
    prompt_tokens: Annotated[int, typer.Option(metavar="N", help="Prompt size in tokens (about).")] = 4096,
    max_new_tokens: Annotated[int, typer.Option(metavar="N", help="Tokens asked of each request.")] = 64,
    warmup: Annotated[
        int, typer.Option(metavar="N", help="Unaborted warm-up requests timing the first token.")
    ] = 3,
    endpoint: Annotated[
        str, typer.Option(metavar="API", help="generate (/generate) or openai (/v1/completions), streaming.")
    ] = "generate",
    metrics: Annotated[
        list[str] | None,
        typer.Option(
            metavar="URL",
            help="An engine's /metrics for the brakes, repeatable. [default: the engines the router's "
            "/workers lists, else the router's /metrics]",
        ),
    ] = None,
    max_inflight_rise: Annotated[
        int, typer.Option(metavar="N", help="Brake: the prefill inflight queue this far above its baseline.")
    ] = 20,
    max_throughput_drop: Annotated[
        float,
        typer.Option(
            metavar="FRACTION", help="Brake: decode gen throughput down this much from the warm-up's."
        ),
    ] = 0.5,
    max_errors: Annotated[
        int, typer.Option(metavar="N", help="Brake: more HTTP 5xx/connection errors than this.")
    ] = 5,
    max_queued_requests: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="The deployment's --max-queued-requests; brake when a queue is within 10% of it. [default: unchecked]",
        ),
    ] = None,
    max_duration: Annotated[
        float, typer.Option(metavar="SECONDS", help="Brake: the drill's duration.")
    ] = 300.0,
    poll: Annotated[float, typer.Option(metavar="SECONDS", help="How often the brakes read /metrics.")] = 1.0,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed of --abort-at random.")] = 0,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Run without asking. [default: ask on a terminal]")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan only.")] = False,
    db: DbOpt = DEFAULT_DB,
    unit: UnitOpt = None,
    directory: DirectoryOpt = None,
    journal_file: JournalFileOpt = None,
    file: FileOpt = None,
    tz: TzOpt = None,
    host: HostOpt = None,
    watchdog_timeout: Annotated[
        float | None,
        typer.Option(
            "--watchdog-timeout",
            metavar="SECONDS",
            help="The watchdog timeout: the drill waits it + --grace before answering. [default: 300 s, "
            "and the verdict reads the timeout from the logs]",
        ),
    ] = None,
    grace: GraceOpt = None,
    json_out: JsonOpt = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="One monitoring-plugin line; exit 0 watchdog_proven or no_pin_under_race, 1 "
            "race_not_reproduced, 2 watchdog_missed, 3 inconclusive (or the drill could not run).",
        ),
    ] = False,
) -> None:
    """A bounded abort drill against a live deployment, then the verdict on its own window."""
    import json

    from pdforensics.drill import Brakes, Plan, check_code, check_line, render_text
    from pdforensics.drill import drill as run_drill

    if router is None:
        raise UsageError("--router URL is required")
    brakes = Brakes(
        max_inflight_rise=max_inflight_rise, max_throughput_drop=max_throughput_drop, max_errors=max_errors,
        max_queued_requests=max_queued_requests, max_duration_s=max_duration,
    )  # fmt: skip
    plan = Plan(
        router=router, concurrency=concurrency, rounds=rounds, abort_at=abort_at, prompt_tokens=prompt_tokens,
        max_new_tokens=max_new_tokens, warmup=warmup, endpoint=endpoint,
        watchdog_timeout_s=watchdog_timeout or 300.0, grace_s=10.0 if grace is None else grace, poll_s=poll,
        metrics=list(metrics or []), brakes=brakes, seed=seed,
    )  # fmt: skip
    say = (lambda line: _err(line)) if (json_out or check) else typer.echo
    say(plan.text())
    if dry_run:
        return
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("not on a terminal: pass --yes to run the drill, or --dry-run for the plan")
        if not typer.confirm("Run this drill?", default=False):
            say("not run")
            return
    answer = run_drill(
        plan, db, directories=directory, journal_files=journal_file, files=file, units=unit, tz=tz, host=host,
        timeout_stated=watchdog_timeout is not None, say=say,
    )  # fmt: skip
    if check:
        typer.echo(check_line(answer))
        raise typer.Exit(check_code(answer))
    typer.echo(json.dumps(answer.to_json(), indent=2) if json_out else render_text(answer))


# ------------------------------------------------------------------ simulate


@app.command(epilog=example("pdforensics simulate decode_restart_old_build --out incident"))
def simulate(
    scenario: Annotated[str | None, typer.Argument(help="Scenario name (see --list).")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="DIR", help="Output folder. [required]")
    ] = None,
    now: Annotated[
        str | None,
        typer.Option(metavar="WHEN", help="End of the incident, same forms as --since. [default: now]"),
    ] = None,
    seed: Annotated[int, typer.Option(metavar="N", help="Random seed.")] = 0,
    scale: Annotated[float, typer.Option(metavar="X", help="Multiply the request rate.")] = 1.0,
    list_: Annotated[bool, typer.Option("--list", help="List the scenarios.")] = False,
    journal_remote: Annotated[
        Path | None,
        typer.Option(
            "--journal-remote",
            metavar="DIR",
            help="Also write DIR/remote-HOST.journal per host (systemd-journal-remote), for ingest -D. "
            "[default: no collection]",
        ),
    ] = None,
    openmetrics: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Also write the scenario's SGLang gauges as scraped every 10 s "
            "(OpenMetrics, for promtool tsdb create-blocks-from openmetrics). [default: none]",
        ),
    ] = None,
    zone: Annotated[
        str | None,
        typer.Option(
            "--tz",
            metavar="ZONE",
            callback=_zone_option,
            help="Every host's local time is this IANA zone's, DST changes included (e.g. Europe/Berlin "
            "with --now across a change). [default: each host's own fixed offset]",
        ),
    ] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Serve a stand-in PD deployment on 127.0.0.1 instead (SGLang's HTTP API, its log lines "
            "in --out), for `pdforensics drill`; Ctrl-C stops it (docs/drill.md).",
        ),
    ] = False,
    build: Annotated[
        str, typer.Option(metavar="NAME", help="--serve: the stand-in's bugs (--serve --list lists them).")
    ] = "race-pins-watchdog",
    port: Annotated[
        int, typer.Option(metavar="PORT", help="--serve: the router's port; the engines take the next two.")
    ] = 30000,
) -> None:
    """Write a realistic incident: journal export + json + plain logs (plain/) + expected.json."""
    from pdforensics.api import next_commands, run_simulate
    from pdforensics.simulate import SCENARIOS

    if serve:
        from pdforensics.simulate.serve import BUILDS, build_config
        from pdforensics.simulate.serve import serve as run_serve

        if list_:
            for name, (text, _) in BUILDS.items():
                typer.echo(f"{name:24s} {text}")
            return
        if out is None:
            raise UsageError("--out DIR is required (where the stand-in writes its logs)")
        run_serve(build_config(build, out), port, announce=typer.echo)
        return
    if list_ or scenario is None:
        for name, sc in SCENARIOS.items():
            typer.echo(f"{name:32s} {sc.description}")
        return
    if out is None:
        raise UsageError("--out DIR is required")
    now_us = _now_us()
    path = run_simulate(
        scenario, out, now, seed, scale, now_us=now_us, journal_remote=journal_remote, tz=zone
    )
    typer.echo(f"wrote {path}: journal.export, journal.json, plain/*.log, expected.json")
    if journal_remote is not None:
        typer.echo(f"wrote {journal_remote}: remote-<host>.journal per host")
    if openmetrics is not None:
        from pdforensics.simulate.openmetrics import write_openmetrics
        from pdforensics.timewindow import parse_instant

        at = parse_instant(now, now_us) if now else now_us
        typer.echo(f"wrote {write_openmetrics(scenario, openmetrics, at, seed, scale)}: OpenMetrics scrapes")
    for k, command in enumerate(next_commands(path, path / "incident.duckdb", journal_remote)):
        typer.echo(f"{'next:' if k == 0 else 'then:'}  {command}")


# ------------------------------------------------------------------ report / sql / export


@app.command(epilog=example("pdforensics report --since 1h --out incident.html"))
def report(
    db: DbOpt = DEFAULT_DB,
    out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="HTML file to write.")] = Path(
        "incident.html"
    ),
    since: SinceOpt = None,
    until: UntilOpt = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    show_prompts: Annotated[
        bool, typer.Option("--show-prompts", help="Keep prompt text. [default: prompts redacted]")
    ] = False,
    compare: Annotated[
        str | None,
        typer.Option(
            metavar=WINDOW_RANGE,
            help="Add a Before and after section: this window beside that "
            "one (see `pdforensics compare`). [default: none; with --compare-db, its last ingest's]",
        ),
    ] = None,
    compare_db: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", readable=False, help="The database of the --compare window. [default: --db]"
        ),
    ] = None,
) -> None:
    """Write a self-contained HTML incident report (opens offline)."""
    from pdforensics.api import run_report

    path = run_report(
        db, out, since, until, watchdog_timeout, grace, show_prompts, now_us=_now_us(), compare=compare,
        compare_db=compare_db,
    )  # fmt: skip
    typer.echo(f"wrote {path}")


@app.command(epilog=example('pdforensics sql "SET VARIABLE pdf_grace_s = 0; SELECT * FROM pins"'))
def sql(
    query: Annotated[
        str | None,
        typer.Argument(
            metavar="QUERY", help="SQL text, or the name of a saved query. [default: list the saved ones]"
        ),
    ] = None,
    db: DbOpt = DEFAULT_DB,
    fmt: Annotated[
        str, typer.Option("--format", metavar="FORMAT", help="table|csv|json|ndjson|markdown")
    ] = "table",
    list_: Annotated[bool, typer.Option("--list", help="List the saved queries.")] = False,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
) -> None:
    """Ask your own question in SQL (read-only), or run a saved query by name."""
    from pdforensics.api import run_sql

    run_sql(db, query, fmt, list_, watchdog_timeout, grace, sys.stdout)


@app.command(epilog=example("pdforensics export --format perfetto --out trace.json --since 1h"))
def export(
    fmt: Annotated[
        str, typer.Option("--format", metavar="FORMAT", help="parquet|perfetto|otlp|timesketch. [required]")
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="PATH", help="File (or folder for parquet). [required]")
    ],
    db: DbOpt = DEFAULT_DB,
    since: SinceOpt = None,
    until: UntilOpt = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
) -> None:
    """Export what was found for other tools: Parquet, Perfetto, OTLP, Timesketch."""
    from pdforensics.api import run_export

    typer.echo(f"wrote {run_export(db, fmt, out, watchdog_timeout, grace, since, until, _now_us())}")


@app.command(epilog=example("pdforensics demo --out demo"))
def demo(
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="DIR", help="Folder for the demo's files.")
    ] = Path("demo"),
) -> None:
    """Simulate the bundled incident, ingest it, print the verdict and write the report."""
    from pdforensics.api import run_demo

    run_demo(out, now_us=_now_us())


@app.command("catalog", epilog=example("pdforensics catalog --catalog mine.toml"))
def catalog_cmd(
    extra: Annotated[
        list[Path] | None,
        typer.Option(
            "--catalog",
            metavar="TOML",
            help="Extra catalog TOML, repeatable. [default: the bundled one only]",
        ),
    ] = None,
    watchdog: Annotated[
        str | None,
        typer.Option(
            "--watchdog",
            metavar="NAME",
            help="Only this watchdog dialect's lines (dsv4, slime, ...). [default: every entry]",
        ),
    ] = None,
) -> None:
    """List the line catalog: every entry, its event, its watchdog dialect and where it comes from."""
    from pdforensics.catalog import load_catalog

    entries = load_catalog(extra or [], watchdog=watchdog).entries  # an unknown NAME: one line, exit 2
    for e in entries if watchdog is None else [e for e in entries if e.watchdog == watchdog]:
        dialect = f"watchdog={e.watchdog}" if e.watchdog else "-"
        typer.echo(f"{e.name:44s} {e.event:28s} {dialect:16s} {e.versions or '':14s} {e.origin}")


# ------------------------------------------------------------------ watch


@app.command(epilog=example("pdforensics watch -D /var/log/journal/remote --listen 127.0.0.1:9464"))
def watch(
    db: DbOpt = DEFAULT_DB,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="WHEN",
            help=f"Where a first start reads the journal from: {TIME_FORMS}; a restart continues where "
            "the last run stopped; --file logs are read from their start. [default: the local journal's "
            "last 10min, other journals from their start]",
        ),
    ] = None,
    unit: UnitOpt = None,
    directory: Annotated[
        list[Path] | None,
        typer.Option(
            "--directory",
            "-D",
            metavar="DIR",
            readable=False,
            help="Journal directory to follow (e.g. /var/log/journal/remote; an empty one is waited on), "
            "repeatable. [default: the local journal, when no --directory/--journal-file/--file is given]",
        ),
    ] = None,
    journal_file: Annotated[
        list[Path] | None,
        typer.Option(
            "--journal-file",
            metavar="FILE",
            readable=False,
            help="A .journal file to follow, repeatable. [default: none]",
        ),
    ] = None,
    file: Annotated[
        list[Path] | None,
        typer.Option(
            "--file",
            "-f",
            metavar="FILE",
            readable=False,
            help="A plain SGLang log, followed like tail -F (waited on until it exists), repeatable. [default: none]",
        ),
    ] = None,
    tz: TzOpt = None,
    host: HostOpt = None,
    catalog: CatalogOpt = None,
    watchdog_timeout: TimeoutOpt = None,
    grace: GraceOpt = None,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="One JSON object per alert (for pipelines). [default: one line of text]"),
    ] = False,
    exec_cmd: Annotated[
        str | None,
        typer.Option(
            "--exec",
            metavar="COMMAND",
            help="Command run per alert, the alert as JSON on stdin. [default: none]",
        ),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            help="Serve /metrics there, e.g. 127.0.0.1:9464 (port 0: a free one). [default: none]",
        ),
    ] = None,
    textfile: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="Write node_exporter textfile metrics here (atomically). [default: none]"
        ),
    ] = None,
    status_file: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Write the watch's progress (JSON) here. [default: none]"),
    ] = None,
    alert_log: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="Delivered alerts, one JSON a line. [default: the --db path + .alerts.jsonl]"
        ),
    ] = None,
    poll: Annotated[float, typer.Option(metavar="SECONDS", help="Seconds between polls when idle.")] = 1.0,
    commit_interval: Annotated[
        float,
        typer.Option(
            metavar="SECONDS", help="Seconds between write transactions (alerts never wait for them)."
        ),
    ] = 2.0,
    clock: Annotated[
        str | None,
        typer.Option(
            metavar="log|wall",
            help="What 'now' is for deadlines: log (the newest line) or wall (also the wall clock). "
            "[default: wall for the local journal, else log]",
        ),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="One pass over --since, then exit with verdict --check's code.")
    ] = False,
    prometheus: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Also poll SGLang's gauges from this Prometheus server into the database; a prefill "
            "whose inflight gauge stays >= 1 unexplained by its logs alerts metric_pin (docs/watch.md). "
            "[default: none]",
        ),
    ] = None,
    match: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SELECTOR",
            help="Series to poll from --prometheus, repeatable. [default: the sglang: families ingest reads; and up]",
        ),
    ] = None,
    prometheus_poll: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds between --prometheus queries (at least 1).")
    ] = 5.0,
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
    if prometheus is not None:
        from pdforensics.sources.prometheus import PrometheusServer, check_selectors

        PrometheusServer(prometheus)  # a malformed URL is a usage error before anything starts
        check_selectors(match)
    elif match:
        raise UsageError("--match selects series of a --prometheus server")
    if prometheus_poll < 1:
        raise UsageError("--prometheus-poll must be >= 1 (seconds)")
    followers = build_followers(
        directory, journal_file, file, tuple(unit or ("sglang*",)), window.since_us, host
    )
    cfg = WatchConfig(
        db=db, followers=followers, catalog=load_catalog(catalog or []), tz=tz,
        watchdog_timeout_s=watchdog_timeout, grace_s=opts.grace_s, poll_s=poll, commit_s=commit_interval,
        wall_clock=(clock or ("wall" if local else "log")) == "wall", json_out=json_out, exec_cmd=exec_cmd,
        listen=listen, textfile=textfile, status_file=status_file, alert_log=alert_log, once=once,
        prometheus=prometheus, match=match, prometheus_poll_s=prometheus_poll, since_us=window.since_us,
    )  # fmt: skip
    Watcher(cfg).run()
    if once:
        verdict_name, code = once_exit_code(db, window.since_us, watchdog_timeout, grace)
        typer.echo(f"verdict: {verdict_name}", err=True)
        raise typer.Exit(code)


# ------------------------------------------------------------------ errors

INTERRUPTED = "interrupted; every batch committed so far is kept, rerun to continue"


def usage_line(exc: click.UsageError) -> str:
    """click's usage error as one line: `no such option --sinc (did you mean --since?)`."""
    if isinstance(exc, click.NoSuchOption):
        import difflib

        close = difflib.get_close_matches(exc.option_name, exc.possibilities or [], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"no such option {exc.option_name}{hint}"
    text = " ".join(exc.format_message().split()).rstrip(".")
    text = text[:1].lower() + text[1:]
    # click's "No such command 'verdit'. Did you mean 'verdict'?" as one clause
    text = re.sub(r"\. Did you mean (.+)\?$", r" (did you mean \1?)", text)
    path = exc.ctx.command_path if exc.ctx is not None else "pdforensics"
    return f"{text}; see `{path} -h`"


def _check_requested(argv: list[str]) -> bool:
    return "--check" in argv


def _fail(exc: BaseException, argv: list[str]) -> NoReturn:
    """One line and the exit code for each kind of failure; under --check the plugin's UNKNOWN."""
    if isinstance(exc, SystemExit):
        raise exc
    if isinstance(exc, click.NoArgsIsHelpError):
        sys.stdout.write(exc.format_message() + "\n")
        sys.exit(EXIT_USAGE)
    text, code = _describe(exc)
    if _check_requested(argv):  # a monitoring plugin's own failure is UNKNOWN, never CRITICAL
        sys.stdout.write(f"UNKNOWN - pdforensics: {text}\n")
        sys.exit(3)
    _err(text)
    sys.exit(code)


def _describe(exc: BaseException) -> tuple[str, int]:
    if isinstance(exc, click.UsageError):
        return usage_line(exc), EXIT_USAGE
    if isinstance(exc, click.ClickException):
        return " ".join(exc.format_message().split()), exc.exit_code
    if isinstance(exc, PdfError):
        return str(exc), exc.exit_code
    if isinstance(exc, (KeyboardInterrupt, typer.Abort)) or is_interrupt(exc):
        return INTERRUPTED, interrupt_exit_code()
    if isinstance(exc, BrokenPipeError):  # `pdforensics ... | head`: stop quietly
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the interpreter flushes it at exit
        sys.exit(0)
    if os.environ.get("PDFORENSICS_DEBUG") or not isinstance(exc, Exception):
        raise exc
    first = (str(exc).strip().splitlines() or [""])[0]
    # I/O and database failures no command mapped itself: the documented codes, not "internal"
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None and isinstance(exc, duckdb.Error) and is_database_fault(exc):
        return f"database error: {first}", DatabaseError.exit_code
    if isinstance(exc, OSError) and exc.errno in _OUTPUT_ERRNOS:
        where = f" {exc.filename}" if exc.filename else ""
        return f"cannot write{where}: {exc.strerror}", OutputError.exit_code
    return (
        f"internal error: {type(exc).__name__}: {first} (set PDFORENSICS_DEBUG=1 for the traceback)",
        EXIT_INTERNAL,
    )


def _quiet_unraisable(info: sys.UnraisableHookArgs) -> None:
    # Ctrl-C landing while a reader thread's generator is closed is reported by Python as
    # "Exception ignored in ..." with a traceback; the interruption itself is reported once, below.
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        return
    sys.__unraisablehook__(info)


def _command_name(command: typer.models.CommandInfo) -> str:
    return command.name or typer.main.get_command_name(getattr(command.callback, "__name__", ""))


def app_for(argv: Sequence[str]) -> typer.Typer:
    """The app with only the command `argv` runs: typer builds each registered command's options
    from its signature on every run (~45 ms for all of them), and a run uses one. The whole app when
    `argv` names none (no arguments, -h, --version, a misspelt command click should name)."""
    name = argv[0] if argv else ""
    chosen = [c for c in app.registered_commands if _command_name(c) == name]
    if not chosen:
        return app
    lean = copy.copy(app)
    lean.registered_commands = chosen
    return lean


def main() -> None:
    if not os.environ.get("PDFORENSICS_DEBUG"):
        sys.unraisablehook = _quiet_unraisable
    install_stop_signals()  # SIGTERM, SIGHUP: the same orderly stop as Ctrl-C (exit 143, 129)
    app_for(sys.argv[1:])()  # errors become one line in _OneLineErrors.main, also under typer's CliRunner


if __name__ == "__main__":
    main()
