"""The fast match pass (one Aho-Corasick pass for the candidates, each entry's regex on its
candidate rows only, by position) gives what the catalog's rule says, entry for entry.

The rule, written here the slow and obvious way (every entry's anchor and pattern tried on every
row still unclaimed): `starts_with` entries in catalog order, the first whose anchor starts the
body and whose pattern matches wins; `contains` entries, in catalog order, only on the rows no
`starts_with` entry won; a row an anchor named but no pattern matched is a parse error of the
first such entry. Run over every fixture's lines (journal export and plain files), the catalog's
and the prefix forms' samples, and lines made to hit anchors without their patterns.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pdforensics import parse as P
from pdforensics.catalog import Catalog, load_catalog
from pdforensics.catalog.prefixes import load_prefixes
from pdforensics.parse import ParseOptions, read_prefixes, records_of
from pdforensics.sources import Selection
from pdforensics.sources.detect import open_file_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CATALOG = load_catalog()


def reference_match(body: pl.Series, catalog: Catalog) -> tuple[pl.Series, pl.Series, pl.DataFrame]:
    """(entry_idx, error_idx, fields) by the catalog's rule, trying every entry on every row."""
    n = body.len()
    entry_idx = pl.repeat(None, n, dtype=pl.Int32, eager=True)
    error_idx = pl.repeat(None, n, dtype=pl.Int32, eager=True)
    claimed = pl.repeat(False, n, eager=True)
    rows = pl.int_range(n, dtype=pl.UInt32, eager=True)
    comp = P._compiled(catalog)
    fields: list[pl.DataFrame] = []
    starts = [i for i, e in enumerate(catalog.entries) if e.starts_with]
    contains = [i for i, e in enumerate(catalog.entries) if not e.starts_with]
    for order in (starts, contains):
        for i in order:
            e = catalog.entries[i]
            named = (
                body.str.starts_with(e.starts_with)
                if e.starts_with
                else body.str.contains(e.contains, literal=True)
            )
            tried = named & ~claimed
            hit = tried & body.str.contains(e.pattern)
            miss = tried & ~hit & error_idx.is_null()
            error_idx = error_idx.scatter(rows.filter(miss), i) if miss.any() else error_idx
            if hit.any():
                won = rows.filter(hit)
                entry_idx = entry_idx.scatter(won, i)
                claimed = claimed | hit
                names = comp.groups[e.name]
                text = body.filter(hit)
                groups = (
                    text.str.extract_groups(e.pattern).struct.unnest().select(names)
                    if names
                    else pl.DataFrame()
                )
                fields.append(P._extract_entry(won, text, e, groups, i))
    error_idx = error_idx.zip_with(~claimed, pl.repeat(None, n, dtype=pl.Int32, eager=True))  # won: no error
    return entry_idx, error_idx, P._stack(fields, P._fields_schema()).sort("_row")


def fixture_bodies() -> list[tuple[str, list[str]]]:
    """Each fixture input's bodies as the prefix pass gives them to the matcher."""
    out = []
    opts = ParseOptions(catalog=CATALOG)
    for fx in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for path in [fx / "journal.export", *sorted(fx.glob("plain/*.log"))]:
            records = pl.concat(
                [
                    b.records
                    for b in open_file_source(path).batches(Selection(units=("*",)), batch_size=100_000)
                ]
            )
            out.append((f"{fx.name}/{path.name}", read_prefixes(records, opts)["body"].to_list()))
    return out


def made_up_bodies() -> list[str]:
    """Anchors without their patterns, anchors off the start, samples of every entry and prefix form."""
    lines = [s.line for e in CATALOG.entries for s in e.samples]
    lines += [s.line for f in load_prefixes().forms for s in f.samples]
    anchors = [e.starts_with or e.contains or "" for e in CATALOG.entries]
    lines += [f"{a} but not as the pattern wants ]" for a in anchors]
    lines += [f"x {a}" for a in anchors] + [f"{a}{a}" for a in anchors] + ["", " ", "]", "Prefill batch"]
    opts = ParseOptions(catalog=CATALOG, tz="UTC")
    bodies = read_prefixes(records_of(lines), opts)["body"].to_list()
    return bodies + lines  # each line also as a body of its own (no prefix taken off)


CASES = [*fixture_bodies(), ("made_up", made_up_bodies())]


@pytest.mark.parametrize("name, bodies", CASES, ids=[c[0] for c in CASES])
def test_fast_match_is_the_catalog_rule(name: str, bodies: list[str]) -> None:
    body = pl.Series("body", bodies, pl.String)
    df = pl.DataFrame({"body": body}).with_row_index("_row")
    fast, fields = P._match_and_extract(df, CATALOG)
    entry_idx, error_idx, ref_fields = reference_match(body, CATALOG)
    assert fast["entry_idx"].equals(entry_idx.alias("entry_idx")), name
    assert fast["error_idx"].equals(error_idx.alias("error_idx")), name
    assert fields.equals(ref_fields.drop("entry_idx")), name  # in row order, as events need them
    assert fast["entry_idx"].is_not_null().any(), "the case must exercise the matcher"


def test_made_up_lines_include_parse_errors() -> None:
    """The anchor-without-pattern lines are there to test errors: some must be errors."""
    body = pl.Series("body", made_up_bodies(), pl.String)
    fast, _ = P._match_and_extract(pl.DataFrame({"body": body}).with_row_index("_row"), CATALOG)
    assert fast["error_idx"].is_not_null().sum() > 10


def test_colour_and_crlf_cleaned_on_their_lines_only() -> None:
    """The clean-ups run on the lines that need them only: those parse as their clean twins, and
    every message is stored as it came."""
    clean = [s.line for e in CATALOG.entries[:40] for s in e.samples]
    dirty = [
        f"\x1b[33m{line}\x1b[0m" if i % 3 == 0 else f"{line}\r" if i % 3 == 1 else line
        for i, line in enumerate(clean)
    ]
    opts = ParseOptions(catalog=CATALOG, tz="UTC")
    want = P.parse_records(records_of(clean), opts)
    got = P.parse_records(records_of(dirty), opts)
    cols = ["event", "entry", "parse_error", "app_ts_us", "tp_rank", "dp_rank"]
    assert got.lines.select(cols).equals(want.lines.select(cols))
    assert got.events.drop("line_id").equals(want.events.drop("line_id"))
    assert got.lines["message"].to_list() == dirty
    assert want.lines["entry"].is_not_null().sum() > 30
