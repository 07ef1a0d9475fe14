/* steploop's trace viewer: the page (one trace, or two side by side), keys, deep links, search. */
(function (V) {
  "use strict";
  var h = V.h, add = V.add, num = V.num, button = V.button, R = V.render, RAW = V.raw;
  var app = document.getElementById("app");
  app.textContent = "";
  var compare = RAW.mode === "compare";
  var A = new V.Trace(compare ? RAW.a : RAW.trace, compare ? "A" : "");
  var B = compare ? new V.Trace(RAW.b, "B") : null;
  var n = compare ? Math.max(A.rounds.length, B.rounds.length) : A.rounds.length;
  var cur = -1, curStep = -1, hits = [], timelines = [];
  var div = compare ? RAW.divergence : null;

  // ---- the header ----------------------------------------------------------------------------
  function header(tr, title) {
    var d = tr.d, p = d.provenance, box = h("div", "head");
    box.appendChild(h(title ? "h2" : "h1", null, (title ? title + ": " : "steploop trace ") + d.name));
    add(box, h("p", "meta", "profile " + d.profile + " · model " + d.model + " · recorded " + (p.created_at || "?") + " with " + (p.client || "no model client") +
                " · steploop " + d.steploop + " · trace format " + d.version));
    var extra = Object.keys(p).filter(function (k) { return ["created_at", "client", "steploop", "python", "platform"].indexOf(k) < 0 && p[k] !== null; });
    if (extra.length) { box.appendChild(h("p", "meta", extra.map(function (k) { return k + ": " + p[k]; }).join(" · "))); }
    var prompt = typeof d.prompt === "string" ? d.prompt : d.prompt.map(function (b) { return A.blockText(b); }).join("\n");
    var pr = h("div", "meta"); add(pr, "prompt: "); pr.appendChild(V.fold(prompt)); box.appendChild(pr);
    var c = d.config;
    box.appendChild(h("p", "meta", tr.rounds.length + " round(s), " + num(d.steps_total) + " steps; " + (d.terminal ? "terminal " + d.terminal : "no end record (cut off)") +
                      (d.resumes ? "; resumed " + d.resumes + "×" : "") + " · context window " + num(c.context_window) +
                      (c.autocompact_threshold !== null ? " · auto-compact at " + num(c.autocompact_threshold) : " · auto-compact off") +
                      " · blocking limit " + num(c.blocking_limit)));
    if (!d.replay.ok && d.replay.note) { box.appendChild(h("p", "note", d.replay.note)); }
    if (d.parent) {   // a sub-agent's page: back to its parent's (VIEW-6)
      var up = h("p", "meta parent"); up.id = "parent";
      add(up, "a sub-agent of "); up.appendChild(V.pageLink(d.parent.href, d.parent.name, "parent-link")); add(up, " (its call " + d.parent.call + ")");
      box.appendChild(up);
    }
    var kids = d.children ? Object.keys(d.children) : [];
    if (kids.length) {
      var sub = h("div", "meta children"); sub.id = "children";
      add(sub, "sub-agents (" + kids.length + " call(s) with a trace of their own):");
      kids.forEach(function (tid) { d.children[tid].forEach(function (c) { var row = h("div"); add(row, tid + " → "); row.appendChild(V.childLine(c)); sub.appendChild(row); }); });
      box.appendChild(sub);
    }
    return box;
  }
  if (compare) {
    app.appendChild(h("h1", null, RAW.title));
    app.appendChild(header(A, "A")); app.appendChild(header(B, "B"));
    var box = h("div", "divergence"); box.id = "divergence";
    if (div.step === null) { add(box, div.summary); } else {
      add(box, "First divergence at step " + div.step + " (round " + (div.round_a !== null ? A.rounds[div.round_a].n : "–") + " of A, round " +
          (div.round_b !== null ? B.rounds[div.round_b].n : "–") + " of B): " + div.summary + " ");
      box.appendChild(button("go there", function () { select(div.round_a !== null ? div.round_a : div.round_b, true, div.step); }));
      var lines = div.lines || [];
      if (lines.length) { box.appendChild(V.details("what differs, field by field (" + lines.length + " lines, as steploop diff prints them)", function () { return h("pre", null, lines.join("\n")); }, lines.length <= 12)); }
    }
    if (div.report) { box.appendChild(h("div", "muted", "the counterfactual replay's report:")); box.appendChild(h("pre", null, div.report)); }
    app.appendChild(box);
  } else {
    app.appendChild(header(A, ""));
  }

  // ---- timelines -----------------------------------------------------------------------------
  var per = V.perRoundFor(n), peak = compare ? Math.max(V.peakOf(A), V.peakOf(B)) : undefined;
  app.appendChild(h("h2", null, "Timeline: the prompt's size per round against the context window"));
  [A, B].forEach(function (tr) {
    if (!tr) { return; }
    if (compare) { app.appendChild(h("div", "muted", tr.label + ": " + tr.d.name)); }
    var t = new V.Timeline(tr, app, per, function (i) { select(i, true); }, compare ? tr.label : "the run", peak);
    timelines.push(t);
    var fit = button(t.fit ? "scale: the run's peak (show the whole window)" : "scale: the context window (fit the run)", function () {
      t.fit = !t.fit; t.draw(); t.select(Math.max(cur, 0)); t.showMatches(hitsOf(tr)); markDivergence();
      fit.textContent = t.fit ? "scale: the run's peak (show the whole window)" : "scale: the context window (fit the run)";
    });
    app.appendChild(fit);
  });
  V.legend(app);
  function markDivergence() {
    if (!div || div.step === null) { return; }
    timelines[0].mark(div.round_a); if (timelines[1]) { timelines[1].mark(div.round_b); }
  }
  markDivergence();

  // ---- search and keys -----------------------------------------------------------------------
  var bar = h("div", "toolbar");
  var search = h("input"); search.type = "search"; search.id = "search"; search.placeholder = "search text and tool names ( / )";
  search.setAttribute("aria-label", "search the rounds' text and tool names");
  var found = h("span", "muted"); found.id = "found";
  bar.appendChild(search); bar.appendChild(found);
  bar.appendChild(button("◀ previous match", function () { nextHit(-1); }));
  bar.appendChild(button("next match ▶", function () { nextHit(1); }));
  bar.appendChild(button("keys (?)", function () { help.hidden = !help.hidden; }));
  app.appendChild(bar);
  var help = h("div", "help");
  help.hidden = true;
  [["j / ↓ / n", "next round"], ["k / ↑ / p", "previous round"], ["Home / End", "first / last round"], [". / ]", "next step"], [", / [", "previous step"],
   ["Enter / e", "fold or unfold the step's tool calls and results"], ["/", "search; Enter: next match, Shift+Enter: previous"], ["d", "the first divergence (comparisons)"],
   ["?", "this help"], ["#round=72&step=300", "a link to a round (and a step)"]].forEach(function (p) {
    var row = h("div"); row.appendChild(h("b", null, p[0])); add(row, "  " + p[1]); help.appendChild(row);
  });
  document.body.appendChild(help);

  function hitsOf(tr) { return tr === A ? hits.a || [] : hits.b || []; }
  var pending = null;
  search.addEventListener("input", function () { clearTimeout(pending); pending = setTimeout(runSearch, 120); });
  search.addEventListener("keydown", function (e) {
    if (e.key === "Enter") { e.preventDefault(); clearTimeout(pending); runSearch(); nextHit(e.shiftKey ? -1 : 1); }
    if (e.key === "Escape") { search.blur(); }
  });
  var searched = "";
  function runSearch() {
    var q = search.value.trim().toLowerCase();
    if (q === searched) { return; }
    searched = q;
    V.setQuery(q);
    hits = {a: q ? A.search(q) : [], b: q && B ? B.search(q) : []};
    var all = {};
    hits.a.concat(hits.b).forEach(function (i) { all[i] = true; });
    hits.all = Object.keys(all).map(Number).sort(function (x, y) { return x - y; });
    found.textContent = q ? hits.all.length + " round(s) match" : "";
    timelines[0].showMatches(hits.a); if (timelines[1]) { timelines[1].showMatches(hits.b); }
    list.render();
    if (cur >= 0) { show(cur); }
  }
  function nextHit(d) {
    var all = hits.all || [];
    if (!all.length) { return; }
    var k = d > 0 ? all.find(function (i) { return i > cur; }) : all.slice().reverse().find(function (i) { return i < cur; });
    if (k === undefined) { k = d > 0 ? all[0] : all[all.length - 1]; }
    select(k, true);
  }

  // ---- the round list and the detail ----------------------------------------------------------
  var split = h("div", "split");
  app.appendChild(split);
  var list = new V.List(split, n, function (i, row) {
    if (compare) {
      var a = A.rounds[i], b = B.rounds[i];
      row.appendChild(h("span", "num", String(i + 1)));
      add(row, "A " + (a ? (a.tr || "(unfinished)") + " " + V.short(a.ctx) : "—") + " │ B " + (b ? (b.tr || "(unfinished)") + " " + V.short(b.ctx) : "—"));
      if (!a || !b || a.tr !== b.tr || a.ctx !== b.ctx || a.calls !== b.calls) { row.appendChild(h("span", "mk", " ≠")); }
      if (div && (i === div.round_a || i === div.round_b)) { row.classList.add("diverged"); }
    } else {
      V.roundRow(A, i, row);
    }
    if ((hits.all || []).indexOf(i) >= 0) { row.classList.add("hit"); }
  }, function (i) { select(i, true); }, compare ? "rounds of A and B, aligned" : "rounds");
  var detail = h("div", "detail" + (compare ? " two" : ""));
  detail.id = "detail";
  split.appendChild(detail);

  function goPos(tr, pos) {
    var i = tr.roundOfPos(pos);
    select(i, true, tr.steps[pos].i, tr);
  }
  function show(i) {
    detail.textContent = "";
    [A, B].forEach(function (tr) {
      if (!tr) { return; }
      var col = h("div");
      if (i < tr.rounds.length) { col.appendChild(R.round(tr, i, function (pos) { goPos(tr, pos); })); }
      else { col.appendChild(h("p", "muted", tr.label + " has no round " + (i + 1))); }
      detail.appendChild(col);
    });
  }
  function select(i, push, stepI, tr) {
    if (i < 0 || i >= n) { return; }
    cur = i; curStep = -1;
    list.select(i);
    timelines.forEach(function (t, k) { t.select(Math.min(i, (k ? B : A).rounds.length - 1)); });
    show(i);
    document.body.setAttribute("data-selected-round", String(i + 1));
    var hash = "#round=" + (i + 1) + (stepI !== undefined && stepI !== null ? "&step=" + stepI : "");
    if (push && location.hash !== hash) { history.replaceState(null, "", hash); }
    if (stepI !== undefined && stepI !== null) {
      var cols = detail.children, col = tr === B && cols[1] ? cols[1] : cols[0];
      var el = col && col.querySelector("#step-" + stepI);
      if (el) { focusStep(el); }
    }
  }
  function steps() { return Array.prototype.slice.call((detail.children[0] || detail).querySelectorAll(".step")); }
  function focusStep(el) {
    detail.querySelectorAll(".step.cur").forEach(function (x) { x.classList.remove("cur"); });
    el.classList.add("cur"); el.focus({preventScroll: true}); el.scrollIntoView({block: "nearest"});
    curStep = steps().indexOf(el);
  }
  function moveStep(d) {
    var all = steps();
    if (!all.length) { return; }
    var k = curStep < 0 ? (d > 0 ? 0 : all.length - 1) : Math.max(0, Math.min(all.length - 1, curStep + d));
    focusStep(all[k]);
  }
  function toggle() {
    var all = steps(), el = curStep >= 0 ? all[curStep] : null;
    var ds = el ? el.querySelectorAll("details") : [];
    if (!ds.length) { return; }
    var open = !ds[0].open;
    ds.forEach(function (d) { d.open = open; });
  }
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (e.ctrlKey || e.metaKey || e.altKey) { return; }
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA")) { return; }
    if (t && t.tagName === "SUMMARY" && (e.key === "Enter" || e.key === " ")) { return; }
    var k = e.key, done = true;
    if (k === "j" || k === "ArrowDown" || k === "n") { select(Math.min(n - 1, cur + 1), true); }
    else if (k === "k" || k === "ArrowUp" || k === "p") { select(Math.max(0, cur - 1), true); }
    else if (k === "Home") { select(0, true); }
    else if (k === "End") { select(n - 1, true); }
    else if (k === "." || k === "]") { moveStep(1); }
    else if (k === "," || k === "[") { moveStep(-1); }
    else if (k === "Enter" || k === "e") { toggle(); }
    else if (k === "/") { search.focus(); search.select(); }
    else if (k === "?") { help.hidden = !help.hidden; }
    else if (k === "d" && div && div.step !== null) { select(div.round_a !== null ? div.round_a : div.round_b, true, div.step); }
    else { done = false; }
    if (done) { e.preventDefault(); }
  });
  function fromHash() {
    var m = /round=(\d+)/.exec(location.hash), s = /step=(\d+)/.exec(location.hash);
    if (m) { select(Math.max(0, Math.min(n - 1, Number(m[1]) - 1)), false, s ? Number(s[1]) : null); return true; }
    if (s) {
      var pos = A.posOfStep(Number(s[1]));
      if (pos >= 0) { select(A.roundOfPos(pos), false, Number(s[1])); return true; }
    }
    return false;
  }
  window.addEventListener("hashchange", fromHash);
  if (!fromHash()) { select(compare && div && div.step !== null ? (div.round_a !== null ? div.round_a : div.round_b) : 0, false); }
  document.body.setAttribute("data-rounds", String(n));
  console.log("steploop viewer: drew " + n + " rounds");
})(window.steploopViewer);
