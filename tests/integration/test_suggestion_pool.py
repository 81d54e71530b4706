"""The suggestion pool on the real server (uvicorn, two worker processes, each refilling in the
background) on SQLite and PostgreSQL: concurrent workers asking and telling never get the same
point twice, some asks are served from the pool, and the engine state the refills store serves
the asks that run the engine after them.

``gp`` with a long initial design proposes Sobol points only: no model fit slows the test, and
a point served twice would be the same Sobol point handed out twice."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from service.settings import Settings
from service.store import trials_t
from service.suggestion_pool import suggestions_t
from tests.conftest import FLOAT_X, FLOAT_Y
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration

THREADS = 6
ROUNDS = 5
PREPARED = 4


def _tell(http: httpx.Client, sid: int, trial: dict) -> None:
    p = trial["params"]
    told = http.post(
        f"/v1/studies/{sid}/trials/{trial['number']}/tell",
        json={"values": {"value": p["x"] ** 2 + p["y"]}},
    )
    assert told.status_code == 200, told.text


def _ask(http: httpx.Client, sid: int, count: int, worker_id: str) -> list[dict]:
    asked = http.post(f"/v1/studies/{sid}/ask", json={"count": count, "worker_id": worker_id})
    assert asked.status_code == 200, asked.text
    return asked.json()["trials"]


def _wait_for_a_batch(database_url: str, sid: int) -> None:
    """Until the study's pool holds a batch computed after its last tell: at the revision that
    tell committed (its trial's ``completed_seq``) or later. (Not the study's revision read
    after the tells: a refill that stored its batch meanwhile bumped it past the batch's.)"""
    engine = create_engine(Settings(database_url=database_url).database_url)
    newest = select(func.max(suggestions_t.c.revision)).where(suggestions_t.c.study_id == sid)
    last_tell = select(func.max(trials_t.c.completed_seq)).where(trials_t.c.study_id == sid)
    deadline = time.monotonic() + 60
    try:
        with engine.connect() as conn:
            revision = conn.execute(last_tell).scalar()
        while True:
            with engine.connect() as conn:
                computed_at = conn.execute(newest).scalar()
            if computed_at is not None and computed_at >= revision:
                return
            assert time.monotonic() < deadline, "no refill stored a batch within 60 s"
            time.sleep(0.05)
    finally:
        engine.dispose()


def test_concurrent_workers_on_two_processes_never_get_one_pooled_point_twice(
    database_url: str, start_server
) -> None:
    server: Server = start_server(database_url, ASKTELL_SUGGESTION_POOL="1")
    engine = {"name": "gp", "options": {"n_initial": 200}}
    body = {"name": "pool", "parameters": [FLOAT_X, FLOAT_Y], "engine": engine, "seed": 5}
    with httpx.Client(base_url=server.url, timeout=60) as http:
        sid = http.post("/v1/studies", json=body).json()["id"]
        for trial in _ask(http, sid, PREPARED, "prep"):
            _tell(http, sid, trial)
        # The last tell's refill reads every prepared trial: its batch is fresh.
        _wait_for_a_batch(database_url, sid)
    barrier = threading.Barrier(THREADS)

    def worker(index: int) -> list[dict]:
        got = []
        with httpx.Client(base_url=server.url, timeout=60) as http:
            barrier.wait(timeout=30)
            for _ in range(ROUNDS):
                (trial,) = _ask(http, sid, 1, f"w{index}")
                got.append(trial)
                _tell(http, sid, trial)
        return got

    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(worker, i) for i in range(THREADS)]
        try:
            asked = [t for f in futures for t in f.result(timeout=120)]
        except Exception as exc:
            raise AssertionError(f"a worker failed: {exc!r}\n{server.log_tail()}") from exc

    with httpx.Client(base_url=server.url, timeout=60) as http:
        trials = http.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()["data"]
        total = PREPARED + THREADS * ROUNDS
        assert sorted(t["number"] for t in trials) == list(range(total))
        points = {(t["params"]["x"], t["params"]["y"]) for t in trials}
        assert len(points) == total, "two trials got the same point"
        pooled = [t for t in asked if "pool" in t["details"]]
        # The first ask found the refill's batch.
        assert pooled, server.log_tail()
        assert all(t["details"]["source"] == "sobol" for t in pooled)
        # Asks that run the engine go on from the state the refills stored.
        patched = http.patch(f"/v1/studies/{sid}", json={"max_staleness": 0})
        assert patched.status_code == 200
        version = patched.json()["engine_state_version"]
        (last,) = _ask(http, sid, 1, "last")
        assert "pool" not in last["details"]
        assert (last["params"]["x"], last["params"]["y"]) not in points
        assert http.get(f"/v1/studies/{sid}").json()["engine_state_version"] == version + 1
