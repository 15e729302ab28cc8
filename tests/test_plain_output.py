"""The verdict's and a timeline's text are printed without rich (`render.print_plain`): byte for
byte what rich's console printed them as (markup off, soft wrap), piped or on a terminal of any
width, for the fixtures' own texts and for text a log line can carry (wide characters, markup-like
brackets, trailing blanks, very long lines, tabs)."""

from __future__ import annotations

import io

import pytest

from pdforensics import render, verdict

WIDTHS = (render.PIPE_WIDTH, 80, 12)

AWKWARD = [
    "",
    "one line",
    "trailing blanks   \n  and leading ones",
    "x" * 10_000,
    "漢字の行 and an emoji 🔥 and e\u0301 combined, a zero\u200bwidth space",
    "[bold]not markup[/] :fire: \\",
    "blank lines\n\n\nbetween\n",
    "a tab\there and\tthere",
    "שלום right to left",
    "\\x1b[31m as terminal_safe writes an escape",
]


def rich_output(text: str, width: int, terminal: bool) -> str:
    buf = io.StringIO()
    render._console(buf, width=width, force_terminal=terminal).print(text, markup=False)
    return buf.getvalue()


def plain_output(text: str) -> str:
    buf = io.StringIO()
    render.print_plain(text, buf)
    return buf.getvalue()


def assert_printed_as_rich(text: str) -> None:
    for width in WIDTHS:
        for terminal in (False, True):
            assert plain_output(text) == rich_output(text, width, terminal), (width, terminal, text[:80])


@pytest.mark.parametrize("text", AWKWARD, ids=range(len(AWKWARD)))
def test_awkward_text_prints_as_rich_printed_it(text: str) -> None:
    assert_printed_as_rich(render.terminal_safe(text))


@pytest.mark.parametrize("scenario", ["wedge_after_decode_restart", "abort_storm_pins", "l0_anonymous_pins"])
def test_the_fixtures_verdict_and_timelines_print_as_rich_printed_them(scenario: str, scenario_db) -> None:
    from pdforensics import store

    con = store.open_db(scenario_db("json", scenario), read_only=True)
    try:
        v = verdict.compute_verdict(con)
        assert_printed_as_rich(render.terminal_safe(verdict.render_text(v)))
        rooms = [r["bootstrap_room"] for r in v.to_json()["requests"]][:3]
        assert rooms, "a fixture with requests that did not complete"
        for room in rooms:
            t = verdict.request_timeline(con, str(room))
            assert len(t.lines) > 0
            assert_printed_as_rich(render.terminal_safe(verdict.render_timeline(t)))
    finally:
        con.close()


def test_the_verdict_command_does_not_import_rich(tmp_path) -> None:
    """The point of it: `verdict` and `timeline` print without loading rich (~35 ms)."""
    import subprocess
    import sys

    from tests.verdict_helpers import Log

    log = Log(tmp_path / "v.duckdb")
    log.completed(10, 7)
    log.close()
    code = (
        "import sys; from pdforensics.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'rich' not in sys.modules, 'rich was imported'\n"
    )
    for args, said in ((["verdict"], "verdict: "), (["timeline", "p7"], "bootstrap_room 7")):
        res = subprocess.run(
            [sys.executable, "-c", code, *args, "--db", str(log.path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        assert said in res.stdout
