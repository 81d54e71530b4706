"""The reads the dashboard is built on: trials sorted and paged on the server, and a study's
history downsampled on the server; on SQLite and PostgreSQL, whose JSON operators differ."""

import time

import pytest

from tests.conftest import FLOAT_X, make_test_client, study_body

COLOR = {"type": "categorical", "name": "color", "choices": ["red", "green", "blue"]}


@pytest.fixture(params=["sqlite", "postgresql"])
def http(request):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    with make_test_client(url) as client:
        yield client


def _study(http, **fields):
    r = http.post("/v1/studies", json=study_body(parameters=[FLOAT_X, COLOR], **fields))
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _completed(http, sid, x, color, **values):
    r = http.post(
        f"/v1/studies/{sid}/trials",
        json={"params": {"x": x, "color": color}, "values": values or {"value": x * x}},
    )
    assert r.status_code == 201, r.text
    return r.json()["number"]


def _failed(http, sid):
    number = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]["number"]
    r = http.post(f"/v1/studies/{sid}/trials/{number}/tell", json={"state": "failed"})
    assert r.status_code == 200, r.text
    return number


def _trials(http, sid, **query):
    r = http.get(f"/v1/studies/{sid}/trials", params=query)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def sid(http):
    sid = _study(http)
    # Values 9, 100, 0.25, 4 (numbers 0..3): sorted as text "100" would come before "4".
    for x, color in ((3.0, "red"), (-10 / 2, "blue"), (0.5, "green"), (2.0, "red")):
        _completed(http, sid, x, color)
    _failed(http, sid)  # number 4: no values
    return sid


def _numbers(page):
    return [t["number"] for t in page["data"]]


def test_trials_sort_numerically_on_values_with_trials_without_values_last(http, sid):
    assert _numbers(_trials(http, sid, sort="values.value")) == [2, 3, 0, 1, 4]
    assert _numbers(_trials(http, sid, sort="values.value", order="desc")) == [1, 0, 3, 2, 4]


def test_trials_sort_on_numeric_and_categorical_parameters_and_state(http, sid):
    xs = [t["params"]["x"] for t in _trials(http, sid, sort="params.x")["data"]]
    assert xs == sorted(xs) and len(xs) == 5
    colors = [t["params"]["color"] for t in _trials(http, sid, sort="params.color")["data"]]
    assert colors == sorted(colors) and len(colors) == 5
    assert _numbers(_trials(http, sid, sort="state", order="desc"))[0] == 4


def test_sorted_trials_page_by_cursor_and_by_offset(http, sid):
    first = _trials(http, sid, sort="values.value", limit=2)
    second = _trials(http, sid, sort="values.value", limit=2, cursor=first["next_cursor"])
    last = _trials(http, sid, sort="values.value", limit=2, cursor=second["next_cursor"])
    assert [*_numbers(first), *_numbers(second), *_numbers(last)] == [2, 3, 0, 1, 4]
    assert last["next_cursor"] is None
    assert _numbers(_trials(http, sid, sort="values.value", offset=2, limit=2)) == [0, 1]


def test_trials_in_descending_number_order_page_by_cursor(http, sid):
    first = _trials(http, sid, order="desc", limit=3)
    second = _trials(http, sid, order="desc", limit=3, cursor=first["next_cursor"])
    assert _numbers(first) + _numbers(second) == [4, 3, 2, 1, 0]


def test_the_default_trial_order_is_unchanged(http, sid):
    first = _trials(http, sid, limit=3)
    assert _numbers(first) == [0, 1, 2] and first["next_cursor"] == "2"


@pytest.mark.parametrize("sort", ["values.nope", "params.nope", "reason", "values"])
def test_an_unknown_sort_is_a_validation_error(http, sid, sort):
    r = http.get(f"/v1/studies/{sid}/trials", params={"sort": sort})
    assert r.status_code == 422
    assert r.json()["code"] == "validation_error" and sort in r.json()["detail"]


def test_history_marks_stale_trials_without_counting_them_finished(http, sid):
    r = http.post(f"/v1/studies/{sid}/ask", json={"worker_id": "lost", "lease_seconds": 0.05})
    (lost,) = r.json()["trials"]
    deadline = time.monotonic() + 10
    while http.get(f"/v1/studies/{sid}/trials/{lost['number']}").json()["state"] != "stale":
        assert time.monotonic() < deadline, "the reaper never expired the lease"
        time.sleep(0.1)
    body = http.get(f"/v1/studies/{sid}/history").json()
    assert body["finished"] == 5
    assert (lost["number"], "stale", None) in [
        (p["number"], p["state"], p["values"]) for p in body["points"]
    ]


def test_history_has_every_finished_trial_and_the_best_so_far(http, sid):
    body = http.get(f"/v1/studies/{sid}/history").json()
    assert body["objectives"] == ["value"]
    assert body["finished"] == 5 and not body["downsampled"]
    assert [(p["number"], p["state"]) for p in body["points"]] == [
        (0, "completed"),
        (1, "completed"),
        (2, "completed"),
        (3, "completed"),
        (4, "failed"),
    ]
    assert body["best"] == {"value": [[0, 9.0], [2, 0.25]]}


def test_history_of_a_maximized_objective_climbs(http):
    sid = _study(http, objectives=[{"name": "score", "goal": "maximize"}])
    for x in (1.0, 3.0, 2.0, 4.0):
        _completed(http, sid, x, "red", score=x)
    best = http.get(f"/v1/studies/{sid}/history").json()["best"]
    assert best == {"score": [[0, 1.0], [1, 3.0], [3, 4.0]]}


def test_the_best_of_one_objective_is_ranked_in_sql_first_by_number_on_a_tie(http):
    sid = _study(http, objectives=[{"name": "score", "goal": "maximize"}])
    for x, color in ((4.0, "red"), (1.0, "red"), (4.0, "blue")):
        _completed(http, sid, x, color, score=x)
    assert http.get(f"/v1/studies/{sid}").json()["best_values"] == {"score": 4.0}
    (best,) = http.get(f"/v1/studies/{sid}/best").json()["trials"]
    assert best["number"] == 0 and best["params"]["color"] == "red"


def test_a_large_history_is_downsampled_keeping_extremes_and_failures(http):
    sid = _study(http)
    for i in range(300):
        _completed(http, sid, 0.0, "red", value=float(i % 7) - (i == 137) * 100)
    failed = _failed(http, sid)
    body = http.get(f"/v1/studies/{sid}/history", params={"max_points": 30}).json()
    assert body["finished"] == 301 and body["downsampled"]
    numbers = [p["number"] for p in body["points"]]
    assert len(numbers) <= 30 and numbers == sorted(set(numbers))
    assert 137 in numbers and failed in numbers
    assert body["best"]["value"] == [[0, 0.0], [137, -96.0]]


def test_history_and_sorted_trials_of_a_missing_study_are_404(http):
    assert http.get("/v1/studies/999/history").json()["code"] == "not_found"
    assert http.get("/v1/studies/999/trials", params={"sort": "state"}).status_code == 404
