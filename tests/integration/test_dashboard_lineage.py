"""The population view of a PBT study in a real Chromium against a real two-worker server
(SQLite and PostgreSQL): the lineage tree drawn is the parent relation of ``GET
.../trials/{n}/lineage`` for every unit, the schedules of every member and of the best one are
drawn, the checkpoint table is ``GET .../checkpoints``, and all of it follows new tells live.
Screenshot: test-artifacts/dashboard/study-pbt.png."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from tests.integration.browser import WatchedPage
from tests.integration.conftest import ON_POSTGRESQL
from tests.integration.test_dashboard import api as api

pytestmark = [pytest.mark.integration, ON_POSTGRESQL]

PARAMETERS = [
    {"type": "float", "name": "lr", "low": 0.001, "high": 1.0, "log": True},
    {"type": "categorical", "name": "act", "choices": ["relu", "tanh"]},
]
#: Four members trained to step 40 in segments of 10 (an exploit may skip a segment: it
#: continues from the step of the checkpoint it copies).
ENGINE = {"name": "pbt", "options": {"t_max": 40, "population_size": 4, "interval": 10}}


def _study(api: httpx.Client) -> int:
    body = {
        "name": "pbt-lineage",
        "parameters": PARAMETERS,
        "objectives": [{"name": "accuracy", "goal": "maximize"}],
        "engine": ENGINE,
        "seed": 3,
    }
    r = api.post("/v1/studies", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _ask(api: httpx.Client, sid: int, worker: str) -> dict[str, Any]:
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker_id": worker})
    assert r.status_code == 200, r.text
    return r.json()


def _work(api: httpx.Client, sid: int, trial: dict[str, Any], saved: dict[str, float]) -> None:
    """Trains a unit as a worker would, on a synthetic curve whose progress the checkpoints
    keep by reference, and tells it."""
    unit, params = trial["unit"], trial["params"]
    progress = 0.0 if unit["start"]["kind"] == "fresh" else saved[unit["start"]["checkpoint"]]
    rate = math.exp(-((math.log10(params["lr"]) + 1.0) ** 2))
    rate *= 1.2 if params["act"] == "tanh" else 1.0
    progress += (unit["to_step"] - unit["from_step"]) * rate
    saved[ref := f"ckpt/{trial['number']}"] = progress
    body = {"values": {"accuracy": 1 - math.exp(-progress / 20)}, "checkpoint": ref}
    r = api.post(f"/v1/studies/{sid}/trials/{trial['number']}/tell", json=body)
    assert r.status_code == 200, r.text


def _train(api: httpx.Client, sid: int, units: int, saved: dict[str, float]) -> int:
    """Trains up to ``units`` units, until the study is finished or has nothing to hand out;
    returns how many it trained."""
    done = 0
    while done < units:
        answer = _ask(api, sid, f"w{done % 2}")
        if not answer["trials"]:
            break
        _work(api, sid, answer["trials"][0], saved)
        done += 1
    return done


def _parents(api: httpx.Client, sid: int) -> list[list[int]]:
    """``[parent, unit]`` of every unit that loaded a checkpoint, from each unit's lineage."""
    edges = []
    r = api.get(f"/v1/studies/{sid}/trials")
    for trial in r.json()["data"]:
        r = api.get(f"/v1/studies/{sid}/trials/{trial['number']}/lineage")
        assert r.status_code == 200, r.text
        segments = r.json()["segments"]
        assert segments[-1]["trial"] == trial["number"]
        if len(segments) > 1:
            edges.append([segments[-2]["trial"], trial["number"]])
    return sorted(edges, key=lambda e: e[1])


def _drawn(watched: WatchedPage) -> dict[str, Any]:
    return watched.page.evaluate(
        """() => {
          const tree = document.getElementById("lineage-tree");
          const trace = (node, name) => node.data.find((t) => t.name.startsWith(name));
          const copies = trace(tree, "copied checkpoint");
          return {
            edges: JSON.parse(tree.dataset.edges),
            best: tree.dataset.best,
            copies: copies.x.filter((v) => v !== null).length / 2,
            exploits: (trace(tree, "exploit") || { x: [] }).x.length,
            bestLineage: (trace(tree, "best unit's lineage") || { x: [] }).x.length,
            schedules: document.getElementById("schedules").data.map((t) => [t.name, t.yaxis]),
            checkpoints: [...document.querySelectorAll("#checkpoints tbody tr")].map((r) => [
              Number(r.dataset.number), r.children[1].textContent, r.dataset.kind]),
          };
        }"""
    )


def _expected_checkpoints(api: httpx.Client, sid: int) -> set[tuple[int, str, str]]:
    r = api.get(f"/v1/studies/{sid}/checkpoints")
    assert r.status_code == 200, r.text
    return {
        (c["trial"], c["checkpoint"], kind)
        for kind in ("pinned", "releasable")
        for c in r.json()[kind]
    }


def _shows_revision(watched: WatchedPage, api: httpx.Client, sid: int) -> None:
    revision = api.get(f"/v1/studies/{sid}").json()["revision"]
    watched.page.wait_for_selector(f"body[data-revision='{revision}']", timeout=5000)


def test_the_lineage_tree_is_the_units_lineage_and_follows_new_units(server, api, watched):
    sid = _study(api)
    saved: dict[str, float] = {}
    assert _train(api, sid, 9, saved) == 9  # generations 0 and 1 and the start of 2
    (slow,) = _ask(api, sid, "slow")["trials"]  # a unit still training
    page = watched.page
    page.goto(f"{server.url}/dashboard/studies/{sid}")
    page.wait_for_selector("#population-view:not([hidden]) #lineage-tree .main-svg")
    _shows_revision(watched, api, sid)
    drawn = _drawn(watched)
    assert drawn["edges"] == _parents(api, sid) and len(drawn["edges"]) == 10 - 4
    assert drawn["edges"][-1][1] == slow["number"]

    # The rest of the study, told while the page is open, shows without a reload.
    assert _train(api, sid, 100, saved) > 0
    _work(api, sid, slow, saved)
    _train(api, sid, 100, saved)
    assert _ask(api, sid, "w0")["finished"]
    _shows_revision(watched, api, sid)
    drawn = _drawn(watched)
    units = api.get(f"/v1/studies/{sid}/trials").json()["data"]
    assert drawn["edges"] == _parents(api, sid) and len(drawn["edges"]) == len(units) - 4
    # Exploits (a copy of another member's checkpoint) are marked, and drawn as edges between
    # members.
    exploits = [u for u in units if u["unit"]["reason"] == "exploit"]
    assert exploits and drawn["exploits"] == drawn["copies"] == len(exploits)
    best = api.get(f"/v1/studies/{sid}/best/schedule").json()
    assert drawn["best"] == str(best["trial"]) and drawn["bestLineage"] == 2 * len(best["segments"])
    # One schedule per hyperparameter: every member's and the best member's.
    for axis in ("y", "y2"):
        names = sorted(name for name, y in drawn["schedules"] if y == axis)
        assert names == ["best member", *(f"member {m}" for m in range(4))]
    assert len(drawn["checkpoints"]) == len(units)
    assert set(map(tuple, drawn["checkpoints"])) == _expected_checkpoints(api, sid)
    assert (
        page.locator("#checkpoints-note")
        .inner_text()
        .startswith(f"{sum(k == 'pinned' for _, _, k in drawn['checkpoints'])} pinned")
    )
    watched.screenshot("study-pbt")
    watched.assert_clean()


def test_a_study_of_another_engine_has_no_population_view(server, api, watched):
    r = api.post("/v1/studies", json={"name": "plain", "parameters": PARAMETERS})
    sid = r.json()["id"]
    watched.page.goto(f"{server.url}/dashboard/studies/{sid}")
    watched.page.wait_for_selector("body[data-revision]")
    assert watched.page.locator("#population-view").is_hidden()
    watched.assert_clean()
