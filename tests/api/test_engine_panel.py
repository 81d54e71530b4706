"""The engine panel, ``GET /v1/studies/{id}/engine``: each engine's own quantities by trial
number, from the details of the trials it proposed, its state as facts, and the engine time of
every ask; downsampled for long studies."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from client import AsyncClient
from client.models import StudyEngine
from service.app import create_app
from service.settings import Settings
from tests.api.test_pbt import CurveWorker, _pbt
from tests.conftest import FLOAT_X, FLOAT_Y, SEGMENT_OBJECTIVES, segment_values, study_body


def _sphere(p: dict) -> dict:
    return {"value": (p["x"] - 1) ** 2 + (p["y"] + 2) ** 2}


def _run(http, body: dict, rounds: list[int], values) -> int:
    """Create the study, then ask and tell batches of the given sizes; its id."""
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    for count in rounds:
        r = http.post(f"/v1/studies/{sid}/ask", json={"count": count})
        assert r.status_code == 200, r.text
        for t in r.json()["trials"]:
            told = values(t["params"])
            url = f"/v1/studies/{sid}/trials/{t['number']}/tell"
            r = http.post(url, json={"values": told["values"], "constraints": told["c"]})
            assert r.status_code == 200, r.text
    return sid


def _panel(http, sid: int, **query) -> dict:
    r = http.get(f"/v1/studies/{sid}/engine", params=query)
    assert r.status_code == 200, r.text
    return r.json()


def _series(panel: dict) -> dict[str, list]:
    return {s["name"]: s["points"] for c in panel["charts"] for s in c["series"]}


def _facts(panel: dict) -> dict:
    return {f["name"]: f["value"] for f in panel["facts"]}


def _trials(http, sid: int) -> list[dict]:
    return http.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()["data"]


def test_turbo_enn_shows_the_trust_region_shrinking_and_restarting(client):
    study = client.create_study(
        "turbo",
        [FLOAT_X, FLOAT_Y],
        # Every failure halves the region and below 0.3 it restarts: 0.8, 0.4, restart.
        engine={
            "name": "turbo-enn",
            "options": {
                "n_initial": 4,
                "failure_tolerance": 1,
                "length_min": 0.3,
                "trust_region": "box",
            },
        },
        seed=1,
    )
    study.optimize(lambda p: {"value": 1.0}, n_trials=16, progress=False)
    panel = study.engine_panel()
    assert panel.engine == "turbo-enn" and panel.proposed == 16 and not panel.downsampled
    charts = [c.key for c in panel.charts]
    assert charts == ["length", "counters", "restarts", "time"]
    series = {s.name: dict(s.points) for c in panel.charts for s in c.series}
    details = {t.number: t.details for t in study.trials()}
    region = [n for n, d in details.items() if d["source"] == "turbo-enn"]
    assert sorted(series["length"]) == region
    assert all(series["length"][n] == details[n]["length"] for n in region)
    assert {0.8, 0.4} <= set(series["length"].values())
    assert max(series["generation"].values()) >= 1  # restarted
    assert sorted(series["ask_seconds"]) == list(range(16))
    facts = {f.name: f.value for f in panel.facts}
    state = study.refresh().engine_state
    assert facts["length"] == state["length"] and facts["generation"] == state["generation"]
    assert facts["slowest ask (s)"] >= facts["mean ask (s)"] > 0
    assert "seed" not in facts and panel.particles is None


def test_turbo_enn_shows_the_cma_regions_step_size(client):
    study = client.create_study(
        "turbo-cma", [FLOAT_X, FLOAT_Y], engine={"name": "turbo-enn"}, seed=1
    )
    study.optimize(_sphere, n_trials=30, progress=False)
    panel = study.engine_panel()
    assert [c.key for c in panel.charts] == ["sigma", "restarts", "time"]
    series = {s.name: dict(s.points) for c in panel.charts for s in c.series}
    details = {t.number: t.details for t in study.trials()}
    assert series["sigma"] == {n: d["sigma"] for n, d in details.items()}
    assert len(set(series["sigma"].values())) > 1  # the step adapts
    facts = {f.name: f.value for f in panel.facts}
    state = study.refresh().engine_state
    assert facts["cma.sigma"] == state["cma"]["sigma"]
    assert facts["cma.updates"] == state["cma"]["updates"] > 0


def test_lcbo_shows_phase_penalty_kkt_residual_and_feasibility(http):
    body = study_body(
        constraints=[{"name": "c", "op": "<=", "threshold": -2.0}],
        engine={"name": "lcbo", "options": {"n_initial": 6}},
        seed=3,
    )

    def told(p: dict) -> dict:
        return {"values": _sphere(p), "c": {"c": p["x"] + p["y"]}}

    sid = _run(http, body, [6, 2, 2, 2], told)
    panel = _panel(http, sid)
    assert panel["engine"] == "lcbo"
    charts = [c["key"] for c in panel["charts"]]
    assert charts == ["phase", "penalty", "kkt", "violation", "restarts", "time", "feasible"]
    assert {c["key"]: c["log_y"] for c in panel["charts"]}["penalty"] is True
    series = _series(panel)
    trials = _trials(http, sid)
    model = [t["number"] for t in trials if t["details"]["source"] == "lcbo"]
    assert model and [n for n, _ in series["penalty"]] == model
    assert all(v >= 10.0 for _, v in series["penalty"])
    assert all(v > 0 for _, v in series["kkt_residual"])
    phases = [v for _, v in series["phase"]]
    assert phases[0] == "initial" and set(phases[1:]) <= {"feasibility", "optimize"}
    # The feasible share of completed trials, ending at the study's share.
    feasible = [t["feasible"] for t in trials]
    last_number, last_share = series["feasible_share"][-1]
    assert last_number == trials[-1]["number"]
    assert last_share == pytest.approx(sum(feasible) / len(feasible))
    facts = _facts(panel)
    assert facts["phase"] in ("feasibility", "optimize") and facts["penalty"] >= 10.0
    assert "hyperparameters" not in facts  # bookkeeping, not shown


def test_pom_shows_each_points_ppo_and_the_batch_score(http):
    body = study_body(
        objectives=SEGMENT_OBJECTIVES,
        engine={
            "name": "pom",
            "options": {
                "n_initial": 4,
                "n_samples": 16,
                "pool_size": 256,
                "num_features": 128,
                "refine_points": 32,
            },
        },
        seed=4,
    )
    sid = _run(http, body, [4, 3, 3], lambda p: {"values": segment_values(p), "c": {}})
    panel = _panel(http, sid)
    assert [c["key"] for c in panel["charts"]] == ["ppo", "score", "emd", "time"]
    series = _series(panel)
    assert len(series["ppo"]) == 6 and all(0 <= v <= 1 for _, v in series["ppo"])
    score = {n: v for n, v in series["log_score"]}
    parts = zip(series["log_p_po"], series["log_p_cov"], strict=True)
    for (n, po), (_, cov) in parts:
        assert score[n] == pytest.approx(po + cov)  # lambda_coverage is 1 by default
    assert _facts(panel)["last.n_samples"] == 16


def test_mwgd_shows_gradnorm_and_its_last_particles(http):
    body = study_body(
        objectives=SEGMENT_OBJECTIVES,
        engine={"name": "mwgd", "options": {"n_initial": 4, "n_particles": 32, "steps": 30}},
        seed=2,
    )
    sid = _run(http, body, [4, 3, 3], lambda p: {"values": segment_values(p), "c": {}})
    panel = _panel(http, sid)
    assert [c["key"] for c in panel["charts"]][:2] == ["gradnorm", "hvi"]
    series = _series(panel)
    assert len(series["grad_norm_first"]) == 6 and len(series["grad_norm_last"]) == 6
    assert all(v > 0 for _, v in series["grad_norm_first"])
    particles = panel["particles"]
    state = http.get(f"/v1/studies/{sid}").json()["engine_state"]
    assert particles["axes"] == ["x", "y"] and len(particles["points"]) == 32
    assert particles["points"][0] == pytest.approx(state["particles"][0], abs=1e-5)
    assert _facts(panel)["last.steps"] == 30


def test_gp_shows_each_models_lengthscales_per_parameter(http):
    body = study_body(
        constraints=[{"name": "c", "op": "<=", "threshold": 0.0}],
        engine={"name": "gp", "options": {"n_initial": 4, "num_restarts": 2, "raw_samples": 32}},
        seed=5,
    )

    def told(p: dict) -> dict:
        return {"values": _sphere(p), "c": {"c": p["y"]}}

    sid = _run(http, body, [4, 1, 1], told)
    panel = _panel(http, sid)
    charts = {c["key"]: c for c in panel["charts"]}
    assert list(charts) == ["ls.value", "ls.c", "time", "feasible"]
    assert charts["ls.value"]["title"] == "GP lengthscales of value"
    assert [s["label"] for s in charts["ls.c"]["series"]] == ["x", "y"]
    trials = {t["number"]: t["details"] for t in _trials(http, sid)}
    assert _facts(panel)["lengthscale.c.y"] == trials[5]["lengthscales"][1][1]
    for output, chart in enumerate(("ls.value", "ls.c")):
        for j, s in enumerate(charts[chart]["series"]):
            assert [n for n, _ in s["points"]] == [4, 5]
            for n, v in s["points"]:
                assert v == trials[n]["lengthscales"][output][j] > 0


def test_random_shows_the_time_of_every_ask_and_no_user_trial(http):
    body = study_body()
    sid = _run(http, body, [3, 2], lambda p: {"values": _sphere(p), "c": {}})
    r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 0.0, "y": 0.0}})
    assert r.status_code == 201, r.text
    panel = _panel(http, sid)
    assert panel["proposed"] == 5 and [c["key"] for c in panel["charts"]] == ["time"]
    times = _series(panel)["ask_seconds"]
    assert [n for n, _ in times] == [0, 1, 2, 3, 4]
    # The trials of one ask share its time; the details keep it for every trial.
    trials = _trials(http, sid)
    assert [t["details"]["ask_seconds"] for t in trials[:5]] == [v for _, v in times]
    assert times[0][1] == times[2][1] and "ask_seconds" not in trials[5]["details"]
    assert _facts(panel)["last ask (s)"] == times[-1][1]


def test_a_long_series_is_downsampled_keeping_its_extremes(http):
    sid = _run(http, study_body(), [1] * 60, lambda p: {"values": _sphere(p), "c": {}})
    full = _series(_panel(http, sid))["ask_seconds"]
    panel = _panel(http, sid, max_points=10)
    thin = _series(panel)["ask_seconds"]
    assert panel["downsampled"] and len(thin) <= 11 and thin[-1] == full[-1]
    values = [v for _, v in full]
    assert max(values) in [v for _, v in thin] and min(values) in [v for _, v in thin]
    assert not _panel(http, sid)["downsampled"]


def test_unknown_study_and_bad_max_points_are_problems(http):
    r = http.get("/v1/studies/999/engine")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    sid = _run(http, study_body(), [1], lambda p: {"values": _sphere(p), "c": {}})
    r = http.get(f"/v1/studies/{sid}/engine", params={"max_points": 5})
    assert r.status_code == 422 and r.json()["code"] == "validation_error"
    assert math.isfinite(_panel(http, sid)["facts"][0]["value"])


def test_the_async_client_reads_the_panel_too(sqlite_url):
    async def main() -> StudyEngine:
        app = create_app(Settings(database_url=sqlite_url))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with AsyncClient("http://testserver", transport=transport, retries=0) as c:
                study = await c.create_study("async", [FLOAT_X, FLOAT_Y], seed=1)
                await study.optimize(_sphere, n_trials=3, progress=False)
                return await study.engine_panel(max_points=10)

    panel = asyncio.run(main())
    assert panel.engine == "random" and panel.proposed == 3
    assert [c.key for c in panel.charts] == ["time"] and len(panel.charts[0].series[0].points) == 3


def test_a_pbt_study_shows_its_time_per_ask_and_its_state(client):
    study = _pbt(client)
    units = study.train(CurveWorker(study), worker_id="w")
    panel = study.engine_panel()
    assert panel.engine == "pbt" and panel.proposed == units >= 6
    assert [c.key for c in panel.charts] == ["time"]
    facts = {f.name: f.value for f in panel.facts}
    state = study.refresh().engine_state
    for name, value in state.items():
        if isinstance(value, bool | int | float | str) and name not in ("version", "seed"):
            assert facts[name] == value
