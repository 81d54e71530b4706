// The Pareto set's leave-one-out EMD over trial numbers (the `emd` of GET /v1/studies/{id}/pareto),
// next to the hypervolume: how far, in the unit cube of the parameters, a new Pareto-optimal
// trial would be from the known ones; it falls as the study covers its Pareto set.
/* global Plotly */

const CONFIG = { responsive: true, displaylogo: false };

export async function drawEmd(node, pareto) {
  const steps = pareto.emd || [];
  node.hidden = !steps.length;
  if (!steps.length) return;
  const trace = {
    type: "scatter",
    mode: "lines+markers",
    name: "EMD",
    x: steps.map(([n]) => n),
    y: steps.map(([, v]) => v),
    line: { shape: "hv", color: "#7048e8", width: 2 },
    marker: { size: 4 },
    hovertemplate: "after trial %{x}<br>Pareto-set EMD %{y}<extra></extra>",
  };
  const layout = {
    margin: { l: 60, r: 20, t: 10, b: 40 },
    xaxis: { title: { text: "trial number" } },
    yaxis: { title: { text: "Pareto-set EMD (leave-one-out)" }, rangemode: "tozero" },
    uirevision: "keep",
  };
  await Plotly.react(node, [trace], layout, CONFIG);
}
