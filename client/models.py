"""The wire contract of the asktell HTTP API, defined once; the service imports these models.

Naming follows one scheme: ``...Create`` and ``...Request`` are bodies a client sends (extra
fields are rejected), ``...Public`` is what the server returns, ``...Page`` is a page of a list
with ``next_cursor``.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

CategoryValue = str | bool | int | float
ParamValue = CategoryValue
StudyState = Literal["active", "paused", "completed"]
TrialState = Literal["waiting", "running", "stale", "completed", "failed", "infeasible"]
#: Trial states that end a trial; a finished trial cannot be told again.
FINISHED_STATES: tuple[TrialState, ...] = ("completed", "failed", "infeasible")

Name = Annotated[str, Field(min_length=1, max_length=256)]
#: Bounded like the database columns that store them (PostgreSQL integer and bigint).
Int32 = Annotated[int, Field(ge=0, le=2**31 - 1)]
Int64 = Annotated[int, Field(ge=0, le=2**63 - 1)]


def _finite_json(value: Any) -> Any:
    """Reject NaN and infinities anywhere in free-form JSON (metadata, options): JSON has no
    such numbers and PostgreSQL refuses to store them."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and infinite numbers are not valid JSON")
    if isinstance(value, dict):
        for item in value.values():
            _finite_json(item)
    elif isinstance(value, list):
        for item in value:
            _finite_json(item)
    return value


JsonDict = Annotated[dict[str, Any], AfterValidator(_finite_json)]


class _Request(BaseModel):
    # NaN and infinities are refused in configs; bodies that carry results accept them so
    # that the server can answer with its own message (tell the trial as failed).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Results(_Request):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True)


# --- search space -------------------------------------------------------------------------


class FloatParameter(_Request):
    type: Literal["float"] = "float"
    name: str
    low: float
    high: float
    log: bool = False
    step: float | None = None


class IntParameter(_Request):
    type: Literal["int"] = "int"
    name: str
    low: int
    high: int
    log: bool = False


class CategoricalParameter(_Request):
    type: Literal["categorical"] = "categorical"
    name: str
    choices: list[CategoryValue]


class FixedParameter(_Request):
    type: Literal["fixed"] = "fixed"
    name: str
    value: CategoryValue


Parameter = Annotated[
    FloatParameter | IntParameter | CategoricalParameter | FixedParameter,
    Field(discriminator="type"),
]


class Objective(_Request):
    """One objective. ``reference`` is this objective's coordinate of the hypervolume reference
    point (the worst value still counted), used by multi-objective studies."""

    name: Name
    goal: Literal["minimize", "maximize"] = "minimize"
    reference: float | None = None


class OutcomeConstraint(_Request):
    """A metric told with every trial; the trial is feasible when ``value op threshold``."""

    name: Name
    op: Literal["<=", ">="]
    threshold: float


class EngineSpec(_Request):
    name: str = "random"
    options: JsonDict = Field(default_factory=dict)


# --- studies ------------------------------------------------------------------------------


class StudyConfig(_Request):
    """What defines a study; it does not change after creation."""

    parameters: list[Parameter]
    objectives: list[Objective] = Field(default_factory=lambda: [Objective(name="value")])
    constraints: list[OutcomeConstraint] = Field(default_factory=list)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    lease_seconds: float = Field(default=600.0, gt=0, le=7 * 86400)
    #: What happens when a running trial's lease expires: ``requeue`` marks it ``stale`` and
    #: serves its parameters to the next asker (up to ``max_retries`` times, then ``failed``);
    #: ``fail`` marks it ``failed`` at once.
    on_lease_expiry: Literal["requeue", "fail"] = "requeue"
    max_retries: int = Field(default=3, ge=0, le=100)
    seed: int | None = Field(default=None, ge=0, lt=2**63)


class StudyCreate(StudyConfig):
    name: Name
    metadata: JsonDict = Field(default_factory=dict)


class StudyUpdate(_Request):
    state: StudyState | None = None
    metadata: JsonDict | None = None


class TrialPublic(BaseModel):
    study_id: int
    number: int
    state: TrialState
    params: dict[str, ParamValue]
    values: dict[str, float] | None = None
    constraints: dict[str, float] | None = None
    feasible: bool | None = None
    reason: str | None = None
    worker_id: str | None = None
    lease_expires_at: datetime | None = None
    retries: int = 0
    details: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    started_at: datetime | None = None
    completed_at: datetime | None = None


class StudyPublic(StudyConfig):
    model_config = ConfigDict(extra="ignore")

    id: int
    name: str
    state: StudyState
    metadata: dict[str, Any]
    seed: int
    revision: int
    engine_state: dict[str, Any]
    engine_state_version: int
    trial_counts: dict[str, int]
    best_values: dict[str, float] | None = None
    created_at: datetime
    updated_at: datetime


class StudiesPage(BaseModel):
    data: list[StudyPublic]
    next_cursor: str | None = None


# --- trials -------------------------------------------------------------------------------


class AskRequest(_Request):
    count: int = Field(default=1, ge=1, le=1000)
    worker_id: Annotated[str, Field(max_length=256)] | None = None
    lease_seconds: float | None = Field(default=None, gt=0, le=7 * 86400)


class AskResponse(BaseModel):
    trials: list[TrialPublic]
    #: Set when fewer than ``count`` trials came back: seconds after which to ask again.
    retry_after: float | None = None


class TellRequest(_Results):
    """Finish a trial: ``values`` for every objective (and ``constraints`` for every declared
    constraint) when ``state`` is ``completed``; a ``reason`` otherwise."""

    state: Literal["completed", "failed", "infeasible"] = "completed"
    values: dict[str, float] | None = None
    constraints: dict[str, float] = Field(default_factory=dict)
    reason: Annotated[str, Field(max_length=4096)] | None = None
    metadata: JsonDict | None = None


class ReportRequest(_Results):
    step: Int64
    values: dict[str, float]
    checkpoint: Annotated[str, Field(max_length=4096)] | None = None


class MeasurementPublic(BaseModel):
    step: int
    values: dict[str, float]
    checkpoint: str | None = None
    created_at: datetime


class HeartbeatRequest(_Request):
    lease_seconds: float | None = Field(default=None, gt=0, le=7 * 86400)
    #: The worker that holds the trial; a trial re-served to another worker answers 409.
    worker_id: Annotated[str, Field(max_length=256)] | None = None


class TrialCreate(_Results):
    """Enqueue a user-chosen point; with ``values`` it is stored as completed (a warm start)."""

    params: dict[str, ParamValue]
    values: dict[str, float] | None = None
    constraints: dict[str, float] = Field(default_factory=dict)
    metadata: JsonDict = Field(default_factory=dict)


class TrialsPage(BaseModel):
    data: list[TrialPublic]
    next_cursor: str | None = None


class BestPublic(BaseModel):
    """The best feasible trial (one objective) or the feasible non-dominated set (several).

    ``hypervolume`` is set for several objectives when every objective has a ``reference``.

    ``pareto_set_loo_emd`` (several objectives, at least two Pareto-optimal trials) says how
    densely the Pareto set is covered in the search space: the mean, over the Pareto-optimal
    trials, of the distance to the nearest other one, with every parameter scaled to [0, 1]
    (log parameters in log space) and divided by ``sqrt(d)``, so it lies in [0, 1]. It is the
    Expected Minimum Distance (EMD) of the set estimated by leave-one-out, since the true Pareto
    set is unknown: how far a new Pareto-optimal point would be from the known ones. Lower is
    denser; it falls as a study fills in its Pareto set.
    """

    trials: list[TrialPublic]
    hypervolume: float | None = None
    reference_point: dict[str, float] | None = None
    pareto_set_loo_emd: float | None = None
    #: Whether a completed trial is feasible. When the study has constraints and none is yet,
    #: ``trials`` is empty, ``least_violating`` is the completed trial of least total violation
    #: and ``total_violation`` its violation: the sum, over the constraints, of how far the
    #: value is past the threshold, in each constraint's own units (SCBO's measure).
    feasible_found: bool = False
    least_violating: TrialPublic | None = None
    total_violation: float | None = None


# --- export and import --------------------------------------------------------------------


class TrialExport(_Results):
    number: Int32
    state: TrialState
    params: dict[str, ParamValue]
    values: dict[str, float] | None = None
    constraints: dict[str, float] | None = None
    reason: str | None = None
    retries: Int32 = 0
    details: JsonDict = Field(default_factory=dict)
    metadata: JsonDict = Field(default_factory=dict)
    measurements: list[ReportRequest] = Field(default_factory=list)
    created_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None


class StudyExport(_Request):
    format: Literal["asktell.study/v1"] = "asktell.study/v1"
    study: StudyCreate
    trials: list[TrialExport]
    #: The engine's state, so that an imported study continues where the original was (the
    #: random engine does not repeat its points).
    engine_state: JsonDict = Field(default_factory=dict)
    engine_state_version: Int32 = 0


# --- errors -------------------------------------------------------------------------------


class ProblemDetail(BaseModel):
    """An RFC 9457 problem+json body; ``code`` is stable and safe to branch on."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    code: str
