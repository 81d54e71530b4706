"""The turbo-enn engine through the HTTP API and the client."""

from __future__ import annotations

import pytest

from tests.conftest import FLOAT_X, FLOAT_Y, study_body


@pytest.mark.parametrize("region", ["cma", "box"])
def test_a_turbo_enn_study_runs_through_the_client(client, region):
    study = client.create_study(
        "enn",
        [FLOAT_X, FLOAT_Y],
        engine={"name": "turbo-enn", "options": {"n_initial": 6, "trust_region": region}},
        seed=2,
    )
    study.optimize(
        lambda p: (p["x"] - 1) ** 2 + (p["y"] + 2) ** 2, n_trials=60, n_workers=2, progress=False
    )
    info = study.refresh()
    assert info.trial_counts == {"completed": 60}
    trials = list(study.trials())
    (best,) = study.best().trials
    assert best.values is not None and best.values["value"] < 0.5
    state = info.engine_state
    assert {"generation", "tr_start", "n_seen"} <= set(state)
    if region == "cma":
        # Drawn from the CMA distribution until 6 trials are told, then pre-selected by ENN.
        selections = [t.details["selection"] for t in trials]
        assert selections[:6] == ["sample"] * 6 and selections.count("enn-mean") >= 40
        assert state["cma"]["updates"] >= 8 and state["cma"]["sigma"] < 1 / 6
        return
    sources = [t.details["source"] for t in trials]
    assert sources[:6] == ["sobol"] * 6 and sources.count("turbo-enn") >= 40
    assert {"length", "successes", "failures"} <= set(state) and state["cma"] is None
    assert 0 < state["length"] <= 1.6


def test_a_batch_ask_returns_distinct_trust_region_points(http):
    body = study_body(engine={"name": "turbo-enn", "options": {"n_initial": 4}}, seed=5)
    sid = http.post("/v1/studies", json=body).json()["id"]
    for _ in range(2):
        trials = http.post(f"/v1/studies/{sid}/ask", json={"count": 2}).json()["trials"]
        for t in trials:
            value = t["params"]["x"] ** 2 + t["params"]["y"] ** 2
            url = f"/v1/studies/{sid}/trials/{t['number']}/tell"
            assert http.post(url, json={"values": {"value": value}}).status_code == 200
    batch = http.post(f"/v1/studies/{sid}/ask", json={"count": 8}).json()["trials"]
    assert [t["details"]["source"] for t in batch] == ["turbo-enn"] * 8
    assert len({(t["params"]["x"], t["params"]["y"]) for t in batch}) == 8


def test_turbo_enn_refuses_two_objectives_at_creation(http):
    body = study_body(engine={"name": "turbo-enn"}, objectives=[{"name": "a"}, {"name": "b"}])
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 422
    assert r.json()["code"] == "engine_unsupported"


def test_bad_turbo_enn_options_are_422(http):
    bad = ({"k_neighbors": 0}, {"noisy": "yes"}, {"length_min": 5.0}, {"foo": 1})
    for options in (*bad, {"trust_region": "ball"}, {"preselect": 0}, {"population": 2}):
        r = http.post(
            "/v1/studies", json=study_body(engine={"name": "turbo-enn", "options": options})
        )
        assert r.status_code == 422 and r.json()["code"] == "invalid_engine", options
