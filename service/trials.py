"""Trials: tell, report, enqueue, and the reads (list, get, measurements).

Asking for trials is ``service.ask``; leases and heartbeats are ``service.leases``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection, Row

from client.models import (
    HeartbeatRequest,
    MeasurementPublic,
    ReportRequest,
    TellRequest,
    TrialCreate,
    TrialPublic,
    TrialsPage,
)
from engines.errors import SpaceError
from service import suggestion_pool, trial_fields
from service.errors import ApiError, ProblemCode
from service.idempotency import IdemKey
from service.leases import extended_lease
from service.problem import ParsedStudy
from service.store import (
    Answer,
    Store,
    find_study,
    measurements_t,
    studies_t,
    trial_not_found,
    trials_t,
    unfinished_trial,
    utcnow,
)
from service.wire import measurement_public, trial_public


def new_trial(
    parsed: ParsedStudy,
    study_id: int,
    number: int,
    x: np.ndarray,
    detail: dict[str, Any],
    now: datetime,
    params: dict[str, Any] | None = None,
    unit: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The columns of a new waiting trial at the unit-cube point ``x``."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    return {
        "study_id": study_id,
        "number": number,
        "state": "waiting",
        "params": params if params is not None else parsed.space.decode(x),
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
        "asked_seq": None,
        "note": None,
        "heartbeat_at": None,
    }


# --- tell and report ----------------------------------------------------------------------


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

#: The codes of a wrong set of objective or constraint metrics: unknown names, missing names.
_METRIC_CODES = {
    "objective": (ProblemCode.UNKNOWN_OBJECTIVE, ProblemCode.MISSING_OBJECTIVE),
    "constraint": (ProblemCode.UNKNOWN_CONSTRAINT, ProblemCode.MISSING_CONSTRAINT),
}


def _finite_metrics(
    kind: str, given: dict[str, float], names: tuple[str, ...], hint: str
) -> dict[str, float]:
    unknown_code, missing_code = _METRIC_CODES[kind]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ApiError(
            unknown_code, f"unknown {kind} name(s) {unknown}; the study has {list(names)}"
        )
    missing = [n for n in names if n not in given]
    if missing:
        raise ApiError(missing_code, f"missing {kind} value(s) for {missing}")
    bad = [n for n in names if not math.isfinite(given[n])]
    if bad:
        raise ApiError(
            ProblemCode.NON_FINITE_VALUE, f"{kind} value(s) {bad} are NaN or infinite; {hint}"
        )
    return {n: float(given[n]) for n in names}


def validate_results(
    parsed: ParsedStudy, values: dict[str, float] | None, constraints: dict[str, float]
) -> tuple[dict[str, float], dict[str, float], bool]:
    """Check told values and constraint metrics; return them in order with feasibility.

    Raises:
        ApiError: 422 with code ``missing_objective``, ``unknown_objective``,
            ``missing_constraint``, ``unknown_constraint`` or ``non_finite_value``.
    """
    hint = "tell the trial with state 'failed' (and a reason) instead"
    vals = _finite_metrics("objective", values or {}, parsed.objective_names, hint)
    cons = _finite_metrics("constraint", constraints, parsed.constraint_names, hint)
    feasible = all(s <= 0 for s in parsed.constraint_slack(cons))
    return vals, cons, feasible


def tell(
    store: Store, tenant_id: int, study_id: int, number: int, req: TellRequest, idem: IdemKey | None
) -> Answer:
    """Finish a trial: completed with its values, or failed or infeasible with a reason; then
    refill the study's suggestion pool (``service.pool_refill``)."""
    answer = store.write(
        tenant_id, idem, lambda c: finish(c, store, tenant_id, study_id, number, req)
    )
    refill = store.refill_pool
    told = answer.status == 200
    if refill is not None and told and suggestion_pool.pools(store.parsed_study_for(study_id)):
        refill(tenant_id, study_id)
    return answer


def finish(
    conn: Connection, store: Store, tenant_id: int, study_id: int, number: int, req: TellRequest
) -> tuple[int, TrialPublic]:
    """The write of a tell, in the caller's transaction."""
    now = utcnow()
    trial, revision = unfinished_trial(conn, tenant_id, study_id, number, now)
    parsed = store.parsed_study(conn, study_id)
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
        vals, cons, feasible = validate_results(parsed, req.values, req.constraints)
        change.update(values=vals, constraints=cons or None, feasible=feasible)
        _store_checkpoint(conn, trial, vals, req.checkpoint, now)
    updated = conn.execute(_FINISH_TRIAL, change).one()
    return 200, trial_public(updated)


def _store_checkpoint(
    conn: Connection, trial: Row, values: dict[str, float], checkpoint: str | None, now: datetime
) -> None:
    """The checkpoint told with a completed trial, as a measurement of its values at the unit's
    last step (after the last reported step for other trials).

    Raises:
        ApiError: 422 ``checkpoint_required`` for a training unit told without a checkpoint
            that reported none at its last step either.
    """
    if checkpoint is None:
        if trial.unit is not None and not _has_checkpoint(
            conn, trial.id, int(trial.unit["to_step"])
        ):
            raise ApiError(
                ProblemCode.CHECKPOINT_REQUIRED,
                f"trial {trial.number} is a training unit: tell it with the reference of the "
                "checkpoint the worker saved ('checkpoint'), so that later units can load it",
            )
        return
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
    """Store an intermediate measurement (replacing one at the same step) and, for a running
    trial, extend the lease and note the sign of life (``heartbeat_at``)."""

    def fn(conn: Connection) -> tuple[int, MeasurementPublic]:
        now = utcnow()
        trial, _ = unfinished_trial(conn, tenant_id, study_id, number, now)
        parsed = store.parsed_study(conn, study_id)
        bad = [k for k, v in req.values.items() if not math.isfinite(v)]
        if bad:
            raise ApiError(
                ProblemCode.NON_FINITE_VALUE, f"reported value(s) {bad} are NaN or infinite"
            )
        _put_measurement(conn, trial.id, req.step, req.values, req.checkpoint, now)
        if trial.state == "running":
            lease = extended_lease(trial, parsed, HeartbeatRequest(), now)
            conn.execute(
                update(trials_t)
                .where(trials_t.c.id == trial.id)
                .values(lease_expires_at=lease, heartbeat_at=now)
            )
        return 201, MeasurementPublic(
            step=req.step, values=req.values, checkpoint=req.checkpoint, created_at=now
        )

    return store.write(tenant_id, idem, fn)


# --- enqueue and reads --------------------------------------------------------------------


def enqueue(
    store: Store, tenant_id: int, study_id: int, req: TrialCreate, idem: IdemKey | None
) -> Answer:
    """Add a user-chosen point; served before engine points. With values, it is completed."""

    def fn(conn: Connection) -> tuple[int, TrialPublic]:
        study = find_study(conn, tenant_id, study_id, for_update=True)
        parsed = store.parsed_study(conn, study_id)
        if parsed.engine.schedules_units:
            raise ApiError(
                ProblemCode.ENGINE_SCHEDULES_UNITS,
                f"engine {parsed.engine.name!r} schedules its own training units; a trial cannot "
                "be added by hand",
            )
        try:
            params = parsed.space.validate(req.params)
        except SpaceError as exc:
            raise ApiError(ProblemCode.INVALID_PARAMS, str(exc)) from exc
        now = utcnow()
        number = study.next_trial_number
        x = parsed.space.encode(params)
        t = new_trial(parsed, study_id, number, x, {"source": "user"}, now, params)
        t["metadata"] = req.metadata
        if req.values is not None:
            vals, cons, feasible = validate_results(parsed, req.values, req.constraints)
            t.update(
                state="completed",
                values=vals,
                constraints=cons or None,
                feasible=feasible,
                completed_at=now,
                completed_seq=study.revision + 1,  # the revision set below, under the row lock
            )
        conn.execute(insert(trials_t).values(**t))
        conn.execute(
            update(studies_t)
            .where(studies_t.c.id == study_id)
            .values(next_trial_number=number + 1, revision=study.revision + 1, updated_at=now)
        )
        return 201, trial_public(t)

    return store.write(tenant_id, idem, fn)


@dataclass(frozen=True)
class TrialsOrder:
    """Which page of the trial list: its order (``sort``), where it starts and its size."""

    sort: str = "number"
    descending: bool = False
    cursor: int | None = None
    offset: int = 0
    limit: int = 100


def list_trials(
    store: Store,
    tenant_id: int,
    study_id: int,
    states: Sequence[str] | None,
    page: TrialsOrder,
    trial_filter: str | None = None,
) -> TrialsPage:
    """A page of the trials that pass ``trial_filter`` (``service.trial_fields``). In number
    order the cursor is the last number served (a page stays right while trials are added); in
    any other order it is the offset of the next page."""

    def fn(conn: Connection) -> TrialsPage:
        find_study(conn, tenant_id, study_id)
        parsed = store.parsed_study(conn, study_id)
        key = trial_fields.sort_key(parsed, page.sort)
        query = select(trials_t).where(
            trials_t.c.study_id == study_id, *trial_fields.filter_clauses(parsed, trial_filter)
        )
        if states:
            query = query.where(trials_t.c.state.in_(states))
        by_number = page.sort == "number"
        offset = page.offset
        if by_number and page.cursor is not None:
            after = (
                trials_t.c.number < page.cursor
                if page.descending
                else trials_t.c.number > page.cursor
            )
            query = query.where(after)
        elif page.cursor is not None:
            offset += page.cursor
        ordered = key.desc() if page.descending else key.asc()
        rows = conn.execute(
            query.order_by(ordered.nulls_last(), trials_t.c.number)
            .offset(offset)
            .limit(page.limit + 1)
        ).all()
        data = [trial_public(r) for r in rows[: page.limit]]
        next_cursor = None
        if len(rows) > page.limit:
            next_cursor = str(data[-1].number if by_number else offset + page.limit)
        return TrialsPage(data=data, next_cursor=next_cursor)

    return store.db.read(fn)


def _trial(conn: Connection, tenant_id: int, study_id: int, number: int) -> Row:
    """Raises: ApiError 404 ``not_found`` for the study, ``trial_not_found`` for the trial."""
    find_study(conn, tenant_id, study_id)
    row = conn.execute(
        select(trials_t).where(trials_t.c.study_id == study_id, trials_t.c.number == number)
    ).first()
    if row is None:
        raise trial_not_found(study_id, number)
    return row


def get_trial(store: Store, tenant_id: int, study_id: int, number: int) -> TrialPublic:
    return store.db.read(lambda conn: trial_public(_trial(conn, tenant_id, study_id, number)))


def list_measurements(
    store: Store, tenant_id: int, study_id: int, number: int
) -> list[MeasurementPublic]:
    def fn(conn: Connection) -> list[MeasurementPublic]:
        trial = _trial(conn, tenant_id, study_id, number)
        rows = conn.execute(
            select(measurements_t)
            .where(measurements_t.c.trial_id == trial.id)
            .order_by(measurements_t.c.step)
        )
        return [measurement_public(r) for r in rows]

    return store.db.read(fn)
