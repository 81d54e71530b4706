import csv
import io

from tests.conftest import study_body


def _filled_study(http):
    body = study_body(
        parameters=[
            {"type": "float", "name": "lr", "low": 1e-4, "high": 1.0, "log": True},
            {"type": "int", "name": "layers", "low": 1, "high": 4},
            {"type": "categorical", "name": "act", "choices": ["relu", "tanh", True, 3]},
            {"type": "fixed", "name": "seed", "value": 7},
        ],
        constraints=[{"name": "mem", "op": "<=", "threshold": 2.0}],
        metadata={"owner": "me"},
    )
    sid = http.post("/v1/studies", json=body).json()["id"]
    trials = http.post(f"/v1/studies/{sid}/ask", json={"count": 5}).json()["trials"]
    for i, t in enumerate(trials[:3]):
        http.post(
            f"/v1/studies/{sid}/trials/{t['number']}/tell",
            json={"values": {"value": float(i)}, "constraints": {"mem": float(i)}},
        )
    http.post(
        f"/v1/studies/{sid}/trials/{trials[3]['number']}/tell",
        json={"state": "failed", "reason": "boom"},
    )
    http.post(
        f"/v1/studies/{sid}/trials/{trials[4]['number']}/report",
        json={"step": 3, "values": {"loss": 0.5}, "checkpoint": "ck3"},
    )
    return sid


def test_export_then_import_gives_the_same_trials(http):
    sid = _filled_study(http)
    exported = http.get(f"/v1/studies/{sid}/export").json()
    assert exported["format"] == "asktell.study/v1" and len(exported["trials"]) == 5
    r = http.post("/v1/studies/import", json=exported, params={"name": "copy"})
    assert r.status_code == 201, r.text
    copy_id = r.json()["id"]
    again = http.get(f"/v1/studies/{copy_id}/export").json()
    assert again["study"]["name"] == "copy"
    keys = ("number", "params", "values", "constraints", "reason", "measurements")
    for a, b in zip(exported["trials"], again["trials"], strict=True):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
        # A trial running at export time comes back stale: no worker holds it here.
        assert b["state"] == ("stale" if a["state"] == "running" else a["state"])
    assert again["study"]["parameters"] == exported["study"]["parameters"]
    # The copy continues numbering after the imported trials.
    (t,) = http.post(f"/v1/studies/{copy_id}/ask", json={}).json()["trials"]
    assert t["number"] == 4 and t["retries"] == 1
    (t,) = http.post(f"/v1/studies/{copy_id}/ask", json={}).json()["trials"]
    assert t["number"] == 5


def test_an_imported_random_study_does_not_repeat_its_points(http):
    sid = http.post("/v1/studies", json=study_body("orig", seed=5)).json()["id"]
    first = http.post(f"/v1/studies/{sid}/ask", json={"count": 3}).json()["trials"]
    exported = http.get(f"/v1/studies/{sid}/export").json()
    copy_id = http.post("/v1/studies/import", json=exported, params={"name": "c"}).json()["id"]
    served = http.post(f"/v1/studies/{copy_id}/ask", json={"count": 6}).json()["trials"]
    new = [t["params"] for t in served if t["number"] >= 3]
    assert len(new) == 3 and not any(p in [t["params"] for t in first] for p in new)


def test_import_under_a_taken_name_is_409(http):
    sid = _filled_study(http)
    exported = http.get(f"/v1/studies/{sid}/export").json()
    r = http.post("/v1/studies/import", json=exported)
    assert r.status_code == 409 and r.json()["code"] == "study_exists"


def test_import_rejects_a_trial_outside_the_space(http):
    sid = _filled_study(http)
    exported = http.get(f"/v1/studies/{sid}/export").json()
    exported["trials"][0]["params"]["layers"] = 99
    r = http.post("/v1/studies/import", json=exported, params={"name": "bad"})
    assert r.status_code == 422 and r.json()["code"] == "invalid_import"
    assert http.get("/v1/studies").json()["data"][-1]["name"] != "bad"


def test_csv_export_has_one_row_per_trial(http):
    sid = _filled_study(http)
    r = http.get(f"/v1/studies/{sid}/export", params={"format": "csv"})
    assert r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == 5
    assert rows[0]["state"] == "completed" and rows[0]["values.value"] == "0.0"
    assert rows[3]["reason"] == "boom" and rows[0]["params.seed"] == "7"
    assert set(rows[0]) >= {"params.lr", "params.layers", "params.act", "constraints.mem"}
