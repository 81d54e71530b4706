"""A study's trials in parameter and objective space, for the charts that plot parameters
(parallel coordinates, slice, contour) and for parameter importance: at most a few thousand
trials of any study, chosen on the server, so that a 50,000-trial study never sends them all.

Which trials are kept when there are too many is our own choice: every so many in number order
(the whole run, evenly), and each objective's best tenth of the budget, so that the region the
optimizer found stays drawn however long the run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sqlalchemy.engine import Connection

from client.models import StudyPoints, TrialPoint
from service.problem import ParsedStudy
from service.progress import evenly, objective_rows, trial_params
from service.store import Store, find_study
from service.trial_fields import filter_clauses

#: The share of ``max_points`` that goes to each objective's best trials when downsampling.
BEST_SHARE = 0.1


def study_points(
    store: Store,
    tenant_id: int,
    study_id: int,
    states: Sequence[str],
    max_points: int,
    trial_filter: str | None = None,
) -> StudyPoints:
    def fn(conn: Connection) -> StudyPoints:
        find_study(conn, tenant_id, study_id)
        parsed = store.parsed_study(conn, study_id)
        names = list(parsed.objective_names)
        where = filter_clauses(parsed, trial_filter)
        rows = objective_rows(conn, study_id, names, states, where)
        Y = np.array([r[3:] for r in rows], dtype=np.float64).reshape(len(rows), len(names))
        keep = _kept(parsed, Y, max_points)
        params = trial_params(conn, study_id, [rows[i].number for i in keep.tolist()])
        has = np.logical_not(np.isnan(Y).any(axis=1))
        return StudyPoints(
            objectives=names,
            parameters=[p.name for p in parsed.config.parameters],
            matched=len(rows),
            downsampled=len(keep) < len(rows),
            points=[
                TrialPoint(
                    number=rows[i].number,
                    state=rows[i].state,
                    params=params[rows[i].number],
                    values=dict(zip(names, Y[i].tolist(), strict=True)) if has[i] else None,
                )
                for i in keep.tolist()
            ],
        )

    return store.db.read(fn)


def _kept(parsed: ParsedStudy, Y: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of the rows to send: all of them, or evenly spread ones and each objective's
    best (rows without a value never count as best)."""
    n = len(Y)
    if n <= max_points:
        return np.arange(n)
    best_count = int(max_points * BEST_SHARE) // max(1, Y.shape[1])
    minimized = np.where(np.isnan(Y), np.inf, Y * parsed.signs)
    best = np.argsort(minimized, axis=0, kind="stable")[:best_count].ravel()
    best = np.unique(best)
    # At most max_points: the spread fills what the best leave.
    return np.union1d(evenly(n, max_points - len(best)), best).astype(np.int64)
