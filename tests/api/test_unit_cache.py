"""The units an ask hands a scheduler engine come from each process's ``UnitCache``
(``service.unit_rows``): the same as a whole read at every step, across two processes, with
failed and expired units; read incrementally; dropped with the study and past its cap."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import update

from client import Client
from service.store import Store, trials_t
from service.unit_rows import UnitCache, unit_list, unit_rows
from tests.api.test_pbt import ACCURACY, LR, CurveWorker
from tests.conftest import make_test_client


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request):
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


def _store(http) -> Store:
    return http.app.state.store


def _cached_and_whole(store: Store, sid: int, cache: UnitCache | None = None):
    def fn(conn):
        parsed = store.parsed_study(conn, sid)
        cached = (cache or store.units).load(conn, sid, parsed)
        return cached, unit_list(*unit_rows(conn, sid), parsed)

    return store.db.read(fn)


def _same(a, b) -> None:
    assert [u.number for u in a] == [u.number for u in b]
    for u, v in zip(a, b, strict=True):
        assert (u.state, u.y, u.y_before, u.checkpoint, u.spec) == (
            v.state,
            v.y,
            v.y_before,
            v.checkpoint,
            v.spec,
        )
        assert u.x.tolist() == v.x.tolist()


def _tell(study, worker: CurveWorker, trial) -> None:
    score, ref = worker(trial)
    study.tell(trial.number, score, checkpoint=ref)


def _ipbt(client: Client):
    options = {"t_max": 200, "population_size": 4, "initial_step_share": 0.05}
    return client.create_study(
        "units", [LR], objectives=ACCURACY, engine={"name": "ipbt", "options": options}, seed=3
    )


def test_the_cache_equals_a_whole_read_across_two_processes(url):
    """Two apps on one database stand for two server processes. Workers on either take units,
    report the score before training, tell, fail or abandon them (an expired lease puts the
    unit back); after every step both caches hand out exactly what a whole read gives."""
    rng = random.Random(5)
    with make_test_client(url) as a, make_test_client(url) as b:
        clients = [Client("http://testserver", transport=h._transport, retries=0) for h in (a, b)]
        study = _ipbt(clients[0])
        sid = study.id
        studies = [c.get_study(sid) for c in clients]
        workers = [CurveWorker(s) for s in studies]
        workers[1].saved = workers[0].saved  # one artifact store
        told = failed = expired = 0
        for _ in range(400):
            i = rng.randrange(2)
            answer = studies[i].ask_units(1, worker_id=f"w{i}", lease_seconds=30)
            if answer.finished:
                break
            for trial in answer.trials:
                kind = rng.random()
                if kind < 0.05:
                    # The worker vanished: its lease runs out and the unit waits again.
                    _store((a, b)[i]).db.write(
                        lambda c, n=trial.number: c.execute(
                            update(trials_t)
                            .where(trials_t.c.study_id == sid, trials_t.c.number == n)
                            .values(lease_expires_at=trials_t.c.started_at)
                        )
                    )
                    expired += 1
                    continue
                score, ref = workers[i](trial)
                if kind < 0.12:
                    studies[i].fail(trial.number, reason="diverged")
                    failed += 1
                else:
                    studies[i].tell(trial.number, score, checkpoint=ref)
                    told += 1
            for h in (a, b):
                _same(*_cached_and_whole(_store(h), sid))
        assert told > 30 and failed > 0 and expired > 0
        # The asks themselves went through each process's cache.
        assert all(sid in _store(h).units for h in (a, b))


def test_the_cache_reads_only_the_units_finished_since_its_last_load(client, http):
    study = _ipbt(client)
    worker = CurveWorker(study)
    first = study.ask_units(4, worker_id="w").trials
    for trial in first[:3]:
        _tell(study, worker, trial)
    store = _store(http)
    cached, whole = _cached_and_whole(store, study.id)
    _same(cached, whole)
    assert [u.state for u in cached] == ["completed"] * 3 + ["pending"]
    # A finished unit changed behind the cache's back (they never change) is not seen ...
    store.db.write(
        lambda c: c.execute(
            update(trials_t)
            .where(trials_t.c.study_id == study.id, trials_t.c.number == first[0].number)
            .values(values={"accuracy": 0.5})
        )
    )
    # ... while the pending one, finished since, is.
    _tell(study, worker, first[3])
    cached, whole = _cached_and_whole(store, study.id)
    assert cached[0].y != whole[0].y == -0.5  # minimized: the score times -1
    assert cached[3].state == whole[3].state == "completed"
    _same(cached[1:], whole[1:])
    # Dropped with its study (here: by hand), it is read whole again.
    store.units.forget(study.id)
    _same(*_cached_and_whole(store, study.id))


def test_the_cache_keeps_to_its_cap_least_recently_used_first(client, http):
    store = _store(http)
    cache = UnitCache(max_units=6)
    ids = []
    for name in ("s1", "s2"):
        study = (
            _ipbt(client)
            if not ids
            else client.create_study(
                name, [LR], objectives=ACCURACY, engine={"name": "pbt", "options": {"t_max": 30}}
            )
        )
        worker = CurveWorker(study)
        for trial in study.ask_units(4, worker_id="w").trials:
            _tell(study, worker, trial)
        ids.append(study.id)
    _cached_and_whole(store, ids[0], cache)
    _cached_and_whole(store, ids[1], cache)  # 4 + 4 finished units: the first study goes
    assert ids[0] not in cache and ids[1] in cache
    _same(*_cached_and_whole(store, ids[0], cache))
    assert ids[0] in cache and ids[1] not in cache
    # A study larger than the cap is read whole at every ask, and still right.
    small = UnitCache(max_units=3)
    _same(*_cached_and_whole(store, ids[0], small))
    assert ids[0] not in small
