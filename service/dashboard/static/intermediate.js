// The intermediate values (the `report` curves) of a study's trials on the study page: the
// recent or the best trials that reported, from GET /v1/studies/{id}/measurements (a bounded
// number of trials, each downsampled on the server), one line per trial, redrawn live and
// when the page's trial filter changes (only the trials it keeps).
/* global Plotly */
import { getJson } from "./api.js";
import { filterQuery, onFilterChange } from "./filters.js";
import { el } from "./format.js";

const MAX_TRIALS = 20;
const MAX_POINTS = 200;

// A curve's value at a step: the objective's, or the only value reported.
function valueOf(values, objective) {
  if (objective in values) return values[objective];
  const all = Object.values(values);
  return all.length === 1 ? all[0] : null;
}

function trace(curve, objective) {
  const running = curve.state === "running";
  return {
    type: "scatter",
    mode: curve.points.length > 1 ? "lines" : "markers",
    name: `trial ${curve.number}${running ? " (running)" : ""}`,
    x: curve.points.map((p) => p.step),
    y: curve.points.map((p) => valueOf(p.values, objective)),
    line: { width: running ? 2.5 : 1.5, dash: running ? "dot" : "solid" },
    hovertemplate: `trial ${curve.number}<br>step %{x}<br>%{y}<extra></extra>`,
  };
}

export class IntermediateValues {
  constructor(studyId, node, noteNode, controlNode) {
    this.studyId = studyId;
    this.node = node;
    this.noteNode = noteNode;
    this.selection = el(
      "select",
      { id: "curves-selection", onchange: () => this.show() },
      el("option", { value: "recent" }, "most recent trials"),
      el("option", { value: "best" }, "best trials"),
    );
    controlNode.replaceChildren(el("label", {}, "of the ", this.selection));
    onFilterChange(() => this.show());
  }

  async show() {
    const filter = filterQuery();
    const curves = await getJson(`/v1/studies/${this.studyId}/measurements`, {
      selection: this.selection.value,
      max_trials: MAX_TRIALS,
      max_points_per_trial: MAX_POINTS,
      filter,
    });
    if (filter !== filterQuery()) return; // the filter changed meanwhile: a later call draws
    const points = curves.trials.reduce((sum, c) => sum + c.points.length, 0);
    this.node.dataset.trials = curves.trials.map((c) => c.number).join(",");
    this.node.dataset.points = points;
    const downsampled = curves.trials.some((c) => c.points.length < c.measurements);
    const n = curves.trials.length;
    this.noteNode.textContent = n
      ? `${n} trial${n === 1 ? "" : "s"}${curves.truncated ? ` (the first ${MAX_TRIALS})` : ""}, ` +
        `${curves.objective} by step${downsampled ? "; long curves downsampled on the server" : ""}.`
      : "No trial has reported intermediate values.";
    const layout = {
      margin: { l: 60, r: 20, t: 10, b: 40 },
      xaxis: { title: { text: "step" } },
      yaxis: { title: { text: curves.objective } },
      showlegend: true,
      uirevision: "keep",
    };
    const traces = curves.trials.map((c) => trace(c, curves.objective));
    return Plotly.react(this.node, traces, layout, { responsive: true, displaylogo: false });
  }
}
