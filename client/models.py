"""The wire contract of the asktell HTTP API, defined once; the service imports these models.

Naming follows one scheme: ``...Create`` and ``...Request`` are bodies a client sends (extra
fields are rejected), ``...Public`` is what the server returns, ``...Page`` is a page of a list
with ``next_cursor``. The sampler's models live in ``client.sampler_models``, a study's history
for charts in ``client.progress_models``, its Pareto front in ``client.pareto_models``, notes and
curves in ``client.notes_models``, the problem codes in ``client.problem_models``, the building
blocks in ``client._wire``; all re-exported here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from client._wire import FINISHED_STATES as FINISHED_STATES
from client._wire import AskTimeBudget, Integer, MaxTrials, _Request, _Results, _TypeTagged
from client._wire import CategoryValue as CategoryValue
from client._wire import Int32 as Int32
from client._wire import Int64 as Int64
from client._wire import JsonDict as JsonDict
from client._wire import Name as Name
from client._wire import Note as Note
from client._wire import ParameterName as ParameterName
from client._wire import ParamValue as ParamValue
from client._wire import StudyState as StudyState
from client._wire import Timestamp as Timestamp
from client._wire import TrialState as TrialState
from client.dataset_models import ColumnKind as ColumnKind
from client.dataset_models import DatasetColumn as DatasetColumn
from client.dataset_models import DatasetPublic as DatasetPublic
from client.dataset_models import DatasetTask as DatasetTask
from client.engine_models import EngineChart as EngineChart
from client.engine_models import EngineFact as EngineFact
from client.engine_models import EngineParticles as EngineParticles
from client.engine_models import EngineSeries as EngineSeries
from client.engine_models import FactValue as FactValue
from client.engine_models import StudyEngine as StudyEngine
from client.importance_models import ParameterImportance as ParameterImportance
from client.importance_models import StudyImportance as StudyImportance
from client.job_models import JOB_ENDED as JOB_ENDED
from client.job_models import JOB_ENGINES as JOB_ENGINES
from client.job_models import JOB_SCHEDULERS as JOB_SCHEDULERS
from client.job_models import JobBudget as JobBudget
from client.job_models import JobCreate as JobCreate
from client.job_models import JobEngine as JobEngine
from client.job_models import JobEvent as JobEvent
from client.job_models import JobPublic as JobPublic
from client.job_models import JobResult as JobResult
from client.job_models import JobSegment as JobSegment
from client.job_models import JobsPage as JobsPage
from client.job_models import JobState as JobState
from client.job_models import PredictRequest as PredictRequest
from client.job_models import PredictResponse as PredictResponse
from client.job_models import WorkerResources as WorkerResources
from client.job_models import WorkloadSpec as WorkloadSpec
from client.key_models import ApiKeyCreate as ApiKeyCreate
from client.key_models import ApiKeyCreated as ApiKeyCreated
from client.key_models import ApiKeyPublic as ApiKeyPublic
from client.key_models import KeyScope as KeyScope
from client.notes_models import StudyCurves as StudyCurves
from client.notes_models import TrialNote as TrialNote
from client.pareto_models import ParetoKind as ParetoKind
from client.pareto_models import ParetoPoint as ParetoPoint
from client.pareto_models import StudyPareto as StudyPareto
from client.population_models import PopulationCheckpoint as PopulationCheckpoint
from client.population_models import PopulationUnit as PopulationUnit
from client.population_models import StudyPopulation as StudyPopulation
from client.problem_models import ProblemCode as ProblemCode
from client.problem_models import ProblemDetail as ProblemDetail
from client.progress_models import HistoryPoint as HistoryPoint
from client.progress_models import StudyHistory as StudyHistory
from client.progress_models import StudyPoints as StudyPoints
from client.progress_models import TrialPoint as TrialPoint
from client.sampler_models import GaussianInit as GaussianInit
from client.sampler_models import PointsInit as PointsInit
from client.sampler_models import SamplerAsk as SamplerAsk
from client.sampler_models import SamplerCreate as SamplerCreate
from client.sampler_models import SamplerPublic as SamplerPublic
from client.sampler_models import SamplerStep as SamplerStep
from client.sampler_models import SamplerTell as SamplerTell

#: A lease shorter than this could expire before its answer reaches the worker; longer than a
#: week keeps a dead worker's trial from anyone else too long.
MIN_LEASE_SECONDS = 0.01
MAX_LEASE_SECONDS = 7 * 86400

# --- search space -------------------------------------------------------------------------


class FloatParameter(_TypeTagged):
    """A real number in ``[low, high]``; ``log`` searches it on a log scale (``low > 0``),
    ``step`` (not with ``log``) restricts it to the grid ``low + k * step``."""

    type: Literal["float"] = "float"
    name: ParameterName
    low: float
    high: float
    log: bool = False
    step: float | None = None


class IntParameter(_TypeTagged):
    """An integer in ``[low, high]``; ``log`` searches it on a log scale (``low > 0``)."""

    type: Literal["int"] = "int"
    name: ParameterName
    low: Integer
    high: Integer
    log: bool = False


class CategoricalParameter(_TypeTagged):
    type: Literal["categorical"] = "categorical"
    name: ParameterName
    choices: list[CategoryValue]


class FixedParameter(_TypeTagged):
    type: Literal["fixed"] = "fixed"
    name: ParameterName
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
    lease_seconds: float = Field(default=600.0, ge=MIN_LEASE_SECONDS, le=MAX_LEASE_SECONDS)
    #: What happens when a running trial's lease expires: ``requeue`` marks it ``stale`` and
    #: serves its parameters to the next asker (up to ``max_retries`` times, then ``failed``);
    #: ``fail`` marks it ``failed`` at once.
    on_lease_expiry: Literal["requeue", "fail"] = "requeue"
    max_retries: Integer = Field(default=3, ge=0, le=100)
    seed: Integer | None = Field(default=None, ge=0, lt=2**63)


class StudyCreate(StudyConfig):
    name: Name
    metadata: JsonDict = Field(default_factory=dict)
    #: Trial budget: asks get 409 ``max_trials_reached`` once this many trials are running or
    #: finished. A setting (``StudyUpdate`` changes it) that get-or-create does not compare.
    max_trials: MaxTrials | None = None
    #: Seconds an ask's engine call may take (at most the server's), else Sobol points. A setting.
    ask_time_budget: AskTimeBudget | None = None
    #: Finished trials after which pooled points are stale (default a batch; 0: no pool). A setting.
    max_staleness: Int32 | None = None


class StudyUpdate(_Request):
    state: StudyState | None = None
    metadata: JsonDict | None = None
    #: New settings: ``null`` removes the budget or restores the default, left out they stay.
    max_trials: MaxTrials | None = None
    ask_time_budget: AskTimeBudget | None = None
    max_staleness: Int32 | None = None
    notes: Note | None = Field(default=None, description="Replaces the notes; empty removes.")


class WeightTransform(BaseModel):
    """What a worker does to the weights it loads before training a unit.

    ``shrink_perturb`` (Ash and Adams 2020): every parameter ``theta <- shrink * theta + perturb
    * theta_fresh``, with ``theta_fresh`` a fresh initialization of the model drawn with
    ``seed``; normalization-layer statistics are reset to the fresh model's. ``shrink = 0,
    perturb = 1`` is a fresh model.
    """

    kind: Literal["none", "shrink_perturb"] = "none"
    shrink: float = 1.0
    perturb: float = 0.0
    seed: int | None = None


class UnitStart(BaseModel):
    """Where a unit starts: ``fresh`` weights, or the checkpoint that trial ``trial`` saved,
    by its exact reference ``checkpoint`` (never the member's latest)."""

    kind: Literal["fresh", "checkpoint"]
    trial: int | None = None
    checkpoint: str | None = None


class Unit(BaseModel):
    """A scheduler's trial (``pbt``, ``ipbt``): train member ``member`` for one segment.

    The worker loads ``start`` (and applies ``transform``), sets the trial's ``params`` as the
    hyperparameters (after restoring any optimizer state), reports the objective at step
    ``from_step`` before training when ``eval_before`` is set, trains exactly ``to_step -
    from_step`` steps, saves a new checkpoint (never overwriting the one it loaded) and tells the
    objective with the checkpoint's reference. ``reason`` says why the unit exists:
    ``initial`` (a member's first segment), ``continue`` (its own last checkpoint), ``exploit``
    (another member's checkpoint, with explored hyperparameters), ``restart`` (IPBT). Other
    keys are the engine's own bookkeeping and are kept as they are.
    """

    model_config = ConfigDict(extra="allow")

    member: int
    generation: int
    iteration: int = 0
    from_step: int
    to_step: int
    start: UnitStart
    transform: WeightTransform = Field(default_factory=WeightTransform)
    eval_before: bool = False
    seed: int
    reason: Literal["initial", "continue", "exploit", "restart"]


class TrialPublic(BaseModel):
    study_id: int
    number: int
    state: TrialState
    params: dict[str, ParamValue]
    values: dict[str, float] | None = None
    constraints: dict[str, float] | None = None
    feasible: bool | None = Field(
        default=None, description="Whether a completed trial meets every constraint."
    )
    reason: str | None = None
    worker_id: str | None = None
    lease_expires_at: datetime | None = None
    #: The worker's last sign of life: the ask that handed the trial out, a heartbeat, a report.
    heartbeat_at: datetime | None = None
    retries: int = 0
    details: dict[str, Any] = Field(default_factory=dict)
    #: Schedulers' trials only: what to train, from where (see ``Unit``).
    unit: Unit | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    started_at: datetime | None = None
    completed_at: datetime | None = None
    note: str | None = None


class StudyPublic(StudyConfig):
    model_config = ConfigDict(extra="ignore")

    id: int
    name: str
    state: StudyState
    metadata: dict[str, Any]
    seed: int
    revision: int
    engine_state: dict[str, Any]
    #: How many asks ran the engine: the server's ``ask_count``, under the API's older name.
    engine_state_version: int
    trial_counts: dict[str, int]
    best_values: dict[str, float] | None = None
    max_trials: int | None = None
    ask_time_budget: float | None = None
    max_staleness: int | None = None
    created_at: datetime
    updated_at: datetime
    notes: str | None = None


class StudiesPage(BaseModel):
    data: list[StudyPublic]
    next_cursor: str | None = None


# --- trials -------------------------------------------------------------------------------


class AskRequest(_Request):
    count: Integer = Field(default=1, ge=1, le=1000)
    worker_id: Annotated[str, Field(max_length=256)] | None = None
    lease_seconds: float | None = Field(default=None, ge=MIN_LEASE_SECONDS, le=MAX_LEASE_SECONDS)


class AskResponse(BaseModel):
    trials: list[TrialPublic]
    #: Set when fewer than ``count`` trials came back: seconds after which to ask again.
    retry_after: float | None = None
    #: The engine will propose nothing more (a scheduler whose members all reached their last
    #: step); trials already handed out still need their tells.
    finished: bool = False


class TellRequest(_Results):
    """Finish a trial: ``values`` for every objective (and ``constraints`` for every declared
    constraint) when ``state`` is ``completed``; a ``reason`` otherwise."""

    state: Literal["completed", "failed", "infeasible"] = "completed"
    values: dict[str, float] | None = None
    constraints: dict[str, float] = Field(default_factory=dict)
    reason: Annotated[str, Field(max_length=4096)] | None = None
    metadata: JsonDict | None = None
    #: The reference of the checkpoint saved at the end of the trial; stored as a measurement
    #: of ``values`` at the unit's ``to_step`` (or after the last reported step). A scheduler's
    #: trial is completed only with a checkpoint, given here or by an earlier report.
    checkpoint: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    #: Tell-and-ask: after the tell commits, ask for the next trials as ``POST .../ask`` would
    #: with this body; the answer carries them in ``next``. A tell without it answers as before.
    ask: AskRequest | None = None


class NextTrials(AskResponse):
    """The ask part of a tell-and-ask: the trials handed out after the tell committed. When the
    ask part could not serve (study paused or completed, ``max_trials`` reached, engine busy or
    failing), ``trials`` is empty and ``problem`` is the problem+json the ask endpoint would
    have answered with (``retry_after`` set from it when the same ask may succeed later); the
    tell stands either way."""

    problem: ProblemDetail | None = None


class TellResponse(TrialPublic):
    """The told trial; with ``next`` when the tell carried ``ask`` (absent otherwise, so a tell
    without ``ask`` answers a plain ``TrialPublic``)."""

    next: NextTrials | None = None


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
    lease_seconds: float | None = Field(default=None, ge=MIN_LEASE_SECONDS, le=MAX_LEASE_SECONDS)
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


class Segment(BaseModel):
    """One unit in a lineage: which member trained from which step to which, with what."""

    trial: int
    member: int
    from_step: int
    to_step: int
    reason: str
    params: dict[str, ParamValue]
    values: dict[str, float] | None = None
    checkpoint: str | None = None


class Lineage(BaseModel):
    """The units whose checkpoints led to trial ``trial``, oldest first, ending with it: the
    hyperparameter schedule that produced its weights."""

    trial: int
    segments: list[Segment]


class CheckpointRef(BaseModel):
    trial: int
    checkpoint: str


class CheckpointsPublic(BaseModel):
    """A scheduler study's checkpoints: ``pinned`` ones may still be loaded by a pending or a
    future unit (or are the best so far); ``releasable`` ones never will be and may be deleted."""

    pinned: list[CheckpointRef]
    releasable: list[CheckpointRef]


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
    unit: Unit | None = None
    metadata: JsonDict = Field(default_factory=dict)
    measurements: list[ReportRequest] = Field(default_factory=list)
    created_at: Timestamp | None = None
    started_at: Timestamp | None = None
    completed_at: Timestamp | None = None
    note: Note | None = None


class StudyExport(_Request):
    format: Literal["asktell.study/v1"] = "asktell.study/v1"
    study: StudyCreate
    trials: list[TrialExport]
    #: The engine's state, so that an imported study continues where the original was (the
    #: random engine does not repeat its points).
    engine_state: JsonDict = Field(default_factory=dict)
    #: The study's ask count (``StudyPublic.engine_state_version``); it seeds the next ask's rng.
    engine_state_version: Int32 = 0
    notes: Note | None = None


# --- events -------------------------------------------------------------------------------


class StudyEvent(BaseModel):
    """The ``data`` of an event of ``GET /v1/studies/{id}/events``: the event's ``event`` field
    is ``trial_asked``, ``trial_told``, ``trial_failed`` or ``study_state``."""

    study_id: int
    number: int | None = Field(description="The trial's number; null for study_state.")
    state: str = Field(
        description="The state the event put the trial in (running when asked), or the "
        "study's new state."
    )
    values: dict[str, float] | None = Field(
        description="The told values (trial_told); null otherwise."
    )
    revision: int = Field(
        description="The study's revision the event happened at (for study_state, the one it "
        "was seen at)."
    )
