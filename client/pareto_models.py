"""The wire models of a study's Pareto front for charts (``GET /v1/studies/{id}/pareto``);
``client.models`` re-exports them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from client._wire import ParamValue

#: ``non_dominated``: feasible and on the Pareto front of the feasible trials; ``dominated``:
#: feasible, off the front; ``infeasible``: completed with a constraint violated.
ParetoKind = Literal["non_dominated", "dominated", "infeasible"]


class ParetoPoint(BaseModel):
    number: int
    kind: ParetoKind
    values: dict[str, float]
    params: dict[str, ParamValue]


class StudyPareto(BaseModel):
    """A study's completed trials in objective space, for a chart: every non-dominated one, and
    at most the asked number of the others (``downsampled``: evenly spread over trial numbers),
    with the hypervolume of the front after each trial where it grew."""

    objectives: list[str]
    goals: dict[str, Literal["minimize", "maximize"]]
    #: The objectives' ``reference`` values, when every objective has one (else ``None``: no
    #: hypervolume).
    reference_point: dict[str, float] | None = None
    #: Completed trials by kind, before downsampling.
    counts: dict[ParetoKind, int]
    downsampled: bool
    points: list[ParetoPoint]
    #: ``[trial number, hypervolume]`` of the feasible front after that trial, where the
    #: front changed (at most 100 steps, always the last); empty without a reference point,
    #: and from three objectives on when the front is too long to compute at once (three
    #: objectives: fewer steps from a few hundred points on the front, none past about 3,000;
    #: four: fewer from about 10, none past about 46).
    hypervolume: list[tuple[int, float]]
    #: ``[trial number, EMD]`` of the feasible front after that trial, at the same kind of
    #: steps: the leave-one-out Expected Minimum Distance of the Pareto set in the unit cube
    #: (``BestPublic.pareto_set_loo_emd``), where the front has two trials or more; lower is
    #: denser. Empty for one objective.
    emd: list[tuple[int, float]] = []
