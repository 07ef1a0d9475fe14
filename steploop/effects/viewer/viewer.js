/* steploop's trace viewer (specs/rules.md VIEW-1 .. VIEW-5): one page, no network.
   Every string from the trace is inserted as a text node (never as markup). Only what is on
   screen is drawn: the round list renders its visible rows, the detail pane the chosen round. */
(function () {
  "use strict";
  var RAW = JSON.parse(document.getElementById("trace-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var COLOURS = RAW.colours;
  var MARKS = [["compaction", "compaction"], ["retry", "retry"], ["hook", "hook block"], ["recovery", "recovery"]];
  var FOLD = 1500;   // characters shown of a long text before "show all"
  var PAGE = 200;    // messages drawn at once in a whole conversation
  var query = "";

  // ---- DOM helpers: text only ---------------------------------------------------------------
  function h(tag, cls, kids) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (kids !== undefined) { add(e, kids); }
    return e;
  }
  function add(e, kids) {
    if (kids === null || kids === undefined) { return e; }
    if (!Array.isArray(kids)) { kids = [kids]; }
    kids.forEach(function (k) {
      if (k === null || k === undefined) { return; }
      e.appendChild(typeof k === "string" || typeof k === "number" ? marked(String(k)) : k);
    });
    return e;
  }
  function marked(s) {   // text, with the search query marked
    if (!query) { return document.createTextNode(s); }
    var low = s.toLowerCase(), f = document.createDocumentFragment(), at = 0, k;
    while ((k = low.indexOf(query, at)) >= 0) {
      if (k > at) { f.appendChild(document.createTextNode(s.slice(at, k))); }
      var m = document.createElement("mark");
      m.textContent = s.slice(k, k + query.length);
      f.appendChild(m);
      at = k + query.length;
    }
    if (at < s.length) { f.appendChild(document.createTextNode(s.slice(at))); }
    return f;
  }
  function svg(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function num(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
  function short(n) {
    if (n >= 1e6) { return (n / 1e6).toFixed(n % 1e6 ? 1 : 0) + "M"; }
    if (n >= 1e3) { return (n / 1e3).toFixed(n % 1e3 ? 1 : 0) + "k"; }
    return String(n);
  }
  function secs(ms) { return (ms / 1000).toFixed(ms < 10000 ? 3 : 1) + " s"; }
  function when(tr, ms) {   // an event's time: from the trace's first event (and the clock, when it is one)
    var rel = tr.d.t_start !== null ? "+" + secs(ms - tr.d.t_start) : num(ms) + " ms";
    return ms > 1e12 ? rel + " (" + new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC") + ")" : rel;
  }
  function oneLine(s, n) { s = String(s).replace(/\s+/g, " "); return s.length > n ? s.slice(0, n - 1) + "…" : s; }
  var PAGE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*\.html$/;
  function pageLink(href, text, cls) {   // a link to a page written beside this one (VIEW-6): a plain file name, else text only
    if (typeof href !== "string" || !PAGE_NAME.test(href)) { return h("span", cls || null, text); }
    var a = h("a", cls || null, text); a.setAttribute("href", href); return a;
  }
  function childLine(c) {   // a sub-agent's trace: its name (a link to its page), steps and terminal
    var el = h("span", "child");
    el.appendChild(pageLink(c.href, c.name, "child-link"));
    add(el, " (" + (c.agent_type ? c.agent_type + ", " : "") + num(c.steps) + " steps, " + (c.terminal ? "terminal " + c.terminal : "no end record (cut off)") + ")");
    return el;
  }
  function button(label, fn) { var b = h("button", null, label); b.type = "button"; b.addEventListener("click", fn); return b; }
  function fold(s, cls) {   // a long text: its start, and all of it on demand (never cut)
    var pre = h("pre", cls || null);
    if (s.length <= FOLD) { return add(pre, s); }
    add(pre, s.slice(0, FOLD) + "…");
    var wrap = h("div", null, pre);
    var more = button("show all " + num(s.length) + " characters", function () {
      pre.textContent = ""; add(pre, s); more.remove();
    });
    more.className = "fold";
    wrap.appendChild(more);
    return wrap;
  }
  function details(summary, body, open, cls) {
    var d = h("details", cls || null);
    d.appendChild(h("summary", null, summary));
    if (open) { d.open = true; }
    var filled = false;
    function fill() { if (!filled) { filled = true; add(d, typeof body === "function" ? body() : body); } }
    if (open) { fill(); } else { d.addEventListener("toggle", fill); }
    return d;
  }

  // ---- one trace ----------------------------------------------------------------------------
  function Trace(d, label) {
    this.d = d; this.label = label || "";
    this.rounds = d.rounds; this.steps = d.steps; this.reqs = d.reqs;
    this.msgs = d.msgs; this.strs = d.strs; this.cache = {}; this.hay = null;
  }
  Trace.prototype.str = function (x) {
    return typeof x === "string" ? x : x && typeof x.s === "number" ? this.strs[x.s] : x === null || x === undefined ? "" : String(x);
  };
  Trace.prototype.conv = function (k) {   // request k's messages (indices into msgs)
    if (this.cache[k]) { return this.cache[k]; }
    var chain = [], j = k;
    while (j >= 0 && !this.cache[j]) { chain.push(j); if (!this.reqs[j].runs.some(function (r) { return r[0] === 0; })) { break; } j -= 1; }
    var cur = j >= 0 && this.cache[j] ? this.cache[j] : [];
    for (var c = chain.length - 1; c >= 0; c--) {
      var runs = this.reqs[chain[c]].runs, next = [];
      for (var r = 0; r < runs.length; r++) {
        if (runs[r][0] === 0) { for (var x = runs[r][1]; x < runs[r][2]; x++) { next.push(cur[x]); } }
        else { for (var y = 1; y < runs[r].length; y++) { next.push(runs[r][y]); } }
      }
      cur = next;
      if (c === 0 || chain[c] % 64 === 0) { this.cache[chain[c]] = cur; }
    }
    return cur;
  };
  Trace.prototype.roundOfPos = function (pos) {
    var lo = 0, hi = this.rounds.length - 1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (this.rounds[mid].s0 <= pos) { lo = mid; } else { hi = mid - 1; } }
    return lo;
  };
  Trace.prototype.posOfStep = function (i) {
    var lo = 0, hi = this.steps.length - 1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1, s = this.steps[mid], si = s.i === undefined ? (mid > 0 ? this.steps[mid - 1].i : -1) : s.i;
      if (si === i && s.i !== undefined) { return mid; }
      if (si < i) { lo = mid + 1; } else { hi = mid - 1; }
    }
    return -1;
  };
  Trace.prototype.msgText = function (m) {
    var self = this, out = [m.type, m.origin || "", m.subtype || "", m.text || "", m.attachment_type || ""];
    (m.content || []).forEach(function (b) { out.push(self.blockText(b)); });
    (m.data || []).forEach(function (kv) { out.push(kv[0] + " " + kv[1]); });
    if (m.api_error) { out.push(m.api_error.message); }
    return out.join(" ");
  };
  Trace.prototype.blockText = function (b) {
    if (!b) { return ""; }
    switch (b.type) {
      case "text": return b.text;
      case "thinking": return b.thinking;
      case "tool_use": return b.name + " " + JSON.stringify(b.input);
      case "tool_result": return b.tool_use_id + " " + this.str(b.content);
      case "opaque": return b.block_type + " " + b.raw;
      default: return b.type;
    }
  };
  Trace.prototype.stepText = function (s) {
    var self = this, out = [];
    if (s.ev) {
      var ev = s.ev;
      out.push(ev.type);
      if (ev.block) { out.push(ev.block.msg !== undefined ? self.msgText(self.msgs[ev.block.msg]) : self.blockText(ev.block)); }
      ["message", "kind", "reason", "stop_reason", "summary", "text", "hook_stop_reason"].forEach(function (k) { if (typeof ev[k] === "string") { out.push(ev[k]); } });
      if (ev.content !== undefined) { out.push(self.str(ev.content)); }
      (ev.blocking_errors || []).forEach(function (t) { out.push(t); });
      (ev.messages || []).forEach(function (r) { out.push(self.msgText(self.msgs[r.ref])); });
    }
    (s.fx || []).forEach(function (e) {
      out.push(e.type);
      if (e.name) { out.push(e.name + " " + JSON.stringify(e.input)); }
      if (e.type === "emit" && e.item.ref !== undefined) { out.push(self.msgText(self.msgs[e.item.ref])); }
    });
    return out.join("\n");
  };
  Trace.prototype.search = function (q) {   // rounds whose steps mention q (case-insensitive)
    if (!this.hay) {
      var self = this;
      this.hay = this.rounds.map(function (r) {
        var parts = [r.tr, Object.keys(r.tools).join(" ")];
        for (var p = r.s0; p <= r.s1; p++) { parts.push(self.stepText(self.steps[p])); }
        return parts.join("\n").toLowerCase();
      });
    }
    var hits = [];
    this.hay.forEach(function (t, i) { if (t.indexOf(q) >= 0) { hits.push(i); } });
    return hits;
  };
  Trace.prototype.markers = function (r) {
    return {compaction: r.comp > 0 || !!r.lay.compaction, retry: r.retry > 0, hook: r.hooks > 0, recovery: r.recov > 0};
  };

  // ---- the timeline -------------------------------------------------------------------------
  function peakOf(tr) { var p = 0; tr.rounds.forEach(function (r) { p = Math.max(p, r.ctx, r.est || 0); }); return p; }
  function Timeline(tr, host, perRound, onPick, title, peak) {
    this.tr = tr; this.perRound = perRound;
    var n = tr.rounds.length, left = 78, right = 16, top = 30, height = 200, bottom = 34;
    this.left = left; this.top = top; this.height = height;
    var width = Math.max(640, left + right + n * (perRound.bar + perRound.gap));
    var box = h("div", "scroll");
    var s = svg("svg", {"class": "timeline", width: width, height: top + height + bottom, viewBox: "0 0 " + width + " " + (top + height + bottom),
                        role: "img", "aria-label": title + ": the prompt's size per round against the context window; click a round to open it"});
    box.appendChild(s); host.appendChild(box);
    this.svg = s; this.box = box;
    var cfg = tr.d.config;
    peak = peak === undefined ? peakOf(tr) : peak;   // two runs compared share one scale
    this.peak = peak;
    this.fit = peak > 0 && peak < 0.5 * (cfg.context_window || 1);
    var self = this;
    s.addEventListener("click", function (ev) {
      var rect = s.getBoundingClientRect(), x = (ev.clientX - rect.left) * (width / rect.width);
      var i = Math.floor((x - left) / (perRound.bar + perRound.gap));
      if (i >= 0 && i < n) { onPick(i); }
    });
    this.draw();
  }
  Timeline.prototype.draw = function () {
    var s = this.svg, tr = this.tr, cfg = tr.d.config, left = this.left, top = this.top, height = this.height;
    while (s.firstChild) { s.removeChild(s.firstChild); }
    var width = Number(s.getAttribute("width")), bar = this.perRound.bar, step = bar + this.perRound.gap;
    var max = this.fit ? niceMax(Math.max(this.peak * 1.15, 100)) : Math.max(cfg.context_window || 1, this.peak, 1);
    function y(t) { return top + height - height * Math.min(t, max) / max; }
    // the token axis
    svg("path", {"class": "axis", d: "M" + left + "," + top + " V" + (top + height) + " H" + (width - 8)}, s);
    for (var k = 1; k <= 4; k++) {
      var v = max * k / 4;
      svg("path", {"class": "grid", d: "M" + left + "," + y(v) + " H" + (width - 8)}, s);
      svg("text", {x: left - 4, y: y(v) + 4, "text-anchor": "end"}, s).textContent = short(Math.round(v));
    }
    svg("text", {x: left - 4, y: top + height + 4, "text-anchor": "end"}, s).textContent = "0";
    svg("text", {x: 4, y: top - 18}, s).textContent = "tokens (prompt)";
    var off = [];
    [["window", cfg.context_window, "context window"], ["compact", cfg.autocompact_threshold, "auto-compact"],
     ["blocking", cfg.blocking_limit, "blocking limit"]].forEach(function (l) {
      if (l[1] === null || l[1] === undefined) { return; }
      if (l[1] > max) { off.push(l[2] + " " + num(l[1])); return; }
      svg("path", {"class": "limit " + l[0], d: "M" + left + "," + y(l[1]) + " H" + (width - 8)}, s);
      svg("text", {x: width - 10, y: y(l[1]) - 3, "text-anchor": "end"}, s).textContent = l[2] + " " + num(l[1]);
    });
    if (off.length) { svg("text", {x: left + 4, y: top - 4}, s).textContent = "above this scale: " + off.join(", "); }
    var paths = {}, tools = [], marks = {compaction: [], retry: [], hook: [], recovery: []}, base = top + height;
    tr.rounds.forEach(function (r, i) {
      var x = left + i * step, hgt = Math.max(3, base - y(r.ctx));
      (paths[r.kind] = paths[r.kind] || []).push("M" + x + "," + (base - hgt) + "h" + bar + "v" + hgt + "h" + (-bar) + "z");
      var count = 0;
      Object.keys(r.tools).forEach(function (t) { count += r.tools[t]; });
      for (var k = 0; k < Math.min(count, 6); k++) { tools.push("M" + x + "," + (base + 4 + k * 4) + "h" + Math.max(bar, 1) + "v3h" + (-Math.max(bar, 1)) + "z"); }
      var mk = tr.markers(r), w = Math.max(bar, 3), mx = x + bar / 2 - w / 2;
      MARKS.forEach(function (m, row) {
        if (mk[m[0]]) { marks[m[0]].push("M" + mx + "," + (top - 14 + row * 0) + "h" + w + "l" + (-w / 2) + ",6z"); }
      });
    });
    Object.keys(paths).forEach(function (kind) { svg("path", {"class": "bars " + kind, d: paths[kind].join(""), fill: COLOURS[kind]}, s); });
    if (tools.length) { svg("path", {"class": "tool", d: tools.join("")}, s); }
    MARKS.forEach(function (m, row) {
      if (marks[m[0]].length) { svg("path", {"class": "mk-" + m[0], d: marks[m[0]].join(""), transform: "translate(0," + (row * 7 - 6) + ")"}, s); }
    });
    if (tr.rounds.length <= 60) {
      tr.rounds.forEach(function (r, i) { svg("text", {x: left + i * step + bar / 2, y: base + 30, "text-anchor": "middle"}, s).textContent = String(r.n); });
    }
    this.matches = svg("path", {"class": "mk-match", d: ""}, s);
    this.cursor = svg("rect", {"class": "cursor", x: -10, y: top - 2, width: bar + 4, height: height + 4}, s);
    this.divline = svg("path", {"class": "divline", d: ""}, s);
  };
  Timeline.prototype.pos = function (i) { return this.left + i * (this.perRound.bar + this.perRound.gap); };
  Timeline.prototype.select = function (i) {
    var x = this.pos(i);
    this.cursor.setAttribute("x", x - 2);
    var w = this.box.clientWidth;
    if (w && (x < this.box.scrollLeft + 80 || x > this.box.scrollLeft + w - 40)) { this.box.scrollLeft = Math.max(0, x - w / 2); }
  };
  Timeline.prototype.showMatches = function (hits) {
    var self = this, w = Math.max(this.perRound.bar, 3);
    this.matches.setAttribute("d", hits.map(function (i) { return "M" + (self.pos(i) + self.perRound.bar / 2 - w / 2) + "," + (self.top + self.height + 28) + "h" + w + "v4h" + (-w) + "z"; }).join(""));
  };
  Timeline.prototype.mark = function (i) {
    if (i === null || i === undefined || i < 0) { return; }
    var x = this.pos(i) + this.perRound.bar / 2;
    this.divline.setAttribute("d", "M" + x + "," + (this.top - 20) + " V" + (this.top + this.height + 6));
  };
  function niceMax(v) {
    if (v <= 0) { return 1; }
    var p = Math.pow(10, Math.floor(Math.log(v) / Math.LN10)), f = v / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
  }
  function perRoundFor(n) { return n <= 60 ? {bar: 18, gap: 8} : n <= 300 ? {bar: 4, gap: 2} : {bar: 1, gap: 0}; }
  function legend(host) {
    var l = h("div", "legend");
    [["continue", "a Continue (the turn goes on)"], ["completed", "completed"], ["terminal", "another Terminal"], ["open", "unfinished (cut off)"]].forEach(function (p) {
      var sp = h("span"), sw = svg("svg", {width: 12, height: 12}); svg("rect", {width: 12, height: 12, fill: COLOURS[p[0]]}, sw);
      sp.appendChild(sw); add(sp, p[1]); l.appendChild(sp);
    });
    var ts = h("span"), tw = svg("svg", {width: 12, height: 12}); svg("rect", {"class": "tool", y: 4, width: 12, height: 3}, tw);
    ts.appendChild(tw); add(ts, "under a bar: one mark per tool call (up to 6)"); l.appendChild(ts);
    MARKS.forEach(function (m) {
      var sp = h("span"), sw = svg("svg", {width: 12, height: 12}); svg("path", {"class": "mk-" + m[0], d: "M1,3h10l-5,7z"}, sw);
      sp.appendChild(sw); add(sp, "above: " + m[1]); l.appendChild(sp);
    });
    host.appendChild(l);
  }

  // ---- the virtual round list ----------------------------------------------------------------
  function List(host, count, draw, onPick, label) {
    var ROW = 22, el = h("div", "rounds");
    el.tabIndex = 0; el.id = "rounds"; el.setAttribute("role", "listbox"); el.setAttribute("aria-label", label);
    var spacer = h("div"); spacer.style.height = (count * ROW) + "px"; el.appendChild(spacer);
    host.appendChild(el);
    var self = this, drawn = {};
    this.el = el; this.sel = 0; this.count = count;
    function render() {
      var first = Math.max(0, Math.floor(el.scrollTop / ROW) - 8), last = Math.min(count - 1, first + Math.ceil((el.clientHeight || 600) / ROW) + 16);
      Object.keys(drawn).forEach(function (k) { if (k < first || k > last) { drawn[k].remove(); delete drawn[k]; } });
      for (var i = first; i <= last; i++) {
        if (drawn[i]) { continue; }
        var row = h("div", "row"); row.style.top = (i * ROW) + "px"; row.id = "row-" + i;
        row.setAttribute("role", "option"); row.dataset.i = String(i);
        draw(i, row);
        if (i === self.sel) { row.classList.add("sel"); row.setAttribute("aria-selected", "true"); }
        el.appendChild(row); drawn[i] = row;
      }
    }
    this.render = function () { Object.keys(drawn).forEach(function (k) { drawn[k].remove(); delete drawn[k]; }); render(); };
    el.addEventListener("scroll", function () { window.requestAnimationFrame(render); });
    el.addEventListener("click", function (ev) { var r = ev.target.closest(".row"); if (r) { onPick(Number(r.dataset.i)); } });
    this.select = function (i) {
      self.sel = i;
      var top = i * ROW;
      if (top < el.scrollTop || top + ROW > el.scrollTop + (el.clientHeight || 600)) { el.scrollTop = Math.max(0, top - (el.clientHeight || 600) / 2); }
      self.render();
      el.setAttribute("aria-activedescendant", "row-" + i);
    };
    render();
  }
  function roundRow(tr, i, row, prefix) {
    var r = tr.rounds[i];
    var sw = h("span", "sw"); sw.style.background = COLOURS[r.kind];
    row.appendChild(h("span", "num", (prefix || "") + r.n));
    row.appendChild(sw);
    add(row, (r.tr || "(unfinished)") + " · " + short(r.ctx) + " tok");
    var nt = 0; Object.keys(r.tools).forEach(function (t) { nt += r.tools[t]; });
    if (nt) { add(row, " · " + nt + " tool" + (nt > 1 ? "s" : "")); }
    var mk = tr.markers(r), sym = {compaction: "◆C", retry: "↻", hook: "✋", recovery: "⟲"};
    MARKS.forEach(function (m) { if (mk[m[0]]) { var s = h("span", "mk mk-" + m[0], sym[m[0]]); s.title = m[1]; row.appendChild(s); } });
  }

  window.steploopViewer = {h: h, add: add, fold: fold, details: details, button: button, num: num, short: short, oneLine: oneLine, secs: secs, when: when, pageLink: pageLink, childLine: childLine,
                           Trace: Trace, Timeline: Timeline, peakOf: peakOf, List: List, legend: legend, roundRow: roundRow, perRoundFor: perRoundFor,
                           raw: RAW, PAGE: PAGE, setQuery: function (q) { query = q; }, getQuery: function () { return query; }};
})();
