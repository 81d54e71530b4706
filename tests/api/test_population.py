"""GET /v1/studies/{id}/population, the dashboard's lineage view of a scheduler study: the
lineage forest agrees with each unit's ``/lineage``, the checkpoints with ``/checkpoints``, the
best unit with ``/best/schedule``; bounded by ``max_units`` and ``max_checkpoints``; errors;
the sync and async clients' ``population``."""

from __future__ import annotations

import pytest

from client import Client
from tests.client.test_async import run
from tests.client.units import LR, PBT_STUDY, CurveTrainer
from tests.conftest import FLOAT_X


def _trained(client: Client, name: str = "pbt"):
    study = client.create_study(name, [LR], **PBT_STUDY)
    assert study.train(CurveTrainer(), worker_id="w") >= 6
    return study


def test_the_forest_matches_every_units_lineage_and_the_checkpoints(client, http):
    study = _trained(client)
    r = http.get(f"/v1/studies/{study.id}/population")
    assert r.status_code == 200, r.text
    population = r.json()
    trials = list(study.trials())
    assert population["objective"] == "accuracy" and population["goal"] == "maximize"
    assert population["members"] == [0, 1, 2]
    assert population["total_units"] == len(trials) and not population["truncated"]
    assert [u["trial"] for u in population["units"]] == [t.number for t in trials]
    members = {t.number: t.unit.member for t in trials}
    for unit, trial in zip(population["units"], trials, strict=True):
        segments = study.lineage(trial.number).segments
        parent = segments[-2].trial if len(segments) > 1 else None
        assert unit["parent"] == parent == trial.unit.start.trial
        assert unit["parent_member"] == (None if parent is None else members[parent])
        assert unit["member"] == trial.unit.member and unit["reason"] == trial.unit.reason
        assert (unit["from_step"], unit["to_step"]) == (trial.unit.from_step, trial.unit.to_step)
        assert unit["params"] == trial.params and unit["state"] == "completed"
        assert unit["value"] == trial.values["accuracy"] and unit["started_at"] is not None
    assert population["best"] == study.best_schedule().trial
    checkpoints = study.checkpoints()
    shown = {(c["trial"], c["checkpoint"], c["pinned"]) for c in population["checkpoints"]}
    assert shown == {(c.trial, c.checkpoint, True) for c in checkpoints.pinned} | {
        (c.trial, c.checkpoint, False) for c in checkpoints.releasable
    }
    assert population["pinned_total"] == len(checkpoints.pinned)
    assert population["releasable_total"] == len(checkpoints.releasable)


def test_a_large_population_is_cut_to_its_newest_units_and_checkpoints(client, http):
    study = _trained(client)
    trials = list(study.trials())
    r = http.get(
        f"/v1/studies/{study.id}/population", params={"max_units": 2, "max_checkpoints": 1}
    )
    assert r.status_code == 200, r.text
    population = r.json()
    assert population["truncated"] and population["total_units"] == len(trials)
    assert [u["trial"] for u in population["units"]] == [t.number for t in trials[-2:]]
    # A parent left out of the window still names its member.
    first = population["units"][0]
    assert first["parent"] is not None and first["parent"] not in {t.number for t in trials[-2:]}
    assert first["parent_member"] == next(
        t.unit.member for t in trials if t.number == first["parent"]
    )
    checkpoints = study.checkpoints()
    assert population["checkpoints"] == [
        {"trial": c.trial, "checkpoint": c.checkpoint, "pinned": pinned}
        for c, pinned in sorted(
            [(checkpoints.pinned[-1], True), (checkpoints.releasable[-1], False)],
            key=lambda p: p[0].trial,
        )
    ]
    r = http.get(f"/v1/studies/{study.id}/population", params={"max_checkpoints": 0})
    assert r.json()["checkpoints"] == [] and r.json()["pinned_total"] > 0


def test_units_still_training_have_no_value_and_no_best_yet(client, http):
    study = client.create_study("pending", [LR], **PBT_STUDY)
    asked = study.ask(3, worker_id="w")
    population = http.get(f"/v1/studies/{study.id}/population").json()
    assert [u["trial"] for u in population["units"]] == [t.number for t in asked]
    assert all(u["state"] == "running" and u["value"] is None for u in population["units"])
    assert all(u["parent"] is None and u["reason"] == "initial" for u in population["units"])
    assert population["best"] is None and population["checkpoints"] == []


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ({"max_units": 0}, 422, "validation_error"),
        ({"max_checkpoints": -1}, 422, "validation_error"),
    ],
)
def test_bad_bounds_are_a_422(client, http, query, status, code):
    study = client.create_study("bounds", [LR], **PBT_STUDY)
    r = http.get(f"/v1/studies/{study.id}/population", params=query)
    assert r.status_code == status and r.json()["code"] == code


def test_only_scheduler_studies_have_a_population(client, http):
    plain = client.create_study("plain", [FLOAT_X])
    r = http.get(f"/v1/studies/{plain.id}/population")
    assert r.status_code == 409 and r.json()["code"] == "not_a_scheduler_study"
    r = http.get("/v1/studies/999/population")
    assert r.status_code == 404 and r.json()["code"] == "not_found"


def test_the_clients_read_the_population(client, sqlite_url):
    study = _trained(client)
    population = study.population(max_units=3)
    assert population.truncated and len(population.units) == 3
    assert population.best == study.best_schedule().trial

    async def body(async_client):
        async_study = await async_client.create_study("async", [LR], **PBT_STUDY)
        await async_study.train(CurveTrainer(), worker_id="w")
        answer = await async_study.population(max_checkpoints=2)
        assert not answer.truncated and answer.total_units == len(answer.units) >= 6
        assert sum(c.pinned for c in answer.checkpoints) <= 2
        assert answer.best == (await async_study.best_schedule()).trial

    run(body, sqlite_url)


def test_an_ipbt_study_has_a_population_with_its_iterations(client):
    engine = {"name": "ipbt", "options": {"t_max": 600, "population_size": 3}}
    study = client.create_study("ipbt", [LR], engine=engine, seed=2)
    asked = study.ask_units(10, worker_id="w").trials  # the first iteration's 2P candidates
    population = study.population()
    assert [u.trial for u in population.units] == [t.number for t in asked]
    assert {(u.iteration, u.parent) for u in population.units} == {(0, None)}
    assert population.members == sorted({t.unit.member for t in asked})
