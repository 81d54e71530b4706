// The population view of a scheduler study (pbt, ipbt), from GET /v1/studies/{id}/population
// and GET .../best/schedule: the lineage tree (each member's units by step, an edge from the
// unit whose checkpoint a unit loaded, exploits and restarts marked, the best unit's lineage
// highlighted), the hyperparameter schedules of every member with the best member's
// highlighted, and the checkpoints, pinned or releasable.
/* global Plotly */
import { getJson } from "./api.js";
import { ago, el, number } from "./format.js";

const SCHEDULERS = new Set(["pbt", "ipbt"]);
// The most recent units drawn; the server leaves older ones out.
const MAX_UNITS = 500;
const MAX_CHECKPOINTS = 100;
const CONFIG = { responsive: true, displaylogo: false };
const BEST = "#d9480f";
const COPY = { exploit: "#7048e8", restart: "#2b8a3e" };

export function hasPopulationView(study) {
  return SCHEDULERS.has(study.engine.name);
}

function unitText(u, objective) {
  return [
    `trial ${u.trial}: member ${u.member}, steps ${u.from_step}-${u.to_step}`,
    `${u.reason}${u.parent === null ? " (fresh)" : ` from trial ${u.parent} (member ${u.parent_member})`}`,
    `${u.state}${u.value === null ? "" : `, ${objective} ${number(u.value)}`}`,
    u.started_at ? `handed out ${ago(u.started_at)}` : "not handed out yet",
    ...Object.entries(u.params).map(([k, v]) => `${k} = ${number(v)}`),
  ].join("<br>");
}

// Segments as one line trace: [a0, b0, null, a1, b1, null, ...].
function broken(pairs) {
  const x = [];
  const y = [];
  for (const [[x0, y0], [x1, y1]] of pairs) {
    x.push(x0, x1, null);
    y.push(y0, y1, null);
  }
  return { x, y };
}

function treeTraces(population, best) {
  const units = population.units;
  const copies = units.filter((u) => u.parent !== null && u.parent_member !== u.member);
  const traces = [
    {
      type: "scatter",
      mode: "lines",
      name: "units",
      ...broken(units.map((u) => [[u.from_step, u.member], [u.to_step, u.member]])),
      line: { color: "#9aa5b1", width: 3 },
      hoverinfo: "skip",
    },
    {
      type: "scatter",
      mode: "lines",
      name: "copied checkpoint",
      ...broken(copies.map((u) => [[u.from_step, u.parent_member], [u.from_step, u.member]])),
      line: { color: COPY.exploit, width: 1.5, dash: "dot" },
      hoverinfo: "skip",
    },
    {
      type: "scatter",
      mode: "markers",
      name: `unit end (${population.objective})`,
      x: units.map((u) => u.to_step),
      y: units.map((u) => u.member),
      customdata: units.map((u) => u.trial),
      text: units.map((u) => unitText(u, population.objective)),
      hovertemplate: "%{text}<extra></extra>",
      marker: {
        size: 9,
        color: units.map((u) => u.value),
        colorscale: "Viridis",
        reversescale: population.goal === "minimize",
        colorbar: { title: { text: population.objective }, thickness: 12 },
        line: { color: "#333", width: 0.5 },
      },
    },
  ];
  for (const reason of ["exploit", "restart"]) {
    const marked = units.filter((u) => u.reason === reason);
    if (!marked.length) continue;
    traces.push({
      type: "scatter",
      mode: "markers",
      name: reason,
      x: marked.map((u) => u.from_step),
      y: marked.map((u) => u.member),
      text: marked.map(
        (u) =>
          `trial ${u.trial} (${reason}): member ${u.member} loaded the checkpoint of trial ` +
          `${u.parent} (member ${u.parent_member}) at step ${u.from_step}` +
          (u.started_at ? `, ${ago(u.started_at)}` : ""),
      ),
      hovertemplate: "%{text}<extra></extra>",
      marker: { symbol: reason === "exploit" ? "triangle-right" : "star", size: 11, color: COPY[reason] },
    });
  }
  if (best) traces.push(bestTrace(best));
  return traces;
}

// The best unit's lineage: the path its weights took through the members.
function bestTrace(best) {
  return {
    type: "scatter",
    mode: "lines",
    name: `best unit's lineage (trial ${best.trial})`,
    x: best.segments.flatMap((s) => [s.from_step, s.to_step]),
    y: best.segments.flatMap((s) => [s.member, s.member]),
    line: { color: BEST, width: 4 },
    opacity: 0.7,
    hoverinfo: "skip",
  };
}

function drawTree(node, population, best) {
  const layout = {
    margin: { l: 60, r: 20, t: 10, b: 40 },
    legend: { orientation: "h", y: -0.18 },
    xaxis: { title: { text: "step" }, zeroline: false },
    yaxis: { title: { text: "member" }, tickvals: population.members, zeroline: false },
    uirevision: "keep",
  };
  // What the tree draws, for tests and anyone curious: [parent trial, trial] of each unit.
  node.dataset.edges = JSON.stringify(
    population.units.filter((u) => u.parent !== null).map((u) => [u.parent, u.trial]),
  );
  return Plotly.react(node, treeTraces(population, best), layout, CONFIG);
}

// Each member's value of `name` over steps: a step function over its units, broken where a
// unit does not start at the step the previous one ended (an exploit that skipped ahead).
function memberLine(units, name) {
  const x = [];
  const y = [];
  let end = null;
  for (const u of units) {
    if (end !== null && u.from_step !== end) {
      x.push(null);
      y.push(null);
    }
    x.push(u.from_step, u.to_step);
    y.push(u.params[name], u.params[name]);
    end = u.to_step;
  }
  return { x, y };
}

function scheduleTraces(population, best, names) {
  const byMember = new Map(population.members.map((m) => [m, []]));
  for (const u of population.units) byMember.get(u.member).push(u);
  return names.flatMap((name, i) => {
    const axis = i === 0 ? "" : String(i + 1);
    const traces = [...byMember].map(([member, units]) => ({
      type: "scatter",
      mode: "lines",
      name: `member ${member}`,
      legendgroup: `member ${member}`,
      showlegend: i === 0,
      ...memberLine(units, name),
      line: { width: 1.5 },
      opacity: 0.55,
      xaxis: `x${axis}`,
      yaxis: `y${axis}`,
      hovertemplate: `member ${member}<br>step %{x}<br>${name} %{y}<extra></extra>`,
    }));
    if (best) {
      traces.push({
        type: "scatter",
        mode: "lines",
        name: "best member",
        legendgroup: "best",
        showlegend: i === 0,
        ...memberLine(best.segments, name),
        line: { color: BEST, width: 4 },
        xaxis: `x${axis}`,
        yaxis: `y${axis}`,
        hovertemplate: `best, step %{x}<br>${name} %{y}<extra></extra>`,
      });
    }
    return traces;
  });
}

function drawSchedules(node, population, best, parameters) {
  const names = parameters.map((p) => p.name);
  const layout = {
    margin: { l: 70, r: 20, t: 10, b: 40 },
    height: 60 + 170 * names.length,
    grid: { rows: names.length, columns: 1, pattern: "independent", ygap: 0.25 },
    legend: { orientation: "h", y: -0.08 },
    uirevision: "keep",
  };
  parameters.forEach((p, i) => {
    const axis = i === 0 ? "" : String(i + 1);
    const type = p.log ? "log" : p.type === "categorical" ? "category" : "linear";
    layout[`xaxis${axis}`] = i === 0 ? {} : { matches: "x" };
    layout[`yaxis${axis}`] = { title: { text: p.name }, type };
  });
  layout[`xaxis${names.length === 1 ? "" : names.length}`].title = { text: "step" };
  node.style.height = `${layout.height}px`;
  return Plotly.react(node, scheduleTraces(population, best, names), layout, CONFIG);
}

function showCheckpoints(table, note, studyId, population) {
  table.tHead.replaceChildren(el("tr", {}, ["Trial", "Checkpoint", "Kind"].map((h) => el("th", {}, h))));
  const link = (n) => el("a", { href: `/dashboard/studies/${studyId}/trials/${n}` }, n);
  table.tBodies[0].replaceChildren(
    ...[...population.checkpoints].reverse().map((c) =>
      el(
        "tr",
        { "data-number": c.trial, "data-kind": c.pinned ? "pinned" : "releasable" },
        el("td", { class: "num" }, link(c.trial)),
        el("td", {}, c.checkpoint),
        el("td", { class: c.pinned ? "pinned" : "muted" }, c.pinned ? "pinned" : "releasable"),
      ),
    ),
  );
  const shown = population.checkpoints.length;
  const total = population.pinned_total + population.releasable_total;
  note.textContent =
    `${population.pinned_total} pinned (a unit may still load them, or the best), ` +
    `${population.releasable_total} releasable (no unit ever will: they may be deleted)` +
    (shown < total ? `; the newest ${MAX_CHECKPOINTS} of each kind shown.` : ".");
}

function unitsNote(population) {
  const n = population.units.length;
  return population.truncated
    ? `The newest ${n} of ${population.total_units} units drawn.`
    : `${n} units of ${population.members.length} members.`;
}

// Shows (or keeps hidden) the population view of a study; called on every change of the study.
export async function showPopulation(studyId, study) {
  if (!hasPopulationView(study)) return;
  const population = await getJson(`/v1/studies/${studyId}/population`, {
    max_units: MAX_UNITS,
    max_checkpoints: MAX_CHECKPOINTS,
  });
  // The best unit's schedule exists once a unit is completed (before, the API answers 404).
  const best = population.best === null ? null : await getJson(`/v1/studies/${studyId}/best/schedule`);
  document.getElementById("population-view").hidden = false;
  const tree = document.getElementById("lineage-tree");
  await drawTree(tree, population, best);
  await drawSchedules(document.getElementById("schedules"), population, best, study.parameters);
  document.getElementById("lineage-note").textContent = unitsNote(population);
  tree.dataset.best = population.best ?? "";
  showCheckpoints(
    document.getElementById("checkpoints"),
    document.getElementById("checkpoints-note"),
    studyId,
    population,
  );
}
