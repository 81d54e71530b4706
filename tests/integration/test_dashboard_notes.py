"""The dashboard's notes (study and trial), the running panel's heartbeat ages and stuck
marks, and the intermediate-values chart, in a real Chromium against a real two-worker server
(SQLite and PostgreSQL); what the page writes is checked through the API. Screenshots go to
test-artifacts/dashboard/."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from tests.integration.browser import WatchedPage
from tests.integration.conftest import ON_POSTGRESQL

# The API client fixture and the page helpers of the trial-page tests.
from tests.integration.test_dashboard_trials import _eventually, _open
from tests.integration.test_dashboard_trials import api as api

pytestmark = [pytest.mark.integration, ON_POSTGRESQL]

PARAMETERS = [{"type": "float", "name": "x", "low": -5.0, "high": 5.0}]


def _study(api: httpx.Client, name: str, **fields: object) -> int:
    r = api.post("/v1/studies", json={"name": name, "parameters": PARAMETERS, **fields})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _ask(api: httpx.Client, sid: int, **body: object) -> int:
    r = api.post(f"/v1/studies/{sid}/ask", json=body)
    assert r.status_code == 200, r.text
    return r.json()["trials"][0]["number"]


def _report(api: httpx.Client, sid: int, number: int, step: int, value: float) -> None:
    body = {"step": step, "values": {"value": value}}
    r = api.post(f"/v1/studies/{sid}/trials/{number}/report", json=body)
    assert r.status_code == 201, r.text


def _save_and_reload(watched: WatchedPage, box: str, text: str, stored: Callable[[], str]) -> None:
    """Types ``text`` in the notes box ``box``, saves it, waits until the API has it
    (``stored()``), reloads the page and checks that the box shows it."""
    page = watched.page
    page.fill(f"{box} textarea", text)
    page.wait_for_selector(f"{box} .notes-status:text('unsaved changes')")
    page.click(f"{box} .notes-save")
    page.wait_for_selector(f"{box} .notes-status:text('saved')")
    _eventually(lambda: stored() == text)
    page.reload()
    page.wait_for_selector("body[data-revision]")
    assert page.input_value(f"{box} textarea") == text


def test_study_and_trial_notes_are_saved_and_persist_across_reloads(server, api, watched):
    sid = _study(api, "notes")
    number = _ask(api, sid, worker_id="w1")
    page = watched.page
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    study = f"/v1/studies/{sid}"
    text = "Baseline sweep.\nCompare with =lr study."
    _save_and_reload(watched, "#study-notes", text, lambda: api.get(study).json()["notes"])
    # A note written elsewhere shows up live, without a reload.
    api.patch(study, json={"notes": "edited through the API"})
    page.wait_for_function(
        "document.querySelector('#study-notes textarea').value === 'edited through the API'",
        timeout=8000,
    )
    watched.screenshot("study-notes")

    _open(watched, f"{server.url}/dashboard/studies/{sid}/trials/{number}")
    trial = f"{study}/trials/{number}"
    text = "w1 ran out of memory once"
    _save_and_reload(watched, "#trial-note", text, lambda: api.get(trial).json()["note"])
    watched.screenshot("trial-note")
    watched.assert_clean()


def test_the_running_panel_shows_heartbeat_ages_retries_and_stuck_workers(server, api, watched):
    # A short study lease but a long lease for this ask: the trial is never reaped, and its
    # worker, silent for longer than the study's lease, looks stuck.
    sid = _study(api, "heartbeats", lease_seconds=8)
    number = _ask(api, sid, worker_id="w1", lease_seconds=3600)
    _report(api, sid, number, 1, 0.75)
    page = watched.page
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    row = f"#running tr[data-number='{number}']"
    page.wait_for_selector(f"{row} td.latest:text('step 1: value 0.75')")
    assert page.locator(f"{row} td.heartbeat").inner_text().endswith("s ago")
    page.wait_for_selector(f"{row}.stuck", timeout=12000)
    # Stuck once silent for more than 8 s; the age shown is rounded down to whole seconds.
    assert int(page.locator(f"{row} td.heartbeat").inner_text().split()[0]) >= 8
    watched.screenshot("running-stuck")
    # A heartbeat clears the mark (the page refreshes as the revision moves).
    r = api.post(f"/v1/studies/{sid}/trials/{number}/heartbeat", json={"worker_id": "w1"})
    assert r.status_code == 200, r.text
    page.wait_for_selector(f"{row}:not(.stuck)", timeout=8000)
    assert int(page.locator(f"{row} td.heartbeat").inner_text().split()[0]) <= 8
    assert page.locator(f"{row} td.retries").inner_text() == "0"
    # A trial re-served after its lease lapsed (the next ask requeues it) counts a retry.
    lapsed = _ask(api, sid, worker_id="w2", lease_seconds=1)
    time.sleep(1.5)
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker_id": "w3", "lease_seconds": 3600})
    served = r.json()["trials"][0]
    assert (served["number"], served["retries"]) == (lapsed, 1), r.text
    again = f"#running tr[data-number='{lapsed}']"
    page.wait_for_selector(f"{again} td:text('w3')", timeout=8000)
    assert page.locator(f"{again} td.retries").inner_text() == "1"
    assert page.locator(f"{again} td.heartbeat").inner_text().endswith("s ago")
    watched.assert_clean()


def test_the_intermediate_values_chart_draws_the_curves_and_updates_live(server, api, watched):
    sid = _study(api, "curves")
    first = _ask(api, sid, worker_id="w1")
    for step, value in [(1, 0.9), (2, 0.6), (3, 0.5)]:
        _report(api, sid, first, step, value)
    r = api.post(f"/v1/studies/{sid}/trials/{first}/tell", json={"values": {"value": 0.5}})
    assert r.status_code == 200, r.text
    page = watched.page
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    page.wait_for_selector("#curves .main-svg")
    assert page.locator("#curves").get_attribute("data-trials") == str(first)
    assert page.locator("#curves").get_attribute("data-points") == "3"
    assert page.locator("#curves .scatterlayer .trace").count() == 1

    second = _ask(api, sid, worker_id="w2")
    _report(api, sid, second, 1, 0.8)
    # The new running trial's curve appears without a reload, as does its next point.
    page.wait_for_selector(f"#curves[data-trials='{second},{first}']", timeout=8000)
    _report(api, sid, second, 2, 0.3)
    page.wait_for_selector("#curves[data-points='5']", timeout=8000)
    assert page.locator("#curves .scatterlayer .trace").count() == 2
    assert "2 trials" in page.locator("#curves-note").inner_text()
    row = f"#running tr[data-number='{second}']"
    page.wait_for_selector(f"{row} td.latest:text('step 2: value 0.3')")
    watched.screenshot("intermediate-values")

    page.select_option("#curves-selection", "best")
    page.wait_for_selector(f"#curves[data-trials='{first}']")
    watched.assert_clean()
