"""The rules' Spark SQL: queries/views/*.sql translated by pdforensics.spark.translate (pinned
sqlglot) equals the golden files, so a change of a view or of sqlglot shows up as a diff.

Regenerate after changing a view:  .venv/bin/python -m pdforensics.spark.translate --write tests/golden/spark
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

sqlglot = pytest.importorskip("sqlglot")

from pdforensics.spark import translate  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "spark"


# In the Spark group: the translation is kept per process (pdforensics.spark.run.translate_con, keyed
# by the tables' shape, the same in every database) and the Spark tests' worker reuses it.
pytestmark = [pytest.mark.xdist_group("spark")]


@pytest.fixture(scope="module")
def translated() -> tuple[list[translate.Translated], dict[str, str]]:
    from pdforensics.spark import run

    con = translate.empty_database()
    try:
        return run.translate_con(con, {})
    finally:
        con.close()


def test_sqlglot_is_the_pinned_version() -> None:
    assert sqlglot.__version__ == translate.SQLGLOT_VERSION


def test_every_view_is_translated_or_named_not_portable(translated) -> None:
    views, _ = translate.read_views()
    done, failed = translated
    assert {t.name for t in done} | set(failed) == {v.name for v in views}
    assert not {t.name for t in done} & set(failed)


def test_translation_equals_the_golden_files(translated) -> None:
    done, failed = translated
    want = {p.stem: p.read_text(encoding="utf-8") for p in GOLDEN.glob("*.sql")}
    got = {t.name: translate.golden_text(t) for t in done}
    assert sorted(got) == sorted(want), "views added or gone: regenerate the golden files"
    stale = [name for name in got if got[name] != want[name]]
    assert not stale, f"translation changed for {stale}: regenerate the golden files and review the diff"
    listed = (GOLDEN / "NOT_PORTABLE.tsv").read_text(encoding="utf-8").splitlines()
    assert listed == [f"{n}\t{why}" for n, why in sorted(failed.items())]


def test_no_duckdb_only_construct_reaches_spark(translated) -> None:
    """The rewrites leave none of the constructs Spark parses differently or not at all."""
    done, _ = translated
    for t in done:
        # sqlglot writes keywords in upper case; the views' comments, kept, are mostly lower case
        sql = "\n".join(t.statements)
        for bad in (
            "GETVARIABLE",
            "ASOF",
            "BY NAME",
            "UBIGINT",
            "MATERIALIZED",
            " EXCLUDE",
            "COLLECT_LIST(DISTINCT",
        ):
            assert bad not in sql, f"{t.name}: {bad}"


def test_stars_are_expanded_in_duckdb_order() -> None:
    """`* EXCLUDE` / `x.* REPLACE` take their columns from DuckDB's binder, in its order."""
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE t (a INT, b INT, c INT)")
    tree = sqlglot.parse_one("SELECT x.* REPLACE (x.b + 1 AS b), * EXCLUDE (a) FROM t AS x", read="duckdb")
    out = translate.expand_stars(tree, translate.Describer(con)).sql(dialect="duckdb")
    assert out == "SELECT x.a, x.b + 1 AS b, x.c, b, c FROM t AS x"


def test_a_translation_is_kept_for_the_next_process(translated, tmp_path: Path, monkeypatch) -> None:
    """A new process (a `verdict --engine spark`, spark-submit's driver) reads the translation from
    the user's cache instead of paying ~20 s again: written whole, read back equal, keyed (another
    key translates again), and never with PDFORENSICS_CACHE=off."""
    from pdforensics.paths import CACHE_DIR_ENV
    from pdforensics.spark import run

    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "pdforensics"))
    calls: list[str] = []

    def translate_now(label: str):
        def _now():
            calls.append(label)
            return translated

        return _now

    assert run._kept_on_disk("schema A", translate_now("first")) == translated
    (kept,) = (tmp_path / "pdforensics").glob("spark-*.json")
    assert run._kept_on_disk("schema A", translate_now("again")) == translated
    assert calls == ["first"]
    assert run._kept_on_disk("schema B", translate_now("other key")) == translated
    assert calls == ["first", "other key"]
    monkeypatch.setenv("PDFORENSICS_CACHE", "off")
    assert run._kept_on_disk("schema A", translate_now("cache off")) == translated
    assert calls[-1] == "cache off" and kept.is_file()


# Each kind a placeholder stands for: a float in e-notation, fractional floats of both signs, ints
# of both signs and zero, strings with a quote (pdf_instance is read by the instance views), and
# the values translated as they are (NULL, booleans, infinity).
EVERY_KIND = {
    "pdf_watchdog_timeout_s": 1e20,
    "pdf_grace_s": 0.25,
    "pdf_env_timeout_s": -3.5,
    "pdf_since_us": -5,
    "pdf_until_us": 0,
    "pdf_env_unit": "s'x",
    "pdf_instance": "host'1",
    "pdf_fleet_timeout_s": float("inf"),
    "pdf_watchdog_deployed": True,
    "pdf_context_s": None,
}


def test_a_translation_with_placeholders_filled_equals_the_values_own() -> None:
    """The views that read parameters are translated once per kind of values (run.translate_con)
    with placeholders that each value's literal then replaces: the result is what translating the
    values themselves gives, step for step, and the failures are the same."""
    readers = {v.name for v in translate.read_views()[0] if translate.reads_parameters(v)}
    con = translate.empty_database()
    try:
        direct, direct_failed = translate.translate_all(con, EVERY_KIND, only=readers)
        marked, marked_failed = translate.translate_all(con, translate.placeholders(EVERY_KIND), only=readers)
    finally:
        con.close()
    assert {t.name for t in direct} | set(direct_failed) == readers
    assert marked_failed == direct_failed
    filled = translate.fill_placeholders(marked, EVERY_KIND)
    assert [(t.name, t.steps, t.deps) for t in filled] == [(t.name, t.steps, t.deps) for t in direct]
    # the placeholders were there to replace, and none of them is left
    marks = [
        v if isinstance(v, str) else str(abs(v))
        for k, v in translate.placeholders(EVERY_KIND).items()
        if v is not EVERY_KIND[k]
    ]
    assert all(any(m in sql for t in marked for _, sql in t.steps) for m in marks)
    assert not any(m in sql for t in filled for _, sql in t.steps for m in marks)


def test_values_of_one_kind_share_a_translation_and_other_kinds_do_not() -> None:
    kinds = translate.parameter_kinds
    assert kinds({"pdf_watchdog_timeout_s": 60, "pdf_env_unit": "s"}) == kinds(
        {"pdf_watchdog_timeout_s": 600, "pdf_env_unit": "ms"}
    )
    # a fraction changes an integer cast (spark_int_casts), a sign the literal's form (a Neg node)
    for a, b in ((60, 60.0), (60, -60), (0.5, -0.5), (None, 0), (True, False), (float("inf"), 1.0)):
        assert kinds({"pdf_x": a}) != kinds({"pdf_x": b}), (a, b)


def test_the_answer_runs_only_the_views_it_reads(translated) -> None:
    """`verdict --engine spark` creates the answer's views and what they read, in translation
    order, and none of the drill-down's: each view's dependencies come before it."""
    from pdforensics import verdict
    from pdforensics.spark import run

    done, _ = translated
    wanted = (*verdict.ANSWER_RELATIONS, "context")
    needed = run.needed_for(done, wanted)
    names = [t.name for t in needed]
    assert set(wanted) <= set(names)
    assert names == [t.name for t in done if t.name in names]  # the order kept
    for i, t in enumerate(needed):
        assert set(t.deps) <= set(names[:i]), t.name
    assert "request_phases" not in names and "instance_lines" not in names
    leaf = next(t for t in done if not t.deps)
    assert run.needed_for(done, (leaf.name,)) == [leaf]


@pytest.mark.parametrize(
    ("sql", "reads"),
    [
        ("WITH holes AS (SELECT 1) SELECT * FROM holes, observed", ["observed"]),  # context's case
        ("WITH a AS (SELECT * FROM a) SELECT * FROM a", ["a"]),  # a CTE's body reads the relation
        ("WITH RECURSIVE a AS (SELECT * FROM a) SELECT * FROM a", []),
        ("SELECT * FROM (WITH a AS (SELECT 1) SELECT * FROM a) AS s, a, main.b", ["a", "b"]),
    ],
)
def test_a_views_dependencies_are_relations_not_its_ctes(sql: str, reads: list[str]) -> None:
    tree = sqlglot.parse_one(sql, read="duckdb")
    assert sorted(translate._tables_read(tree, {})) == reads


def test_no_view_reads_a_view_built_on_context_twice() -> None:
    """A view is inlined wherever it is read: in a user's own DuckDB session (no table of
    `context`), a second reference plans it, and `context` inside it, again (the verdict planned
    `context` 20 times and took 6-7 s of CPU, 4 s at 14). A view reads such a view once, through a
    MATERIALIZED CTE where it needs it twice. Table macros are left out: they are the rows' one
    definition, read once per pass by design (room_facts' two passes); so are views that do not
    read `context` (params, prefill_instances: planned in no time)."""
    views, _ = translate.read_views()
    deps = {v.name: set(v.deps) for v in views}
    on_context = {"context"}
    while grown := {n for n, d in deps.items() if d & on_context} - on_context:
        on_context |= grown
    twice = {}
    for v in views:
        read = [t.name for t in v.duck.expression.find_all(sqlglot.exp.Table)
                if t.name in on_context - {v.name} and not translate._shadowed(t)]  # fmt: skip
        again = sorted({n for n in read if read.count(n) > 1})
        if again:
            twice[v.name] = again
    assert len(on_context) > 20 and {"requests", "verdict", "inflight_gauge"} <= on_context
    assert twice == {}
