"""The suggestion pool: points of a model-based study computed ahead of the asks, in the
database (table ``suggestions``), so that any replica's ask can serve them without the engine.

A background refill (``service.pool_refill``) computes a batch from the current history with
the trials waiting or running as pending, and replaces the study's pool with it, recording the
study ``revision`` its history was read at. A suggestion is fresh while at most the study's
``max_staleness`` trials finished since (``completed_seq`` above that revision; default: the
batch's size, at most the number of finished trials its history held, at least 1). An ask
takes fresh suggestions oldest first, inside its write transaction with the study row locked,
and deletes them there: a suggestion goes to one worker. A suggestion equal to the point of a
trial finished since, or of a trial waiting or running, is not served.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from engines.base import History, Proposal
from service.admission import DISCONNECT_POLL_SECONDS, ClientGone
from service.db.models import Suggestion
from service.problem import ParsedStudy
from service.store import Store, studies_t, trials_t, utcnow

suggestions_t = Suggestion.__table__

#: A refill computes twice the points the running workers and one more would ask for (with
#: one round's worth, the asks drained the pool before the next refill ended: bench/latency.py
#: part 1), at most this many: a batch's cost grows with its size, and its points age. More
#: when trials finish faster than that while a refill computes (``pool_refill.batch_size``).
MAX_BATCH = 8
#: The most points a refill computes at the pace of the tells: its points age while they wait.
MAX_PACED_BATCH = 32

#: Two points of the unit cube closer than this in every coordinate are the same point.
SAME_POINT = 1e-9

#: The longest an ask waits for refills, whatever the engine's time budget.
MAX_REFILL_WAIT_SECONDS = 60.0

Answer = TypeVar("Answer")

_POOL = (
    select(
        suggestions_t.c.id,
        suggestions_t.c.x,
        suggestions_t.c.details,
        suggestions_t.c.revision,
        suggestions_t.c.batch_size,
        suggestions_t.c.history_size,
    )
    .where(suggestions_t.c.study_id == bindparam("study_id"))
    .order_by(suggestions_t.c.id)
)
#: The study's own engine time budget per ask (a setting in its config column).
_ASK_TIME_BUDGET = select(studies_t.c.config["ask_time_budget"].as_float()).where(
    studies_t.c.id == bindparam("study_id")
)
_MAX_STALENESS = select(studies_t.c.config["max_staleness"].as_integer()).where(
    studies_t.c.id == bindparam("study_id")
)
#: Trials finished after a revision: their number, and their point.
_FINISHED_SINCE = select(trials_t.c.completed_seq, trials_t.c.x).where(
    trials_t.c.study_id == bindparam("study_id"), trials_t.c.completed_seq > bindparam("after")
)


def pools(parsed: ParsedStudy) -> bool:
    """Whether the study's engine is served from a pool: it reads observations (a cheap engine
    runs inside the ask anyway) and does not schedule units (``pbt`` and ``ipbt`` keep their
    own schedule)."""
    return parsed.engine.uses_observations and not parsed.engine.schedules_units


def may_serve(store: Store, study_id: int) -> bool:
    """Whether an ask on the study may be served from its pool, known without a database read
    (from the parsed config, when cached): the router checks it on the event loop."""
    parsed = store.parsed_studies.peek(study_id)
    return store.refill_pool is not None and parsed is not None and pools(parsed)


def max_staleness(conn: Connection, study_id: int) -> int | None:
    """The study's ``max_staleness`` setting (``None``: a batch's worth)."""
    value = conn.execute(_MAX_STALENESS, {"study_id": study_id}).scalar()
    return None if value is None else int(value)


def time_budget(conn: Connection, study_id: int, server_budget: float) -> float:
    """The seconds an engine call of the study may take: the server's budget, or the study's
    ``ask_time_budget`` when lower."""
    own = conn.execute(_ASK_TIME_BUDGET, {"study_id": study_id}).scalar()
    return server_budget if own is None else min(server_budget, float(own))


@dataclass(frozen=True)
class Pooled:
    """A fresh suggestion, and how many trials finished since it was computed."""

    id: int
    x: np.ndarray
    details: dict[str, Any]
    revision: int
    finished_since: int

    def trial_details(self) -> dict[str, Any]:
        """The details of the trial made from it: the engine's, and where it came from."""
        pool = {"revision": self.revision, "finished_since": self.finished_since}
        return {**self.details, "pool": pool}


async def serve(
    store: Store, study_id: int, request: Request, take: Callable[[], Answer | None]
) -> Answer | None:
    """An ask served from the pool: ``take`` (the ask from fresh pooled points, run in a
    thread; ``None`` when they fall short) now, and again after each refill of the study this
    process ends while the ask waits, holding no thread, for at most the study's engine time
    budget (an inline engine call could take as long). Without it, an ask that found the pool
    short would run the engine itself behind the refill's locks, seconds, while the refill was
    about to serve it.

    ``None``: the pool could not serve; the ask runs the engine. Raises ``ClientGone`` when
    the client of a waiting ask disconnected."""
    refills = store.pool_refills
    if refills is None:  # this process does not refill: nothing to wait for
        return await run_in_threadpool(take)
    deadline: float | None = None
    while True:
        # A waiter can come back done at once (a refill of another study ended), so each pass
        # after the first checks the deadline and the client before looking again.
        if deadline is not None:
            if time.monotonic() >= deadline:
                return None
            if await request.is_disconnected():
                raise ClientGone
        seen = refills.ended()
        answer = await run_in_threadpool(take)
        if answer is not None:
            return answer
        ended = refills.waiter(study_id, seen)
        if ended is None:
            return None
        if deadline is None:
            own = functools.partial(
                time_budget, study_id=study_id, server_budget=store.engine_pool.budget
            )
            budget = await run_in_threadpool(store.db.read, own)
            deadline = time.monotonic() + min(budget, MAX_REFILL_WAIT_SECONDS)
        try:
            while not ended.done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                # asyncio.wait neither cancels ``ended`` nor loses a cancellation of this task.
                await asyncio.wait({ended}, timeout=min(remaining, DISCONNECT_POLL_SECONDS))
                if not ended.done() and await request.is_disconnected():
                    raise ClientGone
        finally:
            ended.cancel()  # settled already, or nobody waits for it any more


def holds_any(conn: Connection, study_id: int) -> bool:
    """Whether the study's pool holds a suggestion (fresh or not)."""
    query = select(suggestions_t.c.id).where(suggestions_t.c.study_id == study_id).limit(1)
    return conn.execute(query).first() is not None


def fresh(conn: Connection, study_id: int, pending: np.ndarray) -> list[Pooled]:
    """The study's suggestions an ask may serve, oldest first: fresh, and equal neither to the
    point of a trial finished since they were computed nor to one in ``pending`` (the points
    of the trials waiting or running)."""
    rows = conn.execute(_POOL, {"study_id": study_id}).all()
    if not rows:
        return []
    setting = max_staleness(conn, study_id)
    if setting == 0:
        return []
    oldest = min(r.revision for r in rows)
    finished = conn.execute(_FINISHED_SINCE, {"study_id": study_id, "after": oldest}).all()
    taken = [np.asarray(x, dtype=np.float64) for x in pending]
    served = []
    for r in rows:
        since = [t.x for t in finished if t.completed_seq > r.revision]
        limit = min(r.batch_size, max(1, r.history_size)) if setting is None else setting
        x = np.frombuffer(r.x, dtype=np.float64)
        if len(since) > limit or _among(x, taken) or _among(x, [_point(b) for b in since]):
            continue
        taken.append(x)
        served.append(Pooled(r.id, x, r.details, r.revision, len(since)))
    return served


def _point(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float64)


def _among(x: np.ndarray, points: Sequence[np.ndarray]) -> bool:
    """Whether ``x`` equals one of ``points`` up to ``SAME_POINT`` in every coordinate (a
    point told with parameters, encoded again, may differ in its last bits)."""
    return any(float(np.max(np.abs(p - x), initial=0.0)) <= SAME_POINT for p in points)


def take(conn: Connection, chosen: Sequence[Pooled]) -> bool:
    """Delete the chosen suggestions, in the ask's write transaction. False when some were
    gone already (another ask or a refill took or replaced them since they were read)."""
    if not chosen:
        return True
    ids = [p.id for p in chosen]
    gone = conn.execute(
        delete(suggestions_t).where(suggestions_t.c.id.in_(ids)).returning(suggestions_t.c.id)
    ).all()
    return len(gone) == len(ids)


def clear(conn: Connection, study_id: int) -> None:
    """Empty the study's pool: an ask that ran the engine stored a newer engine state, and
    the pooled points did not count its points as pending."""
    conn.execute(delete(suggestions_t).where(suggestions_t.c.study_id == study_id))


def replace_pool(
    conn: Connection, study_id: int, proposal: Proposal, history: History, revision: int
) -> None:
    """Replace the study's pool with a refill's batch, computed from ``history`` read at
    ``revision``."""
    clear(conn, study_id)
    batch = len(proposal.X)
    rows = [
        {
            "study_id": study_id,
            "x": np.ascontiguousarray(x, dtype=np.float64).tobytes(),
            "details": detail,
            "revision": revision,
            "batch_size": batch,
            "history_size": len(history.X) + len(history.X_failed),
            "created_at": utcnow(),
        }
        for x, detail in zip(proposal.X, proposal.details, strict=True)
    ]
    if rows:
        conn.execute(insert(suggestions_t), rows)
