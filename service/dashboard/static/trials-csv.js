// The trial table's rows as a CSV file, in the table's current sort: every page of
// GET /v1/studies/{id}/trials in that order, with the columns of GET .../export?format=csv.
import { getJson } from "./api.js";

const PAGE_SIZE = 1000;

function cell(value) {
  if (value === null || value === undefined) return "";
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

async function allTrials(studyId, sort, order) {
  const trials = [];
  for (let offset = 0; ; offset += PAGE_SIZE) {
    const page = await getJson(`/v1/studies/${studyId}/trials`, { sort, order, offset, limit: PAGE_SIZE });
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
  ];
  const rows = (await allTrials(study.id, sort, order)).map((t) => [
    t.number,
    t.state,
    ...params.map((n) => t.params[n]),
    ...objectives.map((n) => (t.values || {})[n]),
    ...constraints.map((n) => (t.constraints || {})[n]),
    t.reason || "",
  ]);
  return [header, ...rows].map((row) => row.map(cell).join(",")).join("\r\n") + "\r\n";
}

// Saves the CSV of the table's current sort as a file.
export async function downloadCsv(study, sort, order) {
  const blob = new Blob([await trialsCsv(study, sort, order)], { type: "text/csv" });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = `${study.name}-trials-by-${sort}-${order}.csv`;
  link.click();
  // After the click has started the download.
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}
