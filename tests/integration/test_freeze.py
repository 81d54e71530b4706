"""The freeze scenario of issue 21 on the real server (uvicorn, two worker processes,
PostgreSQL): a slow ``gp`` study with 45 concurrent asks leaves ``/healthz`` answering within
100 ms and asks on another study answering; asks beyond the study's queue get 503
``study_busy`` with ``Retry-After``; the asks of clients that gave up are dropped, not run."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.conftest import Server

# Serial: its probes time the server, which another test process on the same two cores slows.
pytestmark = [pytest.mark.integration, pytest.mark.serial]

ASKS = 45
QUEUE = 4
HEALTH_LIMIT = 0.1

#: Probe ``/healthz`` and ask on the other study every 0.1 s for a while; print the latencies.
PROBE = """
import json, sys, time
import httpx
url, other, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
health, asks = [], []
with httpx.Client(base_url=url, timeout=30) as http:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        assert http.get("/healthz").status_code == 200
        health.append(time.perf_counter() - start)
        start = time.perf_counter()
        answer = http.post(f"/v1/studies/{other}/ask", json={"count": 1})
        assert answer.status_code == 200, answer.text
        asks.append(time.perf_counter() - start)
        time.sleep(0.1)
print(json.dumps([health, asks]))
"""


#: Points per ask on the slow study: gp's option caps (engines.limits) bound one point's
#: acquisition starts, so the slow asks ask for several.
SLOW_COUNT = 4


def _busiest_processes() -> str:
    """The machine's load and its busiest processes now (``top``), for a failed timing: the
    probes have missed their bound only after the parallel test run, never alone, so say what
    else ran."""
    try:
        return subprocess.run(
            ["top", "-b", "-c", "-n", "1", "-w", "200"], capture_output=True, text=True, timeout=10
        ).stdout[:4000]
    except (OSError, subprocess.SubprocessError) as exc:
        return f"top failed: {exc}"


def _slow_gp_study(http: httpx.Client) -> int:
    """A gp study with 30 completed trials on 8 parameters whose asks (of ``SLOW_COUNT``
    points) optimize the acquisition from 16 starts per point, the cap: about a second each."""
    params = [{"name": f"x{i}", "type": "float", "low": 0, "high": 1} for i in range(8)]
    body = {
        "name": "slow",
        "parameters": params,
        "engine": {
            "name": "gp",
            "options": {"n_initial": 4, "num_restarts": 16, "raw_samples": 1024},
        },
        "seed": 1,
    }
    sid = http.post("/v1/studies", json=body).json()["id"]
    rng = random.Random(0)
    for _ in range(30):
        point = {p["name"]: rng.random() for p in params}
        number = http.post(f"/v1/studies/{sid}/trials", json={"params": point}).json()["number"]
        told = http.post(f"/v1/studies/{sid}/trials/{number}/tell", json={"values": {"value": 1}})
        assert told.status_code == 200, told.text
    return sid


def test_a_slow_study_freezes_nothing_else(
    pg_migrated_url: str, start_server: Callable[..., Server]
) -> None:
    server = start_server(pg_migrated_url, ASKTELL_ASK_QUEUE_PER_STUDY=str(QUEUE))
    with httpx.Client(base_url=server.url, timeout=30) as http:
        slow = _slow_gp_study(http)
        other = http.post(
            "/v1/studies",
            json={
                "name": "other",
                "parameters": [{"name": "x", "type": "float", "low": 0, "high": 1}],
            },
        ).json()["id"]
        # An asking client gives up after 2.5 asks' time: those at the back of a queue of
        # four, behind a running ask, wait longer (however fast this machine fits the gp). The
        # first ask of a process is slower (imports); the second is timed.
        for _ in range(2):
            started = time.perf_counter()
            assert (
                http.post(f"/v1/studies/{slow}/ask", json={"count": SLOW_COUNT}).status_code == 200
            )
        client_timeout = max(0.3, 2.5 * (time.perf_counter() - started))
        outcomes: list[object] = []
        lock = threading.Lock()

        # The asks leave together, so that none finishes (and frees its queue place) before the
        # last one arrives.
        together = threading.Barrier(ASKS)

        def ask() -> None:
            try:
                with httpx.Client(base_url=server.url, timeout=client_timeout) as c:
                    together.wait()
                    outcome: object = c.post(f"/v1/studies/{slow}/ask", json={"count": SLOW_COUNT})
            except httpx.TimeoutException:
                outcome = "gave up"
            with lock:
                outcomes.append(outcome)

        # The probes run in a process of their own, so that the 45 asking threads of this
        # one do not delay them: what is measured is the server.
        probe = subprocess.Popen(
            [
                sys.executable,
                "-c",
                PROBE,
                server.url,
                str(other),
                str(max(4.0, client_timeout + 1)),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.3)
        with ThreadPoolExecutor(ASKS) as pool:
            for _ in range(ASKS):
                pool.submit(ask)
            time.sleep(1.0)  # inside the probes' window, the asks running
            machine = _busiest_processes()
        out, _ = probe.communicate(timeout=60)
        assert probe.returncode == 0, out
        health, other_asks = json.loads(out)
        assert len(health) >= 10
        # Most probes within the target; none near a freeze (before admission: > 10 s). The
        # slowest probe is bounded looser: the test suite runs on two cores shared with
        # another test process, whose load the server cannot help.
        slow_probes = f"/healthz latencies (s): {health}\nduring the asks:\n{machine}"
        assert sorted(health)[int(0.9 * len(health))] < HEALTH_LIMIT, slow_probes
        assert max(health) < 10 * HEALTH_LIMIT, slow_probes
        assert max(other_asks) < 2.0, other_asks

        busy = [o for o in outcomes if isinstance(o, httpx.Response) and o.status_code == 503]
        gave_up = outcomes.count("gave up")
        # Two processes each run one ask and queue QUEUE: every other ask is turned away, but
        # for those that found a place freed by an ask that had already been answered, and one
        # more per process: a place freed by a client giving up can go to an ask of the burst
        # that reached the server late (seen in about one full run in four on a loaded
        # machine, one ask over).
        answered = [o for o in outcomes if isinstance(o, httpx.Response) and o.status_code == 200]
        assert len(busy) >= ASKS - 2 * (QUEUE + 1) - len(answered) - 2, outcomes
        for response in busy:
            assert response.json()["code"] == "study_busy"
            assert int(response.headers["Retry-After"]) >= 1
        assert gave_up >= 1, outcomes

        # The queued asks of the clients that gave up are dropped, not run one by one: all but
        # the two running when their clients left (the server looks again when a turn comes).
        deadline = time.monotonic() + 5
        while True:
            dropped = server.log().count("was dropped: its client disconnected")
            if dropped >= gave_up - 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert dropped >= gave_up - 2, server.log_tail()
        # The study serves again once the asks that were running finish.
        (trial,) = http.post(f"/v1/studies/{slow}/ask", json={"count": 1}, timeout=60).json()[
            "trials"
        ]
        assert trial["details"]["source"] == "gp"
