// An editable notes box: a study's notes (PATCH /v1/studies/{id} with notes) or a trial's note
// (PUT .../trials/{n}/note). The server's text is shown live, except while the box holds
// unsaved edits, which a refresh never overwrites.
import { el } from "./format.js";
import { reporting } from "./inline-error.js";

// The server's bound (client.models.Note).
const MAX_CHARS = 10000;

export class NotesBox {
  // `save(text)` sends the text and resolves when the server has stored it.
  constructor(node, save, placeholder) {
    this.saveText = save;
    this.saved = null;
    this.text = el("textarea", {
      class: "notes-text",
      rows: 3,
      maxlength: MAX_CHARS,
      placeholder,
      oninput: () => this.edited(),
    });
    this.button = el("button", { class: "notes-save", disabled: "", onclick: () => this.save() }, "Save");
    this.status = el("span", { class: "notes-status muted" });
    this.error = el("div", { class: "control-error", hidden: "" });
    node.replaceChildren(this.text, el("div", { class: "notes-bar" }, this.button, this.status), this.error);
  }

  // The text the server has now (null: none).
  show(serverText) {
    const text = serverText || "";
    if (this.saved === null || this.text.value === this.saved) this.text.value = text;
    this.saved = text;
    this.edited();
  }

  edited() {
    const dirty = this.text.value !== this.saved;
    this.button.disabled = !dirty;
    if (dirty) this.status.textContent = "unsaved changes";
    else if (this.status.textContent === "unsaved changes") this.status.textContent = "";
  }

  async save() {
    const text = this.text.value;
    this.button.disabled = true;
    const answer = await reporting(this.error, () => this.saveText(text));
    if (answer === null) {
      this.edited();
      return;
    }
    this.saved = text;
    this.status.textContent = "saved";
    this.edited();
  }
}
