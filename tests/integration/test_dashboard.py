"""The dashboard in a real Chromium against a real two-worker server on SQLite and PostgreSQL
(``server``): every page renders without console errors or failed requests, the study page
follows tells live, and the trial table pages and sorts on the server. Screenshots of every
page go to test-artifacts/dashboard/."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.browser import WatchedPage
from tests.integration.conftest import ON_POSTGRESQL, Server
from tests.integration.test_dashboard_trials import _eventually

pytestmark = [pytest.mark.integration, ON_POSTGRESQL]

PARAMETERS = [
    {"type": "float", "name": "x", "low": -5.0, "high": 5.0},
    {"type": "categorical", "name": "act", "choices": ["relu", "tanh"]},
]


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _study(api: httpx.Client, name: str, **fields: object) -> int:
    r = api.post("/v1/studies", json={"name": name, "parameters": PARAMETERS, **fields})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _completed(api: httpx.Client, sid: int, x: float, value: float) -> None:
    body = {"params": {"x": x, "act": "relu"}, "values": {"value": value}}
    r = api.post(f"/v1/studies/{sid}/trials", json=body)
    assert r.status_code == 201, r.text


def _asked(api: httpx.Client, sid: int) -> int:
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker_id": "w1"})
    assert r.status_code == 200, r.text
    return r.json()["trials"][0]["number"]


def _open_study(watched: WatchedPage, server: Server, sid: int) -> None:
    page = watched.page
    page.goto(f"{server.url}/dashboard/studies/{sid}")
    page.wait_for_selector("body[data-revision]")
    page.wait_for_selector("#history .main-svg")


def test_studies_page_lists_every_study(server, api, watched):
    first = _study(api, "first")
    for i in range(3):
        _completed(api, first, float(i), 10.0 - i)
    api.post(f"/v1/studies/{first}/trials/{_asked(api, first)}/tell", json={"state": "failed"})
    _study(api, "second", engine={"name": "random"})
    page = watched.page
    page.goto(f"{server.url}/dashboard")
    page.wait_for_selector(f"tr[data-study='{first}']")
    row = page.locator(f"tr[data-study='{first}']")
    assert "completed 3" in row.inner_text() and "failed 1" in row.inner_text()
    assert row.locator("td.best").inner_text() == "8"
    assert page.locator("#studies tbody tr").count() == 2
    watched.screenshot("studies")
    row.locator("a").click()
    page.wait_for_selector("body[data-revision]")
    assert page.locator("#title").inner_text() == "first"
    watched.assert_clean()


def test_study_page_draws_the_history_and_the_trial_table(server, api, watched):
    sid = _study(api, "history", objectives=[{"name": "value", "goal": "minimize"}])
    for i in range(60):
        _completed(api, sid, (i % 10) - 5.0, float((i * 7) % 13))
    api.post(f"/v1/studies/{sid}/trials/{_asked(api, sid)}/tell", json={"state": "failed"})
    # A worker lost: its trial's lease expires and the reaper makes it stale.
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker_id": "lost", "lease_seconds": 0.05})
    lost = r.json()["trials"][0]["number"]
    trial = f"/v1/studies/{sid}/trials/{lost}"
    # The server's reaper passes every 5 s.
    _eventually(lambda: api.get(trial).json()["state"] == "stale", seconds=15)
    _open_study(watched, server, sid)
    page = watched.page
    assert page.locator("#history").get_attribute("data-points") == "62"
    assert page.locator("#history .legendtext").all_text_contents() == [
        "value",
        "best value",
        "failed / infeasible",
        "stale (lease expired, to be served again)",
    ]
    assert page.locator("#trials tbody tr").count() == 50
    assert page.locator("#page-info").inner_text() == "trials 1-50 of 62"
    watched.screenshot("study")
    watched.assert_clean()


def test_a_two_objective_study_gets_one_history_panel_per_objective(server, api, watched):
    objectives = [{"name": "loss", "goal": "minimize"}, {"name": "accuracy", "goal": "maximize"}]
    sid = _study(api, "two", objectives=objectives)
    for i in range(20):
        body = {"params": {"x": 0.0, "act": "relu"}, "values": {"loss": 20.0 - i, "accuracy": i}}
        assert api.post(f"/v1/studies/{sid}/trials", json=body).status_code == 201
    _open_study(watched, server, sid)
    page = watched.page
    assert page.locator("#history .legendtext").all_text_contents() == [
        "loss",
        "best loss",
        "accuracy",
        "best accuracy",
    ]  # no failed trials: no legend entry for them
    headers = page.locator("#trials th").all_inner_texts()
    assert headers[2:4] == ["loss (min)", "accuracy (max)"]
    watched.screenshot("study-two-objectives")
    watched.assert_clean()


def test_a_tell_appears_on_the_open_study_page_within_2_s(server, api, watched):
    sid = _study(api, "live")
    _completed(api, sid, 1.0, 5.0)
    _open_study(watched, server, sid)
    page = watched.page
    number = _asked(api, sid)
    page.wait_for_selector(f"#trials tr[data-number='{number}'][data-state='running']")
    told = time.monotonic()
    r = api.post(f"/v1/studies/{sid}/trials/{number}/tell", json={"values": {"value": 0.5}})
    assert r.status_code == 200, r.text
    page.wait_for_selector(
        f"#trials tr[data-number='{number}'][data-state='completed']", timeout=2000
    )
    page.wait_for_function(
        "document.getElementById('history').dataset.points === '2'", timeout=2000
    )
    assert time.monotonic() - told < 2.0
    assert page.locator("#best").inner_text() == "value 0.5"
    watched.screenshot("study-live")
    watched.assert_clean()


def test_a_burst_of_tells_shows_within_2_s_redrawing_at_most_twice_a_second(server, api, watched):
    sid = _study(api, "burst")
    _completed(api, sid, 1.0, 5.0)
    _open_study(watched, server, sid)

    def redraws() -> int:
        return sum(path.startswith(f"/v1/studies/{sid}/history") for *_, path, _ in server.access())

    before, started = redraws(), time.monotonic()
    for _ in range(40):
        number = _asked(api, sid)
        r = api.post(f"/v1/studies/{sid}/trials/{number}/tell", json={"values": {"value": 1.0}})
        assert r.status_code == 200, r.text
        time.sleep(0.04)  # a burst over about two seconds: several redraws during it
    told = time.monotonic()
    watched.page.wait_for_function(
        "document.getElementById('history').dataset.points === '41'", timeout=2000
    )
    assert time.monotonic() - told < 2.0
    assert redraws() - before <= 2 * (time.monotonic() - started) + 2
    watched.assert_clean()


def _column(page, index: int) -> list[str]:
    return page.locator(f"#trials tbody tr td:nth-child({index})").all_inner_texts()


def _wait_for_page_info(page, text: str) -> None:
    page.wait_for_function(
        "text => document.getElementById('page-info').textContent === text", arg=text
    )


def test_the_trial_table_sorts_numerically_and_pages_on_the_server(server, api, watched):
    sid = _study(api, "table")
    # Values 0..119 told out of order: numeric sorting puts 100 after 99, text sorting would not.
    for i in range(120):
        _completed(api, sid, 0.0, float((i * 37) % 120))
    _open_study(watched, server, sid)
    page = watched.page
    assert _column(page, 1)[:2] == ["119", "118"]  # newest first
    page.click("#trials th[data-key='values.value']")
    page.wait_for_selector("#trials th.sorted-asc[data-key='values.value']")
    assert _column(page, 3)[:3] == ["0", "1", "2"]
    page.click("#next")
    _wait_for_page_info(page, "trials 51-100 of 120")
    assert _column(page, 3)[0] == "50"
    page.click("#next")
    _wait_for_page_info(page, "trials 101-120 of 120")
    assert _column(page, 3) == [str(v) for v in range(100, 120)]
    assert page.locator("#next").is_disabled()
    page.click("#trials th[data-key='values.value']")
    page.wait_for_selector("#trials th.sorted-desc[data-key='values.value']")
    assert _column(page, 3)[:2] == ["119", "118"]
    assert page.locator("#previous").is_disabled()
    watched.screenshot("study-table-sorted")
    watched.assert_clean()


def test_the_page_of_a_missing_study_says_so(server, watched):
    page = watched.page
    page.goto(f"{server.url}/dashboard/studies/2147483647")
    page.wait_for_selector("#error:not([hidden])")
    assert "404 not_found: study 2147483647" in page.locator("#error").inner_text()
    # The failed read is the only problem (the browser logs a failed fetch itself).
    assert watched.problems and all("/v1/studies/2147483647" in p for p in watched.problems)
    watched.screenshot("study-missing")


#: The Plotly traces' lengths by name, read from the chart's own data.
TRACE_LENGTHS = (
    "Object.fromEntries(document.getElementById('pareto').data.map(t => [t.name, t.x.length]))"
)


def test_the_pareto_view_of_a_two_objective_study(server, api, watched):
    """Non-dominated, dominated and infeasible trials and the hypervolume are drawn, and a new
    non-dominated trial shows live."""
    r = api.post(
        "/v1/studies",
        json={
            "name": "pareto",
            "parameters": [{"type": "float", "name": "x", "low": 0.0, "high": 1.0}],
            "objectives": [
                {"name": "loss", "goal": "minimize", "reference": 10.0},
                {"name": "acc", "goal": "maximize", "reference": -1.0},
            ],
            "constraints": [{"name": "c", "op": "<=", "threshold": 0.0}],
            "engine": {"name": "random"},
        },
    )
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    # Six trade-offs (k, k) (acc is maximized), five points each dominated by one of them, and
    # an infeasible point that would dominate them all.
    points = [(float(k), float(k), -1.0) for k in range(6)]
    points += [(k + 0.5, k - 1.0, -1.0) for k in range(1, 6)]
    points.append((-1.0, 10.0, 1.0))
    for i, (loss, acc, c) in enumerate(points):
        body = {
            "params": {"x": i / 20},
            "values": {"loss": loss, "acc": acc},
            "constraints": {"c": c},
        }
        assert api.post(f"/v1/studies/{sid}/trials", json=body).status_code == 201

    page = watched.page
    page.goto(f"{server.url}/dashboard/studies/{sid}")
    page.wait_for_selector("#pareto[data-non-dominated] .main-svg")
    page.wait_for_selector("#hypervolume .main-svg")
    assert page.evaluate(TRACE_LENGTHS) == {
        "dominated": 5,
        "infeasible": 1,
        "non-dominated": 6,
        "reference point": 1,
    }
    assert (
        page.locator("#pareto-note")
        .inner_text()
        .startswith("6 non-dominated, 5 dominated, 1 infeasible completed trials")
    )
    watched.screenshot("study-pareto")

    # The lowest loss and the lowest feasible accuracy: a seventh trade-off, told live.
    number = api.post(f"/v1/studies/{sid}/ask", json={"worker_id": "w1"}).json()["trials"][0][
        "number"
    ]
    tell = {"values": {"loss": -0.5, "acc": -0.5}, "constraints": {"c": -1.0}}
    r = api.post(f"/v1/studies/{sid}/trials/{number}/tell", json=tell)
    assert r.status_code == 200, r.text
    page.wait_for_function(
        "document.getElementById('pareto').dataset.nonDominated === '7'", timeout=3000
    )
    assert page.evaluate(TRACE_LENGTHS)["non-dominated"] == 7
    watched.assert_clean()
