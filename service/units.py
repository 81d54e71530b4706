"""Training units of scheduler studies (``pbt``, ``ipbt``): what the engine reads, lineage,
the schedule of the best member, and which checkpoints may be deleted.

A unit is a trial with a ``unit`` document (``client.models.Unit``). Its score is the first
objective; the score of its starting weights is the first objective reported at its
``from_step``; its checkpoint is the one of its measurement at the highest step that has one
(a tell with ``checkpoint`` stores it at ``to_step``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection, Row

from client.models import CheckpointRef, CheckpointsPublic, Lineage, Segment
from engines.base import Unit, best_unit
from service.errors import ApiError, ProblemCode
from service.problem import ParsedStudy
from service.store import Store, find_study, measurements_t, trial_not_found, trials_t
from service.wire import from_columns

_UNIT_TRIALS = (
    select(
        trials_t.c.id,
        trials_t.c.number,
        trials_t.c.state,
        trials_t.c.x,
        trials_t.c.unit,
        trials_t.c.params,
        trials_t.c["values"],
        trials_t.c.started_at,
    )
    .where(trials_t.c.study_id == bindparam("study_id"), trials_t.c.unit.is_not(None))
    .order_by(trials_t.c.number)
)
_UNIT_MEASUREMENTS = (
    select(
        measurements_t.c.trial_id,
        measurements_t.c.step,
        measurements_t.c["values"],
        measurements_t.c.checkpoint,
    )
    .join(trials_t, trials_t.c.id == measurements_t.c.trial_id)
    .where(trials_t.c.study_id == bindparam("study_id"), trials_t.c.unit.is_not(None))
    .order_by(measurements_t.c.step)
)


def _unit_rows(conn: Connection, study_id: int) -> tuple[list[Row], dict[int, list[Row]]]:
    trials = list(conn.execute(_UNIT_TRIALS, {"study_id": study_id}))
    measurements: dict[int, list[Row]] = {}
    for m in conn.execute(_UNIT_MEASUREMENTS, {"study_id": study_id}):
        measurements.setdefault(m.trial_id, []).append(m)
    return trials, measurements


def _checkpoint(measurements: list[Row]) -> str | None:
    saved = [m.checkpoint for m in measurements if m.checkpoint is not None]
    return saved[-1] if saved else None


def load_units(conn: Connection, study_id: int, parsed: ParsedStudy) -> tuple[Unit, ...]:
    """Every unit of the study as the engine sees it, in trial-number order."""
    return unit_list(*_unit_rows(conn, study_id), parsed)


def unit_list(
    trials: list[Row], measurements: dict[int, list[Row]], parsed: ParsedStudy
) -> tuple[Unit, ...]:
    """The engine's units of the rows of ``scheduler_rows``."""
    name, sign = parsed.objective_names[0], float(parsed.signs[0])
    units = []
    for t in trials:
        ms = measurements.get(t.id, [])
        before = [m for m in ms if m.step == t.unit["from_step"] and name in m.values]
        state: Literal["pending", "completed", "failed"] = (
            "completed" if t.state == "completed" else "failed"
        )
        if t.state in ("waiting", "running", "stale"):
            state = "pending"
        units.append(
            Unit(
                number=t.number,
                x=np.frombuffer(t.x, dtype=np.float64).copy(),
                spec=t.unit,
                state=state,
                y=sign * t.values[name] if state == "completed" else None,
                y_before=sign * before[0].values[name] if before else None,
                checkpoint=_checkpoint(ms),
            )
        )
    return tuple(units)


def _segments(trials: list[Row], measurements: dict[int, list[Row]]) -> dict[int, Segment]:
    return {
        t.number: from_columns(
            Segment,
            t.unit,
            trial=t.number,
            params=t.params,
            values=t.values,
            checkpoint=_checkpoint(measurements.get(t.id, [])),
        )
        for t in trials
    }


def _chain(trials: list[Row], measurements: dict[int, list[Row]], number: int) -> Lineage:
    """Follow the ``start.trial`` of each unit back from ``number`` to a fresh start."""
    segments = _segments(trials, measurements)
    starts = {t.number: t.unit["start"].get("trial") for t in trials}
    chain: list[Segment] = []
    current: int | None = number
    while current is not None and current in segments and len(chain) <= len(segments):
        chain.append(segments[current])
        current = starts.get(current)
    return Lineage(trial=number, segments=chain[::-1])


def scheduler_rows(
    store: Store, conn: Connection, tenant_id: int, study_id: int
) -> tuple[Row, ParsedStudy, list[Row], dict[int, list[Row]]]:
    """The study row, parsed study, unit trials and measurements of a scheduler study
    (``_unit_rows``).

    Raises:
        ApiError: 404 for a missing study; 409 ``not_a_scheduler_study`` for another engine.
    """
    study = find_study(conn, tenant_id, study_id)
    parsed = store.parsed_study(conn, study_id)
    if not parsed.engine.schedules_units:
        raise ApiError(
            ProblemCode.NOT_A_SCHEDULER_STUDY,
            f"study {study_id} uses engine {parsed.engine.name!r}, which hands out no training "
            "units; lineage and checkpoints exist for the schedulers (pbt, ipbt)",
        )
    return (study, parsed, *_unit_rows(conn, study_id))


def lineage(store: Store, tenant_id: int, study_id: int, number: int) -> Lineage:
    """The units whose checkpoints led to trial ``number``, oldest first."""

    def fn(conn: Connection) -> Lineage:
        _, _, trials, measurements = scheduler_rows(store, conn, tenant_id, study_id)
        if number not in {t.number for t in trials}:
            raise trial_not_found(study_id, number)
        return _chain(trials, measurements, number)

    return store.db.read(fn)


def best_schedule(store: Store, tenant_id: int, study_id: int) -> Lineage:
    """The lineage of the best completed unit: the hyperparameter schedule of the best member.

    Raises:
        ApiError: 404 ``no_completed_unit`` before any unit is completed.
    """

    def fn(conn: Connection) -> Lineage:
        _, parsed, trials, measurements = scheduler_rows(store, conn, tenant_id, study_id)
        best = best_unit(unit_list(trials, measurements, parsed))
        if best is None:
            raise ApiError(
                ProblemCode.NO_COMPLETED_UNIT, f"study {study_id} has no completed unit yet"
            )
        return _chain(trials, measurements, best.number)

    return store.db.read(fn)


def checkpoints(store: Store, tenant_id: int, study_id: int) -> CheckpointsPublic:
    """Which checkpoints are still needed (``checkpoint_split``)."""

    def fn(conn: Connection) -> CheckpointsPublic:
        study, parsed, trials, measurements = scheduler_rows(store, conn, tenant_id, study_id)
        units = unit_list(trials, measurements, parsed)
        return checkpoint_split(study, units, trials, measurements)

    return store.db.read(fn)


def checkpoint_split(
    study: Row, units: tuple[Unit, ...], trials: list[Row], measurements: dict[int, list[Row]]
) -> CheckpointsPublic:
    """Pinned: the final checkpoints of the units the engine says a future unit may load
    (``pinned`` in its state), of those a pending unit starts from, of each member's last unit
    when it is completed (no next unit decided yet) and of the best unit, and every checkpoint
    of a unit still pending.
    Releasable: every other checkpoint; no unit will ever load it. ``units``: ``unit_list``
    of the rows of ``scheduler_rows``."""
    state: dict[str, Any] = study.engine_state
    pinned = {n for n in state.get("pinned", []) if isinstance(n, int)}
    pinned |= {
        int(u.spec["start"]["trial"])
        for u in units
        if u.state == "pending" and u.spec["start"]["kind"] == "checkpoint"
    }
    # A member's last unit, completed since the engine last ran: its next unit is not
    # decided yet, so its checkpoint may be continued or copied.
    last: dict[int, Unit] = {int(u.spec["member"]): u for u in units}
    pinned |= {u.number for u in last.values() if u.state == "completed"}
    best = best_unit(units)
    if best is not None:
        pinned.add(best.number)
    final = {u.number: u.checkpoint for u in units}
    pending = {u.number for u in units if u.state == "pending"}
    keep: list[CheckpointRef] = []
    release: list[CheckpointRef] = []
    for t in trials:
        for m in measurements.get(t.id, []):
            if m.checkpoint is None:
                continue
            ref = CheckpointRef(trial=t.number, checkpoint=m.checkpoint)
            needed = t.number in pending or (t.number in pinned and m.checkpoint == final[t.number])
            (keep if needed else release).append(ref)
    return CheckpointsPublic(pinned=keep, releasable=release)
