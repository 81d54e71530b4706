"""The studies page's filters, sorting, budget bars and sparklines, the compare page and the
history's time axis, in a real Chromium against a real two-worker server (SQLite and
PostgreSQL). Screenshots go to test-artifacts/dashboard/."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.integration.browser import WatchedPage
from tests.integration.conftest import ON_POSTGRESQL, Server
from tests.integration.test_dashboard import _completed, _open_study, _study
from tests.integration.test_dashboard import api as api

pytestmark = [pytest.mark.integration, ON_POSTGRESQL]

TWO = [
    {"name": "f1", "goal": "minimize", "reference": 10.0},
    {"name": "f2", "goal": "minimize", "reference": 10.0},
]


def _values(api: httpx.Client, sid: int, values: dict[str, float]) -> None:
    body = {"params": {"x": 0.0, "act": "relu"}, "values": values}
    assert api.post(f"/v1/studies/{sid}/trials", json=body).status_code == 201


def _wait_names(watched: WatchedPage, names: list[str]) -> None:
    """Waits until the studies table lists exactly ``names``, in this order."""
    watched.page.wait_for_function(
        """names => JSON.stringify([...document.querySelectorAll('#studies td.study-name')]
            .map(td => td.textContent)) === names""",
        arg=json.dumps(names, separators=(",", ":")),
        timeout=20_000,
    )


def test_the_studies_page_filters_and_sorts_on_the_server(server: Server, api, watched):
    ids = {name: _study(api, name) for name in ("alpha-a", "beta", "alpha-b")}
    ids["gp-one"] = _study(api, "gp-one", engine={"name": "gp"})
    for i in range(3):
        _completed(api, ids["alpha-a"], float(i), 1.0)
    _completed(api, ids["beta"], 0.0, 1.0)
    _completed(api, ids["gp-one"], 0.0, 1.0)
    _completed(api, ids["gp-one"], 1.0, 1.0)
    assert api.patch(f"/v1/studies/{ids['alpha-b']}", json={"state": "paused"}).is_success
    page = watched.page
    page.goto(f"{server.url}/dashboard")
    _wait_names(watched, ["alpha-a", "beta", "alpha-b", "gp-one"])
    page.fill("#filter-name", "ALPHA")
    _wait_names(watched, ["alpha-a", "alpha-b"])
    page.select_option("#filter-state", "paused")
    _wait_names(watched, ["alpha-b"])
    page.fill("#filter-name", "")
    page.select_option("#filter-state", "")
    page.wait_for_selector("#filter-engine option[value='gp']", state="attached")
    page.select_option("#filter-engine", "gp")
    _wait_names(watched, ["gp-one"])
    page.select_option("#filter-engine", "")
    page.click("th[data-sort='trials']")
    _wait_names(watched, ["alpha-a", "gp-one", "beta", "alpha-b"])
    assert "sorted-desc" in page.locator("th[data-sort='trials']").get_attribute("class")
    page.click("th[data-sort='name']")
    _wait_names(watched, ["alpha-a", "alpha-b", "beta", "gp-one"])
    page.click("th[data-sort='name']")
    _wait_names(watched, ["gp-one", "beta", "alpha-b", "alpha-a"])
    watched.screenshot("studies-sorted")
    watched.assert_clean()


def test_rows_draw_a_sparkline_a_budget_and_the_hypervolume(server: Server, api, watched):
    single = _study(api, "single", max_trials=10)
    for i, value in enumerate([5.0, 3.0, 4.0, 1.0, 2.0]):
        _completed(api, single, float(i), value)
    two = _study(api, "two-ref", objectives=TWO)
    for f1, f2 in [(5.0, 5.0), (2.0, 6.0), (6.0, 1.0)]:
        _values(api, two, {"f1": f1, "f2": f2})
    no_ref = _study(api, "two-no-ref", objectives=[{"name": "a"}, {"name": "b"}])
    _values(api, no_ref, {"a": 1.0, "b": 2.0})
    page = watched.page
    page.goto(f"{server.url}/dashboard")
    row = page.locator(f"tr[data-study='{single}']")
    row.locator("svg.sparkline path").wait_for()
    # Best so far: 5, 3, 1 (trials 0, 1, 3), held until trial 4.
    assert row.locator("svg.sparkline").get_attribute("data-steps") == "4"
    assert "best value so far: 1" in row.locator("svg.sparkline title").text_content()
    assert row.locator("td.study-budget").inner_text().strip() == "5 / 10"
    assert row.locator("progress").get_attribute("value") == "5"
    hv = page.locator(f"tr[data-study='{two}']")
    hv.locator("svg.sparkline").wait_for()
    expected = api.get(f"/v1/studies/{two}/pareto").json()["hypervolume"][-1][1]
    assert hv.locator("td.best").inner_text() == f"hypervolume {expected:g}"
    page.wait_for_function(
        f"document.querySelector(\"tr[data-study='{no_ref}'] td.trend\").textContent"
        " === 'see study'"
    )
    assert page.locator(f"tr[data-study='{no_ref}'] td.study-budget").inner_text() == ""
    watched.screenshot("studies-sparklines")
    watched.assert_clean()


def test_compare_draws_one_series_per_chosen_study(server: Server, api, watched):
    chosen = [_study(api, f"run-{i}") for i in range(3)]
    for k, sid in enumerate(chosen):
        for i in range(5):
            _completed(api, sid, float(i), 10.0 - i - k)
    page = watched.page
    page.goto(f"{server.url}/dashboard")
    # Every row's sparkline first: leaving the page would cut its request.
    for sid in chosen:
        page.wait_for_selector(f"tr[data-study='{sid}'] svg.sparkline")
    assert page.locator("#compare").is_disabled()
    page.check(f"tr[data-study='{chosen[0]}'] input.pick")
    page.check(f"tr[data-study='{chosen[2]}'] input.pick")
    page.click("#compare")
    page.wait_for_selector("#compare-chart[data-series='2']")
    assert page.url.endswith(f"/dashboard/compare?ids={chosen[0]},{chosen[2]}")
    legend = page.locator("#compare-chart .legendtext").all_text_contents()
    assert legend == [f"#{chosen[0]} run-0", f"#{chosen[2]} run-2"]
    assert page.locator("#compared tbody tr").count() == 2
    page.select_option("#history-axis", "time")
    page.wait_for_selector("#compare-chart[data-xaxis='time']")
    assert page.locator("#compare-chart .xtitle").text_content() == "time"
    watched.screenshot("compare")
    watched.assert_clean()


def test_the_history_x_axis_switches_between_trial_number_and_time(server: Server, api, watched):
    sid = _study(api, "timed")
    for i in range(8):
        _completed(api, sid, float(i) - 4.0, float((i * 5) % 7))
    _open_study(watched, server, sid)
    page = watched.page
    assert page.locator("#history").get_attribute("data-xaxis") == "number"
    assert page.locator("#history .xtitle").text_content() == "trial number"
    page.select_option("#history-axis", "time")
    page.wait_for_selector("#history[data-xaxis='time']")
    assert page.locator("#history .xtitle").text_content() == "time"
    # The best-so-far is drawn on the date axis: its points sit inside the axis' range.
    x_range = page.evaluate("document.getElementById('history')._fullLayout.xaxis.range")
    assert all(isinstance(x, str) and x[:4].isdigit() for x in x_range), x_range
    watched.screenshot("study-history-time")
    watched.assert_clean()
    # The choice is remembered.
    page.reload()
    page.wait_for_selector("#history[data-xaxis='time']")
    watched.assert_clean()
