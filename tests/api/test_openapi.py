"""The OpenAPI document declares every problem+json response a route answers with."""

import re

import pytest

from client.models import ProblemCode
from tests.conftest import study_body

PROBLEM = "application/problem+json"
_bad_float = {"type": "float", "name": "x", "low": 1, "high": 0}
METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture
def document(http):
    return http.app.openapi()


def _operations(document):
    for path, item in document["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def _declared(operation):
    """The codes an operation declares, by status."""
    return {
        int(status): set(re.findall(r"`([a-z_]+)`", response.get("description", "")))
        for status, response in operation["responses"].items()
        if int(status) >= 400
    }


def test_every_error_response_is_problem_json_with_the_problem_detail_schema(document):
    assert "ProblemDetail" in document["components"]["schemas"]
    for path, method, operation in _operations(document):
        for status, response in operation["responses"].items():
            if int(status) < 400:
                continue
            where = f"{method.upper()} {path} {status}"
            assert response["content"] == {
                PROBLEM: {"schema": {"$ref": "#/components/schemas/ProblemDetail"}}
            }, where
            codes = _declared(operation)[int(status)]
            assert codes, where
            assert {ProblemCode(c).status for c in codes} == {int(status)}, where


def test_every_operation_declares_the_errors_its_inputs_can_cause(document):
    for path, method, operation in _operations(document):
        declared = _declared(operation)
        where = f"{method.upper()} {path}"
        assert "internal_error" in declared[500], where
        if operation.get("parameters") or "requestBody" in operation:
            assert "validation_error" in declared[422], where
        body_types = set(operation.get("requestBody", {}).get("content", {}))
        if "application/json" in body_types:
            assert "malformed_json" in declared[400], where
            assert "body_too_large" in declared[413], where
        elif body_types:  # a raw body (a dataset upload, an artifact): its own limit
            assert declared[413] & {"body_too_large", "dataset_too_large"}, where
            if "text/csv" in body_types:  # a dataset upload: its media types
                assert "unsupported_media_type" in declared.get(415, set()), where
        names = {p["name"] for p in operation.get("parameters", [])}
        if "Idempotency-Key" in names:
            assert {"invalid_idempotency_key", "idempotency_key_reused"} <= declared[409] | (
                declared[422]
            ), where
        if {"study_id", "sampler_id"} & names:
            assert "not_found" in declared[404], where
        if "number" in names:
            assert "trial_not_found" in declared[404], where


def _operation_of(document, method, url):
    path = url.split("?")[0]
    for template, item in document["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in item:
            return template, item[method.lower()]
    raise AssertionError(f"no operation for {method} {url}")


def _errors(http):
    """Real error requests, with the code each must answer with."""
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={"worker_id": "w"}).json()["trials"]
    queued = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 0.0, "y": 0.0}})
    pbt = {"name": "pbt", "options": {"t_max": 10}}
    scheduler = http.post("/v1/studies", json=study_body("sched", engine=pbt)).json()["id"]
    sampler = http.post("/v1/samplers", json={"dim": 2, "n_targets": 1, "n_particles": 4})
    sampler_id = sampler.json()["id"]
    tell = {"values": {"value": 1.0}}
    json_headers = {"content-type": "application/json"}
    return [
        ("POST", "/v1/studies", {"json": study_body(engine={"name": "nope"})}, "invalid_engine"),
        (
            "POST",
            "/v1/studies",
            {"json": study_body(parameters=[_bad_float])},
            "invalid_search_space",
        ),
        ("POST", "/v1/studies", {"json": study_body(seed=5)}, "study_exists"),
        ("POST", "/v1/studies", {"content": b"{", "headers": json_headers}, "malformed_json"),
        ("POST", "/v1/studies", {"content": b"x" * (2 << 20)}, "body_too_large"),
        ("GET", "/v1/studies?cursor=zz", {}, "invalid_cursor"),
        ("GET", "/v1/studies/999", {}, "not_found"),
        ("PATCH", "/v1/studies/999", {"json": {}}, "not_found"),
        ("DELETE", "/v1/studies/999", {}, "not_found"),
        ("GET", "/v1/studies/999/events", {}, "not_found"),
        (
            "GET",
            f"/v1/studies/{sid}/events",
            {"headers": {"Last-Event-ID": "x"}},
            "invalid_cursor",
        ),
        ("GET", f"/v1/studies/{sid}/best/schedule", {}, "not_a_scheduler_study"),
        ("GET", f"/v1/studies/{scheduler}/best/schedule", {}, "no_completed_unit"),
        ("GET", f"/v1/studies/{sid}/checkpoints", {}, "not_a_scheduler_study"),
        (
            "POST",
            f"/v1/studies/{scheduler}/trials",
            {"json": {"params": {}}},
            "engine_schedules_units",
        ),
        ("POST", f"/v1/studies/{sid}/trials", {"json": {"params": {"x": 9.0}}}, "invalid_params"),
        ("GET", f"/v1/studies/{sid}/trials/42", {}, "trial_not_found"),
        ("GET", f"/v1/studies/{sid}/trials/42/measurements", {}, "trial_not_found"),
        ("GET", f"/v1/studies/{scheduler}/trials/42/lineage", {}, "trial_not_found"),
        ("POST", f"/v1/studies/{sid}/trials/42/tell", {"json": tell}, "trial_not_found"),
        (
            "POST",
            f"/v1/studies/{sid}/trials/{queued.json()['number']}/heartbeat",
            {"json": {}},
            "trial_not_running",
        ),
        (
            "POST",
            f"/v1/studies/{sid}/trials/{t['number']}/tell",
            {"json": {"values": {}}},
            "missing_objective",
        ),
        (
            "POST",
            f"/v1/studies/{sid}/trials/{t['number']}/report",
            {"json": {"step": 1, "values": {"a": 1.0}}, "headers": {"Idempotency-Key": " "}},
            "invalid_idempotency_key",
        ),
        ("GET", f"/v1/studies/{sid}/trials/abc", {}, "validation_error"),
        ("GET", f"/v1/samplers/{sampler_id + 1}", {}, "not_found"),
        (
            "POST",
            f"/v1/samplers/{sampler_id}/tell",
            {"json": {"iteration": 3, "grad_log_prob": []}},
            "stale_iteration",
        ),
        (
            "POST",
            f"/v1/samplers/{sampler_id}/tell",
            {"json": {"iteration": 0, "grad_log_prob": []}},
            "shape_mismatch",
        ),
        ("GET", "/v1/artifacts/missing.pt", {}, "artifact_not_found"),
        ("DELETE", "/v1/artifacts/missing.pt", {}, "artifact_not_found"),
        ("PUT", "/v1/artifacts/%2e%2e", {"content": b"x"}, "invalid_artifact_key"),
        ("GET", "/v1/artifacts/%2e%2e", {}, "invalid_artifact_key"),
        *_dataset_errors(),
    ]


def _dataset_errors():
    csv = {"content-type": "text/csv"}
    upload = "/v1/datasets?name=d&target=y&task=regression"
    return [
        ("POST", upload, {"content": b"", "headers": csv}, "dataset_empty"),
        ("POST", upload, {"content": b"a,y\n1,2,3\n", "headers": csv}, "dataset_ragged"),
        ("POST", upload, {"content": b"a,b\n1,2\n", "headers": csv}, "dataset_no_target"),
        ("POST", upload, {"json": {}}, "unsupported_media_type"),
        (
            "POST",
            upload.replace("=d&", "=iris&"),
            {"content": b"", "headers": csv},
            "dataset_exists",
        ),
        ("GET", "/v1/datasets/nope", {}, "dataset_not_found"),
        ("GET", "/v1/datasets/nope/csv", {}, "dataset_not_found"),
        ("DELETE", "/v1/datasets/nope", {}, "dataset_not_found"),
    ]


def test_real_errors_are_declared_for_their_operation(http, document):
    for method, url, kwargs, code in _errors(http):
        r = http.request(method, url, **kwargs)
        body = r.json()
        assert (r.status_code, body.get("code")) == (ProblemCode(code).status, code), (url, r.text)
        template, operation = _operation_of(document, method, url)
        declared = _declared(operation).get(r.status_code, set())
        assert body["code"] in declared, f"{method} {template} answers {code}, undeclared"


def test_every_operation_has_a_description(document):
    missing = [
        f"{method.upper()} {path}"
        for path, method, operation in _operations(document)
        if not operation.get("description", "").strip()
    ]
    assert not missing, f"operations without a description: {missing}"
