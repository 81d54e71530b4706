"""The wire models of trial notes (``PUT /v1/studies/{id}/trials/{n}/note``) and of the
intermediate-value curves of a study's trials for charts (``GET /v1/studies/{id}/measurements``);
``client.models`` re-exports them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from client._wire import Note, TrialState, _Request


class TrialNote(_Request):
    """A trial's note, replacing the one before; an empty note removes it. A note may be
    written on a trial in any state (it annotates results; it does not change them)."""

    note: Note


#: Which trials ``GET .../measurements`` draws: ``recent`` (the highest-numbered trials that
#: reported), ``best`` (the completed feasible trials that reported, best first by the
#: objective) or ``running`` (running trials, lowest number first, reported or not).
CurveSelection = Literal["recent", "best", "running"]


class CurvePoint(BaseModel):
    step: int
    values: dict[str, float]


class TrialCurve(BaseModel):
    """One trial's measurements by step: all of them, or at most the asked number (evenly
    spaced steps, always the first and the last) when ``measurements`` is larger."""

    number: int
    state: TrialState
    #: The trial's told values, when it is completed.
    values: dict[str, float] | None = None
    #: How many measurements the trial reported, before downsampling.
    measurements: int
    points: list[CurvePoint]


class StudyCurves(BaseModel):
    """The intermediate-value curves of some of a study's trials, for a chart."""

    selection: CurveSelection
    #: The objective the ``best`` selection ranks by.
    objective: str
    #: Whether the selection has more trials than the ``max_trials`` answered.
    truncated: bool
    trials: list[TrialCurve]
