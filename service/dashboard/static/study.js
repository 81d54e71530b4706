// The study page: facts, history chart and trial table, redrawn whenever the study changes
// (subscribe() in api.js).
import { getJson, sendJson, subscribe } from "./api.js";
import { drawHistory } from "./history.js";
import { showPareto } from "./pareto.js";
import { showEngine } from "./engine-panel.js";
import { showPopulation } from "./lineage.js";
import { ago, clearError, el, number, pager, showError, stateCounts } from "./format.js";
import { TrialsTable } from "./trials-table.js";
import { StudyControls } from "./controls.js";
import { RunningPanel } from "./running.js";
import { downloadCsv } from "./trials-csv.js";
import { filterQuery, onFilterChange } from "./filters.js";
import { ParallelCoordinates } from "./parcoords.js";
import { showFilterSummary, TableFilters } from "./trial-filters.js";
import { axisToggle } from "./history-axis.js";
import { budget } from "./budget.js";
import { NotesBox } from "./notes.js";
import { IntermediateValues } from "./intermediate.js";
import { ParameterCharts } from "./slice-contour.js";

const studyId = Number(window.location.pathname.split("/").pop());
const table = new TrialsTable(
  studyId,
  document.getElementById("trials"),
  pager(document.getElementById("pager")),
);

const controls = new StudyControls(studyId, document.getElementById("controls"));
const running = new RunningPanel(
  studyId,
  document.getElementById("running"),
  document.getElementById("running-error"),
);
const notes = new NotesBox(
  document.getElementById("study-notes"),
  (text) => sendJson("PATCH", `/v1/studies/${studyId}`, { notes: text }),
  "Notes on this study: what it is for, what was tried, what to look at.",
);
const curves = new IntermediateValues(
  studyId,
  document.getElementById("curves"),
  document.getElementById("curves-note"),
  document.getElementById("curves-control"),
);
const parameterCharts = new ParameterCharts(studyId);
document.getElementById("download-csv").addEventListener("click", () =>
  downloadCsv(table.study, table.sort, table.order).catch(showError),
);
const parcoords = new ParallelCoordinates(
  studyId,
  document.getElementById("parcoords"),
  document.getElementById("parcoords-note"),
);
const tableFilters = new TableFilters(document.getElementById("trial-filters"));
showFilterSummary(document.getElementById("filter-summary"));
// Every view but the parallel coordinates (which draw their brushes) reads the filtered trials.
onFilterChange(() => {
  if (!table.study) return;
  Promise.all([showHistory(), table.filtered(), showPareto(studyId, table.study)]).then(clearError, showError);
});

// The history last drawn, redrawn when the x axis changes.
let lastHistory = null;
const historyAxis = axisToggle(document.getElementById("history-axis-control"), () => {
  if (lastHistory) drawHistory(document.getElementById("history"), lastHistory, historyAxis()).catch(showError);
});

function fact(label, ...value) {
  return el("div", {}, el("span", {}, label), ...value);
}

function showFacts(study) {
  document.title = `${study.name} - asktell`;
  document.getElementById("title").textContent = study.name;
  document.getElementById("study-name").textContent = study.name;
  const best = study.best_values
    ? Object.entries(study.best_values).map(([n, v]) => `${n} ${number(v)}`).join(", ")
    : "";
  document.getElementById("facts").replaceChildren(
    fact("State", el("b", { id: "study-state" }, study.state)),
    fact("Engine", study.engine.name),
    fact("Trials", stateCounts(study.trial_counts)),
    ...(study.max_trials ? [fact("Budget", budget(study))] : []),
    fact("Best", el("b", { id: "best" }, best || "-")),
    fact("Last activity", ago(study.updated_at)),
    fact("Revision", study.revision),
  );
}

async function showHistory() {
  const filter = filterQuery();
  const history = await getJson(`/v1/studies/${studyId}/history`, { max_points: 2000, filter });
  if (filter !== filterQuery()) return; // the filter changed meanwhile: a later call draws
  const node = document.getElementById("history");
  lastHistory = history;
  await drawHistory(node, history, historyAxis());
  node.dataset.points = history.points.length;
  document.getElementById("history-note").textContent = history.downsampled
    ? `${history.points.length} of ${history.finished} finished trials drawn: each stretch's extremes and failures.`
    : `${history.finished} finished trials.`;
}

subscribe(
  studyId,
  async (study) => {
    showFacts(study);
    controls.show(study);
    tableFilters.show(study);
    notes.show(study.notes);
    // The history first (the page's first meaningful paint), then the other views together.
    await Promise.all([showHistory(), table.show(study), running.show(study)]);
    await Promise.all([
      showPareto(studyId, study),
      parcoords.show(study),
      curves.show(),
      showEngine(studyId),
      showPopulation(studyId, study),
      parameterCharts.show(study),
    ]);
    // Tells tests (and anyone curious) which revision the page shows.
    document.body.dataset.revision = study.revision;
    clearError();
  },
  showError,
);
