"""The clients' ``optimize`` and ``train`` loops tell and ask in one request: in steady state a
trial costs one request (counted at the transport)."""

from __future__ import annotations

import asyncio
import json

import httpx

from client import AsyncClient, Client
from service.app import create_app
from service.settings import Settings
from tests.client.units import LR, PBT_STUDY, CurveTrainer
from tests.conftest import FLOAT_X, FLOAT_Y


class Counting(httpx.BaseTransport):
    """Passes requests on and records each one's method, path and JSON body."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner, self.seen = inner, []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(_entry(request))
        return self.inner.handle_request(request)


class AsyncCounting(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner, self.seen = inner, []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(_entry(request))
        return await self.inner.handle_async_request(request)


def _entry(request: httpx.Request) -> tuple[str, str, dict]:
    content = request.read()
    return request.method, request.url.path, json.loads(content) if content else {}


def _kinds(seen: list[tuple[str, str, dict]]) -> dict[str, int]:
    """Requests by kind: plain asks, plain tells, tell-and-asks, anything else."""
    kinds = {"ask": 0, "tell": 0, "tell_and_ask": 0, "other": 0}
    for method, path, body in seen:
        if method == "POST" and path.endswith("/ask"):
            kinds["ask"] += 1
        elif method == "POST" and path.endswith("/tell"):
            kinds["tell_and_ask" if "ask" in body else "tell"] += 1
        else:
            kinds["other"] += 1
    return kinds


def _sphere(params: dict) -> float:
    return params["x"] ** 2 + params["y"] ** 2


def test_sync_optimize_sends_one_request_per_trial(http):
    counting = Counting(http._transport)
    with Client("http://testserver", transport=counting, retries=0) as client:
        study = client.create_study("loop", [FLOAT_X, FLOAT_Y])
        counting.seen.clear()
        study.optimize(_sphere, n_trials=12, progress=False)
        kinds = _kinds(counting.seen)
        # One plain ask to start, eleven tells that ask for the next trial, a last plain tell.
        assert kinds == {"ask": 1, "tell": 1, "tell_and_ask": 11, "other": 0}
        trials = list(study.trials())
    assert len(trials) == 12 and all(t.state == "completed" for t in trials)


def test_sync_optimize_with_two_workers_leaves_no_trial_running(http):
    counting = Counting(http._transport)
    with Client("http://testserver", transport=counting, retries=0) as client:
        study = client.create_study("loop2", [FLOAT_X, FLOAT_Y])
        counting.seen.clear()
        study.optimize(_sphere, n_trials=10, n_workers=2, progress=False)
        kinds = _kinds(counting.seen)
        assert kinds["ask"] == 2 and kinds["tell"] + kinds["tell_and_ask"] == 10
        trials = list(study.trials())
    assert len(trials) == 10 and all(t.state == "completed" for t in trials)


def test_optimize_stops_at_max_trials_with_tell_and_ask(http):
    with Client("http://testserver", transport=http._transport, retries=0) as client:
        study = client.create_study("capped", [FLOAT_X, FLOAT_Y], max_trials=5)
        study.optimize(_sphere, n_trials=20, progress=False)
        trials = list(study.trials())
    assert len(trials) == 5 and all(t.state == "completed" for t in trials)


def test_sync_train_asks_with_each_tell(http):
    counting = Counting(http._transport)
    with Client("http://testserver", transport=counting, retries=0) as client:
        study = client.create_study("pbt", [LR], **PBT_STUDY)
        trainer = CurveTrainer()
        counting.seen.clear()
        done = study.train(trainer)
        kinds = _kinds(counting.seen)
        trainer.check(list(study.trials()))
    assert kinds["tell_and_ask"] == done and kinds["tell"] == 0
    # A plain ask only to start and after a wait for the generation (none with one worker).
    assert kinds["ask"] == 1


def _run_async(sqlite_url, body):
    async def main():
        app = create_app(Settings(database_url=sqlite_url))
        async with app.router.lifespan_context(app):
            counting = AsyncCounting(httpx.ASGITransport(app=app))
            async with AsyncClient("http://testserver", transport=counting, retries=0) as c:
                return await body(c, counting)

    return asyncio.run(main())


def test_async_optimize_sends_one_request_per_trial(sqlite_url):
    async def body(client, counting):
        study = await client.create_study("loop", [FLOAT_X, FLOAT_Y])
        counting.seen.clear()
        await study.optimize(_sphere, n_trials=8, progress=False)
        return _kinds(counting.seen), [t async for t in study.trials()]

    kinds, trials = _run_async(sqlite_url, body)
    assert kinds == {"ask": 1, "tell": 1, "tell_and_ask": 7, "other": 0}
    assert len(trials) == 8 and all(t.state == "completed" for t in trials)


def test_async_train_asks_with_each_tell(sqlite_url):
    async def body(client, counting):
        study = await client.create_study("pbt", [LR], **PBT_STUDY)
        trainer = CurveTrainer()
        counting.seen.clear()
        done = await study.train(trainer, max_units=4)
        return done, _kinds(counting.seen)

    done, kinds = _run_async(sqlite_url, body)
    # The fourth unit is the last one: a plain tell, nothing asked after it.
    assert done == 4 and kinds == {"ask": 1, "tell": 1, "tell_and_ask": 3, "other": 0}
