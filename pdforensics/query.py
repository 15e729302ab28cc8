"""`pdforensics sql`: the operator's own questions, and the saved ones in `queries/saved/`.

A query runs on a read-only connection with the verdict's session variables set
(watchdog timeout, grace, window), so the classification views answer the same
way they do for `pdforensics verdict`. Results stream in chunks to the chosen
format; a bad query becomes DuckDB's own message (which carries the LINE and the
caret that mark the position), never a traceback.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import decimal
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import duckdb

from pdforensics import paths, store
from pdforensics.errors import DatabaseError, PdfError, UsageError, is_database_fault
from pdforensics.render import terminal_safe

if TYPE_CHECKING:
    from pdforensics.verdict import VerdictOptions

FORMATS = ("table", "csv", "json", "ndjson", "markdown")
CHUNK_ROWS = 10_000
# The table format is for eyes: on a terminal (or with COLUMNS set) the widest columns are cut
# with "…" until a row fits its width; piped, every character is kept (as csv/json always do).
TABLE_CELL_MIN = 10  # a column cut to fit keeps at least this many characters (and its name)
WHOLE_CELLS_HINT = "`| less -S` or --format csv shows them whole"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class QueryError(PdfError):
    """The query itself is wrong: DuckDB's message, with its position, goes to the user."""

    exit_code = 1


# ------------------------------------------------------------------ saved queries


@dataclass(frozen=True)
class SavedQuery:
    name: str
    description: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")


def saved_dir() -> Path:
    return paths.queries_dir() / "saved"


def saved_queries() -> dict[str, SavedQuery]:
    """Every `queries/saved/<name>.sql`, keyed by name; the description is its first `-- ` line."""
    found: dict[str, SavedQuery] = {}
    folder = saved_dir()
    for path in sorted(folder.glob("*.sql")) if folder.is_dir() else []:
        first = path.read_text(encoding="utf-8").split("\n", 1)[0]
        description = first[2:].strip() if first.startswith("--") else ""
        found[path.stem] = SavedQuery(path.stem, description, path)
    return found


def list_saved(out: TextIO) -> None:
    queries = saved_queries()
    width = max((len(n) for n in queries), default=0)
    for q in queries.values():
        out.write(f"{q.name:{width}s}  {q.description}\n")


def resolve(query: str, con: duckdb.DuckDBPyConnection | None = None) -> tuple[str, str]:
    """(sql, label) for a saved query's name, a table or view name, a .sql file, or SQL text."""
    text = query.strip()
    if _NAME.fullmatch(text):
        saved = saved_queries()
        if text in saved:
            return saved[text].sql, f"saved query {text} ({saved[text].path.name})"
        if con is not None and _is_relation(con, text):
            return f'FROM "{text}"', f"{text}"
        if text.lower() not in _SQL_WORDS:
            # A lone word is never useful SQL: the user meant a saved query or a view.
            raise UsageError(
                f"no saved query, table or view named {text!r}; `pdforensics sql --list` shows the "
                f"saved queries ({', '.join(saved) or 'none installed'})"
            )
    if text.endswith(".sql") and "\n" not in text and Path(text).is_file():
        return Path(text).read_text(encoding="utf-8"), f"query file {text}"
    return query, "query"


def _is_relation(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
    ).fetchone()
    return bool(row and row[0])


# Keywords that are whole statements on their own (`pdforensics sql checkpoint` is DuckDB's business).
_SQL_WORDS = {
    "checkpoint",
    "vacuum",
    "analyze",
    "commit",
    "rollback",
    "begin",
    "show",
    "describe",
    "summarize",
}


# ------------------------------------------------------------------ running


def apply_options(con: duckdb.DuckDBPyConnection, opts: VerdictOptions | None) -> None:
    """Set the views' session variables, so they classify as `pdforensics verdict` does."""
    from pdforensics import verdict

    verdict.apply_options(con, opts)


def ensure_views(con: duckdb.DuckDBPyConnection) -> None:
    """The views, installed (or, read-only with another version's, in the overlay: verdict.ensure_views)."""
    from pdforensics import verdict

    verdict.ensure_views(con)


def view_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    return {r[0] for r in rows}


@contextlib.contextmanager
def prepared(
    con: duckdb.DuckDBPyConnection,
    opts: VerdictOptions | None,
    materialise: bool = True,
    settings: list[str] | None = None,
    label: str = "query",
) -> Iterator[None]:
    """Views present, session variables set, and (when asked) the heavy views computed once.

    The verdict stage shadows the heavy views with temporary tables of their rows for the
    duration of one answer, so each is computed once rather than once per reference; a query
    or an export here is one answer. `settings`: the query's own leading `SET VARIABLE`s, run
    after the options and before the views are computed, so they count.
    """
    from pdforensics import verdict

    ensure_views(con)
    apply_options(con, opts)
    for statement in settings or []:
        execute(con, statement, label)
    cm = getattr(verdict, "materialised", None) or getattr(verdict, "_materialised", None)
    if not materialise or cm is None:
        yield
        return
    with cm(con):
        yield


def split_settings(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], str]:
    """(leading `SET VARIABLE` statements, the rest). The views are computed once per answer,
    before the query runs: a `SET VARIABLE pdf_*` after the first query would be silently
    ignored, so it is refused with the option that does the same."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error:
        return [], sql  # execute() reports the parse error with its position
    settings: list[str] = []
    while statements and _SET_VARIABLE.match(statements[0].query):
        settings.append(statements.pop(0).query)
    for st in statements:
        name = _SET_VARIABLE.match(st.query)
        if name and name.group(1).lower().startswith("pdf_"):
            option = _OPTION_OF.get(name.group(1).lower(), "the matching option")
            raise UsageError(
                f"SET VARIABLE {name.group(1)} after a query has no effect (the views are computed first): "
                f"put it before the first query, or use {option}"
            )
    if not statements:  # nothing but settings: run them as the query (they print nothing)
        return [], sql
    return settings, "\n".join(st.query for st in statements)


_SET_VARIABLE = re.compile(r"\s*SET\s+VARIABLE\s+(\w+)", re.IGNORECASE)
_OPTION_OF = {"pdf_watchdog_timeout_s": "--watchdog-timeout", "pdf_grace_s": "--grace"}


_READS = {"SELECT", "SET", "EXPLAIN", "MULTI", "VARIABLE_SET", "PRAGMA"}


def _worth_materialising(con: duckdb.DuckDBPyConnection, sql: str) -> bool:
    """Only reads of the views: a query over the tables alone need not pay for computing them,
    and DDL/DML must meet the database itself (and its read-only refusal), not the shadows."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error:
        return False  # execute() reports the parse error with its position
    kinds = {st.type.name for st in statements}
    if not kinds or not kinds <= _READS:
        return False
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sql.lower()))
    return bool(words & view_names(con))


def execute(con: duckdb.DuckDBPyConnection, sql: str, label: str = "query") -> duckdb.DuckDBPyConnection:
    """Run SQL; a DuckDB error becomes a QueryError carrying DuckDB's message and position."""
    try:
        return con.execute(sql)
    except duckdb.Error as exc:
        raise _query_error(exc, label) from None


# The views a query reads may be shadowed by temporary tables (verdict.materialised): DuckDB then
# names them `"temp".main.requests`; the user wrote `requests`.
_TEMP_NAME = re.compile(r'"*temp"*\.(?:"*main"*\.)?"*(\w+)"*')


def confine(con: duckdb.DuckDBPyConnection) -> None:
    """From here on the connection reads its database and nothing else: no file read or written
    (`COPY ... TO`, `read_text`, `EXPORT DATABASE`, `ATTACH`), no extension installed or loaded,
    and no setting changed back (DuckDB's `enable_external_access` off, the configuration locked).
    Run after the views are computed and the kept judgements attached: the user's query last."""
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _query_error(exc: duckdb.Error, label: str) -> PdfError:
    """The query's own mistake (1), or the database failing under it (a corrupt block: 4)."""
    if is_database_fault(exc):
        return DatabaseError(
            f"the database could not be read while running the {label}: {str(exc).splitlines()[0]}"
        )
    return QueryError(_explain(exc, label))


def _explain(exc: duckdb.Error, label: str) -> str:
    text = _TEMP_NAME.sub(r'"\1"', str(exc).rstrip())
    if "read-only mode" in text or "attached in read-only" in text:
        text += "\n(pdforensics sql is read-only: `pdforensics ingest` is what writes the database)"
    elif "disabled by configuration" in text or "configuration has been locked" in text:
        text += (
            "\n(pdforensics sql reads the database only: no file, extension or setting;"
            " `pdforensics export` writes files, and DuckDB itself opens the file for anything else)"
        )
    return f"{label} failed: {text}"


def run_query(db: Path, query: str, fmt: str, opts: VerdictOptions | None, out: TextIO) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"unknown --format {fmt!r}; one of: {', '.join(FORMATS)}")
    con = store.open_db(db, read_only=True)
    try:
        ensure_views(con)
        sql, label = resolve(query, con)
        settings, sql = split_settings(con, sql)
        # A query over the tables alone need not pay for computing the views.
        with prepared(con, opts, materialise=_worth_materialising(con, sql), settings=settings, label=label):
            confine(con)
            cur = execute(con, sql, label)
            try:
                write_result(cur, fmt, out)
            except duckdb.Error as exc:  # errors found while fetching (conversion, overflow)
                raise _query_error(exc, label) from None
            except BrokenPipeError:
                _quiet_broken_pipe(out)
    finally:
        con.close()


def _quiet_broken_pipe(out: TextIO) -> None:
    """`pdforensics sql ... | head`: stop quietly, as other Unix tools do."""
    if out is sys.stdout:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


# ------------------------------------------------------------------ output formats


@dataclass(frozen=True)
class Column:
    name: str
    type: str

    @property
    def numeric(self) -> bool:
        t = self.type.upper()
        return t.startswith(("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT",
                             "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE",
                             "DECIMAL", "REAL"))  # fmt: skip

    @property
    def json(self) -> bool:
        return self.type.upper() == "JSON"


def _columns(cur: duckdb.DuckDBPyConnection) -> list[Column]:
    seen: dict[str, int] = {}
    cols = []
    for name, type_, *_ in cur.description or []:
        # Duplicate names (SELECT 1 AS a, 2 AS a) would collapse in JSON objects.
        n = seen.get(name, 0)
        seen[name] = n + 1
        cols.append(Column(name if n == 0 else f"{name}_{n}", str(type_)))
    return cols


def _chunks(cur: duckdb.DuckDBPyConnection) -> Iterator[list[tuple]]:
    while rows := cur.fetchmany(CHUNK_ROWS):
        yield rows


def write_result(cur: duckdb.DuckDBPyConnection, fmt: str, out: TextIO) -> None:
    if cur.description is None:  # SET, PRAGMA without a result
        return
    cols = _columns(cur)
    WRITERS[fmt](cols, _chunks(cur), out)


def _json_value(value: Any, col: Column | None = None) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # JSON has no NaN or Infinity
    if col is not None and col.json and isinstance(value, str):
        try:
            return json.loads(value)  # a JSON column is embedded as JSON, not as a string
        except ValueError:
            return value
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return str(value)


def _text(value: Any) -> str:
    """One cell as text (csv, table, markdown): DuckDB's spelling for NULL-free scalars."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, list | tuple | dict):
        return json.dumps(_json_value(value), ensure_ascii=False)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def _write_csv(cols: list[Column], chunks: Iterator[list[tuple]], out: TextIO) -> None:
    w = csv.writer(out, lineterminator="\n")
    w.writerow([c.name for c in cols])
    for rows in chunks:
        w.writerows([["" if v is None else _text(v) for v in row] for row in rows])


def _dumps(cols: list[Column], row: tuple) -> str:
    obj = {c.name: _json_value(v, c) for c, v in zip(cols, row, strict=True)}
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, default=str)


def _write_ndjson(cols: list[Column], chunks: Iterator[list[tuple]], out: TextIO) -> None:
    for rows in chunks:
        out.write("".join(_dumps(cols, r) + "\n" for r in rows))


def _write_json(cols: list[Column], chunks: Iterator[list[tuple]], out: TextIO) -> None:
    out.write("[")
    sep = "\n"
    for rows in chunks:
        for r in rows:
            out.write(sep + _dumps(cols, r))
            sep = ",\n"
    out.write("\n]\n" if sep != "\n" else "]\n")


def _md_cell(value: Any) -> str:
    if value is None:
        return "NULL"
    text = _text(value).replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", "<br>")
    return terminal_safe(text, one_line=True)


def _write_markdown(cols: list[Column], chunks: Iterator[list[tuple]], out: TextIO) -> None:
    out.write("| " + " | ".join(_md_cell(c.name) for c in cols) + " |\n")
    out.write("|" + "|".join("---:" if c.numeric else "---" for c in cols) + "|\n")
    for rows in chunks:
        out.write("".join("| " + " | ".join(_md_cell(v) for v in r) + " |\n" for r in rows))


def _table_cell(value: Any) -> str:
    text = "NULL" if value is None else _text(value)
    return terminal_safe(text.replace("\r", "").replace("\n", "⏎").replace("\t", " "), one_line=True)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def table_width(out: TextIO) -> int | None:
    """The columns a table must fit: COLUMNS when set (as for every other tool), the terminal's
    when `out` is one, else None: piped or redirected, cells are kept whole."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    isatty = getattr(out, "isatty", None)
    if isatty is None or not isatty():
        return None
    try:
        return os.get_terminal_size(out.fileno()).columns
    except (OSError, ValueError):
        return 80


def fit_widths(names: Sequence[str], widths: Sequence[int], total: int) -> list[int]:
    """Column widths whose row (two spaces between columns) fits `total` characters: the widest
    columns are narrowed first, each down to TABLE_CELL_MIN at most (a name is never cut). When even
    that does not fit, the row is as narrow as it can be, and the terminal wraps it."""
    floors = [min(w, max(len(n), TABLE_CELL_MIN)) for n, w in zip(names, widths, strict=True)]
    room = total - 2 * (len(widths) - 1)

    def at(cap: int) -> list[int]:
        return [max(min(w, cap), f) for w, f in zip(widths, floors, strict=True)]

    if sum(widths) <= room:
        return list(widths)
    lo, hi = 0, max(widths)  # the largest cap whose row fits: at(lo) fits (or is the floors)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if sum(at(mid)) <= room else (lo, mid - 1)
    fitted = at(lo)
    spare = room - sum(fitted)  # less than one more character for each column still cut
    for i, w in enumerate(widths):
        if spare > 0 and fitted[i] < w:
            fitted[i] += 1
            spare -= 1
    return fitted


def _write_table(cols: list[Column], chunks: Iterator[list[tuple]], out: TextIO) -> None:
    """Aligned columns; widths come from the first chunk so a long result still streams. Cut to
    fit the terminal (table_width), and the footer says so and how to see the cells whole."""
    first = next(chunks, [])
    cells = [[_table_cell(v) for v in r] for r in first]
    names = [terminal_safe(c.name, one_line=True) for c in cols]
    widths = [max([len(n), *(len(r[i]) for r in cells)]) for i, n in enumerate(names)]
    total = table_width(out)
    if total is not None:
        widths = fit_widths(names, widths, total)
    aligns: list[Callable[[str, int], str]] = [
        (lambda s, w: s.rjust(w)) if c.numeric else (lambda s, w: s.ljust(w)) for c in cols
    ]
    cut = False

    def line(row: Sequence[str]) -> str:
        nonlocal cut
        if total is not None:
            fitted = [_cut(s, w) for s, w in zip(row, widths, strict=True)]
            cut = cut or fitted != list(row)
            row = fitted
        return "  ".join(a(s, w) for a, s, w in zip(aligns, row, widths, strict=True)).rstrip() + "\n"

    out.write(line(names))
    out.write("  ".join("─" * w for w in widths) + "\n")
    n = len(cells)
    out.write("".join(line(r) for r in cells))
    for rows in chunks:
        n += len(rows)
        out.write("".join(line([_table_cell(v) for v in r]) for r in rows))
    footer = f"{n:,} row{'s' if n != 1 else ''}"
    if cut:
        footer += f"; cells cut with … to fit {total} columns: {WHOLE_CELLS_HINT}"
    out.write(f"({footer})\n")


WRITERS: dict[str, Callable[[list[Column], Iterator[list[tuple]], TextIO], None]] = {
    "table": _write_table,
    "csv": _write_csv,
    "json": _write_json,
    "ndjson": _write_ndjson,
    "markdown": _write_markdown,
}
