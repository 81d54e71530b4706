"""A scheduler study's population for charts (``pbt``, ``ipbt``): its lineage forest (which
unit's checkpoint each unit loaded), every unit's hyperparameters, the best unit and the
checkpoints, pinned or releasable (``service.units``). Bounded for large studies: the most
recent ``max_units`` units and ``max_checkpoints`` checkpoints of each kind."""

from __future__ import annotations

from sqlalchemy.engine import Connection, Row

from client.models import CheckpointRef, PopulationCheckpoint, PopulationUnit, StudyPopulation
from engines.base import best_unit
from service.store import Store
from service.unit_rows import unit_list
from service.units import checkpoint_split, scheduler_rows


def study_population(
    store: Store, tenant_id: int, study_id: int, max_units: int, max_checkpoints: int
) -> StudyPopulation:
    """Raises ``ApiError`` as ``units.scheduler_rows`` does (404, 409)."""

    def fn(conn: Connection) -> StudyPopulation:
        study, parsed, trials, measurements = scheduler_rows(store, conn, tenant_id, study_id)
        units = unit_list(trials, measurements, parsed)
        split = checkpoint_split(study, units, trials, measurements)
        best = best_unit(units)
        objective = parsed.objective_names[0]
        members = {t.number: int(t.unit["member"]) for t in trials}
        shown = trials[-max_units:]
        return StudyPopulation(
            objective=objective,
            goal=parsed.config.objectives[0].goal,
            members=sorted(set(members.values())),
            total_units=len(trials),
            truncated=len(shown) < len(trials),
            units=[_unit(t, objective, members) for t in shown],
            best=None if best is None else best.number,
            pinned_total=len(split.pinned),
            releasable_total=len(split.releasable),
            checkpoints=sorted(
                _newest(split.pinned, True, max_checkpoints)
                + _newest(split.releasable, False, max_checkpoints),
                key=lambda c: c.trial,
            ),
        )

    return store.db.read(fn)


def _unit(t: Row, objective: str, members: dict[int, int]) -> PopulationUnit:
    spec = t.unit
    parent = spec["start"].get("trial")
    value = (t.values or {}).get(objective) if t.state == "completed" else None
    return PopulationUnit(
        trial=t.number,
        member=spec["member"],
        generation=spec["generation"],
        iteration=spec.get("iteration", 0),
        from_step=spec["from_step"],
        to_step=spec["to_step"],
        reason=spec["reason"],
        state=t.state,
        parent=parent,
        parent_member=members.get(parent) if parent is not None else None,
        started_at=t.started_at,
        params=t.params,
        value=value,
    )


def _newest(refs: list[CheckpointRef], pinned: bool, k: int) -> list[PopulationCheckpoint]:
    """The last ``k`` of ``refs`` (in trial-number order, so the newest) as table rows."""
    return [
        PopulationCheckpoint(trial=r.trial, checkpoint=r.checkpoint, pinned=pinned)
        for r in refs[len(refs) - k :]
    ]
