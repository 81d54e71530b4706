"""A study's Pareto front for charts: its completed trials in objective space (every
non-dominated one; the dominated and infeasible ones downsampled on the server, so that a
chart of a 50,000-trial study reads a few thousand points) and the hypervolume of the feasible
front as trials arrive (``engines.metrics``)."""

from __future__ import annotations

import numpy as np
from sqlalchemy.engine import Connection

from client.models import ParetoKind, ParetoPoint, StudyPareto
from engines.metrics import front_lifetimes, hypervolume
from service.pareto_emd import emd_steps
from service.problem import ParsedStudy
from service.progress import evenly, objective_rows, trial_params
from service.store import Store, find_study
from service.trial_fields import filter_clauses

#: Steps of the hypervolume curve at most: each step is one hypervolume computation.
HYPERVOLUME_STEPS = 100
#: From four objectives on, an exact hypervolume of a front of ``p`` points costs about
#: ``p ** (m - 1)`` steps of Python (about 1 s for this many): the curve gets fewer steps
#: when its fronts are long, down to the last one alone, and none past that (p > 46 for four).
HYPERVOLUME_WORK = 100_000
#: Three objectives: ``p`` vectorized sweeps of up to ``p`` points (``engines.metrics``), about
#: 1 s for fronts of this many ``p ** 2`` in all (none past p = 3,162).
HYPERVOLUME_WORK_3 = 10_000_000
KINDS: tuple[ParetoKind, ...] = ("non_dominated", "dominated", "infeasible")


def study_pareto(
    store: Store, tenant_id: int, study_id: int, max_points: int, trial_filter: str | None = None
) -> StudyPareto:
    """The front of the completed trials that pass ``trial_filter`` (``service.trial_fields``)."""

    def fn(conn: Connection) -> StudyPareto:
        find_study(conn, tenant_id, study_id)
        parsed = store.parsed_study(conn, study_id)
        names = list(parsed.objective_names)
        where = filter_clauses(parsed, trial_filter)
        rows = objective_rows(conn, study_id, names, ("completed",), where)
        values = np.array([r[3:] for r in rows], dtype=np.float64).reshape(len(rows), len(names))
        has = ~np.isnan(values).any(axis=1)
        numbers = np.array([r.number for r in rows], dtype=np.int64)[has]
        values = values[has]
        feasible = np.array([r.feasible is True for r in rows], dtype=bool)[has]
        # Minimization orientation, the engines': lower is better in every column.
        Y = values * parsed.signs
        feasible_rows = np.flatnonzero(feasible)
        joined, left = front_lifetimes(Y[feasible_rows])
        front = feasible_rows[joined[left == len(feasible_rows)]]
        kinds = np.where(feasible, "dominated", "infeasible").astype(object)
        kinds[front] = "non_dominated"
        others = np.flatnonzero(kinds != "non_dominated")
        if len(others) > max_points:
            others = others[evenly(len(others), max_points)]
        keep = np.union1d(front, others).astype(np.int64)
        params = trial_params(conn, study_id, numbers[keep].tolist())
        return StudyPareto(
            objectives=names,
            goals={o.name: o.goal for o in parsed.config.objectives},
            reference_point=_reference(parsed),
            counts={k: int(np.sum(kinds == k)) for k in KINDS},
            downsampled=len(keep) < len(numbers),
            points=[
                ParetoPoint(
                    number=int(numbers[i]),
                    kind=kinds[i],
                    values=dict(zip(names, values[i].tolist(), strict=True)),
                    params=params[int(numbers[i])],
                )
                for i in keep.tolist()
            ],
            hypervolume=_hypervolume_steps(
                parsed, Y[feasible_rows], numbers[feasible_rows], joined, left
            ),
            emd=emd_steps(conn, study_id, parsed, numbers[feasible_rows], joined, left),
        )

    return store.db.read(fn)


def _reference(parsed: ParsedStudy) -> dict[str, float] | None:
    if parsed.problem.reference_point is None:
        return None
    return {o.name: float(o.reference or 0.0) for o in parsed.config.objectives}


def _hypervolume_steps(
    parsed: ParsedStudy, Y: np.ndarray, numbers: np.ndarray, joined: np.ndarray, left: np.ndarray
) -> list[tuple[int, float]]:
    """``[trial number, hypervolume]`` after each feasible trial that changed the front
    (``Y``: the feasible trials in number order, minimized; ``joined``, ``left``: their
    ``front_lifetimes``), thinned to ``HYPERVOLUME_STEPS`` steps evenly spread over the
    changes, the last always kept."""
    ref = parsed.problem.reference_point
    if ref is None or not len(Y):
        return []
    m = Y.shape[1]
    count = min(len(joined), HYPERVOLUME_STEPS)
    while True:
        steps = joined[evenly(len(joined), count)] if count < len(joined) else joined
        fronts = [joined[(joined <= k) & (left > k)] for k in steps.tolist()]
        if m < 3 or _hypervolume_work(fronts, m) <= HYPERVOLUME_WORK:
            break
        if count == 1:
            return []  # even the last front alone would take seconds
        count = max(1, count // 2)
    return [
        (int(numbers[k]), hypervolume(Y[front], ref))
        for k, front in zip(steps.tolist(), fronts, strict=True)
    ]


def _hypervolume_work(fronts: list[np.ndarray], m: int) -> float:
    """The cost of the hypervolumes of ``fronts`` of ``m >= 3`` objectives, in units of
    ``HYPERVOLUME_WORK`` (about 1 s in all)."""
    if m == 3:
        return sum(len(f) ** 2 for f in fronts) * HYPERVOLUME_WORK / HYPERVOLUME_WORK_3
    return sum(len(f) ** (m - 1) for f in fronts)
