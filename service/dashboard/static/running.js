// The running trials panel: GET /v1/studies/{id}/trials?state=running, each trial's worker,
// lease, retries and latest intermediate value (its last measurement), and a button that
// fails it (POST .../tell with state failed) after a confirmation.
import { getJson, sendJson } from "./api.js";
import { ago, el, number } from "./format.js";
import { reporting } from "./inline-error.js";

// The panel shows the first of a study's running trials; the trial table has them all.
const PANEL_SIZE = 20;

function leaseLeft(iso) {
  if (!iso) return "";
  const seconds = Math.round((Date.parse(iso) - Date.now()) / 1000);
  return seconds >= 0 ? `in ${seconds} s` : `${-seconds} s ago`;
}

function latest(measurements) {
  const last = measurements[measurements.length - 1];
  if (!last) return "";
  const values = Object.entries(last.values).map(([k, v]) => `${k} ${number(v)}`);
  return `step ${last.step}: ${values.join(", ")}`;
}

export class RunningPanel {
  constructor(studyId, node, errorNode) {
    this.studyId = studyId;
    this.node = node;
    this.errorNode = errorNode;
  }

  async show() {
    const base = `/v1/studies/${this.studyId}/trials`;
    const page = await getJson(base, { state: "running", limit: PANEL_SIZE });
    const measured = await Promise.all(
      page.data.map((t) => getJson(`${base}/${t.number}/measurements`)),
    );
    const headers = ["#", "Worker", "Started", "Lease expires", "Retries", "Latest value", ""];
    const rows = page.data.map((trial, i) => this.row(trial, measured[i]));
    this.node.replaceChildren(
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
      el(
        "tbody",
        {},
        rows.length ? rows : el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No trial is running.")),
      ),
    );
  }

  row(trial, measurements) {
    const href = `/dashboard/studies/${this.studyId}/trials/${trial.number}`;
    return el(
      "tr",
      { "data-number": trial.number },
      el("td", { class: "num" }, el("a", { href }, trial.number)),
      el("td", {}, trial.worker_id || ""),
      el("td", { title: trial.started_at || "" }, ago(trial.started_at)),
      el("td", { title: trial.lease_expires_at || "" }, leaseLeft(trial.lease_expires_at)),
      el("td", { class: "num" }, trial.retries),
      el("td", { class: "latest" }, latest(measurements)),
      el("td", {}, el("button", { class: "fail", onclick: () => this.fail(trial.number) }, "Fail")),
    );
  }

  fail(trialNumber) {
    if (!window.confirm(`Fail trial ${trialNumber}? Its worker's result will be refused.`)) return null;
    return reporting(this.errorNode, () =>
      sendJson("POST", `/v1/studies/${this.studyId}/trials/${trialNumber}/tell`, {
        state: "failed",
        reason: "failed from the dashboard",
      }),
    );
  }
}
