// A study's trend on the studies page, as a small inline SVG: its best-so-far over trial
// numbers (one objective), or its hypervolume over trials (several objectives that all have a
// reference). Each row reads a few dozen steps (GET .../history or .../pareto with a small
// max_points), which the server caches per study revision.
import { getJson } from "./api.js";
import { number } from "./format.js";
import { bestCurve } from "./history-axis.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 120;
const HEIGHT = 26;
const PAD = 2;
// The least max_points the API takes: a sparkline needs no more.
const MAX_POINTS = 10;

// A step line through the points (xs[i], ys[i]), scaled to the box, with `label` as tooltip.
export function sparkline(xs, ys, label) {
  const svg = document.createElementNS(SVG, "svg");
  for (const [key, value] of Object.entries({
    class: "sparkline",
    width: WIDTH,
    height: HEIGHT,
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    "data-steps": xs.length,
  })) svg.setAttribute(key, value);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const sx = (x) => PAD + ((x - x0) / (x1 - x0 || 1)) * (WIDTH - 2 * PAD);
  const sy = (y) => HEIGHT - PAD - ((y - y0) / (y1 - y0 || 1)) * (HEIGHT - 2 * PAD);
  const path = document.createElementNS(SVG, "path");
  const d = xs.map((x, i) => (i === 0 ? `M${sx(x)},${sy(ys[0])}` : `H${sx(x)}V${sy(ys[i])}`));
  path.setAttribute("d", d.join(""));
  const title = document.createElementNS(SVG, "title");
  title.textContent = label;
  svg.append(title, path);
  return svg;
}

function allHaveReference(study) {
  return study.objectives.every((o) => o.reference !== null && o.reference !== undefined);
}

// The study's trend: { x, y, label, value }, or null when it has none to draw (no completed
// trial yet, or several objectives without a reference point).
export async function trend(study) {
  if (study.objectives.length === 1) {
    const history = await getJson(`/v1/studies/${study.id}/history`, { max_points: MAX_POINTS });
    const name = history.objectives[0];
    const { x, y } = bestCurve(history, name, "number");
    if (!x.length) return null;
    const value = y[y.length - 1];
    return { x, y, value, label: `best ${name} so far: ${number(value)}` };
  }
  if (!allHaveReference(study)) return null;
  const pareto = await getJson(`/v1/studies/${study.id}/pareto`, { max_points: MAX_POINTS });
  if (!pareto.hypervolume.length) return null;
  const x = pareto.hypervolume.map(([n]) => n);
  const y = pareto.hypervolume.map(([, v]) => v);
  const value = y[y.length - 1];
  return { x, y, value, label: `hypervolume: ${number(value)}` };
}
