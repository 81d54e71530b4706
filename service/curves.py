"""The intermediate-value curves (the ``report`` measurements) of some of a study's trials, for
a chart: a bounded number of trials, each downsampled in SQL to a bounded number of steps, so
that a study of 50,000 trials with thousands of steps each answers from one small read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, case, exists, func, or_, select
from sqlalchemy.engine import Connection

from client.models import StudyCurves
from client.notes_models import CurvePoint, CurveSelection, TrialCurve
from service.errors import ApiError, ProblemCode
from service.problem import ParsedStudy
from service.store import Store, find_study, measurements_t, trials_t
from service.trial_fields import filter_clauses


@dataclass(frozen=True)
class CurvesQuery:
    selection: CurveSelection
    objective: str | None
    max_trials: int
    #: At least 2: the first and the last step of a trial are always kept.
    max_points: int
    #: The trial filter (``service.trial_fields``), JSON text; None for every trial.
    trial_filter: str | None = None


def study_curves(store: Store, tenant_id: int, study_id: int, q: CurvesQuery) -> StudyCurves:
    """The curves of the trials ``q.selection`` names (see ``CurveSelection``), at most
    ``q.max_trials`` of them, each with at most ``q.max_points`` measurements.

    Raises:
        ApiError: 404 ``not_found`` for the study; 422 ``unknown_objective`` when
            ``q.objective`` is not one of the study's.
    """

    def fn(conn: Connection) -> StudyCurves:
        find_study(conn, tenant_id, study_id)
        parsed = store.parsed_study(conn, study_id)
        objective = q.objective or parsed.objective_names[0]
        if objective not in parsed.objective_names:
            raise ApiError(
                ProblemCode.UNKNOWN_OBJECTIVE,
                f"{objective!r} is not an objective of study {study_id}; "
                f"choose one of {list(parsed.objective_names)}",
            )
        chosen = _selected(study_id, parsed, q.selection, objective)
        chosen = chosen.where(*filter_clauses(parsed, q.trial_filter))
        rows = conn.execute(chosen.limit(q.max_trials + 1)).all()
        kept = rows[: q.max_trials]
        points, counts = _points(conn, [r.id for r in kept], q.max_points)
        return StudyCurves(
            selection=q.selection,
            objective=objective,
            truncated=len(rows) > q.max_trials,
            trials=[
                TrialCurve(
                    number=r.number,
                    state=r.state,
                    values=r.values,
                    measurements=counts.get(r.id, 0),
                    points=points.get(r.id, []),
                )
                for r in kept
            ],
        )

    return store.db.read(fn)


def _selected(
    study_id: int, parsed: ParsedStudy, selection: CurveSelection, objective: str
) -> Select[Any]:
    """The study's trials of ``selection``, in the order they are drawn."""
    query = select(trials_t.c.id, trials_t.c.number, trials_t.c.state, trials_t.c["values"])
    query = query.where(trials_t.c.study_id == study_id)
    if selection == "running":
        return query.where(trials_t.c.state == "running").order_by(trials_t.c.number)
    reported = query.where(exists().where(measurements_t.c.trial_id == trials_t.c.id))
    if selection == "recent":
        return reported.order_by(trials_t.c.number.desc())
    value = trials_t.c["values"][objective].as_float()
    sign = parsed.signs[parsed.objective_names.index(objective)]
    return reported.where(trials_t.c.state == "completed", trials_t.c.feasible.is_(True)).order_by(
        value.asc() if sign > 0 else value.desc(), trials_t.c.number
    )


def _points(
    conn: Connection, trial_ids: list[int], max_points: int
) -> tuple[dict[int, list[CurvePoint]], dict[int, int]]:
    """Each trial's measurements by step, at most ``max_points`` of them, and how many it
    has. A trial with more keeps every ``stride``-th step from the first, and the last, with
    ``stride = ceil(n / (max_points - 1))``: at most ``max_points - 1`` strided steps and one
    last."""
    if not trial_ids:
        return {}, {}
    m = measurements_t
    numbered = (
        select(
            m.c.trial_id,
            m.c.step,
            m.c["values"],
            func.row_number().over(partition_by=m.c.trial_id, order_by=m.c.step).label("rn"),
            func.count().over(partition_by=m.c.trial_id).label("n"),
        )
        .where(m.c.trial_id.in_(trial_ids))
        .subquery()
    )
    stride = case(
        (numbered.c.n > max_points, (numbered.c.n + max_points - 2) // (max_points - 1)),
        else_=1,
    )
    rows = conn.execute(
        select(numbered.c.trial_id, numbered.c.step, numbered.c["values"], numbered.c.n)
        .where(or_((numbered.c.rn - 1) % stride == 0, numbered.c.rn == numbered.c.n))
        .order_by(numbered.c.trial_id, numbered.c.step)
    ).all()
    points: dict[int, list[CurvePoint]] = {}
    counts: dict[int, int] = {}
    for r in rows:
        points.setdefault(r.trial_id, []).append(CurvePoint(step=r.step, values=r.values))
        counts[r.trial_id] = r.n
    return points, counts
