"""Every method of the clients' handles, written once and without I/O.

An operation is a generator: it yields the steps it needs (a ``Call`` to send, a ``Sleep``, an
``Evaluate`` of the user's function, ``Parallel`` operations), receives each step's outcome (or
has the step's error raised where it yielded), and returns the method's result.
``client._methods`` binds each operation as a method; an operation's first argument is the
object (``Client``, ``Study``, ``Sampler`` or their async twins) the method is bound to.
``client._sync`` and ``client._async`` perform the steps: send or await, threads or tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Generic, Literal, Protocol, TypeVar

import httpx

from client._base import Call, body, decoder, no_content, text
from client.models import (
    AskRequest,
    AskResponse,
    BestPublic,
    CheckpointsPublic,
    HeartbeatRequest,
    Lineage,
    MeasurementPublic,
    ReportRequest,
    StudiesPage,
    StudyCreate,
    StudyCurves,
    StudyEngine,
    StudyExport,
    StudyHistory,
    StudyImportance,
    StudyPareto,
    StudyPopulation,
    StudyPublic,
    StudyState,
    StudyUpdate,
    TellRequest,
    TellResponse,
    TrialCreate,
    TrialNote,
    TrialPublic,
    TrialsPage,
)
from client.notes_models import CurveSelection

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


# --- steps --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Lease:
    """A running trial that heartbeats keep alive while the user's function works on it."""

    study_id: int
    number: int
    seconds: float
    worker_id: str

    @property
    def interval(self) -> float:
        # Three heartbeats a lease, so that one late or lost answer does not let it expire.
        return self.seconds / 3

    def heartbeat(self) -> Call[TrialPublic]:
        req = HeartbeatRequest(lease_seconds=self.seconds, worker_id=self.worker_id)
        return heartbeat_call(self.study_id, self.number, req)


@dataclass(frozen=True)
class Evaluate:
    """Call the user's ``fn(arg)`` (with heartbeats for ``lease``); its result, or what it
    raised, comes back to the operation."""

    fn: Callable[[Any], Any]
    arg: Any
    lease: Lease | None = None


@dataclass(frozen=True)
class Parallel:
    """Run ``ops`` at once, until every one has returned or one has raised; the first error is
    raised in the operation that yielded this step."""

    ops: list[Generator[Step, Any, None]]


Step = Call[Any] | Sleep | Evaluate | Parallel
Op = Generator[Step, Any, T]


class Page(Protocol[T_co]):
    @property
    def data(self) -> Sequence[T_co]: ...

    @property
    def next_cursor(self) -> str | None: ...


@dataclass(frozen=True)
class Pages(Generic[T]):
    """A listing, fetched page by page: ``call(cursor)`` asks for the page at ``cursor``
    (``None`` for the first); each page gives the next cursor, ``None`` on the last."""

    call: Callable[[str | None], Call[Page[T]]]


class StudyHandle(Protocol):
    id: int
    info: StudyPublic


def _listing(
    path: str, decode: Callable[[httpx.Response], Page[T]], params: dict[str, Any]
) -> Pages[T]:
    """The pages of ``GET path?params``, each asked for with the cursor the previous gave."""

    def call(cursor: str | None) -> Call[Page[T]]:
        query = params if cursor is None else {**params, "cursor": cursor}
        return Call("GET", path, decode, params=query)

    return Pages(call)


_study = decoder(StudyPublic)
_trial = decoder(TrialPublic)


# --- the client: studies and samplers -----------------------------------------------------


def create_study(
    client: object,
    name: str,
    parameters: list[Any],
    objectives: list[Any] | None = None,
    constraints: list[Any] | None = None,
    engine: str | dict[str, Any] = "random",
    **fields: Any,
) -> Op[StudyPublic]:
    """Create a study, or get the live one of that name with the same config.

    ``parameters``, ``objectives`` and ``constraints`` are model instances or plain dicts
    (``{"type": "float", "name": "x", "low": 0, "high": 1}``); ``fields`` are other
    ``StudyCreate`` fields (``seed``, ``lease_seconds``, ``metadata``...).
    """
    spec: dict[str, Any] = {"name": name, "parameters": parameters, **fields}
    if objectives is not None:
        spec["objectives"] = objectives
    if constraints is not None:
        spec["constraints"] = constraints
    spec["engine"] = {"name": engine} if isinstance(engine, str) else engine
    return (yield from create_study_from(client, StudyCreate.model_validate(spec)))


def create_study_from(client: object, spec: StudyCreate) -> Op[StudyPublic]:
    return (yield Call("POST", "/v1/studies", _study, json=body(spec)))


def get_study(client: object, study_id: int) -> Op[StudyPublic]:
    return (yield Call("GET", f"/v1/studies/{study_id}", _study))


def list_studies(
    client: object,
    page_size: int = 100,
    *,
    states: list[StudyState] | None = None,
    engine: str | None = None,
    name_contains: str | None = None,
    sort: Literal["id", "name", "created_at", "updated_at", "trials"] = "id",
    descending: bool = False,
) -> Pages[StudyPublic]:
    """The studies in any of ``states``, of ``engine``, whose name contains ``name_contains``
    (any case), ordered by ``sort`` (``trials``: their number of trials)."""
    filters = {"state": states, "engine": engine, "q": name_contains}
    params: dict[str, Any] = {
        "limit": page_size,
        "sort": sort,
        "order": "desc" if descending else "asc",
        **{k: v for k, v in filters.items() if v},
    }
    return _listing("/v1/studies", decoder(StudiesPage), params)


def engine_names(client: object) -> Op[list[str]]:
    """The engines the server runs, by name."""
    return (yield Call("GET", "/v1/engines", decoder(list[str])))


def import_study(
    client: object, export: StudyExport | dict[str, Any], name: str | None = None
) -> Op[StudyPublic]:
    """Create a study from ``export`` (``Study.export()``), named ``name`` or as exported."""
    data = body(StudyExport.model_validate(export))
    params = {"name": name} if name else None
    return (yield Call("POST", "/v1/studies/import", _study, json=data, params=params))


# --- a study ------------------------------------------------------------------------------


def refresh(study: StudyHandle) -> Op[StudyPublic]:
    study.info = yield from get_study(None, study.id)
    return study.info


def ask(
    study: StudyHandle,
    count: int = 1,
    worker_id: str | None = None,
    lease_seconds: float | None = None,
) -> Op[list[TrialPublic]]:
    return (yield from ask_units(study, count, worker_id, lease_seconds)).trials


def ask_units(
    study: StudyHandle,
    count: int = 1,
    worker_id: str | None = None,
    lease_seconds: float | None = None,
) -> Op[AskResponse]:
    """Ask a scheduler study (``pbt``, ``ipbt``) for training units: the whole answer, with
    ``retry_after`` while a generation is still training and ``finished`` at the end."""
    req = AskRequest(count=count, worker_id=worker_id, lease_seconds=lease_seconds)
    path = f"/v1/studies/{study.id}/ask"
    return (yield Call("POST", path, decoder(AskResponse), json=body(req)))


def tell(
    study: StudyHandle,
    number: int,
    values: Mapping[str, float] | float | None = None,
    constraints: Mapping[str, float] | None = None,
    metadata: dict[str, Any] | None = None,
    checkpoint: str | None = None,
) -> Op[TrialPublic]:
    """Tell a trial's results; ``checkpoint`` is the reference of the checkpoint saved at its
    end (required for a scheduler's unit unless a report gave it)."""
    if values is None or isinstance(values, Mapping):
        by_name = dict(values or {})
    else:  # a number (numpy scalars included) for a single-objective study
        by_name = {study.info.objectives[0].name: float(values)}
    req = TellRequest(
        values=by_name,
        constraints=dict(constraints or {}),
        metadata=metadata,
        checkpoint=checkpoint,
    )
    return (yield _tell_call(study.id, number, req))


def tell_and_ask(
    study: StudyHandle,
    number: int,
    values: Mapping[str, float] | float | None = None,
    constraints: Mapping[str, float] | None = None,
    metadata: dict[str, Any] | None = None,
    checkpoint: str | None = None,
    *,
    count: int = 1,
    worker_id: str | None = None,
    lease_seconds: float | None = None,
) -> Op[TellResponse]:
    """Tell a trial's results and ask for the next ``count`` trials in the same request: the
    told trial, with ``next`` holding the new trials, or, when none could be handed out, why
    (``next.problem``, ``next.retry_after``, ``next.finished``); the tell stands either way."""
    if values is not None and not isinstance(values, Mapping):
        values = {study.info.objectives[0].name: float(values)}
    req = TellRequest(
        values=dict(values or {}),
        constraints=dict(constraints or {}),
        metadata=metadata,
        checkpoint=checkpoint,
        ask=AskRequest(count=count, worker_id=worker_id, lease_seconds=lease_seconds),
    )
    path = f"/v1/studies/{study.id}/trials/{number}/tell"
    return (yield Call("POST", path, _told, json=body(req)))


_told = decoder(TellResponse)


def fail(
    study: StudyHandle, number: int, reason: str | None = None, infeasible: bool = False
) -> Op[TrialPublic]:
    req = TellRequest(state="infeasible" if infeasible else "failed", reason=reason)
    return (yield _tell_call(study.id, number, req))


def _tell_call(study_id: int, number: int, req: TellRequest) -> Call[TrialPublic]:
    return Call("POST", f"/v1/studies/{study_id}/trials/{number}/tell", _trial, json=body(req))


def report(
    study: StudyHandle,
    number: int,
    step: int,
    values: Mapping[str, float],
    checkpoint: str | None = None,
) -> Op[MeasurementPublic]:
    req = ReportRequest(step=step, values=dict(values), checkpoint=checkpoint)
    path = f"/v1/studies/{study.id}/trials/{number}/report"
    return (yield Call("POST", path, decoder(MeasurementPublic), json=body(req)))


def heartbeat(
    study: StudyHandle,
    number: int,
    lease_seconds: float | None = None,
    worker_id: str | None = None,
) -> Op[TrialPublic]:
    req = HeartbeatRequest(lease_seconds=lease_seconds, worker_id=worker_id)
    return (yield heartbeat_call(study.id, number, req))


def heartbeat_call(study_id: int, number: int, req: HeartbeatRequest) -> Call[TrialPublic]:
    path = f"/v1/studies/{study_id}/trials/{number}/heartbeat"
    return Call("POST", path, _trial, json=body(req))


def enqueue(
    study: StudyHandle,
    params: Mapping[str, Any],
    values: Mapping[str, float] | None = None,
    constraints: Mapping[str, float] | None = None,
) -> Op[TrialPublic]:
    req = TrialCreate(
        params=dict(params),
        values=dict(values) if values is not None else None,
        constraints=dict(constraints or {}),
    )
    return (yield Call("POST", f"/v1/studies/{study.id}/trials", _trial, json=body(req)))


def trial(study: StudyHandle, number: int) -> Op[TrialPublic]:
    return (yield Call("GET", f"/v1/studies/{study.id}/trials/{number}", _trial))


def trials(
    study: StudyHandle, states: list[str] | None = None, page_size: int = 500
) -> Pages[TrialPublic]:
    params: dict[str, Any] = {"limit": page_size, **({"state": states} if states else {})}
    return _listing(f"/v1/studies/{study.id}/trials", decoder(TrialsPage), params)


def measurements(study: StudyHandle, number: int) -> Op[list[MeasurementPublic]]:
    path = f"/v1/studies/{study.id}/trials/{number}/measurements"
    return (yield Call("GET", path, decoder(list[MeasurementPublic])))


def set_note(study: StudyHandle, number: int, note: str) -> Op[TrialPublic]:
    """Replace trial ``number``'s note (``""`` removes it); finished trials take notes too."""
    path = f"/v1/studies/{study.id}/trials/{number}/note"
    return (yield Call("PUT", path, _trial, json=body(TrialNote(note=note))))


def history(study: StudyHandle, max_points: int = 2000) -> Op[StudyHistory]:
    """The finished trials' values and each objective's best-so-far, for a chart (at most
    ``max_points`` trials, downsampled on the server)."""
    path = f"/v1/studies/{study.id}/history"
    return (yield Call("GET", path, decoder(StudyHistory), params={"max_points": max_points}))


def pareto(study: StudyHandle, max_points: int = 2000) -> Op[StudyPareto]:
    """The completed trials in objective space: the whole front, at most ``max_points`` others,
    and the hypervolume over trials (several objectives)."""
    path = f"/v1/studies/{study.id}/pareto"
    return (yield Call("GET", path, decoder(StudyPareto), params={"max_points": max_points}))


def curves(
    study: StudyHandle,
    selection: CurveSelection = "recent",
    objective: str | None = None,
    max_trials: int = 10,
    max_points_per_trial: int = 200,
) -> Op[StudyCurves]:
    """The intermediate values (reports) of the ``recent``, ``best`` or ``running`` trials, each
    downsampled on the server to ``max_points_per_trial`` steps."""
    params: dict[str, Any] = {"selection": selection, "max_trials": max_trials}
    params["max_points_per_trial"] = max_points_per_trial
    if objective is not None:
        params["objective"] = objective
    path = f"/v1/studies/{study.id}/measurements"
    return (yield Call("GET", path, decoder(StudyCurves), params=params))


def best(study: StudyHandle) -> Op[BestPublic]:
    return (yield Call("GET", f"/v1/studies/{study.id}/best", decoder(BestPublic)))


def engine_panel(study: StudyHandle, max_points: int = 2000) -> Op[StudyEngine]:
    """What the study's engine did, ask after ask (its quantities by trial number, at most
    ``max_points`` per series), and its current state."""
    path = f"/v1/studies/{study.id}/engine"
    return (yield Call("GET", path, decoder(StudyEngine), params={"max_points": max_points}))


def importance(
    study: StudyHandle, objective: str | None = None, filter: str | None = None
) -> Op[StudyImportance]:
    """How much each parameter matters to ``objective`` (the first by default): fANOVA of a
    random forest on the server, over the completed trials that pass ``filter`` (a JSON
    filter as the trial list takes)."""
    params = {k: v for k, v in (("objective", objective), ("filter", filter)) if v is not None}
    path = f"/v1/studies/{study.id}/importance"
    return (yield Call("GET", path, decoder(StudyImportance), params=params))


def lineage(study: StudyHandle, number: int) -> Op[Lineage]:
    """The units whose checkpoints led to unit ``number`` (scheduler studies)."""
    path = f"/v1/studies/{study.id}/trials/{number}/lineage"
    return (yield Call("GET", path, decoder(Lineage)))


def best_schedule(study: StudyHandle) -> Op[Lineage]:
    """The lineage of the best unit: the best member's hyperparameter schedule."""
    return (yield Call("GET", f"/v1/studies/{study.id}/best/schedule", decoder(Lineage)))


def checkpoints(study: StudyHandle) -> Op[CheckpointsPublic]:
    """Which checkpoints are still needed (``pinned``) and which may be deleted."""
    path = f"/v1/studies/{study.id}/checkpoints"
    return (yield Call("GET", path, decoder(CheckpointsPublic)))


def population(
    study: StudyHandle, max_units: int = 500, max_checkpoints: int = 100
) -> Op[StudyPopulation]:
    """The population of a scheduler study: its last ``max_units`` units with the unit each
    one started from, the best unit, and its newest checkpoints, pinned or releasable."""
    path = f"/v1/studies/{study.id}/population"
    params = {"max_units": max_units, "max_checkpoints": max_checkpoints}
    return (yield Call("GET", path, decoder(StudyPopulation), params=params))


def export(study: StudyHandle) -> Op[StudyExport]:
    path = f"/v1/studies/{study.id}/export"
    return (yield Call("GET", path, decoder(StudyExport), params={"format": "json"}))


def export_csv(study: StudyHandle) -> Op[str]:
    return (yield Call("GET", f"/v1/studies/{study.id}/export", text, params={"format": "csv"}))


def update(
    study: StudyHandle,
    state: StudyState | None = None,
    metadata: dict[str, Any] | None = None,
    max_trials: int | EllipsisType | None = ...,
    notes: str | None = None,
    max_staleness: int | EllipsisType | None = ...,
) -> Op[StudyPublic]:
    """Change the state, merge ``metadata`` (a key set to ``None`` is removed), set the
    trial budget ``max_trials`` and the suggestion pool's ``max_staleness`` (``None`` removes
    them; left out, they stay) and replace the ``notes`` (``""`` removes them)."""
    fields: dict[str, Any] = {
        k: v
        for k, v in {"state": state, "metadata": metadata, "notes": notes}.items()
        if v is not None
    }
    settings = {"max_trials": max_trials, "max_staleness": max_staleness}
    fields.update({k: v for k, v in settings.items() if v is not ...})
    change = StudyUpdate.model_validate(fields)
    path = f"/v1/studies/{study.id}"
    study.info = yield Call("PATCH", path, _study, json=body(change))
    return study.info


def delete(study: StudyHandle) -> Op[None]:
    yield Call("DELETE", f"/v1/studies/{study.id}", no_content)


@dataclass(frozen=True)
class Done(Generic[T]):
    value: T


def advance(op: Op[T], outcome: Any = None, error: BaseException | None = None) -> Step | Done[T]:
    """Resume ``op`` with the outcome of its last step, or raise ``error`` where it yielded:
    its next step, or ``Done`` with what it returned."""
    try:
        return op.send(outcome) if error is None else op.throw(error)
    except StopIteration as stop:
        return Done(stop.value)
