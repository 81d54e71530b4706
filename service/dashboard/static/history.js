// The history chart: every finished trial's value and the best-so-far, one panel per objective,
// from GET /v1/studies/{id}/history (downsampled on the server for large studies).
/* global Plotly */

const FAILED_STATES = new Set(["failed", "infeasible"]);

function objectiveTraces(history, name, axis) {
  const completed = history.points.filter((p) => p.values);
  const best = history.best[name];
  const last = history.points.length ? history.points[history.points.length - 1].number : 0;
  // The best-so-far holds until the last finished trial.
  const bestX = best.map(([n]) => n);
  const bestY = best.map(([, v]) => v);
  if (best.length && last > bestX[bestX.length - 1]) {
    bestX.push(last);
    bestY.push(bestY[bestY.length - 1]);
  }
  return [
    {
      type: "scatter",
      mode: "markers",
      name: `${name}`,
      x: completed.map((p) => p.number),
      y: completed.map((p) => p.values[name]),
      marker: { size: 5, color: "#2463b3", opacity: 0.6 },
      xaxis: "x",
      yaxis: axis,
      hovertemplate: "trial %{x}<br>%{y}<extra></extra>",
    },
    {
      type: "scatter",
      mode: "lines",
      name: `best ${name}`,
      x: bestX,
      y: bestY,
      line: { shape: "hv", color: "#d9480f", width: 2 },
      xaxis: "x",
      yaxis: axis,
      hovertemplate: "best after trial %{x}<br>%{y}<extra></extra>",
    },
  ];
}

export function drawHistory(node, history) {
  const k = history.objectives.length;
  const traces = history.objectives.flatMap((name, i) =>
    objectiveTraces(history, name, i === 0 ? "y" : `y${i + 1}`),
  );
  const failed = history.points.filter((p) => FAILED_STATES.has(p.state));
  // Failed and infeasible trials have no values: marked along the bottom, on an axis of their own.
  const failedAxis = `y${k + 1}`;
  const bottom = k === 1 ? "y" : `y${k}`;
  traces.push({
    type: "scatter",
    mode: "markers",
    name: "failed / infeasible",
    x: failed.map((p) => p.number),
    y: failed.map(() => 0.02),
    text: failed.map((p) => p.state),
    marker: { symbol: "x", size: 7, color: "#b3261e" },
    xaxis: "x",
    yaxis: failedAxis,
    hovertemplate: "trial %{x}: %{text}<extra></extra>",
  });
  const layout = {
    margin: { l: 60, r: 20, t: 10, b: 40 },
    showlegend: true,
    legend: { orientation: "h", y: -0.15 },
    // The trial number runs along the bottom panel, where the failures are marked too.
    xaxis: { title: { text: "trial number" }, anchor: bottom },
    [`yaxis${k + 1}`]: { overlaying: bottom, range: [0, 1], visible: false, fixedrange: true },
    uirevision: "keep", // zoom and legend choices survive live updates
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
  return Plotly.react(node, traces, layout, { responsive: true, displaylogo: false });
}
