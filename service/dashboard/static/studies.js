// The studies page: every study of the tenant, a page at a time (GET /v1/studies), filtered
// by name, state and engine and sorted by a column on the server; each row with its budget
// and a sparkline of its trend (sparkline.js); studies ticked here open the compare page.
import { getJson } from "./api.js";
import { ago, clearError, el, number, pager, showError, stateCounts } from "./format.js";
import { budget } from "./budget.js";
import { sparkline, trend } from "./sparkline.js";

const PAGE_SIZE = 50;
const COLUMNS = 10;
// Columns whose first click sorts the largest first.
const DESCENDING_FIRST = new Set(["trials", "updated_at"]);
// Typing in the name filter asks again after this pause.
const TYPING_MS = 250;

const query = { q: "", state: "", engine: "", sort: "id", order: "asc" };
// The cursors of the pages seen so far: cursors[i] opens page i (page 0 has none).
let cursors = [null];
let page = 0;
// Ids ticked for comparison, across pages and filters.
const selected = new Set();
// Answers arriving after a newer request are dropped.
let shown = 0;

function bestValue(study) {
  if (!study.best_values) return study.objectives.length > 1 ? "see study" : "";
  return Object.entries(study.best_values)
    .map(([name, value]) => (study.objectives.length > 1 ? `${name} ${number(value)}` : number(value)))
    .join(", ");
}

function checkbox(study) {
  const box = el("input", { type: "checkbox", class: "pick", "aria-label": `compare ${study.name}` });
  box.checked = selected.has(study.id);
  box.addEventListener("change", () => {
    if (box.checked) selected.add(study.id);
    else selected.delete(study.id);
    showSelection();
  });
  return box;
}

// Fills the row's sparkline cell (and, for several objectives, its best cell with the
// hypervolume) when the trend arrives.
async function showTrend(study, cell, bestCell) {
  const line = await trend(study);
  if (!line) {
    cell.textContent = study.objectives.length > 1 ? "see study" : "";
    return;
  }
  cell.replaceChildren(sparkline(line.x, line.y, line.label));
  if (study.objectives.length > 1) bestCell.textContent = `hypervolume ${number(line.value)}`;
}

function row(study) {
  const link = el("a", { href: `/dashboard/studies/${study.id}` }, study.name);
  const best = el("td", { class: "num best" }, bestValue(study));
  const spark = el("td", { class: "trend" });
  showTrend(study, spark, best).catch((error) => {
    spark.textContent = "?";
    spark.title = String(error.message || error);
  });
  return el(
    "tr",
    { "data-study": study.id },
    el("td", {}, checkbox(study)),
    el("td", { class: "num" }, study.id),
    el("td", { class: "study-name" }, link),
    el("td", { class: "study-state" }, study.state),
    el("td", { class: "study-engine" }, study.engine.name),
    el("td", {}, stateCounts(study.trial_counts)),
    el("td", { class: "study-budget" }, budget(study)),
    best,
    spark,
    el("td", { title: study.updated_at }, ago(study.updated_at)),
  );
}

async function show() {
  const asked = ++shown;
  const body = await getJson("/v1/studies", {
    limit: PAGE_SIZE,
    cursor: cursors[page],
    q: query.q,
    state: query.state,
    engine: query.engine,
    sort: query.sort,
    order: query.order,
  });
  if (asked !== shown) return;
  const rows = body.data.map(row);
  const empty = query.q || query.state || query.engine ? "No study matches." : "No studies yet.";
  document.querySelector("#studies tbody").replaceChildren(
    ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: COLUMNS, class: "muted" }, empty))]),
  );
  cursors[page + 1] = body.next_cursor;
  controls.previous.disabled = page === 0;
  controls.next.disabled = !body.next_cursor;
  controls.info.textContent = `page ${page + 1}`;
  showSortedColumn();
  clearError();
}

function go(step) {
  page += step;
  show().catch(showError);
}

// A new filter or order starts again from the first page.
function restart() {
  cursors = [null];
  page = 0;
  show().catch(showError);
}

function showSortedColumn() {
  for (const th of document.querySelectorAll("#studies th[data-sort]")) {
    th.classList.toggle("sorted-asc", th.dataset.sort === query.sort && query.order === "asc");
    th.classList.toggle("sorted-desc", th.dataset.sort === query.sort && query.order === "desc");
  }
}

function sortBy(column) {
  if (query.sort === column) query.order = query.order === "asc" ? "desc" : "asc";
  else query.order = DESCENDING_FIRST.has(column) ? "desc" : "asc";
  query.sort = column;
  restart();
}

function showSelection() {
  const button = document.getElementById("compare");
  button.disabled = selected.size < 2;
  document.getElementById("selected-info").textContent = selected.size
    ? `${selected.size} selected${selected.size < 2 ? " (pick two or more)" : ""}`
    : "";
}

async function listEngines() {
  const select = document.getElementById("filter-engine");
  for (const name of await getJson("/v1/engines")) select.append(new Option(name, name));
}

const controls = pager(document.getElementById("pager"));
controls.previous.addEventListener("click", () => go(-1));
controls.next.addEventListener("click", () => go(1));
for (const th of document.querySelectorAll("#studies th[data-sort]")) {
  th.addEventListener("click", () => sortBy(th.dataset.sort));
}
let typing = null;
document.getElementById("filter-name").addEventListener("input", (event) => {
  clearTimeout(typing);
  typing = setTimeout(() => {
    query.q = event.target.value.trim();
    restart();
  }, TYPING_MS);
});
for (const key of ["state", "engine"]) {
  document.getElementById(`filter-${key}`).addEventListener("change", (event) => {
    query[key] = event.target.value;
    restart();
  });
}
document.getElementById("compare").addEventListener("click", () => {
  window.location.href = `/dashboard/compare?ids=${[...selected].sort((a, b) => a - b).join(",")}`;
});
listEngines().catch(showError);
show().catch(showError);
