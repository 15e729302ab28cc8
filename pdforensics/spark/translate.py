"""queries/views/*.sql (DuckDB) -> Spark SQL, with sqlglot (pinned in the `spark` extra).

`queries/` stays the one source of the rules: nothing here restates a rule. sqlglot's own DuckDB ->
Spark translation is used, after rewrites of DuckDB constructs that it translates silently wrong or
not at all (measured in shared/spark-feasibility.md), each an exact equivalent:

* `getvariable('pdf_x')` -> the parameter's literal (NULL when unset): Spark views take no variables;
* macros (`CREATE MACRO`, scalar and table) are inlined where they are called;
* `WITH x AS MATERIALIZED (...)` -> a plain CTE (a planner hint, no meaning);
* stars are expanded against the schema (`* EXCLUDE`, `* REPLACE`, `UNION ALL BY NAME`), so the
  column lists are explicit;
* `list(x ORDER BY k)` -> an `array_sort` with a comparator over (k, x) structs (sqlglot drops the
  ORDER BY); a bare row alias `list(t)` -> a struct of its columns;
* `ASOF [LEFT] JOIN` -> a range join on the next (or previous) match, from `lead`/`lag`;
* `unnest(list, recursive := true)` of structs -> `inline(list)`.

What still does not translate is named in `NOT_PORTABLE` with the exact construct.
Regenerate the golden files after a change of the views (or of sqlglot):
    .venv/bin/python -m pdforensics.spark.translate --write tests/golden/spark
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from pdforensics.paths import queries_dir

SQLGLOT_VERSION = "30.30.0"

# Views that translate but do not yet give DuckDB's result on Spark (found by
# tests/test_spark_equality.py), with the exact construct. Their dependents are not portable either.
NOT_PORTABLE: dict[str, str] = {}

# Parameters (getvariable names) -> Spark literals; an unset one is NULL, as in DuckDB.
Params = dict[str, Any]
# table or view name -> {column: DuckDB type}
Schema = dict[str, dict[str, str]]


@dataclass
class Macro:
    name: str
    params: list[str]
    body: exp.Expression
    table: bool


@dataclass
class View:
    name: str
    file: str
    duck: exp.Create  # the parsed DuckDB statement
    deps: list[str] = field(default_factory=list)  # views (not tables) it reads, in order


@dataclass
class Translated:
    name: str
    steps: list[tuple[str, str]]  # (temp view name, Spark SELECT): <view>__<cte>..., then <view>

    @property
    def statements(self) -> list[str]:
        return [f"CREATE OR REPLACE TEMPORARY VIEW {n} AS\n{q}" for n, q in self.steps]

    deps: list[str]


# ----------------------------------------------------------------------------- reading


def view_files(root: Path | None = None) -> list[Path]:
    return sorted(((root or queries_dir()) / "views").glob("*.sql"))


def views_text(root: Path | None = None) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in view_files(root))


def read_views(root: Path | None = None) -> tuple[list[View], dict[str, Macro]]:
    """Every view and macro of queries/views, in file order (DuckDB's own splitter)."""
    views: list[View] = []
    macros: dict[str, Macro] = {}
    for path in view_files(root):
        for stmt in duckdb.extract_statements(path.read_text(encoding="utf-8")):
            tree = sqlglot.parse_one(stmt.query, read="duckdb")
            if not isinstance(tree, exp.Create):
                continue
            kind = (tree.args.get("kind") or "").upper()
            if kind == "MACRO":
                udf = tree.this
                params = [p.name for p in udf.expressions]
                is_table = isinstance(tree.expression, exp.Query)
                macros[udf.this.name] = Macro(udf.this.name, params, tree.expression, is_table)
            elif kind == "VIEW":
                views.append(View(tree.this.name, path.name, tree))
    names = {v.name for v in views}
    for v in views:
        read = _tables_read(v.duck.expression, macros)
        v.deps = [n for n in dict.fromkeys(read) if n in names and n != v.name]
    return views, macros


def _tables_read(tree: exp.Expression, macros: dict[str, Macro]) -> list[str]:
    out: list[str] = []
    for t in tree.find_all(exp.Table):
        if isinstance(t.this, exp.Anonymous) and t.this.name in macros:
            out += _tables_read(macros[t.this.name].body, macros)
        elif t.name and not _shadowed(t):
            out.append(t.name)
    return out


# ----------------------------------------------------------------------------- rewrites


def _literal(value: Any) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int | float):
        return exp.Literal.number(value)
    return exp.Literal.string(str(value))


def inline_variables(tree: exp.Expression, params: Params) -> exp.Expression:
    def sub(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.lower() == "getvariable":
            return _literal(params.get(node.expressions[0].name))
        return node

    return tree.transform(sub, copy=False)


# A view's translation depends on its parameters' values only through their literals, and on the
# literal's kind (a fractional literal inside an integer cast is rounded, see spark_int_casts; a
# negative number is a Neg node): one translation per kind, with a placeholder of that kind for
# each value, serves every value of the same kinds by replacing the placeholders' text.
_PLACEHOLDER_BASE = 7_310_000_000_000


def _as_it_is(value: Any) -> bool:
    """A value translated as it is, with no placeholder: NULL, a boolean, a non-finite float."""
    return value is None or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value))


def parameter_kinds(params: Params) -> tuple[tuple[str, str], ...]:
    """What the translation of `params` depends on beyond their literals' text: per parameter, its
    kind (int/float and sign, or string); NULL, booleans and non-finite floats as they are."""
    kinds = []
    for name, value in sorted(params.items()):
        if _as_it_is(value):
            kinds.append((name, f"exactly {value!r}"))
        elif isinstance(value, int | float):
            kinds.append((name, f"{type(value).__name__} {'<' if value < 0 else '>='} 0"))
        else:
            kinds.append((name, "string"))
    return tuple(kinds)


def placeholders(params: Params) -> Params:
    """A value of the same kind (parameter_kinds) for each of `params`, none of them in any view."""
    out: Params = {}
    for i, (name, value) in enumerate(sorted(params.items())):
        if _as_it_is(value):
            out[name] = value
        elif isinstance(value, int | float):
            magnitude = _PLACEHOLDER_BASE + i + (0.5 if isinstance(value, float) else 0)
            out[name] = -magnitude if value < 0 else magnitude
        else:
            out[name] = f"pdforensics parameter {i} placeholder"
    return out


def fill_placeholders(translated: list[Translated], params: Params) -> list[Translated]:
    """`translated` (made with placeholders(params)) with each placeholder's literal replaced by
    the literal of its value."""
    texts = [
        (_literal(mark).sql(dialect="spark"), _literal(params[name]).sql(dialect="spark"))
        for name, mark in placeholders(params).items()
        if not _as_it_is(mark)
    ]
    # the longest first, and not inside a longer number
    marks = sorted((re.escape(mark) for mark, _ in texts), key=len, reverse=True)
    pattern = re.compile(f"(?<![0-9])(?:{'|'.join(marks)})(?![0-9])") if texts else None
    value_of = dict(texts)

    def fill(sql: str) -> str:
        return pattern.sub(lambda m: value_of[m.group(0)], sql) if pattern else sql

    return [Translated(t.name, [(name, fill(sql)) for name, sql in t.steps], t.deps) for t in translated]


def _substitute(body: exp.Expression, names: list[str], args: list[exp.Expression]) -> exp.Expression:
    binding = dict(zip(names, args, strict=True))

    def sub(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and node.name in binding:
            return exp.Paren(this=binding[node.name].copy())
        return node

    return body.copy().transform(sub, copy=False)


def inline_macros(tree: exp.Expression, macros: dict[str, Macro]) -> exp.Expression:
    """Scalar macros become their body, table macros a subquery, with the arguments bound."""

    def sub(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous) and node.this.name in macros:
            m = macros[node.this.name]
            body = inline_macros(_substitute(m.body, m.params, list(node.this.expressions)), macros)
            alias = node.alias or m.name
            return exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias)))
        if isinstance(node, exp.Anonymous) and node.name in macros and not macros[node.name].table:
            m = macros[node.name]
            return inline_macros(_substitute(m.body, m.params, list(node.expressions)), macros)
        return node

    return tree.transform(sub, copy=False)


def drop_materialized(tree: exp.Expression) -> exp.Expression:
    for cte in tree.find_all(exp.CTE):
        cte.set("materialized", None)
    return tree


# ----------------------------------------------------------------------------- stars (by DuckDB)


class Describer:
    """Column names of a part of a view, as DuckDB's binder sees them: the exact expansion of
    `* EXCLUDE`, `* REPLACE`, `UNION BY NAME` and row aliases, with no rule restated here."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self._ctes: dict[int, tuple[exp.With, list[tuple[str, str, set[str]]]]] = {}

    def columns(self, sql: str) -> list[str]:
        # binding is enough: a relation is planned, never run
        return list(self.con.sql(sql).columns)

    def ctes(self, w: exp.With) -> list[tuple[str, str, set[str]]]:
        """A WITH's CTEs: (name, DuckDB text, names it reads), written once per WITH (a view's
        every star is bound inside the same CTEs: copying and writing them each time was most of
        a translation). The rewrites that later change a CTE (stars made explicit, UNION BY NAME
        made positional, a row alias made a struct) keep its column names, all the binder is
        asked for."""
        kept = self._ctes.get(id(w))
        if kept is None or kept[0] is not w:
            parts = [
                (c.alias_or_name.lower(), c.sql(dialect="duckdb"), _reads(c.this)) for c in w.expressions
            ]
            kept = self._ctes[id(w)] = (w, parts)
        return kept[1]


def _reads(*nodes: exp.Expression) -> set[str]:
    """Every relation name read anywhere under `nodes` (a superset of what they need)."""
    return {t.name.lower() for node in nodes for t in node.find_all(exp.Table) if t.name}


def _scoped_sql(node: exp.Expression, sql: str, reads: set[str], desc: Describer) -> str:
    """`sql` (which reads `reads`) inside every WITH visible at `node`, nested as they are so
    inner names shadow outer ones, with the CTEs it reads directly or through others (binding
    the others is ~0.15 s a star here and cannot change a column): DuckDB can bind it alone."""
    parent: exp.Expression | None = node
    reads = set(reads)
    while parent is not None:
        w = parent.args.get("with_") or parent.args.get("with")
        if isinstance(w, exp.With):
            ctes = desc.ctes(w)
            wanted: set[str] = set()
            for name, _, needs in reversed(ctes):  # a CTE reads only those before it
                if name in reads:
                    wanted.add(name)
                    reads |= needs
            if wanted:
                text = ", ".join(t for name, t, _ in ctes if name in wanted)
                sql = f"WITH {text} SELECT * FROM ({sql}) AS __scope"
        parent = parent.parent
    return sql


def _star_columns(select: exp.Select, table: str | None, desc: Describer) -> list[str]:
    """The columns `table.*` (or `*`) stands for in `select`: its FROM and JOINs, projected."""
    star: exp.Expression = (
        exp.Column(this=exp.Star(), table=exp.to_identifier(table)) if table else exp.Star()
    )
    parts = [f"SELECT {star.sql(dialect='duckdb')}"]
    sources: list[exp.Expression] = []
    for key in ("from_", "from", "joins"):
        val = select.args.get(key)
        if val is not None:
            sources.extend(val if isinstance(val, list) else [val])
    parts.extend(j.sql(dialect="duckdb") for j in sources)
    return desc.columns(_scoped_sql(select, " ".join(parts), _reads(*sources), desc))


def _col(name: str, table: str | None) -> exp.Column:
    return exp.column(name, table=table, quoted=not re.fullmatch(r"[a-z_][a-z0-9_]*", name))


def expand_stars(tree: exp.Expression, desc: Describer) -> exp.Expression:
    """`x.* EXCLUDE (..)` / `* REPLACE (..)` -> explicit columns, in DuckDB's order."""
    for select in list(tree.find_all(exp.Select)):
        out: list[exp.Expression] = []
        changed = False
        for proj in select.expressions:
            star = proj.this if isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star) else proj
            if not isinstance(star, exp.Star) or not (star.args.get("except_") or star.args.get("replace")):
                out.append(proj)
                continue
            table = proj.table if isinstance(proj, exp.Column) else None
            drop = {c.name for c in star.args.get("except_") or []}
            repl = {a.alias: a for a in star.args.get("replace") or []}
            for name in _star_columns(select, table or None, desc):
                if name in drop:
                    continue
                out.append(repl[name].copy() if name in repl else _col(name, table or None))
            changed = True
        if changed:
            select.set("expressions", out)
    return tree


def _by_name_side(q: exp.Expression, have: list[str], names: list[str], alias: str) -> exp.Select:
    cols = [_col(n, alias) if n in have else exp.alias_(exp.Null(), n) for n in names]
    return exp.Select(expressions=cols).from_(
        exp.Subquery(this=q.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias)))
    )


def union_by_name(tree: exp.Expression, desc: Describer) -> exp.Expression:
    """`a UNION ALL BY NAME b` -> positional, each side projected onto the union of the names."""
    for union in list(tree.find_all(exp.Union)):
        if not union.args.get("by_name"):
            continue
        left, right = union.this, union.expression
        lcols = desc.columns(_scoped_sql(union, left.sql(dialect="duckdb"), _reads(left), desc))
        rcols = desc.columns(_scoped_sql(union, right.sql(dialect="duckdb"), _reads(right), desc))
        names = lcols + [c for c in rcols if c not in lcols]

        union.set("this", _by_name_side(left, lcols, names, "__l"))
        union.set("expression", _by_name_side(right, rcols, names, "__r"))
        union.set("by_name", None)
    return tree


def _aliases(select: exp.Select) -> set[str]:
    names: set[str] = set()
    sources = [select.args.get("from_") or select.args.get("from"), *list(select.args.get("joins") or [])]
    for src in sources:
        if src is None:
            continue
        t = src.this
        if t is not None and (t.alias_or_name):
            names.add(t.alias_or_name)
    return names


def row_structs(tree: exp.Expression, desc: Describer) -> exp.Expression:
    """A bare row alias inside an aggregate (`list(o ORDER BY ..)`) -> a struct of its columns."""
    for select in list(tree.find_all(exp.Select)):
        aliases = _aliases(select)
        for agg in list(select.find_all(exp.ArrayAgg)):
            if agg.find_ancestor(exp.Select) is not select:
                continue
            target = agg.this.this if isinstance(agg.this, exp.Order) else agg.this
            if isinstance(target, exp.Column) and not target.table and target.name in aliases:
                cols = _star_columns(select, target.name, desc)
                struct = exp.Struct(
                    expressions=[
                        exp.PropertyEQ(
                            this=exp.to_identifier(c, quoted=True), expression=_col(c, target.name)
                        )
                        for c in cols
                    ]
                )
                target.replace(struct)
    return tree


# ----------------------------------------------------------------------------- Spark forms


def _spark(node: exp.Expression) -> str:
    return node.sql(dialect="spark")


def _parse_spark(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="spark")


def _comparator(keys: list[exp.Ordered]) -> str:
    """An array_sort comparator over structs with fields k0.. that orders as DuckDB's ORDER BY
    (ASC/DESC, NULLS FIRST/LAST as written; DuckDB's default is NULLS LAST)."""
    expr = "0"
    for i in reversed(range(len(keys))):
        k = keys[i]
        lo, hi = ("1", "-1") if k.args.get("desc") else ("-1", "1")
        null_l = "-1" if k.args.get("nulls_first") else "1"
        null_r = "1" if k.args.get("nulls_first") else "-1"
        expr = (
            f"CASE WHEN l.k{i} IS NULL AND r.k{i} IS NULL THEN {expr} WHEN l.k{i} IS NULL THEN {null_l} "
            f"WHEN r.k{i} IS NULL THEN {null_r} WHEN l.k{i} < r.k{i} THEN {lo} WHEN l.k{i} > r.k{i} THEN {hi} "
            f"ELSE {expr} END"
        )
    return f"(l, r) -> {expr}"


def _list_agg(agg: exp.ArrayAgg, where: exp.Expression | None) -> exp.Expression:
    """DuckDB `list([DISTINCT] x [ORDER BY ..]) [FILTER (WHERE ..)]` exactly: NULL elements are
    kept (each is wrapped in a struct, which collect_list keeps), no rows gives NULL (not []),
    and the ORDER BY is applied by array_sort (collect_list has no order)."""
    inner = agg.this
    keys: list[exp.Ordered] = []
    distinct = False
    if isinstance(inner, exp.Order):
        keys = list(inner.expressions)
        inner = inner.this
    if isinstance(inner, exp.Distinct):
        distinct = True
        inner = inner.expressions[0]
    fields = [f"'v', {_spark(inner)}"] + [f"'k{i}', {_spark(k.this)}" for i, k in enumerate(keys)]
    fn = "collect_set" if distinct else "collect_list"
    filt = f" FILTER (WHERE {_spark(where.this)})" if where is not None else ""
    arr = f"{fn}(named_struct({', '.join(fields)})){filt}"
    if keys:
        arr = f"array_sort({arr}, {_comparator(keys)})"
    return _parse_spark(f"CASE WHEN size({arr}) = 0 THEN NULL ELSE transform({arr}, s -> s.v) END")


def spark_lists(tree: exp.Expression) -> exp.Expression:
    def sub(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Filter) and isinstance(node.this, exp.ArrayAgg):
            return _list_agg(node.this, node.expression)
        if isinstance(node, exp.ArrayAgg) and not isinstance(node.parent, exp.Filter):
            if isinstance(node.parent, exp.Window):
                raise NotPortable("list() as a window function")
            return _list_agg(node, None)
        return node

    return tree.transform(sub, copy=False)


_FORMAT_FIELD = re.compile(r"\{\{|\}\}|\{(:[^}]*)?\}")


def _format_piece(spec: str | None, arg: exp.Expression) -> str:
    if not spec:
        return f"CAST({_spark(arg)} AS STRING)"
    m = re.fullmatch(r":\.(\d+)f", spec)
    if not m:
        raise NotPortable(f"format() field {{{spec}}}")
    # fmt rounds half to even; Java's %f rounds half up: round half-even first
    return f"format_string('%.{m.group(1)}f', bround({_spark(arg)}, {m.group(1)}))"


def spark_format(tree: exp.Expression) -> exp.Expression:
    """DuckDB `format('{} .. {:.1f}', ..)` -> concat(..): NULL when any argument is NULL, as DuckDB."""

    def sub(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Anonymous | exp.Format) or type(node).__name__ == "FormatString"):
            return node
        name = node.name.lower() if isinstance(node, exp.Anonymous) else "format"
        if name != "format":
            return node
        args = (
            [node.this, *node.expressions] if not isinstance(node, exp.Anonymous) else list(node.expressions)
        )
        fmt = args[0]
        if not (isinstance(fmt, exp.Literal) and fmt.is_string):
            raise NotPortable("format() with a computed format string")
        # a format() nested in an argument first: the rewritten node's subtree is not visited again
        text, rest, parts, pos = fmt.this, iter(spark_format(a.copy()) for a in args[1:]), [], 0
        for m in _FORMAT_FIELD.finditer(text):
            lit = text[pos : m.start()]
            pos = m.end()
            if m.group(0) in ("{{", "}}"):
                lit += m.group(0)[0]
                parts.append("'" + lit.replace("'", "\\'") + "'")
                continue
            if lit:
                parts.append("'" + lit.replace("'", "\\'") + "'")
            parts.append(_format_piece(m.group(1), next(rest)))
        if text[pos:]:
            parts.append("'" + text[pos:].replace("'", "\\'") + "'")
        return _parse_spark(f"concat({', '.join(parts) or chr(39) * 2})")

    return tree.transform(sub, copy=False)


_INTS = {exp.DataType.Type.BIGINT, exp.DataType.Type.INT, exp.DataType.Type.SMALLINT, exp.DataType.Type.TINYINT,
         exp.DataType.Type.UBIGINT}  # fmt: skip


def _maybe_fractional(node: exp.Expression) -> bool:
    """The heuristic that a cast's operand may be fractional: a division, a median or average, a
    decimal literal (1e6, 0.5) or a cast to DOUBLE inside it."""
    for n in node.walk():
        if isinstance(n, exp.Div | exp.Median | exp.Avg):
            return True
        if isinstance(n, exp.Literal) and not n.is_string and re.search(r"[.eE]", n.this):
            return True
        if isinstance(n, exp.Cast) and n.to.this in {exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT}:
            return True
    return False


def spark_any_value(tree: exp.Expression) -> exp.Expression:
    """DuckDB's any_value skips NULLs: Spark's `any_value(x, true)` (sqlglot writes `ANY_VALUE(x)
    IGNORE NULLS`, which Spark cannot parse before a FILTER clause)."""

    def sub(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.IgnoreNulls) and isinstance(node.this, exp.AnyValue):
            node = node.this
        if isinstance(node, exp.AnyValue):
            return exp.Anonymous(this="any_value", expressions=[node.this.copy(), exp.true()])
        return node

    return tree.transform(sub, copy=False)


def spark_slices(tree: exp.Expression) -> exp.Expression:
    """DuckDB `list[a:b]` (1-based, both ends kept) -> `slice(list, a, b - a + 1)`."""

    def sub(node: exp.Expression) -> exp.Expression:
        if not (
            isinstance(node, exp.Bracket)
            and len(node.expressions) == 1
            and isinstance(node.expressions[0], exp.Slice)
        ):
            return node
        sl = node.expressions[0]
        lo, hi = sl.this, sl.expression
        if not (
            isinstance(lo, exp.Literal) and isinstance(hi, exp.Literal) and int(lo.this) >= 1 <= int(hi.this)
        ):
            raise NotPortable("a list slice with other than literal bounds >= 1")
        n = int(hi.this) - int(lo.this) + 1
        return exp.Anonymous(
            this="slice",
            expressions=[node.this.copy(), exp.Literal.number(int(lo.this)), exp.Literal.number(n)],
        )

    return tree.transform(sub, copy=False)


def spark_list_position(tree: exp.Expression) -> exp.Expression:
    """DuckDB `list_position(l, x)` (NULL when absent) -> `nullif(array_position(l, x), 0)`."""

    def sub(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.lower() in ("list_position", "array_position"):
            pos = exp.Anonymous(this="array_position", expressions=[e.copy() for e in node.expressions])
            return exp.Nullif(this=pos, expression=exp.Literal.number(0))
        return node

    return tree.transform(sub, copy=False)


def spark_arg_min_max(tree: exp.Expression) -> exp.Expression:
    """DuckDB `arg_min(x, v)` skips rows whose x is NULL (arg_min_null keeps them); Spark's min_by
    does not, but skips NULL orderings: `min_by(x, CASE WHEN x IS NOT NULL THEN v END)`."""
    for node in list(tree.find_all(exp.ArgMin, exp.ArgMax)):
        x, v = node.this, node.expression
        guarded = exp.Case(
            ifs=[exp.If(this=exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null())), true=v.copy())]
        )
        node.set("expression", guarded)
    return tree


_STRFTIME = {
    "%Y": "yyyy",
    "%m": "MM",
    "%d": "dd",
    "%H": "HH",
    "%M": "mm",
    "%S": "ss",
    "%f": "SSSSSS",
    "%%": "%",
}


def spark_strftime(tree: exp.Expression) -> exp.Expression:
    """DuckDB `strftime(ts, '%Y-%m-%d %H:%M:%SZ')` -> `date_format(ts, "yyyy-MM-dd HH:mm:ss'Z'")`:
    sqlglot leaves the literal letters unquoted, and Java reads a bare `Z` as the zone offset
    (`+0000`)."""

    def sub(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.TimeToStr):
            return node
        fmt = node.args.get("format")
        if not (isinstance(fmt, exp.Literal) and fmt.is_string):
            raise NotPortable("strftime() with a computed format")
        parts = []
        for tok in re.findall(r"%.|[^%]+", fmt.this):
            if tok.startswith("%"):
                if tok not in _STRFTIME:
                    raise NotPortable(f"strftime() field {tok}")
                parts.append(_STRFTIME[tok])
            else:
                parts.append("'" + tok.replace("'", "''") + "'" if re.search(r"[A-Za-z']", tok) else tok)
        return exp.Anonymous(
            this="date_format", expressions=[node.this.copy(), exp.Literal.string("".join(parts))]
        )

    return tree.transform(sub, copy=False)


def spark_types(tree: exp.Expression) -> exp.Expression:
    """UBIGINT (rooms) -> DECIMAL(20,0): the type Spark reads a Parquet UINT_64 as, exactly."""
    for dt in list(tree.find_all(exp.DataType)):
        if dt.this == exp.DataType.Type.UBIGINT:
            dt.replace(exp.DataType.build("DECIMAL(20,0)"))
    return tree


def spark_int_casts(tree: exp.Expression) -> exp.Expression:
    """DuckDB rounds a DOUBLE cast to an integer half to even; Spark truncates: bround first."""
    for cast in list(tree.find_all(exp.Cast)):
        if isinstance(cast, exp.TryCast) or cast.to.this not in _INTS or not _maybe_fractional(cast.this):
            continue
        cast.set("this", exp.Anonymous(this="bround", expressions=[cast.this.copy()]))
    return tree


def spark_unnest(tree: exp.Expression) -> exp.Expression:
    """`unnest(list_of_structs, recursive := true)` -> inline(..) (a row per element, a column per field)."""

    def sub(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Explode) and any(
            isinstance(a, exp.PropertyEQ) and a.name.lower() == "recursive" for a in node.expressions
        ):
            return exp.Anonymous(this="inline", expressions=[node.this.copy()])
        return node

    return tree.transform(sub, copy=False)


def _asof_parts(on: exp.Expression, right: str) -> tuple[list[exp.EQ], exp.Expression, exp.Expression, str]:
    """The equalities, and (left expr, right column, operator as `right OP left`) of an ASOF ON."""
    conj = list(on.flatten()) if isinstance(on, exp.And) else [on]
    eqs = [c for c in conj if isinstance(c, exp.EQ)]
    ineq = [c for c in conj if not isinstance(c, exp.EQ)]
    if len(ineq) != 1:
        raise NotPortable("ASOF JOIN without exactly one inequality")
    c = ineq[0]
    flip = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}
    ops = {exp.GTE: ">=", exp.GT: ">", exp.LTE: "<=", exp.LT: "<"}
    cls = type(c)
    if cls not in ops:
        raise NotPortable("ASOF JOIN inequality")
    if c.this.find(exp.Column) and c.this.find(exp.Column).table == right:
        return eqs, c.expression, c.this, ops[cls]
    return eqs, c.this, c.expression, ops[flip[cls]]


def spark_asof(tree: exp.Expression) -> exp.Expression:
    """`l ASOF LEFT JOIN r ON eqs AND r.y <= l.x` -> a join on the one r row whose y is the last
    <= x (the next y, from lead(), is past x); >= / > take the first, from lag()."""
    for join in list(tree.find_all(exp.Join)):
        if (join.args.get("method") or "").upper() != "ASOF":
            continue
        src = join.this
        alias = src.alias_or_name
        eqs, left_x, right_y, op = _asof_parts(join.args["on"], alias)
        keys = []
        for eq in eqs:
            side = eq.this if eq.this.table == alias else eq.expression
            keys.append(_spark(exp.column(side.name)))
        y = right_y.name
        inner = src.this.copy() if isinstance(src, exp.Subquery) else exp.table_(src.name)
        inner_sql = f"({_spark(inner)})" if isinstance(src, exp.Subquery) else _spark(inner)
        part = f"PARTITION BY {', '.join(keys)} " if keys else ""
        lx, ry = _spark(left_x), f"{alias}.{y}"
        if op in ("<=", "<"):
            nxt = f"lead({y}) OVER ({part}ORDER BY {y} NULLS LAST)"
            edge = f"({alias}.__asof_edge IS NULL OR {lx} {'<' if op == '<=' else '<='} {alias}.__asof_edge)"
        else:
            nxt = f"lag({y}) OVER ({part}ORDER BY {y} NULLS LAST)"
            edge = f"({alias}.__asof_edge IS NULL OR {lx} {'>' if op == '>=' else '>='} {alias}.__asof_edge)"
        sub = _parse_spark(f"SELECT *, {nxt} AS __asof_edge FROM {inner_sql} AS __asof_src")
        join.set("this", exp.Subquery(this=sub, alias=exp.TableAlias(this=exp.to_identifier(alias))))
        cond = " AND ".join([_spark(e) for e in eqs] + [f"{ry} {op} {lx}", edge])
        join.set("on", _parse_spark(f"SELECT 1 FROM a WHERE {cond}").args["where"].this)
        join.set("method", None)
    return tree


# ----------------------------------------------------------------------------- translation


class NotPortable(Exception):
    """A view uses a construct this translator does not turn into exact Spark SQL."""


def split_steps(view: str, body: exp.Expression, every_cte: bool = False) -> list[tuple[str, exp.Expression]]:
    """DuckDB's MATERIALIZED top-level CTEs as their own steps `<view>__<cte>`, then the view's
    own SELECT; each step keeps (in its own WITH) the plain CTEs it reads. The runner checkpoints
    every step (pdforensics.spark.run): Spark inlines every reference to a view or CTE and
    analyses the whole stack again at each (minutes and heap exhaustion on `context` when nothing
    is cut), even under CACHE TABLE; a checkpointed step is a leaf. DuckDB computes its
    MATERIALIZED steps once for the same reason, so those are where the rules' author cut.
    `every_cte`: every top-level CTE a step (more Spark jobs, each smaller)."""
    w = body.args.get("with_")
    if not isinstance(w, exp.With):
        return [(view, body)]
    body = body.copy()
    ctes = list(body.args["with_"].expressions)
    body.set("with_", None)
    cut = {c.alias for c in ctes if every_cte or c.args.get("materialized")}
    names = {a: f"{view}__{a}" for a in cut}
    plain = {c.alias: c for c in ctes if c.alias not in cut}
    for q in [c.this for c in ctes] + [body]:
        for t in list(q.find_all(exp.Table)):
            if not t.args.get("db") and t.name in names and not _shadowed(t, q):
                alias = t.alias_or_name
                t.set("this", exp.to_identifier(names[t.name]))
                if not t.alias:
                    t.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    steps = [(names[c.alias], c.this) for c in ctes if c.alias in cut] + [(view, body)]
    out: list[tuple[str, exp.Expression]] = []
    for name, q in steps:
        reads = _plain_ctes_read(q, plain)
        if reads:
            q = q.copy()
            q.set("with_", exp.With(expressions=[plain[a].copy() for a in plain if a in reads]))
        out.append((name, q))
    return out


def _plain_ctes_read(q: exp.Expression, plain: dict[str, exp.CTE]) -> set[str]:
    """The plain (not cut) CTEs `q` reads, directly or through each other."""
    seen: set[str] = set()
    todo = [q]
    while todo:
        node = todo.pop()
        for t in node.find_all(exp.Table):
            if not t.args.get("db") and t.name in plain and t.name not in seen and not _shadowed(t, node):
                seen.add(t.name)
                todo.append(plain[t.name].this)
    return seen


def _shadowed(t: exp.Table, top: exp.Expression | None = None) -> bool:
    """A WITH between `t` and `top` (the whole tree when None) defines a CTE of `t`'s name that `t`
    sees: `t` means that CTE, not the relation (views have CTEs named like other views: `context`'s
    `holes`). A CTE's own body sees only the CTEs before it (and itself, in a WITH RECURSIVE)."""
    if t.args.get("db"):
        return False
    came_from: exp.Expression | None = None
    node, stop = t.parent, (top.parent if top is not None else None)
    while node is not None and node is not stop:
        if isinstance(node, exp.CTE):
            came_from = node
        w = node.args.get("with_")  # sqlglot 30's key
        if isinstance(w, exp.With):
            ctes = list(w.expressions)
            k = next((i for i, c in enumerate(ctes) if c is came_from), None)
            visible = ctes if k is None else ctes[: k + 1] if w.args.get("recursive") else ctes[:k]
            if any(c.alias == t.name for c in visible):
                return True
            came_from = None
        node = node.parent
    return False


def translate_view(
    view: View, macros: dict[str, Macro], desc: Describer, params: Params | None = None
) -> list[tuple[str, str]]:
    """The Spark SELECTs that make the view, named: a step per top-level CTE, then the view."""
    body = view.duck.expression.copy()
    body = inline_variables(body, params or {})
    body = inline_macros(body, macros)
    # exact expansions by DuckDB's binder first (they read the DuckDB form)
    body = expand_stars(body, desc)
    body = union_by_name(body, desc)
    body = row_structs(body, desc)
    out = []
    for name, step in split_steps(view.name, body):
        step = drop_materialized(step)
        # then the Spark forms
        for rewrite in (
            spark_slices,
            spark_int_casts,
            spark_types,
            spark_any_value,
            spark_arg_min_max,
            spark_list_position,
            spark_strftime,
            spark_unnest,
            spark_asof,
            spark_lists,
            spark_format,
        ):
            step = rewrite(step)
        sql = step.sql(dialect="spark", pretty=True)
        out.append((name, sql))
    return out


def reads_parameters(view: View) -> bool:
    """The view reads a session variable (the `params` view): its translation depends on them."""
    return any(
        isinstance(n, exp.Anonymous) and n.name.lower() == "getvariable" for n in view.duck.expression.walk()
    )


def translate_all(
    con: duckdb.DuckDBPyConnection,
    params: Params | None = None,
    root: Path | None = None,
    only: set[str] | None = None,
) -> tuple[list[Translated], dict[str, str]]:
    """Every view in file order; the second value names the views that did not translate, and why.
    `con`: a DuckDB database of the same schema with the views installed (it binds the stars).
    `only`: translate just these views (their dependencies are assumed translated)."""
    views, macros = read_views(root)
    out: list[Translated] = []
    failed: dict[str, str] = {}
    desc = Describer(con)
    for v in views:
        if only is not None and v.name not in only:
            continue
        if v.name in NOT_PORTABLE:
            failed[v.name] = NOT_PORTABLE[v.name]
            continue
        blocked = [d for d in v.deps if d in failed]
        if blocked:
            failed[v.name] = f"reads {', '.join(blocked)}, not portable"
            continue
        try:
            out.append(Translated(v.name, translate_view(v, macros, desc, params), v.deps))
        except (NotPortable, sqlglot.errors.SqlglotError, duckdb.Error) as exc:
            failed[v.name] = str(exc).splitlines()[0]
    return out, failed


# ----------------------------------------------------------------------------- schema


def duckdb_schema(con: duckdb.DuckDBPyConnection) -> Schema:
    """Columns of the database's tables and of the views installed on `con` (temporary or not)."""
    rows = con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE schema_name = 'main' AND NOT internal ORDER BY database_name, table_name, column_index"
    ).fetchall()
    schema: Schema = {}
    for table, column, dtype in rows:
        schema.setdefault(table, {}).setdefault(column, dtype)
    return schema


def empty_database() -> duckdb.DuckDBPyConnection:
    """A fresh pdforensics database in memory with the views installed (for the golden files)."""
    from pdforensics import store, verdict

    con = duckdb.connect(":memory:")
    store.plan_views_fast(con)
    store.create_schema(con)
    verdict.install_views(con, temporary=True)
    return con


def golden_text(t: Translated) -> str:
    head = f"-- {t.name}: generated by pdforensics.spark.translate (sqlglot {sqlglot.__version__}); do not edit\n"
    return head + "".join(f"{st};\n\n" for st in t.statements)


def write_golden(folder: Path, translated: Iterable[Translated], failed: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.sql"):
        old.unlink()
    for t in translated:
        (folder / f"{t.name}.sql").write_text(golden_text(t), encoding="utf-8")
    lines = [f"{name}\t{why}" for name, why in sorted(failed.items())]
    (folder / "NOT_PORTABLE.tsv").write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="write the golden files into this folder")
    ap.add_argument("--view", help="print one view's Spark SQL")
    args = ap.parse_args(argv)
    translated, failed = translate_all(empty_database())
    if args.write:
        write_golden(args.write, translated, failed)
    for t in translated:
        if args.view in (None, t.name) and not args.write:
            print(golden_text(t))
    for name, why in failed.items():
        print(f"not portable: {name}: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
