"""The OpenAPI document's request schemas say what the server does with a body: a default it
declares is what leaving the field out does; the tag of a tagged union is required; a field
of type integer takes every JSON integer, ``2.0`` included (JSON Schema's meaning), and
nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import FLOAT_X, study_body

#: Fields that differ between two otherwise equal resources created one after the other.
IDENTITY = {"id", "name", "created_at", "updated_at"}


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].split("/")[-1]]
    return schema


def _branch(document: dict[str, Any], schema: dict[str, Any], body: Any) -> dict[str, Any]:
    """The member of a union (``oneOf``/``anyOf``) that ``body``, an object, is."""
    if "discriminator" in schema:
        tag = schema["discriminator"]["propertyName"]
        return _resolve(document, {"$ref": schema["discriminator"]["mapping"][body[tag]]})
    for member in schema.get("oneOf", schema.get("anyOf", [])):
        member = _resolve(document, member)
        if member.get("type") == "object" and set(body) <= set(member.get("properties", {})):
            return member
    return schema


def with_declared_defaults(document: dict[str, Any], schema: dict[str, Any], body: Any) -> Any:
    """``body`` with every field the schema declares a default for, and ``body`` leaves out,
    set to that default, at every depth."""
    schema = _resolve(document, schema)
    if isinstance(body, list):
        return [with_declared_defaults(document, schema.get("items", {}), item) for item in body]
    if not isinstance(body, dict):
        return body
    schema = _branch(document, schema, body)
    fields = schema.get("properties", {})
    filled = {k: with_declared_defaults(document, fields.get(k, {}), v) for k, v in body.items()}
    for name, field in fields.items():
        if name not in filled and "default" in field:
            filled[name] = field["default"]
    return filled


def body_schema(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    operation = document["paths"][path][method]
    return operation["requestBody"]["content"]["application/json"]["schema"]


def without_identity(resource: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in resource.items() if k not in IDENTITY}


@pytest.fixture
def document(http):
    return http.app.openapi()


def test_filling_in_defaults_reaches_nested_members(document):
    body = {"name": "s", "parameters": [{"type": "int", "name": "n", "low": 1, "high": 3}]}
    filled = with_declared_defaults(document, body_schema(document, "post", "/v1/studies"), body)
    assert filled["parameters"] == [{**body["parameters"][0], "log": False}]
    assert filled["max_retries"] == 3 and filled["on_lease_expiry"] == "requeue"


def test_every_member_of_a_tagged_union_requires_its_tag(document):
    schemas = document["components"]["schemas"]
    tagged: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "discriminator" in node:
                tag = node["discriminator"]["propertyName"]
                for ref in node["discriminator"]["mapping"].values():
                    member = schemas[ref.split("/")[-1]]
                    tagged.append(ref)
                    assert tag in member["required"], ref
                    assert "default" not in member["properties"][tag], ref
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert len(set(tagged)) >= 6  # four parameter types, two sampler inits


def test_a_parameter_without_its_type_is_refused_and_nothing_is_stored(http):
    untyped = {k: v for k, v in FLOAT_X.items() if k != "type"}
    r = http.post("/v1/studies", json=study_body(parameters=[untyped]))
    assert r.status_code == 422 and r.json()["code"] == "validation_error", r.text
    assert http.get("/v1/studies").json()["data"] == []


def test_a_study_created_with_its_declared_defaults_is_the_one_created_without(http, document):
    body = study_body(
        "short",
        parameters=[
            FLOAT_X,
            {"type": "int", "name": "n", "low": 1, "high": 9},
            {"type": "categorical", "name": "c", "choices": ["a", "b"]},
        ],
        objectives=[{"name": "loss"}],
        engine={"options": {}},
        seed=5,
    )
    filled = with_declared_defaults(document, body_schema(document, "post", "/v1/studies"), body)
    assert filled != body
    short = http.post("/v1/studies", json=body)
    long = http.post("/v1/studies", json={**filled, "name": "long"})
    assert short.status_code == long.status_code == 201, (short.text, long.text)
    assert without_identity(short.json()) == without_identity(long.json())
    # And they behave alike: the same seed, the same first trial.
    asks = [http.post(f"/v1/studies/{r.json()['id']}/ask", json={}) for r in (short, long)]
    first, second = (a.json()["trials"][0] for a in asks)
    assert first["params"] == second["params"]


def test_ask_and_tell_with_their_declared_defaults_do_what_they_do_without(http, document):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    ask_path = "/v1/studies/{study_id}/ask"
    tell_path = "/v1/studies/{study_id}/trials/{number}/tell"
    ask = with_declared_defaults(document, body_schema(document, "post", ask_path), {})
    assert ask == {"count": 1}
    assert len(http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]) == 1
    assert len(http.post(f"/v1/studies/{sid}/ask", json=ask).json()["trials"]) == 1
    tell_body = {"values": {"value": 1.0}}
    tell = with_declared_defaults(document, body_schema(document, "post", tell_path), tell_body)
    assert tell["state"] == "completed"
    short = http.post(f"/v1/studies/{sid}/trials/0/tell", json=tell_body)
    long = http.post(f"/v1/studies/{sid}/trials/1/tell", json=tell)
    assert short.status_code == long.status_code == 200, (short.text, long.text)
    assert short.json()["state"] == long.json()["state"] == "completed"


def test_a_sampler_created_with_its_declared_defaults_is_the_one_created_without(http, document):
    body = {"dim": 2, "n_targets": 1, "seed": 3, "init": {"kind": "gaussian"}}
    filled = with_declared_defaults(document, body_schema(document, "post", "/v1/samplers"), body)
    assert filled["init"] == {"kind": "gaussian", "loc": 0.0, "scale": 1.0}
    short, long = (http.post("/v1/samplers", json=b) for b in (body, filled))
    assert short.status_code == long.status_code == 201, (short.text, long.text)
    assert without_identity(short.json()) == without_identity(long.json())
    asked = [http.post(f"/v1/samplers/{r.json()['id']}/ask").json() for r in (short, long)]
    assert asked[0]["X"] == asked[1]["X"]


@pytest.mark.parametrize(("count", "asked"), [(2, 2), (2.0, 2), (3e0, 3)])
def test_a_whole_number_is_an_integer_wherever_one_is_asked_for(http, count, asked):
    r = http.post(
        "/v1/studies",
        json=study_body(
            parameters=[{"type": "int", "name": "n", "low": 1.0, "high": 9.0}], max_trials=20.0
        ),
    )
    assert r.status_code == 201, r.text
    study = r.json()
    assert study["parameters"][0]["low"] == 1 and isinstance(study["parameters"][0]["low"], int)
    assert study["max_trials"] == 20 and isinstance(study["max_trials"], int)
    r = http.post(f"/v1/studies/{study['id']}/ask", json={"count": count})
    assert r.status_code == 200, r.text
    assert len(r.json()["trials"]) == asked
    # An int parameter's value, too (checked against the space, not by the body's model).
    r = http.post(f"/v1/studies/{study['id']}/trials", json={"params": {"n": 4.0}})
    assert r.status_code == 201, r.text
    assert r.json()["params"] == {"n": 4} and isinstance(r.json()["params"]["n"], int)


@pytest.mark.parametrize("count", [2.5, True, "2", None, [2]])
def test_anything_else_where_an_integer_is_asked_for_is_a_422(http, count):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": count})
    assert r.status_code == 422 and r.json()["code"] == "validation_error", r.text
    r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 0.0, "y": 0.0}})
    assert r.json()["number"] == 0  # no trial was made by the refused ask
