"use strict";
// The studio's part of the run page: live updates and the approval form. Text from the
// run goes on the page through textContent only. A live page is never reloaded: the
// server sends what is new as JSON, the page's own script appends it ("agentfsm:grow"),
// and the approval card is rebuilt only when the requests it shows change.
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

  let forkable = new Set(studio.forkable || []);
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

  // ------------------------------------------------------------ act
  // One fieldset per request: the tool, the exact arguments decided (as sent, pretty
  // JSON, as text) and the digest the decision is bound to; no decision is chosen until
  // the reviewer chooses one, and "Send" waits for a choice on every request.
  let card = null;  // { requests, key, choices, said, submit, sent, settled, busy, found }
  function keyOf(requests) {
    return requests.map((r) => r.digest).join(" ");
  }
  function words(d) {
    return d.decision + " " + d.tool + " (" + d.call_id + ")";
  }
  function controls(on) {
    for (const node of act.querySelectorAll("button, input, textarea")) node.disabled = !on;
  }
  function buildCard(requests) {
    act.replaceChildren();
    act.append(el("strong", "", "This run waits for your decision"));
    const choices = requests.map((r, index) => {
      const box = el("fieldset", "decide");
      box.append(el("legend", "", r.tool + " (" + r.call_id + ")"));
      if (r.description) box.append(el("div", "sub", r.description));
      box.append(el("div", "sub", "arguments, exactly as they will run"));
      const args = el("pre", "args", r.arguments);
      const digest = el("div", "digest");
      digest.append(el("span", "sub", "digest "), el("code", "", r.digest));
      const options = el("div", "choices");
      options.setAttribute("role", "radiogroup");
      options.setAttribute("aria-label", "your decision on " + r.tool);
      const inputs = (r.allowed || ["approve", "edit", "reject"]).map((kind) => {
        const label = el("label");
        const input = el("input");
        input.type = "radio";
        input.name = "decision-" + index;
        input.value = kind;
        input.checked = false;
        input.addEventListener("change", refresh);
        label.append(input, " " + kind);
        options.append(label);
        return input;
      });
      const edit = el("textarea");
      edit.value = r.arguments;
      edit.hidden = true;
      edit.setAttribute("aria-label", "edited arguments (JSON)");
      box.append(args, digest, options, edit);
      act.append(box);
      return { request: r, inputs: inputs, edit: edit };
    });
    const said = el("div", "said");
    said.id = "said";
    const buttons = el("div");
    const submit = el("button", "send", "Send decision" + (requests.length > 1 ? "s" : ""));
    submit.type = "button";
    submit.id = "send";
    submit.addEventListener("click", () => send(null));
    buttons.append(submit);
    if (requests.every((r) => !r.allowed || r.allowed.includes("approve"))) {
      const approve = el("button", "approve", requests.length > 1 ? "Approve all" : "Approve");
      approve.type = "button";
      approve.id = "approve";
      approve.addEventListener("click", () => send("approve"));
      buttons.prepend(approve);
    }
    act.append(buttons, said);
    card = { requests: requests, key: keyOf(requests), choices: choices, said: said,
      submit: submit, sent: false, settled: false, busy: false };
    refresh();
  }
  function picked(choice) {
    const on = choice.inputs.find((input) => input.checked);
    return on ? on.value : null;
  }
  function refresh() {
    if (!card || card.settled) return;
    for (const choice of card.choices) choice.edit.hidden = picked(choice) !== "edit";
    card.submit.disabled = card.busy || !card.choices.every(picked);
  }
  // What a decided card says: what was decided and where, once the run shows it.
  function outcome(c) {
    const where = c.sent ? "decided here: " : "decided elsewhere: ";
    if (c.found) return where + c.found.map(words).join("; ");
    return c.sent ? "sent: following the run…" : "decided elsewhere: following the run…";
  }
  // The card's requests were decided (here or elsewhere): say what, once it is known.
  // While this page's own decision is in flight, its answer says whose it was (the run
  // can move on before the answer arrives): the words wait for it.
  function decided(segments) {
    if (!card || card.settled) return;
    const ids = new Set(card.requests.map((r) => r.call_id));
    let found = [];
    for (const segment of segments) {
      const mine = (segment.decisions || []).filter((d) => ids.has(d.call_id));
      if (mine.length) found = mine;
    }
    controls(false);
    if (found.length) {
      card.found = found;
      card.settled = true;
    }
    if (!card.busy) card.said.textContent = outcome(card);
  }
  function send(all) {
    let decisions;
    try {
      decisions = card.choices.map(({ request, edit, inputs }) => {
        const type = all || picked({ inputs: inputs });
        const d = { type: type, digest: request.digest };
        if (type === "edit") d.arguments = JSON.parse(edit.value);
        return d;
      });
    } catch (error) {
      card.said.textContent = "The edited arguments are not JSON: " + error.message;
      return;
    }
    const mine = card;
    mine.busy = true;
    controls(false);
    mine.said.textContent = "sending…";
    const again = () => {
      mine.busy = false;
      if (!mine.settled) controls(true);
      refresh();
    };
    fetch(studio.decide, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": studio.csrf },
      body: JSON.stringify({ decisions: decisions }),
      credentials: "same-origin",
    })
      .then((response) => response.json().then((body) => [response.status, body]))
      .then(([status, body]) => {
        if (status === 202) {
          mine.sent = true;
          mine.busy = false;
          mine.said.textContent = outcome(mine);
        } else if (status === 409 && body.decided) {
          // Another window (or client) decided first: say what it decided, in words.
          mine.settled = true;
          mine.said.textContent = body.error;
          mine.said.classList.add("lost");
        } else {
          mine.said.textContent = "refused: " + body.error;
          again();
        }
      })
      .catch((error) => {
        mine.said.textContent = "failed: " + error;
        again();
      });
  }
  function requestsNow(requests, segments) {
    const key = keyOf(requests);
    if (card && card.key === key) return;  // the same requests: the card is left as it is
    if (card) decided(segments);
    if (requests.length) buildCard(requests);
  }
  requestsNow(studio.requests || [], []);

  // ------------------------------------------------------------ live
  if (studio.live) {
    const live = el("span", "live", "● live");
    live.id = "live";
    facts.append(live);
    let updates = 0;
    const query = "?head=" + encodeURIComponent(studio.head || "") + "&steps=" + studio.steps +
      "&messages=" + studio.messages;
    const source = new EventSource(studio.events + query);
    source.addEventListener("change", (event) => {
      const change = JSON.parse(event.data);
      if (change.problem) {
        live.textContent = "○ " + change.problem;
        return;
      }
      document.dispatchEvent(new CustomEvent("agentfsm:grow", { detail: change }));
      if (change.applied === false) {
        // The page holds another count of steps than the server sent from: start afresh.
        source.close();
        location.reload();
        return;
      }
      forkable = new Set(change.forkable);
      showFork();
      requestsNow(change.requests, change.segments);
      updates += 1;
      document.body.dataset.updates = String(updates);
      if (!change.live) {
        source.close();
        if (change.status === "waiting") {
          // A fork nothing runs (any more): not live, and its page is the one that resumes it.
          live.textContent = "waiting: nothing runs it";
          location.reload();
          return;
        }
        live.textContent = "ended " + change.status;
      }
    });
    source.onerror = () => { if (source.readyState !== EventSource.CLOSED) live.textContent = "○ reconnecting"; };
    source.onopen = () => { live.textContent = "● live"; };
  }
})();
