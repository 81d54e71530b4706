"""The lcbo engine through the HTTP API and the client."""

from __future__ import annotations

import pytest

from tests.conftest import FLOAT_X, FLOAT_Y, study_body


def _disk(p: dict) -> dict:
    """Minimize ``(x - 1)^2 + (y + 2)^2`` subject to ``x + y <= -2`` (active at the minimum,
    (0.5, -2.5), value 0.5) and ``x <= 4``."""
    return {"value": (p["x"] - 1) ** 2 + (p["y"] + 2) ** 2, "sum": p["x"] + p["y"], "x": p["x"]}


def test_a_constrained_lcbo_study_runs_through_the_client(client):
    study = client.create_study(
        "lcbo",
        [FLOAT_X, FLOAT_Y],
        constraints=[
            {"name": "sum", "op": "<=", "threshold": -2.0},
            {"name": "x", "op": "<=", "threshold": 4.0},
        ],
        engine={"name": "lcbo", "options": {"n_initial": 6}},
        seed=3,
    )
    crashes = iter(range(1000))

    def evaluate(p: dict) -> dict:
        if next(crashes) == 10:  # one evaluation fails; the study goes on
            raise RuntimeError("simulator crashed")
        return _disk(p)

    study.optimize(evaluate, n_trials=36, progress=False, catch=(RuntimeError,))
    info = study.refresh()
    assert info.trial_counts == {"completed": 35, "failed": 1}
    sources = [t.details.get("source") for t in study.trials()]
    assert sources[:6] == ["sobol"] * 6 and sources.count("lcbo") >= 25
    best = study.best()
    assert best.feasible_found and best.least_violating is None
    (trial,) = best.trials
    assert trial.feasible and trial.values is not None and trial.values["value"] < 1.0
    state = info.engine_state
    assert state["phase"] == "optimize" and state["iterate_value"] == trial.values["value"]
    assert state["penalty"] >= 10 and state["kkt_residual"] is not None
    assert {"iterate_row", "generation", "stall", "gradient_std"} <= set(state)
    assert state["n_failed_seen"] == 1
    # A trial that cannot be evaluated is told infeasible: the engine goes on, counts it, and
    # the study's best is unchanged.
    (trial,) = study.ask()
    study.fail(trial.number, "cannot be built", infeasible=True)
    (after,) = study.ask()
    assert after.details["source"] == "lcbo"
    assert study.refresh().engine_state["n_failed_seen"] == 2
    assert study.best().trials[0].number == best.trials[0].number


def test_best_gives_the_least_violating_trial_while_none_is_feasible(client):
    study = client.create_study(
        "impossible",
        [FLOAT_X, FLOAT_Y],
        constraints=[{"name": "x", "op": ">=", "threshold": 6.0}],  # x <= 5 in the space
        engine={"name": "lcbo", "options": {"n_initial": 4}},
        seed=1,
    )
    study.optimize(lambda p: {"value": p["y"] ** 2, "x": p["x"]}, n_trials=12, progress=False)
    best = study.best()
    assert best.trials == [] and not best.feasible_found
    assert best.least_violating is not None and best.total_violation is not None
    told = [t for t in study.trials() if t.constraints]
    assert best.total_violation == min(6.0 - t.constraints["x"] for t in told)
    # The least violation possible is 1 (x = 5, the bound): the engine minimized it there.
    assert best.total_violation == pytest.approx(1.0, abs=1e-6)
    assert study.refresh().engine_state["phase"] == "feasibility"


def test_lcbo_refuses_two_objectives_at_creation(http):
    body = study_body(engine={"name": "lcbo"}, objectives=[{"name": "a"}, {"name": "b"}])
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 422 and r.json()["code"] == "engine_unsupported"


def test_bad_lcbo_options_are_422(http):
    for options in ({"step": 2.0}, {"local_points": 1}, {"beta": "high"}, {"foo": 1}):
        r = http.post("/v1/studies", json=study_body(engine={"name": "lcbo", "options": options}))
        assert r.status_code == 422 and r.json()["code"] == "invalid_engine", options
