"""The study page's engine panel in a real Chromium against a real two-worker server (SQLite
and PostgreSQL): the charts of a TuRBO-ENN, an LCBO and an mwgd study show the series of
``GET /v1/studies/{id}/engine``, the facts table its state, and a new ask shows live.
Screenshots go to test-artifacts/dashboard/."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.integration.browser import WatchedPage
from tests.integration.conftest import ON_POSTGRESQL, Server

pytestmark = [pytest.mark.integration, ON_POSTGRESQL]

PARAMETERS = [
    {"type": "float", "name": "x", "low": -5.0, "high": 5.0},
    {"type": "float", "name": "y", "low": -5.0, "high": 5.0},
]
Told = Callable[[dict], dict]


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def _study(api: httpx.Client, **fields: object) -> int:
    r = api.post("/v1/studies", json={"name": "engine", "parameters": PARAMETERS, **fields})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _rounds(api: httpx.Client, sid: int, counts: list[int], told: Told) -> None:
    """Ask batches of the given sizes and tell each trial ``told(params)`` (a tell body)."""
    for count in counts:
        r = api.post(f"/v1/studies/{sid}/ask", json={"count": count, "worker_id": "w1"})
        assert r.status_code == 200, r.text
        for t in r.json()["trials"]:
            url = f"/v1/studies/{sid}/trials/{t['number']}/tell"
            r = api.post(url, json=told(t["params"]))
            assert r.status_code == 200, r.text


def _open(watched: WatchedPage, server: Server, sid: int, chart: str) -> None:
    page = watched.page
    page.goto(f"{server.url}/dashboard/studies/{sid}")
    page.wait_for_selector("body[data-revision]")
    page.wait_for_selector(f"#engine-charts .engine-chart[data-key='{chart}'] .main-svg")


def _shown(watched: WatchedPage) -> dict[str, dict[str, str]]:
    """Per chart drawn: its series names and its number of points."""
    return watched.page.locator("#engine-charts .engine-chart").evaluate_all(
        "nodes => Object.fromEntries(nodes.map(n => "
        "[n.dataset.key, {series: n.dataset.series, points: n.dataset.points}]))"
    )


def _expected(panel: dict) -> dict[str, dict[str, str]]:
    return {
        c["key"]: {
            "series": " ".join(s["name"] for s in c["series"]),
            "points": str(sum(len(s["points"]) for s in c["series"])),
        }
        for c in panel["charts"]
    }


def _facts(watched: WatchedPage) -> dict[str, str]:
    return dict(
        watched.page.locator("#engine-facts tr").evaluate_all(
            "rows => rows.map(r => [r.dataset.name, r.querySelector('td').textContent])"
        )
    )


def test_a_turbo_enn_panel_shows_the_trust_region_and_follows_new_asks(server, api, watched):
    sid = _study(
        api,
        engine={
            "name": "turbo-enn",
            "options": {
                "n_initial": 4,
                "failure_tolerance": 1,
                "length_min": 0.3,
                "trust_region": "box",
            },
        },
    )
    _rounds(api, sid, [4, 2, 2, 2, 2], lambda p: {"values": {"value": 1.0}})
    _open(watched, server, sid, "length")
    panel = api.get(f"/v1/studies/{sid}/engine").json()
    assert _shown(watched) == _expected(panel)
    assert list(_shown(watched)) == ["length", "counters", "restarts", "time"]
    (length,) = [c["series"][0] for c in panel["charts"] if c["key"] == "length"]
    lengths = {v for _, v in length["points"]}
    assert {0.8, 0.4} <= lengths  # halved after a failure
    state = api.get(f"/v1/studies/{sid}").json()["engine_state"]
    facts = _facts(watched)
    assert facts["length"] == str(state["length"])
    assert facts["generation"] == str(state["generation"])
    assert watched.page.locator("#engine-name").text_content() == "turbo-enn"
    # Log axes for a length halved step by step.
    layout = watched.page.locator(".engine-chart[data-key='length']").evaluate(
        "n => n.layout.yaxis.type"
    )
    assert layout == "log"

    # A new ask and tell reaches the open page: one more point of engine time.
    before = int(_shown(watched)["time"]["points"])
    _rounds(api, sid, [1], lambda p: {"values": {"value": 1.0}})
    watched.page.wait_for_function(
        "n => Number(document.querySelector(\".engine-chart[data-key='time']\")"
        ".dataset.points) === n",
        arg=before + 1,
        timeout=5000,
    )
    watched.screenshot("study-engine-turbo-enn")
    watched.assert_clean()


def test_an_lcbo_panel_shows_phase_penalty_kkt_and_feasibility(server, api, watched):
    sid = _study(
        api,
        constraints=[{"name": "c", "op": "<=", "threshold": -2.0}],
        engine={"name": "lcbo", "options": {"n_initial": 6}},
    )

    def told(p: dict) -> dict:
        value = (p["x"] - 1) ** 2 + (p["y"] + 2) ** 2
        return {"values": {"value": value}, "constraints": {"c": p["x"] + p["y"]}}

    _rounds(api, sid, [6, 2, 2, 2], told)
    _open(watched, server, sid, "kkt")
    panel = api.get(f"/v1/studies/{sid}/engine").json()
    shown = _shown(watched)
    assert shown == _expected(panel)
    assert list(shown) == ["phase", "penalty", "kkt", "violation", "restarts", "time", "feasible"]
    assert shown["kkt"]["series"] == "kkt_residual gradient_std"
    # The phase is drawn as categories (its words), not numbers.
    phases = watched.page.locator(".engine-chart[data-key='phase']").evaluate("n => n.data[0].y")
    assert phases[0] == "initial" and set(phases[1:]) <= {"feasibility", "optimize"}
    state = api.get(f"/v1/studies/{sid}").json()["engine_state"]
    assert _facts(watched)["phase"] == state["phase"]
    watched.screenshot("study-engine-lcbo")
    watched.assert_clean()


def test_an_mwgd_panel_draws_its_particles_on_chosen_axes(server, api, watched):
    objectives = [{"name": "f1"}, {"name": "f2"}]
    sid = _study(
        api,
        objectives=objectives,
        engine={"name": "mwgd", "options": {"n_initial": 4, "n_particles": 32, "steps": 30}},
    )

    def told(p: dict) -> dict:
        x, y = p["x"], p["y"]
        return {"values": {"f1": x**2 + y**2, "f2": (x - 2) ** 2 + y**2}}

    _rounds(api, sid, [4, 3], told)
    _open(watched, server, sid, "gradnorm")
    page = watched.page
    page.wait_for_selector("#engine-particles .main-svg")
    plot = page.locator("#engine-particles .engine-chart")
    assert plot.evaluate("n => n.dataset.points") == "32"
    state = api.get(f"/v1/studies/{sid}").json()["engine_state"]
    xs = plot.evaluate("n => n.data[0].x")
    assert xs == pytest.approx([p[0] for p in state["particles"]], abs=1e-5)
    page.select_option("#particle-x", "1")  # draw y against y
    page.wait_for_function(
        "() => document.querySelector('#engine-particles .engine-chart')"
        ".layout.xaxis.title.text.startsWith('y')"
    )
    assert plot.evaluate("n => n.data[0].x") == pytest.approx(
        [p[1] for p in state["particles"]], abs=1e-5
    )
    watched.screenshot("study-engine-mwgd")
    watched.assert_clean()
