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
    var expanded = {};  // spec.drill: row index -> its expansion is open
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
          // a fleet's instance: the row opens (and closes) a row under it with its reasons and requests
          var keyIdx = cols.findIndex(function (c) { return c.key === spec.drill.key; });
          var at = spec.rows.indexOf(r);
          tr.className = "clickable" + (expanded[at] ? " open" : "");
          tr.title = "show this instance's reasons and requests";
          tr.tabIndex = 0;
          tr.setAttribute("aria-expanded", expanded[at] ? "true" : "false");
          var toggle = function () {
            expanded[at] = !expanded[at];
            draw();
          };
          tr.addEventListener("click", toggle);
          tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") toggle(); });
          tbody.appendChild(tr);
          if (expanded[at]) tbody.appendChild(instanceRow(spec, at, String(r[keyIdx]), cols.length, host));
          return;
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

  // A fleet instance's expansion: its reasons, then its requests (those the requests table embeds,
  // the ones that did not complete first), each opening its timeline; and where else to look.
  var INSTANCE_REQUESTS = 12;

  function instanceRow(spec, at, host, span, tableHost) {
    var more = (spec.expand || [])[at] || {};
    var box = h("div", { class: "expansion" });
    // as wide as the table's visible box, not the table: a phone sees it without scrolling sideways
    var scroller = tableHost.querySelector(".scroll");
    if (scroller && scroller.clientWidth) box.style.maxWidth = (scroller.clientWidth - 20) + "px";
    var reasons = h("ul", { class: "why" });
    (more.reasons || []).forEach(function (x) { reasons.appendChild(h("li", { text: x })); });
    box.appendChild(reasons);
    if (more.timeout_source) box.appendChild(h("div", { class: "muted", text: "timeout from " + more.timeout_source }));
    var reqSpec = (DATA.tables || []).find(function (t) { return t.id === spec.drill.table; });
    var mine = [];
    if (reqSpec) {
      var keys = reqSpec.columns.map(function (c) { return c.key; });
      var col = keys.indexOf(spec.drill.column);
      mine = reqSpec.rows.filter(function (x) { return String(x[col]) === host; });
      var pick = ["room", "class", "d_host", "dwell_s", "first_t"].map(function (k) { return keys.indexOf(k); })
        .filter(function (i) { return i >= 0; });
      var tb = h("tbody");
      mine.slice(0, INSTANCE_REQUESTS).forEach(function (x) {
        var room = String(x[keys.indexOf("room")]);
        var tr = h("tr", { class: "clickable", "data-room": room, title: "show this request's timeline", tabindex: "0" });
        pick.forEach(function (i) {
          var type = reqSpec.columns[i].type;
          tr.appendChild(h("td", { class: type === "class" ? "cls cls-" + String(x[i]) : type === "dur" ? "num" : "",
            text: display(x[i], type) }));
        });
        var open = function (ev) { ev.stopPropagation(); selectRow(tr); showRequest(room); };
        tr.addEventListener("click", open);
        tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") open(ev); });
        tb.appendChild(tr);
      });
      var head = h("tr");
      pick.forEach(function (i) { head.appendChild(h("th", { text: reqSpec.columns[i].label })); });
      box.appendChild(h("div", { class: "muted", text: "Its requests: " + Math.min(mine.length, INSTANCE_REQUESTS) +
        " of the " + mine.length + " the report embeds, those that did not complete first." }));
      if (mine.length) box.appendChild(h("div", { class: "scroll" }, h("table", { class: "instance-requests" },
        h("thead", null, head), tb)));
    }
    var all = h("button", { type: "button", class: "to-requests", text: "all its requests in the Requests table" });
    all.addEventListener("click", function (ev) {
      ev.stopPropagation();
      var target = TABLES[spec.drill.table];
      if (!target) return;
      target.setExact(spec.drill.column, host);
      target.element.scrollIntoView({ block: "start" });
    });
    box.appendChild(all);
    var pickBox = document.getElementById("tl-pick");
    if (pickBox && pickBox.pickInstance && FLEET && (FLEET.hosts.prefill || []).indexOf(host) >= 0) {
      var gauges = h("button", { type: "button", class: "to-timeline", text: "its gauges on the timeline" });
      gauges.addEventListener("click", function (ev) {
        ev.stopPropagation();
        pickBox.pickInstance("prefill", host);
        document.getElementById("timeline").scrollIntoView({ block: "start" });
      });
      box.appendChild(gauges);
    }
    return h("tr", { class: "expanded" }, h("td", { colspan: String(span) }, box));
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
    // in its own scroll box: its nowrap cells would widen a phone's page to ~700 px
    box.appendChild(h("div", { class: "scroll" }, h("table", { class: "events" }, h("thead", null, h("tr", null,
      h("th", { text: "time (UTC)" }), h("th", { text: "engine" }), h("th", { text: "host" }), h("th", { text: "rank" }),
      h("th", { text: "event" }), h("th", { text: "state / reason" }))), tb)));
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
    // the timeline and the swimlanes share one time axis: the same margins on a phone too
    var left = div.id === "fig-timeline" || div.id === "fig-gantt" ? 62 : 40;
    if (L.yaxis && L.yaxis.type === "category" && div.id === "fig-gantt") {
      var labels = L.yaxis.categoryarray || [];
      L.yaxis.tickvals = labels;
      L.yaxis.ticktext = labels.map(function (l) {
        var parts = String(l).split(" · ");
        return (SHORT_CLASS[parts[0]] || parts[0].slice(0, 5)) + " …" + String(parts[1] || "").slice(-4);
      });
      L.yaxis.tickfont = { family: "ui-monospace, monospace", size: 9 };
    }
    L.margin = { l: left, r: 6, t: 30, b: 50 };
  }

  // ------------------------------------------------------------------ a fleet's instances

  // The timeline draws one prefill and one decode instance at a time (a select per engine; "every
  // instance" overlays them): 8 hosts' lines over each other cannot be told apart.
  var FLEET = DATA.fleet || null;
  var picked = FLEET ? { prefill: FLEET.default.prefill, decode: FLEET.default.decode } : {};

  // Per gauge trace (those with meta.host): visible, showlegend (the first drawn per gauge) and name.
  function instanceStyle(data) {
    var on = [], n = {}, out = { visible: [], showlegend: [], name: [], idx: [] }, seen = {}, state = {};
    data.forEach(function (t, i) {
      if (!t.meta || !t.meta.host) return;
      var want = picked[t.meta.engine];
      on[i] = !want || want === "*" || t.meta.host === want;
      if (on[i]) n[t.legendgroup] = (n[t.legendgroup] || 0) + 1;
      if (t.visible !== false && state[t.legendgroup] === undefined) state[t.legendgroup] = t.visible;
    });
    data.forEach(function (t, i) {
      if (!t.meta || !t.meta.host) return;
      var g = t.legendgroup;
      out.idx.push(i);
      // a gauge keeps what its legend entry was set to (the raw #inflight-req drawn or not)
      out.visible.push(on[i] ? (state[g] === undefined ? true : state[g]) : false);
      out.showlegend.push(on[i] && !seen[g]);
      if (on[i]) seen[g] = true;
      out.name.push(esc(n[g] === 1 ? t.meta.stream + " " + t.meta.label : t.meta.label + " (" + n[g] + " streams)"));
    });
    return out;
  }

  function applyInstances(div, data) {
    var st = instanceStyle(data);
    if (!div) {  // before the first draw: into the figure itself
      st.idx.forEach(function (i, k) {
        data[i].visible = st.visible[k]; data[i].showlegend = st.showlegend[k]; data[i].name = st.name[k];
      });
      return;
    }
    Plotly.restyle(div, { visible: st.visible, showlegend: st.showlegend, name: st.name }, st.idx);
  }

  function instancePicker(div) {
    var box = document.getElementById("tl-pick");
    if (!FLEET || !box) return;
    ["prefill", "decode"].forEach(function (engine) {
      var hosts = FLEET.hosts[engine] || [];
      if (hosts.length < 2) return;
      var sel = h("select", { id: "pick-" + engine, "aria-label": engine + " instance on the timeline" });
      hosts.forEach(function (host) {
        var v = (FLEET.verdicts || {})[host];
        sel.appendChild(h("option", { value: host, text: host + (v ? " — " + v : "") }));
      });
      sel.appendChild(h("option", { value: "*", text: "every " + engine + " instance (" + hosts.length + ", overlaid)" }));
      sel.value = picked[engine];
      sel.addEventListener("change", function () { pickInstance(engine, sel.value); });
      box.appendChild(h("label", null, engine + " instance ", sel));
    });
    box.pickInstance = function (engine, host) {
      picked[engine] = host;
      var sel = document.getElementById("pick-" + engine);
      if (sel) sel.value = host;
      applyInstances(div, div.data);
    };
    function pickInstance(engine, host) { box.pickInstance(engine, host); }
  }

  function plot(id, figId) {
    var fig = readJson(figId);
    var div = document.getElementById(id);
    if (!fig || !div) return;
    fitNarrow(div, fig);
    if (id === "fig-timeline" && FLEET) applyInstances(null, fig.data);
    var drawn = Plotly.newPlot(div, fig.data, fig.layout, { displaylogo: false, responsive: true });
    div.on("plotly_click", function (ev) {
      var pt = ev.points && ev.points[0];
      var room = pt && pt.customdata;
      if (Array.isArray(room)) room = room[0];
      if (room) showRequest(String(room));
    });
    return drawn.then(function () { return div; });
  }

  // The timeline's legends may widen its right margin past the one asked for (plotly makes room for
  // them): both figures then take the wider margins, so the swimlanes' time axis sits under the
  // timeline's, at the same pixels.
  function alignAxes(divs) {
    var edges = divs.map(function (div) {
      var d = div.getBoundingClientRect(), area = div.querySelector(".nsewdrag").getBoundingClientRect();
      return [area.left - d.left, d.right - area.right];
    });
    var l = Math.max.apply(null, edges.map(function (e) { return e[0]; }));
    var r = Math.max.apply(null, edges.map(function (e) { return e[1]; }));
    return Promise.all(divs.map(function (div, i) {
      if (Math.abs(edges[i][0] - l) < 1 && Math.abs(edges[i][1] - r) < 1) return div;
      return Plotly.relayout(div, { "margin.l": l, "margin.r": r, "margin.autoexpand": false });
    }));
  }

  function rendered(div) { if (div) div.setAttribute("data-rendered", "1"); }

  function init() {
    if (typeof Plotly === "undefined") {
      document.getElementById("js-error").textContent = "plotly.js did not load: plots are unavailable.";
      return;
    }
    // marks let a test (or a curious reader) see where opening time goes
    performance.mark("pdf-start");
    var timeline = plot("fig-timeline", "pdf-fig-timeline");
    instancePicker(document.getElementById("fig-timeline"));
    performance.mark("pdf-timeline");
    var gantt = plot("fig-gantt", "pdf-fig-gantt");
    var cmp = plot("fig-compare", "pdf-fig-compare");  // report --compare only
    if (cmp) cmp.then(rendered);
    performance.mark("pdf-gantt");
    // rendered (what a test or the screenshot waits for) once both share one time axis
    if (timeline && gantt) {
      Promise.all([timeline, gantt]).then(alignAxes).then(function () {
        rendered(document.getElementById("fig-timeline"));
        rendered(document.getElementById("fig-gantt"));
      }).catch(function (e) { document.getElementById("js-error").textContent = "plots: " + e; });
    } else {
      [timeline, gantt].forEach(function (p) { if (p) p.then(rendered); });
    }
    (DATA.tables || []).forEach(function (spec) {
      var host = document.getElementById("tbl-" + spec.id);
      if (host) renderTable(host, spec);
    });
    performance.mark("pdf-tables");
    window.pdforensics = { showRequest: showRequest };
  }

  init();
})();
