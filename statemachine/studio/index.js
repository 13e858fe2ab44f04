"use strict";
// The index, live: the server sends the rows as text whenever a run is added, moves or
// changes status; they go on the page through textContent only. A row already shown is
// updated in place (a run picked to compare stays picked), a new one is added.
(function () {
  const table = document.getElementById("runs");
  const body = table.tBodies[0];
  const live = document.getElementById("live");
  let updates = 0;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function row(run) {
    const tr = el("tr");
    tr.dataset.run = run.run_id;
    const pick = el("input");
    pick.type = "checkbox";
    pick.name = "run";
    pick.value = run.run_id;
    pick.setAttribute("form", "compare-runs");
    pick.setAttribute("aria-label", "pick " + run.run_id + " to compare");
    const first = el("td", "pick");
    first.append(pick);
    const link = el("a", "", run.run_id);
    const second = el("td");
    second.append(link);
    const third = el("td");
    third.append(el("span", "badge"));
    tr.append(first, second, third, el("td"), el("td"), el("td"), el("td", "num"), el("td", "num"),
      el("td", "num"), el("td", "num"), el("td", "summary"));
    return tr;
  }

  function fill(tr, run) {
    const cells = tr.cells;
    tr.className = run.status;
    cells[1].firstChild.href = run.link;
    const badge = cells[2].firstChild;
    badge.className = "badge " + run.status;
    badge.textContent = run.status;
    const texts = [run.machine, run.state, run.started, run.duration, run.steps, run.model_calls,
      run.tokens, run.summary];
    texts.forEach((text, k) => {
      if (cells[k + 3].textContent !== text) cells[k + 3].textContent = text;
    });
  }

  function show(change) {
    const rows = new Map();
    for (const tr of body.querySelectorAll("tr[data-run]")) rows.set(tr.dataset.run, tr);
    const order = change.runs.map((run) => {
      const tr = rows.get(run.run_id) || row(run);
      fill(tr, run);
      return tr;
    });
    if (!order.length) {
      // The row the server wrote says it best; else the words the server sent.
      const shown = body.querySelector("td.empty");
      const same = shown && shown.textContent.startsWith(change.empty.replace(/\.$/, ""));
      const none = same ? shown : el("td", "empty", change.empty);
      none.colSpan = 11;
      const tr = none.parentElement || el("tr");
      tr.append(none);
      order.push(tr);
    }
    // Moved, not rebuilt: a row keeps its nodes (and a checked box stays checked).
    order.forEach((tr, k) => {
      if (body.children[k] !== tr) body.insertBefore(tr, body.children[k] || null);
    });
    while (body.children.length > order.length) body.lastElementChild.remove();
    document.getElementById("tally").textContent = change.tally;
    document.getElementById("shown").textContent = change.shown;
    updates += 1;
    document.body.dataset.updates = String(updates);
  }

  const source = new EventSource(table.dataset.events);
  source.addEventListener("change", (event) => show(JSON.parse(event.data)));
  source.onerror = () => { live.textContent = "○ reconnecting"; };
  source.onopen = () => { live.textContent = "● live"; };
})();
