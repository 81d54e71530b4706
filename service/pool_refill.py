"""Background refills of the suggestion pools (``service.suggestion_pool``).

After each tell, and after each ask, of a study whose engine is pooled, the server asks a
refill of the study's pool. A refill runs in a background thread and takes the locks an ask
that runs the engine takes (the study's in-process lock, the PostgreSQL advisory lock), so
engine-state updates stay serialized. It reads the history with the trials waiting or running
as pending, has the engine compute a batch (``batch_size``: twice the running trials, plus two,
at most ``suggestion_pool.MAX_BATCH``; more when trials finish faster than that while a refill
computes; so the pool lasts while the next refill computes) through the ask's engine call
(``suggest_ahead``; ``service.suggest``: in an engine process, within the server's time budget;
an abandoned call stores nothing), and in one write transaction replaces the pool and stores
the engine state, if no ask ran the engine meanwhile (``ask_count`` unchanged; else it
computes again) and ``max_staleness`` is not 0 by then (else it stores nothing).

Single flight per study in a process: a refill asked while one runs makes that one run once
more when it ends, so a burst of tells costs at most two refills. Any replica may refill.

An ask that found the pool short while this process refills the study waits for the refill's
end (``ended``, ``waiter``): a future of its event loop, settled from the refill's thread, so
it holds no thread and polls nothing (``service.suggestion_pool.serve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection, Row

from engines.base import History, Proposal
from engines.limits import engine_limits, max_count
from service import suggestion_pool
from service.ask import (
    _ASK_LOCK,
    _STUDY_COLUMNS,
    _VersionMoved,
)
from service.errors import ApiError
from service.history import load_history, stack_points
from service.problem import ParsedStudy
from service.store import Store, find_study, studies_t, trials_t, utcnow
from service.suggest import suggest
from service.unit_rows import PENDING_STATES

log = logging.getLogger("asktell.pool")

#: Threads that run refills at once (of different studies).
REFILL_THREADS = 2
#: Computations a refill tries before giving up when asks or other processes' refills keep
#: storing an engine state meanwhile (SQLite served by several processes has no shared lock).
_ATTEMPTS = 12
#: Studies whose last refill's pace a process keeps (a refill without one sizes its batch by
#: the running workers only).
_PACES_KEPT = 1024

_PENDING = select(trials_t.c.x, trials_t.c.state).where(
    trials_t.c.study_id == bindparam("study_id"), trials_t.c.state.in_(PENDING_STATES)
)
_STUDY_AFTER_REFILL = (
    update(studies_t)
    .where(studies_t.c.id == bindparam("study_id"))
    .values(
        revision=studies_t.c.revision + 1,
        updated_at=bindparam("now"),
        engine_state=bindparam("engine_state", type_=studies_t.c.engine_state.type),
        ask_count=studies_t.c.ask_count + 1,
    )
)


@dataclass(frozen=True)
class Pace:
    """What a study's last stored refill saw: when it read the history (``time.monotonic``),
    how many trials had finished then, and how many seconds it took to compute and store."""

    read_at: float
    finished: int
    seconds: float


class PoolRefiller:
    """The refills of one process: a thread pool, and which studies are refilling."""

    def __init__(self, store: Store, threads: int = REFILL_THREADS) -> None:
        self._store = store
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="pool-refill")
        self._guard = threading.Lock()
        #: The studies refilling.
        self._running: set[int] = set()
        self._again: set[int] = set()
        #: Refills ended in this process, of any study: a count that only grows.
        self._ended = 0
        #: Each study's last stored refill in this process (a few numbers per study).
        self._paces: dict[int, Pace] = {}
        #: Futures of the asks waiting for a study's next refill to end, with their loops.
        self._waiters: dict[int, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}

    def request(self, tenant_id: int, study_id: int) -> None:
        """Refill the study's pool in the background: now, or once more after the running
        refill of the study (which read the study before this change)."""
        with self._guard:
            if study_id in self._running:
                self._again.add(study_id)
                return
            self._running.add(study_id)
        try:
            self._executor.submit(self._run, tenant_id, study_id)
        except RuntimeError:  # stopped: the server is shutting down, nothing will refill
            with self._guard:
                self._running.discard(study_id)

    def ended(self) -> int:
        """How many refills (of any study) ended in this process so far. An ask reads it before
        it looks at the pool, and gives it to ``waiter``: a refill that ends in between is
        not missed."""
        with self._guard:
            return self._ended

    def waiter(self, study_id: int, seen: int) -> asyncio.Future[None] | None:
        """A future of the running event loop, settled when a refill of the study ends; done
        already if some refill ended since ``ended()`` was ``seen`` (the pool may have changed:
        look again); ``None`` when none ended since and none of the study runs (nothing to
        wait for)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._guard:
            if self._ended != seen:
                future.set_result(None)
            elif study_id not in self._running:
                return None
            else:
                self._waiters.setdefault(study_id, []).append((loop, future))
        return future

    def _run(self, tenant_id: int, study_id: int) -> None:
        while True:
            with self._guard:
                last = self._paces.get(study_id)
            try:
                pace = refill(self._store, tenant_id, study_id, last)
                if pace is not None:
                    self._remember(study_id, pace)
            except Exception:  # the next tell asks again; the asks compute inline meanwhile
                log.exception("refilling the suggestion pool of study %d failed", study_id)
            with self._guard:
                self._ended += 1
                for loop, future in self._waiters.pop(study_id, []):
                    with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
                        loop.call_soon_threadsafe(_settle, future)
                if study_id not in self._again:
                    self._running.discard(study_id)
                    return
                self._again.discard(study_id)

    def _remember(self, study_id: int, pace: Pace) -> None:
        with self._guard:
            self._paces.pop(study_id, None)
            self._paces[study_id] = pace  # the most recent last: the oldest go first
            while len(self._paces) > _PACES_KEPT:
                del self._paces[next(iter(self._paces))]

    def stop(self) -> None:
        """Drop the refills not started and wait for the running ones."""
        self._executor.shutdown(wait=True, cancel_futures=True)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():  # a waiter that gave up cancelled it
        future.set_result(None)


def refill(store: Store, tenant_id: int, study_id: int, last: Pace | None = None) -> Pace | None:
    """Compute and store the study's next pool, sized by ``last``, the study's previous refill
    (``batch_size``); returns this refill's ``Pace``, or None when there is none to compute
    (study not active or deleted, ``max_staleness`` 0) or asks kept running the engine."""
    parsed = store.parsed_study_for(study_id)
    with store.study_lock(study_id), store.db.advisory_lock(_ASK_LOCK, study_id):
        for attempt in range(_ATTEMPTS):
            read_at = time.monotonic()
            snap = store.db.read(lambda c: _snapshot(c, store, tenant_id, study_id, parsed))
            if snap is None:
                return None
            study, history, running = snap
            finished = history.n + len(history.X_failed)
            size = batch_size(parsed, running, finished, read_at, last)
            # In an engine process, within the server's time budget, as an ask's engine call.
            proposal = suggest(
                parsed,
                study,
                history,
                size,
                store.engine_pool,
                store.engine_pool.budget,
                ahead=True,
            )
            if any("time_budget_seconds" in detail for detail in proposal.details):
                return None  # abandoned (``suggest.fallback``): Sobol points are no batch

            def store_batch(
                c: Connection,
                study: Row = study,
                history: History = history,
                proposal: Proposal = proposal,
            ) -> bool:
                return _store(c, tenant_id, study, history, proposal)

            try:
                stored = store.db.write(store_batch)
            except _VersionMoved:
                time.sleep(random.uniform(0, 0.002 * 2 ** min(attempt, 6)))
                continue
            except ApiError:  # deleted, paused or completed meanwhile
                return None
            return Pace(read_at, finished, time.monotonic() - read_at) if stored else None
    log.warning(
        "study %d: no refill stored after %d attempts; the next tell asks again",
        study_id,
        _ATTEMPTS,
    )
    return None


def batch_size(
    parsed: ParsedStudy, running: int, finished: int, now: float, last: Pace | None
) -> int:
    """The points a refill computes: twice what the running workers and one more would ask
    for (at most ``suggestion_pool.MAX_BATCH``), or, when more trials finish while a refill
    computes, twice the trials that finished during the last one at the pace they finished
    since it, so the batch lasts while the next refill computes (the next may start up to one
    refill late); at most ``suggestion_pool.MAX_PACED_BATCH`` (a batch whose cost grows with
    its size would otherwise grow to the cap) and what the engine allows in one ask."""
    size = min(2 * (running + 1), suggestion_pool.MAX_BATCH)
    if last is not None and now > last.read_at:
        rate = (finished - last.finished) / (now - last.read_at)
        paced = min(math.ceil(2 * rate * last.seconds), suggestion_pool.MAX_PACED_BATCH)
        size = max(size, paced)
    return min(size, max_count(engine_limits(parsed.engine, parsed.problem), parsed.problem.d))


def _snapshot(
    conn: Connection, store: Store, tenant_id: int, study_id: int, parsed: ParsedStudy
) -> tuple[Row, History, int] | None:
    """The study, its history with the waiting and running trials pending, and how many run;
    None when no pool is to be computed."""
    try:
        study = find_study(conn, tenant_id, study_id, require_active=True, columns=_STUDY_COLUMNS)
    except ApiError:
        return None
    if suggestion_pool.max_staleness(conn, study_id) == 0:
        return None
    pending = conn.execute(_PENDING, {"study_id": study_id}).all()
    X_pending = stack_points([r.x for r in pending], parsed.problem.d)
    running = sum(r.state == "running" for r in pending)
    return study, load_history(conn, study_id, parsed, X_pending, store.history), running


def _store(
    conn: Connection, tenant_id: int, study: Row, history: History, proposal: Proposal
) -> bool:
    """Store the pool and the engine state; False, storing nothing, when ``max_staleness``
    became 0 while the refill computed (an ask then runs the engine from the state it sees)."""
    columns = ("state", "ask_count")
    row = find_study(
        conn, tenant_id, study.id, for_update=True, require_active=True, columns=columns
    )
    if row.ask_count != study.ask_count:
        raise _VersionMoved
    # Read under the row lock a settings change takes (``studies.update_study``).
    if suggestion_pool.max_staleness(conn, study.id) == 0:
        return False
    now = utcnow()
    suggestion_pool.replace_pool(conn, study.id, proposal, history, study.revision)
    params: dict[str, Any] = {"study_id": study.id, "now": now, "engine_state": proposal.state}
    conn.execute(_STUDY_AFTER_REFILL, params)
    return True
