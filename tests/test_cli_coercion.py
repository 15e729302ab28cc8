"""Option values converted without pydantic (pdforensics.cli_coercion) are typer's values.

Every option of every command is given the direct conversion, and on a corpus of spellings (plain
ones, and those the fast path leaves to typer: whitespace, underscores, nan, non-ASCII digits) each
gives what typer's own pydantic adapter gives, or both refuse it. A command run in a fresh process
does not import pydantic, so the ~0.15 s it cost every command cannot come back unnoticed.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from pdforensics.cli import app
from pdforensics.cli_coercion import plain_coercion

SPELLINGS = [
    "5", "-3", "+3", "007", "0", "99999999999999999999", "5.0", "5.", ".5", "5.5", "-0.25", "1e3",
    "1E-3", "1e400", "1e999", "1_000", " 5", "5 ", "", "abc", "nan", "inf", "-inf", "0x10", "٣",
    "5e", "e5", "--5", "1.2.3", "/tmp/x", "rel/path", "-",
]  # fmt: skip


def every_option() -> list[tuple[str, Any]]:
    group = typer.main.get_command(app)
    ctx = group.make_context("pdforensics", [], resilient_parsing=True)
    out = [("(root)", p) for p in [*group.params, group.get_help_option(ctx)]]
    for name, command in group.commands.items():
        out += [(name, p) for p in [*command.params, command.get_help_option(ctx)] if p is not None]
    return out


def test_every_option_is_converted_directly() -> None:
    options = every_option()
    plain_coercion(p for _, p in options)
    left = [
        f"{cmd} {p.name} ({p.type_descriptor.annotation})" for cmd, p in options if p._runtime_param is None
    ]
    assert not left, f"options typer would convert through pydantic: {left}"


def typers(param: Any, value: Any) -> Any:
    try:
        return build_runtime_param(param.type_descriptor).coerce(value, param=param, ctx=None)
    except BadParameter:
        return BadParameter


def ours(param: Any, value: Any) -> Any:
    try:
        return param._runtime_param.coerce(value, param=param, ctx=None)
    except BadParameter:
        return BadParameter


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


def test_each_spelling_gives_typers_value_or_typers_refusal(tmp_path: Path) -> None:
    unreadable = tmp_path / "locked"
    unreadable.write_text("x")
    unreadable.chmod(0)
    options = every_option()
    plain_coercion(p for _, p in options)
    kinds: dict[str, Any] = {}  # one option of each annotation and arity is enough
    for _, p in options:
        kinds.setdefault(f"{p.type_descriptor.annotation}/{p.multiple}", p)
    assert len(kinds) >= 6, kinds.keys()
    diffs = []
    for kind, p in kinds.items():
        values: list[Any] = [(s,) if p.multiple else s for s in SPELLINGS] + [True, False, None, 5]
        values += [(str(unreadable),) if p.multiple else str(unreadable), ("1", "x") if p.multiple else "1"]
        for value in values:
            want, got = typers(p, value), ours(p, value)
            if isinstance(want, list):
                ok = isinstance(got, list) and len(got) == len(want) and all(map(same, want, got))
            else:
                ok = same(want, got) or (want is got is BadParameter)
            if not ok:
                diffs.append(f"{kind} {value!r}: typer {want!r}, ours {got!r}")
    assert not diffs, "\n".join(diffs)


def test_a_command_does_not_import_pydantic(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from pdforensics.cli import app\n"
        "try:\n"
        "    app(['verdict', '--db', sys.argv[1], '--watchdog-timeout', '60', '--since', '10min'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('pydantic' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "none.duckdb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "no database" in out.stderr, out.stderr  # the options were parsed: the command ran
    assert out.stdout.strip() == "False", out.stdout + out.stderr


@pytest.mark.parametrize("bad", ["5x", "1_000x", "nan", " 60"])
def test_a_bad_number_is_one_line_and_a_usage_exit(bad: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    result = CliRunner().invoke(
        app, ["verdict", "--db", str(tmp_path / "none.duckdb"), "--watchdog-timeout", bad]
    )
    if bad in ("nan", " 60"):  # typer's adapter takes them (then the verdict's own checks speak)
        assert "invalid value" not in result.output
    else:
        assert result.exit_code == 2 and "invalid value for '--watchdog-timeout'" in result.output
        assert len(result.output.strip().splitlines()) == 1
