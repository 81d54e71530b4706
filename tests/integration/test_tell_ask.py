"""Tell-and-ask on the real server (uvicorn, two worker processes) on SQLite and PostgreSQL:
concurrent workers that tell each trial and ask for the next in one request number every trial
once and lose no tell."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from client import Client
from client.models import TrialPublic
from tests.conftest import FLOAT_X, FLOAT_Y
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration

THREADS = 8
PAIRS = 25


def _value(trial: TrialPublic) -> float:
    return float(trial.params["x"]) ** 2 + float(trial.params["y"])


def test_concurrent_tell_and_ask_numbers_every_trial_once(server: Server) -> None:
    with Client(server.url) as setup:
        study_id = setup.create_study("tell-ask", [FLOAT_X, FLOAT_Y], seed=1).id
    barrier = threading.Barrier(THREADS)

    def worker(index: int) -> list[tuple[TrialPublic, float]]:
        worker_id, done = f"worker-{index}", []
        with Client(server.url, timeout=60, retries=8) as client:
            study = client.get_study(study_id)
            barrier.wait(timeout=30)
            (trial,) = study.ask(worker_id=worker_id)
            for pair in range(PAIRS):
                value = _value(trial)
                done.append((trial, value))
                if pair == PAIRS - 1:
                    assert study.tell(trial.number, value).state == "completed"
                    break
                told = study.tell_and_ask(trial.number, value, worker_id=worker_id)
                assert told.number == trial.number and told.values == {"value": value}
                assert told.next is not None and told.next.problem is None
                (trial,) = told.next.trials
                assert trial.worker_id == worker_id and trial.state == "running"
        return done

    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(worker, i) for i in range(THREADS)]
        try:
            results = [pair for f in futures for pair in f.result(timeout=300)]
        except Exception as exc:
            raise AssertionError(f"a worker thread failed: {exc!r}\n{server.log_tail()}") from exc

    numbers = sorted(trial.number for trial, _ in results)
    assert numbers == list(range(THREADS * PAIRS)), server.log_tail()
    with Client(server.url) as client:
        study = client.get_study(study_id)
        stored = {t.number: t for t in study.trials(page_size=1000)}
        assert study.refresh().trial_counts == {"completed": THREADS * PAIRS}
    for trial, value in results:
        assert stored[trial.number].state == "completed"
        assert stored[trial.number].values == {"value": value}


def test_a_replayed_tell_and_ask_over_http_asks_once(server: Server) -> None:
    with Client(server.url) as client:
        study = client.create_study("replay", [FLOAT_X, FLOAT_Y], seed=2)
        (trial,) = study.ask(worker_id="w")

    url = f"{server.url}/v1/studies/{study.id}/trials/{trial.number}/tell"
    body = {"values": {"value": 1.0}, "ask": {"count": 2, "worker_id": "w"}}
    headers = {"Idempotency-Key": "same"}
    with httpx.Client(timeout=30) as http:
        first = http.post(url, json=body, headers=headers)
        again = http.post(url, json=body, headers=headers)
    assert first.status_code == again.status_code == 200 and first.content == again.content
    assert [t["number"] for t in first.json()["next"]["trials"]] == [1, 2]
    with Client(server.url) as client:
        assert client.get_study(study.id).info.trial_counts == {"completed": 1, "running": 2}
