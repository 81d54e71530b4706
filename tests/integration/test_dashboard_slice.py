"""The study page's parameter charts in a real Chromium (SQLite and PostgreSQL): one slice
panel per parameter, a contour of two chosen parameters, parameter importance with its method
named, for the chosen objective, all following the trial filter. Screenshots go to
test-artifacts/dashboard/."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.browser import ARTIFACTS, WatchedPage
from tests.integration.conftest import ON_POSTGRESQL, Server

pytestmark = [pytest.mark.integration, ON_POSTGRESQL]

PARAMETERS = [
    {"type": "float", "name": "x", "low": -5.0, "high": 5.0},
    {"type": "float", "name": "lr", "low": 1e-4, "high": 1.0, "log": True},
    {"type": "categorical", "name": "act", "choices": ["relu", "tanh", "gelu"]},
]
OBJECTIVES = [{"name": "fx", "goal": "minimize"}, {"name": "glr", "goal": "minimize"}]


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _study(api: httpx.Client, n: int = 60) -> int:
    """``fx`` depends on x alone, ``glr`` on log10(lr) alone."""
    body = {"name": "slices", "parameters": PARAMETERS, "objectives": OBJECTIVES}
    r = api.post("/v1/studies", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    rng = random.Random(3)
    for _ in range(n):
        params = {
            "x": rng.uniform(-5, 5),
            "lr": 10 ** rng.uniform(-4, 0),
            "act": rng.choice(["relu", "tanh", "gelu"]),
        }
        values = {"fx": params["x"] ** 2, "glr": (math.log10(params["lr"]) + 2) ** 2}
        r = api.post(f"/v1/studies/{sid}/trials", json={"params": params, "values": values})
        assert r.status_code == 201, r.text
    return sid


def _traces(watched: WatchedPage, selector: str) -> list[dict]:
    return watched.page.eval_on_selector(
        selector,
        "node => (node.data || []).map(t => ({type: t.type, x: t.x, y: t.y}))",
    )


def test_slice_contour_and_importance(server, api, watched):
    sid = _study(api)
    page = watched.page
    page.goto(f"{server.url}/dashboard/studies/{sid}")
    page.wait_for_selector("body[data-revision]")
    page.wait_for_selector("#importance .main-svg")
    # One slice panel per parameter, each with every completed trial.
    panels = page.locator("#slices .slice")
    assert panels.evaluate_all("ps => ps.map(p => p.dataset.param)") == ["x", "lr", "act"]
    (slice_x,) = _traces(watched, "#slices .slice[data-param='x']")
    assert len(slice_x["x"]) == 60
    assert (
        page.eval_on_selector("#slices .slice[data-param='lr']", "n => n.layout.xaxis.type")
        == "log"
    )
    assert page.eval_on_selector(
        "#slices .slice[data-param='act']", "n => n.layout.xaxis.ticktext"
    ) == ["relu", "tanh", "gelu"]
    # Importance: fx depends on x alone; the method is named on the page.
    bars = _traces(watched, "#importance")[0]
    assert bars["type"] == "bar" and bars["y"][-1] == "x"  # the top bar is drawn last
    assert "fANOVA" in page.inner_text("#importance-note")
    # The contour of two chosen parameters.
    page.select_option("#contour-x", "lr")
    page.select_option("#contour-y", "x")
    page.wait_for_function("document.getElementById('contour').dataset.params === 'lr,x'")
    contour, trials = _traces(watched, "#contour")
    assert contour["type"] == "contour" and trials["type"] == "scatter"
    assert len(trials["x"]) == 60
    # The other objective: lr becomes the most important.
    page.select_option("#param-objective", "glr")
    page.wait_for_function(
        "(() => { const d = document.getElementById('importance').data;"
        " return d && d[0].y[d[0].y.length - 1] === 'lr'; })()"
    )
    # Two objectives: the Pareto set's EMD over trial numbers, ending at /best's figure.
    page.wait_for_selector("#emd .main-svg")
    (emd,) = _traces(watched, "#emd")
    best = api.get(f"/v1/studies/{sid}/best").json()["pareto_set_loo_emd"]
    assert emd["y"][-1] == pytest.approx(best)
    watched.screenshot("study-slice-contour")
    # The parameters view alone, for the README (docs/dashboard/study-parameters.png).
    page.locator("#parameters-view").screenshot(path=str(ARTIFACTS / "study-parameters.png"))
    watched.assert_clean()


def test_the_charts_follow_the_filter_and_new_trials(server, api, watched):
    sid = _study(api, n=30)
    page = watched.page
    page.goto(f"{server.url}/dashboard/studies/{sid}")
    page.wait_for_selector("#slices .slice .main-svg")
    # The page's filter module is the one the parallel coordinates set.
    page.evaluate(
        "f => import('/dashboard/static/filters.js').then(m => m.setCondition('params.x', f))",
        {"min": 0.0},
    )
    expected = len(
        api.get(
            f"/v1/studies/{sid}/points",
            params={"filter": json.dumps({"params.x": {"min": 0.0}})},
        ).json()["points"]
    )
    assert 0 < expected < 30
    page.wait_for_function(
        "n => document.querySelector(\"#slices .slice[data-param='x']\").data[0].x.length === n",
        arg=expected,
    )
    # A new trial passing the filter shows without reload.
    body = {"params": {"x": 1.0, "lr": 0.01, "act": "relu"}, "values": {"fx": 1.0, "glr": 0.0}}
    assert api.post(f"/v1/studies/{sid}/trials", json=body).status_code == 201
    page.wait_for_function(
        "n => document.querySelector(\"#slices .slice[data-param='x']\").data[0].x.length === n",
        arg=expected + 1,
        timeout=5000,
    )
    watched.assert_clean()
