// The history chart: every finished trial's value and the best-so-far, one panel per objective,
// from GET /v1/studies/{id}/history (downsampled on the server for large studies).
/* global Plotly */
import { bestCurve, pointX, xAxisLayout } from "./history-axis.js";

const FAILED_STATES = new Set(["failed", "infeasible"]);

function objectiveTraces(history, name, axis, xAxis) {
  const completed = history.points.filter((p) => p.values);
  // The best-so-far holds until the last finished trial.
  const best = bestCurve(history, name, xAxis);
  const byTime = xAxis === "time";
  return [
    {
      type: "scatter",
      mode: "markers",
      name: `${name}`,
      x: completed.map((p) => pointX(p, xAxis)),
      y: completed.map((p) => p.values[name]),
      customdata: completed.map((p) => p.number),
      marker: { size: 5, color: "#2463b3", opacity: 0.6 },
      xaxis: "x",
      yaxis: axis,
      hovertemplate: byTime ? "trial %{customdata} at %{x}<br>%{y}<extra></extra>" : "trial %{x}<br>%{y}<extra></extra>",
    },
    {
      type: "scatter",
      mode: "lines",
      name: `best ${name}`,
      x: best.x,
      y: best.y,
      line: { shape: "hv", color: "#d9480f", width: 2 },
      xaxis: "x",
      yaxis: axis,
      hovertemplate: byTime ? "best at %{x}<br>%{y}<extra></extra>" : "best after trial %{x}<br>%{y}<extra></extra>",
    },
  ];
}

// `xAxis`: "number" (trial number) or "time" (completion time; history-axis.js).
export function drawHistory(node, history, xAxis = "number") {
  const k = history.objectives.length;
  const traces = history.objectives.flatMap((name, i) =>
    objectiveTraces(history, name, i === 0 ? "y" : `y${i + 1}`, xAxis),
  );
  // Failed, infeasible and stale trials have no values: marked along the bottom, on an axis of
  // their own.
  const failedAxis = `y${k + 1}`;
  const bottom = k === 1 ? "y" : `y${k}`;
  const marks = (points, name, height, marker) => ({
    type: "scatter",
    mode: "markers",
    name,
    x: points.map((p) => pointX(p, xAxis)),
    y: points.map(() => height),
    text: points.map((p) => `trial ${p.number}: ${p.state}`),
    marker,
    xaxis: "x",
    yaxis: failedAxis,
    hovertemplate: "%{text}<extra></extra>",
  });
  const failed = history.points.filter((p) => FAILED_STATES.has(p.state));
  traces.push(marks(failed, "failed / infeasible", 0.02, { symbol: "x", size: 7, color: "#b3261e" }));
  const stale = history.points.filter((p) => p.state === "stale");
  // A stale trial has no completion time: it is marked on the trial-number axis only.
  if (stale.length && xAxis === "number") {
    const marker = { symbol: "circle-open", size: 8, color: "#b26a00" };
    traces.push(marks(stale, "stale (lease expired, to be served again)", 0.06, marker));
  }
  const layout = {
    margin: { l: 60, r: 20, t: 10, b: 40 },
    showlegend: true,
    legend: { orientation: "h", y: -0.15 },
    // The trial number or time runs along the bottom panel, where the failures are marked too.
    xaxis: { ...xAxisLayout(xAxis), anchor: bottom },
    [`yaxis${k + 1}`]: { overlaying: bottom, range: [0, 1], visible: false, fixedrange: true },
    uirevision: `keep-${xAxis}`, // zoom and legend choices survive live updates, not an axis change
  };
  history.objectives.forEach((name, i) => {
    const lower = 1 - (i + 1) / k;
    const upper = 1 - i / k;
    layout[i === 0 ? "yaxis" : `yaxis${i + 1}`] = {
      title: { text: name },
      domain: [lower + (i < k - 1 ? 0.04 : 0), upper - (i > 0 ? 0.04 : 0)],
      anchor: "x",
    };
  });
  node.style.height = `${Math.max(380, 260 * k)}px`;
  node.dataset.xaxis = xAxis;
  return Plotly.react(node, traces, layout, { responsive: true, displaylogo: false });
}
