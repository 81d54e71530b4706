// A study's trial budget (max_trials) as a bar: the trials running or finished, which the
// server counts against it (an ask beyond it is refused with 409 max_trials_reached).
import { el } from "./format.js";

const COUNTED = ["running", "completed", "failed", "infeasible"];

export function budget(study) {
  if (!study.max_trials) return "";
  const used = COUNTED.reduce((sum, state) => sum + (study.trial_counts[state] || 0), 0);
  return el(
    "span",
    { class: "budget", title: `${used} of ${study.max_trials} trials running or finished` },
    el("progress", { value: Math.min(used, study.max_trials), max: study.max_trials }),
    ` ${used} / ${study.max_trials}`,
  );
}
