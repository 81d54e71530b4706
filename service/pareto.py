"""A study's Pareto front for charts: its completed trials in objective space (every
non-dominated one; the dominated and infeasible ones downsampled on the server, so that a
chart of a 50,000-trial study reads a few thousand points) and the hypervolume of the feasible
front as trials arrive (``engines.metrics``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.engine import Connection

from client.models import ParetoKind, ParetoPoint, StudyPareto
from engines.metrics import front_lifetimes, hypervolume
from service.problem import ParsedStudy
from service.store import Store, find_study, trials_t

#: Steps of the hypervolume curve at most: each step is one hypervolume computation, exact
#: and so costly for three objectives and a long front.
HYPERVOLUME_STEPS = 100
KINDS: tuple[ParetoKind, ...] = ("non_dominated", "dominated", "infeasible")
#: Trial numbers per ``IN (...)`` list when reading the kept trials' parameters.
_NUMBERS_PER_QUERY = 500


def study_pareto(store: Store, tenant_id: int, study_id: int, max_points: int) -> StudyPareto:
    def fn(conn: Connection) -> StudyPareto:
        find_study(conn, tenant_id, study_id)
        parsed = store.parsed_study(conn, study_id)
        names = list(parsed.objective_names)
        # Read as numbers in SQL, as the history does: only the kept trials' JSON is decoded.
        objectives = [trials_t.c["values"][n].as_float() for n in names]
        rows = conn.execute(
            select(trials_t.c.number, trials_t.c.feasible, *objectives)
            .where(trials_t.c.study_id == study_id, trials_t.c.state == "completed")
            .order_by(trials_t.c.number)
        ).all()
        values = np.array([r[2:] for r in rows], dtype=np.float64).reshape(len(rows), len(names))
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
            others = others[_evenly(len(others), max_points)]
        keep = np.union1d(front, others).astype(np.int64)
        params = _params(conn, study_id, numbers[keep].tolist())
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
            hypervolume=_hypervolume_steps(parsed, Y[feasible_rows], numbers[feasible_rows]),
        )

    return store.db.read(fn)


def _evenly(n: int, k: int) -> np.ndarray:
    """``k`` indices into ``n > k`` items, evenly spread, the first and the last included."""
    return np.unique(np.linspace(0, n - 1, k).round().astype(np.int64))


def _reference(parsed: ParsedStudy) -> dict[str, float] | None:
    if parsed.problem.reference_point is None:
        return None
    return {o.name: float(o.reference or 0.0) for o in parsed.config.objectives}


def _params(conn: Connection, study_id: int, numbers: list[int]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for start in range(0, len(numbers), _NUMBERS_PER_QUERY):
        chunk = numbers[start : start + _NUMBERS_PER_QUERY]
        rows = conn.execute(
            select(trials_t.c.number, trials_t.c.params).where(
                trials_t.c.study_id == study_id, trials_t.c.number.in_(chunk)
            )
        )
        out.update((number, params) for number, params in rows)
    return out


def _hypervolume_steps(
    parsed: ParsedStudy, Y: np.ndarray, numbers: np.ndarray
) -> list[tuple[int, float]]:
    """``[trial number, hypervolume]`` after each feasible trial that changed the front
    (``Y``: the feasible trials in number order, minimized), thinned to
    ``HYPERVOLUME_STEPS`` steps evenly spread over the changes, the last always kept."""
    ref = parsed.problem.reference_point
    if ref is None or not len(Y):
        return []
    joined, left = front_lifetimes(Y)
    steps = joined
    if len(steps) > HYPERVOLUME_STEPS:
        steps = steps[_evenly(len(steps), HYPERVOLUME_STEPS)]
    return [
        (int(numbers[k]), hypervolume(Y[joined[(joined <= k) & (left > k)]], ref))
        for k in steps.tolist()
    ]
