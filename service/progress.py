"""A study's history for charts: its finished trials' values and the best-so-far curve of
each objective, downsampled on the server so that a chart of a 50,000-trial study reads a few
thousand points, never every trial."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
from sqlalchemy import Row, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from client.models import FINISHED_STATES, HistoryPoint, StudyHistory
from service.store import Store, find_study, trials_t
from service.trial_fields import filter_clauses

#: Trial numbers per ``IN (...)`` list when reading the drawn trials' parameters.
_NUMBERS_PER_QUERY = 500


def study_history(
    store: Store, tenant_id: int, study_id: int, max_points: int, trial_filter: str | None = None
) -> StudyHistory:
    """The history of the finished trials that pass ``trial_filter`` (``service.trial_fields``)."""

    def fn(conn: Connection) -> StudyHistory:
        find_study(conn, tenant_id, study_id)
        parsed = store.parsed_study(conn, study_id)
        names = list(parsed.objective_names)
        where = filter_clauses(parsed, trial_filter)
        rows = objective_rows(conn, study_id, names, FINISHED_STATES, where)
        Y = np.array([r[3:] for r in rows], dtype=np.float64).reshape(len(rows), len(names))
        numbers = np.array([r.number for r in rows], dtype=np.int64)
        has = np.logical_not(np.isnan(Y).any(axis=1))
        completed = np.array([r.state == "completed" for r in rows], dtype=bool)
        keep = (
            np.arange(len(rows)) if len(rows) <= max_points else _extremes(Y, completed, max_points)
        )
        feasible = completed & np.array([r.feasible is True for r in rows], dtype=bool)
        best = {
            name: _best_so_far(numbers[feasible], Y[feasible, j] * sign, sign, max_points)
            for j, (name, sign) in enumerate(zip(names, parsed.signs, strict=True))
        }
        return StudyHistory(
            objectives=names,
            finished=len(rows),
            downsampled=len(keep) < len(rows),
            points=[
                HistoryPoint(
                    number=rows[i].number,
                    state=rows[i].state,
                    values=dict(zip(names, Y[i].tolist(), strict=True)) if has[i] else None,
                )
                for i in keep.tolist()
            ],
            best=best,
        )

    return store.db.read(fn)


def objective_rows(
    conn: Connection,
    study_id: int,
    names: list[str],
    states: Collection[str],
    where: Sequence[ColumnElement[bool]] = (),
) -> Sequence[Row[Any]]:
    """``number, state, feasible`` and each objective in ``names`` (``None`` where missing) of
    the study's trials in ``states`` that meet ``where``, by number. The objectives are read as
    numbers in SQL: decoding every trial's JSON would cost most of the time of a large study's
    read."""
    objectives = [trials_t.c["values"][n].as_float() for n in names]
    return conn.execute(
        select(trials_t.c.number, trials_t.c.state, trials_t.c.feasible, *objectives)
        .where(trials_t.c.study_id == study_id, trials_t.c.state.in_(states), *where)
        .order_by(trials_t.c.number)
    ).all()


def evenly(n: int, k: int) -> np.ndarray:
    """``k`` indices into ``n > k`` items, increasing and evenly spread: the last always, the
    first too when ``k > 1``."""
    return np.unique(np.linspace(n - 1, 0, k).round().astype(np.int64))


def trial_params(conn: Connection, study_id: int, numbers: list[int]) -> dict[int, dict[str, Any]]:
    """The parameters of the study's trials ``numbers``, by number: the charts read the JSON
    of the trials they draw, never of every trial."""
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


def _extremes(Y: np.ndarray, completed: np.ndarray, max_points: int) -> np.ndarray:
    """Indices to draw of ``len(Y) > max_points`` trials: the trials split into stretches of
    consecutive ones; of each, the lowest and highest of every objective among the completed,
    and the first trial that did not complete, so failures stay visible."""
    per_stretch = 2 * Y.shape[1] + 1
    stretches = np.array_split(np.arange(len(Y)), max(1, max_points // per_stretch))
    keep: set[int] = set()
    for stretch in stretches:
        done = stretch[completed[stretch] & ~np.isnan(Y[stretch]).any(axis=1)]
        if len(done):
            keep.update(done[np.argmin(Y[done], axis=0)].tolist())
            keep.update(done[np.argmax(Y[done], axis=0)].tolist())
        not_done = stretch[~completed[stretch]]
        if len(not_done):
            keep.add(int(not_done[0]))
    return np.array(sorted(keep), dtype=np.int64)


def _best_so_far(
    numbers: np.ndarray, minimized: np.ndarray, sign: float, max_points: int
) -> list[tuple[int, float]]:
    """The ``[number, value]`` steps where the running best improves; ``minimized`` is the
    objective times ``sign`` (so lower is better). A curve of more steps than ``max_points``
    keeps every so many, and always its last."""
    if not len(minimized):
        return []
    running = np.minimum.accumulate(minimized)
    improves = np.flatnonzero(np.r_[True, running[1:] < running[:-1]])
    if len(improves) > max_points:
        improves = np.r_[improves[:: -(-len(improves) // max_points)][:-1], improves[-1]]
        improves = np.unique(improves)
    return [(int(numbers[i]), float(running[i] * sign)) for i in improves]
