// The trial page: everything the API has on one trial (GET .../trials/{n}), its measurements
// as a curve (GET .../measurements) and, for a scheduler's unit, its lineage (GET .../lineage);
// redrawn whenever the study changes (subscribe() in api.js).
/* global Plotly */
import { getJson, subscribe } from "./api.js";
import { ago, clearError, el, number, showError } from "./format.js";
import { NotesBox } from "./notes.js";
import { sendJson } from "./api.js";

const [, , , studyId, , trialNumber] = window.location.pathname.split("/");
const trialPath = `/v1/studies/${studyId}/trials/${trialNumber}`;

const note = new NotesBox(
  document.getElementById("trial-note"),
  (text) => sendJson("PUT", `${trialPath}/note`, { note: text }),
  "A note on this trial.",
);

function fact(label, value, id) {
  return el("div", {}, el("span", {}, label), el("b", id ? { id } : {}, value === "" ? "-" : value));
}

function when(iso) {
  return iso ? el("span", { title: iso }, ago(iso)) : "-";
}

function showFacts(study, trial) {
  document.title = `trial ${trial.number} of ${study.name} - asktell`;
  const link = document.getElementById("study-link");
  link.href = `/dashboard/studies/${study.id}`;
  link.textContent = study.name;
  document.getElementById("trial-name").textContent = `trial ${trial.number}`;
  document.getElementById("title").textContent = `Trial ${trial.number}`;
  const lease = trial.lease_expires_at && trial.state === "running" ? trial.lease_expires_at : null;
  document.getElementById("facts").replaceChildren(
    fact("State", el("span", { class: `state-${trial.state}` }, trial.state), "trial-state"),
    fact("Feasible", trial.feasible === null ? "-" : trial.feasible ? "yes" : "no", "trial-feasible"),
    fact("Worker", trial.worker_id || "", "trial-worker"),
    fact("Retries", trial.retries),
    fact("Created", when(trial.created_at)),
    fact("Started", when(trial.started_at)),
    fact("Last heartbeat", when(trial.heartbeat_at)),
    fact("Finished", when(trial.completed_at)),
    fact("Lease expires", lease ? el("span", { title: lease }, new Date(lease).toLocaleString()) : "-"),
    fact("Reason", trial.reason || ""),
  );
}

function pairs(node, rows) {
  node.replaceChildren(
    ...(rows.length
      ? rows.map(([key, value]) =>
          el("tr", { "data-key": key }, el("th", {}, key), el("td", { class: "num" }, number(value))),
        )
      : [el("tr", {}, el("td", { class: "muted" }, "none"))]),
  );
}

function showResults(trial) {
  pairs(document.getElementById("params"), Object.entries(trial.params));
  pairs(document.getElementById("results"), [
    ...Object.entries(trial.values || {}),
    ...Object.entries(trial.constraints || {}).map(([k, v]) => [`constraint ${k}`, v]),
  ]);
  const extra = { details: trial.details, metadata: trial.metadata };
  if (trial.unit) extra.unit = trial.unit;
  document.getElementById("details").textContent = JSON.stringify(extra, null, 2);
}

// One line per reported value name, by step.
function drawMeasurements(measurements) {
  const node = document.getElementById("measurements");
  const names = [...new Set(measurements.flatMap((m) => Object.keys(m.values)))];
  const traces = names.map((name) => {
    const points = measurements.filter((m) => name in m.values);
    return {
      type: "scatter",
      mode: "lines+markers",
      name,
      x: points.map((m) => m.step),
      y: points.map((m) => m.values[name]),
      hovertemplate: `step %{x}<br>${name} %{y}<extra></extra>`,
    };
  });
  node.dataset.points = measurements.length;
  document.getElementById("measurements-note").textContent = measurements.length
    ? `${measurements.length} measurements reported.`
    : "No intermediate values reported.";
  const layout = {
    margin: { l: 60, r: 20, t: 10, b: 40 },
    xaxis: { title: { text: "step" } },
    showlegend: names.length > 1,
    uirevision: "keep",
  };
  return Plotly.react(node, traces, layout, { responsive: true, displaylogo: false });
}

function showLineage(lineage) {
  document.getElementById("lineage-section").hidden = false;
  const table = document.getElementById("lineage");
  const headers = ["Trial", "Member", "Steps", "Reason", "Params", "Values", "Checkpoint"];
  table.tHead.replaceChildren(el("tr", {}, headers.map((h) => el("th", {}, h))));
  const text = (object) =>
    Object.entries(object || {}).map(([k, v]) => `${k} ${number(v)}`).join(", ");
  table.tBodies[0].replaceChildren(
    ...lineage.segments.map((s) =>
      el(
        "tr",
        { "data-number": s.trial },
        el("td", {}, el("a", { href: `/dashboard/studies/${studyId}/trials/${s.trial}` }, s.trial)),
        el("td", { class: "num" }, s.member),
        el("td", {}, `${s.from_step}-${s.to_step}`),
        el("td", {}, s.reason),
        el("td", {}, text(s.params)),
        el("td", {}, text(s.values)),
        el("td", {}, s.checkpoint || ""),
      ),
    ),
  );
}

subscribe(
  studyId,
  async (study) => {
    const [trial, measurements] = await Promise.all([
      getJson(trialPath),
      getJson(`${trialPath}/measurements`),
    ]);
    showFacts(study, trial);
    showResults(trial);
    note.show(trial.note);
    await drawMeasurements(measurements);
    // Only a scheduler's unit has a lineage (other studies answer 409).
    if (trial.unit) showLineage(await getJson(`${trialPath}/lineage`));
    document.body.dataset.revision = study.revision;
    clearError();
  },
  showError,
);
