// The running trials panel: GET /v1/studies/{id}/trials?state=running, each trial's worker,
// last heartbeat, lease, retries and latest intermediate value (the last point of its curve,
// GET .../measurements?selection=running), and buttons that fail it (POST .../tell with state
// failed) or requeue it (its parameters enqueued as a new trial, POST .../trials, then the trial
// failed, as Optuna's RetryFailedTrialCallback does), each after a confirmation. A trial whose worker has not been heard from for longer
// than the study's lease (or whose lease has run out) is marked stuck; the heartbeat ages tick
// every second between refreshes.
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

// The age of the last heartbeat in seconds, and whether the trial looks stuck.
function heartbeat(trial, leaseSeconds) {
  const age = trial.heartbeat_at ? (Date.now() - Date.parse(trial.heartbeat_at)) / 1000 : null;
  const expired = trial.lease_expires_at && Date.parse(trial.lease_expires_at) < Date.now();
  return { age, stuck: Boolean(expired || (age !== null && age > leaseSeconds)) };
}

function latest(curve) {
  const last = curve ? curve.points[curve.points.length - 1] : undefined;
  if (!last) return "";
  const values = Object.entries(last.values).map(([k, v]) => `${k} ${number(v)}`);
  return `step ${last.step}: ${values.join(", ")}`;
}

function heartbeatText(age) {
  return age === null ? "never" : `${Math.max(0, Math.round(age))} s ago`;
}

export class RunningPanel {
  constructor(studyId, node, errorNode) {
    this.studyId = studyId;
    this.node = node;
    this.errorNode = errorNode;
  }

  async show(study) {
    this.leaseSeconds = study.lease_seconds;
    const base = `/v1/studies/${this.studyId}`;
    const [page, curves] = await Promise.all([
      getJson(`${base}/trials`, { state: "running", limit: PANEL_SIZE }),
      getJson(`${base}/measurements`, { selection: "running", max_trials: PANEL_SIZE, max_points_per_trial: 2 }),
    ]);
    const byNumber = new Map(curves.trials.map((c) => [c.number, c]));
    const headers = ["#", "Worker", "Started", "Lease expires", "Last heartbeat", "Retries", "Latest value", ""];
    const rows = page.data.map((trial) => this.row(trial, byNumber.get(trial.number)));
    this.node.replaceChildren(
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
      el(
        "tbody",
        {},
        rows.length ? rows : el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, "No trial is running.")),
      ),
    );
    clearInterval(this.ticker);
    this.ticker = setInterval(() => this.tick(), 1000);
  }

  // Between refreshes: the times and the stuck marks move with the clock.
  tick() {
    for (const row of this.node.querySelectorAll("tr[data-lease]")) {
      const trial = { heartbeat_at: row.dataset.heartbeat || null, lease_expires_at: row.dataset.lease };
      const { age, stuck } = heartbeat(trial, this.leaseSeconds);
      row.querySelector(".heartbeat").textContent = heartbeatText(age);
      row.querySelector(".lease").textContent = leaseLeft(trial.lease_expires_at);
      const started = row.querySelector(".started");
      started.textContent = ago(started.title);
      row.classList.toggle("stuck", stuck);
    }
  }

  row(trial, curve) {
    const href = `/dashboard/studies/${this.studyId}/trials/${trial.number}`;
    const { age, stuck } = heartbeat(trial, this.leaseSeconds);
    return el(
      "tr",
      {
        "data-number": trial.number,
        "data-heartbeat": trial.heartbeat_at || "",
        "data-lease": trial.lease_expires_at || "",
        class: stuck ? "stuck" : "",
        title: stuck ? "No heartbeat for longer than the lease: the worker may be stuck." : "",
      },
      el("td", { class: "num" }, el("a", { href }, trial.number)),
      el("td", {}, trial.worker_id || ""),
      el("td", { class: "started", title: trial.started_at || "" }, ago(trial.started_at)),
      el("td", { class: "lease", title: trial.lease_expires_at || "" }, leaseLeft(trial.lease_expires_at)),
      el("td", { class: "heartbeat", title: trial.heartbeat_at || "" }, heartbeatText(age)),
      el("td", { class: "num retries" }, trial.retries),
      el("td", { class: "latest" }, latest(curve)),
      el(
        "td",
        {},
        el("button", { class: "fail", onclick: () => this.fail(trial.number) }, "Fail"),
        // A scheduler's unit has its own start: only the scheduler may serve it again.
        trial.unit ? "" : el("button", { class: "requeue", onclick: () => this.requeue(trial) }, "Requeue"),
      ),
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

  requeue(trial) {
    const question = `Requeue trial ${trial.number}? Its parameters go to the next worker that asks, and this run is failed.`;
    if (!window.confirm(question)) return null;
    return reporting(this.errorNode, async () => {
      const path = `/v1/studies/${this.studyId}/trials`;
      const copy = await sendJson("POST", path, { params: trial.params });
      return sendJson("POST", `${path}/${trial.number}/tell`, {
        state: "failed",
        reason: `requeued from the dashboard as trial ${copy.number}`,
      });
    });
  }
}
