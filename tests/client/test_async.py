"""The async client; mirrors test_sync.py by test name."""

import asyncio

import httpx
import pytest

from client import AsyncClient, ClientClosed, Conflict, InvalidRequest, NotFound, TransportError
from service.app import create_app
from service.settings import Settings
from tests.client.units import LR, PBT_STUDY, CurveTrainer
from tests.conftest import FLOAT_X, FLOAT_Y


def run(coro_fn, sqlite_url):
    async def main():
        app = create_app(Settings(database_url=sqlite_url))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with AsyncClient("http://testserver", transport=transport, retries=0) as c:
                return await coro_fn(c)

    return asyncio.run(main())


def test_optimize_runs_the_loop_and_finds_a_good_point(sqlite_url):
    async def body(client):
        study = await client.create_study("quad", [FLOAT_X, FLOAT_Y], seed=1)

        async def fn(p):
            await asyncio.sleep(0)
            return (p["x"] - 1) ** 2 + (p["y"] + 2) ** 2

        await study.optimize(fn, n_trials=40, n_workers=3, progress=False)
        info = await study.refresh()
        assert info.trial_counts == {"completed": 40}
        (best,) = (await study.best()).trials
        assert best.values is not None and best.values["value"] < 2.0

    run(body, sqlite_url)


def test_a_failing_objective_marks_the_trial_failed_and_raises(sqlite_url):
    async def body(client):
        study = await client.create_study("boom", [FLOAT_X])

        def fn(params):
            raise ValueError("bad point")

        with pytest.raises(ValueError, match="bad point"):
            await study.optimize(fn, n_trials=3, progress=False)
        trials = [t async for t in study.trials()]
        assert len(trials) == 1 and trials[0].state == "failed"

    run(body, sqlite_url)


def test_ask_tell_report_and_errors(sqlite_url):
    async def body(client):
        study = await client.create_study("manual", [FLOAT_X])
        (trial,) = await study.ask(worker_id="me")
        await study.report(trial.number, 1, {"loss": 0.3}, checkpoint="c1")
        assert [m.step for m in await study.measurements(trial.number)] == [1]
        await study.heartbeat(trial.number, lease_seconds=60)
        assert (await study.tell(trial.number, 0.25)).state == "completed"
        with pytest.raises(Conflict):
            await study.tell(trial.number, 0.5)
        (other,) = await study.ask()
        with pytest.raises(InvalidRequest):
            await study.tell(other.number, {"nope": 1.0})
        with pytest.raises(NotFound):
            await client.get_study(12345)

    run(body, sqlite_url)


def test_enqueue_export_and_import(sqlite_url):
    async def body(client):
        study = await client.create_study("src", [FLOAT_X])
        await study.enqueue({"x": 1.5}, values={"value": 2.0})
        copy = await client.import_study(await study.export(), name="dst")
        assert [t.params async for t in copy.trials()] == [{"x": 1.5}]
        assert [s.name async for s in client.list_studies(page_size=1)] == ["src", "dst"]

    run(body, sqlite_url)


def test_list_filters_and_the_trial_budget(sqlite_url):
    async def body(client):
        for name in ("b-one", "a-two", "other"):
            await client.create_study(name, [FLOAT_X])
        found = client.list_studies(name_contains="-", sort="name", descending=True)
        assert [s.name async for s in found] == ["b-one", "a-two"]
        study = await client.create_study("budget", [FLOAT_X], max_trials=3)
        await study.optimize(lambda p: p["x"] ** 2, n_trials=10, n_workers=2, progress=False)
        assert (await study.refresh()).trial_counts == {"completed": 3}
        assert (await study.update(max_trials=None)).max_trials is None
        assert "random" in await client.engine_names()

    run(body, sqlite_url)


def test_retries_connection_errors_then_raises():
    calls = []

    def handler(request):
        calls.append(request.headers.get("Idempotency-Key"))
        raise httpx.ConnectError("refused")

    async def main():
        async with AsyncClient("http://x", transport=httpx.MockTransport(handler), retries=2) as c:
            with pytest.raises(TransportError):
                await c.create_study("s", [FLOAT_X])

    asyncio.run(main())
    assert len(calls) == 3 and len(set(calls)) == 1


def test_a_closed_client_refuses_to_send():
    async def main():
        c = AsyncClient("http://x", transport=httpx.MockTransport(lambda r: httpx.Response(200)))
        await c.aclose()
        with pytest.raises(ClientClosed):
            await c.get_study(1)

    asyncio.run(main())


def test_a_nan_result_is_told_as_failed(sqlite_url):
    async def body(client):
        study = await client.create_study("nan", [FLOAT_X])
        await study.optimize(lambda p: float("nan"), n_trials=3, progress=False)
        assert [t.state async for t in study.trials()] == ["failed"] * 3

    run(body, sqlite_url)


def test_a_server_error_stops_optimize_and_is_raised(sqlite_url):
    async def body(client):
        study = await client.create_study("paused", [FLOAT_X])
        await study.update(state="paused")
        with pytest.raises(Conflict):
            await study.optimize(lambda p: 1.0, n_trials=5, n_workers=2, progress=False)

    run(body, sqlite_url)


def test_train_works_a_scheduler_study_until_it_is_finished(sqlite_url):
    async def body(client):
        study = await client.create_study("pbt", [LR], **PBT_STUDY)
        trainer = CurveTrainer()

        async def fn(trial):
            await asyncio.sleep(0)
            return trainer(trial)

        n_units = await study.train(fn, worker_id="w")
        trials = [t async for t in study.trials()]
        assert n_units == len(trials)
        trainer.check(trials)
        assert (await study.ask_units(1)).finished

    run(body, sqlite_url)


def test_train_stops_after_max_units_and_tells_a_failing_unit_as_failed(sqlite_url):
    async def body(client):
        study = await client.create_study("pbt", [LR], **PBT_STUDY)
        assert await study.train(CurveTrainer(), max_units=2) == 2  # a plain function

        def fn(trial):
            raise ValueError("diverged")

        with pytest.raises(ValueError, match="diverged"):
            await study.train(fn)
        states = [t.state async for t in study.trials()]
        assert states == ["completed", "completed", "failed"]

    run(body, sqlite_url)
