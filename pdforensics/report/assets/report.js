/* pdforensics report: tables, request detail, plots. No network, no innerHTML with data:
   every string from the logs reaches the page through textContent or a text node. */
(function () {
  "use strict";

  var PAGE = 50;
  performance.mark("pdf-parse");
  var DATA = readJson("pdf-data") || {};
  performance.mark("pdf-parsed");
  var REQS = DATA.requests || {};
  var selectedRow = null;
  var TABLES = {};  // table id -> {setExact, element}: a fleet row drills into the requests table

  function readJson(id) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  // Build an element; children are nodes or strings (strings become text nodes, never markup).
  function h(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "text") node.textContent = attrs[k];
        else if (k === "onclick") node.addEventListener("click", attrs[k]);
        else node.setAttribute(k, attrs[k]);
      });
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }

  function pad(n, w) { var s = String(n); while (s.length < w) s = "0" + s; return s; }

  function fmtTime(us) {
    if (us === null || us === undefined) return "";
    var d = new Date(Math.floor(us / 1000));
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1, 2) + "-" + pad(d.getUTCDate(), 2) + " " +
      pad(d.getUTCHours(), 2) + ":" + pad(d.getUTCMinutes(), 2) + ":" + pad(d.getUTCSeconds(), 2) + "." +
      pad(d.getUTCMilliseconds(), 3);
  }

  function fmtDur(s) {
    if (s === null || s === undefined) return "";
    if (Math.abs(s) < 1) return (s * 1000).toFixed(0) + " ms";
    if (Math.abs(s) < 120) return s.toFixed(1) + " s";
    if (Math.abs(s) < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function display(value, type) {
    if (value === null || value === undefined) return "";
    if (type === "time") return fmtTime(value);
    if (type === "dur") return fmtDur(value);
    if (type === "bool") return value ? "yes" : "no";
    if (type === "list") return Array.isArray(value) ? value.join(", ") : String(value);
    if (type === "num") return typeof value === "number" ? value.toLocaleString("en-US") : String(value);
    return String(value);
  }

  // Plotly renders a small HTML subset in hover text: escape log text before it goes there.
  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  // ------------------------------------------------------------------ tables

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;
    if (b === null || b === undefined) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b), "en", { numeric: true });
  }

  function renderTable(host, spec) {
    var cols = spec.columns;
    if (!spec.rows.length) {
      host.appendChild(h("p", { class: "muted empty", text: "None in this window." }));
      return;
    }
    var roomIdx = spec.room ? cols.findIndex(function (c) { return c.key === spec.room; }) : -1;
    // exact: one column equal to a value (a fleet row drilling into its requests), shown as a chip
    var state = { filter: "", sort: -1, dir: 1, page: 0, exact: null };
    var haystack = null;
    var input = h("input", { type: "search", placeholder: "filter rows…", "aria-label": "filter " + spec.title });
    var count = h("span", { class: "muted" });
    var prev = h("button", { type: "button", text: "‹ prev" });
    var next = h("button", { type: "button", text: "next ›" });
    var thead = h("thead");
    var tbody = h("tbody");
    var table = h("table", { "data-table": spec.id }, thead, tbody);
    var chip = h("button", { type: "button", class: "chip-exact", title: "show every row again" });
    chip.hidden = true;
    chip.addEventListener("click", function () { setExact(null, null); });
    host.appendChild(h("div", { class: "bar" }, input, chip, count, prev, next));
    if (spec.note) host.appendChild(h("div", { class: "muted", text: spec.note }));
    host.appendChild(h("div", { class: "scroll" }, table));

    var headRow = h("tr");
    cols.forEach(function (c, i) {
      var th = h("th", { text: c.label, title: "sort by " + c.label });
      th.addEventListener("click", function () {
        state.dir = state.sort === i ? -state.dir : (c.type === "time" || c.type === "text" ? 1 : -1);
        state.sort = i;
        state.page = 0;
        Array.prototype.forEach.call(headRow.children, function (x) { x.className = ""; });
        th.className = state.dir > 0 ? "sorted-asc" : "sorted-desc";
        draw();
      });
      headRow.appendChild(th);
    });
    thead.appendChild(headRow);

    function setExact(key, value) {
      var idx = key === null ? -1 : cols.findIndex(function (c) { return c.key === key; });
      state.exact = idx >= 0 ? { idx: idx, value: value } : null;
      chip.hidden = !state.exact;
      chip.textContent = state.exact ? cols[idx].label + " = " + value + " \u00d7" : "";
      state.page = 0;
      draw();
    }
    TABLES[spec.id] = { setExact: setExact, element: host };

    function rowsNow() {
      var rows = spec.rows;
      if (state.exact) {
        var ex = state.exact;
        rows = rows.filter(function (r) { return String(r[ex.idx]) === ex.value; });
      }
      if (state.filter) {
        if (!haystack) {
          // by row, not position: the exact filter may have narrowed `rows` already
          haystack = new Map();
          spec.rows.forEach(function (r) {
            haystack.set(r, r.map(function (v, i) { return display(v, cols[i].type); }).join("\u0001").toLowerCase());
          });
        }
        var f = state.filter;
        rows = rows.filter(function (r) { return haystack.get(r).indexOf(f) >= 0; });
      }
      if (state.sort >= 0) {
        var k = state.sort, d = state.dir;
        rows = rows.slice().sort(function (a, b) {
          var c = compare(a[k], b[k]);
          return a[k] === null || b[k] === null ? c : c * d;
        });
      }
      return rows;
    }

    function draw() {
      var rows = rowsNow();
      var pages = Math.max(1, Math.ceil(rows.length / PAGE));
      state.page = Math.min(state.page, pages - 1);
      var from = state.page * PAGE;
      tbody.textContent = "";
      rows.slice(from, from + PAGE).forEach(function (r) {
        var tr = h("tr");
        r.forEach(function (v, i) {
          var type = cols[i].type;
          var cls = type === "num" || type === "dur" ? "num" : type === "wrap" ? "wrap" : "";
          if (type === "class" || type === "verdict") cls = "cls cls-" + String(v);
          tr.appendChild(h("td", { class: cls, text: display(v, type) }));
        });
        if (spec.drill) {
          var keyIdx = cols.findIndex(function (c) { return c.key === spec.drill.key; });
          tr.className = "clickable";
          tr.title = "show this instance's requests";
          tr.tabIndex = 0;
          var drill = function () {
            var target = TABLES[spec.drill.table];
            selectRow(tr);
            if (!target) return;
            target.setExact(spec.drill.column, String(r[keyIdx]));
            target.element.scrollIntoView({ block: "start" });
          };
          tr.addEventListener("click", drill);
          tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") drill(); });
        } else if (roomIdx >= 0 && r[roomIdx] !== null) {
          tr.className = "clickable";
          tr.setAttribute("data-room", String(r[roomIdx]));
          tr.title = "show this request's timeline";
          tr.tabIndex = 0;
          var open = function () { selectRow(tr); showRequest(String(r[roomIdx])); };
          tr.addEventListener("click", open);
          tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") open(); });
        }
        tbody.appendChild(tr);
      });
      var shown = rows.length ? (from + 1) + "–" + Math.min(from + PAGE, rows.length) : "0";
      var total = spec.total !== undefined && spec.total > spec.rows.length
        ? " (" + spec.total.toLocaleString("en-US") + " in the window; " + spec.rows.length.toLocaleString("en-US") + " embedded)"
        : "";
      count.textContent = shown + " of " + rows.length.toLocaleString("en-US") + " rows" + total;
      prev.disabled = state.page === 0;
      next.disabled = state.page >= pages - 1;
    }

    var timer = null;
    input.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { state.filter = input.value.trim().toLowerCase(); state.page = 0; draw(); }, 120);
    });
    prev.addEventListener("click", function () { state.page--; draw(); });
    next.addEventListener("click", function () { state.page++; draw(); });
    draw();
  }

  function selectRow(tr) {
    if (selectedRow) selectedRow.classList.remove("selected");
    selectedRow = tr;
    tr.classList.add("selected");
  }

  // ------------------------------------------------------------------ request detail

  var PHASE_COLORS = DATA.phase_colors || {};

  function detailFigure(req) {
    var end = DATA.window ? DATA.window.end_us : null;
    var traces = [];
    var byPhase = {};
    (req.phases || []).forEach(function (p) {
      var key = p.phase;
      if (!byPhase[key]) {
        byPhase[key] = { type: "bar", orientation: "h", name: key, x: [], base: [], y: [], text: [], hovertext: [],
          hoverinfo: "text", textposition: "inside", insidetextanchor: "start",
          marker: { color: PHASE_COLORS[key] || "#8da0b6", pattern: { shape: [] } } };
        traces.push(byPhase[key]);
      }
      var t = byPhase[key];
      var stop = p.end_us === null || p.end_us === undefined ? end : p.end_us;
      t.base.push(p.start_us / 1000);
      t.x.push(Math.max((stop - p.start_us) / 1000, 1));
      t.y.push(p.engine);
      t.text.push(p.open ? key + " (open)" : key);
      t.marker.pattern.shape.push(p.open ? "/" : "");
      t.hovertext.push(esc(p.engine + " " + key + (p.open ? " — open at the window end" : "")) + "<br>" +
        esc(fmtTime(p.start_us) + " → " + (p.open ? "(open)" : fmtTime(stop))));
    });
    var ev = { type: "scatter", mode: "markers", name: "log lines", x: [], y: [], hovertext: [], hoverinfo: "text",
      marker: { symbol: "diamond", size: 9, color: "#1d232b" } };
    (req.events || []).forEach(function (e) {
      ev.x.push(e.t_us / 1000);
      ev.y.push(e.engine);
      ev.hovertext.push(esc(fmtTime(e.t_us) + " " + e.engine + " " + e.event + (e.tp_rank !== null ? " TP" + e.tp_rank : "") +
        (e.state ? " " + e.state : "") + (e.reason ? " — " + e.reason : "")));
    });
    traces.push(ev);
    var shapes = [];
    if (req.deadline_us) {
      shapes.push({ type: "line", x0: req.deadline_us / 1000, x1: req.deadline_us / 1000, yref: "paper", y0: 0, y1: 1,
        line: { color: "#b3261e", dash: "dash", width: 2 } });
    }
    var layout = { barmode: "overlay", height: 230, margin: { l: 70, r: 20, t: 10, b: 40 }, showlegend: true,
      legend: { orientation: "h", y: -0.3 }, xaxis: { type: "date", title: { text: "UTC" } },
      yaxis: { type: "category", categoryorder: "array", categoryarray: ["decode", "prefill"] }, shapes: shapes,
      annotations: req.deadline_us ? [{ x: req.deadline_us / 1000, yref: "paper", y: 1, text: "deadline + grace",
        showarrow: false, font: { color: "#b3261e", size: 11 }, xanchor: "left" }] : [] };
    return { data: traces, layout: layout };
  }

  function showRequest(room) {
    var box = document.getElementById("detail");
    box.hidden = false;
    box.textContent = "";
    var req = REQS[room];
    var close = h("button", { type: "button", text: "close" });
    close.addEventListener("click", function () { box.hidden = true; });
    box.appendChild(h("div", { class: "head" }, h("h3", { text: "Request bootstrap_room=" + room }), close));
    if (!req) {
      box.appendChild(h("p", { class: "muted", text: "This request's lines are not embedded (the report keeps " +
        "details for a bounded number of requests). Run: pdforensics timeline " + room }));
      box.scrollIntoView({ block: "nearest" });
      return;
    }
    var why = h("ul", { class: "why" });
    (req.why || []).forEach(function (w) { why.appendChild(h("li", { text: w })); });
    box.appendChild(why);
    var dl = h("dl");
    (req.facts || []).forEach(function (kv) {
      dl.appendChild(h("dt", { text: kv[0] }));
      dl.appendChild(h("dd", { text: kv[1] === null ? "" : String(kv[1]) }));
    });
    box.appendChild(dl);
    var plot = h("div", { id: "detail-plot", class: "plot" });
    box.appendChild(plot);
    var fig = detailFigure(req);
    fitNarrow(plot, fig);
    Plotly.newPlot(plot, fig.data, fig.layout, { displaylogo: false, responsive: true });
    box.appendChild(h("h3", { text: "Timeline (" + (req.events || []).length + " events)" }));
    var tb = h("tbody");
    (req.events || []).forEach(function (e) {
      tb.appendChild(h("tr", null, h("td", { text: fmtTime(e.t_us) }), h("td", { text: e.engine || "" }),
        h("td", { text: e.host || "" }), h("td", { text: e.tp_rank === null ? "" : "TP" + e.tp_rank }),
        h("td", { text: e.event }), h("td", { class: "wrap", text: [e.state, e.reason].filter(Boolean).join(" — ") })));
    });
    box.appendChild(h("table", { class: "events" }, h("thead", null, h("tr", null, h("th", { text: "time (UTC)" }),
      h("th", { text: "engine" }), h("th", { text: "host" }), h("th", { text: "rank" }), h("th", { text: "event" }),
      h("th", { text: "state / reason" }))), tb));
    var lines = req.lines || [];
    var title = "Raw log lines (" + lines.length + (req.lines_total > lines.length ? " of " + req.lines_total : "") + ")";
    box.appendChild(h("h3", { text: title }));
    var pre = h("pre", { class: "raw" });
    lines.forEach(function (l) {
      pre.appendChild(h("span", { class: "ln", text: fmtTime(l.t_us) + " " + (l.host || "") + " " + (l.unit || "") + " | " }));
      pre.appendChild(h("span", { class: "msg" }, l.message));  // (a bidi isolate: see report.css)
      pre.appendChild(document.createTextNode("\n"));
    });
    box.appendChild(pre);
    box.scrollIntoView({ block: "start" });
  }

  // ------------------------------------------------------------------ plots

  // A phone (390 px): one legend below the plot instead of legends beside each row, small margins so
  // the plot area keeps the width, and short swimlane labels (class and the room's last digits).
  var NARROW_PX = 700;
  var SHORT_CLASS = { silent_pin: "pin", watchdog_fired: "fired", in_flight: "open", transfer_failed: "xfer",
                      aborted: "abort", lost: "lost", completed: "ok" };

  function fitNarrow(div, fig) {
    if (div.clientWidth >= NARROW_PX) return;
    var L = fig.layout;
    Object.keys(L).forEach(function (k) { if (/^legend\d+$/.test(k)) delete L[k]; });
    var entries = 0;
    fig.data.forEach(function (t) { delete t.legend; if (t.showlegend !== false) entries++; });
    var extra = 18 * Math.ceil(entries / 2);
    L.height = (L.height || 400) + extra;
    L.legend = { orientation: "h", x: 0, xanchor: "left", y: -60 / L.height, yanchor: "top", font: { size: 10 } };
    var left = 40;
    if (L.yaxis && L.yaxis.type === "category" && div.id === "fig-gantt") {
      var labels = L.yaxis.categoryarray || [];
      L.yaxis.tickvals = labels;
      L.yaxis.ticktext = labels.map(function (l) {
        var parts = String(l).split(" · ");
        return (SHORT_CLASS[parts[0]] || parts[0].slice(0, 5)) + " …" + String(parts[1] || "").slice(-4);
      });
      L.yaxis.tickfont = { family: "ui-monospace, monospace", size: 9 };
      left = 62;
    }
    L.margin = { l: left, r: 6, t: 30, b: 50 };
  }

  function plot(id, figId) {
    var fig = readJson(figId);
    var div = document.getElementById(id);
    if (!fig || !div) return;
    fitNarrow(div, fig);
    Plotly.newPlot(div, fig.data, fig.layout, { displaylogo: false, responsive: true }).then(function () {
      div.setAttribute("data-rendered", "1");
    });
    div.on("plotly_click", function (ev) {
      var pt = ev.points && ev.points[0];
      var room = pt && pt.customdata;
      if (Array.isArray(room)) room = room[0];
      if (room) showRequest(String(room));
    });
  }

  function init() {
    if (typeof Plotly === "undefined") {
      document.getElementById("js-error").textContent = "plotly.js did not load: plots are unavailable.";
      return;
    }
    // marks let a test (or a curious reader) see where opening time goes
    performance.mark("pdf-start");
    plot("fig-timeline", "pdf-fig-timeline");
    performance.mark("pdf-timeline");
    plot("fig-gantt", "pdf-fig-gantt");
    plot("fig-compare", "pdf-fig-compare");  // report --compare only
    performance.mark("pdf-gantt");
    (DATA.tables || []).forEach(function (spec) {
      var host = document.getElementById("tbl-" + spec.id);
      if (host) renderTable(host, spec);
    });
    performance.mark("pdf-tables");
    window.pdforensics = { showRequest: showRequest };
  }

  init();
})();
