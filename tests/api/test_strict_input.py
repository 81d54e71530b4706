"""Bad input that used to be accepted or answered badly (found by fuzzing, issue 21): each gets
a 4xx problem with a stable code, and changes nothing stored."""

import csv
import io

import pytest

from client.models import TrialCreate
from tests.conftest import FLOAT_X, study_body

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def sid(http):
    return http.post("/v1/studies", json=study_body()).json()["id"]


def _problem(r, status, code):
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == code
    return r.json()


def _metadata(depth):
    """A PATCH body whose metadata nests ``depth`` objects, as text (json.dumps would recurse)."""
    return '{"metadata": ' + '{"a": ' * depth + "1" + "}" * depth + "}"


@pytest.mark.parametrize(
    ("depth", "status", "code", "words"),
    [
        (33, 422, "validation_error", "32 levels"),
        (256, 422, "validation_error", "32 levels"),
        # Deeper than Python's JSON parser goes: the body cannot be read at all.
        (1000, 400, "malformed_json", "too deep"),
        (10_000, 400, "malformed_json", "too deep"),
    ],
)
def test_metadata_nested_too_deep_is_refused_and_the_study_keeps_its_metadata(
    http, sid, depth, status, code, words
):
    assert http.patch(f"/v1/studies/{sid}", json={"metadata": {"k": 1}}).status_code == 200
    r = http.patch(f"/v1/studies/{sid}", content=_metadata(depth), headers=JSON)
    assert words in _problem(r, status, code)["detail"]
    assert http.get(f"/v1/studies/{sid}").json()["metadata"] == {"k": 1}


def test_metadata_32_levels_deep_is_stored(http, sid):
    r = http.patch(f"/v1/studies/{sid}", content=_metadata(32), headers=JSON)
    assert r.status_code == 200, r.text


def test_a_body_that_is_not_utf8_is_malformed_json(http):
    r = http.post(
        "/v1/studies", content=b'{"name": "\xff"}', headers={"Content-Type": "application/json"}
    )
    assert "not UTF-8" in _problem(r, 400, "malformed_json")["detail"]


def test_a_405_names_every_method_of_the_path(http, sid):
    r = http.put(f"/v1/studies/{sid}")
    _problem(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET, PATCH, DELETE"
    assert http.delete("/v1/studies").headers["allow"] == "GET, POST"


@pytest.mark.parametrize(
    ("told", "field"),
    [
        ({"values": {"value": "1.5"}}, "values.value"),
        ({"values": {"value": True}}, "values.value"),
        ({"values": {"value": 1.0}, "constraints": {"c": "2"}}, "constraints.c"),
    ],
)
def test_numbers_are_not_read_from_text_or_booleans(http, sid, told, field):
    (trial,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    r = http.post(f"/v1/studies/{sid}/trials/{trial['number']}/tell", json=told)
    assert _problem(r, 422, "validation_error")["errors"][0]["field"] == field
    assert http.get(f"/v1/studies/{sid}/trials/{trial['number']}").json()["state"] == "running"


@pytest.mark.parametrize("count", [True, "2", 1.0])
def test_a_count_is_an_integer(http, sid, count):
    _problem(http.post(f"/v1/studies/{sid}/ask", json={"count": count}), 422, "validation_error")
    assert http.get(f"/v1/studies/{sid}").json()["trial_counts"] == {}


def test_a_study_without_parameters_is_refused(http):
    r = http.post("/v1/studies", json=study_body(parameters=[]))
    assert "at least one parameter" in _problem(r, 422, "invalid_search_space")["detail"]


@pytest.mark.parametrize("name", [" ", "\t\n", "x" * 257])
def test_a_study_name_needs_a_visible_character_and_at_most_256(http, name):
    _problem(http.post("/v1/studies", json=study_body(name)), 422, "validation_error")
    assert http.get("/v1/studies").json()["data"] == []


def test_a_parameter_name_is_at_most_256_characters(http):
    long = {**FLOAT_X, "name": "x" * 257}
    _problem(http.post("/v1/studies", json=study_body(parameters=[long])), 422, "validation_error")


@pytest.mark.parametrize("lease", [1e-300, 0.0, 0.009, 8 * 86400])
def test_a_lease_is_between_10_ms_and_a_week(http, sid, lease):
    _problem(
        http.post(f"/v1/studies/{sid}/ask", json={"lease_seconds": lease}), 422, "validation_error"
    )


def test_csv_cells_that_start_like_a_formula_are_quoted(http):
    colour = {"type": "categorical", "name": "c", "choices": ["=SUM(1)", "@x", "-1", "plain"]}
    sid = http.post("/v1/studies", json=study_body(parameters=[colour])).json()["id"]
    for choice in colour["choices"]:
        r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"c": choice}})
        assert r.status_code == 201
    (trial,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    http.post(
        f"/v1/studies/{sid}/trials/{trial['number']}/tell",
        json={"state": "failed", "reason": "+cmd|' /C calc'!A0"},
    )
    rows = list(csv.DictReader(io.StringIO(http.get(f"/v1/studies/{sid}/export?format=csv").text)))
    assert [r["params.c"] for r in rows] == ["'=SUM(1)", "'@x", "'-1", "plain"]
    assert rows[0]["reason"] == "'+cmd|' /C calc'!A0"


def test_the_python_client_models_are_strict_too():
    with pytest.raises(ValueError):
        TrialCreate(params={"x": 1.0}, values={"value": "1.5"})  # type: ignore[dict-item]
