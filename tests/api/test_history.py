"""History in completion order, and the per-process history cache against a full load."""

import random
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient
from numpy.testing import assert_array_equal
from sqlalchemy import select, update

from service.app import create_app
from service.ask import load_history
from service.history import HistoryCache, full_history
from service.problem import parse_study
from service.settings import Settings
from service.store import Store, studies_t, trials_t
from tests.conftest import make_test_client, study_body

#: A model-based engine (asks go through the history cache) that stays on its cheap initial
#: design for the whole test.
GP_INITIAL = {"name": "gp", "options": {"n_initial": 10_000}}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request):
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


def _store(http: TestClient) -> Store:
    return http.app.state.store


def _create(http, name="demo", **fields):
    r = http.post("/v1/studies", json=study_body(name, **fields))
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _ask(http, sid, **body):
    r = http.post(f"/v1/studies/{sid}/ask", json=body)
    assert r.status_code == 200, r.text
    return [t["number"] for t in r.json()["trials"]]


def _tell(http, sid, number, **body):
    r = http.post(f"/v1/studies/{sid}/trials/{number}/tell", json=body)
    assert r.status_code == 200, r.text


def _enqueue_completed(http, sid, value):
    r = http.post(
        f"/v1/studies/{sid}/trials",
        json={"params": {"x": 0.5, "y": -0.5}, "values": {"value": value}},
    )
    assert r.status_code == 201, r.text
    return r.json()["number"]


def _cached_and_full(store: Store, sid: int, parsed=None):
    def fn(conn):
        s = parsed or store.parsed_study(conn, sid)
        pending = np.zeros((0, s.problem.d))
        return store.history.load(conn, sid, s, pending), full_history(conn, sid, s, pending)

    return store.db.read(fn)


def _assert_same(a, b):
    for name in ("X", "Y", "C"):
        assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def _seqs(store, sid):
    rows = store.db.read(
        lambda c: c.execute(
            select(trials_t.c.number, trials_t.c.state, trials_t.c.completed_seq).where(
                trials_t.c.study_id == sid
            )
        ).all()
    )
    return {r.number: (r.state, r.completed_seq) for r in rows}


def _revision(store, sid):
    return store.db.read(
        lambda c: c.execute(select(studies_t.c.revision).where(studies_t.c.id == sid)).scalar_one()
    )


def test_trials_told_out_of_number_order_come_back_in_completion_order(url):
    with make_test_client(url) as http:
        sid = _create(http, engine=GP_INITIAL)
        numbers = _ask(http, sid, count=5)
        assert numbers == [0, 1, 2, 3, 4]
        for n in (3, 0, 4, 1):
            _tell(http, sid, n, values={"value": float(n)})
        _tell(http, sid, 2, state="failed")
        store = _store(http)
        cached, full = _cached_and_full(store, sid)
        assert full.Y[:, 0].tolist() == [3.0, 0.0, 4.0, 1.0]
        _assert_same(cached, full)
        uncached = store.db.read(
            lambda c: load_history(c, sid, store.parsed_study(c, sid), np.zeros((0, 2)))
        )
        _assert_same(uncached, full)


def test_failed_and_infeasible_trials_come_as_x_failed(url):
    with make_test_client(url) as http:
        sid = _create(http, engine=GP_INITIAL)
        _ask(http, sid, count=4)
        _tell(http, sid, 0, values={"value": 1.0})
        _tell(http, sid, 1, state="failed", reason="crashed")
        _tell(http, sid, 3, state="infeasible", reason="cannot be built")
        store = _store(http)
        stored = store.db.read(
            lambda c: {
                r.number: np.frombuffer(r.x)
                for r in c.execute(
                    select(trials_t.c.number, trials_t.c.x).where(trials_t.c.study_id == sid)
                )
            }
        )
        for cache in (store.history, None):
            history = store.db.read(
                lambda c, cache=cache: load_history(
                    c, sid, store.parsed_study(c, sid), np.zeros((0, 2)), cache
                )
            )
            assert_array_equal(history.X, stored[0][None, :])
            failed = sorted(map(tuple, history.X_failed))
            assert failed == sorted([tuple(stored[1]), tuple(stored[3])])


def test_objectives_and_constraints_become_minimized_y_and_slack_c(url):
    body = {
        "engine": GP_INITIAL,
        "objectives": [{"name": "loss", "goal": "minimize"}, {"name": "acc", "goal": "maximize"}],
        "constraints": [
            {"name": "mem", "op": "<=", "threshold": 2.5},
            {"name": "speed", "op": ">=", "threshold": 0.1},
        ],
    }
    told = {}
    with make_test_client(url) as http:
        sid = _create(http, **body)
        for i, n in enumerate(reversed(_ask(http, sid, count=4))):
            told[n] = {"loss": 0.1 * n, "acc": 1 / (n + 3)}, {"mem": 1.7 * i, "speed": 0.3 - i / 7}
            _tell(http, sid, n, values=told[n][0], constraints=told[n][1])
        store = _store(http)
        cached, full = _cached_and_full(store, sid)
        parsed = store.parsed_study_for(sid)
    expected_Y = [[v["loss"], -v["acc"]] for v, _ in told.values()]
    expected_C = [parsed.constraint_slack(c) for _, c in told.values()]
    assert cached.Y.tolist() == expected_Y and cached.C.tolist() == expected_C
    _assert_same(cached, full)


def test_cache_equals_a_full_load_across_two_processes(url):
    """Two apps on one database stand for two server processes, each with its own cache.
    Each step asks, tells, fails or enqueues through one of them; both must then load exactly
    the trials completed so far, in the order they completed."""
    rng = random.Random(11)
    with make_test_client(url) as a, make_test_client(url) as b:
        sid = _create(a, engine=GP_INITIAL)
        pending: list[int] = []
        completed: list[float] = []
        for _ in range(40):
            app = rng.choice([a, b])
            op = rng.random()
            if op < 0.35 or not pending:
                # A worker gets its own unfinished trials back first.
                asked = _ask(app, sid, count=rng.randint(1, 3), worker_id=rng.choice("uv"))
                pending += [n for n in asked if n not in pending]
            elif op < 0.45:
                value = 100.0 + len(completed)
                _enqueue_completed(app, sid, value)
                completed.append(value)
            else:
                n = pending.pop(rng.randrange(len(pending)))
                kind = rng.random()
                if kind < 0.2:
                    _tell(app, sid, n, state="failed", reason="boom")
                elif kind < 0.3:
                    _tell(app, sid, n, state="infeasible")
                else:
                    _tell(app, sid, n, values={"value": float(n)})
                    completed.append(float(n))
            for other in (a, b):
                cached, full = _cached_and_full(_store(other), sid)
                assert cached.Y[:, 0].tolist() == completed
                _assert_same(cached, full)
        assert len(completed) > 10
        # The asks themselves went through each app's cache.
        assert sid in _store(a).history and sid in _store(b).history


def test_the_cache_reads_only_trials_completed_since_its_last_load(http):
    sid = _create(http, engine=GP_INITIAL)
    for n in _ask(http, sid, count=3):
        _tell(http, sid, n, values={"value": float(n)})
    store = _store(http)
    _cached_and_full(store, sid)
    # A change behind the cache's back (finished trials never change) is not seen ...
    store.db.write(
        lambda c: c.execute(
            update(trials_t)
            .where(trials_t.c.study_id == sid, trials_t.c.number == 1)
            .values(values={"value": 42.0})
        )
    )
    (n,) = _ask(http, sid)
    _tell(http, sid, n, values={"value": 7.0})
    cached, full = _cached_and_full(store, sid)
    assert cached.Y[:, 0].tolist() == [0.0, 1.0, 2.0, 7.0]
    assert full.Y[:, 0].tolist() == [0.0, 42.0, 2.0, 7.0]
    # ... until the entry is dropped and loaded whole again.
    store.history.forget(sid)
    cached, full = _cached_and_full(store, sid)
    _assert_same(cached, full)


def test_a_new_parsed_study_rebuilds_the_arrays(http):
    """Study configs do not change through the API; a new ``ParsedStudy`` (another parse of
    the config) must still never be served arrays built for the old one."""
    sid = _create(http, engine=GP_INITIAL)
    for n in _ask(http, sid, count=3):
        _tell(http, sid, n, values={"value": float(n) + 1})
    store = _store(http)
    parsed = store.db.read(lambda c: store.parsed_study(c, sid))
    cached, _ = _cached_and_full(store, sid, parsed)
    assert cached.Y[:, 0].tolist() == [1.0, 2.0, 3.0]
    objectives = [o.model_copy(update={"goal": "maximize"}) for o in parsed.config.objectives]
    flipped = parse_study(parsed.config.model_copy(update={"objectives": objectives}))
    cached, full = _cached_and_full(store, sid, flipped)
    assert cached.Y[:, 0].tolist() == [-1.0, -2.0, -3.0]
    _assert_same(cached, full)


def test_views_handed_out_never_change_and_are_read_only(http):
    sid = _create(http, engine=GP_INITIAL)
    _enqueue_completed(http, sid, 0.0)
    store = _store(http)
    before, _ = _cached_and_full(store, sid)
    kept = [before.X.copy(), before.Y.copy(), before.C.copy()]
    assert not before.X.flags.writeable and not before.Y.flags.writeable
    for i in range(1, 80):  # past the first buffer's 64 rows: the arrays grow
        _enqueue_completed(http, sid, float(i))
        if i % 30 == 0:
            _cached_and_full(store, sid)
    after, full = _cached_and_full(store, sid)
    _assert_same(after, full)
    assert after.Y[:, 0].tolist() == [float(i) for i in range(80)]
    for array, copy in zip((before.X, before.Y, before.C), kept, strict=True):
        assert_array_equal(array, copy)


def test_deleting_a_study_drops_its_arrays(http):
    sid = _create(http, engine=GP_INITIAL)
    _enqueue_completed(http, sid, 1.0)
    _ask(http, sid)
    assert sid in _store(http).history
    assert http.delete(f"/v1/studies/{sid}").status_code == 204
    assert sid not in _store(http).history


def test_the_cache_keeps_to_its_memory_cap_least_recently_used_first(http):
    store = _store(http)
    sids = [_create(http, f"s{i}", engine=GP_INITIAL) for i in range(3)]
    for i, sid in enumerate(sids):
        _enqueue_completed(http, sid, float(i))
    # One completed trial: 64 rows of X (d=2) and Y (m=1) in float64.
    entry = 64 * 3 * 8
    cache = HistoryCache(max_bytes=2 * entry + entry // 2)

    def load(sid, cache=cache):
        def fn(conn):
            parsed = store.parsed_study(conn, sid)
            return cache.load(conn, sid, parsed, np.zeros((0, 2)))

        return store.db.read(fn)

    for sid in (sids[0], sids[1], sids[0], sids[2]):
        assert load(sid).Y[:, 0].tolist() == [float(sids.index(sid))]
    assert cache.nbytes == 2 * entry
    assert sids[0] in cache and sids[1] not in cache and sids[2] in cache
    tiny = HistoryCache(max_bytes=entry - 1)
    assert load(sids[1], tiny).Y[:, 0].tolist() == [1.0]
    assert sids[1] not in tiny and tiny.nbytes == 0


def test_every_way_of_finishing_a_trial_takes_the_next_seq(sqlite_url):
    # The reaper sleeps: the expired lease is handled by the next ask, in its transaction.
    app = create_app(Settings(database_url=sqlite_url, reaper_interval=3600))
    with TestClient(app) as http:
        sid = _create(http, engine=GP_INITIAL, on_lease_expiry="fail")
        a, b = _ask(http, sid, count=2)
        (c,) = _ask(http, sid, lease_seconds=0.05)
        _tell(http, sid, b, values={"value": 1.0})
        e = _enqueue_completed(http, sid, 2.0)
        _tell(http, sid, a, state="failed")
        time.sleep(0.1)
        (d,) = _ask(http, sid, worker_id="next")
        store = _store(http)
        seqs = _seqs(store, sid)
        assert seqs[c][0] == "failed" and seqs[d] == ("running", None)
        finished = sorted((n for n in seqs if seqs[n][1] is not None), key=lambda n: seqs[n][1])
        assert finished == [b, e, a, c]
        assert seqs[finished[-1]][1] <= _revision(store, sid)
        cached, full = _cached_and_full(store, sid)
        assert cached.Y[:, 0].tolist() == [1.0, 2.0]
        _assert_same(cached, full)


def test_import_numbers_finished_trials_in_the_order_they_finished(http):
    sid = _create(http, engine=GP_INITIAL)
    numbers = _ask(http, sid, count=5)
    for n in (4, 1):
        _tell(http, sid, n, values={"value": float(n)})
    _tell(http, sid, 0, state="failed")
    _tell(http, sid, 3, values={"value": 3.0})
    exported = http.get(f"/v1/studies/{sid}/export").json()
    r = http.post("/v1/studies/import", json=exported, params={"name": "copy"})
    assert r.status_code == 201, r.text
    copy = r.json()["id"]
    store = _store(http)
    seqs = _seqs(store, copy)
    assert [seqs[n][1] for n in numbers] == [3, 2, None, 4, 1]
    assert seqs[2] == ("stale", None)
    assert _revision(store, copy) >= 4
    cached, full = _cached_and_full(store, copy)
    assert cached.Y[:, 0].tolist() == [4.0, 1.0, 3.0]
    _assert_same(cached, full)
    _assert_same(full, _cached_and_full(store, sid)[1])
