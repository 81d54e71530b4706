"""The suggestion pool through the HTTP API, on SQLite and PostgreSQL: an ask serves a fresh
pooled point and its details say so, a point older than ``max_staleness`` finished trials is
not served, ``max_staleness`` 0 never serves from the pool, a point told since is dropped, and
an ask that ran the engine empties the pool.

The refills run when the test says (``refill``): the app's background refiller is replaced by a
recorder of the refills it would have asked. ``gp`` on two parameters proposes its first five
points from its Sobol stream, so no model is fitted except where a test tells more trials."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service import pool_refill
from service.app import create_app
from service.db.models import DEFAULT_TENANT_ID
from service.pool_refill import Pace, batch_size, refill
from service.settings import Settings
from service.store import Store
from service.suggestion_pool import serve, suggestions_t
from tests.conftest import study_body


@pytest.fixture(params=["sqlite", "postgresql"])
def pooled(request):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    app = create_app(Settings(database_url=url, reaper_interval=0.2, suggestion_pool=True))
    with TestClient(app) as http:
        store: Store = app.state.store
        asked: list[int] = []
        store.refill_pool = lambda tenant_id, study_id: asked.append(study_id)
        http.asked = asked
        http.store = store
        yield http


def _study(http, **fields) -> int:
    r = http.post("/v1/studies", json=study_body(engine={"name": "gp"}, seed=3, **fields))
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def _ask(http, sid: int, count: int = 1) -> list[dict]:
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": count})
    assert r.status_code == 200, r.text
    return r.json()["trials"]


def _tell(http, sid: int, trial: dict) -> None:
    p = trial["params"]
    r = http.post(
        f"/v1/studies/{sid}/trials/{trial['number']}/tell",
        json={"values": {"value": p["x"] ** 2 + p["y"] ** 2}},
    )
    assert r.status_code == 200, r.text


def _pool(http, sid: int) -> list[tuple[dict, int, int]]:
    """The study's pooled points as params, with their revision and batch size."""
    store = http.store
    parsed = store.parsed_study_for(sid)
    query = (
        select(suggestions_t.c.x, suggestions_t.c.revision, suggestions_t.c.batch_size)
        .where(suggestions_t.c.study_id == sid)
        .order_by(suggestions_t.c.id)
    )
    rows = store.db.read(lambda c: c.execute(query).all())
    return [(parsed.space.decode(np.frombuffer(r.x)), r.revision, r.batch_size) for r in rows]


def _version(http, sid: int) -> int:
    return http.get(f"/v1/studies/{sid}").json()["engine_state_version"]


def test_an_ask_takes_the_oldest_fresh_pooled_point_and_says_so(pooled):
    http = pooled
    sid = _study(http)
    (first,) = _ask(http, sid)
    assert "pool" not in first["details"]
    assert http.asked == [sid]  # the ask asked a refill: its trial is pending now
    assert refill(http.store, DEFAULT_TENANT_ID, sid)
    pool = _pool(http, sid)
    # One trial running: the batch is twice what it and one more worker would ask for.
    assert [size for _, _, size in pool] == [4, 4, 4, 4]
    revision = pool[0][1]
    assert _version(http, sid) == 2  # the refill stored the engine state it returned

    (second,) = _ask(http, sid)
    assert second["params"] == pool[0][0]
    assert second["details"]["source"] == "sobol"  # the engine's own details stay
    assert second["details"]["pool"] == {"revision": revision, "finished_since": 0}
    assert _version(http, sid) == 2  # served without the engine: its state stays
    assert _pool(http, sid) == pool[1:]  # taken once, by one worker
    assert len({(t["params"]["x"], t["params"]["y"]) for t in (first, second)}) == 2


def test_a_point_older_than_max_staleness_finished_trials_is_not_served(pooled):
    http = pooled
    sid = _study(http, max_staleness=1)
    assert http.get(f"/v1/studies/{sid}").json()["max_staleness"] == 1
    running = _ask(http, sid, count=3)
    assert refill(http.store, DEFAULT_TENANT_ID, sid)
    assert len(_pool(http, sid)) == 8
    _tell(http, sid, running[0])
    assert http.asked.count(sid) == 2  # after the ask and after the tell
    (one_since,) = _ask(http, sid)
    assert one_since["details"]["pool"]["finished_since"] == 1
    _tell(http, sid, running[1])
    version = _version(http, sid)
    (two_since,) = _ask(http, sid)  # the pool's points saw neither tell: too old
    assert "pool" not in two_since["details"]
    assert _version(http, sid) == version + 1
    assert _pool(http, sid) == []  # an ask that ran the engine empties the pool


def test_by_default_a_batch_stays_fresh_for_its_size_at_most_its_history_s(pooled):
    http = pooled
    sid = _study(http)

    def finish_one(x: float) -> None:  # a trial added with its value: finished since
        body = {"params": {"x": x, "y": 0.5}, "values": {"value": x}}
        assert http.post(f"/v1/studies/{sid}/trials", json=body).status_code == 201

    assert refill(http.store, DEFAULT_TENANT_ID, sid)  # nothing finished yet: fresh for one
    finish_one(1.0)
    finish_one(2.0)
    (inline,) = _ask(http, sid)
    assert "pool" not in inline["details"]
    _tell(http, sid, inline)
    assert refill(http.store, DEFAULT_TENANT_ID, sid)  # three finished: a batch of 2 x (0 + 1)
    assert {size for _, _, size in _pool(http, sid)} == {2}
    finish_one(3.0)
    finish_one(4.0)
    (served,) = _ask(http, sid)
    assert served["details"]["pool"]["finished_since"] == 2
    finish_one(-1.0)
    (again,) = _ask(http, sid)  # three finished since the batch of two
    assert "pool" not in again["details"]


def test_a_gp_refill_past_the_initial_design_adds_thompson_samples(pooled):
    http = pooled
    sid = _study(http)
    for _ in range(6):  # past gp's 2 d + 1 Sobol points
        (trial,) = _ask(http, sid)
        _tell(http, sid, trial)
    assert refill(http.store, DEFAULT_TENANT_ID, sid)
    served = [_ask(http, sid)[0] for _ in range(2)]  # a batch of 2 x (0 + 1)
    assert all("pool" in trial["details"] for trial in served)
    # Sample paths' maximizers (GPEngine.suggest_ahead); an ask computed inline keeps qLogNEI.
    assert [trial["details"]["acquisition"] for trial in served] == ["thompson"] * 2
    (inline,) = _ask(http, sid)
    assert "pool" not in inline["details"] and inline["details"]["acquisition"] == "qLogNEI"


def test_an_auto_study_refills_with_its_chosen_engines_points_ahead(pooled):
    http = pooled
    r = http.post("/v1/studies", json=study_body(engine={"name": "auto"}, seed=3))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    for _ in range(6):  # past gp's 2 d + 1 Sobol points
        (trial,) = _ask(http, sid)
        _tell(http, sid, trial)
    assert refill(http.store, DEFAULT_TENANT_ID, sid)
    (served,) = _ask(http, sid)
    assert "pool" in served["details"] and served["details"]["auto"]["engine"] == "gp"
    assert served["details"]["acquisition"] == "thompson"


def test_a_refill_computes_more_points_when_trials_finish_faster_than_it_computes(pooled):
    http = pooled
    sid = _study(http)
    parsed = http.store.parsed_study_for(sid)
    now = time.monotonic()
    # Twice the running workers and one more, at most MAX_BATCH, without a previous refill.
    assert batch_size(parsed, 0, 0, now, None) == 2
    assert batch_size(parsed, 9, 0, now, None) == 8
    # Three trials finished in the second since the last refill, which took 1.5 s: nine will
    # finish while the next computes, twice that covers a late start; gp allows 10 per ask.
    last = Pace(read_at=now - 1.0, finished=4, seconds=1.5)
    assert batch_size(parsed, 1, 7, now, last) == 9
    assert batch_size(parsed, 1, 14, now, last) == 10
    assert batch_size(parsed, 1, 4, now, last) == 4  # none finished: the workers' rule
    for _ in range(3):
        (trial,) = _ask(http, sid)
        _tell(http, sid, trial)
    stored = refill(http.store, DEFAULT_TENANT_ID, sid, Pace(time.monotonic() - 1.0, 0, 2.0))
    assert stored is not None and stored.finished == 3 and stored.seconds > 0
    assert {size for _, _, size in _pool(http, sid)} == {10}  # 2 x 3 / s x 2 s, at most 10


def test_max_staleness_zero_never_serves_from_the_pool(pooled):
    http = pooled
    sid = _study(http)
    _ask(http, sid)
    assert refill(http.store, DEFAULT_TENANT_ID, sid)
    assert len(_pool(http, sid)) == 4
    r = http.patch(f"/v1/studies/{sid}", json={"max_staleness": 0})
    assert r.status_code == 200 and r.json()["max_staleness"] == 0
    (trial,) = _ask(http, sid)
    assert "pool" not in trial["details"]
    assert not refill(http.store, DEFAULT_TENANT_ID, sid)  # nothing to compute either
    assert _pool(http, sid) == []
    r = http.patch(f"/v1/studies/{sid}", json={"max_staleness": None})
    assert r.status_code == 200 and r.json()["max_staleness"] is None
    assert refill(http.store, DEFAULT_TENANT_ID, sid)


def test_a_refill_that_ends_after_max_staleness_became_zero_stores_nothing(pooled, monkeypatch):
    """The setting changes while the refill computes: neither its pool nor its engine state is
    stored, so the next ask runs the engine from the state the change left."""
    http = pooled
    sid = _study(http)
    _ask(http, sid)
    version = _version(http, sid)
    compute = pool_refill.suggest

    def suggest_then_switch_off(*args, **kwargs):
        proposal = compute(*args, **kwargs)
        r = http.patch(f"/v1/studies/{sid}", json={"max_staleness": 0})
        assert r.status_code == 200, r.text
        return proposal

    monkeypatch.setattr(pool_refill, "suggest", suggest_then_switch_off)
    assert refill(http.store, DEFAULT_TENANT_ID, sid) is None
    assert _pool(http, sid) == []
    assert _version(http, sid) == version
    (trial,) = _ask(http, sid)
    assert "pool" not in trial["details"] and _version(http, sid) == version + 1


def test_a_pooled_point_told_since_is_dropped(pooled):
    http = pooled
    sid = _study(http)
    _ask(http, sid)
    assert refill(http.store, DEFAULT_TENANT_ID, sid)
    (told, _, _), (kept, _, _), *_ = _pool(http, sid)
    # A user tells the pool's first point (a trial added with its values: completed).
    r = http.post(f"/v1/studies/{sid}/trials", json={"params": told, "values": {"value": 1.0}})
    assert r.status_code == 201, r.text
    (served,) = _ask(http, sid)
    assert served["params"] == kept
    assert served["details"]["pool"]["finished_since"] == 1


def test_refills_of_a_study_run_one_at_a_time_and_once_more_after_a_request_meanwhile(
    monkeypatch,
):
    started, release, runs = threading.Event(), threading.Event(), []

    def slow_refill(store, tenant_id, study_id, last):
        runs.append((study_id, last))
        started.set()
        release.wait(timeout=10)
        return Pace(read_at=float(len(runs)), finished=0, seconds=1.0)

    monkeypatch.setattr(pool_refill, "refill", slow_refill)
    refiller = pool_refill.PoolRefiller(store=None)  # type: ignore[arg-type]
    refiller.request(DEFAULT_TENANT_ID, 7)
    assert started.wait(timeout=10)
    assert refiller.ended() == 0
    for _ in range(3):  # a burst of tells while the refill runs
        refiller.request(DEFAULT_TENANT_ID, 7)
    release.set()
    refiller.stop()
    # The second run is sized by the first's pace.
    assert runs == [(7, None), (7, Pace(1.0, 0, 1.0))]
    assert refiller.ended() == 2


def test_a_waiter_misses_no_refill_end():
    """An ask reads ``ended()`` before it looks at the pool: a refill that ends before it asks
    for a waiter gives it one that is done; a waiter is settled by the next end of its study's
    refill, from the refill's thread; with no refill running there is nothing to wait for."""
    release = threading.Event()
    refiller = pool_refill.PoolRefiller(store=None)  # type: ignore[arg-type]

    async def scenario() -> None:
        assert refiller.waiter(7, refiller.ended()) is None  # none runs
        refiller.request(DEFAULT_TENANT_ID, 7)
        seen = refiller.ended()
        waiting = refiller.waiter(7, seen)
        other = refiller.waiter(8, seen)
        assert waiting is not None and not waiting.done() and other is None
        release.set()  # the refill ends in its thread
        await asyncio.wait_for(waiting, timeout=10)
        # The ask that read ``seen`` before that end looks at the pool again at once.
        missed = refiller.waiter(7, seen)
        assert missed is not None and missed.done()

    def slow_refill(store, tenant_id, study_id, last):
        release.wait(timeout=10)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pool_refill, "refill", slow_refill)
        asyncio.run(scenario())
        refiller.stop()
    assert refiller.ended() == 1


def test_a_tell_and_ask_takes_its_next_trial_from_the_pool(pooled):
    http = pooled
    sid = _study(http)
    (trial,) = _ask(http, sid)
    assert refill(http.store, DEFAULT_TENANT_ID, sid)
    (first, revision, _), *_ = _pool(http, sid)
    p = trial["params"]
    r = http.post(
        f"/v1/studies/{sid}/trials/{trial['number']}/tell",
        json={"values": {"value": p["x"] ** 2 + p["y"] ** 2}, "ask": {"count": 1}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "completed"
    (following,) = r.json()["next"]["trials"]
    assert following["params"] == first
    assert following["details"]["pool"] == {"revision": revision, "finished_since": 1}


@pytest.fixture
def slow_refills(pooled, monkeypatch):
    """The app's refills run by a real ``PoolRefiller``, each starting ``delay[0]`` seconds
    late; ``release`` ends a refill's delay early."""
    http = pooled
    delay, release, refill_now = [0.3], threading.Event(), pool_refill.refill

    def late_refill(store, tenant_id, study_id, last):
        release.wait(timeout=delay[0])
        return refill_now(store, tenant_id, study_id, last)

    monkeypatch.setattr(pool_refill, "refill", late_refill)
    refiller = pool_refill.PoolRefiller(http.store)
    http.store.pool_refills = refiller
    yield http, refiller, delay
    release.set()
    refiller.stop()


def test_an_ask_that_finds_the_pool_short_waits_for_the_running_refill(slow_refills):
    """Not the engine behind the refill's locks: the refill's points serve it when stored."""
    http, refiller, _ = slow_refills
    sid = _study(http)
    (trial,) = _ask(http, sid)
    _tell(http, sid, trial)
    started = time.monotonic()
    refiller.request(DEFAULT_TENANT_ID, sid)
    (served,) = _ask(http, sid)
    assert time.monotonic() - started >= 0.3
    assert refiller.ended() == 1
    assert served["details"]["pool"]["finished_since"] == 0
    # With no refill running, an ask on an empty pool runs the engine at once.
    (inline,) = _ask(http, _study(http, name="other"))
    assert "pool" not in inline["details"]


class _Connected:
    async def is_disconnected(self) -> bool:
        return False


def test_an_ask_waits_for_a_refill_no_longer_than_the_study_s_time_budget(slow_refills):
    http, refiller, delay = slow_refills
    delay[0] = 10.0
    sid = _study(http, ask_time_budget=0.4)
    refiller.request(DEFAULT_TENANT_ID, sid)
    started = time.monotonic()
    served = asyncio.run(serve(http.store, sid, _Connected(), lambda: None))  # type: ignore[arg-type]
    waited = time.monotonic() - started
    assert served is None  # the ask goes on to run the engine
    assert 0.4 <= waited < 3.0
    assert refiller.ended() == 0


def test_refills_of_other_studies_do_not_keep_an_ask_past_its_budget(pooled, monkeypatch):
    """Each look at the pool sees another study's refill end (its waiter comes back done at
    once), while the study's own refill never ends: the ask still gives up within its
    budget."""
    http = pooled
    sid = _study(http, ask_time_budget=0.4)
    other, release = sid + 1000, threading.Event()

    def fake_refill(store, tenant_id, study_id, last):
        if study_id == sid:
            release.wait(timeout=10)

    monkeypatch.setattr(pool_refill, "refill", fake_refill)
    refiller = pool_refill.PoolRefiller(http.store)
    http.store.pool_refills = refiller
    refiller.request(DEFAULT_TENANT_ID, sid)
    looks = [0]

    def take() -> None:  # finds the pool short, while another study's refill ends
        looks[0] += 1
        before = refiller.ended()
        refiller.request(DEFAULT_TENANT_ID, other)
        while refiller.ended() == before:
            time.sleep(0.001)

    async def ask() -> object:
        return await asyncio.wait_for(serve(http.store, sid, _Connected(), take), timeout=5)  # type: ignore[arg-type]

    started = time.monotonic()
    try:
        assert asyncio.run(ask()) is None
    finally:
        release.set()
        refiller.stop()
    assert time.monotonic() - started < 3.0
    assert looks[0] >= 2  # it did look again after the other study's refill
