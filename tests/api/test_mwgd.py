"""The mwgd engine through the HTTP API and the client: a two-objective study asks diverse
batches from its particles, keeps them in the engine state and respects pending trials."""

from __future__ import annotations

import numpy as np

from tests.conftest import FLOAT_X, FLOAT_Y, SEGMENT_OBJECTIVES, segment_values, study_body

OPTIONS = {"n_initial": 6, "n_particles": 32, "steps": 60}


def test_a_two_objective_mwgd_study_asks_batches_near_the_pareto_set(client):
    study = client.create_study(
        "mwgd-demo",
        [FLOAT_X, FLOAT_Y],
        objectives=SEGMENT_OBJECTIVES,
        engine={"name": "mwgd", "options": OPTIONS},
        seed=2,
    )
    for t in study.ask(count=6):
        study.tell(t.number, segment_values(t.params))
    distances = []
    for _ in range(2):
        batch = study.ask(count=4)
        assert [t.details["source"] for t in batch] == ["mwgd"] * 4
        assert len({(t.params["x"], t.params["y"]) for t in batch}) == 4
        for t in batch:
            # The Pareto set is the segment y = 0, 0 <= x <= 2 in a [-5, 5]^2 box.
            x, y = t.params["x"], t.params["y"]
            distances.append(np.hypot(x - min(max(x, 0.0), 2.0), y))
            study.tell(t.number, segment_values(t.params))
    assert np.median(distances) < 1.0  # a random point is about 3 away
    state = study.refresh().engine_state
    assert np.shape(state["particles"]) == (32, 2)
    assert state["last"]["n_observations"] == 10 and state["last"]["steps"] == 60
    best = study.best()
    assert len(best.trials) >= 2 and best.hypervolume is not None and best.hypervolume > 0


def test_pending_trials_are_not_asked_twice(http):
    body = study_body(
        parameters=[FLOAT_X, FLOAT_Y],
        objectives=SEGMENT_OBJECTIVES,
        engine={"name": "mwgd", "options": {**OPTIONS, "n_initial": 4}},
        seed=5,
    )
    sid = http.post("/v1/studies", json=body).json()["id"]
    for t in http.post(f"/v1/studies/{sid}/ask", json={"count": 4}).json()["trials"]:
        url = f"/v1/studies/{sid}/trials/{t['number']}/tell"
        assert http.post(url, json={"values": segment_values(t["params"])}).status_code == 200
    first = http.post(f"/v1/studies/{sid}/ask", json={"count": 3}).json()["trials"]
    second = http.post(f"/v1/studies/{sid}/ask", json={"count": 3}).json()["trials"]
    points = {(t["params"]["x"], t["params"]["y"]) for t in first + second}
    assert len(points) == 6
    assert all(t["details"]["source"] == "mwgd" for t in first + second)


def test_bad_mwgd_options_are_refused_at_creation(http):
    body = study_body(
        objectives=SEGMENT_OBJECTIVES, engine={"name": "mwgd", "options": {"eta": -1}}
    )
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 422 and r.json()["code"] == "invalid_engine"
