"""Property (issue 12): losing lines never earns a green answer.

For every fixture whose true verdict is not `nothing_stuck`, deleting a contiguous stretch of ONE
engine's lines must never make the verdict `nothing_stuck`, whether the tool is told about the
loss or not:

* `told`: the stretch is replaced by journald's `Suppressed N messages from UNIT` entry at its end
  (stored as parse stores it: a `journal_suppressed` line and event, engine `other`, the named
  unit, `count` = N);
* `untold`: the stretch is simply gone (an engine that stopped logging, an export that lost it).

Stretches are enumerated, not drawn: per fixture and engine, 6 start points (fractions of that
engine's span of lines in the verdict's window) x 3 lengths (shorter than a timeout, about
timeout + grace, the rest of the window) x both modes = 36 cases. A verdict costs about a second
on a busy 2-core machine, so by default each (fixture, engine) runs a fixed, rotating ninth of
its grid (every 9th case, offset by the pair's position: every grid point runs for some pair);
`PDF_PROPERTY_FULL=1` runs every case. Each fixture is ingested once per test run (json, as
tests/test_scenarios.py does: tests/scenario_dbs.py `json_runs`, shared), and each test judges its
own copy; each case runs in a transaction on that copy that is rolled back: delete `lines`/`events` rows, insert the
suppression entry, rebuild the fold summaries (`fold.rebuild`), judge the whole window
(`whole_window_verdict`) and, only where that is green, every instance too (`compute_verdict`).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import duckdb
import pytest
from conftest import private_copy

from pdforensics import fold, store
from pdforensics.paths import fixtures_dir
from pdforensics.verdict import VerdictOptions, compute_verdict, whole_window_verdict

STARTS = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85)
LENGTHS_S = (20.0, 75.0, None)  # None: from the start point to the end of the window
MODES = ("told", "untold")
GRID = list(itertools.product(STARTS, LENGTHS_S, MODES))
STRIDE = 1 if os.environ.get("PDF_PROPERTY_FULL") else 9


def expected_of(name: str) -> dict:
    return json.loads((fixtures_dir() / name / "expected.json").read_text())


# A green window has nothing to lose here: the property is about windows that are not green.
FIXTURES = sorted(
    p.name
    for p in fixtures_dir().iterdir()
    if (p / "expected.json").is_file() and expected_of(p.name)["verdict"] != "nothing_stuck"
)


def options(exp: dict) -> VerdictOptions:
    opts = exp.get("verdict_options", {})
    return VerdictOptions(watchdog_timeout_s=opts.get("watchdog_timeout_s"), since_us=opts.get("since_us"))


def engine_span(con: duckdb.DuckDBPyConnection, engine: str, since_us: int | None) -> tuple[int, int] | None:
    row = con.execute(
        "SELECT min(ts_us), max(ts_us) FROM lines WHERE engine = ? AND ts_us >= coalesce(?, ts_us)",
        [engine, since_us],
    ).fetchone()
    return None if row is None or row[0] is None or row[0] == row[1] else (row[0], row[1])


def delete_stretch(con: duckdb.DuckDBPyConnection, engine: str, lo_us: int, hi_us: int, told: bool) -> int:
    """Delete the engine's lines in [lo_us, hi_us) (and their events); when `told`, store journald's
    `Suppressed N messages from UNIT` entry 1 µs after the last one. Returns N."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE gone AS SELECT * FROM lines WHERE engine = ? AND ts_us >= ? AND ts_us < ?",
        [engine, lo_us, hi_us],
    )
    n = con.execute("SELECT count(*) FROM gone").fetchone()[0]
    if not n:
        return 0
    con.execute("DELETE FROM events WHERE line_id IN (SELECT line_id FROM gone)")
    con.execute("DELETE FROM lines WHERE line_id IN (SELECT line_id FROM gone)")
    if told:
        # journald's own entry: its unit is the one it names (parse re-assigns it), engine `other`
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE sup AS
            SELECT (SELECT max(line_id) FROM lines) + 1 AS line_id, g.ingest_id, g.source, g.source_key,
                -1 - (SELECT max(line_id) FROM lines) AS seq, g.host,
                (SELECT mode(unit) FROM gone) AS unit, g.boot_id, g.ts_us + 1 AS ts_us, $n AS n
            FROM gone AS g ORDER BY g.ts_us DESC, g.line_id DESC LIMIT 1""",
            {"n": n},
        )
        con.execute(
            """
            INSERT INTO lines (line_id, ingest_id, source, source_key, seq, host, unit, engine, boot_id,
                syslog_identifier, priority, ts_us, ts_origin, message, event, entry)
            SELECT line_id, ingest_id, source, source_key, seq, host, unit, 'other', boot_id,
                'systemd-journald', 5, ts_us, 'journal', format('Suppressed {} messages from {}', n, unit),
                'journal_suppressed', 'journald_suppressed'
            FROM sup"""
        )
        con.execute(
            """
            INSERT INTO events (line_id, ts_us, host, unit, engine, boot_id, event, entry, count, extra)
            SELECT line_id, ts_us, host, unit, 'other', boot_id, 'journal_suppressed', 'journald_suppressed',
                n, json_object('unit_named', unit)::VARCHAR
            FROM sup"""
        )
    fold.rebuild(con)  # the summaries still hold the deleted lines: recompute them from what is left
    return n


def cases(name: str, k: int) -> list[tuple[float, float | None, str]]:
    """The share of the grid of this fixture's k-th engine: (start, length, mode)."""
    return GRID[(FIXTURES.index(name) + k) % STRIDE :: STRIDE]


def engines_of(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The engines the lines were tagged with (journald's and systemd's own lines are `other`)."""
    rows = con.execute("SELECT DISTINCT engine FROM lines WHERE engine <> 'other' ORDER BY engine").fetchall()
    return [r[0] for r in rows if r[0] is not None]


def test_the_grid_covers_both_modes_and_every_length() -> None:
    """The sampled share still has every kind of stretch for a first and a second engine."""
    for k in (0, 1):
        picked = {point for name in FIXTURES for point in cases(name, k)}
        assert picked == set(GRID) or len(FIXTURES) < STRIDE


@pytest.mark.parametrize("name", FIXTURES)
def test_deleting_one_engines_lines_never_earns_nothing_stuck(name: str, scenario_db, tmp_path: Path) -> None:
    exp = expected_of(name)
    opts = options(exp)
    con = store.open_db(private_copy(scenario_db("json_runs", name), tmp_path))
    failures, ran = [], 0
    try:
        for k, engine in enumerate(engines_of(con)):
            for start, length, mode in cases(name, k):
                span = engine_span(con, engine, opts.since_us)
                if span is None:
                    continue  # this engine has no lines in the window (a decode-only export): nothing to delete
                lo = span[0] + int((span[1] - span[0]) * start)
                hi = span[1] + 1 if length is None else lo + int(length * 1e6)
                con.begin()
                try:
                    n = delete_stretch(con, engine, lo, hi, mode == "told")
                    # the window's verdict is the worst of the whole window's and each instance's:
                    # a whole window that is not green settles the case without judging a fleet's
                    # every instance
                    green = n and whole_window_verdict(con, opts) == "nothing_stuck"
                    got = compute_verdict(con, opts) if green else None
                finally:
                    con.rollback()
                if not n:
                    continue
                ran += 1
                if got is not None and got.verdict == "nothing_stuck":
                    failures.append(
                        f"{engine} lines {start:.0%} of the span + {length or 'rest'} s, {mode}: {n} lines gone -> "
                        f"nothing_stuck ({' | '.join(got.reasons)[:300]})"
                    )
    finally:
        con.close()
    assert ran, f"{name}: no case deleted anything"
    assert not failures, f"{name} (expected {exp['verdict']}):\n" + "\n".join(failures)
