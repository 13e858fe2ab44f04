"use strict";
// The run page: every string from the run goes on the page through textContent.
(function () {
  const data = JSON.parse(document.getElementById("run-data").textContent);
  const steps = data.steps;
  const messages = data.messages;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function ms(seconds) {
    return (seconds * 1000).toFixed(1) + " ms";
  }
  function indices(runs) {
    const out = [];
    for (const [start, count] of runs) for (let i = 0; i < count; i++) out.push(start + i);
    return out;
  }
  function kv(pairs) {
    const dl = el("dl", "kv");
    for (const [key, value] of pairs) {
      dl.append(el("dt", "", key), el("dd", "", value));
    }
    return dl;
  }
  // A long text shows its start; the rest is one click away (and never parsed as markup).
  const LONG = 4000;
  function long(tag, className, text) {
    text = String(text);
    if (text.length <= LONG) return el(tag, className, text);
    const node = el(tag, className, text.slice(0, LONG / 2));
    const more = el("button", "more", "show all " + text.length + " characters");
    more.type = "button";
    more.addEventListener("click", () => { node.textContent = text; });
    const box = el("div");
    box.append(node, more);
    return box;
  }
  function pre(text) {
    return long("pre", "", text);
  }
  function clock(epoch) {
    if (epoch === null || epoch === undefined) return null;
    const d = new Date(epoch * 1000);
    const pad = (n) => String(n).padStart(2, "0");
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }
  function decisionLine(d) {
    return (d.decision === "rejected" ? "✘ rejected " : "✔ approved ") + d.tool + " (" + d.call_id + ")";
  }
  function json(value) {
    return JSON.stringify(value, null, 2);
  }

  // ------------------------------------------------------------ the header
  const segments = data.segments;
  const last = segments.length ? segments[segments.length - 1] : null;
  const ended = last && last.outcome ? last.outcome.terminal : "not ended";
  document.getElementById("title").textContent = data.title;
  const facts = document.getElementById("facts");
  const badge = el("span", "badge " + (last && last.outcome ? ended : ""), ended);
  const calls = steps.filter((s) => s.source === "calling" && !(s.detail && s.detail.requested)).length;
  const toolCalls = messages.reduce((n, m) => n + m.calls.length, 0);
  const toolResults = messages.reduce((n, m) => n + m.results.length, 0);
  function fact(label, value) {
    const span = el("span", "", label + " ");
    span.append(el("b", "", value));
    facts.append(span);
  }
  facts.append(badge);
  if (data.run_id !== null) fact("run", data.run_id);
  if (data.forked_from) fact("forked from", data.forked_from.run_id + " at step " + data.forked_from.step);
  fact("machine", data.machine);
  if (data.version) fact("version", data.version);
  fact("steps", steps.length);
  fact("segments", segments.length);
  fact("model calls", calls);
  fact("tool calls", toolCalls);
  fact("tool results", toolResults);
  fact("time", ms(data.elapsed));
  const walls = steps.map((s) => s.wall).filter((w) => w !== null && w !== undefined);
  if (walls.length) {
    fact("started", clock(walls[0]));
    fact("last saved", clock(walls[walls.length - 1]));
  }
  const usage = Object.entries(data.usage);
  if (usage.length) fact("tokens", usage.map(([k, v]) => k.replace(/_tokens$/, "") + " " + v).join(", "));

  // ------------------------------------------------------------ the timeline
  const list = document.getElementById("steps");
  const rows = [];
  const longest = Math.max(1e-9, ...steps.map((s) => s.elapsed));
  segments.forEach((segment, number) => {
    const head = segments.length > 1 ? "segment " + (number + 1) + " · " : "";
    const before = number > 0 ? segments[number - 1].version : null;
    const moved = before && segment.version && before !== segment.version
      ? " · migrated to " + segment.version
        + (segment.migrated_from ? ", moved from " + segment.migrated_from : "") : "";
    for (const d of segment.decisions || []) {
      const row = el("li", "decision " + d.decision, "human decision: " + decisionLine(d));
      row.dataset.decision = d.decision;
      list.append(row);
    }
    list.append(el("li", "segment", head + "entered at " + segment.entry + moved));
    for (let i = segment.first; i < segment.first + segment.steps; i++) {
      const s = steps[i];
      const row = el("li");
      row.dataset.step = String(i);
      const what = el("span", "what");
      what.append(s.source + " ", el("span", "trigger", s.trigger), " → " + s.dest);
      if (s.children) what.append(el("span", "tag kids", plural(s.children.length, "child run")));
      const bar = el("span", "bar");
      const fill = el("span");
      fill.style.width = Math.max(0.5, (100 * s.elapsed) / longest).toFixed(1) + "%";
      bar.append(fill);
      row.append(el("span", "n", i + 1), what, el("span", "ms", ms(s.elapsed)), bar);
      row.title = s.source + " --" + s.trigger + "--> " + s.dest + " at " + ms(s.at) +
        (s.wall !== null && s.wall !== undefined ? " · saved " + clock(s.wall) : "");
      row.addEventListener("click", () => select(i));
      list.append(row);
      rows.push(row);
    }
  });

  // ------------------------------------------------------------ one step
  const panel = document.getElementById("step");
  const machine = document.getElementById("machine");

  function describe(detail) {
    const pairs = [];
    for (const [key, value] of Object.entries(detail || {})) {
      pairs.push([key, typeof value === "string" ? value : json(value)]);
    }
    return pairs;
  }

  function segmentOf(i) {
    return segments[steps[i].segment];
  }

  function outcome(i) {
    const segment = segmentOf(i);
    if (!segment.outcome || i !== segment.first + segment.steps - 1) return null;
    const o = segment.outcome;
    const box = el("div", "outcome " + o.terminal);
    box.append(el("strong", "", "ended " + o.terminal));
    if (o.reason !== undefined) box.append(kv([["pause reason", o.reason]]));
    if (o.error !== undefined) box.append(kv([["error", o.error.type], ["message", o.error.message]]));
    if (o.requests !== undefined) {
      box.append(el("div", "sub", "waiting for a decision on"));
      for (const r of o.requests) {
        const req = el("div", "request");
        req.append(el("span", "name", r.tool), el("span", "sub", " " + r.call_id));
        if (r.description) req.append(el("div", "sub", r.description));
        req.append(pre(r.arguments));
        if (r.allowed) req.append(el("div", "sub", "allowed: " + r.allowed.join(", ")));
        box.append(req);
      }
    }
    if (o.interrupt !== undefined) {
      box.append(el("div", "sub", "waiting for a decision on"), pre(o.interrupt));
    }
    if (o.answer !== undefined) box.append(long("div", "text", o.answer));
    if (o.answer_message !== undefined) box.append(long("div", "text", messages[o.answer_message].text));
    return box;
  }

  function messageCard(m, isNew) {
    const card = el("div", "msg " + m.role + (isNew ? " new" : ""));
    const head = el("div");
    head.append(el("span", "role", m.role));
    if (m.model) head.append(el("span", "tag", m.model));
    if (m.status && m.status !== "complete") head.append(el("span", "tag err", m.status));
    if (isNew) head.append(el("span", "tag new", "new at this step"));
    card.append(head);
    if (m.text) card.append(long("div", "text", m.text));
    for (const call of m.calls) {
      const box = el("div", "call");
      box.append(el("span", "", "calls "), el("span", "name", call.name), el("span", "sub", " " + call.id));
      box.append(pre(call.invalid !== null ? "invalid arguments: " + call.invalid : call.arguments));
      card.append(box);
    }
    for (const result of m.results) {
      const box = el("div", "result");
      box.append(el("span", "", "result of "), el("span", "name", result.name), el("span", "sub", " " + result.id));
      if (result.error) box.append(el("span", "tag err", "error"));
      if (result.interrupt) box.append(el("span", "tag", "interrupt"));
      box.append(pre(result.text));
      if (result.updates !== null) box.append(el("div", "sub", "state updates"), pre(result.updates));
      card.append(box);
    }
    if (m.usage) card.append(el("div", "sub", "usage " + Object.entries(m.usage).map(([k, v]) => k + " " + v).join(", ")));
    return card;
  }

  function render(i) {
    const s = steps[i];
    const shown = indices(s.messages);
    const before = new Set(i > 0 ? indices(steps[i - 1].messages) : []);
    panel.replaceChildren();
    panel.append(el("h2", "", "Step " + (i + 1) + " of " + steps.length));
    const line = el("div");
    line.append(s.source + " ", el("strong", "", "--" + s.trigger + "-->"), " " + s.dest);
    panel.append(line);
    panel.append(el("div", "sub", ms(s.elapsed) + " in " + s.source + ", starting at " + ms(s.at) +
      (segments.length > 1 ? " · segment " + (s.segment + 1) + ", step " + (s.index + 1) : "") +
      (s.wall !== null && s.wall !== undefined ? " · saved at " + clock(s.wall) : "")));
    const segment = segmentOf(i);
    if (s.index === 0 && segment.decisions && segment.decisions.length) {
      const box = el("div", "decisions");
      box.append(el("h3", "", "human decisions"));
      for (const d of segment.decisions) {
        const line = el("div", "decision " + d.decision, decisionLine(d));
        box.append(line, pre(d.arguments));
        if (d.decision !== "rejected") box.append(el("div", "sub", "result"), pre(d.result));
      }
      panel.append(box);
    }
    const end = outcome(i);
    if (end) panel.append(end);
    if (s.detail) {
      panel.append(el("h3", "", "what the step did"), kv(describe(s.detail)));
    }
    if (s.children) panel.append(childRuns(s.children));
    const fresh = shown.filter((k) => !before.has(k));
    const updates = fresh.flatMap((k) => messages[k].results.filter((r) => r.updates !== null));
    if (updates.length || s.state) {
      panel.append(el("h3", "", "state"));
      for (const r of updates) panel.append(el("div", "sub", "updates from " + r.name), pre(r.updates));
      if (s.state) panel.append(el("div", "sub", "the state so far"), pre(json(s.state)));
    }
    const used = fresh.filter((k) => messages[k].usage);
    if (used.length) {
      panel.append(el("h3", "", "usage"));
      for (const k of used) panel.append(kv(Object.entries(messages[k].usage).map(([a, b]) => [a, String(b)])));
    }
    conversation(panel, shown, before);
  }

  function conversation(box, shown, before) {
    const fresh = shown.filter((k) => !before.has(k));
    box.append(el("h3", "", "conversation: " + shown.length + " messages, " + fresh.length + " new"));
    // The newest first: what this step added is what a reader came for; a long past folds.
    const newest = shown.slice().reverse();
    const open = Math.max(fresh.length, 6);
    for (const k of newest.slice(0, open)) box.append(messageCard(messages[k], !before.has(k)));
    if (newest.length > open) {
      const more = el("details", "earlier");
      more.append(el("summary", "", "earlier messages (" + (newest.length - open) + ")"));
      // Built when opened: a long run's step shows at once, however long its past.
      more.addEventListener("toggle", () => {
        if (!more.open || more.dataset.built) return;
        more.dataset.built = "1";
        for (const k of newest.slice(open)) more.append(messageCard(messages[k], false));
      });
      box.append(more);
    }
  }

  // ------------------------------------------------------------ child runs
  // A step that ran child machines lists their runs; each opens in place to its own
  // steps, and each of those to what it did and the child runs it made in turn.
  function plural(n, word) {
    return n + " " + word + (n === 1 ? "" : "s");
  }
  function childRuns(children) {
    const box = el("div", "children");
    box.append(el("h3", "", plural(children.length, "child run")));
    for (const child of children) box.append(childRun(child));
    return box;
  }
  function childRun(child) {
    const run = el("details", "child");
    run.dataset.machine = child.machine;
    const summary = el("summary");
    const ended = child.terminal === null ? "not ended" : child.terminal;
    summary.append(
      el("span", "name", child.machine),
      el("span", "badge " + (child.terminal || ""), ended),
      el("span", "sub", plural(child.steps.length, "step") + " · " + ms(child.elapsed)),
    );
    run.append(summary, el("div", "path", child.path.join(" → ")));
    // Built when opened: a step with many child runs shows at once.
    run.addEventListener("toggle", () => {
      if (!run.open || run.dataset.built) return;
      run.dataset.built = "1";
      const list = el("ol", "child-steps");
      child.steps.forEach((step, k) => {
        const before = new Set(k > 0 ? indices(child.steps[k - 1].messages) : []);
        list.append(childStep(step, k, before));
      });
      run.append(list);
    });
    return run;
  }
  function childStep(step, k, before) {
    const item = el("li");
    const head = el("button", "child-step");
    head.type = "button";
    head.setAttribute("aria-expanded", "false");
    head.append(el("span", "n", k + 1), step.source + " ", el("span", "trigger", step.trigger),
      " → " + step.dest, el("span", "ms", ms(step.elapsed)));
    if (step.children) head.append(el("span", "tag", plural(step.children.length, "child run")));
    const body = el("div", "child-body");
    body.hidden = true;
    head.addEventListener("click", () => {
      if (!body.dataset.built) {
        body.dataset.built = "1";
        if (step.detail) body.append(el("h3", "", "what the step did"), kv(describe(step.detail)));
        if (step.children) body.append(childRuns(step.children));
        conversation(body, indices(step.messages), before);
      }
      body.hidden = !body.hidden;
      head.setAttribute("aria-expanded", String(!body.hidden));
    });
    item.append(head, body);
    return item;
  }

  // ------------------------------------------------------------ selecting
  let current = -1;
  function mark(selector, className, on) {
    const node = selector ? machine.querySelector(selector) : null;
    if (node) node.classList.toggle(className, on);
  }
  function highlight(i, on) {
    const s = steps[i];
    if (s.edge >= 0) mark("#edge-" + s.edge, "current", on);
    mark("#state-" + CSS.escape(s.dest), "here", on);
    if (s.index === 0) mark("#entry-" + CSS.escape(segmentOf(i).entry), "current", on);
  }
  // The step's row shown in its list; on opening (``inPlace``) the page itself stays at
  // its top: only a list that scrolls on its own moves (a narrow screen has none).
  function reveal(row, inPlace) {
    if (!inPlace) {
      row.scrollIntoView({ block: "nearest" });
      return;
    }
    for (let box = row.parentElement; box && box !== document.body; box = box.parentElement) {
      const overflow = getComputedStyle(box).overflowY;
      if ((overflow === "auto" || overflow === "scroll") && box.scrollHeight > box.clientHeight) {
        const below = row.getBoundingClientRect().top - box.getBoundingClientRect().top;
        box.scrollTop += below - box.clientHeight / 2;
        return;
      }
    }
  }
  function select(i, inPlace) {
    if (!steps.length) return;
    i = Math.max(0, Math.min(steps.length - 1, i));
    if (current >= 0) highlight(current, false);
    const previous = current;
    current = i;
    highlight(i, true);
    // Only the rows between the old step and the new one change.
    const from = previous < 0 ? 0 : Math.min(previous, i);
    const to = previous < 0 ? rows.length - 1 : Math.max(previous, i);
    for (let k = from; k <= to; k++) {
      rows[k].classList.toggle("current", k === i);
      rows[k].classList.toggle("future", k > i);
    }
    reveal(rows[i], inPlace);
    render(i);
    document.body.dataset.step = String(i);
    history.replaceState(null, "", "#step-" + (i + 1));
  }
  document.addEventListener("keydown", (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    // Keys typed into a field or a decision's controls are theirs, never a step move:
    // an edit box must receive "j", "k" and the arrows as the reviewer typed them.
    const target = event.target;
    if (target instanceof Element && target.closest("input, textarea, select, button, form, fieldset, [contenteditable]")) return;
    const moves = { ArrowRight: 1, ArrowDown: 1, j: 1, ArrowLeft: -1, ArrowUp: -1, k: -1 };
    if (event.key in moves) select(current + moves[event.key]);
    else if (event.key === "Home") select(0);
    else if (event.key === "End") select(steps.length - 1);
    else return;
    event.preventDefault();
  });
  if (!steps.length) {
    panel.append(el("p", "sub", "This run took no step."));
    return;
  }
  const wanted = /^#step-(\d+)$/.exec(location.hash);
  select(wanted ? Number(wanted[1]) - 1 : steps.length - 1, !wanted);
})();
