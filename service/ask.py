"""Ask: hand out trials, the engine's proposals and the queued ones.

How ``ask`` runs without holding a database write lock while an engine computes:

1. Under an in-process lock for the study, read a snapshot (no write lock): the study, how many
   trials can be handed out without the engine (the worker's own unfinished trials within their
   lease, then enqueued and stale ones), and, if more are needed, the history as arrays.
2. Call the engine for the missing points, outside any transaction, in one of the server's
   engine processes (``service.engine_pool``). A call not answered within the ask's time
   budget is abandoned: the missing points are then quasi-random (Sobol) ones avoiding the
   pending points, their trials' details say ``"fallback"``, and the engine state stays as
   it was (a scheduler's ask is answered 503 with ``Retry-After`` instead: its trials are
   units of a population, which a random point is not).
3. In one short write transaction, lock the study row, check that the engine state version is
   the one the snapshot saw (another replica may have asked meanwhile), hand out held and
   queued trials, insert the new ones with numbers from the study's counter, store the new
   engine state, and commit. If the version moved, go back to 1.

So asks on one study are serialized (in-process lock, row lock on PostgreSQL, version check
across processes), and asks on different studies never wait for each other's engines.

With a suggestion pool (``service.suggestion_pool``), ``ask_from_pool`` serves an ask from it
in one write transaction, without the engine nor the locks of 1-3 (a refill holds them). Else
1-3 run, the engine computing the points fresh pooled ones do not cover (as pending); an ask
that ran the engine empties the pool, whose points did not count its own.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel
from sqlalchemy import bindparam, case, func, insert, select, update
from sqlalchemy.engine import Connection, Row

from client.models import FINISHED_STATES, AskRequest, AskResponse, ProblemCode, TrialPublic
from engines.base import History, Proposal
from engines.errors import EngineError
from engines.limits import check_ask
from service import suggestion_pool
from service.errors import ApiError, engine_error, unavailable
from service.history import load_history, pending_only, stack_points
from service.idempotency import IdemKey, replay
from service.leases import expire_leases, lease_until
from service.observability import ASK_SECONDS
from service.problem import ParsedStudy
from service.store import (
    Answer,
    Store,
    bump_revision,
    find_study,
    studies_t,
    trials_t,
    utcnow,
)
from service.suggest import details_of, suggest
from service.trials import new_trial
from service.unit_rows import PENDING_STATES
from service.wire import trial_public

_ASK_ATTEMPTS = 12
#: Advisory lock class of "one ask at a time per study" on PostgreSQL.
_ASK_LOCK = 7001

#: The study columns an ask reads: the snapshot and the commit each read the row, and the
#: config (the largest column) comes from ``Store.parsed_study_for``, but for ``max_trials``,
#: which a PATCH may change.
_STUDY_COLUMNS = (
    "id",
    "state",
    "seed",
    "engine_state",
    "ask_count",
    "next_trial_number",
    "revision",
    "max_trials",
)
# The hot statements are built once; SQLAlchemy then reuses their compiled form.
_OPEN_TRIALS = select(
    trials_t.c.id,
    trials_t.c.number,
    trials_t.c.state,
    trials_t.c.worker_id,
    trials_t.c.lease_expires_at,
    trials_t.c.retries,
    trials_t.c.x,
).where(trials_t.c.study_id == bindparam("study_id"), trials_t.c.state.in_(PENDING_STATES))

_INSERT_TRIAL = insert(trials_t)
#: The trials a study's budget (``max_trials``) counts.
_BUDGET_USED = select(func.count()).where(
    trials_t.c.study_id == bindparam("study_id"),
    trials_t.c.state.in_(("running", *FINISHED_STATES)),
)
_STUDY_AFTER_PROPOSAL = (
    update(studies_t)
    .where(studies_t.c.id == bindparam("study_id"))
    .values(
        revision=studies_t.c.revision + 1,
        updated_at=bindparam("now"),
        next_trial_number=bindparam("next_number"),
        engine_state=bindparam("engine_state", type_=studies_t.c.engine_state.type),
        ask_count=bindparam("version"),
    )
)


class _VersionMoved(Exception):
    """The engine state changed between snapshot and commit; take a new snapshot."""


class _PoolShort(Exception):
    """The pool holds fewer fresh suggestions than the ask needs: nothing was written."""


@dataclass(frozen=True)
class _Ask:
    """One ask request and what it is about."""

    store: Store
    tenant_id: int
    study_id: int
    req: AskRequest
    parsed: ParsedStudy
    wrap: Callable[[AskResponse], BaseModel] | None = None


def _wrapped(ask: _Ask, answer: tuple[int, AskResponse]) -> tuple[int, BaseModel]:
    status, response = answer
    return status, response if ask.wrap is None else ask.wrap(response)


@dataclass(frozen=True)
class _Plan:
    """Who gets what, from the study's unfinished trials: the asking worker's own running
    trials within their lease, then queued (enqueued or stale) ones, then ``need`` new ones."""

    expired: list[Row]
    handed: list[Row]
    need: int
    X_pending: np.ndarray


def _plan(conn: Connection, ask: _Ask, study: Row, now: datetime) -> _Plan:
    """``study``: its row (``_STUDY_COLUMNS``), read in this transaction.

    Raises: ApiError 409 ``max_trials_reached`` when the budget leaves nothing to hand out
    (checked only once no lease has expired: an expired trial may still turn stale)."""
    open_rows = conn.execute(_OPEN_TRIALS, {"study_id": ask.study_id}).all()
    by_number = sorted(open_rows, key=lambda r: r.number)
    expired = [r for r in by_number if r.state == "running" and r.lease_expires_at < now]
    X_pending = stack_points([r.x for r in by_number], ask.parsed.problem.d)
    if expired:
        return _Plan(expired, [], 0, X_pending)
    worker_id = ask.req.worker_id
    held = (
        [
            r
            for r in by_number
            if r.state == "running" and r.worker_id == worker_id and r.lease_expires_at >= now
        ]
        if worker_id is not None
        else []
    )
    queued = [r for r in by_number if r.state in ("waiting", "stale")]
    room = _budget_room(conn, ask.study_id, study.max_trials)
    if room is not None:
        queued = queued[:room]  # a queued trial handed out starts running: it counts
    handed = (held + queued)[: ask.req.count]
    need = ask.req.count - len(handed)
    if room is not None:
        need = min(need, room - sum(r.state != "running" for r in handed))
        if not handed and need == 0:
            raise ApiError(
                ProblemCode.MAX_TRIALS_REACHED,
                f"study {ask.study_id} reached its budget: as many trials as its max_trials "
                f"are running or finished; raise or remove max_trials (PATCH "
                f"/v1/studies/{ask.study_id}) to ask again",
            )
    return _Plan(expired, handed, need, X_pending)


def _budget_room(conn: Connection, study_id: int, limit: int | None) -> int | None:
    """How many more trials the study's ``max_trials`` (``limit``) allows to run, counting
    every trial running or finished (``None`` without a budget)."""
    if limit is None:
        return None
    used = conn.execute(_BUDGET_USED, {"study_id": study_id}).scalar_one()
    return max(0, int(limit) - used)


def ask(
    store: Store,
    tenant_id: int,
    study_id: int,
    req: AskRequest,
    idem: IdemKey | None,
    wrap: Callable[[AskResponse], BaseModel] | None = None,
) -> Answer:
    """Hand out ``req.count`` trials; see the module docstring for how. ``wrap`` makes the
    answer stored and returned from the ask's (tell-and-ask answers the told trial with it)."""
    call = _Ask(store, tenant_id, study_id, req, store.parsed_study_for(study_id), wrap)
    _check_work(call)
    with ASK_SECONDS.labels(call.parsed.engine.name).time():
        answer = _serve(store, tenant_id, study_id, idem, call)
    _refill(call)
    return answer


def ask_from_pool(
    store: Store,
    tenant_id: int,
    study_id: int,
    req: AskRequest,
    idem: IdemKey | None,
    wrap: Callable[[AskResponse], BaseModel] | None = None,
) -> Answer | None:
    """The ask when fresh pooled points alone serve it: the router tries it before the ask
    waits for the study's turn (``service.admission``) behind asks that run the engine.
    ``None`` (nothing written) when they do not."""
    call = _Ask(store, tenant_id, study_id, req, store.parsed_study_for(study_id), wrap)
    # Without a pool (the default, and random studies) ``ask`` follows and checks the work.
    if not _pooling(call) or not store.db.read(lambda c: suggestion_pool.holds_any(c, study_id)):
        return None
    _check_work(call)
    try:
        with ASK_SECONDS.labels(call.parsed.engine.name).time():
            answer = store.write(
                tenant_id, idem, lambda c: _wrapped(call, _commit(c, call, from_pool_only=True))
            )
    except (_PoolShort, _VersionMoved):
        return None
    _refill(call)
    return answer


def _pooling(call: _Ask) -> bool:
    return call.store.refill_pool is not None and suggestion_pool.pools(call.parsed)


def _refill(call: _Ask) -> None:
    """Refill the pool: the trials just handed out are pending now, the next batch counts them."""
    if call.store.refill_pool is not None and suggestion_pool.pools(call.parsed):
        call.store.refill_pool(call.tenant_id, call.study_id)


def _serve(store: Store, tenant_id: int, study_id: int, idem: IdemKey | None, call: _Ask) -> Answer:
    if not call.parsed.engine.uses_observations:
        # An engine that reads no observations (random) is cheap: it runs inside the one
        # write transaction, under the study row lock.
        return store.write(tenant_id, idem, lambda c: _wrapped(call, _commit(c, call)))
    if idem is not None:
        # A repeated request must not pay for the engine again.
        stored = store.db.read(lambda c: replay(c, tenant_id, idem))
        if stored is not None:
            return stored
    pooling = _pooling(call)
    with store.study_lock(study_id), store.db.advisory_lock(_ASK_LOCK, study_id):
        for attempt in range(_ASK_ATTEMPTS):
            snap = store.db.read(lambda c: _snapshot(c, call, pooling))
            if snap is None:  # leases expired: apply the policy first, then look again
                store.db.write(lambda c: expire_leases(store, c, utcnow(), study_id))
                continue
            study, history, need, pooled, budget = snap
            # The engine runs outside any transaction: no connection waits on it.
            proposal = (
                suggest(call.parsed, study, history, need, store.engine_pool, budget)
                if need
                else None
            )
            version = study.ask_count

            def commit(
                c: Connection,
                version: int = version,
                proposal: Proposal | None = proposal,
                pooled: list[suggestion_pool.Pooled] = pooled,
            ) -> tuple[int, BaseModel]:
                return _wrapped(call, _commit(c, call, version, proposal, pooled))

            try:
                return store.write(tenant_id, idem, commit)
            except _VersionMoved:
                # Another process asked in between (SQLite served by several processes).
                time.sleep(random.uniform(0, 0.002 * 2 ** min(attempt, 6)))
    raise unavailable("the study is busy with concurrent asks; retry the request")


def ask_inline(
    conn: Connection, store: Store, tenant_id: int, study_id: int, req: AskRequest
) -> AskResponse:
    """An ask on a study whose engine reads no observations, in the caller's transaction
    (tell-and-ask runs it after the tell, in the tell's)."""
    call = _Ask(store, tenant_id, study_id, req, store.parsed_study(conn, study_id))
    assert not call.parsed.engine.uses_observations
    _check_work(call)
    return _commit(conn, call)[1]


def _check_work(ask: _Ask) -> None:
    """Refuse, before any work, an ask over the engine's caps (``engines.limits``).

    Raises: ApiError 422 ``engine_work_too_large``, saying what to lower."""
    try:
        check_ask(ask.parsed.engine, ask.parsed.problem, ask.req.count)
    except EngineError as exc:
        raise engine_error(exc) from exc


def _snapshot(
    conn: Connection, ask: _Ask, pooling: bool
) -> tuple[Row, History | None, int, list[suggestion_pool.Pooled], float] | None:
    """Read the study, the fresh pooled points to serve (with ``pooling``), its history, how
    many points the engine must compute and its time budget (no write lock).

    Returns ``None`` when leases have expired and the lease policy must run first."""
    row = find_study(conn, ask.tenant_id, ask.study_id, require_active=True, columns=_STUDY_COLUMNS)
    plan = _plan(conn, ask, row, utcnow())
    if plan.expired:
        return None
    pooled = suggestion_pool.fresh(conn, ask.study_id, plan.X_pending) if pooling else []
    pooled = pooled[: plan.need]
    need = plan.need - len(pooled)
    if need == 0:
        return row, None, 0, pooled, 0.0
    parsed = ask.parsed
    X_pending = np.vstack([plan.X_pending, *(p.x[None, :] for p in pooled)])
    history = load_history(conn, ask.study_id, parsed, X_pending, ask.store.history)
    if parsed.engine.schedules_units:
        history = replace(history, units=ask.store.units.load(conn, ask.study_id, parsed))
    budget = suggestion_pool.time_budget(conn, ask.study_id, ask.store.engine_pool.budget)
    return row, history, need, pooled, budget


def _commit(
    conn: Connection,
    ask: _Ask,
    version: int | None = None,
    proposal: Proposal | None = None,
    pooled: Sequence[suggestion_pool.Pooled] = (),
    from_pool_only: bool = False,
) -> tuple[int, AskResponse]:
    """The write transaction of an ask. With ``version`` (model-based engines), the snapshot
    chose the ``pooled`` points and the engine proposed the others outside; with
    ``from_pool_only``, every new point comes from the pool (else ``_PoolShort``); with
    neither, the engine runs here."""
    row = find_study(
        conn,
        ask.tenant_id,
        ask.study_id,
        for_update=True,
        require_active=True,
        columns=_STUDY_COLUMNS,
    )
    if version is not None and row.ask_count != version:
        raise _VersionMoved
    now = utcnow()
    plan = _plan(conn, ask, row, now)
    if plan.expired:
        expire_leases(ask.store, conn, now, ask.study_id)
        plan = _plan(conn, ask, row, now)
    # At most the revision this transaction commits, above any committed before it: the
    # trials it hands out take it as their asked_seq (the event stream's order).
    running = _running(ask, now, row.revision + 1)
    trials = _hand_out(conn, plan.handed, running, now)
    if plan.need == 0:
        bump_revision(conn, ask.study_id, now)
        return 200, AskResponse(trials=trials)
    parsed = ask.parsed
    if from_pool_only:
        pooled = suggestion_pool.fresh(conn, ask.study_id, plan.X_pending)
        if len(pooled) < plan.need:
            raise _PoolShort
    pooled = pooled[: plan.need]
    if not suggestion_pool.take(conn, pooled):
        raise _VersionMoved
    rest = plan.need - len(pooled)
    if version is None and not from_pool_only:
        proposal = suggest(parsed, row, pending_only(parsed, plan.X_pending), plan.need)
    elif rest and (
        proposal is None or (len(proposal.X) < rest and not parsed.engine.schedules_units)
    ):
        raise _VersionMoved
    trials += _insert_proposed(conn, ask, row, pooled, proposal, rest, running, now)
    if len(trials) < ask.req.count:
        retry_after = None if proposal is None else proposal.retry_after
        finished = not trials and retry_after is None
        return 200, AskResponse(trials=trials, retry_after=retry_after, finished=finished)
    return 200, AskResponse(trials=trials)


def _running(ask: _Ask, now: datetime, asked_seq: int) -> dict[str, Any]:
    """The columns of a trial handed out now to the asking worker."""
    lease = lease_until(ask.parsed, ask.req, now)
    return {
        "state": "running",
        "worker_id": ask.req.worker_id,
        "lease_expires_at": lease,
        "asked_seq": asked_seq,
        "heartbeat_at": now,
    }


def _hand_out(
    conn: Connection, handed: list[Row], running: dict[str, Any], now: datetime
) -> list[TrialPublic]:
    """Give the held and queued trials to the asking worker; a stale one counts a retry."""
    if not handed:
        return []
    rows = conn.execute(
        update(trials_t)
        .where(trials_t.c.id.in_([r.id for r in handed]))
        .values(
            retries=trials_t.c.retries + case((trials_t.c.state == "stale", 1), else_=0),
            started_at=func.coalesce(trials_t.c.started_at, now),
            **running,
        )
        .returning(*trials_t.c)
    ).all()
    return [trial_public(r) for r in sorted(rows, key=lambda r: r.number)]


def _insert_proposed(
    conn: Connection,
    ask: _Ask,
    study: Row,
    pooled: Sequence[suggestion_pool.Pooled],
    proposal: Proposal | None,
    need: int,
    running: dict[str, Any],
    now: datetime,
) -> list[TrialPublic]:
    """Insert the pooled points, then ``need`` proposed ones, as trials running for the asking
    worker, numbered from the study's counter, and store the engine's new state (with a
    proposal)."""
    parsed = ask.parsed
    points: list[tuple[np.ndarray, dict[str, Any], dict[str, Any] | None]] = [
        (p.x, p.trial_details(), None) for p in pooled
    ]
    if proposal is not None:
        # A scheduler may propose fewer (units still training); it re-proposes any unit it
        # planned that was not inserted, as it rebuilds its population from the trials.
        n_new = min(len(proposal.X), need)
        units = proposal.units[:n_new] if parsed.engine.schedules_units else [None] * n_new
        points += zip(proposal.X[:n_new], details_of(proposal, n_new), units, strict=True)
    first = study.next_trial_number
    new = [
        {
            **new_trial(parsed, ask.study_id, first + i, x, detail, now, unit=unit),
            **running,
            "started_at": now,
        }
        for i, (x, detail, unit) in enumerate(points)
    ]
    if new:
        conn.execute(_INSERT_TRIAL, new)
    if proposal is not None and suggestion_pool.pools(parsed):
        suggestion_pool.clear(conn, ask.study_id)
    conn.execute(
        _STUDY_AFTER_PROPOSAL,
        {
            "study_id": ask.study_id,
            "now": now,
            "next_number": first + len(new),
            # Served from the pool only, the engine state stays.
            "engine_state": study.engine_state if proposal is None else proposal.state,
            "version": study.ask_count if proposal is None else study.ask_count + 1,
        },
    )
    return [trial_public(t) for t in new]
