"""The report's plotly figures, returned as plain JSON-ready dicts; plotly (Python) is not used.

The page embeds plotly.js, which draws these dicts: plotly's Python classes (their import and
their validation) cost more than everything else the figures take. The dicts are what those
classes wrote out, key for key: `_subplots` is `make_subplots`' layout, float for float.

Times go to plotly as milliseconds since the epoch on a date axis (plotly
treats them as UTC and prints them without converting to a local zone). Text
that came from the logs is HTML-escaped before it reaches plotly, because
plotly renders a subset of HTML (including links) in hover and tick text.
"""

from __future__ import annotations

from html import escape
from typing import Any

US = 1_000_000

CLASS_COLORS = {
    "silent_pin": "#b3261e", "watchdog_fired": "#d29922", "undecided": "#7b4fa0", "retracted": "#8a6d3b", "in_flight": "#0b61c4", "transfer_failed": "#c4591b",
    "aborted": "#8250df", "lost": "#6e7781", "completed": "#1a7f37",
}  # fmt: skip
PHASE_COLORS = {
    "prefill": "#7aa6d8",
    "prefill: bootstrap+queue+forward": "#9ec5ef",
    "prefill: inflight (KV transfer)": "#e08a2e",
    "decode": "#5fb37a",
}
POINT_STYLE = {
    "watchdog deadline": ("line-ns-open", "#d29922", 16),
    "deadline + grace": ("line-ns-open", "#b3261e", 16),
    "watchdog fired": ("x", "#d29922", 11),
    "KV sent (prefill Finish)": ("circle-open", "#1d4f91", 7),
    "failed": ("x-thin-open", "#1d232b", 11),
    "aborted": ("diamond", "#8250df", 9),
    "decode finished": ("circle", "#1a7f37", 6),
    "prefill process gone": ("square-open", "#6e7781", 9),
    "decode process gone": ("square-open", "#6e7781", 9),
}
# One colour per gauge, the same in every report; the inflight floor is the thick main line.
GAUGE_STYLE = {
    "inflight_floor": ("#b3261e", 2.6), "inflight_req": ("#e8a0a0", 1.2), "bootstrap_req": ("#7aa6d8", 1.2),
    "queue_req": ("#8250df", 1.2), "running_req": ("#1a7f37", 1.6), "transfer_req": ("#e08a2e", 1.4),
    "prealloc_req": ("#1b7c83", 1.2), "gen_throughput": ("#0b61c4", 1.4),
    "metric_inflight": ("#000000", 1.0),  # SGLang's Prometheus gauge, a thin black line over the floor
}  # fmt: skip
# Streams (hosts, DP ranks) of one gauge share its colour and one legend entry: with DP attention
# 24 streams × 4 gauges would otherwise be 96 entries.
HOLE_COLORS = {"journald_suppression": "#f2a900", "parse_error": "#c4591b", "engine_down": "#6e7781",
               "engine_silent": "#1b7c83"}  # fmt: skip
RAW_INFLIGHT = "inflight_req"
# The timeline and the swimlanes share one time axis: the same plot margins put it at the same pixels
# (left: the swimlanes' request labels; right: the timeline's legends, and the swimlanes').
MARGIN_L, MARGIN_R = 250, 260
MARKER_LANES = ["engine lifecycle", "watchdog firings", "aborts", "failures", "coverage holes"]
MAX_SHAPES = 300


def _ms(us: int | float | None) -> float | None:
    return None if us is None else us / 1000


def _base_layout(height: int) -> dict[str, Any]:
    return {
        "template": "none", "height": height, "margin": {"l": 70, "r": 20, "t": 30, "b": 40},
        "font": {"family": "system-ui, sans-serif", "size": 12}, "hovermode": "closest",
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "font": {"size": 11}},
        "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff",
    }  # fmt: skip


def _no_template() -> dict[str, Any]:
    """plotly's "none" template (no defaults) as plotly.py wrote it into a figure's layout."""
    return {"data": {"scatter": [{"type": "scatter"}]}}


def _axis_key(xy: str, row: int) -> str:
    """A row's axis in the layout: `xaxis`, `xaxis2`, ..."""
    return f"{xy}axis" if row == 1 else f"{xy}axis{row}"


def _axis(layout: dict[str, Any], xy: str, row: int) -> dict[str, Any]:
    return layout[_axis_key(xy, row)]


def _axis_id(xy: str, row: int) -> str:
    return xy if row == 1 else f"{xy}{row}"


# ------------------------------------------------------------------ the shared time axis


def timeline(
    gauges: list[dict[str, Any]],
    markers: list[dict[str, Any]],
    lifecycle: list[dict[str, Any]],
    restarts: list[dict[str, Any]],
    holes: list[dict[str, Any]],
    storms: list[dict[str, Any]],
    deadlines: list[dict[str, Any]],
    window: tuple[int, int],
    timeout_s: float,
    grace_s: float = 0.0,
) -> dict[str, Any]:
    """Gauges, markers and open requests' watchdog deadlines on one shared time axis."""
    rows = [
        ("prefill queues (requests)", 1.0),
        (f"{_second_row_engines(gauges)} queues (requests)", 1.0),
        ("gen throughput (token/s)", 0.7),
    ]
    if deadlines:
        rows.append(
            ("open requests: watchdog deadline, deadline + grace", min(1.6, 0.4 + 0.05 * len(deadlines)))
        )
    rows.append(("events", 0.8))
    marker_row = len(rows)
    streams: dict[str, int] = {}
    for s in gauges:
        streams[s["metric"]] = streams.get(s["metric"], 0) + 1
    shown: set[str] = set()
    peak = {1: 0.0, 2: 0.0}
    data = []
    for s in gauges:
        row = 1 if s["engine"] == "prefill" else 3 if s["metric"] == "gen_throughput" else 2
        data.append(_on_row(_gauge_trace(s, streams[s["metric"]], s["metric"] not in shown), row))
        shown.add(s["metric"])
        if row in peak:
            peak[row] = max([peak[row], *[v for v in s["y"] if v is not None]])
    if deadlines:
        data += [_on_row(tr, 4) for tr in _deadline_traces(deadlines, timeout_s, grace_s)]
    data += [_on_row(tr, marker_row) for tr in [*_marker_traces(markers, lifecycle), *_hole_traces(holes)]]
    layout = _base_layout(int(190 * sum(h for _, h in rows) + 100))
    layout["template"] = _no_template()
    layout["margin"] = {"l": MARGIN_L, "r": MARGIN_R, "t": 30, "b": 40}
    layout |= _subplots([t for t, _ in rows], [h for _, h in rows], 0.045)
    _put_shapes(layout, _window_shapes(restarts, holes, storms, window))
    _row_legends(layout, len(rows))
    _timeline_axes(layout, len(rows), window, peak, bool(deadlines))
    return {"data": data, "layout": layout}


def _second_row_engines(gauges: list[dict[str, Any]]) -> str:
    """Whose queues the second row draws: every engine but the prefill (a server that is not
    PD-disaggregated, engine `unified`, is drawn there and named so); `decode` when it is empty."""
    engines = sorted({s["engine"] for s in gauges if s["engine"] != "prefill"})
    return escape(" / ".join(engines)) or "decode"  # (a title is drawn as HTML, as a trace's name)


def _subplots(titles: list[str], heights: list[float], spacing: float) -> dict[str, Any]:
    """What `make_subplots(rows=len(titles), cols=1, shared_xaxes=True, vertical_spacing=spacing,
    row_heights=heights, subplot_titles=titles)` put in the layout: one x/y axis pair per row, top
    row first, every x axis matching the bottom one (whose ticks alone are labelled), and the titles."""
    n = len(titles)
    layout: dict[str, Any] = {"annotations": []}
    for row, (title, (y0, y1)) in enumerate(zip(titles, _row_domains(heights, spacing), strict=True), 1):
        xaxis = {"anchor": _axis_id("y", row), "domain": [0.0, 1.0]}
        if row < n:
            xaxis |= {"matches": _axis_id("x", n), "showticklabels": False}
        layout[_axis_key("x", row)] = xaxis
        layout[_axis_key("y", row)] = {"anchor": _axis_id("x", row), "domain": [y0, y1]}
        layout["annotations"].append({
            "font": {"size": 16}, "showarrow": False, "text": title, "x": 0.5, "xanchor": "center",
            "xref": "paper", "y": y1, "yanchor": "bottom", "yref": "paper",
        })  # fmt: skip
    return layout


def _row_domains(heights: list[float], spacing: float) -> list[tuple[float, float]]:
    """Each row's [bottom, top] in paper units, top row first, by make_subplots' arithmetic step for
    step (rows stack from the bottom; a sum's order changes its last bit)."""
    n = len(heights)
    total = float(sum(heights))
    sizes = [(1.0 - spacing * (n - 1)) * (h / total) for h in heights][::-1]  # bottom row first
    out = []
    for row in range(n):
        k = n - 1 - row  # rows below this one
        bottom = sum(sizes[:k]) + k * spacing
        out.append((max(0.0, bottom), min(1.0, bottom + sizes[k])))
    return out


def _on_row(trace: dict[str, Any], row: int) -> dict[str, Any]:
    """A trace on row `row`'s axes, its names in that row's legend."""
    trace |= {"xaxis": _axis_id("x", row), "yaxis": _axis_id("y", row), "legend": _legend_name(row)}
    return trace


def _put_shapes(layout: dict[str, Any], shapes: list[dict[str, Any]]) -> None:
    if shapes:  # (plotly wrote no key for none)
        layout["shapes"] = shapes


def _timeline_axes(
    layout: dict[str, Any], n_rows: int, window: tuple[int, int], peak: dict[int, float], deadlines: bool
) -> None:
    for row in range(1, n_rows + 1):
        _axis(layout, "x", row).update(
            type="date", range=[_ms(window[0]), _ms(window[1])], showgrid=True, gridcolor="#eef0f3"
        )
        _axis(layout, "y", row).update(rangemode="tozero", showgrid=True, gridcolor="#eef0f3", zeroline=True)
    _axis(layout, "x", n_rows)["title"] = {"text": "UTC"}
    _axis(layout, "y", n_rows).update(type="category", categoryorder="array", categoryarray=MARKER_LANES[::-1],
                                      range=[-0.5, len(MARKER_LANES) - 0.5], zeroline=False)  # fmt: skip
    for row, top in peak.items():  # request counts: whole-number ticks
        _axis(layout, "y", row).update(tickformat=",d", tick0=0, dtick=count_dtick(top))
    if deadlines:
        _axis(layout, "y", 4).update(showticklabels=False, rangemode="normal", zeroline=False)


def count_dtick(top: float) -> int:
    """A whole tick step (1, 2, 5, 10, 20, 50, …) giving at most 6 ticks up to `top`."""
    base = 1
    while True:
        for m in (1, 2, 5):
            if top / (base * m) <= 6:
                return base * m
        base *= 10


def _legend_name(row: int) -> str:
    return "legend" if row == 1 else f"legend{row}"


def _row_legends(layout: dict[str, Any], n_rows: int) -> None:
    """One legend per subplot row, beside it on the right, so each name sits next to its lines."""
    for row in range(1, n_rows + 1):
        layout.setdefault(_legend_name(row), {}).update({
            "x": 1.01, "xanchor": "left", "y": _axis(layout, "y", row)["domain"][1], "yanchor": "top",
            "orientation": "v", "font": {"size": 11}, "bgcolor": "rgba(255,255,255,0)", "tracegroupgap": 2,
        })  # fmt: skip


def _gauge_trace(s: dict[str, Any], n_streams: int, first: bool) -> dict[str, Any]:
    color, width = GAUGE_STYLE.get(s["metric"], ("#6e7781", 1.2))
    stream_name = f"{s['stream']} {s['label']}"
    legend = stream_name if n_streams == 1 else f"{s['label']} ({n_streams} streams)"
    raw = s["metric"] == RAW_INFLIGHT
    # (y is copied, as plotly did: the caller's series outlives the figure)
    return {
        "type": "scatter", "x": [_ms(x) for x in s["x_us"]], "y": list(s["y"]), "name": escape(legend),
        "mode": "lines", "legendgroup": s["metric"], "showlegend": first,
        # the raw gauge sits above the floor whenever a batch admits requests: drawn, it reads as
        # requests stuck in a healthy window; one click on its legend entry draws it
        "visible": "legendonly" if raw else True,
        "line": {"width": width, "color": color, "shape": "hv"},
        # (report.js's instance picker: which host and label, unescaped, for its own escaping)
        "meta": {"host": s.get("host", "?"), "engine": s["engine"], "label": s["label"], "stream": s["stream"]},
        "hovertemplate": f"{escape(stream_name)}: %{{y}}"
        + (f" ({s['agg']} of its time bucket)" if s.get("agg") else "")
        + (" (counts this batch's new requests; the verdict reads the floor)" if raw else "")
        + "<br>%{x|%H:%M:%S}<extra></extra>",
    }  # fmt: skip


def _deadline_traces(
    deadlines: list[dict[str, Any]], timeout_s: float, grace_s: float
) -> list[dict[str, Any]]:
    held_x: list[float | None] = []
    held_y: list[int | None] = []
    over_x: list[float | None] = []
    over_y: list[int | None] = []
    dl_x, dl_y, dl_room, dl_text = [], [], [], []
    to_x, to_text = [], []
    for i, d in enumerate(deadlines):
        start, deadline, last = d.get("pinned_from_t"), d["watchdog_deadline_t"], d.get("last_t")
        if start is not None:
            held_x += [_ms(start), _ms(min(deadline, last or deadline)), None]
            held_y += [i, i, None]
        if last is not None and last > deadline:
            over_x += [_ms(deadline), _ms(last), None]
            over_y += [i, i, None]
        dl_x.append(_ms(deadline))
        dl_y.append(i)
        dl_room.append(str(d["room"]))
        who = f"room {d['room']} ({d['class']}), rid {d.get('prefill_rid') or '?'}"
        dl_text.append(escape(f"{who}: deadline + grace ({timeout_s:g} s + {grace_s:g} s after it was pinned); "
                              "still open here, it counts as stuck"))  # fmt: skip
        to_x.append(_ms(deadline - grace_s * US))
        to_text.append(escape(f"{who}: watchdog deadline ({timeout_s:g} s after it was pinned)"))
    return [
        {"type": "scatter", "x": held_x, "y": held_y, "mode": "lines", "name": "open, before deadline + grace",
         "line": {"color": "#0b61c4", "width": 3}, "hoverinfo": "skip"},
        {"type": "scatter", "x": over_x, "y": over_y, "mode": "lines", "name": "open past deadline + grace",
         "line": {"color": "#b3261e", "width": 3, "dash": "dot"}, "hoverinfo": "skip"},
        {"type": "scatter", "x": to_x, "y": dl_y, "mode": "markers", "name": "watchdog deadline",
         "customdata": dl_room, "hovertext": to_text, "hoverinfo": "text",
         "marker": {"symbol": "line-ns-open", "size": 14, "color": "#d29922", "line": {"width": 2}}},
        {"type": "scatter", "x": dl_x, "y": dl_y, "mode": "markers", "name": "deadline + grace",
         "customdata": dl_room, "hovertext": dl_text, "hoverinfo": "text",
         "marker": {"symbol": "line-ns-open", "size": 14, "color": "#b3261e", "line": {"width": 2}}},
    ]  # fmt: skip


def _marker_traces(markers: list[dict[str, Any]], lifecycle: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    if lifecycle:
        out.append({
            "type": "scatter", "x": [_ms(p["t_us"]) for p in lifecycle], "y": ["engine lifecycle"] * len(lifecycle),
            "mode": "markers", "name": "engine lifecycle",
            "marker": {"symbol": "triangle-down", "size": 10, "color": "#6e7781"},
            "hovertext": [escape(f"{p['host']} {p['engine']}: {p['event']}") for p in lifecycle],
            "hoverinfo": "text+x",
        })  # fmt: skip
    style = {"watchdog": ("watchdog firings", "x", "#d29922"), "abort": ("aborts", "diamond", "#8250df"),
             "failure": ("failures", "x-thin-open", "#1d232b")}  # fmt: skip
    for m in markers:
        lane, symbol, color = style[m["kind"]]
        if m["points"] is not None:
            pts = m["points"]
            if not pts:
                continue
            out.append({
                "type": "scatter", "x": [_ms(p["t_us"]) for p in pts], "y": [lane] * len(pts), "mode": "markers",
                "name": lane, "customdata": [p["room"] for p in pts],
                "marker": {"symbol": symbol, "size": 9, "color": color},
                "hovertext": [escape(f"room {p['room']}: {p.get('what') or ''}") for p in pts], "hoverinfo": "text+x",
            })  # fmt: skip
        else:
            b = m["buckets"]
            top = max(x["n"] for x in b) or 1
            out.append({
                "type": "scatter", "x": [_ms(x["t_us"]) for x in b], "y": [lane] * len(b), "mode": "markers",
                "name": f"{lane} (count)",
                "marker": {"symbol": symbol, "color": color, "size": [6 + 14 * (x["n"] / top) ** 0.5 for x in b]},
                "hovertext": [f"{x['n']:,} {lane} in {m['bucket_s']:g} s" for x in b], "hoverinfo": "text+x",
            })  # fmt: skip
    return out


def _hole_traces(holes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A marker per hole (at its end, where e.g. journald's `Suppressed` line is) with its detail on hover."""
    pts = [h for h in holes if h.get("to_t") is not None and h["kind"] != "short_window"]
    if not pts:
        return []
    return [{
        "type": "scatter", "x": [_ms(h["to_t"]) for h in pts], "y": ["coverage holes"] * len(pts),
        "mode": "markers", "name": "coverage holes",
        "marker": {"symbol": "square", "size": 9, "color": [HOLE_COLORS.get(h["kind"], "#999999") for h in pts],
                   "line": {"width": 1, "color": ["#b3261e" if h.get("decisive") else "#ffffff" for h in pts]}},
        "hovertext": [escape(f"{h['kind']}: {h.get('detail') or ''}" + (" — decides the verdict" if h.get("decisive") else ""))
                      for h in pts],
        "hoverinfo": "text+x",
    }]  # fmt: skip


def _rect(
    x0: int, x1: int, color: str, opacity: float, min_us: int, dash: str | None = None
) -> dict[str, Any]:
    # A one-second storm on an hour's axis would be invisible: spans get a minimum width.
    line = {"width": 0} if dash is None else {"width": 1, "color": color, "dash": dash}
    return {"type": "rect", "xref": "x", "yref": "paper", "x0": _ms(x0), "x1": _ms(max(x1, x0 + min_us)),
            "y0": 0, "y1": 1, "fillcolor": color, "opacity": opacity, "line": line, "layer": "below"}  # fmt: skip


def _window_shapes(restarts: list[dict[str, Any]], holes: list[dict[str, Any]], storms: list[dict[str, Any]],
                   window: tuple[int, int]) -> list[dict[str, Any]]:  # fmt: skip
    min_us = max(200_000, (window[1] - window[0]) // 300)
    shapes = []
    for r in restarts:
        end = r.get("up_t") or r.get("gone_t") or r["stop_t"]
        shapes.append(_rect(r["stop_t"], end, "#6e7781", 0.18, min_us))
    for s in storms:
        shapes.append(_rect(s["from_t"], s["to_t"], "#8250df", 0.22, min_us))
    for h in holes:
        if h["kind"] in ("engine_down", "short_window") or h.get("from_t") is None:
            continue  # engine_down is the restart span; a short window is the whole axis
        shapes.append(
            _rect(h["from_t"], h["to_t"], HOLE_COLORS.get(h["kind"], "#999999"), 0.16, min_us, "dot")
        )
    return shapes[:MAX_SHAPES]


def legend_items(restarts: list, holes: list, storms: list) -> list[tuple[str, str]]:
    """What the shaded spans mean (plotly has no legend entries for shapes)."""
    items = []
    if restarts:
        items.append(("#6e7781", "engine stopped → up again"))
    if storms:
        items.append(("#8250df", "abort storm"))
    for kind in sorted({h["kind"] for h in holes if h["kind"] not in ("engine_down", "short_window")}):
        items.append((HOLE_COLORS.get(kind, "#999999"), f"hole: {kind.replace('_', ' ')}"))
    return items


# ------------------------------------------------------------------ swimlanes


def gantt(
    lanes: list[dict[str, Any]], window: tuple[int, int], restarts: list[dict[str, Any]]
) -> dict[str, Any]:
    """One row per request: prefill phases in the upper half, decode in the lower; open spans hatched."""
    labels = [f"{r['class']} · {r['room']}" for r in lanes]
    bars: dict[str, dict[str, list]] = {}
    open_x, open_y, open_room = [], [], []
    pts: dict[str, dict[str, list]] = {}
    for r, label in zip(lanes, labels, strict=True):
        for s in r["phases"]:
            b = bars.setdefault(s["phase"], {"x": [], "base": [], "y": [], "pattern": [], "room": [], "hover": [],
                                             "offset": []})  # fmt: skip
            b["base"].append(_ms(s["start_us"]))
            b["x"].append(max((s["end_us"] - s["start_us"]) / 1000, 1))
            b["y"].append(label)
            b["offset"].append(-0.42 if s["engine"] == "prefill" else 0.02)
            b["pattern"].append("/" if s["open"] else "")
            b["room"].append(str(r["room"]))
            b["hover"].append(escape(f"room {r['room']} {s['engine']}: {s['phase']}{' (open)' if s['open'] else ''}"
                                     f" — {(s['end_us'] - s['start_us']) / US:.1f} s; {s['basis']}"))  # fmt: skip
            if s["open"]:
                open_x.append(_ms(s["end_us"]))
                open_y.append(label)
                open_room.append(str(r["room"]))
        for p in r["points"]:
            d = pts.setdefault(p["what"], {"x": [], "y": [], "room": []})
            d["x"].append(_ms(p["t_us"]))
            d["y"].append(label)
            d["room"].append(str(r["room"]))
    data = []
    for phase, b in bars.items():
        data.append({
            "type": "bar", "orientation": "h", "x": b["x"], "base": b["base"], "y": b["y"], "width": 0.4,
            "offset": b["offset"], "name": escape(phase), "customdata": b["room"], "hovertext": b["hover"],
            "hoverinfo": "text",
            "marker": {"color": PHASE_COLORS.get(phase, "#8da0b6"), "pattern": {"shape": b["pattern"], "size": 6}},
        })  # fmt: skip
    if open_x:
        data.append({"type": "scatter", "x": open_x, "y": open_y, "mode": "markers", "name": "open at the window end",
                     "customdata": open_room, "marker": {"symbol": "triangle-right", "size": 10, "color": "#b3261e"},
                     "hoverinfo": "skip"})  # fmt: skip
    for what, d in pts.items():
        symbol, color, size = POINT_STYLE.get(what, ("circle", "#444", 7))
        data.append({"type": "scatter", "x": d["x"], "y": d["y"], "mode": "markers", "name": escape(what),
                     "customdata": d["room"],
                     "marker": {"symbol": symbol, "color": color, "size": size, "line": {"width": 2, "color": color}},
                     "hovertemplate": f"{escape(what)} %{{x|%H:%M:%S.%L}}<extra></extra>"})  # fmt: skip
    layout = _base_layout(max(260, 24 * len(lanes) + 140))
    layout.update(
        template=_no_template(), barmode="overlay", margin={"l": MARGIN_L, "r": MARGIN_R, "t": 40, "b": 40}
    )
    layout["legend"] = {"x": 1.01, "xanchor": "left", "y": 1, "yanchor": "top", "orientation": "v",
                        "font": {"size": 11}}  # fmt: skip
    min_us = max(200_000, (window[1] - window[0]) // 300)
    _put_shapes(layout, [_rect(r["stop_t"], r.get("up_t") or r.get("gone_t") or r["stop_t"], "#6e7781", 0.15, min_us)
                         for r in restarts][:MAX_SHAPES])  # fmt: skip
    layout["xaxis"] = {"type": "date", "range": [_ms(window[0]), _ms(window[1])], "title": {"text": "UTC"},
                       "showgrid": True, "gridcolor": "#eef0f3"}  # fmt: skip
    # An explicit range: autorange pads a category axis by several rows for the marker sizes.
    layout["yaxis"] = {"type": "category", "categoryorder": "array", "categoryarray": labels,
                       "range": [len(labels) - 0.5, -0.5], "tickfont": {"family": "ui-monospace, monospace", "size": 11},
                       "showgrid": True, "gridcolor": "#f4f6f9"}  # fmt: skip
    return {"data": data, "layout": layout}


# ------------------------------------------------------------------ before and after (compare)


def compare_floor(before: list[list[int]], after: list[list[int]]) -> dict[str, Any]:
    """The inflight floor's distribution in two windows on one axis: the share of each window's
    batch lines at each floor (shares, not counts: the windows may differ in length and load)."""
    data = []
    for name, hist, color in (("before", before, "#8a94a3"), ("after", after, "#0b61c4")):
        total = sum(n for _, n in hist) or 1
        data.append({
            "type": "bar", "name": f"{name} ({total:,} batch lines)", "x": [f for f, _ in hist],
            "y": [n / total for _, n in hist], "marker": {"color": color},
            "hovertemplate": f"{name}: floor %{{x}}: %{{y:.1%}} of batch lines<extra></extra>",
        })  # fmt: skip
    layout = _base_layout(320)
    layout |= {
        "barmode": "group",
        "xaxis": {
            "title": {"text": "inflight floor (#inflight-req − #new-seq)"},
            "dtick": 1,
            "rangemode": "tozero",
        },
        "yaxis": {"title": {"text": "share of batch lines"}, "tickformat": ".0%", "rangemode": "tozero"},
    }
    return {"data": data, "layout": layout}
