"""The ``auto`` engine through the HTTP API: trial details and the engine state name the engine
it chose and why, it switches from ``gp`` to ``turbo-enn`` at ``switch_at``, and the engine
panel shows its choice with the delegate's diagnostics; on SQLite and PostgreSQL (the panel
reads the details in SQL).

Three parameters: ``gp``'s initial design is 7 Sobol points, so no GP is fitted before the
switch at 6 completed trials."""

from __future__ import annotations

import pytest

from tests.conftest import FLOAT_X, FLOAT_Y, SEGMENT_OBJECTIVES, make_test_client, study_body

FLOAT_Z = {"type": "float", "name": "z", "low": -5.0, "high": 5.0}


@pytest.fixture(params=["sqlite", "postgresql"])
def on_both(request):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    with make_test_client(url) as test_client:
        yield test_client


def _ask_tell(http, sid: int, count: int) -> list[dict]:
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": count})
    assert r.status_code == 200, r.text
    trials = r.json()["trials"]
    for t in trials:
        p = t["params"]
        value = (p["x"] - 1) ** 2 + p["y"] ** 2 + p["z"] ** 2
        url = f"/v1/studies/{sid}/trials/{t['number']}/tell"
        assert http.post(url, json={"values": {"value": value}}).status_code == 200
    return trials


def test_an_auto_study_names_its_engine_and_switches(on_both):
    http = on_both
    assert "auto" in http.get("/v1/engines").json()
    body = study_body(
        "auto",
        parameters=[FLOAT_X, FLOAT_Y, FLOAT_Z],
        engine={"name": "auto", "options": {"switch_at": 6, "noisy": False}},
        seed=4,
    )
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    trials = [t for _ in range(5) for t in _ask_tell(http, sid, 2)]
    marks = [t["details"]["auto"] for t in trials]
    assert [m["engine"] for m in marks] == ["gp"] * 6 + ["turbo-enn"] * 4
    assert marks[0] == {
        "engine": "gp",
        "rule": "small",
        "reason": "0 trials < switch_at 6: exact GP BO",
    }
    assert marks[6]["rule"] == "large" and "switch_at 6" in marks[6]["reason"]
    assert [t["details"]["source"] for t in trials[6:]] == ["turbo-enn"] * 4
    # The stored trials carry the same details.
    stored = http.get(f"/v1/studies/{sid}/trials/7").json()
    assert stored["details"]["auto"]["engine"] == "turbo-enn"

    state = http.get(f"/v1/studies/{sid}").json()["engine_state"]
    assert state["engine"] == "turbo-enn" and state["rule"] == "large"
    assert state["switches"] == [{"at": 6, "from": "gp", "to": "turbo-enn"}]
    assert set(state["engines"]) == {"gp", "turbo-enn"}

    panel = http.get(f"/v1/studies/{sid}/engine").json()
    assert panel["engine"] == "auto" and panel["description"].startswith("auto chose turbo-enn")
    series = {s["name"]: s["points"] for c in panel["charts"] for s in c["series"]}
    # The choice: where it changes, and the last trial.
    assert series["auto_engine"] == [[0, "gp"], [6, "turbo-enn"], [9, "turbo-enn"]]
    assert [n for n, _ in series["sigma"]] == [6, 7, 8, 9]
    facts = {f["name"]: f["value"] for f in panel["facts"]}
    assert facts["auto.engine"] == "turbo-enn" and facts["auto.switch at 6"] == "gp -> turbo-enn"
    assert facts["turbo-enn.cma.sigma"] == state["engines"]["turbo-enn"]["cma"]["sigma"]


def test_auto_takes_several_objectives_and_refuses_bad_options(http):
    body = study_body("mo", objectives=SEGMENT_OBJECTIVES, engine={"name": "auto"})
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 201, r.text
    trials = http.post(f"/v1/studies/{r.json()['id']}/ask", json={"count": 2}).json()["trials"]
    assert [t["details"]["auto"]["engine"] for t in trials] == ["pom", "pom"]
    for options in ({"switch_at": 0}, {"expected_trials": -1}, {"noisy": 1}, {"foo": 1}):
        r = http.post("/v1/studies", json=study_body(engine={"name": "auto", "options": options}))
        assert r.status_code == 422 and r.json()["code"] == "invalid_engine", options
