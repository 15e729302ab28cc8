"""Terminal output of the CLI: summaries, verdicts, timelines (rich, on stdout)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from pdforensics.ingest import IngestSummary
    from pdforensics.verdict import Verdict

VERDICT_STYLE = {
    "nothing_stuck": "bold green",
    "watchdog_fired": "bold yellow",
    "watchdog_missed": "bold red",
    "inconclusive": "bold magenta",
}


def _console() -> Console:
    # Names printed here come from the logs (a journal's _HOSTNAME and _SYSTEMD_UNIT are whatever the
    # sender wrote) or from the user: such text is never rich markup, only Text (or markup=False),
    # and `:name:` emoji codes are off, so a unit called "[/x]" or ":fire:" prints as itself.
    # (rich.markup.escape is not enough: it prints a trailing backslash twice.)
    return Console(file=sys.stdout, highlight=False, soft_wrap=True, emoji=False)


def print_ingest_summary(s: IngestSummary) -> None:
    con = _console()
    table = Table(title=Text(f"ingest #{s.ingest_id} into {s.db}"), title_justify="left")
    for col in ("host", "unit", "engine"):  # names wrap in a narrow terminal, never cut to "…"
        table.add_column(col, overflow="fold")
    for col in ("lines", "recognised", "parse errors"):
        table.add_column(col, justify="right", no_wrap=True)
    for u in s.units:
        table.add_row(*[Text(t) for t in (u.host or "-", u.unit or "-", u.engine or "-")], f"{u.lines:,}",
                      f"{u.recognised:,}", f"{u.parse_errors:,}")  # fmt: skip
    if s.units:
        con.print(table)
    con.print(
        f"read {s.records:,} records with {', '.join(s.readers) or '-'} in {s.elapsed_s:.2f}s "
        f"({s.lines_per_s:,.0f}/s): stored {s.stored:,}, already stored {s.duplicates:,}, "
        f"outside selection {s.skipped:,}, rejected {s.rejected:,}, unrecognised {s.unrecognised:,}, "
        f"parse errors {s.parse_errors:,}",
        markup=False,
    )
    if s.records == 0:
        # An empty ingest is the "found nothing" an operator must not mistake for "nothing happened".
        con.print(
            "  nothing was read: no record in the window for the unit globs "
            "(--since/--until; --unit, default sglang*, `--unit '*'` takes every unit)"
            if s.skipped == 0
            else f"  nothing was selected: all {s.skipped:,} records read were outside the unit globs or the window",
            markup=False,
        )
    if s.null_messages:
        con.print(
            f"  {s.null_messages:,} records had a null MESSAGE (journalctl -o json drops fields over 4 KiB "
            "unless --all): re-export with `journalctl --all -o json`"
        )
    for reason, n in s.rejects_by_reason.items():
        con.print(f"  rejected {n:,}: {reason}", markup=False)


def print_verdict_line(v: Verdict) -> None:
    data = v.to_json()
    reason = data["reasons"][0] if data["reasons"] else ""
    style = VERDICT_STYLE.get(data["verdict"], "bold")
    line = Text.assemble("verdict: ", (data["verdict"], style), f" ({data['evidence_level']}) {reason}")
    _console().print(line)


def print_verdict(v: Verdict, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(v.to_json(), indent=2) + "\n")
        return
    from pdforensics.verdict import render_text

    _console().print(render_text(v), markup=False)


def print_timeline(t: Any, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(t.to_json(), indent=2, default=str) + "\n")
        return
    from pdforensics.verdict import render_timeline

    _console().print(render_timeline(t), markup=False)
