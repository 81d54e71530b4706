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

import itertools
import math
import random
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import bindparam, case, delete, func, insert, select, update
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
from service.history import HistoryCache, full_history
from service.idempotency import IdemKey, replay
from service.problem import StudySpec
from service.store import (
    Answer,
    Store,
    bump_revision,
    get_study_row,
    measurement_public,
    measurements_t,
    studies_t,
    trial_public,
    trials_t,
    utcnow,
)
from service.units import load_units

PENDING_STATES = ("waiting", "running", "stale")
_ASK_ATTEMPTS = 12
#: Advisory lock class of "one ask at a time per study" on PostgreSQL.
_ASK_LOCK = 7001

# The hot statements are built once; SQLAlchemy then reuses their compiled form.
_STUDY_FOR_ASK = select(
    studies_t.c.id,
    studies_t.c.state,
    studies_t.c.seed,
    studies_t.c.engine_state,
    studies_t.c.engine_state_version,
    studies_t.c.revision,
    studies_t.c.next_trial_number,
).where(
    studies_t.c.id == bindparam("study_id"),
    studies_t.c.tenant_id == bindparam("tenant_id"),
    studies_t.c.deleted_at.is_(None),
)
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


class _VersionMoved(Exception):
    """The engine state changed between snapshot and commit; take a new snapshot."""


@dataclass(frozen=True)
class _Plan:
    """Who gets what, from the study's unfinished trials: the asking worker's own running
    trials within their lease, then queued (enqueued or stale) ones, then ``need`` new ones."""

    expired: list[Row]
    handed: list[Row]
    need: int
    X_pending: np.ndarray


def _plan(open_rows: list[Row], req: AskRequest, now: datetime, d: int) -> _Plan:
    by_number = sorted(open_rows, key=lambda r: r.number)
    expired = [r for r in by_number if r.state == "running" and r.lease_expires_at < now]
    held = (
        [
            r
            for r in by_number
            if r.state == "running" and r.worker_id == req.worker_id and r.lease_expires_at >= now
        ]
        if req.worker_id is not None
        else []
    )
    queued = [r for r in by_number if r.state in ("waiting", "stale")]
    handed = (held + queued)[: req.count]
    return _Plan(expired, handed, req.count - len(handed), _stack([r.x for r in by_number], d))


def _lease_until(spec: StudySpec, req: AskRequest | HeartbeatRequest, now: datetime) -> datetime:
    return now + timedelta(seconds=req.lease_seconds or spec.config.lease_seconds)


def _extended_lease(trial: Row, spec: StudySpec, req: HeartbeatRequest, now: datetime) -> datetime:
    """An explicit ``lease_seconds`` sets the lease; otherwise it is extended by the study's
    default and never shortened (a trial asked with a long lease keeps it)."""
    new = _lease_until(spec, req, now)
    if req.lease_seconds is None and trial.lease_expires_at is not None:
        return max(new, trial.lease_expires_at)
    return new


def _load_study(conn: Connection, tenant_id: int, study_id: int, lock: bool) -> Row:
    query = _STUDY_FOR_ASK.with_for_update() if lock else _STUDY_FOR_ASK
    row = conn.execute(query, {"study_id": study_id, "tenant_id": tenant_id}).first()
    if row is None:
        raise not_found(f"study {study_id}")
    if row.state != "active":
        raise conflict(
            "study_not_active",
            f"study {study_id} is {row.state}; set its state to active to ask for trials",
            state=row.state,
        )
    return row


def ask(
    store: Store, tenant_id: int, study_id: int, req: AskRequest, idem: IdemKey | None
) -> Answer:
    """Hand out ``req.count`` trials; see the module docstring for how."""
    spec = store.spec_for(study_id)
    if not spec.engine.uses_observations:
        # An engine that reads no observations (random) is cheap: it runs inside the one
        # write transaction, under the study row lock.
        return store.write(
            tenant_id, idem, lambda c: _commit_ask(store, c, tenant_id, study_id, req, spec)
        )
    if idem is not None:
        # A repeated request must not pay for the engine again.
        stored = store.db.read(lambda c: replay(c, tenant_id, idem))
        if stored is not None:
            return stored
    with store.study_lock(study_id), store.db.advisory_lock(_ASK_LOCK, study_id):
        for attempt in range(_ASK_ATTEMPTS):
            snap = store.db.read(lambda c: _snapshot(store, c, tenant_id, study_id, req, spec))
            if snap is None:  # leases expired: apply the policy first, then look again
                store.db.write(lambda c: expire_leases(store, c, utcnow(), study_id))
                continue
            study, history, need = snap
            # The engine runs outside any transaction: no connection waits on it.
            proposal = _suggest(spec, study, history, need) if need else None
            version = study.engine_state_version

            def commit(
                c: Connection, version: int = version, proposal: Proposal | None = proposal
            ) -> tuple[int, AskResponse]:
                return _commit_ask(store, c, tenant_id, study_id, req, spec, version, proposal)

            try:
                return store.write(tenant_id, idem, commit)
            except _VersionMoved:
                # Another process asked in between (SQLite served by several processes).
                time.sleep(random.uniform(0, 0.002 * 2 ** min(attempt, 6)))
    raise unavailable("the study is busy with concurrent asks; retry the request")


def _snapshot(
    store: Store, conn: Connection, tenant_id: int, study_id: int, req: AskRequest, spec: StudySpec
) -> tuple[Row, History | None, int] | None:
    """Read the study, its history and how many new points are needed (no write lock).

    Returns ``None`` when leases have expired and the lease policy must run first."""
    row = _load_study(conn, tenant_id, study_id, lock=False)
    plan = _plan(
        conn.execute(_OPEN_TRIALS, {"study_id": study_id}).all(), req, utcnow(), spec.problem.d
    )
    if plan.expired:
        return None
    if plan.need == 0:
        return row, None, 0
    history = load_history(conn, study_id, spec, plan.X_pending, store.history)
    if spec.engine.schedules_units:
        history = replace(history, units=load_units(conn, study_id, spec))
    return row, history, plan.need


def load_history(
    conn: Connection,
    study_id: int,
    spec: StudySpec,
    X_pending: np.ndarray,
    cache: HistoryCache | None = None,
) -> History:
    """The completed trials as engine arrays in completion order, with ``X_pending`` as given
    and the points of failed and infeasible trials as ``X_failed``.

    With ``cache`` (the store's), only the trials completed since its last load are read."""
    if cache is None:
        history = full_history(conn, study_id, spec, X_pending)
    else:
        history = cache.load(conn, study_id, spec, X_pending)
    failed = conn.execute(_FAILED_POINTS, {"study_id": study_id}).scalars().all()
    return replace(history, X_failed=_stack(list(failed), spec.problem.d)) if failed else history


def _stack(blobs: list[bytes], d: int) -> np.ndarray:
    if d == 0 or not blobs:
        return np.zeros((len(blobs), d))
    return np.frombuffer(b"".join(blobs), dtype=np.float64).reshape(len(blobs), d)


def _suggest(spec: StudySpec, study: Row, history: History | None, need: int) -> Proposal:
    assert history is not None
    rng = np.random.default_rng([study.seed, study.engine_state_version])
    try:
        proposal = spec.engine.suggest(spec.problem, history, need, study.engine_state, rng)
    except EngineRetryable as exc:
        raise unavailable(f"the engine could not propose now: {exc}") from exc
    except EngineError as exc:
        raise invalid("engine_unsupported", str(exc)) from exc
    if spec.engine.schedules_units and len(proposal.units) != len(proposal.X):
        raise RuntimeError(f"engine {spec.engine.name} returned points without unit documents")
    rows = len(proposal.X) if spec.engine.schedules_units and len(proposal.X) <= need else need
    if proposal.X.shape != (rows, spec.problem.d):
        raise RuntimeError(
            f"engine {spec.engine.name} returned {proposal.X.shape}, "
            f"expected {(need, spec.problem.d)}"
        )
    return proposal


def _commit_ask(
    store: Store,
    conn: Connection,
    tenant_id: int,
    study_id: int,
    req: AskRequest,
    spec: StudySpec,
    version: int | None = None,
    proposal: Proposal | None = None,
) -> tuple[int, AskResponse]:
    """The write transaction of an ask. With ``version`` (model-based engines), the proposal
    was made outside; without it, the engine runs here."""
    row = _load_study(conn, tenant_id, study_id, lock=True)
    if version is not None and row.engine_state_version != version:
        raise _VersionMoved
    now = utcnow()
    plan = _plan(conn.execute(_OPEN_TRIALS, {"study_id": study_id}).all(), req, now, spec.problem.d)
    if plan.expired:
        expire_leases(store, conn, now, study_id)
        plan = _plan(
            conn.execute(_OPEN_TRIALS, {"study_id": study_id}).all(), req, now, spec.problem.d
        )
    lease_until = _lease_until(spec, req, now)
    trials: list[TrialPublic] = []
    if plan.handed:
        rows = conn.execute(
            update(trials_t)
            .where(trials_t.c.id.in_([r.id for r in plan.handed]))
            .values(
                retries=trials_t.c.retries + case((trials_t.c.state == "stale", 1), else_=0),
                state="running",
                worker_id=req.worker_id,
                lease_expires_at=lease_until,
                started_at=func.coalesce(trials_t.c.started_at, now),
            )
            .returning(*trials_t.c)
        ).all()
        trials += [trial_public(r) for r in sorted(rows, key=lambda r: r.number)]

    if plan.need > 0:
        if version is None:
            history = History(
                np.zeros((0, spec.problem.d)),
                np.zeros((0, spec.problem.n_objectives)),
                np.zeros((0, spec.problem.n_constraints)),
                plan.X_pending,
            )
            proposal = _suggest(spec, row, history, plan.need)
        elif proposal is None or (len(proposal.X) < plan.need and not spec.engine.schedules_units):
            raise _VersionMoved
        assert proposal is not None
        # A scheduler may propose fewer (units still training); it re-proposes any unit it
        # planned that was not inserted, as it rebuilds its population from the trials.
        n_new = min(len(proposal.X), plan.need)
        units = proposal.units[:n_new] if spec.engine.schedules_units else [None] * n_new
        new = [
            _new_trial(spec, study_id, row.next_trial_number + i, x, detail, now, unit=unit)
            for i, (x, detail, unit) in enumerate(
                zip(proposal.X[:n_new], _details(proposal, n_new), units, strict=True)
            )
        ]
        for t in new:
            t.update(
                state="running",
                worker_id=req.worker_id,
                lease_expires_at=lease_until,
                started_at=now,
            )
        if new:
            conn.execute(_INSERT_TRIAL, new)
        trials += [trial_public(t) for t in new]
        conn.execute(
            _STUDY_AFTER_PROPOSAL,
            {
                "study_id": study_id,
                "now": now,
                "next_number": row.next_trial_number + n_new,
                "engine_state": proposal.state,
                "version": row.engine_state_version + 1,
            },
        )
        if len(trials) < req.count:
            return 200, AskResponse(
                trials=trials,
                retry_after=proposal.retry_after,
                finished=not trials and proposal.retry_after is None,
            )
    else:
        bump_revision(conn, study_id, now)
    return 200, AskResponse(trials=trials)


_INSERT_TRIAL = insert(trials_t)
_STUDY_AFTER_PROPOSAL = (
    update(studies_t)
    .where(studies_t.c.id == bindparam("study_id"))
    .values(
        revision=studies_t.c.revision + 1,
        updated_at=bindparam("now"),
        next_trial_number=bindparam("next_number"),
        engine_state=bindparam("engine_state", type_=studies_t.c.engine_state.type),
        engine_state_version=bindparam("version"),
    )
)


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
    unit: dict[str, Any] | None = None,
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
        "unit": unit,
        "metadata": {},
        "created_at": now,
        "started_at": None,
        "completed_at": None,
        "completed_seq": None,
    }


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
    expired = conn.execute(query.order_by(trials_t.c.study_id, trials_t.c.number)).all()
    changed = 0
    for sid, group in itertools.groupby(expired, key=lambda r: r.study_id):
        trials = list(group)
        config = store.spec(conn, sid).config
        requeue = [
            config.on_lease_expiry == "requeue" and t.retries < config.max_retries for t in trials
        ]
        n_failed = requeue.count(False)
        # Lock the study row before the trial rows (the order of tell and ask; studies in id
        # order across replicas), and take one completed_seq per trial that fails. A trial
        # that a concurrent tell finished first leaves a harmless gap in the seqs.
        revision = bump_revision(conn, sid, now, by=max(n_failed, 1))
        seqs = iter(range(revision - n_failed + 1, revision + 1))
        study_changed = False
        for trial, stale in zip(trials, requeue, strict=True):
            if stale:
                change: dict[str, Any] = {
                    "state": "stale",
                    "worker_id": None,
                    "lease_expires_at": None,
                }
            else:
                change = {
                    "state": "failed",
                    "reason": "lease expired without a tell or heartbeat",
                    "lease_expires_at": None,
                    "completed_at": now,
                    "completed_seq": next(seqs),
                }
            # The condition is checked again by the UPDATE itself: a tell, heartbeat or
            # re-serve that committed since the SELECT wins (PostgreSQL does not lock the
            # selected rows).
            result = conn.execute(
                update(trials_t)
                .where(
                    trials_t.c.id == trial.id,
                    trials_t.c.state == "running",
                    trials_t.c.lease_expires_at < now,
                )
                .values(**change)
            )
            study_changed = study_changed or bool(result.rowcount)
        changed += study_changed
    return changed


# --- tell, report, heartbeat --------------------------------------------------------------


_TRIAL_FOR_UPDATE = (
    select(trials_t)
    .join(studies_t, studies_t.c.id == trials_t.c.study_id)
    .where(
        studies_t.c.id == bindparam("study_id"),
        studies_t.c.tenant_id == bindparam("tenant_id"),
        studies_t.c.deleted_at.is_(None),
        trials_t.c.number == bindparam("number"),
    )
    .with_for_update(of=trials_t)
)


_FINISH_TRIAL = (
    update(trials_t)
    .where(trials_t.c.id == bindparam("trial_id"))
    .values(
        state=bindparam("state"),
        reason=bindparam("reason"),
        lease_expires_at=None,
        completed_at=bindparam("completed_at"),
        completed_seq=bindparam("completed_seq"),
        values=bindparam("values", type_=trials_t.c["values"].type),
        constraints=bindparam("constraints", type_=trials_t.c.constraints.type),
        feasible=bindparam("feasible"),
        metadata=bindparam("metadata", type_=trials_t.c.metadata.type),
    )
    .returning(*trials_t.c)
)


def _trial_for_update(
    conn: Connection, tenant_id: int, study_id: int, number: int, now: datetime
) -> tuple[Row, int]:
    """The trial, locked for update, of a live study of the tenant, and the study's new
    revision. The revision is bumped first, so that the study row is locked before the trial
    row, in the order ``ask`` takes them (no deadlock between a tell and an ask on
    PostgreSQL); a trial finished in this transaction takes it as ``completed_seq``.

    Raises:
        ApiError: 404 ``not_found`` for the study, ``trial_not_found`` for the trial.
    """
    revision = bump_revision(conn, study_id, now)
    row = conn.execute(
        _TRIAL_FOR_UPDATE, {"study_id": study_id, "tenant_id": tenant_id, "number": number}
    ).first()
    if row is None:
        get_study_row(conn, tenant_id, study_id)
        raise ApiError(404, "trial_not_found", f"study {study_id} has no trial {number}")
    return row, revision


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
) -> Answer:
    def fn(conn: Connection) -> tuple[int, TrialPublic]:
        now = utcnow()
        trial, revision = _trial_for_update(conn, tenant_id, study_id, number, now)
        spec = store.spec(conn, study_id)
        _check_unfinished(trial)
        change: dict[str, Any] = {
            "trial_id": trial.id,
            "state": req.state,
            "reason": req.reason,
            "completed_at": now,
            "completed_seq": revision,
            "values": None,
            "constraints": None,
            "feasible": None,
            "metadata": {**trial.metadata, **req.metadata} if req.metadata else trial.metadata,
        }
        if req.state == "completed":
            vals, cons, feasible = validate_results(spec, req.values, req.constraints)
            change.update(values=vals, constraints=cons or None, feasible=feasible)
            if req.checkpoint is not None:
                _store_final_checkpoint(conn, trial, vals, req.checkpoint, now)
            elif trial.unit is not None and not _has_checkpoint(
                conn, trial.id, int(trial.unit["to_step"])
            ):
                raise invalid(
                    "checkpoint_required",
                    f"trial {number} is a training unit: tell it with the reference of the "
                    "checkpoint the worker saved ('checkpoint'), so that later units can load it",
                )
        updated = conn.execute(_FINISH_TRIAL, change).one()
        return 200, trial_public(updated)

    return store.write(tenant_id, idem, fn)


def _store_final_checkpoint(
    conn: Connection, trial: Row, values: dict[str, float], checkpoint: str, now: datetime
) -> None:
    """The checkpoint told with a trial, as a measurement of its values at the unit's last step
    (after the last reported step for other trials)."""
    if trial.unit is not None:
        step = int(trial.unit["to_step"])
    else:
        last = conn.execute(
            select(func.max(measurements_t.c.step)).where(measurements_t.c.trial_id == trial.id)
        ).scalar()
        step = 0 if last is None else int(last) + 1
    _put_measurement(conn, trial.id, step, values, checkpoint, now)


def _put_measurement(
    conn: Connection,
    trial_id: int,
    step: int,
    values: dict[str, float],
    checkpoint: str | None,
    now: datetime,
) -> None:
    """Store a measurement, replacing the one at the same step."""
    conn.execute(
        delete(measurements_t).where(
            measurements_t.c.trial_id == trial_id, measurements_t.c.step == step
        )
    )
    conn.execute(
        insert(measurements_t).values(
            trial_id=trial_id, step=step, values=values, checkpoint=checkpoint, created_at=now
        )
    )


def _has_checkpoint(conn: Connection, trial_id: int, at_least_step: int) -> bool:
    """Whether the trial reported a checkpoint at ``at_least_step`` or later (a unit's end: a
    checkpoint reported before training, at ``from_step``, does not count)."""
    return (
        conn.execute(
            select(measurements_t.c.id).where(
                measurements_t.c.trial_id == trial_id,
                measurements_t.c.checkpoint.is_not(None),
                measurements_t.c.step >= at_least_step,
            )
        ).first()
        is not None
    )


def report(
    store: Store,
    tenant_id: int,
    study_id: int,
    number: int,
    req: ReportRequest,
    idem: IdemKey | None,
) -> Answer:
    """Store an intermediate measurement (replacing one at the same step) and extend the lease."""

    def fn(conn: Connection) -> tuple[int, MeasurementPublic]:
        now = utcnow()
        trial, _ = _trial_for_update(conn, tenant_id, study_id, number, now)
        spec = store.spec(conn, study_id)
        _check_unfinished(trial)
        bad = [k for k, v in req.values.items() if not math.isfinite(v)]
        if bad:
            raise invalid("non_finite_value", f"reported value(s) {bad} are NaN or infinite")
        _put_measurement(conn, trial.id, req.step, req.values, req.checkpoint, now)
        if trial.state == "running":
            lease = _extended_lease(trial, spec, HeartbeatRequest(), now)
            conn.execute(
                update(trials_t).where(trials_t.c.id == trial.id).values(lease_expires_at=lease)
            )
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
) -> Answer:
    """Extend a running trial's lease. A ``stale`` trial not yet re-served is taken back.

    With ``worker_id``, a trial that was re-served to another worker is a 409
    ``trial_reassigned``: the caller should stop working on it."""

    def fn(conn: Connection) -> tuple[int, TrialPublic]:
        now = utcnow()
        trial, _ = _trial_for_update(conn, tenant_id, study_id, number, now)
        spec = store.spec(conn, study_id)
        _check_unfinished(trial)
        if trial.state == "waiting":
            raise conflict(
                "trial_not_running",
                f"trial {number} is waiting to be asked for; ask before sending heartbeats",
                state=trial.state,
            )
        if (
            req.worker_id is not None
            and trial.state == "running"
            and trial.worker_id not in (None, req.worker_id)
        ):
            raise conflict(
                "trial_reassigned",
                f"trial {number} was served to another worker after its lease expired",
                state=trial.state,
            )
        worker_id = req.worker_id if trial.state == "stale" else trial.worker_id
        updated = conn.execute(
            update(trials_t)
            .where(trials_t.c.id == trial.id)
            .values(
                state="running",
                worker_id=worker_id,
                lease_expires_at=_extended_lease(trial, spec, req, now),
            )
            .returning(*trials_t.c)
        ).one()
        return 200, trial_public(updated)

    return store.write(tenant_id, idem, fn)


# --- enqueue and reads --------------------------------------------------------------------


def enqueue(
    store: Store, tenant_id: int, study_id: int, req: TrialCreate, idem: IdemKey | None
) -> Answer:
    """Add a user-chosen point; served before engine points. With values, it is completed."""

    def fn(conn: Connection) -> tuple[int, TrialPublic]:
        row = get_study_row(conn, tenant_id, study_id, lock=True)
        spec = store.spec(conn, study_id)
        if spec.engine.schedules_units:
            raise conflict(
                "engine_schedules_units",
                f"engine {spec.engine.name!r} schedules its own training units; a trial cannot "
                "be added by hand",
            )
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
                completed_seq=row.revision + 1,  # the revision set below, under the row lock
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
        return 201, trial_public(t)

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
