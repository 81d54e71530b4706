"""The pom engine through the HTTP API: batches after the initial design, the POM score in the
details and the engine state, and the Pareto set's coverage on the best endpoint."""

from __future__ import annotations

import pytest

from tests.conftest import FLOAT_X, FLOAT_Y, SEGMENT_OBJECTIVES, segment_values, study_body

OPTIONS = {
    "n_initial": 4,
    "n_samples": 16,
    "pool_size": 256,
    "num_features": 128,
    "refine_points": 32,
}


def _ask_and_tell(http, sid: int, count: int) -> list[dict]:
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": count})
    assert r.status_code == 200, r.text
    trials = r.json()["trials"]
    for t in trials:
        url = f"/v1/studies/{sid}/trials/{t['number']}/tell"
        assert http.post(url, json={"values": segment_values(t["params"])}).status_code == 200
    return trials


def test_a_two_objective_pom_study_asks_distinct_batches_and_reports_coverage(http):
    body = study_body(
        parameters=[FLOAT_X, FLOAT_Y],
        objectives=SEGMENT_OBJECTIVES,
        engine={"name": "pom", "options": OPTIONS},
        seed=4,
    )
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    initial = _ask_and_tell(http, sid, 4)
    assert [t["details"]["source"] for t in initial] == ["sobol"] * 4

    for _ in range(2):
        batch = _ask_and_tell(http, sid, 4)
        assert [t["details"]["source"] for t in batch] == ["pom"] * 4
        assert len({(t["params"]["x"], t["params"]["y"]) for t in batch}) == 4
        score = batch[0]["details"]["pom"]
        assert score["log_score"] == pytest.approx(score["log_p_po"] + score["log_p_cov"])

    state = http.get(f"/v1/studies/{sid}").json()["engine_state"]
    assert state["last"]["n_observations"] == 8 and state["last"]["n_samples"] == 16

    # Two points of the true Pareto set (y = 0, 0 <= x <= 2), told as finished trials, so the
    # best endpoint has a Pareto set of at least two trials whatever the engine found.
    for x in (0.0, 2.0):
        params = {"x": x, "y": 0.0}
        r = http.post(
            f"/v1/studies/{sid}/trials", json={"params": params, "values": segment_values(params)}
        )
        assert r.status_code == 201, r.text
    best = http.get(f"/v1/studies/{sid}/best").json()
    assert {(0.0, 0.0), (2.0, 0.0)} <= {
        (t["params"]["x"], t["params"]["y"]) for t in best["trials"]
    }
    assert 0 <= best["pareto_set_loo_emd"] <= 1
    assert best["hypervolume"] > 0


def test_the_coverage_figure_by_hand_and_absent_for_one_objective(http):
    # No references: no hypervolume, but the coverage figure all the same.
    body = study_body(parameters=[FLOAT_X, FLOAT_Y], objectives=[{"name": "f1"}, {"name": "f2"}])
    sid = http.post("/v1/studies", json=body).json()["id"]
    points = [(-5.0, -5.0), (5.0, -5.0), (5.0, 5.0)]
    values = [(0.0, 2.0), (1.0, 1.0), (2.0, 0.0)]  # all three Pareto-optimal
    for (x, y), (f1, f2) in zip(points, values, strict=True):
        r = http.post(
            f"/v1/studies/{sid}/trials",
            json={"params": {"x": x, "y": y}, "values": {"f1": f1, "f2": f2}},
        )
        assert r.status_code == 201, r.text
    best = http.get(f"/v1/studies/{sid}/best").json()
    assert best["hypervolume"] is None
    # Unit-cube corners (0, 0), (1, 0), (1, 1): nearest others at 1, 1, 1; / sqrt(2).
    assert best["pareto_set_loo_emd"] == pytest.approx(2**-0.5)

    single = http.post("/v1/studies", json=study_body(name="one")).json()["id"]
    assert http.get(f"/v1/studies/{single}/best").json()["pareto_set_loo_emd"] is None
