// The engine panel of a study, from GET /v1/studies/{id}/engine: what the optimizer itself
// did ask after ask (TuRBO-ENN's trust region, LCBO's phase, penalty and KKT residual, POM's
// probability of Pareto-optimality and batch score, mwgd's GradNorm and particles, GP
// lengthscales, every engine's time per ask), one small chart per quantity group, and the
// engine's current state as a table of facts.
/* global Plotly */
import { getJson } from "./api.js";
import { el, number } from "./format.js";

const CONFIG = { responsive: true, displaylogo: false };
// Charts of a state that holds between asks (a length, a counter, a phase): drawn as steps.
const STEPS = new Set(["length", "counters", "restarts", "phase", "penalty", "violation", "feasible"]);
const COLORS = ["#2463b3", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#e67700", "#0b7285", "#5f6b76"];

function seriesTrace(chart, series, i) {
  const step = STEPS.has(chart.key);
  return {
    type: "scatter",
    mode: step ? "lines+markers" : "markers",
    name: series.label,
    x: series.points.map(([n]) => n),
    y: series.points.map(([, v]) => v),
    line: { shape: "hv", width: 2, color: COLORS[i % COLORS.length] },
    marker: { size: step ? 4 : 5, color: COLORS[i % COLORS.length], opacity: 0.75 },
    hovertemplate: `${series.label}<br>trial %{x}<br>%{y}<extra></extra>`,
  };
}

function nonNegative(chart) {
  return chart.series.every((s) => s.points.every(([, v]) => typeof v === "number" && v >= 0));
}

function drawChart(node, chart) {
  const layout = {
    title: { text: chart.title, font: { size: 14 } },
    margin: { l: 60, r: 20, t: 34, b: 40 },
    showlegend: chart.series.length > 1,
    legend: { orientation: "h", y: -0.25 },
    xaxis: { title: { text: "trial number" } },
    yaxis: {
      title: { text: chart.y_label },
      type: chart.log_y ? "log" : undefined,
      automargin: true, // room for category words (the phase) next to the title
      // Counters and shares start at zero; a flat series of zeros then reads as zero.
      rangemode: !chart.log_y && nonNegative(chart) ? "nonnegative" : undefined,
    },
    uirevision: "keep", // zoom and legend choices survive live updates
  };
  node.dataset.series = chart.series.map((s) => s.name).join(" ");
  node.dataset.points = chart.series.reduce((total, s) => total + s.points.length, 0);
  return Plotly.react(node, chart.series.map((s, i) => seriesTrace(chart, s, i)), layout, CONFIG);
}

// One chart node per chart key, kept across refreshes (so Plotly keeps its zoom).
function chartNode(container, key) {
  const found = [...container.children].find((node) => node.dataset.key === key);
  if (found) return found;
  const node = el("div", { class: "engine-chart", "data-key": key });
  container.append(node);
  return node;
}

function showFacts(table, facts) {
  table.replaceChildren(
    el("caption", {}, "Engine time and state after the last ask"),
    ...facts.map((fact) =>
      el("tr", { "data-name": fact.name }, el("th", {}, fact.name), el("td", { class: "num" }, number(fact.value))),
    ),
  );
}

function axisSelect(id, axes, chosen) {
  const select = el("select", { id });
  axes.forEach((name, i) => select.append(el("option", { value: String(i) }, name)));
  select.value = String(chosen);
  return select;
}

// mwgd's particles after its last ask, two chosen coordinates of the unit cube.
function drawParticles(section, particles) {
  const plot = section.querySelector(".engine-chart") || el("div", { class: "engine-chart" });
  let controls = section.querySelector(".particle-axes");
  if (!controls) {
    const last = Math.min(1, particles.axes.length - 1);
    controls = el(
      "div",
      { class: "particle-axes" },
      el("label", {}, "x ", axisSelect("particle-x", particles.axes, 0)),
      el("label", {}, "y ", axisSelect("particle-y", particles.axes, last)),
    );
    section.replaceChildren(el("h3", {}, "Particles after the last ask"), controls, plot);
  }
  const draw = () => {
    const ix = Number(controls.querySelector("#particle-x").value);
    const iy = Number(controls.querySelector("#particle-y").value);
    plot.dataset.points = particles.points.length;
    return Plotly.react(
      plot,
      [{
        type: "scatter",
        mode: "markers",
        name: "particles",
        x: particles.points.map((p) => p[ix]),
        y: particles.points.map((p) => p[iy]),
        marker: { size: 6, color: "#7048e8", opacity: 0.7 },
        hovertemplate: "%{x}, %{y}<extra></extra>",
      }],
      {
        margin: { l: 60, r: 20, t: 10, b: 40 },
        xaxis: { title: { text: `${particles.axes[ix]} (unit cube)` }, range: [0, 1] },
        yaxis: { title: { text: `${particles.axes[iy]} (unit cube)` }, range: [0, 1] },
        uirevision: "keep",
      },
      CONFIG,
    );
  };
  controls.onchange = draw;
  return draw();
}

// Draws (or refreshes) the engine panel; called on every change of the study.
export async function showEngine(studyId) {
  const panel = await getJson(`/v1/studies/${studyId}/engine`, { max_points: 2000 });
  const section = document.getElementById("engine-view");
  section.dataset.engine = panel.engine;
  document.getElementById("engine-name").textContent = panel.engine;
  const counts = `${panel.proposed} trials proposed by the engine${panel.downsampled ? ", long series downsampled on the server (each stretch's extremes)" : ""}.`;
  document.getElementById("engine-note").textContent = `${panel.description} ${counts}`;
  const container = document.getElementById("engine-charts");
  const nodes = panel.charts.map((chart) => chartNode(container, chart.key));
  container.replaceChildren(...nodes); // in the panel's order; charts no longer sent go
  await Promise.all(panel.charts.map((chart, i) => drawChart(nodes[i], chart)));
  const particles = document.getElementById("engine-particles");
  particles.hidden = !panel.particles;
  if (panel.particles) await drawParticles(particles, panel.particles);
  showFacts(document.getElementById("engine-facts"), panel.facts);
}
