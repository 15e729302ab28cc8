"""The HTML incident report: one self-contained file that tells the story of the window.

    write_report(con, out, opts, show_prompts=False) -> out

The verdict comes from `pdforensics.verdict`; the rest from its views (see
`data.py`). The figures are plain dicts (`figures.py`) that the page's own copy of plotly.js
draws: plotly's Python package is never imported, only its bundled plotly.js read.
"""

from __future__ import annotations

import importlib.util
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdforensics.errors import UsageError, written_whole
from pdforensics.report.data import Limits

if TYPE_CHECKING:
    import duckdb

    from pdforensics.compare import Comparison
    from pdforensics.verdict import VerdictOptions

__all__ = ["Limits", "build_model", "write_report"]

# What the next evidence level would add, per level (design.md §2).
CERTAIN_WITH = {
    "L0": "--log-requests (Receive:/Finish: name every request and its bootstrap_room)",
    "L1": "--enable-request-time-stats-logging (times each request's inflight entry; dwell is an upper bound without it)",
    "L2": "--log-level debug (shows which queue each abort hit)",
    "L3": "nothing more: debug lines show the exact queue at abort time",
}
EVIDENCE_TEXT = {
    "L0": "default INFO: pins show only in the #inflight-req gauge",
    "L1": "request log: Receive:/Finish: per request",
    "L2": "request time stats: ReqTimeStats per finished request",
    "L3": "debug: abort lines name the queue",
}


def write_report(
    con: duckdb.DuckDBPyConnection,
    out: Path,
    opts: VerdictOptions,
    show_prompts: bool = False,
    limits: Limits | None = None,
    comparison: Comparison | None = None,
) -> Path:
    """Write the report for the window `opts` selects to `out` (atomically) and return `out`; with
    `comparison` (pdforensics.compare, this window its after side), a Before and after section."""
    from pdforensics.report.html import render_page

    out = Path(out)
    check_out(out)  # before the work: a typo in --out must not cost the whole report
    model, figures = build_model(con, opts, show_prompts, limits or Limits())
    if comparison is not None:
        add_comparison(model, figures, comparison)
    page = render_page(model, figures, _plotly_js())
    with written_whole(out, name="--out ") as tmp:
        tmp.write_text(page, encoding="utf-8")
    return out


def add_comparison(model: dict[str, Any], figs: dict[str, dict[str, Any]], cmp: Comparison) -> None:
    """The comparison's part of the page: unequal evidence, the two floors on one axis, the changes."""
    from pdforensics.report import data, figures

    doc = cmp.to_json()
    before, after = doc["before"], doc["after"]
    model["compare"] = {
        "unequal": doc["unequal_evidence"],
        "before": f"{before['window']['start']} → {before['window']['end']} ({before['db']}): "
        f"{before['verdict']}, {before['evidence_level']}",
    }
    figs["compare"] = figures.compare_floor(
        before["inflight_floor"].get("histogram", []), after["inflight_floor"].get("histogram", [])
    )
    cols = [("metric", "measure", "text"), ("unit", "unit", "text"), ("before_count", "before (events)", "num"),
            ("after_count", "after (events)", "num"), ("before", "before (rate)", "num"),
            ("after", "after (rate)", "num"), ("p", "p", "text"), ("judgement", "judgement", "text")]  # fmt: skip
    rows = [c | {"p": "-" if c["p_value"] is None else f"{c['p_value']:.3g}"} for c in doc["changes"]]
    model["tables"].append(data.table("compare", "Changes", cols, rows, room=None))


def check_out(out: Path) -> None:
    """--out names a file in a folder that exists and can be written: else one line, exit 2."""
    if out.is_dir():
        raise UsageError(
            f"--out {out} is a folder: name the HTML file to write, e.g. {out / 'incident.html'}"
        )
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"cannot write --out {out}: folder {folder} does not exist (create it first)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write --out {out}: folder {folder} is not writable")


def _plotly_js() -> str:
    """The plotly.js bundled with the plotly package, read without importing the package (what
    `plotly.offline.get_plotlyjs` returns; its import costs more than the read)."""
    spec = importlib.util.find_spec("plotly")
    folders = spec.submodule_search_locations if spec else None
    if not folders:  # a broken install (plotly is a dependency): an internal error, as its import was
        raise ImportError("the plotly package is not installed: pip install plotly")
    return (Path(next(iter(folders))) / "package_data" / "plotly.min.js").read_text(encoding="utf-8")


def build_model(
    con: duckdb.DuckDBPyConnection, opts: VerdictOptions, show_prompts: bool, limits: Limits
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Everything the page shows: (model for html.render_page, plotly figures by name).

    The verdict and every report query share one `verdict.materialised`: the heavy views are
    computed once (`compute_verdict` sets the same options, so its own call reuses the tables).
    """
    from pdforensics import verdict as vd

    started = time.perf_counter()
    vd.ensure_views(con)
    vd.apply_options(con, opts)
    now_us = time.time_ns() // 1000
    fallback = (opts.since_us or now_us, opts.until_us or now_us)
    with vd.materialised(con):
        verdict = vd.compute_verdict(con, opts).to_json()
        model, figures = _assemble(con, verdict, show_prompts, limits, fallback)
    model["meta"]["build_s"] = round(time.perf_counter() - started, 2)
    return model, figures


def _assemble(
    con: duckdb.DuckDBPyConnection, verdict: dict[str, Any], show_prompts: bool, limits: Limits,
    fallback: tuple[int, int],
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:  # fmt: skip
    from pdforensics.report import data, figures

    ctx = data.open_ctx(con, limits, show_prompts, fallback)
    try:
        window = (ctx.start_t, ctx.end_t)
        lo, hi = data._host_window(ctx)
        any_line = con.execute("SELECT 1 FROM lines WHERE ts_us BETWEEN ? AND ? LIMIT 1", [lo, hi]).fetchone()
        if hi < lo or not any_line:  # no line in the window: say what to check, not empty panels
            return _empty_model(con, verdict, window, show_prompts), {}
        restarts = data.restarts(ctx)
        holes = data.holes(ctx)
        storms = data.abort_storms(ctx)
        deadlines, _ = data.open_deadlines(ctx)
        gauges = data.gauge_series(ctx)
        data.break_at_downtime(gauges, restarts)
        timeline = figures.timeline(
            gauges, [data.point_markers(ctx, k) for k in ("watchdog", "abort", "failure")],
            data.lifecycle_points(ctx), restarts, holes, storms, deadlines, window, ctx.timeout_s, ctx.grace_s,
        )  # fmt: skip
        lanes, not_done = data.gantt_requests(ctx)
        for r in lanes:
            r["phases"], r["points"] = data.spans(r, ctx.end_t), data.points(r, ctx.grace_s)
        gantt = figures.gantt(lanes, window, restarts)
        req_table, req_rows = data.requests_table(ctx)
        tables = [
            *filter(None, [data.instances_table(verdict)]),
            data.pins_table(ctx), data.gauge_floor_table(ctx), data.firings_table(ctx),
            data.abort_races_table(ctx), data.storms_table(ctx, storms), data.failures_table(ctx),
            data.holes_table(ctx, holes), data.restarts_table(restarts), req_table,
            data.units_table(ctx), data.rejects_table(ctx),
        ]  # fmt: skip
        details, detail_bytes = data.request_details(ctx, lanes + req_rows)
        embedded = {r for t in tables if t["room"] for r in _rooms(t)}
        if len(embedded - details.keys()) > 0:
            ctx.notes.append(
                f"Request details (timeline and raw lines) embedded for {len(details):,} requests "
                f"({detail_bytes / 1e6:.1f} MB budget); others show the command that prints them."
            )
        capped = sum(1 for d in details.values() if d["lines_total"] > len(d["lines"]))
        if capped or ctx.cut_lines:
            ctx.notes.append(
                f"Raw lines: at most {limits.lines_per_request} per request ({capped:,} requests had more), "
                f"each cut at {limits.line_chars:,} characters ({ctx.cut_lines:,} lines were longer)."
            )
        model = {
            "meta": _meta(con, window, show_prompts),
            "verdict": _verdict_view(verdict, data.class_counts(ctx)),
            "notes": ctx.notes,
            "tables": tables,
            "requests": details,
            "phase_colors": figures.PHASE_COLORS,
            "window": {"start_us": window[0], "end_us": window[1]},
            "legend": figures.legend_items(restarts, holes, storms),
            "gantt_note": _gantt_note(lanes, not_done),
            "fleet": data.fleet_view(verdict, gauges),
        }
        return model, {"timeline": timeline, "gantt": gantt}
    finally:
        data.close_ctx(ctx)


NOTHING_INGESTED = "nothing was ingested: check --unit / --since / journal access"


def untimed(n: int) -> str:
    return (
        f"{n} line(s) stored, none with a time I know: its prefix may be a form I do not know (ingest --prefixes adds one), "
        "or pass --tz / --date"
    )


def _empty_model(
    con: duckdb.DuckDBPyConnection, verdict: dict[str, Any], window: tuple[int, int], show_prompts: bool
) -> dict[str, Any]:
    """The page for a window without a single line: the verdict's reasons and what to check."""
    n, first, last = con.execute("SELECT count(*), min(ts_us), max(ts_us) FROM lines").fetchone() or (
        0,
        None,
        None,
    )
    if not n:
        empty = NOTHING_INGESTED
    elif first is None:
        empty = untimed(n)
    else:
        empty = (
            f"no line in this window; the database holds lines from {_iso(first)} to {_iso(last)} UTC: "
            "check --since / --until (or ingest this window: --unit / --since / journal access)"
        )
    view = _verdict_view(verdict, {})
    view["counts"] = {}  # counts of nothing ("undecided: 1" with 0 requests) would read as findings
    return {
        "meta": _meta(con, window, show_prompts), "verdict": view, "notes": [], "tables": [], "requests": {},
        "phase_colors": {}, "window": {"start_us": window[0], "end_us": window[1]}, "legend": [],
        "gantt_note": "", "empty": empty, "fleet": None,
    }  # fmt: skip


def _rooms(t: dict[str, Any]) -> list[str]:
    keys = [c["key"] for c in t["columns"]]
    i = keys.index(t["room"]) if t["room"] in keys else -1
    return [str(row[i]) for row in t["rows"] if i >= 0 and row[i] is not None]


def _gantt_note(lanes: list[dict[str, Any]], not_done: int) -> str:
    completed = sum(1 for r in lanes if r["class"] == "completed")
    if not lanes:
        return "No requests in the window."
    return (
        f"{len(lanes) - completed:,} of {not_done:,} requests that did not complete, worst first, and "
        f"{completed:,} completed ones (a sample) for contrast. Upper bar: prefill; lower bar: decode; "
        "hatched bars are open at the window end."
    )


def _verdict_view(v: dict[str, Any], classes: dict[str, int]) -> dict[str, Any]:
    level = v.get("evidence_level") or "L0"
    counts = {k: n for k, n in (v.get("counts") or {}).items() if n}
    return {
        "verdict": v.get("verdict"),
        "reasons": v.get("reasons") or [],
        "evidence_level": level,
        "evidence_text": EVIDENCE_TEXT.get(level, ""),
        "certain_with": v.get("certain_with") or CERTAIN_WITH.get(level, ""),
        "watchdog": v.get("watchdog") or {},
        "counts": counts or classes,
    }


def _iso(t_us: int) -> str:
    return datetime.fromtimestamp(t_us / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _meta(con: duckdb.DuckDBPyConnection, window: tuple[int, int], show_prompts: bool) -> dict[str, Any]:
    from pdforensics import __version__
    from pdforensics import verdict as vd

    row = con.execute(  # the file's, also when the views come from the overlay (vd.ensure_views)
        "SELECT path FROM duckdb_databases() WHERE database_name = ?", [vd.data_catalog(con)]
    ).fetchone()
    span = (window[1] - window[0]) / 1e6
    return {
        "window_text": f"{_iso(window[0])} → {_iso(window[1])}",
        "duration_text": f"{span / 60:.1f} min" if span >= 120 else f"{span:.0f} s",
        "db": Path(row[0]).name if row and row[0] else "(memory)",
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "version": __version__,
        "show_prompts": show_prompts,
    }
