"""The line prefixes parse recognises, kept as data (``prefixes.toml``; see its header).

A user file (``--prefixes FILE``) has the same layout: a form with the name of a bundled one
replaces it, new forms are tried before the bundled ones of their kind.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl

from pdforensics.catalog.files import read_toml_text
from pdforensics.errors import UsageError

BUNDLED = Path(__file__).with_name("prefixes.toml")
KINDS = ("sglang", "outer", "repair", "clock")
ZONES = ("utc", "local", "epoch")
# Named groups a pattern may use, and what parse does with them (see prefixes.toml).
GROUPS = {"ts", "frac", "tzoff", "epoch_ms", "epoch_s", "host", "unit", "pid", "labels", "partial",
          "stream"}  # fmt: skip


@dataclass(frozen=True)
class PrefixSample:
    line: str
    expect: dict[str, Any]
    date: str | None = None  # the --date the sample is read with


@dataclass(frozen=True)
class Prefix:
    name: str
    kind: str
    pattern: str = ""
    tail: str = ""  # kind sglang: what may follow the seconds inside the brackets
    time_format: str | None = None
    zone: str = "local"
    insert: str = ""  # kind repair: text put in front of the line ({date}: the line's date)
    unquote: bool = False
    description: str = ""
    samples: tuple[PrefixSample, ...] = ()
    origin: str = "bundled"

    @property
    def groups(self) -> list[str]:
        return list(re.compile(self.pattern).groupindex) if self.pattern else []


@dataclass(frozen=True)
class Prefixes:
    forms: tuple[Prefix, ...]
    label_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # host/unit -> label names

    def of_kind(self, kind: str) -> tuple[Prefix, ...]:
        return tuple(p for p in self.forms if p.kind == kind)

    @property
    def sglang(self) -> Prefix:
        return self.of_kind("sglang")[0]


def _check(raw: Any, where: str) -> Prefix:
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: each [[prefix]] must be a table")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where}: a [[prefix]] without a name")
    where = f"{where}: prefix {name!r}"
    known = {"name", "kind", "pattern", "tail", "time_format", "zone", "insert", "unquote", "description",
             "sample"}  # fmt: skip
    if unknown := set(raw) - known:
        raise UsageError(f"{where}: unknown keys {sorted(unknown)}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise UsageError(f"{where}: kind must be one of {', '.join(KINDS)}")
    if raw.get("zone", "local") not in ZONES:
        raise UsageError(f"{where}: zone must be one of {', '.join(ZONES)}")
    regex = raw.get("tail" if kind == "sglang" else "pattern")
    if not isinstance(regex, str) or not regex.startswith("^"):
        raise UsageError(
            f"{where}: needs a {'tail' if kind == 'sglang' else 'pattern'} regex starting with '^'"
        )
    try:
        compiled = re.compile(regex)
        pl.Series(["x"]).str.contains(regex)
    except (re.error, pl.exceptions.PolarsError) as exc:
        raise UsageError(f"{where}: bad regex {regex!r}: {str(exc).splitlines()[0]}") from None
    if bad := set(compiled.groupindex) - GROUPS:
        raise UsageError(f"{where}: unknown groups {sorted(bad)} (known: {', '.join(sorted(GROUPS))})")
    if "ts" in compiled.groupindex and not raw.get("time_format"):
        raise UsageError(f"{where}: a 'ts' group needs time_format")
    samples = raw.get("sample", [])
    if not isinstance(samples, list) or not all(isinstance(s, dict) and isinstance(s.get("line"), str)
                                                for s in samples):  # fmt: skip
        raise UsageError(f"{where}: each [[prefix.sample]] needs line = '...'")
    return Prefix(
        name=name,
        kind=kind,
        pattern=regex if kind != "sglang" else "",
        tail=regex if kind == "sglang" else "",
        time_format=raw.get("time_format"),
        zone=raw.get("zone", "local"),
        insert=str(raw.get("insert", "")),
        unquote=bool(raw.get("unquote", False)),
        description=str(raw.get("description", "")),
        samples=tuple(PrefixSample(s["line"], dict(s.get("expect", {})), s.get("date")) for s in samples),
        origin=where.split(":")[0],
    )


def read_prefix_file(path: Path) -> tuple[list[Prefix], dict[str, tuple[str, ...]]]:
    try:
        data = tomllib.loads(read_toml_text(path, "prefix"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(
            f"prefix file {path} is not valid TOML: {(str(exc).splitlines() or [''])[0]}"
        ) from None
    forms = [_check(raw, str(path)) for raw in data.get("prefix", [])]
    names = [p.name for p in forms]
    if dupes := {n for n in names if names.count(n) > 1}:
        raise UsageError(f"prefix file {path}: duplicate prefix names {sorted(dupes)}")
    labels = data.get("labels", {})
    keys = {k: tuple(v) for k, v in labels.items() if k in ("host", "unit") and isinstance(v, list)}
    return forms, keys


@cache
def _bundled() -> tuple[tuple[Prefix, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    forms, keys = read_prefix_file(BUNDLED)
    return tuple(forms), tuple(keys.items())


def load_prefixes(extra: list[Path] | tuple[Path, ...] = ()) -> Prefixes:
    """Bundled forms with user files on top: same name replaces, new forms first (later files win)."""
    bundled, keys = _bundled()
    labels = dict(keys)
    user: list[Prefix] = []
    for path in extra:
        forms, more = read_prefix_file(path)
        labels.update(more)
        for form in forms:
            user = [p for p in user if p.name != form.name] + [form]
    replaced = {p.name for p in user}
    merged = [p for p in user if p.kind != "sglang"] + [p for p in bundled if p.name not in replaced]
    sglang = [p for p in user if p.kind == "sglang"] or [p for p in bundled if p.kind == "sglang"]
    merged = sglang[:1] + [p for p in merged if p.kind != "sglang"]
    return Prefixes(tuple(merged), labels)
