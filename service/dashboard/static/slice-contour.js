// Slice and contour plots of a study's parameters, and its parameter importance, for one
// objective, from GET /v1/studies/{id}/points (downsampled on the server) and /importance; both
// read the shared trial filter (filters.js) and redraw when it changes.
// Slice: one panel per parameter, the objective against the parameter's value (categoricals as
// categories, log parameters on log axes), colored by trial number.
// Contour: two chosen parameters; the color is the mean objective of the drawn trials in each
// cell of a GRID x GRID grid over their ranges (empty cells filled in by Plotly's gap
// interpolation), with the trials themselves on top.
/* global Plotly */
import { getJson } from "./api.js";
import { el, number } from "./format.js";
import { filterQuery, onFilterChange } from "./filters.js";
import { showImportance } from "./importance.js";

const CONFIG = { responsive: true, displaylogo: false };
const GRID = 30;
const MAX_POINTS = 2000;
// A busy study changes several times a second and a fit costs the server up to a second: the
// importance is asked again at most this often, unless the objective or the filter changed.
const IMPORTANCE_EVERY_MS = 10000;

// How a parameter is placed on an axis: categoricals by their choice's index.
function axisOf(param) {
  if (param.type === "categorical") {
    const labels = param.choices.map(String);
    return {
      at: (value) => labels.indexOf(String(value)),
      layout: { type: "linear", tickvals: labels.map((_, i) => i), ticktext: labels, range: [-0.5, labels.length - 0.5] },
      grid: (t) => t * labels.length - 0.5,
      unit: (x) => (x + 0.5) / labels.length,
    };
  }
  if (param.log) {
    const [lo, hi] = [Math.log10(param.low), Math.log10(param.high)];
    return {
      at: (value) => value,
      layout: { type: "log" },
      grid: (t) => 10 ** (lo + t * (hi - lo)),
      unit: (x) => (Math.log10(x) - lo) / (hi - lo),
    };
  }
  return {
    at: (value) => value,
    layout: { type: "linear" },
    grid: (t) => param.low + t * (param.high - param.low),
    unit: (x) => (x - param.low) / (param.high - param.low),
  };
}

function hover(points, objective) {
  return points.map((p) => `trial ${p.number}<br>${objective} ${number(p.values[objective])}`);
}

function sliceTrace(points, param, objective) {
  const axis = axisOf(param);
  return {
    type: "scatter",
    mode: "markers",
    x: points.map((p) => axis.at(p.params[param.name])),
    y: points.map((p) => p.values[objective]),
    text: hover(points, objective),
    hovertemplate: "%{text}<extra></extra>",
    marker: { size: 5, opacity: 0.7, color: points.map((p) => p.number), colorscale: "Blues", reversescale: true },
  };
}

async function drawSlices(node, points, params, objective) {
  const panels = params.map((param) => el("div", { class: "slice", "data-param": param.name }));
  node.replaceChildren(...panels);
  await Promise.all(
    params.map((param, i) =>
      Plotly.react(panels[i], [sliceTrace(points, param, objective)], {
        margin: { l: 50, r: 10, t: 10, b: 40 },
        xaxis: { ...axisOf(param).layout, title: { text: param.name } },
        yaxis: { title: { text: objective } },
        showlegend: false,
      }, CONFIG),
    ),
  );
}

// The mean objective per grid cell, null where no trial falls.
function gridMeans(points, xAxis, yAxis, objective, xName, yName) {
  const sums = Array.from({ length: GRID }, () => new Array(GRID).fill(0));
  const counts = Array.from({ length: GRID }, () => new Array(GRID).fill(0));
  const cell = (u) => Math.min(GRID - 1, Math.max(0, Math.floor(u * GRID)));
  for (const p of points) {
    const i = cell(yAxis.unit(yAxis.at(p.params[yName])));
    const j = cell(xAxis.unit(xAxis.at(p.params[xName])));
    sums[i][j] += p.values[objective];
    counts[i][j] += 1;
  }
  return sums.map((row, i) => row.map((s, j) => (counts[i][j] ? s / counts[i][j] : null)));
}

async function drawContour(node, points, xParam, yParam, objective) {
  const xAxis = axisOf(xParam);
  const yAxis = axisOf(yParam);
  const centres = Array.from({ length: GRID }, (_, k) => (k + 0.5) / GRID);
  const contour = {
    type: "contour",
    x: centres.map(xAxis.grid),
    y: centres.map(yAxis.grid),
    z: gridMeans(points, xAxis, yAxis, objective, xParam.name, yParam.name),
    connectgaps: true,
    colorscale: "Viridis",
    colorbar: { title: { text: objective } },
    hovertemplate: `${objective} %{z}<extra></extra>`,
  };
  const trials = {
    type: "scatter",
    mode: "markers",
    x: points.map((p) => xAxis.at(p.params[xParam.name])),
    y: points.map((p) => yAxis.at(p.params[yParam.name])),
    text: hover(points, objective),
    hovertemplate: "%{text}<extra></extra>",
    marker: { size: 4, color: "#111", opacity: 0.5 },
    showlegend: false,
  };
  await Plotly.react(node, [contour, trials], {
    margin: { l: 60, r: 20, t: 10, b: 45 },
    xaxis: { ...xAxis.layout, title: { text: xParam.name } },
    yaxis: { ...yAxis.layout, title: { text: yParam.name } },
  }, CONFIG);
}

function fillSelect(select, names, chosen) {
  if (select.options.length !== names.length) {
    select.replaceChildren(...names.map((name) => el("option", { value: name }, name)));
    select.value = chosen;
  }
}

export class ParameterCharts {
  constructor(studyId) {
    this.studyId = studyId;
    this.study = null;
    this.drawn = 0; // the latest draw wins when refreshes overlap
    this.importanceKey = null;
    this.importanceAt = 0;
    this.objective = document.getElementById("param-objective");
    this.xSelect = document.getElementById("contour-x");
    this.ySelect = document.getElementById("contour-y");
    for (const select of [this.objective, this.xSelect, this.ySelect]) {
      select.addEventListener("change", () => this.draw());
    }
    onFilterChange(() => this.draw());
  }

  // Called on every change of the study.
  async show(study) {
    this.study = study;
    const params = this.params();
    fillSelect(this.objective, study.objectives.map((o) => o.name), study.objectives[0].name);
    this.objective.hidden = study.objectives.length < 2;
    const names = params.map((p) => p.name);
    fillSelect(this.xSelect, names, names[0]);
    fillSelect(this.ySelect, names, names[1] || names[0]);
    document.getElementById("contour-view").hidden = params.length < 2;
    await this.draw();
  }

  // The parameters that vary (fixed ones have a single value).
  params() {
    return this.study.parameters.filter((p) => p.type !== "fixed");
  }

  importance(objective, filter) {
    const key = JSON.stringify([objective, filter]);
    if (key === this.importanceKey && Date.now() - this.importanceAt < IMPORTANCE_EVERY_MS) return null;
    this.importanceKey = key;
    this.importanceAt = Date.now();
    const node = document.getElementById("importance");
    return showImportance(this.studyId, objective, filter, node, document.getElementById("importance-note")).catch((error) => {
      this.importanceKey = null; // asked again on the next refresh
      throw error;
    });
  }

  async draw() {
    if (!this.study) return;
    const draw = ++this.drawn;
    const objective = this.objective.value;
    const filter = filterQuery();
    const [points] = await Promise.all([
      getJson(`/v1/studies/${this.studyId}/points`, { max_points: MAX_POINTS, filter }),
      this.importance(objective, filter),
    ]);
    if (draw !== this.drawn) return;
    const told = points.points.filter((p) => p.values);
    const params = this.params();
    const byName = Object.fromEntries(params.map((p) => [p.name, p]));
    await drawSlices(document.getElementById("slices"), told, params, objective);
    if (params.length >= 2) {
      const contour = document.getElementById("contour");
      await drawContour(contour, told, byName[this.xSelect.value], byName[this.ySelect.value], objective);
      contour.dataset.params = `${this.xSelect.value},${this.ySelect.value}`;
    }
    document.getElementById("slice-note").textContent = points.downsampled
      ? `${told.length} of ${points.matched} completed trials drawn: spread over trial numbers, plus each objective's best.`
      : `${told.length} completed trials.`;
  }
}
