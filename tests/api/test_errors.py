"""Bad input gets a clear 4xx problem+json with a stable code, never a 5xx."""

import csv
import io
import re
from pathlib import Path

import pytest

from client import errors as client_errors
from client.models import ProblemCode, TrialCreate
from engines.errors import EngineOptionsError, EngineRetryable, EngineUnsupported, SpaceError
from tests.conftest import FLOAT_X, study_body


@pytest.fixture
def sid(http):
    return http.post("/v1/studies", json=study_body()).json()["id"]


def _problem(r, status, code):
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["code"] == code and body["status"] == status and body["detail"]
    return body


def _float(**fields):
    return {"type": "float", "name": "x", "low": 0, "high": 1, **fields}


@pytest.mark.parametrize(
    ("parameters", "code", "words"),
    [
        ([_float(low=1, high=0)], "invalid_search_space", "below"),
        ([_float(log=True)], "invalid_search_space", "log"),
        ([FLOAT_X, FLOAT_X], "invalid_search_space", "twice"),
        ([{"type": "categorical", "name": "c", "choices": []}], "invalid_search_space", "choice"),
        ([_float(name="")], "invalid_search_space", "name"),
        ([{"type": "bogus", "name": "x"}], "validation_error", "type"),
        ([_float(extra=1)], "validation_error", "extra"),
    ],
)
def test_invalid_search_spaces(http, parameters, code, words):
    body = _problem(http.post("/v1/studies", json=study_body(parameters=parameters)), 422, code)
    assert words in body["detail"]


def test_too_many_parameters(http):
    params = [_float(name=f"p{i}") for i in range(1001)]
    r = http.post("/v1/studies", json=study_body(parameters=params))
    assert "1000" in _problem(r, 422, "invalid_search_space")["detail"]


def test_unknown_engine_and_unknown_option(http):
    r = http.post("/v1/studies", json=study_body(engine={"name": "nope"}))
    assert "choose one of" in _problem(r, 422, "invalid_engine")["detail"]
    r = http.post("/v1/studies", json=study_body(engine={"name": "random", "options": {"q": 1}}))
    assert "no option" in _problem(r, 422, "invalid_engine")["detail"]


def test_duplicate_objective_names(http):
    body = study_body(objectives=[{"name": "a"}, {"name": "a"}])
    _problem(http.post("/v1/studies", json=body), 422, "invalid_study")


@pytest.mark.parametrize("count", [0, -1, 1001, "many"])
def test_bad_counts(http, sid, count):
    _problem(http.post(f"/v1/studies/{sid}/ask", json={"count": count}), 422, "validation_error")


def test_unknown_study_and_unknown_trial(http, sid):
    _problem(http.post("/v1/studies/999/ask", json={}), 404, "not_found")
    r = http.post(f"/v1/studies/{sid}/trials/42/tell", json={"values": {"value": 1}})
    _problem(r, 404, "trial_not_found")
    _problem(http.get("/v1/nowhere"), 404, "not_found")
    _problem(http.get("/v1/studies/abc"), 422, "validation_error")


def test_tell_with_unknown_missing_or_non_finite_values(http, sid):
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    url = f"/v1/studies/{sid}/trials/{t['number']}/tell"
    _problem(http.post(url, json={"values": {"loss": 1.0}}), 422, "unknown_objective")
    _problem(http.post(url, json={"values": {}}), 422, "missing_objective")
    _problem(http.post(url, json={"values": {"value": "x"}}), 422, "validation_error")
    for bad in (b'{"values": {"value": NaN}}', b'{"values": {"value": Infinity}}'):
        r = http.post(url, content=bad, headers={"content-type": "application/json"})
        assert "failed" in _problem(r, 422, "non_finite_value")["detail"]
    # None of that touched the trial.
    assert http.get(f"/v1/studies/{sid}/trials/{t['number']}").json()["state"] == "running"


def test_constraint_metrics_are_checked(http):
    body = study_body(constraints=[{"name": "mem", "op": "<=", "threshold": 1.0}])
    sid = http.post("/v1/studies", json=body).json()["id"]
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    url = f"/v1/studies/{sid}/trials/{t['number']}/tell"
    _problem(http.post(url, json={"values": {"value": 1.0}}), 422, "missing_constraint")
    r = http.post(url, json={"values": {"value": 1.0}, "constraints": {"mem": 1, "cpu": 2}})
    _problem(r, 422, "unknown_constraint")


def test_malformed_json_and_wrong_content(http, sid):
    url = f"/v1/studies/{sid}/ask"
    r = http.post(url, content=b"{not json", headers={"content-type": "application/json"})
    _problem(r, 400, "malformed_json")
    _problem(http.post(url, content=b"count=3"), 400, "malformed_json")
    _problem(http.post(url, json=[1, 2]), 422, "validation_error")


def test_unknown_fields_are_rejected(http, sid):
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": 1, "worker": "w"})
    assert "worker" in _problem(r, 422, "validation_error")["detail"]


def test_bodies_over_one_mib_are_413(http, sid):
    big = b'{"params": {"x": 1.0, "y": 0.0}, "metadata": {"blob": "' + b"a" * (1 << 20) + b'"}}'
    headers = {"content-type": "application/json"}
    _problem(
        http.post(f"/v1/studies/{sid}/trials", content=big, headers=headers), 413, "body_too_large"
    )

    def chunks():
        yield big[: len(big) // 2]
        yield big[len(big) // 2 :]

    r = http.post(f"/v1/studies/{sid}/trials", content=chunks(), headers=headers)
    _problem(r, 413, "body_too_large")
    assert http.get(f"/v1/studies/{sid}").json()["trial_counts"] == {}


def test_bad_cursor(http):
    _problem(http.get("/v1/studies", params={"cursor": "zz"}), 422, "invalid_cursor")


def test_heartbeat_on_a_waiting_or_finished_trial(http, sid):
    http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 0.0, "y": 0.0}})
    _problem(http.post(f"/v1/studies/{sid}/trials/0/heartbeat", json={}), 409, "trial_not_running")
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    http.post(f"/v1/studies/{sid}/trials/{t['number']}/tell", json={"values": {"value": 1}})
    r = http.post(f"/v1/studies/{sid}/trials/{t['number']}/heartbeat", json={})
    _problem(r, 409, "trial_finished")


def test_report_rejects_non_finite_values(http, sid):
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    r = http.post(
        f"/v1/studies/{sid}/trials/{t['number']}/report",
        content=b'{"step": 1, "values": {"loss": NaN}}',
        headers={"content-type": "application/json"},
    )
    _problem(r, 422, "non_finite_value")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/studies/99999999999999999999",
        "/v1/studies/2147483648/best",
        "/v1/studies/1/trials/9223372036854775808",
    ],
)
def test_ids_beyond_the_database_range_are_422(http, sid, path):
    _problem(http.get(path), 422, "validation_error")


def test_huge_cursor_and_step_are_4xx(http, sid):
    _problem(http.get("/v1/studies", params={"cursor": str(2**70)}), 422, "invalid_cursor")
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    r = http.post(
        f"/v1/studies/{sid}/trials/{t['number']}/report",
        json={"step": 2**63, "values": {"loss": 1.0}},
    )
    _problem(r, 422, "validation_error")


def test_nan_in_free_form_json_is_422(http, sid):
    headers = {"content-type": "application/json"}
    r = http.patch(f"/v1/studies/{sid}", content=b'{"metadata": {"a": [1, NaN]}}', headers=headers)
    _problem(r, 422, "validation_error")
    body = b'{"name": "n", "parameters": [{"type": "int", "name": "i", "low": 0, "high": 3}],'
    r = http.post("/v1/studies", content=body + b' "metadata": {"x": Infinity}}', headers=headers)
    _problem(r, 422, "validation_error")


def test_bounds_whose_span_overflows_are_rejected(http):
    params = [_float(low=-1e308, high=1e308)]
    r = http.post("/v1/studies", json=study_body(parameters=params))
    _problem(r, 422, "invalid_search_space")
    r = http.post(
        "/v1/studies", json=study_body(parameters=[_float(low=-1e308, high=1e308, step=1.0)])
    )
    _problem(r, 422, "invalid_search_space")


def test_import_with_a_bad_name_or_repeated_steps_is_422(http, sid):
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    http.post(
        f"/v1/studies/{sid}/trials/{t['number']}/report", json={"step": 1, "values": {"a": 1}}
    )
    exported = http.get(f"/v1/studies/{sid}/export").json()
    _problem(
        http.post("/v1/studies/import", json=exported, params={"name": "x" * 300}),
        422,
        "validation_error",
    )
    exported["trials"][0]["measurements"] *= 2
    r = http.post("/v1/studies/import", json=exported, params={"name": "copy"})
    _problem(r, 422, "invalid_import")


def test_a_missing_trial_is_trial_not_found_on_every_trial_route(http, sid):
    for method, suffix, body in [
        ("GET", "", None),
        ("GET", "/measurements", None),
        ("POST", "/tell", {"values": {"value": 1}}),
        ("POST", "/report", {"step": 1, "values": {"a": 1.0}}),
        ("POST", "/heartbeat", {}),
    ]:
        r = http.request(method, f"/v1/studies/{sid}/trials/42{suffix}", json=body)
        _problem(r, 404, "trial_not_found")
    pbt = {"name": "pbt", "options": {"t_max": 10}}
    scheduler = http.post("/v1/studies", json=study_body("sched", engine=pbt)).json()["id"]
    _problem(http.get(f"/v1/studies/{scheduler}/trials/42/lineage"), 404, "trial_not_found")


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (SpaceError, 422, "invalid_search_space"),
        (EngineOptionsError, 422, "invalid_engine"),
        (EngineUnsupported, 422, "engine_unsupported"),
        (EngineRetryable, 503, "unavailable"),
    ],
)
def test_engine_errors_at_ask_are_answered_as_at_creation(
    http, sid, monkeypatch, error, status, code
):
    engine = http.app.state.store.parsed_study_for(sid).engine

    def fail(*args, **kwargs):
        raise error("the engine says no")

    monkeypatch.setattr(type(engine), "suggest", fail)
    _problem(http.post(f"/v1/studies/{sid}/ask", json={}), status, code)


def test_the_readme_lists_every_problem_code_with_its_status():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (\d{3}) \|", section, flags=re.M))
    assert rows == {code.value: str(code.status) for code in ProblemCode}


def test_the_readme_names_the_class_the_client_raises_for_each_code():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| \d{3} \|.*\| `(\w+)(?:\((\w+)\))?` \|$", section, re.M)
    assert {code for code, _, _ in rows} == {code.value for code in ProblemCode}
    for code, name, base in rows:
        raised = client_errors.error_for(ProblemCode(code).status, {"code": code, "detail": "-"})
        assert type(raised).__name__ == name
        if base:
            assert type(raised).__bases__ == (getattr(client_errors, base),)


# --- strict input (found by fuzzing, issue 21): 4xx, nothing stored ---------------------

JSON = {"Content-Type": "application/json"}


def nested_metadata(depth):
    """A PATCH body whose metadata nests ``depth`` objects, as text (json.dumps would recurse)."""
    return '{"metadata": ' + '{"a": ' * depth + "1" + "}" * depth + "}"


@pytest.mark.parametrize(
    ("depth", "status", "code", "words"),
    [
        (33, 422, "validation_error", "32 levels"),
        (256, 422, "validation_error", "32 levels"),
        # Deeper bodies, which Python's JSON parser refuses with a RecursionError, are sent to
        # a real server in tests/integration/test_server.py: after a RecursionError, CPython
        # 3.11's ast.parse fails in the same process (gh-106905), as tests/test_code_layout.py
        # would.
    ],
)
def test_metadata_nested_too_deep_is_refused_and_the_study_keeps_its_metadata(
    http, sid, depth, status, code, words
):
    assert http.patch(f"/v1/studies/{sid}", json={"metadata": {"k": 1}}).status_code == 200
    r = http.patch(f"/v1/studies/{sid}", content=nested_metadata(depth), headers=JSON)
    assert words in _problem(r, status, code)["detail"]
    assert http.get(f"/v1/studies/{sid}").json()["metadata"] == {"k": 1}


def test_metadata_32_levels_deep_is_stored(http, sid):
    r = http.patch(f"/v1/studies/{sid}", content=nested_metadata(32), headers=JSON)
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


@pytest.mark.parametrize("count", [True, "2", 1.5])
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
