"use strict";
// The studio's part of the run page: live updates and the approval form. Text from the
// run goes on the page through textContent only.
(function () {
  const studio = JSON.parse(document.getElementById("addon-data").textContent);
  const act = document.getElementById("act");
  const facts = document.getElementById("facts");

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  const back = el("a", "back", "← all runs");
  back.href = "/";
  facts.prepend(back);

  // ------------------------------------------------------------ forks and comparing
  if (studio.forked_from) {
    const parent = el("span", "forked", "forked from ");
    parent.id = "forked-from";
    const link = el("a", "", studio.forked_from.run_id);
    link.href = studio.forked_from.url;
    parent.append(link, " at step " + studio.forked_from.step);
    const also = el("a", "", "compare");
    also.href = "/compare?a=" + encodeURIComponent(studio.forked_from.run_id) +
      "&b=" + encodeURIComponent(studio.run_id);
    parent.append(" · ", also);
    facts.append(parent);
  }
  const compare = el("a", "compare", "compare with…");
  compare.id = "compare-link";
  compare.href = studio.compare;
  facts.append(compare);

  const forkable = new Set(studio.forkable || []);
  const forkBox = el("div", "fork");
  const forkButton = el("button", "fork", "Fork from here");
  forkButton.type = "button";
  forkButton.id = "fork";
  const forkSaid = el("span", "said");
  forkSaid.id = "fork-said";
  forkBox.append(forkButton, " ", forkSaid);
  facts.after(forkBox);
  function chosenStep() {
    return Number(document.body.dataset.step || -1) + 1;  // the page's number: 1 is the first
  }
  function showFork() {
    const step = chosenStep();
    forkButton.disabled = !forkable.has(step);
    forkButton.textContent = "Fork from here (step " + step + ")";
    forkButton.title = forkable.has(step)
      ? "a new run whose past is this run's up to step " + step + "; resume it to go on"
      : "a step into a terminal ends its segment: fork from the step before it";
  }
  new MutationObserver(showFork).observe(document.body, { attributes: true, attributeFilter: ["data-step"] });
  showFork();
  forkButton.addEventListener("click", () => {
    const step = chosenStep();
    forkButton.disabled = true;
    forkSaid.textContent = "forking…";
    fetch(studio.fork, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": studio.csrf },
      body: JSON.stringify({ step: step }),
      credentials: "same-origin",
    })
      .then((response) => response.json().then((body) => [response.ok, body]))
      .then(([ok, body]) => {
        if (ok) {
          location.assign(body.url);
          return;
        }
        forkSaid.textContent = "refused: " + body.error;
        showFork();
      })
      .catch((error) => {
        forkSaid.textContent = "failed: " + error;
        showFork();
      });
  });

  // ------------------------------------------------------------ live
  if (studio.live) {
    const live = el("span", "live", "● live");
    live.id = "live";
    facts.append(live);
    const source = new EventSource(studio.events + "?head=" + encodeURIComponent(studio.head));
    source.addEventListener("change", () => {
      source.close();
      // At the newest step (or none chosen): follow the run; else stay on the chosen step.
      const steps = document.querySelectorAll("#steps li[data-step]").length;
      const at = Number(document.body.dataset.step || -1);
      if (at >= steps - 1) location.replace(location.pathname + location.search);
      else location.reload();
    });
    source.onerror = () => { live.textContent = "○ reconnecting"; };
    source.onopen = () => { live.textContent = "● live"; };
  }

  // ------------------------------------------------------------ act
  const requests = studio.requests || [];
  if (!requests.length) return;
  act.append(el("strong", "", "This run waits for your decision"));
  const choices = [];
  requests.forEach((r, index) => {
    const box = el("fieldset", "decide");
    box.append(el("legend", "", r.tool + " (" + r.call_id + ")"));
    const allowed = r.allowed || ["approve", "edit", "reject"];
    const pick = el("select");
    pick.name = "decision-" + index;
    for (const kind of allowed) {
      const option = el("option", "", kind);
      option.value = kind;
      pick.append(option);
    }
    const edit = el("textarea");
    edit.value = r.arguments;
    edit.hidden = true;
    edit.setAttribute("aria-label", "edited arguments (JSON)");
    pick.addEventListener("change", () => { edit.hidden = pick.value !== "edit"; });
    box.append(pick, edit);
    act.append(box);
    choices.push({ request: r, pick: pick, edit: edit });
  });
  const said = el("div", "said");
  said.id = "said";
  function send(all) {
    let decisions;
    try {
      decisions = choices.map(({ request, pick, edit }) => {
        const type = all || pick.value;
        const d = { type: type, digest: request.digest };
        if (type === "edit") d.arguments = JSON.parse(edit.value);
        return d;
      });
    } catch (error) {
      said.textContent = "The edited arguments are not JSON: " + error.message;
      return;
    }
    for (const b of act.querySelectorAll("button")) b.disabled = true;
    said.textContent = "sending…";
    fetch(studio.decide, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": studio.csrf },
      body: JSON.stringify({ decisions: decisions }),
      credentials: "same-origin",
    })
      .then((response) => response.json().then((body) => [response.ok, body]))
      .then(([ok, body]) => {
        said.textContent = ok ? "resumed: following the run…" : "refused: " + body.error;
        if (!ok) for (const b of act.querySelectorAll("button")) b.disabled = false;
      })
      .catch((error) => {
        said.textContent = "failed: " + error;
        for (const b of act.querySelectorAll("button")) b.disabled = false;
      });
  }
  const buttons = el("div");
  const submit = el("button", "send", "Send decisions");
  submit.type = "button";
  submit.id = "send";
  submit.addEventListener("click", () => send(null));
  buttons.append(submit);
  const everyone = requests.every((r) => !r.allowed || r.allowed.includes("approve"));
  if (everyone) {
    const approve = el("button", "approve", "Approve all");
    approve.type = "button";
    approve.id = "approve";
    approve.addEventListener("click", () => send("approve"));
    buttons.prepend(approve);
  }
  act.append(buttons, said);
})();
