"""Assembles the one self-contained HTML file: escaped static parts, JSON data blocks, inlined JS.

Log text is untrusted. It reaches the page only (a) through `escape` (`html.escape`)
in the few server-rendered parts, or (b) inside `<script type="application/json">`
blocks with `<`, `>`, `&` and the JS line separators escaped, which the page's
own script reads with `JSON.parse` and renders with `textContent`. On both paths
Unicode bidi controls are replaced by visible tokens (`shown`).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).with_name("assets")

# Bidi controls in log text would reorder what follows them: U+202E RIGHT-TO-LEFT OVERRIDE makes
# "ABC\u202eDEF" read "ABCFED", and isolating the text (CSS, <bdi>) only keeps that from leaking
# out of its element, not from reversing the text itself. A forensic report shows them instead:
# each becomes a visible token ("⟨U+202E⟩") and applies nothing. (The database keeps them as is.)
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_BIDI_SHOWN = {c: f"\u27e8U+{ord(c):04X}\u27e9" for c in BIDI_CONTROLS}
_BIDI = re.compile(f"[{BIDI_CONTROLS}]")


def shown(text: str) -> str:
    """`text` with every Unicode bidi control replaced by a visible, inert token.

    (A regex, not `str.translate`: the data blocks are megabytes with few or none of them, and
    translate visits every character in Python's slow path: 1.4 s against 0.1 s on 11 MB.)"""
    return _BIDI.sub(lambda m: _BIDI_SHOWN[m.group()], text)


def escape(text: str) -> str:
    """HTML-escaped text for the page, bidi controls shown (see `shown`)."""
    return html.escape(shown(text))


VERDICT_MEANING = {
    "watchdog_missed": "Something was stuck longer than the watchdog timeout and the watchdog did not fire.",
    "watchdog_fired": "Stuck requests existed and the watchdog released every one of them.",
    "nothing_stuck": "Every prefill's inflight queue was observed through the window, and nothing stayed in it past the timeout.",
    "inconclusive": "The logs cannot decide; the reasons below name what is missing.",
}

# Sections of tables: (section id, heading, [table ids]) in page order.
TABLE_SECTIONS = [
    ("fleet", "Fleet", ["instances"]),
    (
        "findings",
        "Findings",
        ["pins", "floors", "firings", "abort_races", "storms", "failures", "holes", "restarts"],
    ),
    ("all-requests", "Requests", ["requests"]),
    ("ingest", "Ingest", ["units", "rejects"]),
]


def safe_json(obj: Any) -> str:
    """JSON that cannot end its <script> block or start markup: `</script>` stays data."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return (
        shown(text)  # (JSON syntax is ASCII: these characters can only be inside strings)
        .replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _inline_js(code: str) -> str:
    # A literal `</script` inside inlined code would end the block early.
    return code.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def _json_block(block_id: str, obj: Any) -> str:
    return f'<script type="application/json" id="{block_id}">{safe_json(obj)}</script>'


def _fmt_s(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value:g} s"


def banner(v: dict[str, Any]) -> str:
    """The verdict banner, rendered on the server so the verdict is in the file even without JS."""
    verdict = str(v.get("verdict", "unknown"))
    reasons = "".join(f"<li>{escape(str(r))}</li>" for r in v.get("reasons") or [])
    wd = v.get("watchdog") or {}
    deployed = {True: "deployed", False: "not deployed"}.get(wd.get("deployed"), "deployment unknown")
    if wd.get("deployed_on"):  # a fleet whose builds differ
        deployed = f"deployed on {wd['deployed_on']}"
    basis = f" ({escape(str(wd['deployed_basis']))})" if wd.get("deployed_basis") else ""
    source = f" ({escape(str(wd['timeout_source']))})" if wd.get("timeout_source") else ""
    certain = v.get("certain_with") or ""
    chips = "".join(  # (empty for a window without lines: counts of nothing are no finding)
        f'<span class="chip">{escape(str(k))}: <b>{escape(str(n))}</b></span>'
        for k, n in (v.get("counts") or {}).items()
    )
    return (
        f'<section id="verdict" class="banner v-{escape(verdict)}">'
        f'<div class="verdict" id="verdict-text">{escape(verdict)}</div>'
        f'<div class="meaning">{escape(VERDICT_MEANING.get(verdict, ""))}</div>'
        f"{_recovery(wd, fleet=len(v.get('instances') or []) > 1)}"
        f"<ul>{reasons}</ul>"
        '<div class="facts">'
        f"<span><b>Evidence:</b> {escape(str(v.get('evidence_level') or 'unknown'))}"
        f" — {escape(str(v.get('evidence_text') or ''))}</span>"
        f"<span><b>Would be certain with:</b> {escape(str(certain))}</span>"
        f"<span><b>Watchdog:</b> timeout {escape(_fmt_s(wd.get('timeout_s')))}{source}, {deployed}{basis}</span>"
        "</div>"
        f'<div class="chips">{chips}</div>'
        "</section>"
    )


# What the banner says when the watchdog fired: did the deployment recover?
RECOVERY_TEXT = {
    "drained": "Recovered: after the last firing the inflight floor returned to 0 and requests on that path completed.",
    "wedged": "Not recovered: the watchdog kept firing (or new rooms got stuck again) and nothing completed on that "
    "prefill → decode path after the first firing. Restart the pair; a one-off watchdog release will not clear it.",
    "undetermined": "Recovery undetermined: no completed request or empty floor after the last firing shows it drained.",
}


def _recovery(wd: dict[str, Any], fleet: bool = False) -> str:
    recovery = wd.get("recovery")
    if not recovery:
        return ""
    paths = wd.get("recovery_paths") or []
    if fleet and paths:  # each path's recovery is its instance's, not the fleet's
        each = "; ".join(
            f"{p.get('prefill_host') or '?'} → {p.get('decode_host') or '?'}: {p.get('recovery')}"
            for p in paths
        )
        return f'<div class="recovery r-paths" id="recovery">Where the watchdog fired, per path: {escape(each)}</div>'

    saturated = sum(1 for f in wd.get("firings") or [] if f.get("backpressure"))
    pressure = (
        f" {saturated} firing(s) fired while the decode was saturated: likely backpressure, not a dead peer."
        if saturated
        else ""
    )
    return (
        f'<div class="recovery r-{escape(str(recovery))}" id="recovery">'
        f"{escape(RECOVERY_TEXT.get(str(recovery), str(recovery)))}{escape(pressure)}</div>"
    )


def _notes(notes: list[str]) -> str:
    if not notes:
        return ""
    items = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return (
        f'<div class="notes" id="sampling"><b>Aggregated or sampled in this report:</b><ul>{items}</ul></div>'
    )


def _legend(items: list[tuple[str, str]]) -> str:
    if not items:
        return ""
    spans = "".join(
        f'<span class="chip"><span class="swatch" style="background:{escape(color)}"></span>{escape(text)}</span>'
        for color, text in items
    )
    return f'<div class="chips" title="shaded spans">{spans}</div>'


def _tables(tables: list[dict[str, Any]]) -> str:
    by_id = {t["id"]: t for t in tables}
    out = []
    for section, heading, ids in TABLE_SECTIONS:
        parts = []
        for tid in ids:
            t = by_id.get(tid)
            if t is None:
                continue
            desc = f'<div class="muted">{escape(t["description"])}</div>' if t.get("description") else ""
            parts.append(
                f'<h3 id="h-{tid}">{escape(t["title"])} ({len(t["rows"]):,})</h3>{desc}'
                f'<div class="tbl" id="tbl-{tid}"></div>'
            )
        if parts:
            out.append(f'<section id="{section}"><h2>{escape(heading)}</h2>{"".join(parts)}</section>')
    return "".join(out)


PICKER = '<div id="tl-pick" class="picker"></div>'


def _panels(model: dict[str, Any], gantt_note: str) -> str:
    return (
        '<section id="timeline"><h2>Timeline</h2>'
        '<div class="muted">The inflight floor (#inflight-req − #new-seq, what the verdict reads) and the '
        "engines' other gauges from their batch lines (the raw #inflight-req, which counts the batch's new "
        "requests too, is in the legend: click it to draw it); a gauge's line stops while its engine is "
        "down; markers for restarts, watchdog firings, aborts and journald holes; each open request's "
        "watchdog deadline and deadline + grace. One time axis (UTC), the swimlanes' too; drag to zoom, "
        "double-click to reset.</div>"
        f"{_legend(model.get('legend', []))}"
        # a fleet: one instance per engine at a time (report.js fills it), not every stream over another
        f"{PICKER if model.get('fleet') else ''}"
        '<div id="fig-timeline" class="plot"></div></section>'
        '<section id="swimlanes"><h2>Swimlanes</h2>'
        f'<div class="muted">{gantt_note} Click a bar for the request\'s timeline and raw lines.</div>'
        '<div id="fig-gantt" class="plot"></div></section>'
        '<section id="detail" hidden></section>'
        f"{_tables(model['tables'])}"
    )


def _compare(c: dict[str, Any]) -> str:
    """`report --compare`: this window (after) beside the one before (pdforensics.compare)."""
    unequal = "".join(f"<li>{escape(u)}</li>" for u in c["unequal"])
    warn = (
        f'<div class="err"><b>Not comparable: no change is judged across unequal evidence.</b><ul>{unequal}</ul></div>'
        if unequal
        else ""
    )
    return (
        '<section id="compare"><h2>Before and after</h2>'
        f'<div class="muted">This window (after) beside {escape(c["before"])}. Rates per 1,000 requests '
        "(restarts per hour), each change tested with the exact test for two Poisson rates (p &lt; 0.05).</div>"
        f'{warn}<div id="fig-compare" class="plot"></div>'
        '<h3 id="h-compare">Changes</h3><div class="tbl" id="tbl-compare"></div></section>'
    )


def _empty(text: str) -> str:
    return f'<section id="empty" class="nothing"><h2>Nothing to show</h2><p>{escape(text)}</p></section>'


def render_page(model: dict[str, Any], figures: dict[str, dict[str, Any]], plotly_js: str) -> str:
    """The whole report. `model` holds the verdict, notes, tables and per-request details."""
    meta = model["meta"]
    title = f"pdforensics: {model['verdict'].get('verdict', '')} — {meta['window_text']}"
    data = {k: model.get(k) for k in ("tables", "requests", "phase_colors", "window", "fleet")}
    figs = "".join(_json_block(f"pdf-fig-{name}", fig) for name, fig in figures.items())
    css = (ASSETS / "report.css").read_text()
    js = (ASSETS / "report.js").read_text()
    gantt_note = escape(model.get("gantt_note", ""))
    body = _empty(model["empty"]) if model.get("empty") else _panels(model, gantt_note)
    body = _compare(model["compare"]) + body if model.get("compare") else body
    fleet = any(t["id"] == "instances" for t in model["tables"]) and not model.get("empty")
    fleet_link = '<a href="#fleet">Fleet</a>' if fleet else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # Offline by construction: nothing may be fetched, even if a log line sneaks in a URL.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:; "
        "font-src data:; connect-src 'none'\">"
        f"<title>{escape(title)}</title><style>{css}</style></head><body>"
        '<header class="top"><h1>pdforensics incident report</h1>'
        f'<span class="meta">window {escape(meta["window_text"])} (UTC, {escape(meta["duration_text"])})</span>'
        f'<span class="meta">database {escape(meta["db"])}</span>'
        f'<span class="meta">generated {escape(meta["generated"])} by pdforensics {escape(meta["version"])}</span>'
        f'<span class="meta">prompts {"shown" if meta["show_prompts"] else "redacted"}</span></header>'
        f'<nav class="toc"><a href="#verdict">Verdict</a>{fleet_link}<a href="#timeline">Timeline</a>'
        '<a href="#swimlanes">Swimlanes</a><a href="#findings">Findings</a><a href="#all-requests">Requests</a>'
        '<a href="#ingest">Ingest</a></nav><main>'
        f"{banner(model['verdict'])}{_notes(model.get('notes', []))}"
        '<div id="js-error" class="err"></div>'
        f"{body}</main>"
        f"{_json_block('pdf-data', data)}{figs}"
        f"<script>{_inline_js(plotly_js)}</script>"
        f"<script>{_inline_js(js)}</script>"
        "</body></html>\n"
    )
