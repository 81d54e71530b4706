"""Training units of scheduler studies (``pbt``, ``ipbt``): lineage, the schedule of the best
member, and which checkpoints may be deleted. What a unit is, and the units the engine reads:
``service.unit_rows``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection, Row

from client.models import CheckpointRef, CheckpointsPublic, Lineage, Segment
from engines.base import Unit, best_unit
from service.errors import ApiError, ProblemCode
from service.problem import ParsedStudy
from service.store import Store, find_study, trial_not_found
from service.unit_rows import final_checkpoint, unit_list, unit_rows
from service.wire import from_columns


def _segments(trials: list[Row], measurements: dict[int, list[Row]]) -> dict[int, Segment]:
    return {
        t.number: from_columns(
            Segment,
            t.unit,
            trial=t.number,
            params=t.params,
            values=t.values,
            checkpoint=final_checkpoint(measurements.get(t.id, [])),
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
    (``unit_rows``).

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
    return (study, parsed, *unit_rows(conn, study_id))


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
