"""Engine work caps over HTTP (issue 21): refused with a stable code before any engine work."""

import pytest

from engines.registry import engine_class
from tests.conftest import study_body


def _floats(d):
    return [{"type": "float", "name": f"x{i}", "low": 0, "high": 1} for i in range(d)]


def _problem(r, code):
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["code"] == code
    return body["detail"]


@pytest.fixture
def engine_must_not_run(monkeypatch):
    """Every engine's suggest fails: a refused request never reaches it."""

    def fail(*args, **kwargs):
        raise AssertionError("the engine ran")

    for name in ("gp", "random", "pom"):
        monkeypatch.setattr(engine_class(name), "suggest", fail)


def test_an_option_over_its_cap_is_refused_at_creation_naming_option_and_cap(http):
    engine = {"name": "pom", "options": {"pool_size": 100_000}}
    detail = _problem(http.post("/v1/studies", json=study_body(engine=engine)), "invalid_engine")
    assert "pool_size" in detail and "4096" in detail
    assert http.get("/v1/studies").json()["data"] == []


def test_more_parameters_than_the_engine_takes_are_refused_at_creation(http):
    cap = engine_class("gp").limits.max_dimension
    body = study_body(parameters=_floats(cap + 1), engine={"name": "gp"})
    detail = _problem(http.post("/v1/studies", json=body), "engine_work_too_large")
    assert f"at most {cap} free parameters" in detail and f"has {cap + 1}" in detail
    assert http.get("/v1/studies").json()["data"] == []
    body = study_body(parameters=_floats(cap), engine={"name": "gp"})
    assert http.post("/v1/studies", json=body).status_code == 201


@pytest.mark.parametrize("engine", ["gp", "pom"])
def test_an_ask_over_count_x_dimension_is_refused_before_the_engine_runs(
    http, engine, engine_must_not_run
):
    limits = engine_class(engine).limits
    d = limits.max_dimension
    sid = http.post(
        "/v1/studies", json=study_body(parameters=_floats(d), engine={"name": engine})
    ).json()["id"]
    count = limits.max_points // d + 1
    detail = _problem(
        http.post(f"/v1/studies/{sid}/ask", json={"count": count}), "engine_work_too_large"
    )
    assert "lower count" in detail and f"at most {count - 1} trials per ask" in detail
    assert http.get(f"/v1/studies/{sid}/trials").json()["data"] == []


def test_a_tell_and_ask_over_the_cap_keeps_the_tell_and_says_why_in_next(http):
    d = engine_class("gp").limits.max_dimension
    body = study_body(parameters=_floats(d), engine={"name": "gp"})
    sid = http.post("/v1/studies", json=body).json()["id"]
    (trial,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    r = http.post(
        f"/v1/studies/{sid}/trials/{trial['number']}/tell",
        json={"values": {"value": 1.0}, "ask": {"count": 1000}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "completed" and r.json()["next"]["trials"] == []
    assert r.json()["next"]["problem"]["code"] == "engine_work_too_large"


def test_the_ask_and_create_routes_declare_the_code(http):
    paths = http.app.openapi()["paths"]
    for path, method in [
        ("/v1/studies", "post"),
        ("/v1/studies/{study_id}/ask", "post"),
    ]:
        assert "`engine_work_too_large`" in paths[path][method]["responses"]["422"]["description"]
