"""A study's history for charts: its finished trials' values and the best-so-far curve of
each objective, downsampled on the server so that a chart of a 50,000-trial study reads a few
thousand points, never every trial."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import Row, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from client.models import FINISHED_STATES, HistoryPoint, StudyHistory
from service.problem import ParsedStudy
from service.store import Store, find_study, trials_t
from service.trial_fields import filter_clauses

#: Trial numbers per ``IN (...)`` list when reading the drawn trials' parameters.
_NUMBERS_PER_QUERY = 500

K = TypeVar("K")

#: The trials a history draws: the finished ones, and the stale ones (lease expired, waiting
#: to be served again), marked so that a chart shows where workers were lost.
CHARTED_STATES = (*FINISHED_STATES, "stale")


def study_history(
    store: Store, tenant_id: int, study_id: int, max_points: int, trial_filter: str | None = None
) -> bytes:
    """The history of the finished and stale trials that pass ``trial_filter``
    (``service.trial_fields``) as JSON (a ``StudyHistory``), computed once per study revision
    and kept serialized in ``Store.charts``: every change to a study's trials bumps its
    revision, so a page refreshing an unchanged study reads only the study row, and an entry
    takes the size of the answer (at most about 1 MB at ``max_points=10000``)."""

    def fn(conn: Connection) -> bytes:
        revision = find_study(conn, tenant_id, study_id, columns=("id", "revision")).revision
        return store.charts.get(
            ("history", study_id, revision, max_points, trial_filter),
            lambda: (
                _history(
                    conn, store.parsed_study(conn, study_id), study_id, max_points, trial_filter
                )
                .model_dump_json()
                .encode()
            ),
        )

    return store.db.read(fn)


def _history(
    conn: Connection, parsed: ParsedStudy, study_id: int, max_points: int, trial_filter: str | None
) -> StudyHistory:
    names = list(parsed.objective_names)
    where = filter_clauses(parsed, trial_filter)
    rows = objective_rows(conn, study_id, names, CHARTED_STATES, where, with_completed_at=True)
    m = len(names)
    Y = np.array([r[3 : 3 + m] for r in rows], dtype=np.float64).reshape(len(rows), m)
    numbers = [r.number for r in rows]
    times = [r.completed_at for r in rows]
    has = np.logical_not(np.isnan(Y).any(axis=1))
    completed = np.array([r.state == "completed" for r in rows], dtype=bool)
    keep = np.arange(len(rows)) if len(rows) <= max_points else _extremes(Y, completed, max_points)
    feasible = np.flatnonzero(completed & np.array([r.feasible is True for r in rows], dtype=bool))
    # Completion order of the feasible trials with a completion time (by number on a tie).
    timed = [int(i) for i in feasible if times[i] is not None]
    timed.sort(key=lambda i: (times[i], numbers[i]))
    by_number = [numbers[i] for i in feasible]
    best: dict[str, list[tuple[int, float]]] = {}
    best_by_time: dict[str, list[tuple[datetime, float]]] = {}
    for j, (name, sign) in enumerate(zip(names, parsed.signs, strict=True)):
        best[name] = _best_so_far(by_number, Y[feasible, j] * sign, sign, max_points)
        best_by_time[name] = _best_so_far(
            [times[i] for i in timed], Y[timed, j] * sign, sign, max_points
        )
    return StudyHistory(
        objectives=names,
        finished=sum(r.state != "stale" for r in rows),
        downsampled=len(keep) < len(rows),
        points=[
            HistoryPoint(
                number=numbers[i],
                state=rows[i].state,
                values=dict(zip(names, Y[i].tolist(), strict=True)) if has[i] else None,
                completed_at=times[i],
            )
            for i in keep.tolist()
        ],
        best=best,
        best_by_time=best_by_time,
    )


def objective_rows(
    conn: Connection,
    study_id: int,
    names: list[str],
    states: Collection[str],
    where: Sequence[ColumnElement[bool]] = (),
    with_completed_at: bool = False,
) -> Sequence[Row[Any]]:
    """``number, state, feasible`` and each objective in ``names`` (``None`` where missing) of
    the study's trials in ``states`` that meet ``where``, by number, then ``completed_at`` if
    asked. The objectives are read as numbers in SQL: decoding every trial's JSON would cost
    most of the time of a large study's read."""
    objectives = [trials_t.c["values"][n].as_float() for n in names]
    times = [trials_t.c.completed_at] if with_completed_at else []
    return conn.execute(
        select(trials_t.c.number, trials_t.c.state, trials_t.c.feasible, *objectives, *times)
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
    keys: Sequence[K], minimized: np.ndarray, sign: float, max_points: int
) -> list[tuple[K, float]]:
    """The ``[key, value]`` steps where the running best improves, the trials in the order of
    ``keys`` (their numbers or completion times); ``minimized`` is the objective times ``sign``
    (so lower is better). A curve of more steps than ``max_points`` keeps every so many, and
    always its last."""
    if not len(minimized):
        return []
    running = np.minimum.accumulate(minimized)
    improves = np.flatnonzero(np.r_[True, running[1:] < running[:-1]])
    if len(improves) > max_points:
        improves = np.r_[improves[:: -(-len(improves) // max_points)][:-1], improves[-1]]
        improves = np.unique(improves)
    return [(keys[i], float(running[i] * sign)) for i in improves.tolist()]
