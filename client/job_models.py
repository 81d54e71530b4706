"""The wire models of tuning jobs (``/v1/jobs``): what a job asks for (``JobCreate``), its
state and progress (``JobPublic``), what it produced (``JobResult``), its events and the
predictions of its model. Re-exported by ``client.models``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from client._wire import Int32, Integer, JsonDict, Name, _Request

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
#: States a job does not leave.
JOB_ENDED: tuple[JobState, ...] = ("succeeded", "failed", "cancelled")
#: The engines a job can run: the schedulers train units, the others full runs.
JOB_SCHEDULERS = ("ipbt", "pbt")
JOB_ENGINES = (*JOB_SCHEDULERS, "gp", "turbo-enn", "random")
#: A short name: an optimizer, a workload, an engine.
ShortName = Annotated[str, Field(min_length=1, max_length=100)]


class WorkloadSpec(_Request):
    """A model family: ``mlp`` built in, or an ``asktell.workloads`` entry point's name."""

    name: ShortName
    options: JsonDict = Field(default_factory=dict)


class JobEngine(_Request):
    """The engine that schedules the job's trials; ``options`` go to the engine (the job sets
    the schedulers' ``t_max`` and ``population_size`` from its budget)."""

    name: ShortName = "ipbt"
    options: JsonDict = Field(default_factory=dict)


class JobBudget(_Request):
    """``pbt``/``ipbt``: ``steps`` training steps per member (the engine's ``t_max``) and
    ``population`` members. Other engines: ``trials`` full runs of ``steps`` steps each."""

    steps: Integer = Field(ge=1, le=10_000_000)
    population: Integer | None = Field(default=None, ge=2, le=1000)
    trials: Integer | None = Field(default=None, ge=1, le=100_000)


class WorkerResources(_Request):
    """What each worker of a job asks of its executor: Ray reserves them per worker (a GPU
    worker sees its GPUs); the ``local`` executor starts one process per worker and ignores
    them."""

    num_cpus: float = Field(default=1.0, ge=0, le=1024)
    num_gpus: float = Field(default=0.0, ge=0, le=64)


class JobCreate(_Request):
    """A tuning job (``POST /v1/jobs``)."""

    name: Name
    #: A bundled scikit-learn dataset's name, an uploaded dataset's name, or its id.
    dataset: Annotated[str, Field(min_length=1, max_length=256)] | Int32
    workload: ShortName | WorkloadSpec = "mlp"
    #: One optimizer of ``engines.optim.registry``, or several: then the optimizer is a
    #: categorical hyperparameter (its own ones prefixed ``<optimizer>.``).
    optimizer: ShortName | Annotated[list[ShortName], Field(min_length=1, max_length=20)]
    #: Fixed hyperparameters by optimizer name, e.g. ``{"lion+": {"norm_scope": "element"}}``:
    #: given to that optimizer in every unit and run, never tuned (a name of its search space
    #: fixed here leaves the search space). Each key must be one of the job's optimizers.
    optimizer_options: dict[ShortName, JsonDict] = Field(default_factory=dict)
    engine: ShortName | JobEngine = "ipbt"
    budget: JobBudget
    #: Worker processes at most (default: the server's ``ASKTELL_JOB_WORKERS``, else its cores).
    parallelism: Integer | None = Field(default=None, ge=1, le=256)
    seed: Integer | None = Field(default=None, ge=0, lt=2**62)
    #: Where the workers run: ``local`` (processes of the server running the job) or ``ray``
    #: (tasks on a Ray cluster). Default: the server's ``ASKTELL_EXECUTOR``.
    executor: Literal["local", "ray"] | None = None
    resources: WorkerResources = Field(default_factory=WorkerResources)

    def workload_spec(self) -> WorkloadSpec:
        w = self.workload
        return WorkloadSpec(name=w) if isinstance(w, str) else w

    def engine_spec(self) -> JobEngine:
        e = self.engine
        return JobEngine(name=e) if isinstance(e, str) else e

    def optimizers(self) -> list[str]:
        return [self.optimizer] if isinstance(self.optimizer, str) else list(self.optimizer)


class JobSegment(BaseModel):
    """One trained segment of the best model: a scheduler's unit, or one full run."""

    trial: int
    member: int | None = None
    from_step: int
    to_step: int
    reason: str
    params: dict[str, Any]
    score: float | None = None
    #: The unit's seed and weight transform (what a retrain from the schedule needs).
    seed: int | None = None
    transform: dict[str, Any] = Field(default_factory=dict)
    #: The trial whose checkpoint this segment started from; null for fresh weights.
    start_trial: int | None = None


class JobResult(BaseModel):
    """What a succeeded job produced."""

    best_trial: int
    #: The best trial's validation score and its model's score on the test split (accuracy
    #: for classification, R^2 for regression; higher is better); no test score for a
    #: workload without ``predict``.
    val_score: float
    test_score: float | None
    metric: Literal["accuracy", "r2"]
    #: The best member's hyperparameter schedule, oldest segment first.
    schedule: list[JobSegment]
    #: The artifact key of the model (``GET /v1/jobs/{id}/model`` serves it).
    model_artifact: str


class JobPublic(BaseModel):
    id: int
    name: str
    state: JobState
    study_id: int
    dataset_id: int | None = None
    config: JobCreate
    cancel_requested: bool = False
    #: Units (schedulers) or runs told, and training steps done against the budget.
    units_done: int = 0
    steps_done: int = 0
    steps_budget: int = 0
    #: The best validation score so far (higher is better).
    best_score: float | None = None
    elapsed_seconds: float | None = None
    #: Seconds the workers spent training and evaluating the told units (the rest of
    #: ``elapsed_seconds`` times the workers is overhead: asks, tells, checkpoint transfers).
    train_seconds: float = 0.0
    #: An estimate from the steps done so far; null before the first unit.
    remaining_seconds: float | None = None
    error: str | None = None
    #: The server process that holds the job's lease (runs its workers).
    runner: str | None = None
    lease_expires_at: datetime | None = None
    takeovers: int = 0
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    result: JobResult | None = None


class JobsPage(BaseModel):
    data: list[JobPublic]
    next_cursor: str | None = None


class JobEvent(BaseModel):
    """The ``data`` of an event of ``GET /v1/jobs/{id}/events``: ``unit_told`` (a unit or run
    finished) or ``job_state`` (the job's state changed; the first event tells the current
    state)."""

    job_id: int
    state: JobState
    trial: int | None = None
    trial_state: str | None = None
    score: float | None = None
    units_done: int = 0
    steps_done: int = 0
    steps_budget: int = 0
    best_score: float | None = None
    error: str | None = None


class PredictRequest(_Request):
    """Feature rows by column name, raw values as in the dataset's CSV (bundled datasets:
    scikit-learn's feature names, as ``GET /v1/datasets/{name}`` lists them)."""

    rows: Annotated[list[JsonDict], Field(min_length=1, max_length=10_000)]


class PredictResponse(BaseModel):
    #: Class labels (classification) or values in the target's units (regression).
    predictions: list[Any]
