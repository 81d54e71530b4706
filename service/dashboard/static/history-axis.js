// The x axis of the history charts: trial number or completion time (GET .../history gives
// each point's completed_at and the best-so-far in completion order, best_by_time), and the
// control that picks it, remembered in the browser.

const STORAGE_KEY = "asktell.historyAxis";
export const AXIS_TITLES = { number: "trial number", time: "time" };

// An ISO time as Plotly reads a date: the browser's wall-clock time, without a zone.
export function plotTime(iso) {
  if (!iso) return null;
  const d = new Date(iso);
  const pad = (n, width = 2) => String(n).padStart(width, "0");
  const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return `${day} ${time}.${pad(d.getMilliseconds(), 3)}`;
}

export function pointX(point, axis) {
  return axis === "time" ? plotTime(point.completed_at) : point.number;
}

// Where the chart ends: the last finished trial's number, or the latest completion time.
function lastX(history, axis) {
  const xs = history.points.map((p) => pointX(p, axis)).filter((x) => x !== null);
  if (!xs.length) return null;
  return axis === "time" ? xs.reduce((a, b) => (b > a ? b : a)) : xs[xs.length - 1];
}

// The best-so-far of objective `name` as x and y, held until the chart's end.
export function bestCurve(history, name, axis) {
  const steps = axis === "time" ? (history.best_by_time || {})[name] || [] : history.best[name] || [];
  const x = steps.map(([key]) => (axis === "time" ? plotTime(key) : key));
  const y = steps.map(([, value]) => value);
  const last = lastX(history, axis);
  if (steps.length && last !== null && last > x[x.length - 1]) {
    x.push(last);
    y.push(y[y.length - 1]);
  }
  return { x, y };
}

export function xAxisLayout(axis) {
  return { title: { text: AXIS_TITLES[axis] }, type: axis === "time" ? "date" : "linear" };
}

// A "x axis: trial number / time" select in `node`; onChange(axis) after each choice.
// Returns a function giving the current choice.
export function axisToggle(node, onChange) {
  const select = document.createElement("select");
  select.id = "history-axis";
  for (const [value, text] of Object.entries(AXIS_TITLES)) {
    select.append(new Option(text, value));
  }
  select.value = window.localStorage.getItem(STORAGE_KEY) === "time" ? "time" : "number";
  select.addEventListener("change", () => {
    window.localStorage.setItem(STORAGE_KEY, select.value);
    onChange(select.value);
  });
  const label = document.createElement("label");
  label.className = "axis-toggle";
  label.append("x axis ", select);
  node.replaceChildren(label);
  return () => select.value;
}
