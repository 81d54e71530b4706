"""Study and trial notes, the last heartbeat of a running trial, and the intermediate-value
curves of a study's trials (GET /v1/studies/{id}/measurements)."""

import csv
import io
import json
import time
from datetime import datetime

import pytest

from tests.conftest import make_test_client, study_body


@pytest.fixture(params=["sqlite", "postgresql"])
def on_both(request):
    """The app on SQLite and on PostgreSQL: the curves are downsampled in SQL."""
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    with make_test_client(url) as test_client:
        yield test_client


def _study(http, name="demo", **fields):
    r = http.post("/v1/studies", json=study_body(name, **fields))
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _ask(http, sid, count=1, **body):
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": count, **body})
    assert r.status_code == 200, r.text
    return r.json()["trials"]


def _report(http, sid, number, step, value):
    r = http.post(
        f"/v1/studies/{sid}/trials/{number}/report", json={"step": step, "values": {"value": value}}
    )
    assert r.status_code == 201, r.text


def _tell(http, sid, number, value):
    r = http.post(f"/v1/studies/{sid}/trials/{number}/tell", json={"values": {"value": value}})
    assert r.status_code == 200, r.text


def test_study_notes_are_set_replaced_and_removed_by_patch(http):
    sid = _study(http)
    assert http.get(f"/v1/studies/{sid}").json()["notes"] is None
    before = http.get(f"/v1/studies/{sid}").json()["revision"]
    r = http.patch(f"/v1/studies/{sid}", json={"notes": "lr sweep\nsecond line"})
    assert r.status_code == 200 and r.json()["notes"] == "lr sweep\nsecond line"
    assert r.json()["revision"] == before + 1
    # Other fields leave the notes alone; an empty text removes them.
    http.patch(f"/v1/studies/{sid}", json={"state": "paused"})
    assert http.get(f"/v1/studies/{sid}").json()["notes"] == "lr sweep\nsecond line"
    assert http.patch(f"/v1/studies/{sid}", json={"notes": ""}).json()["notes"] is None


def test_notes_longer_than_the_bound_are_refused(http):
    sid = _study(http)
    (trial,) = _ask(http, sid)
    r = http.patch(f"/v1/studies/{sid}", json={"notes": "x" * 10_001})
    assert r.status_code == 422 and r.json()["code"] == "validation_error"
    r = http.put(f"/v1/studies/{sid}/trials/{trial['number']}/note", json={"note": "x" * 10_001})
    assert r.status_code == 422 and r.json()["code"] == "validation_error"
    assert http.patch(f"/v1/studies/{sid}", json={"notes": "x" * 10_000}).status_code == 200


def test_a_trial_note_is_put_in_any_state_and_shown_in_reads(http):
    sid = _study(http)
    running, done = _ask(http, sid, count=2)
    _tell(http, sid, done["number"], 1.0)
    before = http.get(f"/v1/studies/{sid}").json()["revision"]
    for trial, text in ((running, "still going"), (done, "diverged at step 40")):
        r = http.put(f"/v1/studies/{sid}/trials/{trial['number']}/note", json={"note": text})
        assert r.status_code == 200 and r.json()["note"] == text
    assert http.get(f"/v1/studies/{sid}").json()["revision"] == before + 2
    got = http.get(f"/v1/studies/{sid}/trials/{done['number']}").json()
    assert got["note"] == "diverged at step 40" and got["values"] == {"value": 1.0}
    listed = http.get(f"/v1/studies/{sid}/trials").json()["data"]
    assert [t["note"] for t in listed] == ["still going", "diverged at step 40"]
    r = http.put(f"/v1/studies/{sid}/trials/{done['number']}/note", json={"note": ""})
    assert r.json()["note"] is None


def test_a_note_on_a_missing_trial_or_study_is_a_404(http):
    sid = _study(http)
    r = http.put(f"/v1/studies/{sid}/trials/7/note", json={"note": "a"})
    assert r.status_code == 404 and r.json()["code"] == "trial_not_found"
    r = http.put("/v1/studies/999/trials/0/note", json={"note": "a"})
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = http.put(f"/v1/studies/{sid}/trials/0/note", json={"text": "a"})
    assert r.status_code == 422 and r.json()["code"] == "validation_error"


def test_notes_go_through_export_and_import(http):
    sid = _study(http)
    a, _ = _ask(http, sid, count=2)
    _tell(http, sid, a["number"], 2.0)
    http.patch(f"/v1/studies/{sid}", json={"notes": "baseline run"})
    http.put(f"/v1/studies/{sid}/trials/{a['number']}/note", json={"note": "good"})
    exported = http.get(f"/v1/studies/{sid}/export").json()
    assert exported["notes"] == "baseline run"
    assert [t["note"] for t in exported["trials"]] == ["good", None]
    r = http.post("/v1/studies/import", json=exported, params={"name": "copy"})
    assert r.status_code == 201, r.text
    copy = r.json()
    assert copy["notes"] == "baseline run"
    notes = [t["note"] for t in http.get(f"/v1/studies/{copy['id']}/trials").json()["data"]]
    assert notes == ["good", None]


@pytest.mark.parametrize("text", ['=HYPERLINK("http://x")', "+1", "-2", "@SUM(A1)", "\tx"])
def test_csv_export_has_the_note_and_keeps_formulas_as_text(http, text):
    sid = _study(http)
    (trial,) = _ask(http, sid)
    http.put(f"/v1/studies/{sid}/trials/{trial['number']}/note", json={"note": text})
    http.post(
        f"/v1/studies/{sid}/trials/{trial['number']}/tell",
        json={"state": "failed", "reason": text},
    )
    rows = list(csv.DictReader(io.StringIO(http.get(f"/v1/studies/{sid}/export?format=csv").text)))
    assert rows[0]["note"] == "'" + text and rows[0]["reason"] == "'" + text


def test_csv_export_keeps_plain_notes_as_they_are(http):
    sid = _study(http)
    (trial,) = _ask(http, sid)
    http.put(f"/v1/studies/{sid}/trials/{trial['number']}/note", json={"note": 'a, "b"\nc'})
    rows = list(csv.DictReader(io.StringIO(http.get(f"/v1/studies/{sid}/export?format=csv").text)))
    assert rows[0]["note"] == 'a, "b"\nc' and rows[0]["reason"] == ""


def _at(text):
    return datetime.fromisoformat(text)


def test_heartbeat_at_is_set_by_ask_heartbeat_and_report(http):
    sid = _study(http)
    (trial,) = _ask(http, sid, worker_id="w1")
    number = trial["number"]
    asked = _at(trial["heartbeat_at"])
    assert asked == _at(trial["started_at"])
    r = http.post(f"/v1/studies/{sid}/trials/{number}/heartbeat", json={"worker_id": "w1"})
    beat = _at(r.json()["heartbeat_at"])
    assert beat > asked
    _report(http, sid, number, 1, 0.5)
    reported = _at(http.get(f"/v1/studies/{sid}/trials/{number}").json()["heartbeat_at"])
    assert reported > beat
    # A waiting (enqueued) trial has had no worker yet.
    r = http.post(f"/v1/studies/{sid}/trials", json={"params": {"x": 0.0, "y": 0.0}})
    assert r.json()["heartbeat_at"] is None


def test_a_trial_re_served_after_its_lease_expired_counts_a_retry_and_a_new_heartbeat(http):
    sid = _study(http, lease_seconds=0.05)
    (trial,) = _ask(http, sid, worker_id="w1")
    # The reaper (every 0.2 s in tests) makes it stale; the next ask re-serves it.
    for _ in range(100):
        state = http.get(f"/v1/studies/{sid}/trials/{trial['number']}").json()["state"]
        if state == "stale":
            break
        time.sleep(0.05)
    (again,) = _ask(http, sid, worker_id="w2", lease_seconds=60)
    assert again["number"] == trial["number"] and again["retries"] == 1
    assert again["worker_id"] == "w2"
    assert _at(again["heartbeat_at"]) > _at(trial["heartbeat_at"])


def test_curves_of_recent_trials_are_downsampled_per_trial(on_both):
    http = on_both
    sid = _study(http)
    trials = _ask(http, sid, count=4)
    numbers = [t["number"] for t in trials]
    for step in range(50):
        _report(http, sid, numbers[0], step, float(step))
    _report(http, sid, numbers[1], 0, 1.0)
    _report(http, sid, numbers[2], 5, 2.0)
    # numbers[3] never reports: not drawn among the recent.
    r = http.get(f"/v1/studies/{sid}/measurements", params={"max_points_per_trial": 10})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["selection"] == "recent" and body["objective"] == "value"
    assert [c["number"] for c in body["trials"]] == [numbers[2], numbers[1], numbers[0]]
    assert not body["truncated"]
    long = body["trials"][2]
    steps = [p["step"] for p in long["points"]]
    assert long["measurements"] == 50 and len(steps) <= 10
    assert steps[0] == 0 and steps[-1] == 49 and steps == sorted(steps)
    assert all(p["values"] == {"value": float(p["step"])} for p in long["points"])
    assert body["trials"][0]["points"] == [{"step": 5, "values": {"value": 2.0}}]
    r = http.get(f"/v1/studies/{sid}/measurements", params={"max_trials": 2})
    assert r.json()["truncated"] and len(r.json()["trials"]) == 2


def test_curves_follow_the_trial_filter(http):
    """The dashboard's brushes filter the intermediate-value curves like every other view."""
    sid = _study(http, objectives=[{"name": "value", "goal": "maximize"}])
    trials = _ask(http, sid, count=3)
    for t, final in zip(trials, (1.0, 3.0, 2.0), strict=True):
        _report(http, sid, t["number"], 1, 0.5)
        _tell(http, sid, t["number"], final)
    kept = json.dumps({"values.value": {"min": 1.5}})
    for selection in ("recent", "best"):
        r = http.get(
            f"/v1/studies/{sid}/measurements", params={"selection": selection, "filter": kept}
        )
        assert r.status_code == 200, r.text
        numbers = {c["number"] for c in r.json()["trials"]}
        assert numbers == {trials[1]["number"], trials[2]["number"]}
    r = http.get(f"/v1/studies/{sid}/measurements", params={"filter": '{"nope": {"min": 1}}'})
    assert r.status_code == 422 and r.json()["code"] == "validation_error"


def test_curves_of_the_best_and_of_the_running_trials(http):
    sid = _study(http, objectives=[{"name": "value", "goal": "maximize"}])
    trials = _ask(http, sid, count=3)
    for t, final in zip(trials, (1.0, 3.0, None), strict=True):
        _report(http, sid, t["number"], 1, 0.5)
        if final is not None:
            _tell(http, sid, t["number"], final)
    best = http.get(f"/v1/studies/{sid}/measurements", params={"selection": "best"}).json()
    assert [c["number"] for c in best["trials"]] == [trials[1]["number"], trials[0]["number"]]
    assert best["trials"][0]["values"] == {"value": 3.0}
    assert best["trials"][0]["state"] == "completed"
    running = http.get(
        f"/v1/studies/{sid}/measurements",
        params={"selection": "running", "max_points_per_trial": 2},
    ).json()
    assert [(c["number"], c["state"]) for c in running["trials"]] == [
        (trials[2]["number"], "running")
    ]


def test_curves_answer_every_running_trial_even_without_measurements(http):
    sid = _study(http)
    (trial,) = _ask(http, sid)
    body = http.get(f"/v1/studies/{sid}/measurements", params={"selection": "running"}).json()
    assert body["trials"] == [
        {
            "number": trial["number"],
            "state": "running",
            "values": None,
            "measurements": 0,
            "points": [],
        }
    ]


def test_curves_bounds_and_errors(http):
    sid = _study(http)
    base = f"/v1/studies/{sid}/measurements"
    for params in (
        {"max_trials": 51},
        {"max_trials": 0},
        {"max_points_per_trial": 1},
        {"max_points_per_trial": 501},
        {"selection": "all"},
    ):
        r = http.get(base, params=params)
        assert r.status_code == 422 and r.json()["code"] == "validation_error", params
    r = http.get(base, params={"selection": "best", "objective": "nope"})
    assert r.status_code == 422 and r.json()["code"] == "unknown_objective"
    assert http.get("/v1/studies/999/measurements").json()["code"] == "not_found"
