"""Terminal output of the CLI: summaries, verdicts, timelines (rich, on stdout).

rich is imported where something is printed with it, not on import: `--json` and `--check`
output never load it."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from pdforensics.ingest import IngestSummary
    from pdforensics.verdict import Verdict

# C0 and C1 controls: ESC opens CSI/OSC sequences (OSC 52 writes the clipboard, CSI 2J clears
# the screen), 0x9b is CSI alone on some terminals. Newline and tab are kept where text has lines.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def terminal_safe(text: str, one_line: bool = False) -> str:
    """Text from log lines (messages, hosts, units: whatever a sender wrote) as a terminal shows
    it harmlessly: each control character as `\\xNN`, but newline and tab unless `one_line`
    (a table cell)."""
    pattern = _CONTROL_ONE_LINE if one_line else _CONTROL
    return pattern.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


VERDICT_STYLE = {
    "nothing_stuck": "bold green",
    "watchdog_fired": "bold yellow",
    "watchdog_missed": "bold red",
    "inconclusive": "bold magenta",
}


def _console(stream: Any = None, **options: Any) -> Console:
    # Names printed here come from the logs (a journal's _HOSTNAME and _SYSTEMD_UNIT are whatever the
    # sender wrote) or from the user: such text is never rich markup, only Text (or markup=False),
    # and `:name:` emoji codes are off, so a unit called "[/x]" or ":fire:" prints as itself.
    # (rich.markup.escape is not enough: it prints a trailing backslash twice.)
    # Piped output (no tty) is not cut to rich's 80-column default: a table is as wide as its rows.
    from rich.console import Console

    stream = sys.stdout if stream is None else stream
    settings = {"highlight": False, "soft_wrap": True, "emoji": False, "width": _width(stream)}
    return Console(file=stream, **(settings | options))


def print_plain(text: str, stream: Any = None) -> None:
    """Unstyled text as `_console()` prints it with markup off: the same characters and a newline
    (soft wrap: no line is cut or padded). rich, ~35 ms to import, only where it changes them: a
    tab, which it expands to the next 8-cell stop."""
    stream = sys.stdout if stream is None else stream
    if "\t" in text:
        _console(stream).print(text, markup=False)
    else:
        stream.write(text + "\n")


# Columns for output that is not a terminal: wide enough for any table row, small enough that rich's
# per-line buffers stay cheap. COLUMNS, when set, wins (as for every other tool).
PIPE_WIDTH = 4096


def _width(stream: Any) -> int | None:
    if os.environ.get("COLUMNS", "").strip().isdigit():
        return int(os.environ["COLUMNS"])
    isatty = getattr(stream, "isatty", None)
    return None if isatty is not None and isatty() else PIPE_WIDTH


# DirectNotes.describe (sources/journalfile.py): how a journal source's files were read
_READ_DIRECTLY = re.compile(r"journal files: ([\d,]+) read directly(?:, ([\d,]+) by python-systemd)?")


def readers_phrase(s: IngestSummary) -> str:
    """What read the records. A journal source's reader is python-systemd, which hands journal
    files to the direct reader (s.reading_notes): the files' readers are named, not the one that
    read none of them ("with python-systemd" above "journal files: 1 read directly")."""
    readers = list(s.readers)
    if "python-systemd" not in readers or not s.reading_notes:
        return ", ".join(readers) or "-"
    direct = by_python_systemd = 0
    for note in s.reading_notes:
        if m := _READ_DIRECTLY.match(note):
            direct += int(m.group(1).replace(",", ""))
            by_python_systemd += int((m.group(2) or "0").replace(",", ""))
    local = "journal" in s.sources  # the local journal (JournalSource's label) is python-systemd's
    at = readers.index("python-systemd")
    readers[at : at + 1] = (["the direct journal reader"] if direct else []) + (
        ["python-systemd"] if by_python_systemd or local or not direct else []
    )
    return ", ".join(readers)


def print_ingest_summary(s: IngestSummary) -> None:
    from rich.table import Table
    from rich.text import Text

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
    read = s.records + s.skipped + s.rejected
    con.print(
        f"read {read:,} records with {readers_phrase(s)} in {s.elapsed_s:.2f}s "
        f"({read / s.elapsed_s if s.elapsed_s else 0:,.0f}/s): stored {s.stored:,}, "
        f"already stored {s.duplicates:,}, outside selection {s.skipped:,}, rejected {s.rejected:,}, "
        f"unrecognised {s.unrecognised:,}, parse errors {s.parse_errors:,}",
        markup=False,
    )
    for note in s.reading_notes:
        con.print(f"  {note}", markup=False)
    if s.context_s:
        heads = f"{s.head_lines:,} lines of the units' incarnation starts and " if s.head_lines else ""
        con.print(
            f"  context: {heads}the {s.context_s / 60:g} min before --since were read as well "
            "(the verdict reads them for what they say of the window, never judges them)",
            markup=False,
        )
    unmatched = s.unmatched_units
    if unmatched:
        present = s.units_present
        con.print(
            f"  --unit {' '.join(repr(g) for g in unmatched)} matched no unit; the sources hold "
            + (
                f"{len(present)}: {', '.join(present[:40])}" + (", …" if len(present) > 40 else "")
                if present
                else "none"
            )
            + " (`--unit '*'` takes every unit)",
            markup=False,
        )
    elif s.records == 0:
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
    for line in source_notes(s):
        con.print(f"  {line}", markup=False)


def _where(st: Any) -> str:
    src = (st.source or "-").removeprefix("file:")
    return src if st.source and st.source.startswith("file:") else f"{src} {st.host or '-'}/{st.unit or '-'}"


SHOWN_UNITS = 3  # host/units named in a note for a source; more are counted


def _per_source(stats: list[Any], count: Callable[[Any], int], what: str) -> list[str]:
    """One note per source for the lines `count` finds: a file or collection of a fleet's journals
    holds many host/units, and a note per host/unit repeated the same words once for each."""
    by_source: dict[str | None, list[Any]] = {}
    for st in stats:
        by_source.setdefault(st.source, []).append(st)
    notes = []
    for group in by_source.values():
        hit = [st for st in group if count(st)]
        if len(group) == 1 and hit:
            notes.append(f"{count(hit[0]):,} of {hit[0].lines:,} lines of {_where(hit[0])} {what}")
        elif hit:
            src = (group[0].source or "-").removeprefix("file:")
            units = [f"{st.host or '-'}/{st.unit or '-'}" for st in hit]
            named = ", ".join(units[:SHOWN_UNITS]) + (", …" if len(units) > SHOWN_UNITS else "")
            notes.append(
                f"{sum(map(count, hit)):,} of {sum(st.lines for st in group):,} lines of {src} "
                f"({len(hit)} of its {len(group)} host/units: {named}) {what}"
            )
    return notes


def source_notes(s: IngestSummary) -> list[str]:
    """What the prefix and time passes did not understand or had to assume, per source and unit."""
    notes = _per_source(
        s.source_stats,
        lambda st: st.no_time if st.no_time * 2 > st.lines else 0,
        "have no timestamp I know: check the format, or pass --tz/--date",
    )
    notes += _per_source(
        s.source_stats,
        lambda st: st.no_time if st.no_time * 2 <= st.lines else 0,
        "have no time of their own (they inherit one)",
    )
    notes += _per_source(
        s.source_stats,
        lambda st: st.no_prefix,
        "have no prefix I know and no catalog entry (`pdforensics sql unrecognised_lines` shows them)",
    )
    for st in s.source_stats:
        where = _where(st)
        if st.engine_by_name and st.engine_by_lines and st.engine_by_name != st.engine_by_lines:
            notes.append(
                f"{where}: the name says {st.engine_by_name}, its lines show {st.engine_by_lines}: "
                "the lines win"
            )
        if st.time_only:
            notes.append(f"{st.time_only:,} time-only lines of {where} dated from {st.date_from}")
        if st.joined:
            notes.append(
                f"{st.joined:,} lines of {where} joined into the record before them (split or wrapped)"
            )
    zones: dict[str, list[str]] = {}
    for st in s.source_stats:
        if st.zone and "from --tz" not in st.zone:
            zones.setdefault(st.zone, []).append(_where(st))
    for zone, wheres in zones.items():
        notes.append(f"zone-less times read as {zone}: {', '.join(wheres)}")
    return notes


def print_verdict_line(v: Verdict) -> None:
    from rich.text import Text

    data = v.to_json()
    reason = data["reasons"][0] if data["reasons"] else ""
    style = VERDICT_STYLE.get(data["verdict"], "bold")
    line = Text.assemble(
        "verdict: ", (data["verdict"], style), terminal_safe(f" ({data['evidence_level']}) {reason}")
    )
    _console().print(line)


def print_verdict(v: Verdict, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(v.to_json(), indent=2) + "\n")
        return
    from pdforensics.verdict import render_text

    print_plain(terminal_safe(render_text(v)))


def print_timeline(t: Any, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(t.to_json(), indent=2, default=str) + "\n")
        return
    from pdforensics.verdict import render_timeline

    print_plain(terminal_safe(render_timeline(t)))


# Monitoring-plugin status words, by `verdict --check` exit code.
CHECK_STATUS = ("OK", "WARNING", "CRITICAL", "UNKNOWN")
CHECK_CODES = {"nothing_stuck": 0, "watchdog_fired": 1, "watchdog_missed": 2, "inconclusive": 3}


# Reasons that describe the setting (evidence level, watchdog deployment) rather than decide.
_CONTEXT_REASONS = ("evidence level ", "watchdog deployed", "watchdog not deployed", "watchdog deployment")


def deciding_reason(reasons: list[str]) -> str:
    """The first reason that decides the verdict (the evidence and deployment lines come first)."""
    return next((r for r in reasons if not r.startswith(_CONTEXT_REASONS)), reasons[0] if reasons else "")


def check_code(v: Verdict) -> int:
    """The exit code of `--check`: 0 nothing_stuck, 1 watchdog_fired, 2 watchdog_missed, 3 inconclusive;
    critical (2) too for a watchdog that fires but never recovers (wedged), and for a queue the
    watchdog does not watch frozen with requests in it (stuck elsewhere)."""
    if (v.verdict == "watchdog_fired" and v.recovery == "wedged") or v.stuck_elsewhere:
        return 2
    return CHECK_CODES.get(v.verdict, 3)


def check_line(v: Verdict) -> str:
    """`STATUS - text | perfdata`, the monitoring-plugin convention (Nagios, Icinga, Sensu)."""
    data = v.to_json()
    status = CHECK_STATUS[check_code(v)]
    reason = " ".join(deciding_reason(data["reasons"]).split()).replace("|", "/")  # "|" starts perfdata
    perf = " ".join(f"{k}={n}" for k, n in data["counts"].items() if isinstance(n, int))
    text = f"{status} - {data['verdict']} ({data['evidence_level']})" + (f": {reason}" if reason else "")
    return f"{text} | {perf}" if perf else text


def print_check(v: Verdict) -> None:
    sys.stdout.write(terminal_safe(check_line(v)) + "\n")


def ingest_json(s: IngestSummary) -> dict[str, Any]:
    from dataclasses import asdict

    data = asdict(s)
    data["read"] = s.records + s.skipped + s.rejected
    return data


def print_ingest_json(s: IngestSummary, v: Verdict | None) -> None:
    doc = {"ingest": ingest_json(s), "verdict": None if v is None else v.to_json()}
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
