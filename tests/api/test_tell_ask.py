"""Tell-and-ask: a tell with ``"ask"`` returns the told trial and the next trials; the tell
stands when the ask part cannot serve; an Idempotency-Key replay asks nothing again. On SQLite
and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.conftest import make_test_client, study_body


@pytest.fixture(params=["sqlite", "postgresql"])
def api(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    with make_test_client(request.getfixturevalue(name)) as test_client:
        yield test_client


def _study(api: TestClient, **fields: object) -> int:
    return api.post("/v1/studies", json=study_body(**fields)).json()["id"]


def _ask_one(api: TestClient, sid: int) -> int:
    (trial,) = api.post(f"/v1/studies/{sid}/ask", json={"worker_id": "w"}).json()["trials"]
    return trial["number"]


def _tell(api: TestClient, sid: int, number: int, ask: dict | None, key: str | None = None):
    body: dict[str, object] = {"values": {"value": float(number)}}
    if ask is not None:
        body["ask"] = ask
    headers = {"Idempotency-Key": key} if key else {}
    return api.post(f"/v1/studies/{sid}/trials/{number}/tell", json=body, headers=headers)


def _counts(api: TestClient, sid: int) -> dict[str, int]:
    return api.get(f"/v1/studies/{sid}").json()["trial_counts"]


def test_a_tell_with_ask_returns_the_told_trial_and_the_next_ones(api):
    sid = _study(api)
    number = _ask_one(api, sid)
    r = _tell(api, sid, number, {"count": 2, "worker_id": "w", "lease_seconds": 60})
    assert r.status_code == 200
    body = r.json()
    assert body["number"] == number and body["state"] == "completed"
    assert body["values"] == {"value": float(number)}
    nxt = body["next"]
    assert [t["number"] for t in nxt["trials"]] == [number + 1, number + 2]
    assert all(t["state"] == "running" and t["worker_id"] == "w" for t in nxt["trials"])
    assert nxt["problem"] is None and nxt["finished"] is False
    assert _counts(api, sid) == {"completed": 1, "running": 2}


def test_a_tell_without_ask_answers_as_before(api):
    sid = _study(api)
    number = _ask_one(api, sid)
    body = _tell(api, sid, number, None).json()
    assert "next" not in body
    assert body == api.get(f"/v1/studies/{sid}/trials/{number}").json()


def test_a_replay_returns_the_same_next_trials_and_creates_none(api):
    sid = _study(api)
    number = _ask_one(api, sid)
    first = _tell(api, sid, number, {"count": 1, "worker_id": "w"}, key="k1")
    again = _tell(api, sid, number, {"count": 1, "worker_id": "w"}, key="k1")
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert len(first.json()["next"]["trials"]) == 1
    assert _counts(api, sid) == {"completed": 1, "running": 1}
    # Another request under the key is a conflict, as for any write.
    r = _tell(api, sid, number, {"count": 2, "worker_id": "w"}, key="k1")
    assert r.status_code == 409 and r.json()["code"] == "idempotency_key_reused"


def test_a_retry_after_the_tell_committed_alone_asks_once(api):
    """The tell's answer is stored under its own key: a retry whose first attempt told but did
    not ask (the server died in between) tells nothing twice and asks once."""
    sid = _study(api)
    number = _ask_one(api, sid)
    # The first attempt: the tell part committed, then the study was paused (ask refused).
    api.patch(f"/v1/studies/{sid}", json={"state": "paused"})
    refused = _tell(api, sid, number, {"count": 1}, key="k2").json()
    assert refused["state"] == "completed" and refused["next"]["trials"] == []
    api.patch(f"/v1/studies/{sid}", json={"state": "active"})
    again = _tell(api, sid, number, {"count": 1}, key="k2").json()
    assert again == refused  # the stored combined answer: no second ask
    assert _counts(api, sid) == {"completed": 1}


def test_the_tell_stands_when_the_study_is_paused(api):
    sid = _study(api)
    number = _ask_one(api, sid)
    api.patch(f"/v1/studies/{sid}", json={"state": "paused"})
    r = _tell(api, sid, number, {"count": 1})
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == "completed"
    nxt = body["next"]
    assert nxt["trials"] == [] and nxt["problem"]["code"] == "study_not_active"
    assert nxt["problem"]["status"] == 409
    assert _counts(api, sid) == {"completed": 1}


def test_the_tell_stands_when_max_trials_is_reached(api):
    sid = _study(api, max_trials=1)
    number = _ask_one(api, sid)
    body = _tell(api, sid, number, {"count": 1}).json()
    assert body["state"] == "completed"
    assert body["next"]["problem"]["code"] == "max_trials_reached"
    assert _counts(api, sid) == {"completed": 1}


def test_an_ask_part_failing_after_its_writes_leaves_the_tell_alone(api, monkeypatch):
    import service.ask

    sid = _study(api)
    number = _ask_one(api, sid)
    before = api.get(f"/v1/studies/{sid}/engine").json()
    insert_proposed = service.ask._insert_proposed

    def insert_then_fail(*args: object, **kwargs: object) -> object:
        insert_proposed(*args, **kwargs)  # the new trial is written, then the ask fails
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(service.ask, "_insert_proposed", insert_then_fail)
    r = _tell(api, sid, number, {"count": 1}, key="k")
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == "completed" and body["next"]["trials"] == []
    assert body["next"]["problem"]["code"] == "internal_error"
    assert _counts(api, sid) == {"completed": 1}  # the ask's trial was rolled back
    assert api.get(f"/v1/studies/{sid}/engine").json() == before
    monkeypatch.undo()
    assert _tell(api, sid, number, {"count": 1}, key="k").json() == body  # the stored answer
    assert _counts(api, sid) == {"completed": 1}


def test_a_short_tell_runs_on_the_event_loop_after_other_threads_writes(api, monkeypatch):
    import asyncio
    import threading

    import service.db.session
    import service.tell_ask

    where: list[str] = []
    tell = service.tell_ask.tell

    def recorded(*args: object, **kwargs: object) -> object:
        try:
            asyncio.get_running_loop()
            where.append("loop")
        except RuntimeError:
            where.append("thread")
        return tell(*args, **kwargs)

    monkeypatch.setattr(service.tell_ask, "tell", recorded)
    sid = _study(api)
    number = _ask_one(api, sid)
    number = _tell(api, sid, number, {"count": 1}).json()["next"]["trials"][0]["number"]
    db = api.app.state.store.db
    waits: list[object] = []
    when_writes_free = db.when_writes_free
    monkeypatch.setattr(
        db, "when_writes_free", lambda call: waits.append(call) or when_writes_free(call)
    )

    def tell_while_another_thread_writes(number: int) -> dict:
        taken = threading.Event()

        def write(conn: object) -> None:
            taken.set()
            threading.Event().wait(0.2)  # the tell below comes meanwhile

        holder = threading.Thread(target=db.write, args=(write,))
        holder.start()
        assert taken.wait(10)
        with db.writes_now() as held:
            assert not held  # another thread holds it (PostgreSQL: there is none to take)
        body = _tell(api, sid, number, {"count": 1}).json()
        holder.join()
        assert body["state"] == "completed" and len(body["next"]["trials"]) == 1
        return body["next"]["trials"][0]

    # It waits for the other thread's write, then runs on the loop; with no time to wait, it
    # goes to a worker thread (which waits for the lock there).
    monkeypatch.setattr(service.tell_ask, "LOCK_WAIT_SECONDS", 10.0)
    number = tell_while_another_thread_writes(number)["number"]
    monkeypatch.setattr(service.tell_ask, "LOCK_WAIT_SECONDS", 0.0)
    number = tell_while_another_thread_writes(number)["number"]
    many = _tell(api, sid, number, {"count": 9}).json()
    assert len(many["next"]["trials"]) == 9
    # In one of several server processes, a thread too, at once.
    monkeypatch.setattr(service.db.session.multiprocessing, "parent_process", lambda: object())
    monkeypatch.setattr(service.tell_ask, "LOCK_WAIT_SECONDS", 10.0)
    number = many["next"]["trials"][0]["number"]
    waited = len(waits)
    assert _tell(api, sid, number, None).json()["state"] == "completed"
    assert len(waits) == waited
    # On PostgreSQL every tell runs in a worker thread at once; a tell-and-ask of 9 trials, too.
    loop = "loop" if db.is_sqlite else "thread"
    assert where == [loop, loop, "thread", "thread", "thread"]
    assert bool(waits) == db.is_sqlite
    assert _counts(api, sid) == {"completed": 5, "running": 8}


def test_a_failed_tell_asks_nothing(api):
    sid = _study(api)
    number = _ask_one(api, sid)
    _tell(api, sid, number, None)
    r = _tell(api, sid, number, {"count": 1})
    assert r.status_code == 409 and r.json()["code"] == "trial_finished"
    assert _counts(api, sid) == {"completed": 1}


def test_bad_ask_bodies_are_422(api):
    sid = _study(api)
    number = _ask_one(api, sid)
    for bad in ({"count": 0}, {"count": 1001}, {"lease_seconds": 0.001}, {"nope": 1}):
        r = _tell(api, sid, number, bad)
        assert r.status_code == 422 and r.json()["code"] == "validation_error", bad
    assert _counts(api, sid) == {"running": 1}


def test_a_scheduler_unit_tell_asks_for_the_next_unit(api):
    lr = {"type": "float", "name": "lr", "low": 0.001, "high": 1.0, "log": True}
    engine = {
        "name": "pbt",
        "options": {"t_max": 20, "population_size": 2, "interval": 10, "synchronous": True},
    }
    body = {
        "name": "pbt",
        "parameters": [lr],
        "objectives": [{"name": "accuracy", "goal": "maximize"}],
        "engine": engine,
        "seed": 1,
    }
    sid = api.post("/v1/studies", json=body).json()["id"]
    units = api.post(f"/v1/studies/{sid}/ask", json={"count": 2}).json()["trials"]
    assert [u["unit"]["to_step"] for u in units] == [10, 10]
    url = f"/v1/studies/{sid}/trials/{{}}/tell"
    told = {"values": {"accuracy": 0.5}, "checkpoint": "c0", "ask": {"count": 1}}
    first = api.post(url.format(units[0]["number"]), json=told).json()
    # Generation 0 is still training (the other unit): nothing to hand out yet.
    assert first["state"] == "completed" and first["next"]["trials"] == []
    assert first["next"]["retry_after"] > 0 and first["next"]["problem"] is None
    told = {**told, "checkpoint": "c1"}
    second = api.post(url.format(units[1]["number"]), json=told).json()
    (unit,) = second["next"]["trials"]
    assert unit["unit"]["from_step"] == 10 and unit["unit"]["to_step"] == 20


def _pbt_study(api: TestClient) -> int:
    """A pbt study: its engine reads observations, so the tell and the ask part commit apart."""
    lr = {"type": "float", "name": "lr", "low": 0.001, "high": 1.0, "log": True}
    body = {
        "name": "pbt-keys",
        "parameters": [lr],
        "objectives": [{"name": "accuracy", "goal": "maximize"}],
        "engine": {"name": "pbt", "options": {"t_max": 30, "population_size": 3, "interval": 10}},
        "seed": 1,
    }
    return api.post("/v1/studies", json=body).json()["id"]


def _tell_unit(api: TestClient, sid: int, number: int, key: str):
    body = {"values": {"accuracy": 0.5}, "checkpoint": f"c{number}", "ask": {"count": 1}}
    url = f"/v1/studies/{sid}/trials/{number}/tell"
    return api.post(url, json=body, headers={"Idempotency-Key": key})


def test_a_replay_on_a_scheduler_study_asks_nothing_again(api):
    sid = _pbt_study(api)
    units = api.post(f"/v1/studies/{sid}/ask", json={"count": 3}).json()["trials"]
    first = _tell_unit(api, sid, units[0]["number"], "u1")
    (unit,) = first.json()["next"]["trials"]
    assert unit["number"] == 3
    again = _tell_unit(api, sid, units[0]["number"], "u1")
    assert again.status_code == 200 and again.content == first.content
    assert _counts(api, sid) == {"completed": 1, "running": 3}


def test_a_retry_after_a_crash_between_tell_and_ask_tells_once_and_asks(api):
    """The first attempt's tell committed (under the key derived from the request's) and the
    server died before the ask: the retry tells nothing twice and asks once."""
    from client.models import TellRequest
    from service import tell_ask, trials
    from service.db.models import DEFAULT_TENANT_ID
    from service.idempotency import IdemKey

    sid = _pbt_study(api)
    units = api.post(f"/v1/studies/{sid}/ask", json={"count": 3}).json()["trials"]
    number = units[0]["number"]
    path = f"/v1/studies/{sid}/trials/{number}/tell"
    body = {"values": {"accuracy": 0.5}, "checkpoint": "c0", "ask": {"count": 1}}
    data = json.dumps(body).encode()
    idem = IdemKey.build("u2", "POST", path, data)
    store = api.app.state.store
    req = TellRequest.model_validate(body)
    trials.tell(store, DEFAULT_TENANT_ID, sid, number, req, tell_ask._tell_key(idem))
    assert _counts(api, sid) == {"completed": 1, "running": 2}
    headers = {"Idempotency-Key": "u2", "Content-Type": "application/json"}
    retry = api.post(path, content=data, headers=headers)
    assert retry.status_code == 200 and retry.json()["state"] == "completed"
    (unit,) = retry.json()["next"]["trials"]
    assert unit["number"] == 3
    assert _counts(api, sid) == {"completed": 1, "running": 3}
    again = api.post(path, content=data, headers=headers)
    assert again.content == retry.content
    assert _counts(api, sid) == {"completed": 1, "running": 3}


def _ask(api: TestClient, sid: int, count: int) -> list[int]:
    trials = api.post(f"/v1/studies/{sid}/ask", json={"count": count}).json()["trials"]
    return [t["number"] for t in trials]


def _tell_and_ask_in_threads(
    api: TestClient, sid: int, numbers: list[int], monkeypatch
) -> tuple[list, int]:
    """Tell-and-ask each of ``numbers`` from its own thread, every tell in a worker thread (as
    on PostgreSQL), the first one's write held until the others queue behind it; returns the
    responses, and how many write transactions the tells made."""
    import threading

    import service.tell_ask

    store = api.app.state.store
    monkeypatch.setattr(service.tell_ask, "_short", lambda *args: False)
    writes: list[str] = []
    write = store.db.write
    monkeypatch.setattr(store.db, "write", lambda fn: writes.append(fn.__qualname__) or write(fn))
    alone = service.tell_ask._in_one_alone
    first = threading.Event()

    def held_until_the_others_queue(*args: object) -> object:
        if not first.is_set():
            first.set()
            queue = store.write_groups._queues[sid]
            for _ in range(1000):
                if len(queue.waiting) == len(numbers) - 1:
                    break
                threading.Event().wait(0.01)
        return alone(*args)

    monkeypatch.setattr(service.tell_ask, "_in_one_alone", held_until_the_others_queue)
    responses: dict[int, object] = {}

    def one(i: int, number: int) -> None:
        if i > 0:
            first.wait(10)
        ask = {"count": 1, "worker_id": f"w{number}"}
        responses[i] = _tell(api, sid, number, ask, key=f"k{number}")

    threads = [threading.Thread(target=one, args=(i, n)) for i, n in enumerate(numbers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    monkeypatch.undo()
    # The lease reaper writes in the background now and then: not a tell's transaction.
    tells = [name for name in writes if not name.startswith("reap_once")]
    return [responses[i] for i in range(len(numbers))], len(tells)


def test_tell_and_asks_queued_on_one_study_share_a_transaction(api, monkeypatch):
    sid = _study(api)
    numbers = _ask(api, sid, 4)
    responses, writes = _tell_and_ask_in_threads(api, sid, numbers, monkeypatch)
    # The first alone; the three that queued behind it in one transaction.
    assert writes == 2
    bodies = [r.json() for r in responses]
    assert [b["number"] for b in bodies] == numbers
    assert [r.status_code for r in responses] == [200] * 4
    assert all(b["state"] == "completed" for b in bodies)
    handed = [t["number"] for b in bodies for t in b["next"]["trials"]]
    assert sorted(handed) == [4, 5, 6, 7]
    assert _counts(api, sid) == {"completed": 4, "running": 4}
    # Each answer was stored under its own key: a replay returns it and asks nothing.
    for number, r in zip(numbers, responses, strict=True):
        ask = {"count": 1, "worker_id": f"w{number}"}
        again = _tell(api, sid, number, ask, key=f"k{number}")
        assert again.status_code == 200 and again.content == r.content
    assert _counts(api, sid) == {"completed": 4, "running": 4}


def test_a_failing_write_in_a_group_leaves_the_others_answered_alone(api, monkeypatch):
    sid = _study(api)
    numbers = _ask(api, sid, 3)
    _tell(api, sid, numbers[2], None)  # finished already: its tell-and-ask is 409
    responses, writes = _tell_and_ask_in_threads(api, sid, [*numbers, numbers[2]], monkeypatch)
    # The first alone, the group of three rolled back, then each of them alone.
    assert writes == 5
    assert [r.status_code for r in responses] == [200, 200, 409, 409]
    assert responses[2].json()["code"] == "trial_finished"
    handed = [t["number"] for r in responses[:2] for t in r.json()["next"]["trials"]]
    assert sorted(handed) == [3, 4]
    assert _counts(api, sid) == {"completed": 3, "running": 2}


def test_the_thread_whose_turn_it_is_writes_its_own_in_its_group(api, monkeypatch):
    """More writes queued than a group holds: each group holds its leader's, so every request
    gets its own answer."""
    import service.write_groups

    monkeypatch.setattr(service.write_groups, "MAX_GROUP", 2)
    sid = _study(api)
    numbers = _ask(api, sid, 5)
    responses, writes = _tell_and_ask_in_threads(api, sid, numbers, monkeypatch)
    assert writes == 3  # the first alone, then two groups of two
    assert [r.status_code for r in responses] == [200] * 5
    assert [r.json()["number"] for r in responses] == numbers
    handed = [t["number"] for r in responses for t in r.json()["next"]["trials"]]
    assert sorted(handed) == [5, 6, 7, 8, 9]
