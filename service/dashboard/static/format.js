// Small formatting and DOM helpers shared by the pages.

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : String(child));
    }
  }
  return node;
}

export function number(value) {
  if (value === null || value === undefined) return "";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  return Math.abs(value) >= 1e5 || (value !== 0 && Math.abs(value) < 1e-3)
    ? value.toExponential(4)
    : value.toPrecision(6).replace(/\.?0+$/, "");
}

export function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

export const TRIAL_STATES = ["waiting", "running", "stale", "completed", "failed", "infeasible"];

export function stateCounts(counts) {
  return el(
    "span",
    { class: "counts" },
    TRIAL_STATES.filter((s) => counts[s]).map((s) =>
      el("span", { class: `state state-${s}`, title: s }, `${s} ${counts[s]}`),
    ),
  );
}

export function showError(error) {
  const box = document.getElementById("error");
  box.textContent = String(error.message || error);
  box.hidden = false;
}

// After a successful update: an earlier error no longer applies.
export function clearError() {
  document.getElementById("error").hidden = true;
}

// Previous and next buttons and a line of text in `node`; the page wires the buttons.
export function pager(node) {
  const parts = {
    previous: el("button", { id: "previous", disabled: "" }, "Previous"),
    next: el("button", { id: "next", disabled: "" }, "Next"),
    info: el("span", { id: "page-info", class: "muted" }),
  };
  node.replaceChildren(parts.previous, parts.next, parts.info);
  return parts;
}
