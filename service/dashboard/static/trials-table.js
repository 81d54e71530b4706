// The trial table: one page at a time from GET /v1/studies/{id}/trials, sorted and paged on the
// server (numeric sorting on values and numeric parameters), so it stays fast on large studies.
// It shows the trials that pass the page's filter (filters.js).
import { getJson } from "./api.js";
import { filterQuery } from "./filters.js";
import { ago, el, number } from "./format.js";

const PAGE_SIZE = 50;

// From a trial's start to its completion (the server's `duration` field), blank without one.
function duration(trial) {
  if (!trial.started_at || !trial.completed_at) return "";
  const s = (Date.parse(trial.completed_at) - Date.parse(trial.started_at)) / 1000;
  if (s < 60) return `${number(Math.round(s * 1000) / 1000)} s`;
  if (s < 3600) return `${number(Math.round(s / 6) / 10)} min`;
  return `${number(Math.round(s / 360) / 10)} h`;
}

export class TrialsTable {
  constructor(studyId, table, pager) {
    this.studyId = studyId;
    this.table = table;
    this.pager = pager;
    this.sort = "number";
    this.order = "desc"; // the newest trials first
    this.offset = 0;
    this.total = 0;
    this.study = null;
    pager.previous.addEventListener("click", () => this.turn(-PAGE_SIZE));
    pager.next.addEventListener("click", () => this.turn(PAGE_SIZE));
  }

  columns() {
    const study = this.study;
    return [
      { key: "number", label: "#", cell: (t) => this.trialLink(t), numeric: true },
      { key: "state", label: "State", cell: (t) => t.state },
      ...study.objectives.map((o) => ({
        key: `values.${o.name}`,
        label: `${o.name} (${o.goal === "maximize" ? "max" : "min"})`,
        cell: (t) => (t.values ? number(t.values[o.name]) : ""),
        numeric: true,
      })),
      ...study.parameters.map((p) => ({
        key: `params.${p.name}`,
        label: p.name,
        cell: (t) => number(t.params[p.name]),
        numeric: p.type === "float" || p.type === "int",
      })),
      { key: "worker_id", label: "Worker", cell: (t) => t.worker_id || "" },
      { key: "duration", label: "Duration", cell: duration, numeric: true },
      { key: "completed_at", label: "Finished", cell: (t) => ago(t.completed_at) },
    ];
  }

  // Shows the page at the current offset of `study`'s trials (again after every change).
  async show(study) {
    this.study = study;
    this.total = Object.values(study.trial_counts).reduce((a, b) => a + b, 0);
    // A live update and a click may overlap: only the latest request draws.
    const request = (this.request = (this.request || 0) + 1);
    const page = await getJson(`/v1/studies/${this.studyId}/trials`, {
      sort: this.sort,
      order: this.order,
      offset: this.offset,
      limit: PAGE_SIZE,
      filter: filterQuery(),
    });
    if (request !== this.request) return;
    const columns = this.columns();
    this.table.tHead.replaceChildren(el("tr", {}, columns.map((c) => this.header(c))));
    this.table.tBodies[0].replaceChildren(
      ...page.data.map((trial) =>
        el(
          "tr",
          { "data-number": trial.number, "data-state": trial.state },
          columns.map((c) =>
            el("td", { class: c.numeric ? "num" : c.key === "state" ? `state-${trial.state}` : "" }, c.cell(trial)),
          ),
        ),
      ),
    );
    const last = this.offset + page.data.length;
    if (filterQuery()) {
      this.pager.info.textContent = page.data.length
        ? `trials ${this.offset + 1}-${last} of those that pass the filter`
        : "no trial passes the filter";
    } else {
      this.pager.info.textContent = this.total
        ? `trials ${this.offset + 1}-${last} of ${this.total}`
        : "no trials yet";
    }
    this.pager.previous.disabled = this.offset === 0;
    this.pager.next.disabled = page.next_cursor === null;
  }

  trialLink(trial) {
    return el("a", { href: `/dashboard/studies/${this.studyId}/trials/${trial.number}` }, trial.number);
  }

  header(column) {
    const classes = ["sortable"];
    if (column.key === this.sort) classes.push(`sorted-${this.order}`);
    const attributes = { class: classes.join(" "), "data-key": column.key, onclick: () => this.sortBy(column.key) };
    return el("th", attributes, column.label);
  }

  sortBy(key) {
    this.order = key === this.sort && this.order === "asc" ? "desc" : "asc";
    this.sort = key;
    this.offset = 0;
    return this.show(this.study);
  }

  // The filter changed: its first page.
  filtered() {
    this.offset = 0;
    return this.show(this.study);
  }

  turn(by) {
    this.offset = Math.max(0, this.offset + by);
    return this.show(this.study);
  }
}
