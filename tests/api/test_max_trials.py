"""A study's trial budget ``max_trials``: asks beyond it are refused with 409
``max_trials_reached``; running and finished trials count; PATCH changes it; export and import
carry it; get-or-create does not compare it."""

from tests.conftest import study_body


def _create(http, **fields):
    r = http.post("/v1/studies", json=study_body(**fields))
    assert r.status_code == 201, r.text
    return r.json()


def _ask(http, sid, count=1, **body):
    return http.post(f"/v1/studies/{sid}/ask", json={"count": count, **body})


def _tell(http, sid, number, value=1.0):
    r = http.post(f"/v1/studies/{sid}/trials/{number}/tell", json={"values": {"value": value}})
    assert r.status_code == 200, r.text


def test_asks_stop_at_the_budget_counting_running_and_finished_trials(http):
    study = _create(http, max_trials=3)
    sid = study["id"]
    assert study["max_trials"] == 3
    first = _ask(http, sid, 2).json()["trials"]
    _tell(http, sid, first[0]["number"])
    # One completed and one running leave room for one: a batch of two gets one.
    assert len(_ask(http, sid, 2).json()["trials"]) == 1
    r = _ask(http, sid)
    assert r.status_code == 409
    assert r.json()["code"] == "max_trials_reached"
    assert r.headers["content-type"] == "application/problem+json"
    # A failed trial counts too.
    http.post(f"/v1/studies/{sid}/trials/{first[1]['number']}/tell", json={"state": "failed"})
    assert _ask(http, sid).json()["code"] == "max_trials_reached"
    assert http.get(f"/v1/studies/{sid}").json()["trial_counts"] == {
        "completed": 1,
        "failed": 1,
        "running": 1,
    }


def test_a_worker_still_gets_its_own_running_trial_back(http):
    sid = _create(http, max_trials=1)["id"]
    (mine,) = _ask(http, sid, worker_id="w1").json()["trials"]
    again = _ask(http, sid, worker_id="w1")
    assert again.status_code == 200
    assert [t["number"] for t in again.json()["trials"]] == [mine["number"]]
    assert _ask(http, sid, worker_id="w2").json()["code"] == "max_trials_reached"


def test_enqueued_trials_count_once_handed_out(http):
    sid = _create(http, max_trials=2)["id"]
    for x in (0.5, 1.5, 2.5):
        assert http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": x, "y": 0}}).is_success
    # Waiting trials do not count; each handed out does.
    assert [t["params"]["x"] for t in _ask(http, sid, 3).json()["trials"]] == [0.5, 1.5]
    assert _ask(http, sid).json()["code"] == "max_trials_reached"


def test_patch_raises_or_removes_the_budget(http):
    sid = _create(http, max_trials=1)["id"]
    _ask(http, sid)
    assert _ask(http, sid).status_code == 409
    r = http.patch(f"/v1/studies/{sid}", json={"max_trials": 2})
    assert r.status_code == 200 and r.json()["max_trials"] == 2
    assert _ask(http, sid).status_code == 200
    assert _ask(http, sid).status_code == 409
    # Another change leaves the budget as it is; null removes it.
    assert http.patch(f"/v1/studies/{sid}", json={"metadata": {"a": 1}}).json()["max_trials"] == 2
    assert http.patch(f"/v1/studies/{sid}", json={"max_trials": None}).json()["max_trials"] is None
    assert len(_ask(http, sid, 5).json()["trials"]) == 5


def test_get_or_create_ignores_the_budget_and_a_bad_one_is_refused(http):
    sid = _create(http, max_trials=5)["id"]
    again = http.post("/v1/studies", json=study_body(max_trials=7))
    assert again.status_code == 200
    assert again.json()["id"] == sid and again.json()["max_trials"] == 5
    assert http.post("/v1/studies", json=study_body("b")).json()["max_trials"] is None
    r = http.post("/v1/studies", json=study_body("c", max_trials=0))
    assert r.status_code == 422 and r.json()["code"] == "validation_error"


def test_export_and_import_carry_the_budget(http):
    sid = _create(http, max_trials=4)["id"]
    exported = http.get(f"/v1/studies/{sid}/export").json()
    assert exported["study"]["max_trials"] == 4
    copy = http.post("/v1/studies/import", params={"name": "copy"}, json=exported)
    assert copy.status_code == 201 and copy.json()["max_trials"] == 4


def test_a_gp_study_stops_at_its_budget(http):
    sid = _create(http, max_trials=2, engine={"name": "gp"})["id"]
    for _ in range(2):
        (t,) = _ask(http, sid).json()["trials"]
        _tell(http, sid, t["number"], t["params"]["x"] ** 2)
    assert _ask(http, sid).json()["code"] == "max_trials_reached"
