// The page's filter made visible and editable without the parallel coordinates: a line that
// says what is filtered (with a button that clears it) and inputs above the trial table
// (states, workers, a range per numeric column) that set the same conditions (filters.js).
import { clearFilter, filterConditions, filterQuery, onFilterChange, setCondition } from "./filters.js";
import { el, TRIAL_STATES } from "./format.js";

// "filtered: N conditions - clear", hidden while nothing is filtered. Its data-filter holds
// the filter query, as the views send it.
export function showFilterSummary(node) {
  const text = el("span", { id: "filter-text" });
  node.replaceChildren(text, " ", el("button", { id: "clear-filter", type: "button", onclick: clearFilter }, "clear"));
  const update = () => {
    const conditions = filterConditions();
    node.hidden = !conditions.size;
    node.dataset.filter = filterQuery() || "";
    const n = conditions.size;
    text.textContent = `filtered: ${n} condition${n === 1 ? "" : "s"} (${[...conditions.keys()].join(", ")}) —`;
  };
  onFilterChange(update);
  update();
}

function numberOrUndefined(input) {
  return input.value.trim() === "" || Number.isNaN(Number(input.value)) ? undefined : Number(input.value);
}

// The table's filter inputs; built on the first show(study), kept in step with the filter.
export class TableFilters {
  constructor(node) {
    this.node = node;
    this.sync = [];
    onFilterChange(() => this.sync.forEach((fn) => fn(filterConditions())));
  }

  show(study) {
    if (this.sync.length) return;
    const ranges = [
      ...study.objectives.map((o) => [`values.${o.name}`, o.name]),
      ...study.parameters.filter((p) => p.type === "float" || p.type === "int").map((p) => [`params.${p.name}`, p.name]),
      ["duration", "duration (s)"],
    ];
    this.node.replaceChildren(
      this.states(),
      this.workers(),
      ...ranges.map(([field, label]) => this.range(field, label)),
    );
  }

  states() {
    const boxes = TRIAL_STATES.map((state) =>
      el("input", { type: "checkbox", name: "state", value: state, onchange: () => changed() }),
    );
    const changed = () => {
      const chosen = boxes.filter((b) => b.checked).map((b) => b.value);
      setCondition("state", chosen.length ? { in: chosen } : null);
    };
    this.sync.push((conditions) => {
      const chosen = (conditions.get("state") || {}).in || [];
      for (const box of boxes) box.checked = chosen.includes(box.value);
    });
    return el(
      "fieldset",
      { class: "filter-states" },
      el("legend", {}, "state"),
      boxes.map((box) => el("label", { class: `state-${box.value}` }, box, box.value)),
    );
  }

  workers() {
    const input = el("input", { type: "text", name: "worker_id", placeholder: "w1, w2" });
    input.addEventListener("change", () => {
      const workers = input.value.split(",").map((w) => w.trim()).filter(Boolean);
      setCondition("worker_id", workers.length ? { in: workers } : null);
    });
    this.sync.push((conditions) => {
      input.value = ((conditions.get("worker_id") || {}).in || []).join(", ");
    });
    return el("label", {}, "worker", input);
  }

  range(field, label) {
    const [low, high] = ["min", "max"].map((end) =>
      el("input", { type: "number", step: "any", name: `${field}.${end}`, placeholder: end }),
    );
    const changed = () => {
      const condition = { min: numberOrUndefined(low), max: numberOrUndefined(high) };
      const empty = condition.min === undefined && condition.max === undefined;
      setCondition(field, empty ? null : condition);
    };
    low.addEventListener("change", changed);
    high.addEventListener("change", changed);
    this.sync.push((conditions) => {
      const condition = conditions.get(field) || {};
      low.value = condition.min ?? "";
      high.value = condition.max ?? "";
    });
    return el("label", { class: "filter-range" }, label, el("span", {}, low, high));
  }
}
