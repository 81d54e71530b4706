"""The engine processes of a server (``service.engine_pool``): an engine call past its time
budget is abandoned, its process replaced and the ask answered from Sobol points with the
engine state unchanged; other studies are answered while an engine computes; a process killed
from outside is replaced; with no processes the engine runs in the ask."""

from __future__ import annotations

import importlib.machinery
import multiprocessing
import os
import random
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.engine_pool import EnginePool, _Process, one_torch_thread
from service.settings import Settings
from tests.threads import at_once

PARAMS = [{"name": f"x{i}", "type": "float", "low": 0, "high": 1} for i in range(8)]
#: Options that make a fitted gp's ask take a second or more with ``SLOW_COUNT`` points: 16
#: acquisition starts per point (the cap of engines.limits).
SLOW_GP = {"name": "gp", "options": {"n_initial": 2, "num_restarts": 16, "raw_samples": 1024}}
SLOW_COUNT = 8
#: A gp study still in its initial design: its asks are quick, but run in an engine process.
QUICK_GP = {"name": "gp", "options": {"n_initial": 1000}}


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def _server(url: str, processes: int, budget: float = 60.0) -> TestClient:
    settings = Settings(
        database_url=url, reaper_interval=0.2, engine_processes=processes, ask_time_budget=budget
    )
    return TestClient(create_app(settings))


def _pool(http: TestClient) -> EnginePool:
    pool: EnginePool = http.app.state.store.engine_pool  # type: ignore[attr-defined]
    return pool


def _study(
    http: TestClient, name: str, engine: dict[str, Any], told: int = 0, **fields: Any
) -> int:
    """A study with ``told`` completed trials, enqueued and told (no engine runs)."""
    body = {"name": name, "parameters": PARAMS, "engine": engine, "seed": 1, **fields}
    created = http.post("/v1/studies", json=body)
    assert created.status_code == 201, created.text
    sid = int(created.json()["id"])
    rng = random.Random(0)
    for _ in range(told):
        point = {p["name"]: rng.random() for p in PARAMS}
        number = http.post(f"/v1/studies/{sid}/trials", json={"params": point}).json()["number"]
        value = {"values": {"value": rng.random()}}
        assert http.post(f"/v1/studies/{sid}/trials/{number}/tell", json=value).status_code == 200
    return sid


def _ask(http: TestClient, sid: int, count: int = 1) -> httpx.Response:
    return http.post(f"/v1/studies/{sid}/ask", json={"count": count})


def _details(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    details: dict[str, Any] = answer.json()["trials"][0]["details"]
    return details


def _wait(condition: Any, what: str) -> None:
    """Poll ``condition`` until it holds; fail after 30 s (a bound, not a speed target)."""
    end = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < end, f"still waiting for {what}"
        time.sleep(0.01)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def pool_of_one(db_url: str) -> Iterator[TestClient]:
    with _server(db_url, processes=1) as http:
        yield http


def test_an_engine_call_past_its_budget_is_answered_from_sobol_points(
    pool_of_one: TestClient,
) -> None:
    http = pool_of_one
    quick = _study(http, "quick", QUICK_GP)
    slow = _study(http, "slow", SLOW_GP, told=6, ask_time_budget=0.05)
    assert http.get(f"/v1/studies/{slow}").json()["ask_time_budget"] == 0.05
    assert "fallback" not in _details(_ask(http, quick))
    [first] = _pool(http).pids()
    before = http.get(f"/v1/studies/{slow}").json()

    details = _details(_ask(http, slow))

    assert details["fallback"] == "time_budget"
    assert details["time_budget_seconds"] == 0.05
    assert details["source"] == "sobol"
    after = http.get(f"/v1/studies/{slow}").json()
    assert after["engine_state"] == before["engine_state"]
    assert after["trial_counts"]["running"] == 1
    # The abandoned call's process was killed; the next ask is served by its replacement.
    assert _gone(first) or first not in _pool(http).pids()
    assert "fallback" not in _details(_ask(http, quick))
    assert first not in _pool(http).pids()
    assert len(_pool(http).pids()) == 1


def test_a_scheduler_past_its_budget_is_answered_503_with_retry_after(
    pool_of_one: TestClient,
) -> None:
    http = pool_of_one
    body = {
        "name": "pbt",
        "parameters": [{"type": "float", "name": "lr", "low": 0.001, "high": 1.0, "log": True}],
        "objectives": [{"name": "accuracy", "goal": "maximize"}],
        "engine": {"name": "pbt", "options": {"t_max": 30, "population_size": 3, "interval": 10}},
        "ask_time_budget": 1e-9,
    }
    sid = http.post("/v1/studies", json=body).json()["id"]

    answer = _ask(http, sid)

    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "unavailable" and "time budget" in answer.json()["detail"]
    assert int(answer.headers["Retry-After"]) >= 1
    assert http.get(f"/v1/studies/{sid}").json()["trial_counts"].get("running", 0) == 0
    # Without the budget, the same scheduler's ask is served by the pool.
    patched = http.patch(f"/v1/studies/{sid}", json={"ask_time_budget": None})
    assert patched.json()["ask_time_budget"] is None
    assert _ask(http, sid).json()["trials"][0]["unit"]["reason"] == "initial"


def test_other_studies_are_answered_while_an_engine_computes(db_url: str) -> None:
    with _server(db_url, processes=2) as http:
        quick = _study(http, "quick", QUICK_GP)
        # Abandoned after 3 s at the latest: the test waits no longer for it.
        slow = _study(http, "slow", SLOW_GP, told=6, ask_time_budget=3)
        assert "fallback" not in _details(_ask(http, quick))
        pool = _pool(http)
        _wait(lambda: pool.idle() == 2, "both engine processes")
        answers: list[httpx.Response] = []
        slow_ask = threading.Thread(target=lambda: answers.append(_ask(http, slow, SLOW_COUNT)))
        slow_ask.start()
        _wait(lambda: pool.idle() == 1, "the slow ask's engine call")

        for _ in range(3):
            assert "fallback" not in _details(_ask(http, quick))
        random_study = _study(http, "random", {"name": "random"})
        assert _details(_ask(http, random_study))["source"] == "sobol"

        assert slow_ask.is_alive(), "the other study's asks waited for the slow engine call"
        slow_ask.join()
        assert answers[0].status_code == 200


def test_an_engine_process_killed_from_outside_is_replaced(pool_of_one: TestClient) -> None:
    http = pool_of_one
    quick = _study(http, "quick", QUICK_GP)
    slow = _study(http, "slow", SLOW_GP, told=6, ask_time_budget=20)
    _details(_ask(http, quick))
    pool = _pool(http)
    # Killed while idle: the next ask finds it dead and is served by a new process.
    [idle] = pool.pids()
    os.kill(idle, signal.SIGKILL)
    _wait(lambda: _gone(idle), "the killed process to exit")
    assert "fallback" not in _details(_ask(http, quick))
    [busy] = pool.pids()
    assert busy != idle
    # Killed during a call: that ask is answered from Sobol points, the next by a new process.
    answers: list[httpx.Response] = []
    slow_ask = threading.Thread(target=lambda: answers.append(_ask(http, slow, SLOW_COUNT)))
    slow_ask.start()
    _wait(lambda: pool.idle() == 0, "the slow ask's engine call")
    os.kill(busy, signal.SIGKILL)
    slow_ask.join()
    assert _details(answers[0])["fallback"] == "engine_process_exited"
    assert "fallback" not in _details(_ask(http, quick))
    assert busy not in pool.pids() and len(pool.pids()) == 1


def test_a_schedulers_light_calls_run_in_the_ask_and_a_generation_close_in_the_pool(
    pool_of_one: TestClient,
) -> None:
    """With a budget no engine process can meet, only the ask that closes a generation is
    abandoned: handing out the planned units and saying to wait never reach the pool."""
    http = pool_of_one
    body = {
        "name": "ipbt",
        "parameters": [{"type": "float", "name": "lr", "low": 0.001, "high": 1.0, "log": True}],
        "objectives": [{"name": "accuracy", "goal": "maximize"}],
        "engine": {"name": "ipbt", "options": {"t_max": 100, "population_size": 2}},
        "ask_time_budget": 1e-9,
    }
    sid = http.post("/v1/studies", json=body).json()["id"]
    units = _ask(http, sid, count=3).json()["trials"]  # 2P = 4 candidates planned
    units += _ask(http, sid, count=3).json()["trials"]
    assert [t["unit"]["reason"] for t in units] == ["initial"] * 4
    waiting = _ask(http, sid).json()
    assert waiting["trials"] == [] and waiting["retry_after"] > 0
    for t in units:
        body = {"values": {"accuracy": 0.5}, "checkpoint": f"c{t['number']}"}
        assert http.post(f"/v1/studies/{sid}/trials/{t['number']}/tell", json=body).is_success

    closing = _ask(http, sid)

    assert closing.status_code == 503 and "time budget" in closing.json()["detail"]


def test_a_process_killed_from_several_threads_at_once_closes_its_pipe_once() -> None:
    """The pool's close and the thread starting a process can kill it together (a server
    stopping while an abandoned call's replacement starts); its pipe is closed once."""
    for _ in range(10):
        worker = _Process(multiprocessing.get_context("fork"))
        assert at_once([worker.kill] * 8) == []
        assert not worker.process.is_alive()


def test_without_engine_processes_the_engine_runs_in_the_ask(sqlite_url: str) -> None:
    # No process, so no budget either: a thread cannot be abandoned.
    with _server(sqlite_url, processes=0, budget=1e-9) as http:
        sid = _study(http, "inline", {"name": "gp", "options": {"n_initial": 2}}, told=3)
        details = _details(_ask(http, sid))
        assert details["source"] == "gp" and "fallback" not in details
        assert _pool(http).pids() == []


def test_a_torch_still_importing_in_another_thread_is_left_alone(monkeypatch) -> None:
    """The race behind a 500 on a random-engine ask: another thread's first gp ask was still
    importing torch, whose half-made module had no ``get_num_threads`` yet."""
    half_made = types.ModuleType("torch")
    half_made.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    half_made.__spec__._initializing = True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", half_made)
    one_torch_thread()
    del half_made.__spec__._initializing  # type: ignore[attr-defined]
    one_torch_thread()  # imported, but without the function: still left alone
