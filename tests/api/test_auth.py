"""API keys: 401 without a valid key, scopes (read, write, admin), and tenants that cannot see
each other: every route of the OpenAPI document with an id in its path answers another tenant's
id exactly as it answers a missing one (404), never 200 or 403."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from client import Client, InsufficientScope, Unauthorized
from service import api_keys
from service.app import create_app
from service.settings import Settings
from tests.conftest import study_body
from tests.jobs.conftest import job_body

CSV = "x,color,y\n" + "".join(f"{i},{'rgb'[i % 3]},{'ab'[i % 2]}\n" for i in range(20))
OCTETS = {"content-type": "application/octet-stream"}


@pytest.fixture
def app_http(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'asktell.db'}", auth="required", run_jobs=False
    )
    with TestClient(create_app(settings)) as http:
        yield http


def make_key(http: TestClient, tenant: str, scope: api_keys.KeyScope) -> dict[str, str]:
    db = http.app.state.store.db  # type: ignore[attr-defined]
    key = api_keys.create_key(db, tenant, f"{tenant}-{scope}", scope).key
    return {"Authorization": f"Bearer {key}"}


def test_a_request_without_a_valid_key_is_401_but_health_answers(app_http):
    assert app_http.get("/healthz").status_code == 200
    assert app_http.get("/readyz").status_code == 200
    for headers in ({}, {"Authorization": "Bearer at_0000_nope"}, {"Authorization": "Basic x"}):
        r = app_http.get("/v1/studies", headers=headers)
        assert r.status_code == 401, r.text
        assert r.json()["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.headers["content-type"] == "application/problem+json"
    assert app_http.post("/v1/studies", json=study_body()).status_code == 401
    # The dashboard's pages hold no data: they load, and ask for a key at their first 401.
    assert app_http.get("/dashboard").status_code == 200


def test_scopes(app_http):
    read, write, admin = (make_key(app_http, "acme", s) for s in ("read", "write", "admin"))
    created = app_http.post("/v1/studies", json=study_body(), headers=write)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    assert app_http.get(f"/v1/studies/{sid}", headers=read).status_code == 200
    for method, path in (("POST", f"/v1/studies/{sid}/ask"), ("DELETE", f"/v1/studies/{sid}")):
        r = app_http.request(method, path, headers=read, json={})
        assert r.status_code == 403 and r.json()["code"] == "insufficient_scope", r.text
    assert app_http.post(f"/v1/studies/{sid}/ask", json={}, headers=write).status_code == 200
    # Only admin keys manage keys; a new key shows its secret once, lists never do.
    for key in (read, write):
        assert app_http.get("/v1/keys", headers=key).json()["code"] == "insufficient_scope"
    made = app_http.post("/v1/keys", json={"name": "ci", "scope": "read"}, headers=admin)
    assert made.status_code == 201, made.text
    secret, key_id = made.json()["key"], made.json()["id"]
    assert made.json()["tenant"] == "acme" and secret.startswith(made.json()["prefix"] + "_")
    listed = app_http.get("/v1/keys", headers=admin).json()
    assert len(listed) == 4 and all("key" not in k for k in listed)
    ci = {"Authorization": f"Bearer {secret}"}
    assert app_http.get(f"/v1/studies/{sid}", headers=ci).status_code == 200
    revoked = app_http.delete(f"/v1/keys/{key_id}", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert app_http.get(f"/v1/studies/{sid}", headers=ci).json()["code"] == "unauthorized"


def test_the_event_stream_takes_the_key_as_a_query_parameter(app_http):
    read = make_key(app_http, "acme", "read")
    key = read["Authorization"].removeprefix("Bearer ")
    r = app_http.get("/v1/studies/999/events", params={"access_token": key})
    assert r.json()["code"] == "not_found"  # past auth: the study does not exist
    # Only reads take it: a write must send the header.
    r = app_http.post("/v1/studies", params={"access_token": key}, json=study_body())
    assert r.json()["code"] == "unauthorized"


def test_the_client_sends_asktell_api_key(app_http, monkeypatch):
    write = make_key(app_http, "acme", "write")
    monkeypatch.setenv("ASKTELL_API_KEY", write["Authorization"].removeprefix("Bearer "))
    with Client("http://testserver", transport=app_http._transport, retries=0) as client:
        study = client.create_study("env-key", study_body()["parameters"])
        assert client.get_study(study.id).id == study.id
    read = make_key(app_http, "acme", "read")
    monkeypatch.setenv("ASKTELL_API_KEY", read["Authorization"].removeprefix("Bearer "))
    with (
        Client("http://testserver", transport=app_http._transport, retries=0) as client,
        pytest.raises(InsufficientScope),
    ):
        client.create_study("nope", study_body()["parameters"])
    monkeypatch.delenv("ASKTELL_API_KEY")
    with (
        Client("http://testserver", transport=app_http._transport, retries=0) as client,
        pytest.raises(Unauthorized),
    ):
        client.get_study(study.id)


def test_the_openapi_document_declares_the_scheme(app_http):
    document = app_http.app.openapi()  # type: ignore[attr-defined]
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path in ("/healthz", "/readyz"):
                assert "security" not in operation
                continue
            assert operation["security"] == [{"HTTPBearer": []}], (method, path)
            assert "401" in operation["responses"], (method, path)
            assert ("403" in operation["responses"]) == (method != "get" or "keys" in path)


# --- tenants ----------------------------------------------------------------------------


def _resources(http: TestClient, headers: dict[str, str]) -> dict[str, str]:
    """One of each resource of a tenant: the values of the path parameters that name them."""
    study = http.post("/v1/studies", json=study_body("a"), headers=headers).json()
    http.post(f"/v1/studies/{study['id']}/ask", json={}, headers=headers)
    sampler = http.post("/v1/samplers", json={"dim": 1, "n_targets": 1, "seed": 0}, headers=headers)
    query = "/v1/datasets?name=demo&target=y&task=classification"
    dataset = http.post(query, content=CSV, headers={**headers, "content-type": "text/csv"})
    job = http.post("/v1/jobs", json=job_body(), headers=headers)
    artifact = http.put("/v1/artifacts/a/model.bin", content=b"A", headers={**headers, **OCTETS})
    key = http.post("/v1/keys", json={"name": "k", "scope": "read"}, headers=headers)
    for r in (sampler, dataset, job, artifact, key):
        assert r.status_code == 201, r.text
    return {
        "study_id": str(study["id"]),
        "number": "0",
        "sampler_id": str(sampler.json()["id"]),
        "dataset": "demo",
        "job_id": str(job.json()["id"]),
        "key": "a/model.bin",
        "key_id": str(key.json()["id"]),
    }


MISSING = {
    "study_id": "99999",
    "number": "0",
    "sampler_id": "99999",
    "dataset": "missing",
    "job_id": "99999",
    "key": "a/missing.bin",
    "key_id": "99999",
}

#: Bodies that pass validation, so that the answer comes from the lookup.
BODIES = {
    ("patch", "/v1/studies/{study_id}"): {"state": "paused"},
    ("post", "/v1/studies/{study_id}/ask"): {},
    ("post", "/v1/studies/{study_id}/trials"): {"params": {"x": 0.0, "y": 0.0}},
    ("post", "/v1/studies/{study_id}/trials/{number}/tell"): {"state": "failed"},
    ("post", "/v1/studies/{study_id}/trials/{number}/report"): {"step": 1, "values": {"value": 1}},
    ("post", "/v1/studies/{study_id}/trials/{number}/heartbeat"): {},
    ("put", "/v1/studies/{study_id}/trials/{number}/note"): {"note": "n"},
    ("post", "/v1/samplers/{sampler_id}/tell"): {"iteration": 0, "grad_log_prob": [[[0.0]]]},
    ("post", "/v1/jobs/{job_id}/predict"): {"rows": [{"x": 1}]},
}


def _fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


def test_another_tenants_ids_are_404_on_every_route(app_http):
    owner, other = make_key(app_http, "a", "admin"), make_key(app_http, "b", "admin")
    ids = _resources(app_http, owner)
    document = app_http.app.openapi()  # type: ignore[attr-defined]
    walked = 0
    for path, operations in document["paths"].items():
        if "{" not in path:
            continue
        for method in operations:
            if (method, path) == ("put", "/v1/artifacts/{key}"):
                continue  # a tenant's own artifact at that key: checked below
            body = BODIES.get((method, path))
            kw = {"json": body} if body is not None else {}
            theirs = app_http.request(method, _fill(path, ids), headers=other, **kw)
            missing = app_http.request(method, _fill(path, MISSING), headers=other, **kw)
            where = f"{method.upper()} {path}: {theirs.status_code} {theirs.text[:200]}"
            assert theirs.status_code == 404, where
            assert (theirs.status_code, theirs.json()["code"]) == (
                missing.status_code,
                missing.json()["code"],
            ), where
            walked += 1
    assert walked >= 30
    # Nothing of tenant a was changed or removed, and b's lists show none of it.
    assert app_http.get(f"/v1/studies/{ids['study_id']}", headers=owner).json()["state"] == (
        "active"
    )
    assert app_http.get("/v1/artifacts/a/model.bin", headers=owner).content == b"A"
    assert len(app_http.get("/v1/keys", headers=owner).json()) == 2
    assert app_http.get("/v1/studies", headers=other).json()["data"] == []
    assert app_http.get("/v1/jobs", headers=other).json()["data"] == []
    assert all(d["builtin"] for d in app_http.get("/v1/datasets", headers=other).json())
    # b's own artifact at the same key is b's, and leaves a's alone.
    put = app_http.put("/v1/artifacts/a/model.bin", content=b"B", headers={**other, **OCTETS})
    assert put.status_code == 201
    assert app_http.get("/v1/artifacts/a/model.bin", headers=owner).content == b"A"
