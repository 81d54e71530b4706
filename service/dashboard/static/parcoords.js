// Parallel coordinates of a study's completed trials, from GET /v1/studies/{id}/points: one
// axis per parameter and per objective, lines colored by the first objective. Brushing an axis
// sets that field's condition in the page's filter (filters.js), which every other view
// follows; the chart itself always shows every drawn trial, with the brushed ranges
// highlighted, so it is never fetched with the filter it sets.
/* global Plotly */
import { getJson } from "./api.js";
import { filterConditions, onFilterChange, setCondition } from "./filters.js";

const MAX_POINTS = 2000;
const CONFIG = { responsive: true, displaylogo: false };

// Ranges around the sorted indices, one per run of consecutive ones.
function runs(indices) {
  const ranges = [];
  for (const i of indices) {
    const last = ranges[ranges.length - 1];
    if (last && last[1] === i - 0.75) last[1] = i + 0.25;
    else ranges.push([i - 0.25, i + 0.25]);
  }
  return ranges;
}

// One axis of the chart: its field in the filter, where a trial lies on it (`position` of
// `read(point)`), and how brushed ranges map to a condition and back (to draw the brushes).
function axisOf(field, label, read, parameter) {
  if (parameter && parameter.type === "categorical") {
    const choices = parameter.choices;
    const index = (value) => choices.findIndex((c) => c === value);
    return {
      field,
      label,
      read,
      position: index,
      // Ticks make the axis ordinal: its brushes snap to the choices.
      ticks: { tickvals: choices.map((_, i) => i), ticktext: choices.map(String) },
      multiselect: true,
      condition: (ranges) => ({
        in: choices.filter((_, i) => ranges.some(([lo, hi]) => lo <= i && i <= hi)),
      }),
      ranges: (condition) => runs((condition.in || []).map(index).filter((i) => i >= 0).sort((a, b) => a - b)),
    };
  }
  // A log parameter's axis is its log10: Plotly has no log axes here, and ticks of our own
  // would make the axis ordinal, its brushes snapping to them.
  const log = Boolean(parameter && parameter.log);
  const to = log ? Math.log10 : (v) => v;
  const from = log ? (v) => 10 ** v : (v) => v;
  return {
    field,
    label: log ? `${label} (log10)` : label,
    read,
    position: to,
    ticks: {},
    multiselect: false,
    condition: ([[lo, hi]]) => ({ min: from(lo), max: from(hi) }),
    // [lo, hi] are the drawn values' extremes on the axis, for an open end.
    ranges: (condition, [lo, hi]) =>
      condition.min === undefined && condition.max === undefined
        ? []
        : [[condition.min === undefined ? lo : to(condition.min), condition.max === undefined ? hi : to(condition.max)]],
  };
}

// Brushed ranges as a list of [lo, hi], whatever shape Plotly keeps them in.
function brushed(constraintrange) {
  if (!constraintrange || !constraintrange.length) return [];
  return Array.isArray(constraintrange[0]) ? constraintrange : [constraintrange];
}

export class ParallelCoordinates {
  constructor(studyId, node, note) {
    this.studyId = studyId;
    this.node = node;
    this.note = note;
    this.axes = [];
    this.points = [];
    // Per field, the condition (as JSON) the drawn brushes stand for.
    this.shown = new Map();
    onFilterChange(() => {
      if (this.points.length && !this.showsFilter()) this.draw();
    });
  }

  // Fetches the points again and redraws: on every change of the study.
  async show(study) {
    const parameters = study.parameters.filter((p) => p.type !== "fixed");
    const data = await getJson(`/v1/studies/${this.studyId}/points`, { max_points: MAX_POINTS });
    this.axes = [
      ...parameters.map((p) => axisOf(`params.${p.name}`, p.name, (point) => point.params[p.name], p)),
      ...study.objectives.map((o) =>
        axisOf(`values.${o.name}`, `${o.name} (${o.goal === "maximize" ? "max" : "min"})`, (point) => point.values[o.name]),
      ),
    ];
    this.firstObjective = study.objectives[0].name;
    // A line needs a value on every axis.
    this.points = data.points.filter((p) => p.values);
    this.note.textContent = data.downsampled
      ? `${this.points.length} of ${data.matched} completed trials drawn: evenly over trial numbers and each objective's best. Drag along an axis to filter the page; click the axis off the brush to clear it.`
      : `${this.points.length} completed trials. Drag along an axis to filter the page; click the axis off the brush to clear it.`;
    this.node.hidden = !this.points.length;
    if (this.points.length) await this.draw();
  }

  dimension(axis) {
    const values = this.points.map((p) => axis.position(axis.read(p)));
    const dimension = { name: axis.field, label: axis.label, values, multiselect: axis.multiselect, ...axis.ticks };
    const condition = filterConditions().get(axis.field);
    if (condition) {
      const ranges = axis.ranges(condition, [Math.min(...values), Math.max(...values)]);
      if (ranges.length) dimension.constraintrange = ranges.length === 1 ? ranges[0] : ranges;
    }
    return dimension;
  }

  draw() {
    this.shown = new Map(this.axes.map((a) => [a.field, JSON.stringify(filterConditions().get(a.field) ?? null)]));
    const trace = {
      type: "parcoords",
      dimensions: this.axes.map((axis) => this.dimension(axis)),
      line: {
        color: this.points.map((p) => p.values[this.firstObjective]),
        colorscale: "Viridis",
        showscale: true,
        colorbar: { title: { text: this.firstObjective } },
      },
    };
    const layout = { margin: { l: 70, r: 40, t: 50, b: 30 } };
    this.node.dataset.points = this.points.length;
    const drawn = Plotly.react(this.node, [trace], layout, CONFIG);
    if (!this.listening) {
      this.listening = true;
      this.node.on("plotly_restyle", () => this.brushed());
    }
    return drawn;
  }

  // Whether the drawn brushes stand for the page's filter on the chart's fields.
  showsFilter() {
    const conditions = filterConditions();
    return this.axes.every((a) => this.shown.get(a.field) === JSON.stringify(conditions.get(a.field) ?? null));
  }

  // After a brush (or any restyle): each axis's brushed ranges become its field's condition.
  brushed() {
    const changes = this.node.data[0].dimensions.map((dimension) => {
      const axis = this.axes.find((a) => a.field === dimension.name);
      const ranges = brushed(dimension.constraintrange);
      return [axis.field, ranges.length ? axis.condition(ranges) : null];
    });
    for (const [field, condition] of changes) this.shown.set(field, JSON.stringify(condition));
    for (const [field, condition] of changes) setCondition(field, condition);
  }
}
