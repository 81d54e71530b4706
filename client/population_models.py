"""The wire models of a scheduler study's population for charts (``GET
/v1/studies/{id}/population``: the lineage forest of its units, their hyperparameters and its
checkpoints); ``client.models`` re-exports them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from client._wire import ParamValue, TrialState


class PopulationUnit(BaseModel):
    """One unit of a scheduler study (``pbt``, ``ipbt``) in its population's lineage forest:
    member ``member`` trained from ``from_step`` to ``to_step`` with ``params``, starting from
    the checkpoint of unit ``parent`` (of member ``parent_member``) or fresh (``None``)."""

    trial: int
    member: int
    generation: int
    iteration: int = 0
    from_step: int
    to_step: int
    #: ``initial``, ``continue``, ``exploit`` (another member's checkpoint) or ``restart``.
    reason: str
    state: TrialState
    parent: int | None = None
    parent_member: int | None = None
    #: When the unit was handed to a worker (``None`` while it waits).
    started_at: datetime | None = None
    params: dict[str, ParamValue]
    #: The study's objective at the end of the unit, once completed.
    value: float | None = None


class PopulationCheckpoint(BaseModel):
    """A checkpoint a unit saved, ``pinned`` (a pending or a future unit may load it, or it is
    the best so far) or releasable (no unit ever will: it may be deleted), as in ``GET
    .../checkpoints``."""

    trial: int
    checkpoint: str
    pinned: bool


class StudyPopulation(BaseModel):
    """A scheduler study's population for charts: its most recent units (``truncated`` when
    older ones are left out) with where each one's weights came from, the best unit, and its
    most recent checkpoints of each kind."""

    #: The objective the scheduler ranks its units by, and its goal.
    objective: str
    goal: Literal["minimize", "maximize"]
    #: Every member index that has had a unit.
    members: list[int]
    #: Units in the study; ``units`` holds the ``max_units`` ones with the highest trial
    #: numbers, in trial-number order.
    total_units: int
    truncated: bool
    units: list[PopulationUnit]
    #: The best completed unit (the end of ``GET .../best/schedule``), ``None`` before any.
    best: int | None = None
    #: Checkpoints in the study by kind, and at most the asked number of each kind (those of
    #: the highest trial numbers), in trial-number order.
    pinned_total: int
    releasable_total: int
    checkpoints: list[PopulationCheckpoint]
