"""GET /v1/studies/{id}/pareto, the dashboard's Pareto view: kinds of points under the
objectives' directions and constraints, the hypervolume over trial numbers, downsampling; on
SQLite and PostgreSQL."""

from itertools import pairwise

import pytest

from service import pareto
from tests.conftest import FLOAT_X, make_test_client, study_body

LOSS_ACC = [
    {"name": "loss", "goal": "minimize", "reference": 10.0},
    {"name": "acc", "goal": "maximize", "reference": 0.0},
]


@pytest.fixture(params=["sqlite", "postgresql"])
def http(request):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    with make_test_client(url) as client:
        yield client


def _study(http, objectives, **fields):
    body = study_body(parameters=[FLOAT_X], objectives=objectives, **fields)
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _completed(http, sid, x, values, constraints=None):
    body = {"params": {"x": x}, "values": values, "constraints": constraints or {}}
    r = http.post(f"/v1/studies/{sid}/trials", json=body)
    assert r.status_code == 201, r.text


def _pareto(http, sid, **query):
    r = http.get(f"/v1/studies/{sid}/pareto", params=query)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def constrained(http):
    sid = _study(http, LOSS_ACC, constraints=[{"name": "c", "op": "<=", "threshold": 0.0}])
    for i, (loss, acc, c) in enumerate(
        [(5.0, 5.0, -1.0), (3.0, 4.0, -1.0), (6.0, 4.0, -1.0), (1.0, 9.0, 1.0), (4.0, 6.0, -1.0)]
    ):
        _completed(http, sid, i / 10, {"loss": loss, "acc": acc}, {"c": c})
    number = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]["number"]
    http.post(f"/v1/studies/{sid}/trials/{number}/tell", json={"state": "failed"})
    return sid


def test_points_are_classed_under_the_objectives_directions_and_constraints(http, constrained):
    body = _pareto(http, constrained)
    assert body["objectives"] == ["loss", "acc"]
    assert body["goals"] == {"loss": "minimize", "acc": "maximize"}
    assert body["reference_point"] == {"loss": 10.0, "acc": 0.0}
    # Trial 4 (loss 4, acc 6) dominates trial 0 (5, 5) since acc is maximized; trial 3 would
    # dominate every other but violates its constraint; the failed trial 5 has no point.
    kinds = {p["number"]: p["kind"] for p in body["points"]}
    assert kinds == {
        0: "dominated",
        1: "non_dominated",
        2: "dominated",
        3: "infeasible",
        4: "non_dominated",
    }
    assert body["counts"] == {"non_dominated": 2, "dominated": 2, "infeasible": 1}
    assert not body["downsampled"]
    (four,) = [p for p in body["points"] if p["number"] == 4]
    assert four["values"] == {"loss": 4.0, "acc": 6.0} and four["params"] == {"x": 0.4}


def test_the_hypervolume_grows_where_the_feasible_front_changes(http, constrained):
    # Areas to the reference (10, 0): {(5, 5)} 25; with (3, 4) 33; (4, 6) replaces (5, 5): 40.
    assert _pareto(http, constrained)["hypervolume"] == [[0, 25.0], [1, 33.0], [4, 40.0]]
    assert http.get(f"/v1/studies/{constrained}/best").json()["hypervolume"] == 40.0


def test_without_a_reference_point_there_is_no_hypervolume(http):
    objectives = [{"name": n} for n in ("a", "b", "c")]
    sid = _study(http, objectives)
    for i, point in enumerate([(1.0, 2.0, 3.0), (3.0, 2.0, 1.0), (3.0, 3.0, 3.0)]):
        _completed(http, sid, float(i), dict(zip("abc", point, strict=True)))
    body = _pareto(http, sid)
    assert body["reference_point"] is None and body["hypervolume"] == []
    assert [p["kind"] for p in body["points"]] == ["non_dominated", "non_dominated", "dominated"]


def test_a_large_study_keeps_every_non_dominated_point_and_at_most_max_points_others(http):
    sid = _study(http, [{"name": "a"}, {"name": "b"}])
    for i in range(300):
        k = i // 15
        on_front = i % 15 == 0
        a, b = (float(k), 20.0 - k) if on_front else (k + 100.0, 120.0 - k)
        _completed(http, sid, 0.0, {"a": a, "b": b})
    body = _pareto(http, sid, max_points=30)
    assert body["downsampled"]
    assert body["counts"] == {"non_dominated": 20, "dominated": 280, "infeasible": 0}
    front = [p["number"] for p in body["points"] if p["kind"] == "non_dominated"]
    others = [p["number"] for p in body["points"] if p["kind"] == "dominated"]
    assert front == list(range(0, 300, 15))
    assert len(others) == 30 and others[0] == 1 and others[-1] == 299


def test_pareto_of_a_missing_study_is_404(http):
    r = http.get("/v1/studies/999/pareto")
    assert r.status_code == 404 and r.json()["code"] == "not_found"


def test_max_points_is_bounded(http, constrained):
    r = http.get(f"/v1/studies/{constrained}/pareto", params={"max_points": 10**6})
    assert r.status_code == 422 and r.json()["code"] == "validation_error"


def _three_objective_front(http, size):
    """A study of three minimized objectives whose trials all lie on the plane a + b + c = 1,
    so that every one is non-dominated."""
    sid = _study(http, [{"name": n, "reference": 1.0} for n in "abc"])
    for i in range(size):
        a, b = (i % 19) / 19, (i // 19) / 19
        _completed(http, sid, 0.0, {"a": a / 2, "b": b / 2, "c": 1 - (a + b) / 2})
    return sid


def test_a_long_three_objective_front_gets_fewer_hypervolume_steps(http, monkeypatch):
    # A hundredth of the budget, so that a short study shows the thinning.
    monkeypatch.setattr(pareto, "HYPERVOLUME_WORK_3", 100_000)
    body = _pareto(http, _three_objective_front(http, 100))
    assert body["counts"]["non_dominated"] == 100
    steps = body["hypervolume"]
    assert 1 < len(steps) < 100 and steps[0][0] == 0 and steps[-1][0] == 99
    assert all(v < w for (_, v), (_, w) in pairwise(steps))


def test_a_three_objective_front_too_long_to_compute_gets_no_hypervolume(http, monkeypatch):
    sid = _three_objective_front(http, 330)
    # 330 points are well within the budget of the three-objective sweep (thousands).
    steps = _pareto(http, sid)["hypervolume"]
    assert steps[-1] == [
        329,
        pytest.approx(http.get(f"/v1/studies/{sid}/best").json()["hypervolume"]),
    ]
    monkeypatch.setattr(pareto, "HYPERVOLUME_WORK_3", 100_000)
    body = _pareto(http, sid)
    assert body["counts"]["non_dominated"] == 330 and body["hypervolume"] == []
