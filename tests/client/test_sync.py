"""The sync client against the app in process; test_async.py mirrors these tests by name."""

import httpx
import pytest

import client as client_pkg
from client import Client, ClientClosed, Conflict, InvalidRequest, NotFound, TransportError
from tests.client.units import LR, PBT_STUDY, CurveTrainer
from tests.conftest import FLOAT_X, FLOAT_Y


def test_exported_names_match_all():
    public = {n for n in dir(client_pkg) if not n.startswith("_")}
    assert set(client_pkg.__all__) <= public
    assert {"Client", "AsyncClient", "ApiError", "NotFound"} <= set(client_pkg.__all__)


def test_optimize_runs_the_loop_and_finds_a_good_point(client):
    study = client.create_study("quad", [FLOAT_X, FLOAT_Y], seed=1)
    study.optimize(
        lambda p: (p["x"] - 1) ** 2 + (p["y"] + 2) ** 2, n_trials=40, n_workers=3, progress=False
    )
    info = study.refresh()
    assert info.trial_counts == {"completed": 40}
    (best,) = study.best().trials
    assert best.values is not None and best.values["value"] < 2.0


def test_optimize_with_constraints_and_two_objectives(client):
    study = client.create_study(
        "multi",
        [FLOAT_X],
        objectives=[{"name": "a"}, {"name": "b", "goal": "maximize"}],
        constraints=[{"name": "c", "op": "<=", "threshold": 3.0}],
    )
    study.optimize(
        lambda p: {"a": p["x"] ** 2, "b": p["x"], "c": p["x"]}, n_trials=12, progress=False
    )
    best = study.best().trials
    assert best and all(t.feasible and t.values is not None for t in best)
    assert all(t.params["x"] <= 3.0 for t in best)


def test_a_failing_objective_marks_the_trial_failed_and_raises(client):
    study = client.create_study("boom", [FLOAT_X])

    def fn(params):
        raise ValueError("bad point")

    with pytest.raises(ValueError, match="bad point"):
        study.optimize(fn, n_trials=3, progress=False)
    (trial,) = list(study.trials())
    assert trial.state == "failed" and "bad point" in (trial.reason or "")


def test_catch_keeps_going_after_failures(client):
    study = client.create_study("catch", [FLOAT_X])
    study.optimize(
        lambda p: 1 / 0 if p["x"] < 0 else p["x"],
        n_trials=10,
        catch=(ZeroDivisionError,),
        progress=False,
    )
    counts = study.refresh().trial_counts
    assert sum(counts.values()) == 10 and counts.get("failed", 0) >= 1


def test_ask_tell_report_and_errors(client):
    study = client.create_study("manual", [FLOAT_X])
    (trial,) = study.ask(worker_id="me")
    study.report(trial.number, 1, {"loss": 0.3}, checkpoint="c1")
    assert [m.step for m in study.measurements(trial.number)] == [1]
    study.heartbeat(trial.number, lease_seconds=60)
    assert study.tell(trial.number, 0.25).state == "completed"
    with pytest.raises(Conflict) as err:
        study.tell(trial.number, 0.5)
    assert err.value.code == "trial_finished"
    with pytest.raises(InvalidRequest) as err:
        study.tell(study.ask()[0].number, {"nope": 1.0})
    assert err.value.code == "unknown_objective"
    with pytest.raises(NotFound):
        client.get_study(12345)


def test_enqueue_export_and_import(client):
    study = client.create_study("src", [FLOAT_X])
    study.enqueue({"x": 1.5}, values={"value": 2.0})
    study.enqueue({"x": -1.0})
    exported = study.export()
    copy = client.import_study(exported, name="dst")
    assert [t.params for t in copy.trials()] == [t.params for t in study.trials()]
    assert "params.x" in copy.export_csv()
    assert [s.name for s in client.list_studies(page_size=1)] == ["src", "dst"]


def test_list_filters_and_the_trial_budget(client):
    for name in ("b-one", "a-two", "other"):
        client.create_study(name, [FLOAT_X])
    found = client.list_studies(name_contains="-", sort="name", descending=True)
    assert [s.name for s in found] == ["b-one", "a-two"]
    assert [s.name for s in client.list_studies(states=["paused"])] == []
    study = client.create_study("budget", [FLOAT_X], max_trials=3)
    assert study.info.max_trials == 3
    study.optimize(lambda p: p["x"] ** 2, n_trials=10, n_workers=2, progress=False)
    assert study.refresh().trial_counts == {"completed": 3}
    assert study.update(max_trials=5).max_trials == 5
    assert study.update(state="paused").max_trials == 5
    assert study.update(max_trials=None).max_trials is None
    # The settings change apart: setting one keeps the other, None restores the default.
    pooled = client.create_study("pooled", [FLOAT_X], engine="gp", max_staleness=2)
    assert pooled.info.max_staleness == 2 and pooled.info.max_trials is None
    assert pooled.update(max_trials=4).max_staleness == 2
    assert pooled.update(max_staleness=0).max_trials == 4
    assert pooled.update(max_staleness=None).max_staleness is None
    assert pooled.info.max_trials == 4
    assert "random" in client.engine_names()


def test_update_and_delete(client):
    study = client.create_study("tmp", [FLOAT_X])
    assert study.update(state="paused", metadata={"k": 1}).metadata == {"k": 1}
    study.delete()
    with pytest.raises(NotFound):
        study.refresh()


def test_retries_connection_errors_then_raises():
    calls = []

    def handler(request):
        calls.append(request.headers.get("Idempotency-Key"))
        raise httpx.ConnectError("refused")

    transport = httpx.MockTransport(handler)
    with Client("http://x", transport=transport, retries=2) as c, pytest.raises(TransportError):
        c.create_study("s", [FLOAT_X])
    # One key for the call, reused on every retry.
    assert len(calls) == 3 and len(set(calls)) == 1


def test_retries_503_then_succeeds(client):
    answers = iter([503, 503, 200])
    body = client.create_study("r", [FLOAT_X]).info.model_dump_json()

    def handler(request):
        status = next(answers)
        if status == 503:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"code": "unavailable"})
        return httpx.Response(200, content=body)

    with Client("http://x", transport=httpx.MockTransport(handler), retries=3) as c:
        assert c.get_study(1).info.name == "r"


def test_a_closed_client_refuses_to_send():
    c = Client("http://x", transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    c.close()
    with pytest.raises(ClientClosed):
        c.get_study(1)


def test_a_nan_result_is_told_as_failed(client):
    study = client.create_study("nan", [FLOAT_X])
    study.optimize(lambda p: float("nan"), n_trials=3, progress=False)
    trials = list(study.trials())
    assert [t.state for t in trials] == ["failed"] * 3
    assert "NaN" in (trials[0].reason or "")


def test_a_server_error_stops_optimize_and_is_raised(client):
    study = client.create_study("paused", [FLOAT_X])
    study.update(state="paused")
    with pytest.raises(Conflict) as err:
        study.optimize(lambda p: 1.0, n_trials=5, n_workers=2, progress=False)
    assert err.value.code == "study_not_active"


def test_numpy_scalars_are_accepted(client):
    import numpy as np

    study = client.create_study("np", [FLOAT_X])
    (trial,) = study.ask()
    assert study.tell(trial.number, np.float32(0.0)).values == {"value": 0.0}
    study.optimize(lambda p: np.float64(p["x"]), n_trials=2, progress=False)
    assert study.refresh().trial_counts == {"completed": 3}


def test_train_works_a_scheduler_study_until_it_is_finished(client):
    study = client.create_study("pbt", [LR], **PBT_STUDY)
    trainer = CurveTrainer()
    n_units = study.train(trainer, worker_id="w")
    trials = list(study.trials())
    assert n_units == len(trials)
    trainer.check(trials)
    assert study.ask_units(1).finished


def test_train_stops_after_max_units_and_tells_a_failing_unit_as_failed(client):
    study = client.create_study("pbt", [LR], **PBT_STUDY)
    assert study.train(CurveTrainer(), max_units=2) == 2

    def fn(trial):
        raise ValueError("diverged")

    with pytest.raises(ValueError, match="diverged"):
        study.train(fn)
    states = [t.state for t in study.trials()]
    assert states == ["completed", "completed", "failed"]
