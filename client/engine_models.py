"""The wire models of a study's engine panel (``GET /v1/studies/{id}/engine``): what its
optimizer did ask after ask, from the engine's state and the details it stored on each trial;
``client.models`` re-exports them."""

from __future__ import annotations

from pydantic import BaseModel

#: A fact's value: a number, a word, a flag or nothing yet.
FactValue = float | int | str | bool | None


class EngineSeries(BaseModel):
    """One quantity of the engine by trial number: ``[trial number, value]`` for the trials
    that recorded it (words, such as LCBO's phase, are categories)."""

    name: str
    label: str
    points: list[tuple[int, float | str]]


class EngineChart(BaseModel):
    """Series drawn on one chart, sharing its y axis."""

    key: str
    title: str
    y_label: str
    #: The values span decades (a trust-region length, a penalty, a residual): draw on a log
    #: axis.
    log_y: bool = False
    series: list[EngineSeries]


class EngineFact(BaseModel):
    """One entry of the engine's current state (or a summary of its series)."""

    name: str
    value: FactValue


class EngineParticles(BaseModel):
    """``mwgd``'s particles after its last ask, in the unit cube of the search space: one row
    per particle, one column per free parameter (``axes``)."""

    axes: list[str]
    points: list[list[float]]


class StudyEngine(BaseModel):
    """A study's engine panel: its quantities over trial numbers, each with at most the asked
    number of points when ``downsampled`` (per stretch of trials, the lowest and highest
    value; for words, where they change), and its current state."""

    engine: str
    #: What the panel shows for this engine, in one sentence.
    description: str
    #: Trials that carry details from an engine ask (the others were enqueued by a user).
    proposed: int
    downsampled: bool
    charts: list[EngineChart]
    facts: list[EngineFact]
    particles: EngineParticles | None = None
