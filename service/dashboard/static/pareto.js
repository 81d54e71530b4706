// The Pareto view of a study of two or three objectives, from GET /v1/studies/{id}/pareto:
// its completed trials in objective space (non-dominated ones highlighted, dominated and
// infeasible ones shaded, the reference point when the study has one) and the hypervolume of
// the feasible front by trial number.
/* global Plotly */
import { getJson } from "./api.js";
import { filterQuery } from "./filters.js";
import { number } from "./format.js";
import { drawEmd } from "./emd.js";

const KINDS = {
  non_dominated: { name: "non-dominated", color: "#d9480f", size: 9, opacity: 1, symbol: "circle" },
  dominated: { name: "dominated", color: "#2463b3", size: 6, opacity: 0.3, symbol: "circle" },
  infeasible: { name: "infeasible", color: "#5f6b76", size: 8, opacity: 0.7, symbol: "x" },
};
const CONFIG = { responsive: true, displaylogo: false };

export function hasParetoView(study) {
  return study.objectives.length === 2 || study.objectives.length === 3;
}

function hoverText(point, objectives) {
  return [
    `trial ${point.number} (${KINDS[point.kind].name})`,
    ...objectives.map((name) => `${name} ${number(point.values[name])}`),
    ...Object.entries(point.params).map(([name, value]) => `${name} = ${number(value)}`),
  ].join("<br>");
}

// One trace per kind, drawn dominated first so the non-dominated points lie on top.
function pointTraces(pareto, type) {
  const axes = ["x", "y", "z"].slice(0, pareto.objectives.length);
  return ["dominated", "infeasible", "non_dominated"].map((kind) => {
    const style = KINDS[kind];
    const points = pareto.points.filter((p) => p.kind === kind);
    const trace = {
      type,
      mode: "markers",
      name: style.name,
      text: points.map((p) => hoverText(p, pareto.objectives)),
      customdata: points.map((p) => p.number),
      hovertemplate: "%{text}<extra></extra>",
      marker: {
        color: style.color,
        // Markers of a 3-D scene look larger than the same size in a plane.
        size: type === "scatter3d" ? Math.round(style.size * 0.6) : style.size,
        opacity: style.opacity,
        symbol: style.symbol,
      },
    };
    axes.forEach((axis, i) => {
      trace[axis] = points.map((p) => p.values[pareto.objectives[i]]);
    });
    return trace;
  });
}

function referenceTrace(pareto, type) {
  const trace = {
    type,
    mode: "markers",
    name: "reference point",
    marker: { color: "#111", size: 10, symbol: "diamond-open" },
    hovertemplate: "reference point<extra></extra>",
  };
  ["x", "y", "z"].slice(0, pareto.objectives.length).forEach((axis, i) => {
    trace[axis] = [pareto.reference_point[pareto.objectives[i]]];
  });
  return trace;
}

function axisTitle(pareto, i) {
  const name = pareto.objectives[i];
  return { title: { text: `${name} (${pareto.goals[name] === "minimize" ? "min" : "max"})` } };
}

function drawFront(node, pareto) {
  const three = pareto.objectives.length === 3;
  const type = three ? "scatter3d" : "scatter";
  const traces = pointTraces(pareto, type);
  if (pareto.reference_point) traces.push(referenceTrace(pareto, type));
  const layout = {
    margin: { l: 60, r: 20, t: 10, b: 40 },
    legend: { orientation: "h", y: -0.18 },
    uirevision: "keep", // zoom, camera and legend choices survive live updates
  };
  if (three) {
    layout.scene = { xaxis: axisTitle(pareto, 0), yaxis: axisTitle(pareto, 1), zaxis: axisTitle(pareto, 2) };
  } else {
    layout.xaxis = axisTitle(pareto, 0);
    layout.yaxis = axisTitle(pareto, 1);
  }
  return Plotly.react(node, traces, layout, CONFIG);
}

function drawHypervolume(node, pareto) {
  const steps = pareto.hypervolume;
  const trace = {
    type: "scatter",
    mode: "lines+markers",
    name: "hypervolume",
    x: steps.map(([n]) => n),
    y: steps.map(([, v]) => v),
    line: { shape: "hv", color: "#2b8a3e", width: 2 },
    marker: { size: 4 },
    hovertemplate: "after trial %{x}<br>hypervolume %{y}<extra></extra>",
  };
  const layout = {
    margin: { l: 60, r: 20, t: 10, b: 40 },
    xaxis: { title: { text: "trial number" } },
    yaxis: { title: { text: "hypervolume" }, rangemode: "tozero" },
    uirevision: "keep",
  };
  return Plotly.react(node, [trace], layout, CONFIG);
}

function note(pareto) {
  const { non_dominated: front, dominated, infeasible } = pareto.counts;
  const drawn = pareto.points.length - front;
  const parts = [`${front} non-dominated, ${dominated} dominated, ${infeasible} infeasible completed trials`];
  if (pareto.downsampled) parts.push(`${drawn} of the ${dominated + infeasible} others drawn, evenly over trial numbers`);
  if (!pareto.reference_point) parts.push("no hypervolume: give every objective a reference to get one");
  else if (!pareto.hypervolume.length && front) parts.push("no hypervolume: the front is too long to compute it on every refresh");
  return `${parts.join("; ")}.`;
}

// Shows (or keeps hidden) the Pareto view of a study; called on every change of the study.
export async function showPareto(studyId, study) {
  const section = document.getElementById("pareto-view");
  if (!hasParetoView(study)) return;
  const filter = filterQuery();
  const pareto = await getJson(`/v1/studies/${studyId}/pareto`, { max_points: 2000, filter });
  if (filter !== filterQuery()) return; // the filter changed meanwhile: a later call draws
  section.hidden = false;
  const front = document.getElementById("pareto");
  const hypervolume = document.getElementById("hypervolume");
  hypervolume.hidden = !pareto.hypervolume.length;
  await drawFront(front, pareto);
  if (pareto.hypervolume.length) await drawHypervolume(hypervolume, pareto);
  await drawEmd(document.getElementById("emd"), pareto);
  front.dataset.nonDominated = pareto.counts.non_dominated;
  document.getElementById("pareto-note").textContent = note(pareto);
}
