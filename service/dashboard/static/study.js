// The study page: facts, history chart and trial table, kept live by subscribe().
import { getJson, subscribe } from "./api.js";
import { showError } from "./format.js";

const studyId = Number(window.location.pathname.split("/").pop());

subscribe(studyId, (study) => {
  document.getElementById("title").textContent = study.name;
}, showError);
