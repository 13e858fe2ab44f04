"use strict";
// The studio's part of a fork's page that nothing runs: shown waiting, and resumed from
// here with the studio's agent on a model chosen by name. Text goes on the page through
// textContent only.
(function () {
  const studio = JSON.parse(document.getElementById("addon-data").textContent);
  if (!studio.resting) return;
  const facts = document.getElementById("facts");
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  for (const badge of facts.querySelectorAll(".badge")) {
    if (badge.textContent === "not ended") {
      badge.textContent = "waiting";
      badge.classList.add("waiting");
      badge.title = "a fork: nothing runs it until it is resumed";
    }
  }
  const form = el("form", "resume");
  form.id = "resume";
  form.append(el("strong", "", "This fork waits: nothing runs it. "));
  const agent = el("select");
  agent.name = "agent";
  agent.setAttribute("aria-label", "agent");
  for (const name of studio.agents || []) {
    const option = el("option", "", name);
    option.value = name;
    agent.append(option);
  }
  const model = el("input");
  model.name = "model";
  model.id = "resume-model";
  model.placeholder = "PROVIDER:NAME (empty: the agent's own model)";
  model.setAttribute("list", "resume-models");
  model.setAttribute("aria-label", "model");
  const models = el("datalist");
  models.id = "resume-models";
  for (const name of studio.models || []) {
    const option = el("option");
    option.value = name;
    models.append(option);
  }
  const go = el("button", "", "Resume");
  go.type = "submit";
  go.id = "resume-go";
  const said = el("span", "said");
  said.id = "resume-said";
  const agentLabel = el("label", "", "agent ");
  agentLabel.append(agent);
  const modelLabel = el("label", "", " model ");
  modelLabel.append(model, models);
  form.append(agentLabel, modelLabel, " ", go, " ", said);
  facts.after(form);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    go.disabled = true;
    said.textContent = "starting…";
    fetch(studio.resume, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": studio.csrf },
      body: JSON.stringify({ agent: agent.value, model: model.value.trim() }),
      credentials: "same-origin",
    })
      .then((response) => response.json().then((body) => [response.ok, body]))
      .then(([ok, body]) => {
        if (ok) {
          said.textContent = "resumed on " + body.model + ": following the run…";
          setTimeout(() => location.replace(location.pathname), 300);
        } else {
          said.textContent = "refused: " + body.error;
          go.disabled = false;
        }
      })
      .catch((error) => {
        said.textContent = "failed: " + error;
        go.disabled = false;
      });
  });
})();
