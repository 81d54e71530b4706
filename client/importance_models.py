"""The wire models of a study's parameter importance (``GET /v1/studies/{id}/importance``);
``client.models`` re-exports them."""

from __future__ import annotations

from pydantic import BaseModel


class ParameterImportance(BaseModel):
    name: str
    #: The parameter's share of the objective's variance explained by main effects, in [0, 1];
    #: the importances of a study sum to 1 (or are all 0 when the objective did not vary).
    importance: float


class StudyImportance(BaseModel):
    """How much each parameter matters to one objective, computed on the server from the
    completed trials that pass the filter (at most ``MAX_TRIALS`` of them, spread evenly over
    trial numbers) and cached per study revision.

    ``method`` is ``fanova``: functional ANOVA of a random forest (64 trees, fixed seed), the
    default of Optuna's ``get_param_importances``. Parameters are read in the engines' unit
    cube: log parameters in log space, a categorical's choices as ordinal cells of equal width.
    Fixed parameters are left out. With fewer than ``min_trials`` usable trials,
    ``importances`` is empty."""

    objective: str
    method: str
    #: The study revision the importances were computed at.
    revision: int
    #: Completed trials with a value of the objective that passed the filter.
    matched: int
    #: Of those, the trials the forest was fitted on.
    used: int
    min_trials: int
    #: Most important first.
    importances: list[ParameterImportance]
