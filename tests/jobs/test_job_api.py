"""The job API without a runner: validation, the job's study, reads, cancel, and the answers
before a job has succeeded."""

from __future__ import annotations

import sys

import pytest

from engines.optim import registry
from service.jobs import spec
from tests.api.test_declared_defaults import body_schema, with_declared_defaults
from tests.jobs.conftest import job_body


def _problem(r, status, code):
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["code"] == code and body["detail"]
    return body


@pytest.mark.parametrize(
    ("fields", "status", "code"),
    [
        ({"engine": "lcbo"}, 422, "invalid_job"),
        ({"engine": {"name": "mwgd"}}, 422, "invalid_job"),
        ({"optimizer": "adamx"}, 422, "unknown_optimizer"),
        ({"optimizer": ["olion", "nope"]}, 422, "unknown_optimizer"),
        ({"optimizer": ["olion", "olion"]}, 422, "invalid_job"),
        ({"optimizer": []}, 422, "validation_error"),
        ({"workload": "resnet-9000"}, 422, "unknown_workload"),
        ({"workload": {"name": "nope", "options": {}}}, 422, "unknown_workload"),
        ({"dataset": "mnist-or-so"}, 404, "dataset_not_found"),
        ({"dataset": 12345}, 404, "dataset_not_found"),
        ({"engine": "gp", "budget": {"steps": 10}}, 422, "invalid_job"),
        ({"engine": {"name": "ipbt", "options": {"quantile": 0.9}}}, 422, "invalid_engine"),
        ({"budget": {"steps": 0}}, 422, "validation_error"),
        ({"budget": {"steps": "100"}}, 422, "validation_error"),
        ({"budget": {"steps": 10, "population": 1}}, 422, "validation_error"),
        ({"parallelism": 0}, 422, "validation_error"),
        ({"seed": "1"}, 422, "validation_error"),
        ({"surprise": 1}, 422, "validation_error"),
        ({"name": ""}, 422, "validation_error"),
        ({"name": "x" * 256}, 422, "invalid_job"),
        ({"dataset": True}, 422, "validation_error"),
        ({"optimizer_options": {"adamw": {"lr": 0.1}}}, 422, "invalid_job"),
        ({"optimizer_options": {"olion": {"nope": 1}}}, 422, "invalid_job"),
        ({"optimizer_options": {"olion": {"lr": "fast"}}}, 422, "invalid_job"),
        ({"optimizer_options": {"olion": {"lr": -1.0}}}, 422, "invalid_job"),
        ({"optimizer_options": {"olion": 3}}, 422, "validation_error"),
    ],
)
def test_bad_jobs_are_refused_and_nothing_is_stored(jobs_http, fields, status, code):
    _problem(jobs_http.post("/v1/jobs", json=job_body(**fields)), status, code)
    assert jobs_http.get("/v1/jobs").json()["data"] == []
    assert jobs_http.get("/v1/studies").json()["data"] == []


def test_a_job_creates_its_study_linked_both_ways(jobs_http):
    r = jobs_http.post("/v1/jobs", json=job_body("digits-olion", parallelism=2))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "queued" and job["runner"] is None and job["takeovers"] == 0
    assert job["config"]["parallelism"] == 2 and job["config"]["seed"] == 0
    assert job["steps_budget"] == 400 and job["units_done"] == 0 and job["best_score"] is None
    study = jobs_http.get(f"/v1/studies/{job['study_id']}").json()
    assert study["name"] == "job-digits-olion"
    assert study["metadata"] == {"job_id": job["id"]}
    assert study["engine"] == {"name": "ipbt", "options": {"t_max": 100, "population_size": 4}}
    assert study["objectives"] == [{"name": "score", "goal": "maximize", "reference": None}]
    names = [p["name"] for p in study["parameters"]]
    assert names == [p["name"] for p in registry.search_space("olion")]
    assert jobs_http.get(f"/v1/jobs/{job['id']}").json() == {**job, "elapsed_seconds": None}


def test_several_optimizers_make_a_categorical_parameter(jobs_http):
    job = jobs_http.post("/v1/jobs", json=job_body(optimizer=["lion", "sgd"])).json()
    study = jobs_http.get(f"/v1/studies/{job['study_id']}").json()
    params = {p["name"]: p for p in study["parameters"]}
    assert params["optimizer"]["choices"] == ["lion", "sgd"]
    expected = {f"{o}.{p['name']}" for o in ("lion", "sgd") for p in registry.search_space(o)}
    assert set(params) == {"optimizer", *expected}
    config = spec.JobCreate.model_validate(job["config"])
    chosen, hparams = spec.unit_hparams(
        config, {"optimizer": "sgd", "lion.lr": 1e-4, "sgd.lr": 0.1, "hidden": 8}
    )
    assert chosen == "sgd" and hparams == {"lr": 0.1, "hidden": 8}


def test_optimizer_options_are_fixed_and_leave_the_search_space(jobs_http):
    options = {"lion+": {"norm_scope": "element", "lr": 3e-4}}
    body = job_body(optimizer=["lion+", "sgd"], optimizer_options=options)
    job = jobs_http.post("/v1/jobs", json=body).json()
    assert job["config"]["optimizer_options"] == options
    study = jobs_http.get(f"/v1/studies/{job['study_id']}").json()
    names = {p["name"] for p in study["parameters"]}
    assert "lion+.lr" not in names and "sgd.lr" in names and "lion+.beta1" in names
    config = spec.JobCreate.model_validate(job["config"])
    params = {"optimizer": "lion+", "lion+.beta1": 0.8, "sgd.lr": 0.1, "hidden": 8}
    assert spec.unit_hparams(config, params) == (
        "lion+",
        {"norm_scope": "element", "lr": 3e-4, "beta1": 0.8, "hidden": 8},
    )
    assert spec.unit_hparams(config, {**params, "optimizer": "sgd"}) == (
        "sgd",
        {"lr": 0.1, "hidden": 8},
    )


def test_a_single_objective_engine_runs_trials(jobs_http):
    body = job_body(engine="random", budget={"steps": 50, "trials": 6})
    job = jobs_http.post("/v1/jobs", json=body).json()
    study = jobs_http.get(f"/v1/studies/{job['study_id']}").json()
    assert study["engine"]["name"] == "random" and study["max_trials"] == 6
    assert job["steps_budget"] == 300


def test_names_are_unique(jobs_http):
    assert jobs_http.post("/v1/jobs", json=job_body("a")).status_code == 201
    body = _problem(jobs_http.post("/v1/jobs", json=job_body("a")), 409, "job_exists")
    assert body["job_id"] == 1
    # A study that the job would create blocks it too.
    jobs_http.post(
        "/v1/studies",
        json={"name": "job-b", "parameters": [{"type": "float", "name": "x", "low": 0, "high": 1}]},
    )
    _problem(jobs_http.post("/v1/jobs", json=job_body("b")), 409, "job_exists")
    assert [j["name"] for j in jobs_http.get("/v1/jobs").json()["data"]] == ["a"]


def test_list_pages_in_id_order(jobs_http):
    for name in "abc":
        jobs_http.post("/v1/jobs", json=job_body(name))
    first = jobs_http.get("/v1/jobs", params={"limit": 2}).json()
    assert [j["name"] for j in first["data"]] == ["a", "b"] and first["next_cursor"] == "2"
    rest = jobs_http.get("/v1/jobs", params={"cursor": first["next_cursor"]}).json()
    assert [j["name"] for j in rest["data"]] == ["c"] and rest["next_cursor"] is None
    _problem(jobs_http.get("/v1/jobs", params={"cursor": "x"}), 422, "invalid_cursor")


def test_a_ray_job_is_refused_without_ray_and_nothing_is_stored(jobs_http, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as on a server without asktell[ray]
    r = jobs_http.post("/v1/jobs", json=job_body("on-ray", executor="ray"))
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "executor_unavailable"
    assert "asktell[ray]" in r.json()["detail"]
    assert jobs_http.get("/v1/jobs").json()["data"] == []
    assert jobs_http.get("/v1/studies").json()["data"] == []
    # A local job is fine there, and the executor is stored with the job.
    r = jobs_http.post("/v1/jobs", json=job_body("on-local"))
    assert r.status_code == 201, r.text
    assert r.json()["config"]["executor"] == "local"
    assert r.json()["config"]["resources"] == {"num_cpus": 1.0, "num_gpus": 0.0}


def test_unknown_job(jobs_http):
    for r in (
        jobs_http.get("/v1/jobs/99"),
        jobs_http.post("/v1/jobs/99/cancel"),
        jobs_http.get("/v1/jobs/99/model"),
        jobs_http.get("/v1/jobs/99/events"),
        jobs_http.post("/v1/jobs/99/predict", json={"rows": [{"x0": 1}]}),
    ):
        _problem(r, 404, "job_not_found")


def test_cancel_a_queued_job_ends_it(jobs_http):
    job = jobs_http.post("/v1/jobs", json=job_body()).json()
    r = jobs_http.post(f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert r.json()["cancel_requested"] and r.json()["finished_at"]
    _problem(jobs_http.post(f"/v1/jobs/{job['id']}/cancel"), 409, "job_finished")
    # Its event stream tells the final state and ends.
    with jobs_http.stream("GET", f"/v1/jobs/{job['id']}/events") as stream:
        text = "".join(stream.iter_text())
    assert "event: job_state" in text and '"state":"cancelled"' in text


def test_model_and_predict_wait_for_success(jobs_http):
    job = jobs_http.post("/v1/jobs", json=job_body()).json()
    body = _problem(jobs_http.get(f"/v1/jobs/{job['id']}/model"), 409, "job_not_succeeded")
    assert body["state"] == "queued"
    r = jobs_http.post(f"/v1/jobs/{job['id']}/predict", json={"rows": [{"x0": 1}]})
    _problem(r, 409, "job_not_succeeded")
    _problem(
        jobs_http.post(f"/v1/jobs/{job['id']}/predict", json={"rows": []}), 422, "validation_error"
    )
    _problem(
        jobs_http.post(f"/v1/jobs/{job['id']}/predict", json={"rows": "x"}), 422, "validation_error"
    )


def test_bad_last_event_id(jobs_http):
    job = jobs_http.post("/v1/jobs", json=job_body()).json()
    r = jobs_http.get(f"/v1/jobs/{job['id']}/events", headers={"Last-Event-ID": "nope"})
    _problem(r, 422, "invalid_cursor")


def test_a_job_created_with_its_declared_defaults_is_the_one_created_without(jobs_http):
    document = jobs_http.app.openapi()
    body = job_body("short", resources={})
    schema = body_schema(document, "post", "/v1/jobs")
    filled = {**with_declared_defaults(document, schema, body), "name": "long"}
    assert filled["workload"] == "mlp" and filled["engine"] == "ipbt"
    assert filled["resources"] == {"num_cpus": 1.0, "num_gpus": 0.0}
    short, long = (jobs_http.post("/v1/jobs", json=b) for b in (body, filled))
    assert short.status_code == long.status_code == 201, (short.text, long.text)
    configs = [{**r.json()["config"], "name": None} for r in (short, long)]
    assert configs[0] == configs[1]
    studies = [jobs_http.get(f"/v1/studies/{r.json()['study_id']}").json() for r in (short, long)]
    assert studies[0]["engine"] == studies[1]["engine"]
    assert studies[0]["parameters"] == studies[1]["parameters"]
