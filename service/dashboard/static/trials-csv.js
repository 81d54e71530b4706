// The trial table's rows as a CSV file, in the table's current sort and filter (filters.js):
// every page of GET /v1/studies/{id}/trials in that order, with the columns of
// GET .../export?format=csv.
import { getJson } from "./api.js";
import { filterQuery } from "./filters.js";

const PAGE_SIZE = 1000;
// Text a spreadsheet would read as a formula (CSV injection): OWASP's advice is to prefix a
// single quote and quote the cell. Numbers are ours, and a negative one stays a number.
const FORMULA = /^[=+\-@\t\r]/;

function cell(value) {
  if (value === null || value === undefined) return "";
  const text = String(value);
  if (typeof value === "string" && FORMULA.test(text)) return `"'${text.replaceAll('"', '""')}"`;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

async function allTrials(studyId, sort, order) {
  const trials = [];
  const filter = filterQuery();
  for (let offset = 0; ; offset += PAGE_SIZE) {
    const page = await getJson(`/v1/studies/${studyId}/trials`, { sort, order, offset, limit: PAGE_SIZE, filter });
    trials.push(...page.data);
    if (page.next_cursor === null) return trials;
  }
}

export async function trialsCsv(study, sort, order) {
  const params = study.parameters.map((p) => p.name);
  const objectives = study.objectives.map((o) => o.name);
  const constraints = (study.constraints || []).map((c) => c.name);
  const header = [
    "number",
    "state",
    ...params.map((n) => `params.${n}`),
    ...objectives.map((n) => `values.${n}`),
    ...constraints.map((n) => `constraints.${n}`),
    "reason",
    "note",
  ];
  const rows = (await allTrials(study.id, sort, order)).map((t) => [
    t.number,
    t.state,
    ...params.map((n) => t.params[n]),
    ...objectives.map((n) => (t.values || {})[n]),
    ...constraints.map((n) => (t.constraints || {})[n]),
    t.reason || "",
    t.note || "",
  ]);
  return [header, ...rows].map((row) => row.map(cell).join(",")).join("\r\n") + "\r\n";
}

// Saves the CSV of the table's current sort and filter as a file.
export async function downloadCsv(study, sort, order) {
  const blob = new Blob([await trialsCsv(study, sort, order)], { type: "text/csv" });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = `${study.name}-trials${filterQuery() ? "-filtered" : ""}-by-${sort}-${order}.csv`;
  link.click();
  // After the click has started the download.
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}
