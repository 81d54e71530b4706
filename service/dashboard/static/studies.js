// The studies page: every study of the tenant, a page at a time (GET /v1/studies).
import { getJson } from "./api.js";
import { ago, clearError, el, number, pager, showError, stateCounts } from "./format.js";

const PAGE_SIZE = 50;
// The cursors of the pages seen so far: cursors[i] opens page i (page 0 has none).
const cursors = [null];
let page = 0;

function bestValue(study) {
  if (!study.best_values) return study.objectives.length > 1 ? "see study" : "";
  return Object.entries(study.best_values)
    .map(([name, value]) => (study.objectives.length > 1 ? `${name} ${number(value)}` : number(value)))
    .join(", ");
}

function row(study) {
  const link = el("a", { href: `/dashboard/studies/${study.id}` }, study.name);
  return el(
    "tr",
    { "data-study": study.id },
    el("td", { class: "num" }, study.id),
    el("td", {}, link),
    el("td", { class: "study-state" }, study.state),
    el("td", {}, study.engine.name),
    el("td", {}, stateCounts(study.trial_counts)),
    el("td", { class: "num best" }, bestValue(study)),
    el("td", { title: study.updated_at }, ago(study.updated_at)),
  );
}

async function show() {
  const body = await getJson("/v1/studies", { limit: PAGE_SIZE, cursor: cursors[page] });
  const rows = body.data.map(row);
  document.querySelector("#studies tbody").replaceChildren(
    ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No studies yet."))]),
  );
  cursors[page + 1] = body.next_cursor;
  controls.previous.disabled = page === 0;
  controls.next.disabled = !body.next_cursor;
  controls.info.textContent = `page ${page + 1}`;
  clearError();
}

function go(step) {
  page += step;
  show().catch(showError);
}

const controls = pager(document.getElementById("pager"));
controls.previous.addEventListener("click", () => go(-1));
controls.next.addEventListener("click", () => go(1));
show().catch(showError);
