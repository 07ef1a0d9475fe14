/* steploop's trace viewer: a round, its request, its steps, messages and blocks (text nodes only). */
(function (V) {
  "use strict";
  var h = V.h, add = V.add, fold = V.fold, details = V.details, button = V.button, num = V.num, oneLine = V.oneLine;
  var LAYERS = [["budget", "tool-result budget (R-CTX-0)"], ["snip", "snip (S-SNIP-1)"], ["microcompact", "microcompact (R-CTX-3)"],
                ["collapse", "collapse (S-COLLAPSE-1)"], ["compaction", "compaction (R-CTX-4)"]];

  function kv(rows) {
    var t = h("table", "kv");
    rows.forEach(function (r) {
      if (!r) { return; }
      var tr = h("tr"); tr.appendChild(h("th", null, r[0]));
      var td = h("td", r[2] ? "n" : null); add(td, r[1]); tr.appendChild(td); t.appendChild(tr);
    });
    return t;
  }
  function badge(tag, kind) { return h("span", "tr " + (kind || ""), tag || "(unfinished)"); }
  function kindOf(tr, tag) {
    var r = tr.rounds.find(function (x) { return x.tr === tag; });
    return r ? r.kind : "";
  }
  function jump(label, fn) { var a = h("a", "jump", label); a.tabIndex = 0; a.addEventListener("click", fn); a.addEventListener("keydown", function (e) { if (e.key === "Enter") { fn(); } }); return a; }

  // ---- blocks and messages -----------------------------------------------------------------
  function block(tr, b) {
    switch (b.type) {
      case "text": return h("div", "block", fold(b.text));
      case "thinking": return details("thinking (" + num(b.thinking.length) + " characters)", function () { return fold(b.thinking); }, false, "block");
      case "redacted_thinking": return h("div", "block muted", "redacted thinking (" + num(b.data.length) + " characters)");
      case "tool_use":
        var input = JSON.stringify(b.input, null, 2);
        return details("⚙ " + b.name + " " + oneLine(JSON.stringify(b.input), 100), function () {
          return [h("div", "muted", "tool_use " + b.id), fold(input)];
        }, false, "tool block");
      case "tool_result":
        var text = tr.str(b.content);
        return details("↳ result for " + b.tool_use_id + " (" + num(text.length) + " characters" + (b.is_error ? ", an error" : "") + ")",
                       function () { return fold(text, b.is_error ? "err-text" : null); }, text.length <= 300, "tool block");
      case "image": return details("image " + b.media_type + " (" + num(b.data.length) + " characters of data)", function () { return fold(b.data); }, false, "block");
      case "opaque": return details(b.block_type + " (kept as the API sent it)", function () { return fold(b.raw); }, false, "block");
      default: return h("pre", "block", JSON.stringify(b));
    }
  }
  function who(m) {
    switch (m.type) {
      case "user": return "user · " + m.origin + (m.is_meta ? " · meta (the model sees it, a UI hides it)" : "");
      case "assistant":
        var u = m.usage ? " · tokens in " + num(m.usage.input_tokens + m.usage.cache_creation_input_tokens + m.usage.cache_read_input_tokens) + " / out " + num(m.usage.output_tokens) : "";
        return "assistant · " + m.model + (m.stop_reason ? " · " + m.stop_reason : "") + u;
      case "system": return "system · " + m.subtype + (m.level !== "info" ? " · " + m.level : "");
      case "attachment": return "attachment · " + m.attachment_type;
      default: return m.type;
    }
  }
  function message(tr, k) {
    var m = tr.msgs[k], el = h("div", "msg " + m.type + (m.api_error ? " err" : ""));
    el.appendChild(h("div", "who", who(m) + "  [" + m.id + "]"));
    if (m.api_error) { el.appendChild(h("div", "err-text", "API error " + m.api_error.kind + (m.api_error.status ? " (" + m.api_error.status + ")" : "") + ": " + m.api_error.message)); }
    (m.content || []).forEach(function (b) { el.appendChild(block(tr, b)); });
    if (m.type === "system") { el.appendChild(fold(m.text)); }
    if (m.type === "attachment") { el.appendChild(kv(m.data.map(function (p) { return [p[0], String(p[1])]; }))); }
    return el;
  }
  function messages(tr, list, host) {   // many messages, a page at a time
    var at = 0;
    function more() {
      var end = Math.min(list.length, at + V.PAGE);
      for (; at < end; at++) { host.appendChild(message(tr, list[at])); }
      if (at < list.length) { host.appendChild(button("show " + num(Math.min(V.PAGE, list.length - at)) + " more of " + num(list.length - at), function (e) { e.target.remove(); more(); })); }
    }
    more();
    return host;
  }
  function msgLine(tr, k) {
    var m = tr.msgs[k], body = m.type === "system" ? m.text : m.type === "attachment" ? m.attachment_type :
      (m.content || []).map(function (b) { return tr.blockText(b); }).join(" ");
    return who(m).split(" · ")[0] + ": " + oneLine(body, 90);
  }

  // ---- a request -----------------------------------------------------------------------------
  function request(tr, k, title) {
    var q = tr.reqs[k], el = h("div", "request");
    var prev = q.base >= 0 ? tr.reqs[q.base] : null;
    el.appendChild(h("div", null, (title || "The request") + ": " + num(q.n) + " messages, " + num(q.est) + " tokens as the machine counts them (R-TOK-1)"));
    var kept = 0, added = [];
    q.runs.forEach(function (r) { if (r[0] === 0) { kept += r[2] - r[1]; } else { added = added.concat(r.slice(1)); } });
    if (prev) {
      var dropped = prev.n - kept, note = num(kept) + " of the previous request's " + num(prev.n) + " messages kept";
      if (dropped > 0) { note += ", " + num(dropped) + " dropped or changed"; }
      note += "; " + num(added.length) + " new";
      el.appendChild(h("div", "muted", note));
      if (q.runs.length > 2 || dropped > 0) {
        el.appendChild(details("how it was built from the previous request (" + q.runs.length + " runs)", function () {
          return q.runs.map(function (r) { return h("div", "mono", r[0] === 0 ? "kept messages " + (r[1] + 1) + "–" + r[2] : "new: " + (r.length - 1) + " message(s)"); });
        }, false));
      }
    }
    var body = h("div");
    if (added.length) { messages(tr, added, body); }
    el.appendChild(h("div", "muted", prev ? "new in this request:" : "the conversation sent:"));
    el.appendChild(body);
    el.appendChild(details("the whole conversation as sent (" + num(q.n) + " messages)", function () { return messages(tr, tr.conv(k), h("div")); }, false));
    return el;
  }

  // ---- steps ---------------------------------------------------------------------------------
  function event(tr, ev, go) {
    var el = h("div", "event");
    switch (ev.type) {
      case "model_block_received":
        add(el, "← a block of call " + ev.call_id + (ev.input_complete ? "" : " (its input was cut off)"));
        if (ev.block.msg !== undefined) { el.appendChild(block(tr, tr.msgs[ev.block.msg].content[0])); } else { el.appendChild(block(tr, ev.block)); }
        break;
      case "model_response_ended":
        var u = ev.usage;
        add(el, "← call " + ev.call_id + " ended: " + (ev.stop_reason || "no stop reason") + " · " + ev.model + " · tokens in " +
            num(u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens) + " (" + num(u.cache_read_input_tokens) + " cache reads, " +
            num(u.cache_creation_input_tokens) + " cache writes) / out " + num(u.output_tokens));
        if (ev.stop_details) { el.appendChild(fold(ev.stop_details)); }
        break;
      case "model_call_failed":
        el.appendChild(h("span", "err-text", "← call " + ev.call_id + " failed: " + ev.kind + (ev.status ? " (" + ev.status + ")" : "") +
                         (ev.retry_after_ms !== null ? " · retry after " + num(ev.retry_after_ms) + " ms" : "")));
        if (ev.message) { el.appendChild(fold(ev.message, "err-text")); }
        break;
      case "tool_finished":
        var text = tr.str(ev.content);
        add(el, "← tool " + ev.tool_use_id + " finished" + (ev.is_error ? " with an error" : "") +
            (ev.hook_stopped ? " · a " + ev.hook_event + " hook stopped the turn" + (ev.hook_stop_reason ? ": " + ev.hook_stop_reason : "") : ""));
        el.appendChild(details("its result (" + num(text.length) + " characters)", function () { return fold(text, ev.is_error ? "err-text" : null); }, text.length <= 300, "tool"));
        break;
      case "permission_answered": add(el, "← permission for " + ev.tool_use_id + ": " + ev.decision + (ev.reason ? " (" + ev.reason + ")" : "")); break;
      case "compaction_finished":
        add(el, "← compaction " + ev.compact_id + " finished: " + ev.messages.length + " messages replace the conversation");
        el.appendChild(details("its messages", function () { return ev.messages.map(function (r) { return message(tr, r.ref); }); }, false));
        break;
      case "compaction_failed": el.appendChild(h("span", "err-text", "← compaction " + ev.compact_id + " failed: " + ev.reason)); break;
      case "stop_hooks_finished":
        add(el, "← stop hooks " + ev.hooks_id + ": " + ev.hook_count + " hook(s)" + (ev.prevent ? " · prevent continuation" : "") +
            (ev.stop_reason ? " · stop reason: " + ev.stop_reason : "") + (ev.error ? " · their error: " + ev.error : ""));
        ev.blocking_errors.forEach(function (t) { el.appendChild(h("div", "muted", "hook feedback (blocking):")); el.appendChild(fold(t, "err-text")); });
        break;
      case "interrupted": add(el, "← interrupted (" + ev.kind + ")"); break;
      case "wait_elapsed": add(el, "← wait " + ev.wait_id + " elapsed"); break;
      case "tool_use_summary_ready": add(el, "← tool-use summary " + ev.summary_id + ": " + (ev.summary === null ? "none" : ev.summary)); break;
      case "command_queued": add(el, "← command queued (" + ev.command_id + "): " + ev.text); break;
      case "messages_inserted":
        add(el, "← " + ev.messages.length + " message(s) inserted");
        ev.messages.forEach(function (r) { el.appendChild(message(tr, r.ref)); });
        break;
      default: el.appendChild(h("pre", null, JSON.stringify(ev)));
    }
    return el;
  }
  function effect(tr, e, answered, go) {
    var el = h("div", "effect"), line;
    switch (e.type) {
      case "call_model":
        line = "→ call the model #" + e.call_id + " (" + e.model + ", max_tokens " + num(e.max_tokens) + (e.streaming ? "" : ", not streaming") + ", " + num(e.length) + " messages)";
        add(el, line);
        if (e.req !== null && e.req !== undefined) { el.appendChild(details("this request", function () { return request(tr, e.req, "Request " + (e.req + 1)); }, false)); }
        break;
      case "start_tool":
      case "ask_permission":
        el.appendChild(details((e.type === "start_tool" ? "→ run ⚙ " : "→ ask permission for ⚙ ") + e.name + " " + oneLine(JSON.stringify(e.input), 90),
                               function () { return [h("div", "muted", e.tool_use_id + " · generation " + e.generation), fold(JSON.stringify(e.input, null, 2))]; }, false, "tool"));
        (e.type === "start_tool" && tr.d.children && Object.prototype.hasOwnProperty.call(tr.d.children, e.tool_use_id) ? tr.d.children[e.tool_use_id] : []).forEach(function (c) {   // VIEW-6
          var sub = h("div", "sub-agent"); add(sub, "↳ the sub-agent's trace: "); sub.appendChild(V.childLine(c)); el.appendChild(sub);
        });
        break;
      case "emit":
        if (e.item.ref !== undefined) {
          el.appendChild(details("→ emit " + msgLine(tr, e.item.ref), function () { return message(tr, e.item.ref); }, false));
        } else { add(el, "→ emit " + e.item.type + " " + oneLine(JSON.stringify(e.item), 120)); }
        break;
      case "wait": add(el, "→ wait " + num(e.ms) + " ms (wait " + e.wait_id + ")"); break;
      case "compact": add(el, "→ compact (" + e.trigger + ", " + num(e.pre_tokens) + " tokens, " + num(e.length) + " messages)"); break;
      case "run_stop_hooks": add(el, "→ run the stop hooks" + (e.stop_hook_active ? " (stop_hook_active)" : "") + " on " + num(e.length) + " messages"); break;
      case "finish": add(el, "→ finish: " + e.terminal.type); break;
      case "persist_tool_result":
        var t = tr.str(e.content);
        el.appendChild(details("→ keep the full result of " + e.tool_use_id + " (" + num(t.length) + " characters; the model gets a preview)", function () { return fold(t); }, false));
        break;
      default: add(el, "→ " + e.type + " " + oneLine(JSON.stringify(e), 160));
    }
    if (answered && answered.length) {
      var a = h("span", "muted", " answered by step ");
      answered.forEach(function (pos, j) { if (j) { add(a, ", "); } a.appendChild(jump(String(tr.steps[pos].i), function () { go(pos); })); });
      el.appendChild(a);
    }
    return el;
  }
  function stepEl(tr, pos, go) {
    var s = tr.steps[pos], el = h("div", "step");
    el.tabIndex = -1; el.dataset.pos = String(pos);
    if (s.resume !== undefined) { add(el, "— resumed here (after step " + s.resume + "; a killed run was continued) —"); return el; }
    el.id = "step-" + s.i;
    var hd = h("div", "hd"); hd.appendChild(h("b", null, "step " + s.i)); add(hd, " · phase " + s.ph);
    if (s.ev && s.ev.at_ms) { add(hd, " · at " + V.when(tr, s.ev.at_ms)); }
    if (s.re) { add(hd, " · answers step "); hd.appendChild(jump(String(tr.steps[s.re[0]].i), function () { go(s.re[0]); })); }
    if (s.tr) { add(hd, " · "); hd.appendChild(badge(s.tr.type, kindOf(tr, s.tr.type))); add(hd, " decided by " + s.tr.rules.join(", ")); }
    el.appendChild(hd);
    if (s.ev) { el.appendChild(event(tr, s.ev, go)); } else { el.appendChild(h("div", "muted", "start(): the turn opens")); }
    s.fx.forEach(function (e, k) { el.appendChild(effect(tr, e, s.ans ? s.ans[String(k)] : null, go)); });
    return el;
  }

  // ---- a round -------------------------------------------------------------------------------
  function round(tr, i, go) {
    var r = tr.rounds[i], el = h("div", "round");
    var title = h("h3", null, (tr.label ? tr.label + " · " : "") + "Round " + r.n + " of " + tr.rounds.length + " ");
    title.appendChild(badge(r.tr, r.kind));
    el.appendChild(title);
    if (r.rules.length) { el.appendChild(h("div", "muted", "the rules behind " + r.tr + ": " + r.rules.join(", ") + " (specs/rules.md)")); }
    var tools = Object.keys(r.tools).map(function (k) { return k + " ×" + r.tools[k]; }).join(", ");
    var steps = r.s1 >= r.s0 ? (tr.steps[r.s0].i !== undefined ? tr.steps[r.s0].i : "") + "–" + (tr.steps[r.s1].i !== undefined ? tr.steps[r.s1].i : "") : "none";
    el.appendChild(kv([
      ["steps", steps],
      r.t0 !== null ? ["time", V.secs(r.t1 - r.t0) + " (its events from " + V.when(tr, r.t0) + " to " + V.when(tr, r.t1) + ")"] : ["time", "not recorded"],
      ["model calls", String(r.calls)],
      ["tools", tools || "none"],
      ["retries", r.retry ? r.retry + " failed call(s)" : "none"],
      ["waits", r.waits ? r.waits + " (" + num(r.wms) + " ms)" : "none"],
      ["hook blocks", String(r.hooks)],
      ["compactions", String(r.comp)]
    ]));
    var rows = [["prompt size (the recorded usage: input + cache)", num(r.ctx), true],
                ["the request as the machine counts it (R-TOK-1)", num(r.est), true],
                ["tokens in / out (every call of the round)", num(r.tin) + " / " + num(r.tout), true]];
    LAYERS.forEach(function (l) { rows.push(["removed by " + l[1], r.lay[l[0]] ? "−" + num(r.lay[l[0]]) : "–", true]); });
    el.appendChild(h("div", "muted", "tokens"));
    el.appendChild(kv(rows));
    if (r.req !== null) { el.appendChild(request(tr, r.req, "The request (the round's last model call)")); }
    el.appendChild(h("h3", null, "Steps: each event, and the effects step() returned"));
    var list = h("div", "steps");
    for (var p = r.s0; p <= r.s1; p++) { list.appendChild(stepEl(tr, p, go)); }
    el.appendChild(list);
    return el;
  }

  V.render = {round: round, message: message, request: request, badge: badge, kv: kv};
})(window.steploopViewer);
