"""The documented tables and views are the database's: every relation, column and type, both ways.

The documentation is docs/reference.md (the README keeps what a newcomer needs and links to it).
Its format:

    ### `requests` (view)
    Columns: every column of `events`, then:        <- optional: inherit another's columns
    | column | type | meaning |
    |---|---|---|
    | `bootstrap_room` | UBIGINT | ... |
    | `p_first`, `p_last` | BIGINT | ... |            <- several columns of one type in one row
    | `holes` | list of `holes` rows | ... |          <- STRUCT(<the columns of `holes`>)[]

Run `python tests/test_docs_schema.py` to print the sections the documentation lacks (with
the live columns and types), to paste and then describe.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from pdforensics import query, store

REPO = Path(__file__).resolve().parent.parent
HEADING = re.compile(r"^### `(\w+)` \((table|view)\)\s*$")
INHERIT = re.compile(r"every column of `(\w+)`")
ROW = re.compile(r"^\|\s*((?:`\w+`\s*,?\s*)+)\|\s*([^|]*?)\s*\|")
LIST_OF = re.compile(r"^list of `(\w+)` rows$")

Schema = dict[str, tuple[str, list[tuple[str, str]]]]  # name -> (kind, [(column, type)])


def doc_path() -> Path:
    return REPO / "docs" / "reference.md"


def parse_doc(text: str) -> Schema:
    """Relations as documented; inherited columns are resolved after the whole text is read."""
    raw: dict[str, tuple[str, str | None, list[tuple[str, str]]]] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := HEADING.match(line):
            current = m.group(1)
            assert current not in raw, f"`{current}` is documented twice"
            raw[current] = (m.group(2), None, [])
            continue
        if line.startswith("## ") or line.startswith("### "):
            current = None
            continue
        if current is None:
            continue
        kind, _, cols = raw[current]
        if (m := INHERIT.search(line)) and not cols:
            raw[current] = (kind, m.group(1), cols)
        elif (m := ROW.match(line)) and m.group(1).strip() != "column":
            for name in re.findall(r"`(\w+)`", m.group(1)):
                cols.append((name, m.group(2).strip()))

    def columns(name: str, seen: tuple[str, ...] = ()) -> list[tuple[str, str]]:
        assert name in raw, f"`{seen[-1]}` inherits from `{name}`, which is not documented"
        assert name not in seen, f"inheritance cycle {seen}"
        _, parent, cols = raw[name]
        return (columns(parent, (*seen, name)) if parent else []) + cols

    return {name: (kind, columns(name)) for name, (kind, _, _) in raw.items()}


def live_schema(con: duckdb.DuckDBPyConnection) -> Schema:
    rels = con.execute(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_catalog = current_database()"
    ).fetchall()
    out: Schema = {}
    for name, kind in rels:
        cols = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_catalog = current_database() AND table_name = ? ORDER BY ordinal_position",
            [name],
        ).fetchall()
        out[name] = ("view" if kind == "VIEW" else "table", [(c, t) for c, t in cols])
    return out


def build_live(path: Path) -> Schema:
    """A fresh database as ingest leaves it: the tables, and the views installed."""
    from pdforensics.verdict import install_views

    con = store.open_db(path)
    try:
        install_views(con)
        return live_schema(con)
    finally:
        con.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Schema:
    return build_live(tmp_path_factory.mktemp("docs") / "live.duckdb")


@pytest.fixture(scope="module")
def documented() -> Schema:
    return parse_doc(doc_path().read_text(encoding="utf-8"))


def disagreements(live: Schema, documented: Schema) -> list[str]:
    """Every way the documentation and the database differ, in both directions."""
    problems = [f"undocumented: `{n}` ({live[n][0]})" for n in sorted(set(live) - set(documented))]
    problems += [f"documented but not in the database: `{n}`" for n in sorted(set(documented) - set(live))]
    for name in sorted(set(live) & set(documented)):
        (live_kind, live_cols), (doc_kind, doc_cols) = live[name], documented[name]
        if live_kind != doc_kind:
            problems.append(f"`{name}` is a {live_kind}, documented as a {doc_kind}")
        live_names, doc_names = [c for c, _ in live_cols], [c for c, _ in doc_cols]
        if live_names != doc_names:
            lacking = [c for c in live_names if c not in doc_names]
            stale = [c for c in doc_names if c not in live_names]
            if lacking or stale:
                problems.append(f"`{name}` columns differ: undocumented {lacking}, stale {stale}")
            else:
                at = next(i for i, (a, b) in enumerate(zip(live_names, doc_names, strict=True)) if a != b)
                problems.append(f"`{name}` column order differs at {at}: database {live_names[at:at + 3]}, "
                                f"documented {doc_names[at:at + 3]}")  # fmt: skip
            continue
        for (col, live_type), (_, doc_type) in zip(live_cols, doc_cols, strict=True):
            if not same_type(live_type, doc_type, documented):
                problems.append(f"`{name}.{col}` is {live_type}, documented as {doc_type}")
    return problems


def same_type(live_type: str, doc_type: str, documented: Schema) -> bool:
    """Equal type names; or "list of `x` rows" for a list of structs whose fields are `x`'s columns."""
    m = LIST_OF.match(doc_type)
    if not m:
        return live_type == doc_type
    if m.group(1) not in documented:
        return False
    t = duckdb.sqltype(live_type)
    if t.id != "list" or t.child.id != "struct":
        return False
    fields = [(n, str(ft)) for n, ft in t.child.children]
    return fields == [(c, str(duckdb.sqltype(ct))) for c, ct in documented[m.group(1)][1]]


def test_documentation_matches_the_database(live: Schema, documented: Schema) -> None:
    problems = disagreements(live, documented)
    hint = f"\n(in {doc_path().relative_to(REPO)}; `python tests/test_docs_schema.py` prints what to paste)"
    assert not problems, "\n".join(problems) + hint


def test_comparison_catches_every_kind_of_disagreement(live: Schema) -> None:
    name, (kind, cols) = sorted(live.items())[0]
    assert disagreements(live, dict(live)) == []
    assert disagreements(live, {**live, name: (kind, cols[:-1])})  # a column left out
    assert disagreements(live, {**live, name: (kind, [*cols, ("extra", "BIGINT")])})  # a stale column
    assert disagreements(live, {**live, name: (kind, [(cols[0][0], "NOT_A_TYPE"), *cols[1:]])})  # a type
    assert disagreements(live, {**live, name: ("view" if kind == "table" else "table", cols)})  # the kind
    assert disagreements(live, {k: v for k, v in live.items() if k != name})  # a relation left out
    assert disagreements(live, {**live, "invented": ("view", [("x", "BIGINT")])})  # an invented one


def test_list_of_rows_types_compare_field_by_field() -> None:
    doc: Schema = {"h": ("view", [("host", "VARCHAR"), ("method", "VARCHAR")])}
    assert same_type('STRUCT(host VARCHAR, "method" VARCHAR)[]', "list of `h` rows", doc)
    assert not same_type('STRUCT(host VARCHAR, "method" BIGINT)[]', "list of `h` rows", doc)
    assert not same_type("STRUCT(host VARCHAR)[]", "list of `h` rows", doc)
    assert not same_type('STRUCT(host VARCHAR, "method" VARCHAR)', "list of `h` rows", doc)
    assert not same_type('STRUCT(host VARCHAR, "method" VARCHAR)[]', "list of `nope` rows", doc)


def test_every_saved_query_is_documented() -> None:
    text = doc_path().read_text(encoding="utf-8")
    missing = [name for name in query.saved_queries() if f"`{name}`" not in text]
    assert not missing, f"saved queries not mentioned in {doc_path().name}: {missing}"


def test_parser_reads_rows_groups_and_inheritance() -> None:
    doc = parse_doc(
        "## Tables\n### `a` (table)\n| column | type | meaning |\n|---|---|---|\n"
        "| `x` | BIGINT | one |\n| `y`, `z` | VARCHAR | two, with a \\| pipe |\n"
        "## Views\n### `b` (view)\nColumns: every column of `a`, then:\n\n"
        "| column | type | meaning |\n|---|---|---|\n| `t_us` | BIGINT | three |\n"
    )
    assert doc == {
        "a": ("table", [("x", "BIGINT"), ("y", "VARCHAR"), ("z", "VARCHAR")]),
        "b": ("view", [("x", "BIGINT"), ("y", "VARCHAR"), ("z", "VARCHAR"), ("t_us", "BIGINT")]),
    }


def _blocks(text: str, lang: str) -> list[str]:
    """Fenced code blocks of one language ("" for none), indented ones too."""
    blocks: list[str] = []
    current: list[str] | None = None
    current_lang = ""
    for line in text.splitlines():
        fence = line.strip()
        if fence.startswith("```"):
            if current is None:
                current, current_lang = [], fence[3:].strip()
            else:
                if current_lang == lang:
                    blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


@pytest.fixture(scope="module")
def real_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import synthdb

    return synthdb.build(tmp_path_factory.mktemp("real") / "pdforensics.duckdb")


def test_documented_python_snippet_runs_on_a_real_database(real_db: Path) -> None:
    """Usable as is from DuckDB: the documented snippet, with plain duckdb and no pdforensics."""
    import subprocess

    import synthdb

    (snippet,) = _blocks(doc_path().read_text(encoding="utf-8"), "python")
    assert "pdforensics" not in snippet.replace('"pdforensics.duckdb"', "")
    res = subprocess.run(
        [sys.executable, "-c", snippet], cwd=real_db.parent, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert str(synthdb.ROOM_PINNED) in res.stdout and "silent_pin" in res.stdout


def test_documented_error_example_is_what_the_command_prints(real_db: Path) -> None:
    import subprocess

    db = real_db
    (example,) = [b for b in _blocks(doc_path().read_text(encoding="utf-8"), "") if "query failed" in b]
    # Positions matter (the caret): compare whole lines, indentation included.
    lines = [line.rstrip() for line in textwrap.dedent(example).splitlines() if line.strip()]
    command = lines[0].removeprefix("$ ")
    sql = re.search(r'"(.*)"', command)
    assert sql and command.startswith("pdforensics sql ")
    res = subprocess.run(
        [sys.executable, "-m", "pdforensics", "sql", "--db", str(db), sql.group(1)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    printed = [line.rstrip() for line in res.stderr.splitlines() if line.strip()]
    assert printed == lines[1:], res.stderr


def _skeleton(live: Schema, documented: Schema) -> str:
    """Markdown for what the documentation lacks, to paste and describe."""
    parts = []
    for name in sorted(live, key=lambda n: (live[n][0], n)):
        kind, cols = live[name]
        if name in documented and documented[name] == (kind, cols):
            continue
        doc_cols = dict(documented.get(name, ("", []))[1])
        rows = [f"| `{c}` | {t} | {'' if c not in doc_cols else '(documented)'} |" for c, t in cols]
        parts.append(
            f"### `{name}` ({kind})\n\n| column | type | meaning |\n|---|---|---|\n" + "\n".join(rows)
        )
    return "\n\n".join(parts)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        live_now = build_live(Path(tmp) / "live.duckdb")
    doc = parse_doc(doc_path().read_text(encoding="utf-8")) if doc_path().exists() else {}
    sys.stdout.write(_skeleton(live_now, doc) + "\n")


def test_the_readme_is_for_newcomers_and_links_the_reference() -> None:
    """The reference lives in docs/reference.md; the README starts with the two commands."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert not [line for line in readme.splitlines() if HEADING.match(line)], (
        "reference sections in README.md"
    )
    assert "docs/reference.md" in readme
    first_block = _blocks(readme, "sh")[0]
    assert "./dev demo" in first_block and "./dev test" in first_block
    assert len(readme.splitlines()) < 250


# ------------------------------------------------------------------ the README as a front page


def _readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def _sample_block(readme: str) -> tuple[int, int, list[str]]:
    """The README's sample verdict: the first ```console block, as (first line, closing line, its lines)."""
    lines = readme.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "```console")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "```")
    return start, end, lines[start + 1 : end]


def _run_shown(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A `pdforensics ...` command as the README shows it, run from the repository's root."""
    argv = shlex.split(command)
    assert argv[0] == "pdforensics", command
    return subprocess.run(
        [sys.executable, "-m", "pdforensics", *argv[1:]], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_the_readme_sample_is_what_verdict_prints_on_the_fixture_it_names(tmp_path: Path) -> None:
    """The sample cannot drift: the ingest the README names, then the command its block shows, on a
    fresh database; the output must be the block's lines exactly (nothing in it varies: the fixture's
    times are fixed and no path is printed)."""
    from pdforensics.api import DEMO_SCENARIO

    readme = _readme()
    start, _, block = _sample_block(readme)
    before = "\n".join(readme.splitlines()[:start])
    ingests = re.findall(r"`(pdforensics ingest [^`]+)`", before)
    assert ingests, "the README names no ingest before its sample verdict"
    ingest = ingests[-1]
    assert f"fixtures/{DEMO_SCENARIO}/" in ingest, "the sample is not the demo's incident"
    assert block[0].startswith("$ pdforensics verdict"), block[0]
    env = {**os.environ, "PDFORENSICS_DB": str(tmp_path / "sample.duckdb"), "COLUMNS": "400"}
    env.pop("PDFORENSICS_DEBUG", None)
    done = _run_shown(ingest, env)
    assert done.returncode == 0, done.stderr
    res = _run_shown(block[0].removeprefix("$ "), env)
    assert res.returncode == 0, res.stderr
    printed = [line.rstrip() for line in res.stdout.splitlines()]
    shown = [line.rstrip() for line in block[1:]]
    assert printed == shown, "README sample verdict drifted; paste this instead:\n" + res.stdout


def test_the_first_screen_has_the_two_commands_a_verdict_and_the_install() -> None:
    readme = _readme()
    lines = readme.splitlines()
    first_screen = "\n".join(lines[:60])
    assert (
        first_screen.index("./dev demo") < first_screen.index("./dev test") < first_screen.index("```console")
    )
    _, end, block = _sample_block(readme)
    assert end < 60 and block[1].startswith("verdict: "), "the sample verdict is not on the first screen"
    assert "pipx install" in "\n".join(lines[end:60]), "the install is not on the first screen"


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header row starts with `header`, cells stripped."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.replace(" ", "").startswith(header.replace(" ", "")))
    rows = []
    for line in lines[at + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _sql_classes() -> list[str]:
    """The values the `requests` view's `class` CASE can take, in its order (first match wins)."""
    sql = (REPO / "queries" / "views" / "05_requests.sql").read_text(encoding="utf-8")
    case = re.search(r"CASE\s+WHEN r\.wd_at.*?END AS class", sql, re.S)
    assert case, "the class CASE of 05_requests.sql moved"
    body = "\n".join(line.split("--")[0] for line in case.group(0).splitlines())
    return list(dict.fromkeys(re.findall(r"(?:THEN|ELSE)\s+'(\w+)'", body)))


def test_the_readme_class_table_lists_exactly_the_classes_the_views_produce() -> None:
    from pdforensics.verdict import CLASSES

    rows = _table(_readme(), "| class |")
    documented = [re.fullmatch(r"`(\w+)`", row[0]).group(1) for row in rows]  # type: ignore[union-attr]
    assert documented == _sql_classes() == list(CLASSES)
    assert all(len(row[1]) < 120 for row in rows), "a class is a short line in the README"
    requests_doc = doc_path().read_text(encoding="utf-8").split("### `requests` (view)")[1].split("\n### ")[0]
    assert all(f"`{c}`" in requests_doc for c in documented), "docs/reference.md's requests view names each"


def test_the_classes_are_read_from_the_sql_and_a_missing_one_is_caught() -> None:
    classes = _sql_classes()
    assert classes[0] == "watchdog_fired" and classes[-1] == "in_flight" and "lost" in classes
    assert len(classes) == len(set(classes)) == 9


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {
        _slug(line.lstrip("#"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }


def test_the_verdict_table_says_nothing_stuck_in_a_sentence_and_the_reference_has_the_rule() -> None:
    from pdforensics.verdict import VERDICTS

    rows = {row[0]: row for row in _table(_readme(), "| verdict |")}
    assert set(rows) == {f"`{v}`" for v in VERDICTS}
    cell = rows["`nothing_stuck`"][1]
    link = re.search(r"\]\((docs/reference\.md)#([\w-]+)\)", cell)
    assert link, cell
    prose = re.sub(r"\s*\(\[[^]]*\]\([^)]*\)\)", "", cell)
    assert len(prose) < 250 and prose.count(";") == 0, f"not a sentence a person reads: {prose}"
    assert link.group(2) in _anchors(REPO / link.group(1))
    reference = doc_path().read_text(encoding="utf-8")
    section = reference.split("\n## ")[
        [_slug(s.splitlines()[0]) for s in reference.split("\n## ")].index(link.group(2))
    ]
    full = {row[0]: row for row in _table(section, "| verdict |")}
    assert set(full) == set(rows)
    rule = full["`nothing_stuck`"][1]
    for detail in ("timeout + grace", "#inflight-req", "journald suppression", "at least one timeout long"):
        assert detail in rule, f"docs/reference.md's nothing_stuck rule lost {detail!r}"
    assert [full[v][2] for v in sorted(full)] == [rows[v][2] for v in sorted(rows)]  # the same exit codes


def test_the_readme_links_resolve_and_the_moved_sections_are_in_docs() -> None:
    readme = _readme()
    for page in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))):
        text = page.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\(([^)#\s]+\.md)(?:#([\w-]+))?\)", text):
            path = (page.parent / target).resolve()
            assert path.exists(), f"{page.name} links {target}, which does not exist"
            assert not anchor or anchor in _anchors(path), (
                f"{page.name} links {target}#{anchor}: no such heading"
            )
    assert "](docs/operations.md#locking)" in readme and "](docs/internals.md#damaged-input)" in readme
    assert "](docs/benchmark.md)" in readme
    assert "PDFORENSICS_LOCK_WAIT" in (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    assert "126,600 lines/s" in (REPO / "docs" / "benchmark.md").read_text(encoding="utf-8")
    assert "## Performance" in readme and "| what | measured | target |" not in readme


LEGS = re.compile(r"\|\s*`legs`\s*\|[^|]*\|\s*([^|]*)\||`legs` \(([^)]*)")


def legs_definitions(pages: dict[str, str]) -> list[tuple[str, int, str]]:
    """Every place that says what `legs` is (a table row, a parenthesis) other than 'as in `requests`'."""
    found = []
    for name, text in pages.items():
        for n, line in enumerate(text.splitlines()):
            for m in LEGS.finditer(line):
                gloss = (m.group(1) or m.group(2) or "").strip()
                if not gloss.startswith("as in `requests`"):
                    found.append((name, n, gloss))
    return found


def test_legs_is_defined_once_in_the_requests_view() -> None:
    pages = {p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8")
             for p in (REPO / "README.md", REPO / "fixtures" / "README.md", *sorted((REPO / "docs").glob("*.md")))}  # fmt: skip
    found = legs_definitions(pages)
    assert len(found) == 1, f"`legs` defined in several places: {found}"
    ((name, n, gloss),) = found
    lines = pages[name].splitlines()
    section = next(line for line in reversed(lines[:n]) if line.startswith("#"))
    assert (name, section) == ("docs/reference.md", "### `requests` (view)")
    assert "A leg is" in gloss and "Receive:" in gloss
    # and a second definition would be caught
    assert len(legs_definitions({**pages, "x.md": "* `legs` (requests sharing the room)"})) == 2
