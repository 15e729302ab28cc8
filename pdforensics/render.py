"""Terminal output of the CLI: summaries, verdicts, timelines (rich, on stdout)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

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
    return Console(file=sys.stdout, highlight=False, soft_wrap=True)


def print_ingest_summary(s: IngestSummary) -> None:
    con = _console()
    table = Table(title=f"ingest #{s.ingest_id} into {s.db}", title_justify="left")
    for col in ("host", "unit", "engine", "lines", "recognised", "parse errors"):
        table.add_column(col, justify="right" if col in ("lines", "recognised", "parse errors") else "left")
    for u in s.units:
        table.add_row(u.host or "-", u.unit or "-", u.engine or "-", f"{u.lines:,}", f"{u.recognised:,}",
                      f"{u.parse_errors:,}")  # fmt: skip
    if s.units:
        con.print(table)
    con.print(
        f"read {s.records:,} records with {', '.join(s.readers) or '-'} in {s.elapsed_s:.2f}s "
        f"({s.lines_per_s:,.0f}/s): stored {s.stored:,}, already stored {s.duplicates:,}, "
        f"outside selection {s.skipped:,}, rejected {s.rejected:,}, unrecognised {s.unrecognised:,}, "
        f"parse errors {s.parse_errors:,}"
    )
    if s.null_messages:
        con.print(
            f"  {s.null_messages:,} records had a null MESSAGE (journalctl -o json drops fields over 4 KiB "
            "unless --all): re-export with `journalctl --all -o json`"
        )
    for reason, n in s.rejects_by_reason.items():
        con.print(f"  rejected {n:,}: {reason}")


def print_verdict_line(v: Verdict) -> None:
    data = v.to_json()
    reason = data["reasons"][0] if data["reasons"] else ""
    style = VERDICT_STYLE.get(data["verdict"], "bold")
    _console().print(f"verdict: [{style}]{data['verdict']}[/] ({data['evidence_level']}) {reason}")


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
