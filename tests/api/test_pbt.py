"""The pbt and ipbt schedulers through the HTTP API and the client: units, exact checkpoints,
re-issued units, synchronous waits, lineage, the best schedule and the checkpoints to keep."""

from __future__ import annotations

import math
import time

import pytest

from client import Client, Conflict, InvalidRequest
from client.models import TrialPublic
from tests.conftest import make_test_client

LR = {"type": "float", "name": "lr", "low": 0.001, "high": 1.0, "log": True}
ACCURACY = [{"name": "accuracy", "goal": "maximize"}]


def _pbt(client: Client, name: str = "pbt", **options: object):
    opts = {"t_max": 30, "population_size": 3, "interval": 10, **options}
    return client.create_study(
        name, [LR], objectives=ACCURACY, engine={"name": "pbt", "options": opts}, seed=1
    )


class CurveWorker:
    """A fake worker on a synthetic learning curve; checkpoints are progress values kept in a
    dict by reference, as a folder of files would be."""

    def __init__(self, study) -> None:
        self.study = study
        self.saved: dict[str, float] = {}
        self.loaded: list[str | None] = []

    @staticmethod
    def accuracy(progress: float) -> float:
        return 1.0 - math.exp(-progress / 150.0)

    def __call__(self, trial: TrialPublic) -> tuple[float, str]:
        unit = trial.unit
        assert unit is not None
        if unit.start.kind == "fresh":
            progress = 0.0
            self.loaded.append(None)
        else:
            assert unit.start.checkpoint is not None
            progress = self.saved[unit.start.checkpoint]
            self.loaded.append(unit.start.checkpoint)
        if unit.transform.kind == "shrink_perturb":
            progress = unit.transform.shrink * progress  # fresh weights have progress 0
        if unit.eval_before:
            self.study.report(trial.number, unit.from_step, {"accuracy": self.accuracy(progress)})
        rate = math.exp(-((math.log10(float(trial.params["lr"])) + 1.0) ** 2))
        progress += (unit.to_step - unit.from_step) * rate
        ref = f"ckpt/{trial.number}"
        self.saved[ref] = progress
        return self.accuracy(progress), ref


def test_an_exploit_loads_the_parents_exact_checkpoint_not_its_newest(client):
    study = _pbt(client)
    first = study.ask(3, worker_id="w")
    assert [t.unit.member for t in first] == [0, 1, 2]
    assert all(t.unit.start.kind == "fresh" and t.unit.reason == "initial" for t in first)
    assert all((t.unit.from_step, t.unit.to_step) == (0, 10) for t in first)
    for t, acc in zip(first, [0.9, 0.5, 0.1], strict=True):
        study.tell(t.number, acc, checkpoint=f"m{t.unit.member}-step10")
    # Member 0 (the best) continues and, while it trains, saves a newer checkpoint.
    # (Each ask from another worker: a worker asking again gets its own running unit back.)
    (m0,) = study.ask(worker_id="w0")
    assert m0.unit.member == 0 and m0.unit.reason == "continue"
    assert m0.unit.start.checkpoint == "m0-step10" and m0.unit.start.trial == first[0].number
    study.report(m0.number, 15, {"accuracy": 0.95}, checkpoint="m0-step15")
    (m1,) = study.ask(worker_id="w1")
    assert m1.unit.member == 1 and m1.unit.reason == "continue"
    # Member 2 (the worst) exploits member 0: the checkpoint member 0 had when it was ranked.
    (m2,) = study.ask(worker_id="w2")
    assert m2.unit.member == 2 and m2.unit.reason == "exploit"
    assert m2.unit.start.trial == first[0].number
    assert m2.unit.start.checkpoint == "m0-step10"
    assert (m2.unit.from_step, m2.unit.to_step) == (10, 20)
    assert m2.params["lr"] != first[0].params["lr"]  # explored
    # Lineage: member 2's unit descends from member 0's first unit.
    study.tell(m2.number, 0.92, checkpoint="m2-step20")
    lineage = study.lineage(m2.number)
    assert [s.trial for s in lineage.segments] == [first[0].number, m2.number]
    assert [s.reason for s in lineage.segments] == ["initial", "exploit"]
    assert lineage.segments[0].checkpoint == "m0-step10"
    # Once member 2 is given its next unit, its first checkpoint can never be loaded again;
    # the parent's stays pinned while pending units start from it, and so does every
    # checkpoint of a unit still training.
    (m2_next,) = study.ask(worker_id="w2")
    assert m2_next.unit.member == 2 and m2_next.unit.start.checkpoint == "m2-step20"
    checkpoints = study.checkpoints()
    pinned = {c.checkpoint for c in checkpoints.pinned}
    assert {c.checkpoint for c in checkpoints.releasable} == {"m2-step10"}
    assert {"m0-step10", "m0-step15", "m1-step10", "m2-step20"} <= pinned


def test_an_expired_unit_is_reissued_with_the_same_start(client):
    study = _pbt(client, "expiring")
    for t in study.ask(3, worker_id="a"):
        study.tell(t.number, 0.5, checkpoint=f"c{t.number}")
    (unit,) = study.ask(worker_id="a", lease_seconds=0.05)
    time.sleep(0.3)
    (again,) = study.ask(worker_id="b")
    assert again.number == unit.number and again.retries == 1
    assert again.unit == unit.unit and again.params == unit.params


@pytest.fixture(params=["sqlite", "postgresql"])
def db_client(request):
    """The client on a fresh SQLite file or the test PostgreSQL database."""
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    with (
        make_test_client(url) as http,
        Client("http://testserver", transport=http._transport, retries=0) as c,
    ):
        yield c


def test_a_synchronous_generation_answers_retry_until_it_is_complete(db_client):
    client = db_client
    study = _pbt(client, "sync", synchronous=True, t_max=20)
    answer = study.ask_units(3, worker_id="w")
    assert len(answer.trials) == 3 and answer.retry_after is None
    wait = study.ask_units(1, worker_id="w2")
    assert wait.trials == [] and wait.retry_after == 2.0 and not wait.finished
    for t in answer.trials:
        study.tell(t.number, 0.1 * t.unit.member, checkpoint=f"c{t.number}")
    second = study.ask_units(3, worker_id="w")
    assert {t.unit.generation for t in second.trials} == {1}
    for t in second.trials:
        study.tell(t.number, 0.5, checkpoint=f"c{t.number}")
    done = study.ask_units(1, worker_id="w")
    assert done.trials == [] and done.finished and done.retry_after is None
    last = second.trials[0]
    assert [s.trial for s in study.lineage(last.number).segments][-1] == last.number
    refs = study.checkpoints()
    assert len(refs.pinned) + len(refs.releasable) == 6


def test_a_unit_must_be_told_with_its_checkpoint_and_cannot_be_added_by_hand(client):
    study = _pbt(client, "strict")
    (t, *_) = study.ask(3)
    with pytest.raises(InvalidRequest) as err:
        study.tell(t.number, 0.5)
    assert err.value.code == "checkpoint_required"
    assert study.trial(t.number).state == "running"
    # A checkpoint reported before training (at from_step) is not the unit's end.
    study.report(t.number, 0, {"accuracy": 0.1}, checkpoint="before-training")
    with pytest.raises(InvalidRequest) as err:
        study.tell(t.number, 0.5)
    assert err.value.code == "checkpoint_required"
    study.report(t.number, 10, {"accuracy": 0.5}, checkpoint="saved-by-report")
    assert study.tell(t.number, 0.5).state == "completed"
    with pytest.raises(Conflict) as err2:
        study.enqueue({"lr": 0.1})
    assert err2.value.code == "engine_schedules_units"


@pytest.mark.parametrize(
    "engine, code",
    [
        ({"name": "pbt"}, "invalid_engine"),  # t_max missing
        ({"name": "ipbt", "options": {"t_max": 10, "quantile": 0.9}}, "invalid_engine"),
    ],
)
def test_bad_scheduler_options_are_a_422(http, engine, code):
    body = {"name": "bad", "parameters": [LR], "engine": engine}
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 422 and r.json()["code"] == code


def test_schedulers_refuse_several_objectives(http):
    body = {
        "name": "two",
        "parameters": [LR],
        "objectives": [{"name": "a"}, {"name": "b"}],
        "engine": {"name": "pbt", "options": {"t_max": 10}},
    }
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 422 and r.json()["code"] == "engine_unsupported"


def test_lineage_and_checkpoints_are_for_scheduler_studies_only(client, http):
    study = client.create_study("plain", [LR])
    (t,) = study.ask()
    r = http.get(f"/v1/studies/{study.id}/trials/{t.number}/lineage")
    assert r.status_code == 409 and r.json()["code"] == "not_a_scheduler_study"
    sched = _pbt(client, "empty")
    r = http.get(f"/v1/studies/{sched.id}/best/schedule")
    assert r.status_code == 404 and r.json()["code"] == "no_completed_unit"


def test_a_whole_ipbt_study_runs_through_the_api_with_fake_workers(client):
    study = client.create_study(
        "ipbt",
        [LR],
        objectives=ACCURACY,
        engine={
            "name": "ipbt",
            "options": {"t_max": 600, "population_size": 4, "initial_step_share": 0.04},
        },
        seed=2,
    )
    worker = CurveWorker(study)
    n_units = study.train(worker, worker_id="w")
    trials = list(study.trials())
    assert n_units == len(trials) and all(t.state == "completed" for t in trials)
    units = [t.unit for t in trials]
    assert all(u is not None for u in units)
    assert sum(u.to_step - u.from_step for u in units) <= 4 * 600
    assert any(u.reason == "exploit" for u in units)
    # Every checkpoint a unit loaded was saved by the exact trial the unit names.
    for t, loaded in zip(trials, worker.loaded, strict=True):
        if t.unit.start.kind == "checkpoint":
            assert loaded == f"ckpt/{t.unit.start.trial}"
    # The score before training was reported where asked (t = 0 and restarts).
    eval_before = [t for t in trials if t.unit.eval_before]
    assert len(eval_before) >= 8
    assert all(study.measurements(t.number)[0].step == t.unit.from_step for t in eval_before)
    state = study.refresh().engine_state
    assert state["finished"] and state["iteration"] >= 0 and state["spent"] <= 2400
    # The best member's schedule: a chain of units from a fresh start to the best unit.
    best = study.best().trials[0]
    schedule = study.best_schedule()
    assert schedule.trial == best.number and schedule.segments[-1].trial == best.number
    assert schedule.segments[0].from_step == 0
    for a, b in zip(schedule.segments, schedule.segments[1:], strict=False):
        assert b.from_step == a.to_step
    assert best.values["accuracy"] > 0.9
    # After the study, only the best checkpoints and the population's stay pinned.
    checkpoints = study.checkpoints()
    assert schedule.segments[-1].checkpoint in {c.checkpoint for c in checkpoints.pinned}
    assert len(checkpoints.releasable) > len(checkpoints.pinned)
    assert study.ask_units(1).finished
