import time

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.conftest import FLOAT_X, FLOAT_Y, study_body


@pytest.fixture
def sid(http):
    return http.post("/v1/studies", json=study_body()).json()["id"]


def _ask(http, sid, **body):
    r = http.post(f"/v1/studies/{sid}/ask", json=body)
    assert r.status_code == 200, r.text
    return r.json()["trials"]


def _tell(http, sid, number, **body):
    return http.post(f"/v1/studies/{sid}/trials/{number}/tell", json=body)


def test_ask_returns_exactly_count_trials_with_consecutive_numbers(http, sid):
    trials = _ask(http, sid, count=7)
    assert [t["number"] for t in trials] == list(range(7))
    assert all(t["state"] == "running" and -5 <= t["params"]["x"] <= 5 for t in trials)
    assert len({(t["params"]["x"], t["params"]["y"]) for t in trials}) == 7
    assert [t["number"] for t in _ask(http, sid, count=2)] == [7, 8]


def test_a_worker_that_asks_again_gets_its_unfinished_trials_first(http, sid):
    held = _ask(http, sid, count=2, worker_id="w1")
    other = _ask(http, sid, count=1, worker_id="w2")
    again = _ask(http, sid, count=3, worker_id="w1")
    assert [t["number"] for t in again[:2]] == [t["number"] for t in held]
    assert again[2]["number"] not in {t["number"] for t in held + other}
    _tell(http, sid, held[0]["number"], values={"value": 1.0})
    assert _ask(http, sid, count=1, worker_id="w1")[0]["number"] == held[1]["number"]


def test_enqueued_points_are_served_first_in_order(http, sid):
    for x in (1.0, 2.0):
        r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": x, "y": 0.0}})
        assert r.status_code == 201 and r.json()["state"] == "waiting"
    trials = _ask(http, sid, count=3)
    assert [t["params"]["x"] for t in trials[:2]] == [1.0, 2.0]
    assert [t["details"].get("source") for t in trials] == ["user", "user", "sobol"]


def test_enqueue_with_values_is_a_completed_warm_start(http, sid):
    r = http.post(
        f"/v1/studies/{sid}/trials", json={"params": {"x": 1.0, "y": 2.0}, "values": {"value": 0.5}}
    )
    assert r.json()["state"] == "completed"
    assert http.get(f"/v1/studies/{sid}/best").json()["trials"][0]["values"] == {"value": 0.5}


def test_enqueue_rejects_bad_params(http, sid):
    r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 9.0, "y": 0.0}})
    assert r.status_code == 422 and r.json()["code"] == "invalid_params"
    assert "outside" in r.json()["detail"]


def test_tell_then_tell_again_is_409_with_the_state(http, sid):
    (t,) = _ask(http, sid)
    assert _tell(http, sid, t["number"], values={"value": 1.5}).json()["state"] == "completed"
    r = _tell(http, sid, t["number"], values={"value": 2.0})
    assert r.status_code == 409
    assert r.json()["code"] == "trial_finished" and r.json()["state"] == "completed"


def test_failed_and_infeasible_trials_keep_a_reason(http, sid):
    a, b = _ask(http, sid, count=2)
    r = _tell(http, sid, a["number"], state="failed", reason="out of memory")
    assert r.json()["state"] == "failed" and r.json()["reason"] == "out of memory"
    assert _tell(http, sid, b["number"], state="infeasible").json()["state"] == "infeasible"
    assert http.get(f"/v1/studies/{sid}/best").json()["trials"] == []


def test_report_stores_measurements_and_extends_the_lease(http, sid):
    (t,) = _ask(http, sid, lease_seconds=30)
    n = t["number"]
    for step in (1, 2, 2):
        r = http.post(
            f"/v1/studies/{sid}/trials/{n}/report",
            json={"step": step, "values": {"loss": 1.0 / step}, "checkpoint": f"ck/{step}"},
        )
        assert r.status_code == 201
    ms = http.get(f"/v1/studies/{sid}/trials/{n}/measurements").json()
    assert [(m["step"], m["checkpoint"]) for m in ms] == [(1, "ck/1"), (2, "ck/2")]
    lease = http.get(f"/v1/studies/{sid}/trials/{n}").json()["lease_expires_at"]
    assert lease > t["lease_expires_at"]


def test_a_report_never_shortens_a_long_lease(http, sid):
    (t,) = _ask(http, sid, lease_seconds=86400)
    url = f"/v1/studies/{sid}/trials/{t['number']}"
    http.post(f"{url}/report", json={"step": 1, "values": {"loss": 1.0}})
    http.post(f"{url}/heartbeat", json={})
    assert http.get(url).json()["lease_expires_at"] == t["lease_expires_at"]


def test_a_heartbeat_from_a_worker_that_lost_its_trial_is_409(http, sid):
    (t,) = _ask(http, sid, worker_id="slow", lease_seconds=0.2)
    time.sleep(0.8)
    (again,) = _ask(http, sid, worker_id="fast")
    assert again["number"] == t["number"]
    url = f"/v1/studies/{sid}/trials/{t['number']}/heartbeat"
    r = http.post(url, json={"worker_id": "slow"})
    assert r.status_code == 409 and r.json()["code"] == "trial_reassigned"
    assert http.post(url, json={"worker_id": "fast"}).status_code == 200


def test_a_gp_study_runs_through_the_api(http):
    body = study_body(engine={"name": "gp", "options": {"n_initial": 4}}, seed=3)
    sid = http.post("/v1/studies", json=body).json()["id"]
    sources = []
    for _ in range(6):
        (t,) = _ask(http, sid, worker_id="w")
        sources.append(t["details"]["source"])
        value = (t["params"]["x"] - 1) ** 2 + (t["params"]["y"] + 1) ** 2
        assert _tell(http, sid, t["number"], values={"value": value}).status_code == 200
    assert sources[:4] == ["sobol"] * 4 and sources[4:] == ["gp", "gp"]
    study = http.get(f"/v1/studies/{sid}").json()
    assert study["engine_state_version"] == 6 and study["trial_counts"] == {"completed": 6}


def test_heartbeat_extends_the_lease(http, sid):
    (t,) = _ask(http, sid, lease_seconds=5)
    r = http.post(f"/v1/studies/{sid}/trials/{t['number']}/heartbeat", json={"lease_seconds": 600})
    assert r.status_code == 200
    assert r.json()["lease_expires_at"] > t["lease_expires_at"]


def test_an_expired_lease_requeues_the_trial_to_the_next_asker(http, sid):
    (t,) = _ask(http, sid, worker_id="slow", lease_seconds=0.2)
    time.sleep(0.8)  # the test app reaps every 0.2 s
    assert http.get(f"/v1/studies/{sid}/trials/{t['number']}").json()["state"] == "stale"
    (again,) = _ask(http, sid, worker_id="fast")
    assert again["number"] == t["number"] and again["params"] == t["params"]
    assert again["retries"] == 1 and again["worker_id"] == "fast"


def test_fail_policy_marks_an_expired_trial_failed(http):
    sid = http.post("/v1/studies", json=study_body(on_lease_expiry="fail")).json()["id"]
    (t,) = _ask(http, sid, lease_seconds=0.2)
    time.sleep(0.8)
    trial = http.get(f"/v1/studies/{sid}/trials/{t['number']}").json()
    assert trial["state"] == "failed" and "lease expired" in trial["reason"]


def test_an_expired_lease_is_handled_by_the_next_ask_before_the_reaper(sqlite_url):
    # The reaper of this app sleeps for an hour: only ask itself can apply the policy.
    app = create_app(Settings(database_url=sqlite_url, reaper_interval=3600))
    with TestClient(app) as http:
        for policy, state in (("fail", "failed"), ("requeue", "running")):
            body = study_body(policy, on_lease_expiry=policy)
            sid = http.post("/v1/studies", json=body).json()["id"]
            (t,) = _ask(http, sid, lease_seconds=0.05)
            time.sleep(0.1)
            assert len(_ask(http, sid, count=2, worker_id="next")) == 2
            assert http.get(f"/v1/studies/{sid}/trials/{t['number']}").json()["state"] == state


def test_retries_are_bounded_by_max_retries(http):
    sid = http.post("/v1/studies", json=study_body(max_retries=1)).json()["id"]
    (t,) = _ask(http, sid, lease_seconds=0.2)
    time.sleep(0.8)
    (again,) = _ask(http, sid, lease_seconds=0.2)
    assert again["number"] == t["number"]
    time.sleep(0.8)
    assert http.get(f"/v1/studies/{sid}/trials/{t['number']}").json()["state"] == "failed"


def test_a_late_tell_on_a_stale_trial_is_accepted(http, sid):
    (t,) = _ask(http, sid, lease_seconds=0.2)
    time.sleep(0.8)
    assert _tell(http, sid, t["number"], values={"value": 3.0}).json()["state"] == "completed"
    assert _ask(http, sid)[0]["number"] != t["number"]


def test_best_is_the_best_feasible_trial_under_constraints(http):
    body = study_body(
        objectives=[{"name": "loss", "goal": "maximize"}],
        constraints=[{"name": "mem", "op": "<=", "threshold": 10.0}],
    )
    sid = http.post("/v1/studies", json=body).json()["id"]
    a, b, c = _ask(http, sid, count=3)
    _tell(http, sid, a["number"], values={"loss": 5.0}, constraints={"mem": 20.0})
    _tell(http, sid, b["number"], values={"loss": 3.0}, constraints={"mem": 10.0})
    _tell(http, sid, c["number"], values={"loss": 1.0}, constraints={"mem": 1.0})
    best = http.get(f"/v1/studies/{sid}/best").json()["trials"]
    assert [t["number"] for t in best] == [b["number"]] and best[0]["feasible"] is True
    trial_a = http.get(f"/v1/studies/{sid}/trials/{a['number']}").json()
    assert trial_a["feasible"] is False


def test_best_without_a_feasible_trial_says_so_and_gives_the_least_violating_one(http):
    body = study_body(
        constraints=[
            {"name": "mem", "op": "<=", "threshold": 10.0},
            {"name": "acc", "op": ">=", "threshold": 0.9},
        ],
    )
    sid = http.post("/v1/studies", json=body).json()["id"]
    empty = http.get(f"/v1/studies/{sid}/best").json()
    assert empty["trials"] == [] and empty["feasible_found"] is False
    assert empty["least_violating"] is None and empty["total_violation"] is None
    a, b, c, d = _ask(http, sid, count=4)
    # Total violations: a 12 + 0, b 0.5 + 0.1, c 0 + 0.8; d failed (never counted).
    _tell(http, sid, a["number"], values={"value": 0.0}, constraints={"mem": 22.0, "acc": 0.95})
    _tell(http, sid, b["number"], values={"value": 9.0}, constraints={"mem": 10.5, "acc": 0.8})
    _tell(http, sid, c["number"], values={"value": 5.0}, constraints={"mem": 3.0, "acc": 0.1})
    _tell(http, sid, d["number"], state="failed", reason="crashed")
    best = http.get(f"/v1/studies/{sid}/best").json()
    assert best["trials"] == [] and best["feasible_found"] is False
    assert best["least_violating"]["number"] == b["number"]
    assert best["total_violation"] == pytest.approx(0.6)
    (e,) = _ask(http, sid)
    _tell(http, sid, e["number"], values={"value": 7.0}, constraints={"mem": 1.0, "acc": 0.99})
    best = http.get(f"/v1/studies/{sid}/best").json()
    assert [t["number"] for t in best["trials"]] == [e["number"]]
    assert best["feasible_found"] is True and best["least_violating"] is None


def test_best_of_several_objectives_is_the_pareto_set_with_hypervolume(http):
    body = study_body(
        parameters=[FLOAT_X, FLOAT_Y],
        objectives=[
            {"name": "f1", "goal": "minimize", "reference": 4.0},
            {"name": "f2", "goal": "maximize", "reference": 0.0},
        ],
    )
    sid = http.post("/v1/studies", json=body).json()["id"]
    results = [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (3.0, 2.5)]  # the last is dominated
    for t, (f1, f2) in zip(_ask(http, sid, count=4), results, strict=True):
        _tell(http, sid, t["number"], values={"f1": f1, "f2": f2})
    best = http.get(f"/v1/studies/{sid}/best").json()
    assert sorted(t["values"]["f1"] for t in best["trials"]) == [1.0, 2.0, 3.0]
    # Minimizing (f1, -f2) with reference (4, 0): the staircase 3*1 + 2*1 + 1*1 = 6.
    assert best["hypervolume"] == pytest.approx(6.0)
    assert best["reference_point"] == {"f1": 4.0, "f2": 0.0}


def test_list_trials_filters_by_state_and_pages(http, sid):
    trials = _ask(http, sid, count=5)
    for t in trials[:3]:
        _tell(http, sid, t["number"], values={"value": 1.0})
    page = http.get(f"/v1/studies/{sid}/trials", params={"state": "completed", "limit": 2}).json()
    assert [t["number"] for t in page["data"]] == [0, 1] and page["next_cursor"] == "1"
    rest = http.get(
        f"/v1/studies/{sid}/trials", params={"state": "completed", "cursor": page["next_cursor"]}
    ).json()
    assert [t["number"] for t in rest["data"]] == [2] and rest["next_cursor"] is None
    running = http.get(f"/v1/studies/{sid}/trials", params={"state": "running"}).json()
    assert [t["number"] for t in running["data"]] == [3, 4]
