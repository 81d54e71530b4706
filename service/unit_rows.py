"""The units of a scheduler study (``pbt``, ``ipbt``) as the engine reads them, and a
per-process cache that reads only what changed since the last ask.

A unit is a trial with a ``unit`` document (``client.models.Unit``). Its score is the first
objective; the score of its starting weights is the first objective reported at its
``from_step``; its checkpoint is the one of its measurement at the highest step that has one
(a tell with ``checkpoint`` stores it at ``to_step``).

Every ask of a scheduler study hands the engine all its units. Read whole, that parses every
unit's JSON documents at every ask: an ask's cost grows with the job (2.2 s of the server's
9.8 s of CPU in a 280-unit tuning job on this project's 2-core machine), and a job's cost
with its square. ``UnitCache`` keeps the finished units (completed, failed,
infeasible), which never change again, and the largest ``completed_seq`` among them; an ask
reads the units finished since and those still pending (at most a generation's). Exact with
several processes for the reason ``service.history`` gives: seqs commit in increasing order.
"""

from __future__ import annotations

import bisect
import heapq
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.engine import Connection, Row

from engines.base import Unit
from service.db.models import Measurement, Trial
from service.problem import ParsedStudy

trials_t = Trial.__table__
measurements_t = Measurement.__table__

#: States of a trial handed out (or to be) and not finished.
PENDING_STATES = ("waiting", "running", "stale")
#: Finished units ``UnitCache`` keeps over all studies (about 2 KB each: some 100 MB);
#: beyond, the least recently asked studies' are dropped (a dropped study's next ask reads it
#: whole again, as does every ask of a study larger than this).
MAX_CACHED_UNITS = 50_000

_UNIT_COLUMNS = (
    trials_t.c.id,
    trials_t.c.number,
    trials_t.c.state,
    trials_t.c.x,
    trials_t.c.unit,
    trials_t.c.params,
    trials_t.c["values"],
    trials_t.c.started_at,
    func.coalesce(trials_t.c.completed_seq, 0).label("seq"),
)
_UNIT_TRIALS = (
    select(*_UNIT_COLUMNS)
    .where(trials_t.c.study_id == bindparam("study_id"), trials_t.c.unit.is_not(None))
    .order_by(trials_t.c.number)
)
_UNIT_TRIALS_SINCE = (
    select(*_UNIT_COLUMNS)
    .where(
        trials_t.c.study_id == bindparam("study_id"),
        trials_t.c.unit.is_not(None),
        or_(
            trials_t.c.completed_seq > bindparam("after"),
            trials_t.c.state.in_(PENDING_STATES),
        ),
    )
    .order_by(trials_t.c.number)
)
_MEASUREMENT_COLUMNS = (
    measurements_t.c.trial_id,
    measurements_t.c.step,
    measurements_t.c["values"],
    measurements_t.c.checkpoint,
)
_UNIT_MEASUREMENTS = (
    select(*_MEASUREMENT_COLUMNS)
    .join(trials_t, trials_t.c.id == measurements_t.c.trial_id)
    .where(trials_t.c.study_id == bindparam("study_id"), trials_t.c.unit.is_not(None))
    .order_by(measurements_t.c.step)
)
_MEASUREMENTS_OF = (
    select(*_MEASUREMENT_COLUMNS)
    .where(measurements_t.c.trial_id.in_(bindparam("trial_ids", expanding=True)))
    .order_by(measurements_t.c.step)
)


def unit_rows(conn: Connection, study_id: int) -> tuple[list[Row], dict[int, list[Row]]]:
    """Every unit trial of the study (by number) and its measurements (by step), by trial id."""
    trials = list(conn.execute(_UNIT_TRIALS, {"study_id": study_id}))
    return trials, _by_trial(conn.execute(_UNIT_MEASUREMENTS, {"study_id": study_id}))


def _by_trial(rows: Iterable[Row]) -> dict[int, list[Row]]:
    measurements: dict[int, list[Row]] = {}
    for m in rows:
        measurements.setdefault(m.trial_id, []).append(m)
    return measurements


def final_checkpoint(measurements: list[Row]) -> str | None:
    saved = [m.checkpoint for m in measurements if m.checkpoint is not None]
    return saved[-1] if saved else None


def unit_list(
    trials: list[Row], measurements: dict[int, list[Row]], parsed: ParsedStudy
) -> tuple[Unit, ...]:
    """The engine's units of the rows of ``unit_rows``."""
    name, sign = parsed.objective_names[0], float(parsed.signs[0])
    units = []
    for t in trials:
        ms = measurements.get(t.id, [])
        before = [m for m in ms if m.step == t.unit["from_step"] and name in m.values]
        state: Literal["pending", "completed", "failed"] = (
            "completed" if t.state == "completed" else "failed"
        )
        if t.state in PENDING_STATES:
            state = "pending"
        units.append(
            Unit(
                number=t.number,
                x=np.frombuffer(t.x, dtype=np.float64).copy(),
                spec=t.unit,
                state=state,
                y=sign * t.values[name] if state == "completed" else None,
                y_before=sign * before[0].values[name] if before else None,
                checkpoint=final_checkpoint(ms),
            )
        )
    return tuple(units)


@dataclass
class _Entry:
    parsed: ParsedStudy
    #: Finished units by trial number, and their numbers in order.
    finished: dict[int, Unit] = field(default_factory=dict)
    numbers: list[int] = field(default_factory=list)
    watermark: int = -1  # -1: nothing read yet
    lock: threading.Lock = field(default_factory=threading.Lock)


class UnitCache:
    """Finished units per study, in one process, for one database; thread-safe. An entry is
    rebuilt when the study's ``ParsedStudy`` object changes (compared by identity)."""

    def __init__(self, max_units: int = MAX_CACHED_UNITS) -> None:
        self.max_units = max_units
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._guard = threading.Lock()

    def __contains__(self, study_id: int) -> bool:
        return study_id in self._entries

    def load(self, conn: Connection, study_id: int, parsed: ParsedStudy) -> tuple[Unit, ...]:
        """Every unit of the study as of ``conn``'s snapshot, in trial-number order."""
        with self._guard:
            entry = self._entries.get(study_id)
            if entry is None or entry.parsed is not parsed:
                entry = self._entries[study_id] = _Entry(parsed)
            self._entries.move_to_end(study_id)
        with entry.lock:
            if entry.watermark < 0:
                trials, measurements = unit_rows(conn, study_id)
            else:
                params = {"study_id": study_id, "after": entry.watermark}
                trials = list(conn.execute(_UNIT_TRIALS_SINCE, params))
                ids = [t.id for t in trials]
                measurements = _by_trial(conn.execute(_MEASUREMENTS_OF, {"trial_ids": ids}))
            units = unit_list(trials, measurements, parsed)
            for t, u in zip(trials, units, strict=True):
                if u.state != "pending" and u.number not in entry.finished:
                    entry.finished[u.number] = u
                    bisect.insort(entry.numbers, u.number)
                    entry.watermark = max(entry.watermark, t.seq)
            entry.watermark = max(entry.watermark, 0)
            # Another ask's newer snapshot may have finished a unit this one sees pending.
            pending = [u for u in units if u.state == "pending" and u.number not in entry.finished]
            known = (entry.finished[n] for n in entry.numbers)
            answer = tuple(heapq.merge(known, pending, key=lambda u: u.number))
        self._evict()
        return answer

    def forget(self, study_id: int) -> None:
        """Drop the study's units (the study was deleted)."""
        with self._guard:
            self._entries.pop(study_id, None)

    def _evict(self) -> None:
        with self._guard:
            held = sum(len(e.numbers) for e in self._entries.values())
            while held > self.max_units and self._entries:
                _, entry = self._entries.popitem(last=False)
                held -= len(entry.numbers)
