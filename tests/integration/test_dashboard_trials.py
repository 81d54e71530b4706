"""The dashboard's trial page, running-trials panel, controls and CSV download in a real
Chromium against a real two-worker server (SQLite and PostgreSQL): what the page does is
checked through the API. Screenshots go to test-artifacts/dashboard/."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.integration.browser import WatchedPage
from tests.integration.conftest import ON_POSTGRESQL, Server

pytestmark = [pytest.mark.integration, ON_POSTGRESQL]

PARAMETERS = [
    {"type": "float", "name": "x", "low": -5.0, "high": 5.0},
    {"type": "int", "name": "n", "low": 1, "high": 8},
    {"type": "categorical", "name": "act", "choices": ["relu", "tanh"]},
]


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _study(api: httpx.Client, name: str) -> int:
    r = api.post("/v1/studies", json={"name": name, "parameters": PARAMETERS})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _asked(api: httpx.Client, sid: int, worker: str = "w1") -> int:
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker_id": worker})
    assert r.status_code == 200, r.text
    return r.json()["trials"][0]["number"]


def _open(watched: WatchedPage, url: str) -> None:
    watched.page.goto(url)
    watched.page.wait_for_selector("body[data-revision]")


def _eventually(check: Callable[[], bool], seconds: float = 5.0) -> None:
    """Waits until ``check()`` holds, polling the API (the page writes asynchronously)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the API never showed the change"
        time.sleep(0.1)


def test_the_trial_page_shows_params_results_and_the_measurement_curve(server, api, watched):
    sid = _study(api, "curves")
    params = {"x": 1.5, "n": 4, "act": "tanh"}
    assert api.post(f"/v1/studies/{sid}/trials", json={"params": params}).status_code == 201
    number = _asked(api, sid)  # the enqueued point is served first
    for step, value in [(1, 0.9), (2, 0.5), (3, 0.4)]:
        r = api.post(
            f"/v1/studies/{sid}/trials/{number}/report",
            json={"step": step, "values": {"value": value}},
        )
        assert r.status_code == 201, r.text
    r = api.post(f"/v1/studies/{sid}/trials/{number}/tell", json={"values": {"value": 0.4}})
    assert r.status_code == 200, r.text
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    page = watched.page
    page.click(f"#trials tr[data-number='{number}'] a")
    page.wait_for_selector("#measurements .main-svg")
    assert page.url.endswith(f"/dashboard/studies/{sid}/trials/{number}")
    watched.assert_clean()
    shown = page.locator("#params tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.key, r.querySelector('td').textContent])"
    )
    assert shown == [["x", "1.5"], ["n", "4"], ["act", "tanh"]]
    assert page.locator("#results tr[data-key='value'] td").inner_text() == "0.4"
    assert page.locator("#trial-state").inner_text() == "completed"
    assert page.locator("#trial-worker").inner_text() == "w1"
    assert page.locator("#measurements").get_attribute("data-points") == "3"
    assert page.locator("#measurements .scatterlayer .trace").count() == 1
    assert page.locator("#lineage-section").is_hidden()  # not a scheduler study
    watched.screenshot("trial")
    watched.assert_clean()


def test_pausing_resuming_and_completing_from_the_page_change_the_study(server, api, watched):
    sid = _study(api, "states")
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    page = watched.page

    def state() -> str:
        return api.get(f"/v1/studies/{sid}").json()["state"]

    page.click("#controls button[data-state='paused']")
    _eventually(lambda: state() == "paused")
    page.wait_for_selector("#study-state:text('paused')")
    assert page.locator("#controls button[data-state='paused']").is_disabled()
    page.click("#controls button[data-state='active']")
    _eventually(lambda: state() == "active")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#controls button[data-state='completed']")
    page.wait_for_timeout(500)
    assert state() == "active"  # dismissed: nothing sent
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#controls button[data-state='completed']")
    _eventually(lambda: state() == "completed")
    page.wait_for_selector("#study-state:text('completed')")
    watched.assert_clean()


def test_enqueueing_from_the_page_creates_a_waiting_trial(server, api, watched):
    sid = _study(api, "enqueue")
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    page = watched.page
    page.fill("#enqueue [name='x']", "1.25")
    page.fill("#enqueue [name='n']", "3")
    page.select_option("#enqueue [name='act']", label="tanh")
    page.click("#enqueue button[type='submit']")
    page.wait_for_selector("#trials tr[data-number='0'][data-state='waiting']")
    trials = api.get(f"/v1/studies/{sid}/trials").json()["data"]
    assert [(t["state"], t["params"]) for t in trials] == [
        ("waiting", {"x": 1.25, "n": 3, "act": "tanh"})
    ]
    watched.screenshot("study-controls")
    watched.assert_clean()


def test_an_api_error_shows_next_to_the_control(server, api, watched):
    sid = _study(api, "refused")
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    page = watched.page
    # Past the input's own range check, so the server answers: 422 invalid_params.
    page.eval_on_selector("#enqueue [name='x']", "input => input.removeAttribute('max')")
    page.fill("#enqueue [name='x']", "50")
    page.fill("#enqueue [name='n']", "3")
    page.click("#enqueue button[type='submit']")
    page.wait_for_selector("#control-error:not([hidden])")
    assert "422 invalid_params" in page.locator("#control-error").inner_text()
    assert api.get(f"/v1/studies/{sid}/trials").json()["data"] == []
    watched.problems = [p for p in watched.problems if "/trials" not in p]  # the expected 422
    watched.assert_clean()


def test_a_running_trial_shows_in_the_panel_and_can_be_failed(server, api, watched):
    sid = _study(api, "running")
    number = _asked(api, sid, worker="gpu-7")
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    page = watched.page
    row = page.locator(f"#running tr[data-number='{number}']")
    row.wait_for()
    assert "gpu-7" in row.inner_text()
    assert "in " in row.locator("td:nth-child(4)").inner_text()  # the lease: "in 599 s"
    r = api.post(
        f"/v1/studies/{sid}/trials/{number}/report", json={"step": 2, "values": {"value": 0.3}}
    )
    assert r.status_code == 201, r.text
    # A report sends no event: the page's periodic check (every 5 s) picks it up.
    page.wait_for_selector(f"#running tr[data-number='{number}'] td.latest:text('step 2')")
    assert row.locator("td.latest").inner_text() == "step 2: value 0.3"
    watched.screenshot("study-running")
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button.fail").click()
    _eventually(lambda: api.get(f"/v1/studies/{sid}/trials/{number}").json()["state"] == "failed")
    page.wait_for_selector("#running td:text('No trial is running.')")
    watched.assert_clean()


def test_requeueing_a_running_trial_serves_its_parameters_to_the_next_worker(server, api, watched):
    sid = _study(api, "requeue")
    number = _asked(api, sid, worker="gpu-1")
    params = api.get(f"/v1/studies/{sid}/trials/{number}").json()["params"]
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    page = watched.page
    row = page.locator(f"#running tr[data-number='{number}']")
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button.requeue").click()
    _eventually(lambda: api.get(f"/v1/studies/{sid}/trials/{number}").json()["state"] == "failed")
    failed = api.get(f"/v1/studies/{sid}/trials/{number}").json()
    copy = number + 1
    assert failed["reason"] == f"requeued from the dashboard as trial {copy}"
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker_id": "gpu-2"})
    (served,) = r.json()["trials"]
    assert (served["number"], served["params"]) == (copy, params)
    page.wait_for_selector(f"#running tr[data-number='{copy}']")
    watched.assert_clean()


def test_the_csv_download_follows_the_table_sort(server, api, watched):
    sid = _study(api, "csv")
    for i, value in enumerate([3.0, 1.0, 2.0]):
        body = {"params": {"x": float(i), "n": 1, "act": "relu"}, "values": {"value": value}}
        assert api.post(f"/v1/studies/{sid}/trials", json=body).status_code == 201
    _open(watched, f"{server.url}/dashboard/studies/{sid}")
    page = watched.page
    page.click("#trials th[data-key='values.value']")
    page.wait_for_selector("#trials th.sorted-asc[data-key='values.value']")
    with page.expect_download() as download:
        page.click("#download-csv")
    rows = list(csv.reader(io.StringIO(download.value.path().read_text(encoding="utf-8"))))
    assert rows[0] == [
        "number", "state", "params.x", "params.n", "params.act", "values.value", "reason", "note"
    ]  # fmt: skip
    assert [r[0] for r in rows[1:]] == ["1", "2", "0"]  # by value, ascending
    assert rows[1] == ["1", "completed", "1", "1", "relu", "1", "", ""]
    watched.assert_clean()


def test_a_units_page_shows_its_lineage(server, api, watched):
    r = api.post(
        "/v1/studies",
        json={
            "name": "pbt",
            "parameters": [{"type": "float", "name": "lr", "low": 0.001, "high": 1.0}],
            "objectives": [{"name": "accuracy", "goal": "maximize"}],
            "engine": {
                "name": "pbt",
                "options": {"t_max": 30, "population_size": 2, "interval": 10},
            },
        },
    )
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    r = api.post(f"/v1/studies/{sid}/ask", json={"count": 2, "worker_id": "w0"})
    assert r.status_code == 200, r.text
    for trial in r.json()["trials"]:  # the first generation, both members trained
        number = trial["number"]
        body = {"values": {"accuracy": 0.1 + number}, "checkpoint": f"ckpt-{number}"}
        r = api.post(f"/v1/studies/{sid}/trials/{number}/tell", json=body)
        assert r.status_code == 200, r.text
    second = _asked(api, sid, worker="w1")  # a unit that starts from a saved checkpoint
    lineage = api.get(f"/v1/studies/{sid}/trials/{second}/lineage").json()["segments"]
    first = lineage[0]["trial"]
    assert [s["trial"] for s in lineage] == [first, second]
    _open(watched, f"{server.url}/dashboard/studies/{sid}/trials/{second}")
    page = watched.page
    page.wait_for_selector("#lineage-section:not([hidden])")
    rows = page.locator("#lineage tbody tr")
    assert rows.evaluate_all("rows => rows.map(r => Number(r.dataset.number))") == [first, second]
    assert page.locator(f"#lineage tr[data-number='{first}'] td:nth-child(7)").inner_text() == (
        f"ckpt-{first}"
    )
    watched.screenshot("trial-lineage")
    watched.assert_clean()
