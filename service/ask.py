"""Ask: hand out trials, the engine's proposals and the queued ones.

How ``ask`` runs without holding a database write lock while an engine computes:

1. Under an in-process lock for the study, read a snapshot (no write lock): the study, how many
   trials can be handed out without the engine (the worker's own unfinished trials within their
   lease, then enqueued and stale ones), and, if more are needed, the history as arrays.
2. Call the engine for the missing points, outside any transaction.
3. In one short write transaction, lock the study row, check that the engine state version is
   the one the snapshot saw (another replica may have asked meanwhile), hand out held and
   queued trials, insert the new ones with numbers from the study's counter, store the new
   engine state, and commit. If the version moved, go back to 1.

So asks on one study are serialized (in-process lock, row lock on PostgreSQL, version check
across processes), and asks on different studies never wait for each other's engines.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import bindparam, case, func, insert, select, update
from sqlalchemy.engine import Connection, Row

from client.models import FINISHED_STATES, AskRequest, AskResponse, ProblemCode, TrialPublic
from engines.base import History, Proposal
from engines.errors import EngineError
from service.errors import ApiError, engine_error, unavailable
from service.history import HistoryCache, full_history
from service.idempotency import IdemKey, replay
from service.leases import expire_leases, lease_until
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
from service.trials import new_trial
from service.units import load_units
from service.wire import trial_public

PENDING_STATES = ("waiting", "running", "stale")
_ASK_ATTEMPTS = 12
#: Advisory lock class of "one ask at a time per study" on PostgreSQL.
_ASK_LOCK = 7001

#: The study columns an ask reads: the snapshot and the commit each read the row, and the
#: config (the largest column) comes from ``Store.parsed_study_for``.
_STUDY_COLUMNS = (
    "id",
    "state",
    "seed",
    "engine_state",
    "ask_count",
    "next_trial_number",
    "revision",
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

#: Points of trials told failed or infeasible: the engine is told not to propose them again.
_FAILED_POINTS = select(trials_t.c.x).where(
    trials_t.c.study_id == bindparam("study_id"), trials_t.c.state.in_(("failed", "infeasible"))
)
_INSERT_TRIAL = insert(trials_t)
#: The study's trial budget (a setting in its config column) and the trials it counts.
_MAX_TRIALS = select(studies_t.c.config["max_trials"].as_integer()).where(
    studies_t.c.id == bindparam("study_id")
)
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


@dataclass(frozen=True)
class _Ask:
    """One ask request and what it is about."""

    store: Store
    tenant_id: int
    study_id: int
    req: AskRequest
    parsed: ParsedStudy


@dataclass(frozen=True)
class _Plan:
    """Who gets what, from the study's unfinished trials: the asking worker's own running
    trials within their lease, then queued (enqueued or stale) ones, then ``need`` new ones."""

    expired: list[Row]
    handed: list[Row]
    need: int
    X_pending: np.ndarray


def _plan(conn: Connection, ask: _Ask, now: datetime) -> _Plan:
    """Raises: ApiError 409 ``max_trials_reached`` when the budget leaves nothing to hand out
    (checked only once no lease has expired: an expired trial may still turn stale)."""
    open_rows = conn.execute(_OPEN_TRIALS, {"study_id": ask.study_id}).all()
    by_number = sorted(open_rows, key=lambda r: r.number)
    expired = [r for r in by_number if r.state == "running" and r.lease_expires_at < now]
    X_pending = _stack([r.x for r in by_number], ask.parsed.problem.d)
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
    room = _budget_room(conn, ask.study_id)
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


def _budget_room(conn: Connection, study_id: int) -> int | None:
    """How many more trials the study's ``max_trials`` allows to run, counting every trial
    running or finished (``None`` without a budget)."""
    limit = conn.execute(_MAX_TRIALS, {"study_id": study_id}).scalar()
    if limit is None:
        return None
    used = conn.execute(_BUDGET_USED, {"study_id": study_id}).scalar_one()
    return max(0, int(limit) - used)


def ask(
    store: Store, tenant_id: int, study_id: int, req: AskRequest, idem: IdemKey | None
) -> Answer:
    """Hand out ``req.count`` trials; see the module docstring for how."""
    call = _Ask(store, tenant_id, study_id, req, store.parsed_study_for(study_id))
    if not call.parsed.engine.uses_observations:
        # An engine that reads no observations (random) is cheap: it runs inside the one
        # write transaction, under the study row lock.
        return store.write(tenant_id, idem, lambda c: _commit(c, call))
    if idem is not None:
        # A repeated request must not pay for the engine again.
        stored = store.db.read(lambda c: replay(c, tenant_id, idem))
        if stored is not None:
            return stored
    with store.study_lock(study_id), store.db.advisory_lock(_ASK_LOCK, study_id):
        for attempt in range(_ASK_ATTEMPTS):
            snap = store.db.read(lambda c: _snapshot(c, call))
            if snap is None:  # leases expired: apply the policy first, then look again
                store.db.write(lambda c: expire_leases(store, c, utcnow(), study_id))
                continue
            study, history, need = snap
            # The engine runs outside any transaction: no connection waits on it.
            proposal = _suggest(call.parsed, study, history, need) if need else None
            version = study.ask_count

            def commit(
                c: Connection, version: int = version, proposal: Proposal | None = proposal
            ) -> tuple[int, AskResponse]:
                return _commit(c, call, version, proposal)

            try:
                return store.write(tenant_id, idem, commit)
            except _VersionMoved:
                # Another process asked in between (SQLite served by several processes).
                time.sleep(random.uniform(0, 0.002 * 2 ** min(attempt, 6)))
    raise unavailable("the study is busy with concurrent asks; retry the request")


def _snapshot(conn: Connection, ask: _Ask) -> tuple[Row, History | None, int] | None:
    """Read the study, its history and how many new points are needed (no write lock).

    Returns ``None`` when leases have expired and the lease policy must run first."""
    row = find_study(conn, ask.tenant_id, ask.study_id, require_active=True, columns=_STUDY_COLUMNS)
    plan = _plan(conn, ask, utcnow())
    if plan.expired:
        return None
    if plan.need == 0:
        return row, None, 0
    parsed = ask.parsed
    history = load_history(conn, ask.study_id, parsed, plan.X_pending, ask.store.history)
    if parsed.engine.schedules_units:
        history = replace(history, units=load_units(conn, ask.study_id, parsed))
    return row, history, plan.need


def load_history(
    conn: Connection,
    study_id: int,
    parsed: ParsedStudy,
    X_pending: np.ndarray,
    cache: HistoryCache | None = None,
) -> History:
    """The completed trials as engine arrays in completion order, with ``X_pending`` as given
    and the points of failed and infeasible trials as ``X_failed``.

    With ``cache`` (the store's), only the trials completed since its last load are read."""
    if cache is None:
        history = full_history(conn, study_id, parsed, X_pending)
    else:
        history = cache.load(conn, study_id, parsed, X_pending)
    failed = conn.execute(_FAILED_POINTS, {"study_id": study_id}).scalars().all()
    return replace(history, X_failed=_stack(list(failed), parsed.problem.d)) if failed else history


def _stack(blobs: list[bytes], d: int) -> np.ndarray:
    if d == 0 or not blobs:
        return np.zeros((len(blobs), d))
    return np.frombuffer(b"".join(blobs), dtype=np.float64).reshape(len(blobs), d)


def _suggest(parsed: ParsedStudy, study: Row, history: History | None, need: int) -> Proposal:
    assert history is not None
    rng = np.random.default_rng([study.seed, study.ask_count])
    start = time.perf_counter()
    try:
        proposal = parsed.engine.suggest(parsed.problem, history, need, study.engine_state, rng)
    except EngineError as exc:
        raise engine_error(exc) from exc
    seconds = round(time.perf_counter() - start, 6)
    if parsed.engine.schedules_units and len(proposal.units) != len(proposal.X):
        raise RuntimeError(f"engine {parsed.engine.name} returned points without unit documents")
    rows = len(proposal.X) if parsed.engine.schedules_units and len(proposal.X) <= need else need
    if proposal.X.shape != (rows, parsed.problem.d):
        raise RuntimeError(
            f"engine {parsed.engine.name} returned {proposal.X.shape}, "
            f"expected {(need, parsed.problem.d)}"
        )
    # The engine's wall time of this ask, on every trial it proposed ("time per ask").
    details = [{**detail, "ask_seconds": seconds} for detail in _details(proposal, rows)]
    return replace(proposal, details=details)


def _commit(
    conn: Connection, ask: _Ask, version: int | None = None, proposal: Proposal | None = None
) -> tuple[int, AskResponse]:
    """The write transaction of an ask. With ``version`` (model-based engines), the proposal
    was made outside; without it, the engine runs here."""
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
    plan = _plan(conn, ask, now)
    if plan.expired:
        expire_leases(ask.store, conn, now, ask.study_id)
        plan = _plan(conn, ask, now)
    # At most the revision this transaction commits, above any committed before it: the
    # trials it hands out take it as their asked_seq (the event stream's order).
    running = _running(ask, now, row.revision + 1)
    trials = _hand_out(conn, plan.handed, running, now)
    if plan.need == 0:
        bump_revision(conn, ask.study_id, now)
        return 200, AskResponse(trials=trials)
    parsed = ask.parsed
    if version is None:
        proposal = _suggest(parsed, row, _no_history(parsed, plan.X_pending), plan.need)
    elif proposal is None or (len(proposal.X) < plan.need and not parsed.engine.schedules_units):
        raise _VersionMoved
    assert proposal is not None
    trials += _insert_proposed(conn, ask, row, proposal, plan.need, running, now)
    if len(trials) < ask.req.count:
        finished = not trials and proposal.retry_after is None
        return 200, AskResponse(trials=trials, retry_after=proposal.retry_after, finished=finished)
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


def _no_history(parsed: ParsedStudy, X_pending: np.ndarray) -> History:
    """What an engine that reads no observations is given: the pending points only."""
    problem = parsed.problem
    return History(
        np.zeros((0, problem.d)),
        np.zeros((0, problem.n_objectives)),
        np.zeros((0, problem.n_constraints)),
        X_pending,
    )


def _insert_proposed(
    conn: Connection,
    ask: _Ask,
    study: Row,
    proposal: Proposal,
    need: int,
    running: dict[str, Any],
    now: datetime,
) -> list[TrialPublic]:
    """Insert the proposed points as trials running for the asking worker, numbered from the
    study's counter, and store the engine's new state."""
    parsed = ask.parsed
    # A scheduler may propose fewer (units still training); it re-proposes any unit it
    # planned that was not inserted, as it rebuilds its population from the trials.
    n_new = min(len(proposal.X), need)
    units = proposal.units[:n_new] if parsed.engine.schedules_units else [None] * n_new
    first = study.next_trial_number
    new = [
        {
            **new_trial(parsed, ask.study_id, first + i, x, detail, now, unit=unit),
            **running,
            "started_at": now,
        }
        for i, (x, detail, unit) in enumerate(
            zip(proposal.X[:n_new], _details(proposal, n_new), units, strict=True)
        )
    ]
    if new:
        conn.execute(_INSERT_TRIAL, new)
    conn.execute(
        _STUDY_AFTER_PROPOSAL,
        {
            "study_id": ask.study_id,
            "now": now,
            "next_number": first + n_new,
            "engine_state": proposal.state,
            "version": study.ask_count + 1,
        },
    )
    return [trial_public(t) for t in new]


def _details(proposal: Proposal, need: int) -> list[dict[str, Any]]:
    details = list(proposal.details[:need])
    return details + [{} for _ in range(need - len(details))]
