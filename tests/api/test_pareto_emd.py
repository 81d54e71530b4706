"""The ``emd`` curve of GET /v1/studies/{id}/pareto: the Pareto set's leave-one-out EMD
(``engines.metrics.loo_emd``) after each trial that changed the feasible front."""

import pytest

from service import pareto_emd
from tests.conftest import FLOAT_X, study_body

# Both minimized: every trial is on the front (x grows, -x falls).
OPPOSED = [{"name": "a"}, {"name": "b"}]


def _study(http, xs, objectives=OPPOSED):
    sid = http.post(
        "/v1/studies", json=study_body(parameters=[FLOAT_X], objectives=objectives)
    ).json()["id"]
    for x in xs:
        values = {o["name"]: x * (-1) ** i for i, o in enumerate(objectives)}
        r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": x}, "values": values})
        assert r.status_code == 201, r.text
    return sid


def test_the_emd_falls_as_the_front_fills_in(http):
    # x in [-5, 5], so x = 0, 1, 2, 0.5 are u = 0.5, 0.6, 0.7, 0.55 in the unit cube.
    sid = _study(http, [0.0, 1.0, 2.0, 0.5])
    emd = http.get(f"/v1/studies/{sid}/pareto").json()["emd"]
    # After trial 0 the front has one trial: no EMD. Then nearest neighbours 0.1 apart, then
    # 0.05, 0.05, 0.05 and 0.1 (mean 0.0625).
    assert [n for n, _ in emd] == [1, 2, 3]
    assert [v for _, v in emd] == pytest.approx([0.1, 0.1, 0.0625])
    best = http.get(f"/v1/studies/{sid}/best").json()
    assert best["pareto_set_loo_emd"] == pytest.approx(emd[-1][1])


def test_the_filter_and_the_work_bound_thin_the_curve(http, monkeypatch):
    sid = _study(http, [i / 10 for i in range(30)])
    full = http.get(f"/v1/studies/{sid}/pareto").json()["emd"]
    assert len(full) == 29
    filtered = http.get(
        f"/v1/studies/{sid}/pareto", params={"filter": '{"number": {"max": 9}}'}
    ).json()["emd"]
    assert filtered == full[:9]
    # Fronts of up to 30 trials, one dimension: the last front alone costs 900.
    monkeypatch.setattr(pareto_emd, "WORK", 1000)
    thinned = http.get(f"/v1/studies/{sid}/pareto").json()["emd"]
    assert thinned == [full[-1]]
    monkeypatch.setattr(pareto_emd, "WORK", 899)
    assert http.get(f"/v1/studies/{sid}/pareto").json()["emd"] == []


def test_one_objective_has_no_emd_curve(http):
    sid = _study(http, [0.0, 1.0], objectives=[{"name": "a"}])
    assert http.get(f"/v1/studies/{sid}/pareto").json()["emd"] == []
