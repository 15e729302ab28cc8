"""Plain option values converted without pydantic: ~0.15 s of every command.

typer 0.29 converts each option of the invoked command through a pydantic TypeAdapter, built when
the command runs, for every option given or not: importing pydantic (~0.085 s) and building ~9
adapters (~0.065 s) was a quarter of `verdict` on a small database. pdforensics' options are
plain `str`, `int`, `float` and `Path` values (lists of them for repeatable ones) with no
constraint, so `plain_coercion` converts those directly; a value in any other spelling (`' 5 '`,
`1_000`, `nan`) and any option with a constraint goes to typer's own adapter, so every answer and
every error message stays typer's (tests/test_cli_coercion.py compares the two on every option).

typer is pinned to <0.30: `_TyperParameter._runtime_param`, `type_descriptor`, `RuntimeParam` and
`coerce_cli_path` are its internals; if they are gone, nothing is replaced (typer's path as is).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

try:
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_path
    from typer.models import ParameterInfo

    _UNSET = ParameterInfo()  # an option declared with no constraint: each field at its default
except ImportError:  # another typer: its own coercion stays
    RuntimeParam = None  # type: ignore[assignment,misc]

# Spellings whose value Python's int()/float() give exactly as pydantic does (ASCII digits only:
# int('٣') is 3, pydantic refuses it; no whitespace, underscores, nan or inf).
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")

_NOT_PLAIN = object()  # a value the fast path leaves to typer's adapter

# ParameterInfo fields that add a check or a conversion of their own: any of them set (not its
# default) and the option is left to typer.
_CONSTRAINTS = (
    "parser", "min", "max", "clamp", "formats", "mode", "lazy", "atomic", "exists", "writable",
    "resolve_path", "allow_dash", "path_type",
)  # fmt: skip


def _int(value: Any) -> Any:
    return int(value) if isinstance(value, str) and _INT.fullmatch(value) else _NOT_PLAIN


def _float(value: Any) -> Any:
    return float(value) if isinstance(value, str) and _FLOAT.fullmatch(value) else _NOT_PLAIN


def _str(value: Any) -> Any:
    return value if isinstance(value, str) else _NOT_PLAIN


def _bool(value: Any) -> Any:  # a flag's own value; a word for it ('yes', from a variable) is typer's
    return value if isinstance(value, bool) else _NOT_PLAIN


_LEAVES: dict[Any, Callable[[Any], Any]] = {int: _int, float: _float, str: _str, Path: _str, bool: _bool}

if RuntimeParam is not None:

    @dataclass(frozen=True)
    class _Plain(RuntimeParam):  # type: ignore[misc,valid-type]
        """One option's conversion: `leaf` per value, typer's adapter for anything else."""

        leaf: Callable[[Any], Any]
        many: bool
        path: bool

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.many and not isinstance(value, list | tuple):
                return self._typers(param)._coerce_value(value, param=param, ctx=ctx)
            got = [self.leaf(v) for v in (value if self.many else [value])]
            if any(g is _NOT_PLAIN for g in got):
                return self._typers(param)._coerce_value(value, param=param, ctx=ctx)
            if self.path:  # typer's checks of a path (readable when it exists), given a Path
                got = [
                    coerce_cli_path(Path(g), self.parameter_info, path_type=Path, param=param, ctx=ctx)
                    for g in got
                ]
            return got if self.many else got[0]

        def _typers(self, param: Any) -> Any:
            return build_runtime_param(param.type_descriptor)


def _plain_leaf(annotation: Any, info: Any) -> tuple[Callable[[Any], Any], bool, bool] | None:
    """(leaf, many, path) for an option this module converts, None for one typer keeps."""
    if any(getattr(info, k, None) != getattr(_UNSET, k, None) for k in _CONSTRAINTS):
        return None
    many = get_origin(annotation) is list
    leaf_type = get_args(annotation)[0] if many else annotation
    leaf = _LEAVES.get(leaf_type)
    if leaf is None:
        return None
    return leaf, many, leaf_type is Path


def plain_coercion(params: Iterable[Any]) -> None:
    """Give each plain option of `params` (click parameters typer made; None skipped) the direct
    conversion."""
    if RuntimeParam is None:
        return
    for param in params:
        if param is None:
            continue
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", 0) is not None:
            continue  # not typer's, or converted already
        if descriptor.file_annotation is not None:
            continue
        found = _plain_leaf(descriptor.annotation, descriptor.parameter_info)
        if found is None:
            continue
        leaf, many, path = found
        param._runtime_param = _Plain(
            parameter_info=descriptor.parameter_info,
            annotation=descriptor.annotation,
            leaf=leaf,
            many=many,
            path=path,
        )
