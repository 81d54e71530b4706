"""Trials: ask, tell, report, heartbeat, enqueue, list, and the lease reaper.

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

import math
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import and_, case, delete, func, insert, or_, select, update
from sqlalchemy.engine import Connection, Row

from client.models import (
    FINISHED_STATES,
    AskRequest,
    AskResponse,
    HeartbeatRequest,
    MeasurementPublic,
    ReportRequest,
    TellRequest,
    TrialCreate,
    TrialPublic,
    TrialsPage,
)
from engines.base import History, Proposal
from engines.errors import EngineError, EngineRetryable, SpaceError
from service.errors import ApiError, conflict, invalid, not_found, unavailable
from service.idempotency import IdemKey
from service.problem import StudySpec
from service.store import (
    Store,
    Written,
    bump_revision,
    get_study_row,
    measurement_public,
    measurements_t,
    studies_t,
    trial_public,
    trials_t,
    utcnow,
)

PENDING_STATES = ("waiting", "running", "stale")
_ASK_ATTEMPTS = 12
#: Advisory lock class of "one ask at a time per study" on PostgreSQL.
_ASK_LOCK = 7001


class _VersionMoved(Exception):
    """The engine state changed between snapshot and commit; take a new snapshot."""


@dataclass(frozen=True)
class _Snapshot:
    spec: StudySpec
    version: int
    state: dict[str, Any]
    seed: int
    need: int
    history: History | None
    #: Running trials whose lease has expired: the lease policy runs before the engine.
    expired: int


def ask(
    store: Store, tenant_id: int, study_id: int, req: AskRequest, idem: IdemKey | None
) -> Written:
    with store.study_lock(study_id), store.db.advisory_lock(_ASK_LOCK, study_id):
        for attempt in range(_ASK_ATTEMPTS):
            snap = store.db.read(lambda c: _snapshot(store, c, tenant_id, study_id, req))
            if snap.expired:
                store.db.write(lambda c: expire_leases(store, c, utcnow(), study_id))
                continue
            proposal = _propose(snap) if snap.need > 0 else None

            def commit(c: Connection, snap: _Snapshot = snap, proposal: Proposal | None = proposal):
                return _commit_ask(store, c, tenant_id, study_id, req, snap, proposal)

            try:
                return store.write(tenant_id, idem, commit)
            except _VersionMoved:
                # Another process asked in between (SQLite served by several processes).
                time.sleep(random.uniform(0, 0.002 * 2 ** min(attempt, 6)))
                continue
    raise unavailable("the study is busy with concurrent asks; retry the request")


def _lease_until(spec: StudySpec, req: AskRequest | HeartbeatRequest, now: datetime) -> datetime:
    return now + timedelta(seconds=req.lease_seconds or spec.config.lease_seconds)


def _check_active(row: Row) -> None:
    if row.state != "active":
        raise conflict(
            "study_not_active",
            f"study {row.id} is {row.state}; set its state to active to ask for trials",
            state=row.state,
        )


def _held_query(study_id: int, worker_id: str, now: datetime) -> Any:
    return (
        select(trials_t)
        .where(
            trials_t.c.study_id == study_id,
            trials_t.c.state == "running",
            trials_t.c.worker_id == worker_id,
            trials_t.c.lease_expires_at >= now,
        )
        .order_by(trials_t.c.number)
    )


def _snapshot(
    store: Store, conn: Connection, tenant_id: int, study_id: int, req: AskRequest
) -> _Snapshot:
    row = get_study_row(conn, tenant_id, study_id)
    _check_active(row)
    spec = store.spec(conn, study_id)
    now = utcnow()
    available = 0
    if req.worker_id is not None:
        held = (
            _held_query(study_id, req.worker_id, now).with_only_columns(func.count()).order_by(None)
        )
        available += conn.execute(held).scalar_one()
    counts = dict(
        conn.execute(
            select(trials_t.c.state, func.count())
            .where(
                trials_t.c.study_id == study_id,
                or_(
                    trials_t.c.state.in_(("waiting", "stale")),
                    and_(trials_t.c.state == "running", trials_t.c.lease_expires_at < now),
                ),
            )
            .group_by(trials_t.c.state)
        ).all()
    )
    expired = counts.pop("running", 0)
    need = max(0, req.count - available - sum(counts.values()))
    history = None
    if need and not expired:
        history = load_history(conn, study_id, spec, spec.engine.uses_observations)
    return _Snapshot(
        spec, row.engine_state_version, row.engine_state, row.seed, need, history, expired
    )


def load_history(conn: Connection, study_id: int, spec: StudySpec, observations: bool) -> History:
    """The study's trials as engine arrays; completed ones only when ``observations``."""
    d = spec.problem.d
    pending = conn.execute(
        select(trials_t.c.x).where(
            trials_t.c.study_id == study_id, trials_t.c.state.in_(PENDING_STATES)
        )
    ).scalars()
    X_pending = _stack(list(pending), d)
    if not observations:
        m, k = spec.problem.n_objectives, spec.problem.n_constraints
        return History(np.zeros((0, d)), np.zeros((0, m)), np.zeros((0, k)), X_pending)
    rows = conn.execute(
        select(trials_t.c.x, trials_t.c.values, trials_t.c.constraints)
        .where(trials_t.c.study_id == study_id, trials_t.c.state == "completed")
        .order_by(trials_t.c.number)
    ).all()
    X = _stack([r.x for r in rows], d)
    Y = (
        np.array(
            [[r.values[name] for name in spec.objective_names] for r in rows], dtype=np.float64
        ).reshape(len(rows), spec.problem.n_objectives)
        * spec.signs
    )
    C = np.array(
        [spec.constraint_slack(r.constraints or {}) for r in rows], dtype=np.float64
    ).reshape(len(rows), spec.problem.n_constraints)
    return History(X, Y, C, X_pending)


def _stack(blobs: list[bytes], d: int) -> np.ndarray:
    if d == 0 or not blobs:
        return np.zeros((len(blobs), d))
    return np.frombuffer(b"".join(blobs), dtype=np.float64).reshape(len(blobs), d)


def _propose(snap: _Snapshot) -> Proposal:
    spec = snap.spec
    assert snap.history is not None
    rng = np.random.default_rng([snap.seed, snap.version])
    try:
        proposal = spec.engine.suggest(spec.problem, snap.history, snap.need, snap.state, rng)
    except EngineRetryable as exc:
        raise unavailable(f"the engine could not propose now: {exc}") from exc
    except EngineError as exc:
        raise invalid("engine_unsupported", str(exc)) from exc
    if proposal.X.shape != (snap.need, spec.problem.d):
        raise RuntimeError(
            f"engine {spec.engine.name} returned {proposal.X.shape}, "
            f"expected {(snap.need, spec.problem.d)}"
        )
    return proposal


def _commit_ask(
    store: Store,
    conn: Connection,
    tenant_id: int,
    study_id: int,
    req: AskRequest,
    snap: _Snapshot,
    proposal: Proposal | None,
) -> tuple[int, AskResponse]:
    row = get_study_row(conn, tenant_id, study_id, lock=True)
    _check_active(row)
    if row.engine_state_version != snap.version:
        raise _VersionMoved
    spec = store.spec(conn, study_id)
    now = utcnow()
    lease_until = _lease_until(spec, req, now)
    expire_leases(store, conn, now, study_id)

    handed: list[int] = []
    if req.worker_id is not None:
        held = conn.execute(_held_query(study_id, req.worker_id, now).limit(req.count)).all()
        handed += [r.id for r in held]
    if len(handed) < req.count:
        queued = conn.execute(
            select(trials_t.c.id)
            .where(trials_t.c.study_id == study_id, trials_t.c.state.in_(("waiting", "stale")))
            .order_by(trials_t.c.number)
            .limit(req.count - len(handed))
        ).scalars()
        handed += list(queued)
    trials: list[TrialPublic] = []
    if handed:
        conn.execute(
            update(trials_t)
            .where(trials_t.c.id.in_(handed))
            .values(
                retries=trials_t.c.retries + case((trials_t.c.state == "stale", 1), else_=0),
                state="running",
                worker_id=req.worker_id,
                lease_expires_at=lease_until,
                started_at=func.coalesce(trials_t.c.started_at, now),
            )
        )
        rows = conn.execute(
            select(trials_t).where(trials_t.c.id.in_(handed)).order_by(trials_t.c.number)
        )
        trials += [trial_public(r) for r in rows]

    need = req.count - len(trials)
    values: dict[str, Any] = {"revision": row.revision + 1, "updated_at": now}
    if need > 0:
        if proposal is None or len(proposal.X) < need:
            raise _VersionMoved
        new = [
            _new_trial(spec, study_id, row.next_trial_number + i, x, detail, now)
            for i, (x, detail) in enumerate(
                zip(proposal.X[:need], _details(proposal, need), strict=True)
            )
        ]
        for t in new:
            t.update(
                state="running",
                worker_id=req.worker_id,
                lease_expires_at=lease_until,
                started_at=now,
            )
        conn.execute(insert(trials_t), new)
        trials += [_public_from_values(t) for t in new]
        values.update(
            next_trial_number=row.next_trial_number + need,
            engine_state=proposal.state,
            engine_state_version=row.engine_state_version + 1,
        )
    conn.execute(_study_update(study_id, values))
    return 200, AskResponse(trials=trials)


def _study_update(study_id: int, values: dict[str, Any]) -> Any:
    return update(studies_t).where(studies_t.c.id == study_id).values(**values)


def _details(proposal: Proposal, need: int) -> list[dict[str, Any]]:
    details = list(proposal.details[:need])
    return details + [{} for _ in range(need - len(details))]


def _new_trial(
    spec: StudySpec,
    study_id: int,
    number: int,
    x: np.ndarray,
    detail: dict[str, Any],
    now: datetime,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    x = np.ascontiguousarray(x, dtype=np.float64)
    return {
        "study_id": study_id,
        "number": number,
        "state": "waiting",
        "params": params if params is not None else spec.space.decode(x),
        "x": x.tobytes(),
        "values": None,
        "constraints": None,
        "feasible": None,
        "reason": None,
        "worker_id": None,
        "lease_expires_at": None,
        "retries": 0,
        "details": detail,
        "metadata": {},
        "created_at": now,
        "started_at": None,
        "completed_at": None,
    }


def _public_from_values(t: dict[str, Any]) -> TrialPublic:
    return TrialPublic.model_validate({k: v for k, v in t.items() if k != "x"})


def expire_leases(
    store: Store, conn: Connection, now: datetime, study_id: int | None = None
) -> int:
    """Apply each study's lease policy to running trials whose lease has expired.

    ``requeue``: the trial becomes ``stale`` and its parameters go to the next asker, until it
    has been re-served ``max_retries`` times; then, or with ``fail``, it becomes ``failed``.
    Returns how many trials changed.
    """
    query = select(trials_t.c.id, trials_t.c.study_id, trials_t.c.retries).where(
        trials_t.c.state == "running", trials_t.c.lease_expires_at < now
    )
    if study_id is not None:
        query = query.where(trials_t.c.study_id == study_id)
    expired = conn.execute(query).all()
    for trial in expired:
        config = store.spec(conn, trial.study_id).config
        if config.on_lease_expiry == "requeue" and trial.retries < config.max_retries:
            change: dict[str, Any] = {"state": "stale", "worker_id": None, "lease_expires_at": None}
        else:
            change = {
                "state": "failed",
                "reason": "lease expired without a tell or heartbeat",
                "lease_expires_at": None,
                "completed_at": now,
            }
        conn.execute(update(trials_t).where(trials_t.c.id == trial.id).values(**change))
    for sid in {t.study_id for t in expired}:
        bump_revision(conn, sid, now)
    return len(expired)


# --- tell, report, heartbeat --------------------------------------------------------------


def _trial_for_update(conn: Connection, study_id: int, number: int) -> Row:
    row = conn.execute(
        select(trials_t)
        .where(trials_t.c.study_id == study_id, trials_t.c.number == number)
        .with_for_update()
    ).first()
    if row is None:
        raise ApiError(404, "trial_not_found", f"study {study_id} has no trial {number}")
    return row


def _check_unfinished(trial: Row) -> None:
    if trial.state in FINISHED_STATES:
        raise conflict(
            "trial_finished",
            f"trial {trial.number} is already {trial.state}; a finished trial cannot change",
            state=trial.state,
        )


def _finite_metrics(
    kind: str, given: dict[str, float], names: tuple[str, ...], hint: str
) -> dict[str, float]:
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise invalid(
            f"unknown_{kind}", f"unknown {kind} name(s) {unknown}; the study has {list(names)}"
        )
    missing = [n for n in names if n not in given]
    if missing:
        raise invalid(f"missing_{kind}", f"missing {kind} value(s) for {missing}")
    bad = [n for n in names if not math.isfinite(given[n])]
    if bad:
        raise invalid("non_finite_value", f"{kind} value(s) {bad} are NaN or infinite; {hint}")
    return {n: float(given[n]) for n in names}


def validate_results(
    spec: StudySpec, values: dict[str, float] | None, constraints: dict[str, float]
) -> tuple[dict[str, float], dict[str, float], bool]:
    """Check told values and constraint metrics; return them in order with feasibility.

    Raises:
        ApiError: 422 with code ``missing_objective``, ``unknown_objective``,
            ``missing_constraint``, ``unknown_constraint`` or ``non_finite_value``.
    """
    hint = "tell the trial with state 'failed' (and a reason) instead"
    vals = _finite_metrics("objective", values or {}, spec.objective_names, hint)
    cons = _finite_metrics("constraint", constraints, spec.constraint_names, hint)
    feasible = all(s <= 0 for s in spec.constraint_slack(cons))
    return vals, cons, feasible


def tell(
    store: Store, tenant_id: int, study_id: int, number: int, req: TellRequest, idem: IdemKey | None
) -> Written:
    def fn(conn: Connection) -> tuple[int, TrialPublic]:
        get_study_row(conn, tenant_id, study_id)
        spec = store.spec(conn, study_id)
        trial = _trial_for_update(conn, study_id, number)
        _check_unfinished(trial)
        now = utcnow()
        change: dict[str, Any] = {
            "state": req.state,
            "reason": req.reason,
            "lease_expires_at": None,
            "completed_at": now,
        }
        if req.state == "completed":
            vals, cons, feasible = validate_results(spec, req.values, req.constraints)
            change.update(values=vals, constraints=cons or None, feasible=feasible)
        if req.metadata:
            change["metadata"] = {**trial.metadata, **req.metadata}
        conn.execute(update(trials_t).where(trials_t.c.id == trial.id).values(**change))
        bump_revision(conn, study_id, now)
        updated = conn.execute(select(trials_t).where(trials_t.c.id == trial.id)).one()
        return 200, trial_public(updated)

    return store.write(tenant_id, idem, fn)


def report(
    store: Store,
    tenant_id: int,
    study_id: int,
    number: int,
    req: ReportRequest,
    idem: IdemKey | None,
) -> Written:
    """Store an intermediate measurement (replacing one at the same step) and extend the lease."""

    def fn(conn: Connection) -> tuple[int, MeasurementPublic]:
        get_study_row(conn, tenant_id, study_id)
        spec = store.spec(conn, study_id)
        trial = _trial_for_update(conn, study_id, number)
        _check_unfinished(trial)
        bad = [k for k, v in req.values.items() if not math.isfinite(v)]
        if bad:
            raise invalid("non_finite_value", f"reported value(s) {bad} are NaN or infinite")
        now = utcnow()
        conn.execute(
            delete(measurements_t).where(
                measurements_t.c.trial_id == trial.id, measurements_t.c.step == req.step
            )
        )
        conn.execute(
            insert(measurements_t).values(
                trial_id=trial.id,
                step=req.step,
                values=req.values,
                checkpoint=req.checkpoint,
                created_at=now,
            )
        )
        if trial.state == "running":
            lease = _lease_until(spec, HeartbeatRequest(), now)
            conn.execute(
                update(trials_t).where(trials_t.c.id == trial.id).values(lease_expires_at=lease)
            )
        bump_revision(conn, study_id, now)
        return 201, MeasurementPublic(
            step=req.step, values=req.values, checkpoint=req.checkpoint, created_at=now
        )

    return store.write(tenant_id, idem, fn)


def heartbeat(
    store: Store,
    tenant_id: int,
    study_id: int,
    number: int,
    req: HeartbeatRequest,
    idem: IdemKey | None,
) -> Written:
    """Extend a running trial's lease. A ``stale`` trial not yet re-served is taken back."""

    def fn(conn: Connection) -> tuple[int, TrialPublic]:
        get_study_row(conn, tenant_id, study_id)
        spec = store.spec(conn, study_id)
        trial = _trial_for_update(conn, study_id, number)
        _check_unfinished(trial)
        if trial.state == "waiting":
            raise conflict(
                "trial_not_running",
                f"trial {number} is waiting to be asked for; ask before sending heartbeats",
                state=trial.state,
            )
        now = utcnow()
        conn.execute(
            update(trials_t)
            .where(trials_t.c.id == trial.id)
            .values(state="running", lease_expires_at=_lease_until(spec, req, now))
        )
        updated = conn.execute(select(trials_t).where(trials_t.c.id == trial.id)).one()
        return 200, trial_public(updated)

    return store.write(tenant_id, idem, fn)


# --- enqueue and reads --------------------------------------------------------------------


def enqueue(
    store: Store, tenant_id: int, study_id: int, req: TrialCreate, idem: IdemKey | None
) -> Written:
    """Add a user-chosen point; served before engine points. With values, it is completed."""

    def fn(conn: Connection) -> tuple[int, TrialPublic]:
        row = get_study_row(conn, tenant_id, study_id, lock=True)
        spec = store.spec(conn, study_id)
        try:
            params = spec.space.validate(req.params)
        except SpaceError as exc:
            raise invalid("invalid_params", str(exc)) from exc
        now = utcnow()
        t = _new_trial(
            spec,
            study_id,
            row.next_trial_number,
            spec.space.encode(params),
            {"source": "user"},
            now,
            params,
        )
        t["metadata"] = req.metadata
        if req.values is not None:
            vals, cons, feasible = validate_results(spec, req.values, req.constraints)
            t.update(
                state="completed",
                values=vals,
                constraints=cons or None,
                feasible=feasible,
                completed_at=now,
            )
        conn.execute(insert(trials_t).values(**t))
        conn.execute(
            _study_update(
                study_id,
                {
                    "next_trial_number": row.next_trial_number + 1,
                    "revision": row.revision + 1,
                    "updated_at": now,
                },
            )
        )
        return 201, _public_from_values(t)

    return store.write(tenant_id, idem, fn)


def list_trials(
    store: Store,
    tenant_id: int,
    study_id: int,
    states: list[str] | None,
    after: int | None,
    limit: int,
) -> TrialsPage:
    def fn(conn: Connection) -> TrialsPage:
        get_study_row(conn, tenant_id, study_id)
        query = select(trials_t).where(trials_t.c.study_id == study_id)
        if states:
            query = query.where(trials_t.c.state.in_(states))
        if after is not None:
            query = query.where(trials_t.c.number > after)
        rows = conn.execute(query.order_by(trials_t.c.number).limit(limit + 1)).all()
        data = [trial_public(r) for r in rows[:limit]]
        next_cursor = str(data[-1].number) if len(rows) > limit else None
        return TrialsPage(data=data, next_cursor=next_cursor)

    return store.db.read(fn)


def get_trial(store: Store, tenant_id: int, study_id: int, number: int) -> TrialPublic:
    def fn(conn: Connection) -> TrialPublic:
        get_study_row(conn, tenant_id, study_id)
        row = conn.execute(
            select(trials_t).where(trials_t.c.study_id == study_id, trials_t.c.number == number)
        ).first()
        if row is None:
            raise not_found(f"trial {number} of study {study_id}")
        return trial_public(row)

    return store.db.read(fn)


def list_measurements(
    store: Store, tenant_id: int, study_id: int, number: int
) -> list[MeasurementPublic]:
    def fn(conn: Connection) -> list[MeasurementPublic]:
        get_study_row(conn, tenant_id, study_id)
        rows = conn.execute(
            select(measurements_t)
            .join(trials_t, trials_t.c.id == measurements_t.c.trial_id)
            .where(trials_t.c.study_id == study_id, trials_t.c.number == number)
            .order_by(measurements_t.c.step)
        )
        return [measurement_public(r) for r in rows]

    return store.db.read(fn)
