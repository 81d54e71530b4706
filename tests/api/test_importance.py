"""GET /v1/studies/{id}/importance: fANOVA parameter importance per objective, cached per study
revision, restricted by the trial filter; on SQLite and PostgreSQL."""

import json

import numpy as np
import pytest

from service import importance
from tests.conftest import FLOAT_X, FLOAT_Y, make_test_client, study_body

COLOR = {"type": "categorical", "name": "color", "choices": ["red", "green", "blue"]}
TWO = [{"name": "fx", "goal": "minimize"}, {"name": "gy", "goal": "maximize"}]


@pytest.fixture(params=["sqlite", "postgresql"])
def http(request):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    with make_test_client(url) as client:
        yield client


def _study(http, n):
    """``n`` completed trials at random points: ``fx`` depends on x only, ``gy`` on y only."""
    body = study_body(parameters=[FLOAT_X, FLOAT_Y, COLOR], objectives=TWO)
    sid = http.post("/v1/studies", json=body).json()["id"]
    rng = np.random.default_rng(1)
    for _ in range(n):
        _add(http, sid, *rng.uniform(-5, 5, 2).tolist(), str(rng.choice(COLOR["choices"])))
    return sid


def _add(http, sid, x, y, color="red"):
    values = {"fx": x * x, "gy": np.sin(y)}
    body = {"params": {"x": x, "y": y, "color": color}, "values": values}
    r = http.post(f"/v1/studies/{sid}/trials", json=body)
    assert r.status_code == 201, r.text


def _importance(http, sid, **query):
    r = http.get(f"/v1/studies/{sid}/importance", params=query)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_parameter_the_objective_depends_on_comes_first(http):
    sid = _study(http, 60)
    body = _importance(http, sid)
    assert body["objective"] == "fx" and body["method"] == "fanova"
    assert (body["matched"], body["used"]) == (60, 60)
    names = [p["name"] for p in body["importances"]]
    assert names[0] == "x" and sorted(names) == ["color", "x", "y"]
    shares = [p["importance"] for p in body["importances"]]
    assert shares[0] > 0.9 and sum(shares) == pytest.approx(1.0)
    assert _importance(http, sid, objective="gy")["importances"][0]["name"] == "y"
    # Reproducible: a fixed seed.
    assert _importance(http, sid, objective="gy") == _importance(http, sid, objective="gy")


def test_results_are_cached_until_a_tell_moves_the_revision(http, monkeypatch):
    sid = _study(http, 20)
    fits = []
    fit = importance.fanova_importances

    def counted(X, y, seed):
        fits.append(len(y))
        return fit(X, y, seed=seed)

    monkeypatch.setattr(importance, "fanova_importances", counted)
    first = _importance(http, sid)
    assert _importance(http, sid) == first and fits == [20]
    _add(http, sid, 1.0, 2.0)
    again = _importance(http, sid)
    assert fits == [20, 21] and again["revision"] > first["revision"] and again["used"] == 21
    # Each objective and each filter has its own entry.
    _importance(http, sid, objective="gy")
    assert fits == [20, 21, 21]


def test_the_filter_restricts_the_trials(http):
    sid = _study(http, 60)
    only_red = json.dumps({"params.color": {"in": ["red"]}, "params.x": {"min": 0.0}})
    body = _importance(http, sid, filter=only_red)
    assert 5 <= body["used"] < 30 and body["matched"] == body["used"]
    assert body["importances"][0]["name"] == "x"


def test_an_unknown_objective_is_a_validation_error(http):
    sid = _study(http, 6)
    r = http.get(f"/v1/studies/{sid}/importance", params={"objective": "nope"})
    assert r.status_code == 422
    assert r.json()["code"] == "validation_error" and "nope" in r.json()["detail"]
    assert http.get("/v1/studies/999999/importance").status_code == 404


def test_a_tiny_study_has_an_empty_result(http):
    sid = _study(http, 4)
    body = _importance(http, sid)
    assert body["importances"] == [] and body["matched"] == 4 and body["min_trials"] == 5
