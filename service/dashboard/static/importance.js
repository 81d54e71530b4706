// Parameter importance for one objective, from GET /v1/studies/{id}/importance (computed and
// cached on the server per study revision): horizontal bars, most important on top, and the
// method named under the chart.
/* global Plotly */
import { getJson } from "./api.js";
import { number } from "./format.js";

const CONFIG = { responsive: true, displaylogo: false };
const METHODS = {
  fanova: "fANOVA of a random forest (64 trees, fixed seed; Optuna's default importance method)",
};

function note(result) {
  const method = METHODS[result.method] || result.method;
  if (!result.importances.length) {
    return `Importance: ${method}; needs at least ${result.min_trials} completed trials with a value of ${result.objective} (${result.matched} so far).`;
  }
  const sample = result.used < result.matched ? `${result.used} of ${result.matched}` : `${result.used}`;
  return `Importance of each parameter to ${result.objective}: ${method}, fitted on ${sample} completed trials (parameters in the engines' unit cube: log parameters in log space, categoricals as ordinal cells); shares of variance summing to 1.`;
}

// Draws the importance of the study's parameters to `objective` for the trials passing `filter`.
export async function showImportance(studyId, objective, filter, node, noteNode) {
  const result = await getJson(`/v1/studies/${studyId}/importance`, { objective, filter });
  const bars = [...result.importances].reverse(); // Plotly draws the first bar at the bottom
  node.hidden = !bars.length;
  node.dataset.method = result.method;
  noteNode.textContent = note(result);
  if (!bars.length) return;
  const trace = {
    type: "bar",
    orientation: "h",
    x: bars.map((p) => p.importance),
    y: bars.map((p) => p.name),
    text: bars.map((p) => number(p.importance)),
    textposition: "auto",
    marker: { color: "#2463b3" },
    hovertemplate: "%{y}: %{x:.4f}<extra></extra>",
  };
  const layout = {
    margin: { l: 110, r: 20, t: 10, b: 40 },
    height: Math.max(160, 40 + 28 * bars.length),
    xaxis: { title: { text: `importance (${result.method})` }, range: [0, 1] },
    yaxis: { automargin: true },
  };
  await Plotly.react(node, [trace], layout, CONFIG);
}
