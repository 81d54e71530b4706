// The compare page (/dashboard/compare?ids=1,2,3): the best-so-far of one objective of each
// study on one chart, one series per study, with its trials' values as faint points, from
// each study's GET .../history. The x axis is the trial number or the time (history-axis.js).
/* global Plotly */
import { getJson } from "./api.js";
import { el, number, showError, stateCounts } from "./format.js";
import { axisToggle, bestCurve, pointX, xAxisLayout } from "./history-axis.js";

// At most this many studies on one chart, each read with at most MAX_POINTS points.
const MAX_STUDIES = 10;
const MAX_POINTS = 2000;
const COLORS = ["#2463b3", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#0b7285", "#e67700", "#5c940d", "#364fc7", "#495057"];

const ids = [...new Set((new URLSearchParams(window.location.search).get("ids") || "")
  .split(",").map((s) => Number(s.trim())).filter((n) => Number.isInteger(n) && n > 0))];
const chosen = ids.slice(0, MAX_STUDIES);
const objectiveSelect = document.getElementById("objective");
const axis = axisToggle(document.getElementById("axis-control"), () => draw().catch(showError));
let studies = [];
let histories = [];

function studyTraces(study, history, i, name, xAxis) {
  const color = COLORS[i % COLORS.length];
  const label = `#${study.id} ${study.name}`;
  const completed = history.points.filter((p) => p.values && name in p.values);
  const best = bestCurve(history, name, xAxis);
  return [
    {
      type: "scatter",
      mode: "markers",
      name: label,
      legendgroup: label,
      showlegend: false,
      x: completed.map((p) => pointX(p, xAxis)),
      y: completed.map((p) => p.values[name]),
      marker: { size: 4, color, opacity: 0.3 },
      hovertemplate: `${label}<br>%{x}: %{y}<extra></extra>`,
    },
    {
      type: "scatter",
      mode: "lines",
      name: label,
      legendgroup: label,
      x: best.x,
      y: best.y,
      line: { shape: "hv", color, width: 2 },
      hovertemplate: `${label} best<br>%{x}: %{y}<extra></extra>`,
    },
  ];
}

async function draw() {
  const name = objectiveSelect.value;
  const xAxis = axis();
  const having = studies.map((s, i) => [s, histories[i], i]).filter(([s]) => s.objectives.some((o) => o.name === name));
  const traces = having.flatMap(([s, h, i]) => studyTraces(s, h, i, name, xAxis));
  const node = document.getElementById("compare-chart");
  await Plotly.react(node, traces, {
    margin: { l: 60, r: 20, t: 10, b: 40 },
    xaxis: xAxisLayout(xAxis),
    yaxis: { title: { text: name } },
    legend: { orientation: "h", y: -0.2 },
    uirevision: `${name}-${xAxis}`,
  }, { responsive: true, displaylogo: false });
  node.dataset.series = having.length;
  node.dataset.xaxis = xAxis;
  const missing = studies.filter((s) => !s.objectives.some((o) => o.name === name));
  const notes = [];
  if (missing.length) notes.push(`No objective ${name} in ${missing.map((s) => `#${s.id}`).join(", ")}.`);
  if (ids.length > chosen.length) notes.push(`The first ${MAX_STUDIES} of ${ids.length} studies are drawn.`);
  if (histories.some((h) => h.downsampled)) notes.push("Large studies' points are downsampled (each stretch's extremes).");
  document.getElementById("compare-note").textContent = notes.join(" ");
}

function showTable() {
  document.querySelector("#compared tbody").replaceChildren(
    ...studies.map((s, i) =>
      el(
        "tr",
        { "data-study": s.id },
        el("td", { class: "num", style: `border-left: 4px solid ${COLORS[i % COLORS.length]}` }, s.id),
        el("td", {}, el("a", { href: `/dashboard/studies/${s.id}` }, s.name)),
        el("td", {}, s.engine.name),
        el("td", {}, stateCounts(s.trial_counts)),
        el("td", { class: "num" }, Object.entries(s.best_values || {}).map(([n, v]) => `${n} ${number(v)}`).join(", ")),
      ),
    ),
  );
}

async function start() {
  if (chosen.length < 1) throw new Error("no study to compare: open this page as /dashboard/compare?ids=1,2");
  studies = await Promise.all(chosen.map((id) => getJson(`/v1/studies/${id}`)));
  histories = await Promise.all(chosen.map((id) => getJson(`/v1/studies/${id}/history`, { max_points: MAX_POINTS })));
  const names = [...new Set(studies.flatMap((s) => s.objectives.map((o) => o.name)))];
  objectiveSelect.replaceChildren(...names.map((n) => new Option(n, n)));
  objectiveSelect.addEventListener("change", () => draw().catch(showError));
  document.title = `compare ${chosen.map((id) => `#${id}`).join(", ")} - asktell`;
  showTable();
  await draw();
}

start().catch(showError);
