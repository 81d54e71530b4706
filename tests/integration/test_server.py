"""The real server (uvicorn, two worker processes) on SQLite and PostgreSQL, driven by the
real client and by raw HTTP: concurrency, leases, idempotency, start-up checks, restarts."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from client import Client, Study
from client.errors import Conflict
from client.models import TrialPublic
from tests.api.test_errors import nested_metadata
from tests.conftest import FLOAT_X, FLOAT_Y, study_body
from tests.integration.conftest import Server, run_cli

pytestmark = pytest.mark.integration

THREADS = 16
PAIRS = 50
PAIRS_PER_CONNECTION = 10


def objective(params: dict[str, Any]) -> float:
    return (params["x"] - 1.0) ** 2 + (params["y"] + 2.0) ** 2


def all_trials(study: Study) -> list[TrialPublic]:
    return list(study.trials(page_size=1000))


def wait_for(
    what: str, check: Callable[[], Any], server: Server, timeout: float = 15.0, every: float = 0.1
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what}\n" + server.log_tail()
            )
        time.sleep(every)


# --- 1. many workers on one study ---------------------------------------------------------


def test_concurrent_ask_tell_numbers_every_trial_once(server: Server) -> None:
    with Client(server.url) as setup:
        study_id = setup.create_study("concurrent", [FLOAT_X, FLOAT_Y], seed=1).id

    barrier = threading.Barrier(THREADS)

    def worker(index: int) -> list[tuple[TrialPublic, float, TrialPublic]]:
        done = []
        worker_id = f"worker-{index}"
        barrier.wait(timeout=30)
        # A new client, so a new connection, every PAIRS_PER_CONNECTION pairs: under load one
        # uvicorn process can accept all sixteen keep-alive connections, and the check below
        # needs both processes to serve asks.
        for _ in range(PAIRS // PAIRS_PER_CONNECTION):
            with Client(server.url, timeout=60, retries=8) as client:
                study = client.get_study(study_id)
                for _ in range(PAIRS_PER_CONNECTION):
                    (trial,) = study.ask(worker_id=worker_id)
                    value = objective(trial.params)
                    done.append((trial, value, study.tell(trial.number, value)))
        return done

    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(worker, i) for i in range(THREADS)]
        try:
            per_thread = [f.result(timeout=300) for f in futures]
        except Exception as exc:
            raise AssertionError(f"a worker thread failed: {exc!r}\n{server.log_tail()}") from exc
    elapsed = time.monotonic() - started

    asked = [trial for results in per_thread for trial, _, _ in results]
    numbers = sorted(t.number for t in asked)
    assert numbers == list(range(THREADS * PAIRS)), (
        f"asked trial numbers have gaps or duplicates: "
        f"{len(numbers)} asks, {len(set(numbers))} distinct, max {max(numbers)}\n"
        + server.log_tail()
    )
    for index, results in enumerate(per_thread):
        for trial, value, told in results:
            assert trial.state == "running" and trial.worker_id == f"worker-{index}"
            assert trial.retries == 0
            assert told.number == trial.number and told.state == "completed"
            assert told.values == {"value": value}

    with Client(server.url) as client:
        study = client.get_study(study_id)
        stored = {t.number: t for t in all_trials(study)}
        assert sorted(stored) == list(range(THREADS * PAIRS)), server.log_tail()
        lost = [
            (t.number, stored[t.number].state, stored[t.number].values, value)
            for results in per_thread
            for t, value, _ in results
            if stored[t.number].state != "completed"
            or stored[t.number].values != {"value": value}
            or stored[t.number].params != t.params
        ]
        assert not lost, f"tells lost or changed (number, state, stored, told): {lost[:10]}"
        assert study.refresh().trial_counts == {"completed": THREADS * PAIRS}
    distinct_points = {tuple(sorted(t.params.items())) for t in asked}
    assert len(distinct_points) == THREADS * PAIRS, "two asks got the same engine point"

    # Both worker processes served asks: this really ran across processes.
    access = server.access()
    ask_pids = {pid for pid, _, _, path, _ in access if path.endswith("/ask")}
    assert ask_pids == server.worker_pids() and len(ask_pids) == 2, (ask_pids, elapsed)
    busy = sum(status == 503 for *_, status in access)
    print(f"{THREADS * PAIRS} ask/tell pairs in {elapsed:.1f} s, {busy} answers 503 (retried)")


# --- a worker's own unfinished trials come back to it ---------------------------------------


def test_ask_with_worker_id_returns_the_workers_running_trial(server: Server) -> None:
    """``worker_id`` is what every worker loop sends; a second ask before the tell returns the
    trial the worker already holds (within its lease) instead of a new one."""
    with Client(server.url, retries=0) as client:
        study = client.create_study("held", [FLOAT_X, FLOAT_Y])
        (first,) = study.ask(worker_id="w1")
        (again,) = study.ask(worker_id="w1")
        assert again.number == first.number == 0
        (other,) = study.ask(worker_id="w2")
        assert other.number == 1
        assert study.refresh().trial_counts == {"running": 2}


# --- 4. leases expire through the reaper --------------------------------------------------


def test_expired_lease_is_requeued_or_failed(
    database_url: str, start_server: Callable[..., Server]
) -> None:
    server = start_server(database_url, ASKTELL_REAPER_INTERVAL="0.2")
    with Client(server.url) as client:
        requeue = client.create_study("requeue", [FLOAT_X, FLOAT_Y])
        fail = client.create_study("fail", [FLOAT_X, FLOAT_Y], on_lease_expiry="fail")
        no_retry = client.create_study("no-retry", [FLOAT_X, FLOAT_Y], max_retries=0)
        first = {s.id: s.ask(lease_seconds=1)[0] for s in (requeue, fail, no_retry)}
        assert all(t.number == 0 and t.state == "running" for t in first.values())

        # Only the reapers run in the meantime: reading a trial never expires a lease.
        wait_for("the requeue trial to go stale", lambda: _state(requeue, 0) == "stale", server)
        wait_for("the fail trial to fail", lambda: _state(fail, 0) == "failed", server)
        wait_for("the max_retries=0 trial to fail", lambda: _state(no_retry, 0) == "failed", server)

        t = requeue.trial(0)
        assert (t.worker_id, t.lease_expires_at, t.retries) == (None, None, 0)
        (again,) = requeue.ask(worker_id="b")
        assert again.number == 0, f"the stale trial was not re-served: got {again.number}"
        assert again.retries == 1 and again.worker_id == "b" and again.state == "running"
        assert again.params == first[requeue.id].params
        assert requeue.tell(0, objective(again.params)).state == "completed"
        assert requeue.refresh().trial_counts == {"completed": 1}

        for study in (fail, no_retry):
            failed = study.trial(0)
            assert failed.reason and "lease expired" in failed.reason
            assert failed.completed_at is not None
            (fresh,) = study.ask(worker_id="b")
            assert fresh.number == 1 and fresh.retries == 0
            with pytest.raises(Conflict) as late:
                study.tell(0, 1.0)
            assert late.value.code == "trial_finished"
            assert study.refresh().trial_counts == {"failed": 1, "running": 1}
    assert re.search(r"asktell\.reaper: expired \d+ trial lease", server.log()), server.log_tail()


def test_ask_requeues_a_lapsed_lease_without_the_reaper(
    database_url: str, start_server: Callable[..., Server]
) -> None:
    """With the reaper asleep (an hour between passes), the next ask applies the lease policy
    itself: the lapsed trial comes back once, with retries == 1, and no new point is drawn."""
    server = start_server(database_url, ASKTELL_REAPER_INTERVAL="3600")
    with Client(server.url) as client:
        study = client.create_study("lapsed", [FLOAT_X, FLOAT_Y])
        (first,) = study.ask(lease_seconds=0.5)
        time.sleep(0.8)
        assert study.trial(0).state == "running"  # nobody expired it yet
        (again,) = study.ask(lease_seconds=60)
        assert (again.number, again.retries, again.params) == (0, 1, first.params), again
        (new,) = study.ask()
        assert (new.number, new.retries) == (1, 0)
        assert study.refresh().trial_counts == {"running": 2}
    assert "asktell.reaper: expired" not in server.log(), server.log_tail()


def _state(study: Study, number: int) -> str:
    return study.trial(number).state


# --- 5. idempotency keys across the two worker processes ----------------------------------


def _post(server: Server, path: str, body: bytes, key: str) -> tuple[int, int, bytes]:
    """One POST on a new connection: (client port, status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.connect()
        port = conn.sock.getsockname()[1]
        conn.request(
            "POST", path, body, {"Content-Type": "application/json", "Idempotency-Key": key}
        )
        response = conn.getresponse()
        return port, response.status, response.read()
    finally:
        conn.close()


def test_idempotency_key_replays_across_worker_processes(server: Server) -> None:
    with Client(server.url) as client:
        study = client.create_study("idem", [FLOAT_X, FLOAT_Y])
    path = f"/v1/studies/{study.id}/ask"
    body = json.dumps({"count": 2, "lease_seconds": 300}).encode()
    key = uuid.uuid4().hex

    answers: list[tuple[int, int, bytes]] = []

    def answered_by() -> set[int | None]:
        by_port = {port: pid for pid, port, _, p, _ in server.access() if p == path}
        return {by_port.get(port) for port, _, _ in answers}

    # Bursts of concurrent sends on new connections, until both worker processes answered.
    for _ in range(10):
        with ThreadPoolExecutor(6) as pool:
            answers += pool.map(_post, [server] * 6, [path] * 6, [body] * 6, [key] * 6)
        if len(answered_by() - {None}) >= 2:
            break
    time.sleep(0.2)  # let the last access-log lines land
    assert answered_by() - {None} == server.worker_pids(), (
        f"the same request did not reach both workers: {answered_by()}\n" + server.log_tail()
    )
    statuses = {status for _, status, _ in answers}
    assert statuses == {200}, f"{statuses}: {[b for _, _, b in answers][:3]}\n{server.log_tail()}"
    bodies = {b for _, _, b in answers}
    assert len(bodies) == 1, f"{len(bodies)} different bodies for one key: {bodies}"
    trials = json.loads(bodies.pop())["trials"]
    assert [t["number"] for t in trials] == [0, 1]

    with Client(server.url) as client:
        study = client.get_study(study.id)
        assert [t.number for t in all_trials(study)] == [0, 1], "trials created more than once"
        assert study.info.trial_counts == {"running": 2}

    # The same key with another body: 409, whichever process answers, and nothing changes.
    other = json.dumps({"count": 3, "lease_seconds": 300}).encode()
    for _ in range(4):
        _port, status, raw = _post(server, path, other, key)
        problem = json.loads(raw)
        assert status == 409 and problem["code"] == "idempotency_key_reused", raw
    # ... and on another path too.
    _port, status, raw = _post(server, f"/v1/studies/{study.id}/trials", b'{"params": {}}', key)
    assert status == 409 and json.loads(raw)["code"] == "idempotency_key_reused", raw
    with Client(server.url) as client:
        assert client.get_study(study.id).info.trial_counts == {"running": 2}


def test_concurrent_tells_with_one_key_all_get_the_stored_answer(server: Server) -> None:
    """A client that retries a tell (same key) while the first is still running must get the
    first answer back, never a 409 trial_finished about its own tell."""
    with Client(server.url) as client:
        study = client.create_study("idem-tell", [FLOAT_X, FLOAT_Y])
        trials = study.ask(count=10)
    failures = []
    for trial in trials:
        path = f"/v1/studies/{study.id}/trials/{trial.number}/tell"
        body = json.dumps({"values": {"value": objective(trial.params)}}).encode()
        key = uuid.uuid4().hex
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(_post, [server] * 6, [path] * 6, [body] * 6, [key] * 6))
        if {status for _, status, _ in answers} != {200} or len({b for *_, b in answers}) != 1:
            codes = [json.loads(b).get("code", "-") for *_, b in answers]
            failures.append((trial.number, [s for _, s, _ in answers], codes))
    assert not failures, (
        f"{len(failures)} of {len(trials)} tells sent 6 times at once with one key did not all "
        f"replay the stored answer (number, statuses, codes): {failures}"
    )


# --- 3. a PostgreSQL database behind the code ---------------------------------------------


def test_serve_refuses_an_unmigrated_postgres_database(
    scratch_pg_url: str, start_server: Callable[..., Server]
) -> None:
    refused = start_server(scratch_pg_url, cli=True, wait=False)
    assert refused.proc is not None
    try:
        code = refused.proc.wait(30)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            "asktell serve kept running on an empty database\n" + refused.log_tail()
        ) from None
    output = refused.log()
    assert code != 0, f"asktell serve exited with 0 on an empty database:\n{output}"
    assert "asktell db upgrade" in output, output
    assert "Uvicorn running" not in output and "Started server process" not in output, output

    # What the message says to do is enough: after it, the same command starts.
    migrated = run_cli("db", "upgrade", database_url=scratch_pg_url)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    server = start_server(scratch_pg_url, cli=True)
    with Client(server.url) as client:
        assert client.create_study("after-upgrade", [FLOAT_X]).info.trial_counts == {}


def test_uvicorn_workers_refuse_an_unmigrated_postgres_database(
    scratch_pg_url: str, start_server: Callable[..., Server]
) -> None:
    """Started by uvicorn directly (no ``asktell serve`` check), each worker refuses at start-up
    with the same message, and the server goes away instead of serving without a schema."""
    refused = start_server(scratch_pg_url, wait=False)
    assert refused.proc is not None
    try:
        refused.proc.wait(30)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            "uvicorn kept running on an empty database\n" + refused.log_tail()
        ) from None
    output = refused.log()
    assert "asktell db upgrade" in output and "Application startup failed" in output, output
    assert "Application startup complete" not in output, output


# --- 6. a restart keeps everything ----------------------------------------------------------


def test_restart_keeps_studies_trials_and_idempotency_keys(
    tmp_path: Path, start_server: Callable[..., Server]
) -> None:
    url = f"sqlite:///{tmp_path / 'restart.db'}"
    first = start_server(url)
    with Client(first.url) as client:
        study = client.create_study("restart", [FLOAT_X, FLOAT_Y], seed=3)
        trials = study.ask(count=3, worker_id="w")
        for t in trials[:2]:
            study.tell(t.number, objective(t.params))
        study.enqueue({"x": 1.0, "y": -2.0})
        key = uuid.uuid4().hex
        ask_path = f"/v1/studies/{study.id}/ask"
        _, status, replayed = _post(first, ask_path, b'{"worker_id": "k"}', key)
        assert status == 200 and json.loads(replayed)["trials"][0]["number"] == 3
        before_trials = [t.model_dump(mode="json") for t in all_trials(study)]
        before_study = study.refresh().model_dump(mode="json")

    code = first.stop()
    assert code == 0, f"the server did not shut down cleanly: {code}\n{first.log_tail()}"

    second = start_server(url, cli=True)  # this time through `asktell serve`
    with Client(second.url) as client:
        assert [s.id for s in client.list_studies()] == [study.id]
        study = client.get_study(study.id)
        assert study.info.model_dump(mode="json") == before_study
        assert study.info.trial_counts == {"completed": 2, "running": 2}
        assert [t.model_dump(mode="json") for t in all_trials(study)] == before_trials
        # The same key replays the same answer after the restart; numbering continues.
        _, status, again = _post(second, ask_path, b'{"worker_id": "k"}', key)
        assert (status, again) == (200, replayed)
        (nxt,) = study.ask(worker_id="new")
        assert nxt.number == 4 and nxt.params not in [t["params"] for t in before_trials]
        assert study.best().trials[0].number in (0, 1)


def test_concurrent_creates_of_one_name_return_one_study(server: Server) -> None:
    """Every worker calling create_study at start-up gets the same study, never a 409."""
    name = f"race-{uuid.uuid4().hex[:8]}"

    def create(_: int) -> int:
        with Client(server.url, retries=0) as client:
            return client.create_study(name, [FLOAT_X, FLOAT_Y]).id

    for _ in range(3):
        with ThreadPoolExecutor(max_workers=6) as pool:
            ids = list(pool.map(create, range(6)))
        assert len(set(ids)) == 1, ids
        name = f"race-{uuid.uuid4().hex[:8]}"


# --- 7. samplers --------------------------------------------------------------------------


def test_concurrent_tells_of_one_sampler_iteration_apply_one_step(server: Server) -> None:
    """Workers racing to tell the same iteration (on two server processes): one step is
    applied, the others get 409 stale_iteration, and the sampler's history has one entry per
    step."""
    with Client(server.url) as client:
        sampler = client.create_sampler(dim=2, n_targets=2, n_particles=8, seed=0)
        for iteration in range(3):
            grad = [[[1.0, -1.0]] * 8, [[-1.0, 1.0]] * 8]
            body = json.dumps({"iteration": iteration, "grad_log_prob": grad}).encode()
            path = f"/v1/samplers/{sampler.id}/tell"
            keys = [uuid.uuid4().hex for _ in range(6)]
            with ThreadPoolExecutor(6) as pool:
                answers = list(pool.map(_post, [server] * 6, [path] * 6, [body] * 6, keys))
            statuses = sorted(status for _, status, _ in answers)
            assert statuses == [200] + [409] * 5, (statuses, server.log_tail())
            codes = {json.loads(b)["code"] for _, status, b in answers if status == 409}
            assert codes == {"stale_iteration"}
        info = sampler.refresh()
        assert info.iteration == 3 and len(info.grad_norm_history) == 3


@pytest.mark.parametrize("depth", [1000, 10_000])
def test_json_nested_deeper_than_the_parser_goes_is_malformed_and_stores_nothing(
    server: Server, depth: int
) -> None:
    with httpx.Client(base_url=server.url) as http:
        sid = http.post("/v1/studies", json=study_body("deep")).json()["id"]
        r = http.patch(
            f"/v1/studies/{sid}",
            content=nested_metadata(depth),
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 400, r.text
        assert r.json()["code"] == "malformed_json" and "too deep" in r.json()["detail"]
        assert http.get(f"/v1/studies/{sid}").json()["metadata"] == {}
        assert http.get("/healthz").status_code == 200
