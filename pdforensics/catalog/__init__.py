"""The line catalog: which log messages mean what, kept as data (lnav-style).

Entries live in TOML files: the bundled ``sglang.toml`` plus any ``--catalog``
files a user passes. A user entry with the same ``name`` replaces the bundled
one; new user entries are tried before the bundled ones (first match wins).

An entry may belong to one watchdog *dialect* (``watchdog = "dsv4"``): the lines of one
deployment's inflight-watchdog patch. ``load_catalog(watchdog=NAME)`` keeps that dialect's
entries and drops the other dialects' (default: every known dialect). ``set`` gives fields a
constant value for every line the entry matches (e.g. the KVPoll name of slime's integer
``state=3``, or which upstream timeout a failure line is).

Each entry needs a cheap literal anchor (``starts_with`` on the message body or
``contains``) so the vectorised matcher only runs the regex on candidate rows.
A row whose anchor matches but whose ``pattern`` does not is a *recognised line
that failed to parse*: it is counted as such, never silently treated as noise.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pdforensics.catalog.files import read_toml_text
from pdforensics.errors import UsageError
from pdforensics.schema import ENGINES

BUNDLED = Path(__file__).with_name("sglang.toml")


@dataclass(frozen=True)
class Sample:
    line: str
    expect: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Entry:
    name: str
    event: str
    pattern: str
    starts_with: str | None = None
    contains: str | None = None
    engine: str | None = None
    level: str | None = None
    versions: str | None = None
    description: str = ""
    fields: dict[str, str] = field(default_factory=dict)
    samples: tuple[Sample, ...] = ()
    origin: str = "bundled"
    watchdog: str | None = None  # the watchdog dialect this entry belongs to (None: every deployment)
    # TOML `set`: constant fields of every line the entry matches
    constants: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Catalog:
    entries: tuple[Entry, ...]

    def by_name(self, name: str) -> Entry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(name)

    @property
    def events(self) -> set[str]:
        return {e.event for e in self.entries}

    @property
    def dialects(self) -> list[str]:
        """The watchdog dialects the entries name, sorted."""
        return sorted({e.watchdog for e in self.entries if e.watchdog})


def _check_regex(pattern: str, where: str) -> None:
    """Python's `re` reads the fields; polars' Rust regex (no look-around, no backreferences) is
    checked once per file in `_check_polars_regexes`."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise _bad_regex(where, pattern, exc) from None


def _bad_regex(where: str, pattern: str, exc: Exception) -> UsageError:
    return UsageError(f"{where}: bad regex {pattern!r}: {str(exc).splitlines()[0]}")


def _check_polars_regexes(entries: list[Entry]) -> None:
    """Every pattern of a file compiled by polars in one call (one call each took 0.2 s of every
    command's start-up for the bundled catalog); only when that fails, one by one to name it."""
    patterns = [(pat, e) for e in entries for pat in (e.pattern, *e.fields.values())]
    probe = pl.DataFrame({"s": ["x"] * len(patterns), "p": [pat for pat, _ in patterns]})
    try:
        probe.select(pl.col("s").str.contains(pl.col("p")))
        return
    except pl.exceptions.PolarsError:
        pass
    for pat, e in patterns:
        try:
            pl.Series(["x"]).str.contains(pat)
        except pl.exceptions.PolarsError as exc:
            raise _bad_regex(_entry_where(e.origin, e.name), pat, exc) from None


def _entry_where(origin: str, name: object) -> str:
    """How a message names an entry: its file and its name."""
    return f"{origin}: entry {name!r}"


def _entry_from_toml(raw: Any, origin: str) -> Entry:
    if not isinstance(raw, dict):
        raise UsageError(f"{origin}: each [[entry]] must be a table, not {_toml_type(raw)}")
    where = _entry_where(origin, raw.get("name", "?"))
    for key in ("name", "event", "pattern"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise UsageError(f"{where}: missing or empty '{key}'")
    for key in ("starts_with", "contains", "engine", "level", "versions", "description", "watchdog"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise UsageError(f"{where}: '{key}' must be a string, not {_toml_type(raw[key])}")
    if not raw.get("starts_with") and not raw.get("contains"):
        raise UsageError(f"{where}: needs a literal anchor, 'starts_with' or 'contains'")
    if raw.get("engine") is not None and raw["engine"] not in ENGINES:
        raise UsageError(f"{where}: engine must be one of {', '.join(ENGINES)}")
    fields = raw.get("fields", {})
    if not isinstance(fields, dict) or not all(isinstance(v, str) for v in fields.values()):
        raise UsageError(f"{where}: 'fields' must be a table of name = 'regex' strings")
    fields = dict(fields)
    for pat in [raw["pattern"], *fields.values()]:
        _check_regex(pat, where)
    for fname, pat in fields.items():
        if re.compile(pat).groups != 1:
            raise UsageError(f"{where}: field {fname!r} regex must have exactly one group")
    if raw.get("watchdog") is not None and not DIALECT_NAME.match(raw["watchdog"]):
        raise UsageError(f"{where}: watchdog must be a short lower-case name like 'dsv4' or 'slime'")
    constants = _constants(raw.get("set", {}), where, {*re.compile(raw["pattern"]).groupindex, *fields})
    samples = _samples(raw.get("sample", []), where)
    known = {
        "name", "event", "pattern", "starts_with", "contains", "engine", "level",
        "versions", "description", "fields", "sample", "watchdog", "set",
    }  # fmt: skip
    unknown = set(raw) - known
    if unknown:
        raise UsageError(f"{where}: unknown keys {sorted(unknown)}")
    return Entry(
        name=raw["name"],
        event=raw["event"],
        pattern=raw["pattern"],
        starts_with=raw.get("starts_with"),
        contains=raw.get("contains"),
        engine=raw.get("engine"),
        level=raw.get("level"),
        versions=raw.get("versions"),
        description=raw.get("description", ""),
        fields=fields,
        samples=samples,
        origin=origin,
        watchdog=raw.get("watchdog"),
        constants=constants,
    )


DIALECT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


def _constants(raw: Any, where: str, captured: set[str]) -> dict[str, str]:
    """`set = { name = "value" }`: constant text fields; a name the line also captures is refused
    (which of the two would win is not obvious to a reader)."""
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise UsageError(f"{where}: 'set' must be a table of name = 'value' strings")
    both = sorted(set(raw) & captured)
    if both:
        raise UsageError(f"{where}: {both} both captured and set; keep one")
    return dict(raw)


def _samples(raw: Any, where: str) -> tuple[Sample, ...]:
    ok = isinstance(raw, list) and all(
        isinstance(s, dict) and isinstance(s.get("line"), str) and isinstance(s.get("expect", {}), dict)
        for s in raw
    )
    if not ok:
        raise UsageError(
            f"{where}: each [[entry.sample]] needs line = '...' (and optionally an expect table)"
        )
    return tuple(Sample(line=s["line"], expect=dict(s.get("expect", {}))) for s in raw)


def _toml_type(value: Any) -> str:
    names = {dict: "a table", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
             float: "a float"}  # fmt: skip
    return names.get(type(value), "a date/time")


def read_catalog_file(path: Path) -> list[Entry]:
    """One TOML catalog file; anything wrong with it is a UsageError of one line (exit 2).

    Read and checked once per process while the file stays the same (its path, inode, size and
    modification time): checking the bundled file's ~640 regexes with Python's `re` and polars
    costs ~0.13 s, which a process that ingests many times (a test run, a library user) paid for
    each ingest."""
    try:
        st = path.stat()
    except OSError:
        return _read_catalog_file(path)  # says what is wrong with the path
    return list(_read_catalog_file_once(path, st.st_ino, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=16)
def _read_catalog_file_once(path: Path, inode: int, size: int, mtime_ns: int) -> tuple[Entry, ...]:
    return tuple(_read_catalog_file(path))


def _read_catalog_file(path: Path) -> list[Entry]:
    text = read_toml_text(path, "catalog")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise UsageError(f"catalog file {path} is not valid TOML: {first}") from None
    raw_entries = data.get("entry", [])
    if not isinstance(raw_entries, list):
        raise UsageError(f"catalog file {path}: 'entry' must be an array of tables ([[entry]])")
    entries = [_entry_from_toml(raw, str(path)) for raw in raw_entries]
    _check_polars_regexes(entries)
    names = [e.name for e in entries]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise UsageError(f"catalog file {path}: duplicate entry names {sorted(dupes)}")
    return entries


def load_catalog(extra: list[Path] | tuple[Path, ...] = (), watchdog: str | None = None) -> Catalog:
    """Bundled entries, with user files layered on top (later files win).

    `watchdog` names the deployment's watchdog dialect: entries of other dialects are dropped
    (entries of no dialect always stay). None keeps every dialect. A name no entry uses, bundled
    or user, is a UsageError listing the known ones.
    """
    bundled = read_catalog_file(BUNDLED)
    user: list[Entry] = []
    for path in extra:
        for entry in read_catalog_file(path):
            user = [e for e in user if e.name != entry.name] + [entry]
    overridden = {e.name for e in user}
    full = Catalog(tuple(user + [e for e in bundled if e.name not in overridden]))
    if watchdog is None:
        return full
    known = full.dialects
    if watchdog not in known:
        raise UsageError(f"unknown watchdog dialect {watchdog!r}; known: {', '.join(known)}")
    return Catalog(tuple(e for e in full.entries if e.watchdog in (None, watchdog)))
