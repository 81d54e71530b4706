"""Filtering trials on the server (``service.trial_fields``): the trial list, the history, the
Pareto front and the points of parameter charts take one ``filter``, on SQLite and PostgreSQL,
whose JSON operators differ."""

import json

import pytest

from tests.conftest import FLOAT_X, make_test_client, study_body

MIXED = {"type": "categorical", "name": "mixed", "choices": ["red", 1, 2.5, True]}
WORKERS = ("w-a", "w-b")


@pytest.fixture(params=["sqlite", "postgresql"])
def http(request):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    with make_test_client(url) as client:
        yield client


@pytest.fixture
def sid(http):
    """Trials 0..7 with x = number - 4 and mixed cycling through its choices; 0..5 completed by
    worker w-a or w-b in turn (value x * x), 6 failed, 7 running."""
    r = http.post("/v1/studies", json=study_body(parameters=[FLOAT_X, MIXED]))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    for n in range(8):
        params = {"x": n - 4.0, "mixed": MIXED["choices"][n % 4]}
        r = http.post(f"/v1/studies/{sid}/trials", json={"params": params})
        assert r.status_code == 201, r.text
    for n in range(8):
        worker = WORKERS[n % 2]
        r = http.post(f"/v1/studies/{sid}/ask", json={"worker_id": worker})
        assert r.json()["trials"][0]["number"] == n
        if n < 6:
            told = {"values": {"value": (n - 4.0) ** 2}}
        elif n == 6:
            told = {"state": "failed"}
        else:
            continue
        r = http.post(f"/v1/studies/{sid}/trials/{n}/tell", json=told)
        assert r.status_code == 200, r.text
    return sid


def _numbers(http, sid, conditions, **query):
    r = http.get(f"/v1/studies/{sid}/trials", params={"filter": json.dumps(conditions), **query})
    assert r.status_code == 200, r.text
    return [t["number"] for t in r.json()["data"]]


def test_a_numeric_range_is_inclusive_and_either_end_may_be_open(http, sid):
    assert _numbers(http, sid, {"params.x": {"min": -1, "max": 1}}) == [3, 4, 5]
    assert _numbers(http, sid, {"params.x": {"min": 2}}) == [6, 7]
    assert _numbers(http, sid, {"values.value": {"max": 1}}) == [3, 4, 5]


def test_trials_without_the_value_never_match(http, sid):
    assert _numbers(http, sid, {"values.value": {"min": -1e300}}) == [0, 1, 2, 3, 4, 5]


def test_categorical_choices_of_mixed_types_match_as_stored(http, sid):
    assert _numbers(http, sid, {"params.mixed": {"in": ["red"]}}) == [0, 4]
    assert _numbers(http, sid, {"params.mixed": {"in": [2.5]}}) == [2, 6]
    # As in Python, true is the choice 1.
    assert _numbers(http, sid, {"params.mixed": {"in": [1]}}) == [1, 3, 5, 7]
    assert _numbers(http, sid, {"params.mixed": {"in": [True, "red"]}}) == [0, 1, 3, 4, 5, 7]
    assert _numbers(http, sid, {"params.mixed": {"in": []}}) == []


def test_conditions_on_state_worker_and_number_all_apply(http, sid):
    conditions = {"state": {"in": ["completed"]}, "worker_id": {"in": ["w-b"]}}
    assert _numbers(http, sid, conditions) == [1, 3, 5]
    assert _numbers(http, sid, {**conditions, "number": {"min": 2}}) == [3, 5]


def test_duration_is_in_seconds_and_sorts_numerically(http, sid):
    assert _numbers(http, sid, {"duration": {"min": 0, "max": 3600}}) == [0, 1, 2, 3, 4, 5, 6]
    numbers = _numbers(http, sid, {}, sort="duration", order="desc")
    assert numbers[-1] == 7  # running: no duration, last


def test_a_filter_pages_with_the_cursor(http, sid):
    conditions = json.dumps({"params.x": {"min": -3}})
    r = http.get(f"/v1/studies/{sid}/trials", params={"filter": conditions, "limit": 3})
    page = r.json()
    assert [t["number"] for t in page["data"]] == [1, 2, 3]
    query = {"filter": conditions, "limit": 3, "cursor": page["next_cursor"]}
    r = http.get(f"/v1/studies/{sid}/trials", params=query)
    assert [t["number"] for t in r.json()["data"]] == [4, 5, 6]


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ("[1]", "JSON object"),
        ("{not json", "filter"),
        ('{"params.nope": {"min": 1}}', "params.NAME"),
        ('{"params.mixed": {"min": 1}}', "not numeric"),
        ('{"params.x": {"min": "a"}}', "filter"),
        ('{"params.x": {"low": 1}}', "filter"),
    ],
)
def test_a_bad_filter_is_a_422_that_names_the_problem(http, sid, conditions, message):
    for path in ("trials", "history", "pareto", "points"):
        r = http.get(f"/v1/studies/{sid}/{path}", params={"filter": conditions})
        assert r.status_code == 422, (path, r.text)
        body = r.json()
        assert body["code"] == "validation_error"
        assert message in body["detail"]
        assert body["errors"][0]["field"] == "filter"


def test_history_and_points_read_only_the_filtered_trials(http, sid):
    conditions = json.dumps({"params.x": {"max": 0}})
    history = http.get(f"/v1/studies/{sid}/history", params={"filter": conditions}).json()
    assert [p["number"] for p in history["points"]] == [0, 1, 2, 3, 4]
    assert history["best"]["value"][-1] == [4, 0.0]
    points = http.get(f"/v1/studies/{sid}/points", params={"filter": conditions}).json()
    assert [p["number"] for p in points["points"]] == [0, 1, 2, 3, 4]
    assert points["points"][0]["params"] == {"x": -4.0, "mixed": "red"}
    assert points["parameters"] == ["x", "mixed"]


def test_points_take_states_and_carry_values(http, sid):
    r = http.get(f"/v1/studies/{sid}/points", params={"state": ["failed", "running"]})
    body = r.json()
    assert body["matched"] == 2 and not body["downsampled"]
    assert [(p["number"], p["state"], p["values"]) for p in body["points"]] == [
        (6, "failed", None),
        (7, "running", None),
    ]


def test_points_of_a_large_study_are_downsampled_keeping_the_best(http):
    r = http.post("/v1/studies", json=study_body(parameters=[FLOAT_X]))
    sid = r.json()["id"]
    xs = [((n * 37) % 200) / 40 - 2.5 for n in range(200)]
    for x in xs:
        r = http.post(
            f"/v1/studies/{sid}/trials", json={"params": {"x": x}, "values": {"value": x * x}}
        )
        assert r.status_code == 201
    body = http.get(f"/v1/studies/{sid}/points", params={"max_points": 50}).json()
    assert body["matched"] == 200 and body["downsampled"]
    numbers = [p["number"] for p in body["points"]]
    assert 45 <= len(numbers) <= 50 and numbers == sorted(numbers)
    assert numbers[0] == 0 and numbers[-1] == 199
    best_five = sorted(range(200), key=lambda n: xs[n] ** 2)[:5]
    assert set(best_five) <= set(numbers)
