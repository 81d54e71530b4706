// The study page: facts, history chart and trial table, redrawn whenever the study changes
// (subscribe() in api.js).
import { getJson, subscribe } from "./api.js";
import { drawHistory } from "./history.js";
import { showPareto } from "./pareto.js";
import { ago, clearError, el, number, pager, showError, stateCounts } from "./format.js";
import { TrialsTable } from "./trials-table.js";
import { StudyControls } from "./controls.js";
import { RunningPanel } from "./running.js";
import { downloadCsv } from "./trials-csv.js";
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
const parameterCharts = new ParameterCharts(studyId);
document.getElementById("download-csv").addEventListener("click", () =>
  downloadCsv(table.study, table.sort, table.order).catch(showError),
);

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
    fact("Best", el("b", { id: "best" }, best || "-")),
    fact("Last activity", ago(study.updated_at)),
    fact("Revision", study.revision),
  );
}

async function showHistory() {
  const history = await getJson(`/v1/studies/${studyId}/history`, { max_points: 2000 });
  const node = document.getElementById("history");
  await drawHistory(node, history);
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
    await Promise.all([showHistory(), table.show(study), running.show()]);
    await showPareto(studyId, study);
    await parameterCharts.show(study);
    // Tells tests (and anyone curious) which revision the page shows.
    document.body.dataset.revision = study.revision;
    clearError();
  },
  showError,
);
