// The study page's controls, each one call of the public API: pause, resume or complete the
// study (PATCH /v1/studies/{id} with its state) and enqueue a point (POST .../trials).
import { el } from "./format.js";
import { sendJson } from "./api.js";
import { reporting } from "./inline-error.js";

// The state a button sets, and whether it asks first.
const STATE_BUTTONS = [
  { state: "paused", label: "Pause", confirm: null },
  { state: "active", label: "Resume", confirm: null },
  {
    state: "completed",
    label: "Complete",
    confirm: "Complete this study? Workers' asks are refused from then on.",
  },
];

function parameterInput(parameter) {
  const attributes = { name: parameter.name, "data-type": parameter.type };
  if (parameter.type === "categorical") {
    // Choices keep their JSON type (true and 1 stay distinct), so the option values are JSON.
    return el(
      "select",
      attributes,
      parameter.choices.map((c) => el("option", { value: JSON.stringify(c) }, String(c))),
    );
  }
  if (parameter.type === "fixed") {
    return el("input", { ...attributes, value: JSON.stringify(parameter.value), disabled: "" });
  }
  const step = parameter.type === "int" ? "1" : "any";
  return el("input", {
    ...attributes,
    type: "number",
    step,
    min: parameter.low,
    max: parameter.high,
    required: "",
    placeholder: `${parameter.low} to ${parameter.high}`,
  });
}

function formParams(form) {
  const params = {};
  for (const input of form.querySelectorAll("[data-type]")) {
    params[input.name] = ["float", "int"].includes(input.dataset.type)
      ? Number(input.value)
      : JSON.parse(input.value);
  }
  return params;
}

export class StudyControls {
  constructor(studyId, node) {
    this.studyId = studyId;
    this.node = node;
    this.built = false;
  }

  // Builds the controls once; afterwards only enables the state buttons that change something.
  show(study) {
    if (!this.built) this.build(study);
    for (const button of this.node.querySelectorAll("button[data-state]")) {
      button.disabled = button.dataset.state === study.state;
    }
  }

  build(study) {
    this.built = true;
    const error = el("div", { class: "control-error", id: "control-error", hidden: "" });
    const buttons = STATE_BUTTONS.map((b) =>
      el("button", { "data-state": b.state, onclick: () => this.setState(b, error) }, b.label),
    );
    const form = el(
      "form",
      { id: "enqueue", class: "enqueue" },
      study.parameters.map((p) => el("label", {}, p.name, parameterInput(p))),
      el("button", { type: "submit" }, "Enqueue"),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      return this.enqueue(form, error);
    });
    this.node.replaceChildren(el("div", { class: "state-controls" }, buttons), form, error);
  }

  setState(button, error) {
    if (button.confirm && !window.confirm(button.confirm)) return null;
    return reporting(error, () =>
      sendJson("PATCH", `/v1/studies/${this.studyId}`, { state: button.state }),
    );
  }

  enqueue(form, error) {
    return reporting(error, () =>
      sendJson("POST", `/v1/studies/${this.studyId}/trials`, { params: formParams(form) }),
    );
  }
}
