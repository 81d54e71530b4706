"""The wire models of a study's history for charts (``GET /v1/studies/{id}/history``);
``client.models`` re-exports them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from client._wire import ParamValue, TrialState


class HistoryPoint(BaseModel):
    number: int
    state: TrialState
    values: dict[str, float] | None = None
    #: When the trial finished (``None`` for a trial imported without that time).
    completed_at: datetime | None = None


class StudyHistory(BaseModel):
    """A study's finished and stale trials in number order, for a chart: all of them, or at
    most the asked number when ``downsampled`` (per stretch of trials, the lowest and highest
    value of each objective and the first trial that did not complete)."""

    objectives: list[str]
    #: Finished trials (completed, failed, infeasible) in the study.
    finished: int
    downsampled: bool
    points: list[HistoryPoint]
    #: Per objective, the best-so-far curve as ``[trial number, value]`` where it improves,
    #: over the completed feasible trials.
    best: dict[str, list[tuple[int, float]]]
    #: The same curve in completion order, as ``[completed_at, value]`` where it improves:
    #: the best known at each time (for a time axis; trials without a time are left out).
    best_by_time: dict[str, list[tuple[datetime, float]]] = Field(default_factory=dict)


class TrialPoint(BaseModel):
    number: int
    state: TrialState
    params: dict[str, ParamValue]
    values: dict[str, float] | None = None


class StudyPoints(BaseModel):
    """A study's trials in parameter and objective space, for parallel coordinates, slice and
    contour charts: every trial that passed the filter, or at most the asked number when
    ``downsampled`` (spread evenly over trial numbers, plus each objective's best trials)."""

    objectives: list[str]
    parameters: list[str]
    #: Trials in the asked states that passed the filter, before downsampling.
    matched: int
    downsampled: bool
    points: list[TrialPoint]
