"""/v1/studies/{id}/...: ask, enqueue, list trials; tell, report, heartbeat one trial; the
lineage of a scheduler's unit."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from client.models import (
    AskRequest,
    AskResponse,
    HeartbeatRequest,
    Lineage,
    MeasurementPublic,
    ProblemCode,
    ReportRequest,
    StudyEngine,
    StudyHistory,
    StudyImportance,
    StudyPareto,
    StudyPoints,
    TellRequest,
    TellResponse,
    TrialCreate,
    TrialPublic,
    TrialsPage,
    TrialState,
)
from service import ask as asking
from service import (
    engine_panel,
    importance,
    leases,
    pareto,
    points,
    progress,
    suggestion_pool,
    tell_ask,
    trial_fields,
    trials,
    units,
)
from service.admission import ClientGone
from service.deps import AdmissionDep, IdemDep, StoreDep, TenantDep
from service.errors import ApiError, problems
from service.routers.common import (
    CONFIG,
    JSON,
    RESULTS,
    STUDY,
    TRIAL,
    TRIAL_WRITE,
    WRITE,
    StudyId,
    TrialFilter,
    TrialNumber,
    api_router,
    cursor_int,
    written,
)

#: The status logged for an ask dropped because its client left (nobody reads it; nginx's).
CLIENT_CLOSED_REQUEST = 499

router = api_router("/v1/studies/{study_id}", "trials")


@router.post(
    "/ask",
    response_model=AskResponse,
    responses=problems(
        *WRITE,
        *STUDY,
        *CONFIG,
        ProblemCode.STUDY_NOT_ACTIVE,
        ProblemCode.MAX_TRIALS_REACHED,
        ProblemCode.STUDY_BUSY,
    ),
)
async def ask(
    request: Request,
    study_id: StudyId,
    body: AskRequest,
    store: StoreDep,
    tenant: TenantDep,
    idem: IdemDep,
    admission: AdmissionDep,
) -> Response:
    """Hand out ``count`` trials to the worker: its own trials still within their lease,
    then enqueued and stale (re-delivered) trials, then new engine proposals. Each is
    leased to the worker for ``lease_seconds`` (the study's default when omitted);
    heartbeats and reports extend the lease; when it expires, the study's lease policy either
    re-delivers the trial (``stale``) to the next asker, up to ``max_retries`` times, or fails it.
    Fewer trials than ``count`` come with ``retry_after``. A busy study answers 503 with
    ``Retry-After``. An ``Idempotency-Key`` replays the first answer instead of handing out
    more trials."""
    try:
        if suggestion_pool.may_serve(store, study_id):
            # Fresh pooled points need no engine: they do not wait behind asks that run it.
            pooled = await suggestion_pool.serve(
                store,
                study_id,
                request,
                lambda: asking.ask_from_pool(store, tenant, study_id, body, idem),
            )
            if pooled is not None:
                return written(pooled)
        return await admission.run(
            study_id, request, lambda: written(asking.ask(store, tenant, study_id, body, idem))
        )
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED_REQUEST)


@router.post(
    "/trials",
    response_model=TrialPublic,
    status_code=201,
    responses=problems(
        *WRITE,
        *STUDY,
        *RESULTS,
        ProblemCode.ENGINE_SCHEDULES_UNITS,
        ProblemCode.INVALID_PARAMS,
    ),
)
def enqueue(
    study_id: StudyId, body: TrialCreate, store: StoreDep, tenant: TenantDep, idem: IdemDep
) -> Response:
    """Add a trial at a point of your choosing (201): it is handed out before engine
    proposals. With ``values`` it is stored as completed. An ``Idempotency-Key`` replays
    the first answer."""
    return written(trials.enqueue(store, tenant, study_id, body, idem))


@router.get(
    "/trials", response_model=TrialsPage, responses=problems(*STUDY, ProblemCode.INVALID_CURSOR)
)
def list_trials(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    state: Annotated[list[TrialState] | None, Query()] = None,
    sort: Annotated[
        str,
        Query(
            max_length=300,
            description=f"One of {', '.join(trial_fields.PLAIN_FIELDS)}, "
            "`values.OBJECTIVE`, `constraints.NAME` or `params.NAME` (numeric for numeric "
            "parameters); trials without that value come last, ties in number order.",
        ),
    ] = "number",
    order: Literal["asc", "desc"] = "asc",
    offset: Annotated[int, Query(ge=0, le=2**31 - 1, description="Trials to skip.")] = 0,
    cursor: Annotated[
        str | None, Query(description="The `next_cursor` of the previous page, same order.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    filter: TrialFilter = None,
) -> TrialsPage:
    """A page of the study's trials, filtered by state and ``filter`` and sorted by
    ``sort``; pass ``next_cursor`` as ``cursor`` (same order) for the next page until it is
    null, or page with ``offset``."""
    page = trials.TrialsOrder(sort, order == "desc", cursor_int(cursor), offset, limit)
    return trials.list_trials(store, tenant, study_id, state, page, filter)


@router.get("/history", response_model=StudyHistory, responses=problems(*STUDY))
def history(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    max_points: Annotated[int, Query(ge=10, le=10_000)] = 2000,
    filter: TrialFilter = None,
) -> Response:
    """The finished trials' values and completion times and each objective's best-so-far
    curve, by trial number and by time, for a chart: at most ``max_points`` trials
    (downsampled on the server) and steps per curve. Cached per study revision."""
    history = progress.study_history(store, tenant, study_id, max_points, filter)
    return Response(history, media_type=JSON)


@router.get("/pareto", response_model=StudyPareto, responses=problems(*STUDY))
def pareto_front(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    max_points: Annotated[
        int, Query(ge=10, le=10_000, description="Dominated and infeasible trials at most.")
    ] = 2000,
    filter: TrialFilter = None,
) -> StudyPareto:
    """The completed trials in objective space, for a chart: every non-dominated feasible
    trial, at most ``max_points`` of the others (downsampled on the server), and the
    hypervolume of the feasible front over trial numbers when every objective has a
    ``reference``."""
    return pareto.study_pareto(store, tenant, study_id, max_points, filter)


@router.get("/points", response_model=StudyPoints, responses=problems(*STUDY))
def trial_points(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    state: Annotated[list[TrialState], Query()] = ["completed"],  # noqa: B006 (FastAPI copies)
    max_points: Annotated[int, Query(ge=10, le=10_000)] = 2000,
    filter: TrialFilter = None,
) -> StudyPoints:
    """The trials in ``state`` that pass ``filter``, with their parameters and values, for
    charts of parameters: at most ``max_points`` (spread evenly over trial numbers, plus each
    objective's best trials, when there are more)."""
    return points.study_points(store, tenant, study_id, state, max_points, filter)


@router.get("/engine", response_model=StudyEngine, responses=problems(*STUDY))
def engine(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    max_points: Annotated[
        int, Query(ge=10, le=10_000, description="Points per series at most.")
    ] = 2000,
) -> StudyEngine:
    """The engine panel: the optimizer's own quantities by trial number (for example
    TuRBO-ENN's trust-region length, LCBO's penalty and KKT residual, POM's probability of
    Pareto-optimality, mwgd's gradient norm, GP lengthscales, and every engine's time per
    ask), downsampled on the server, and its current state as facts."""
    return engine_panel.study_engine(store, tenant, study_id, max_points)


@router.get("/importance", response_model=StudyImportance, responses=problems(*STUDY))
def parameter_importance(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    objective: Annotated[
        str | None,
        Query(max_length=200, description="An objective's name; the first one by default."),
    ] = None,
    filter: TrialFilter = None,
) -> StudyImportance:
    """How much each parameter matters to ``objective``: fANOVA of a random forest (Optuna's
    default method) fitted on at most 2,000 completed trials that pass ``filter``, cached per
    study revision. Empty with fewer than 5 such trials; 422 for an objective the study does
    not have."""
    return importance.study_importance(store, tenant, study_id, objective, filter)


@router.get("/trials/{number}", response_model=TrialPublic, responses=problems(*TRIAL))
def get_trial(
    study_id: StudyId, number: TrialNumber, store: StoreDep, tenant: TenantDep
) -> TrialPublic:
    """One trial by number: its state, parameters, worker, lease expiry and results."""
    return trials.get_trial(store, tenant, study_id, number)


@router.post(
    "/trials/{number}/tell",
    response_model=TellResponse,
    responses=problems(*TRIAL_WRITE, *RESULTS, ProblemCode.CHECKPOINT_REQUIRED),
)
async def tell(
    request: Request,
    study_id: StudyId,
    number: TrialNumber,
    body: TellRequest,
    store: StoreDep,
    tenant: TenantDep,
    idem: IdemDep,
    admission: AdmissionDep,
) -> Response:
    """Finish the trial. Without ``ask``, the answer is the told trial (no ``next``). With
    ``ask`` (the body of ``POST .../ask``), the next trials are asked for once the tell has
    committed and come back in ``next``; if the ask part cannot serve (study not active,
    ``max_trials`` reached, engine busy), the tell stands, ``next.trials`` is empty and
    ``next.problem`` is the problem+json the ask would have answered. An ``Idempotency-Key``
    replay returns the stored combined answer without asking again."""
    told = await tell_ask.tell_soon(store, tenant, study_id, number, body, idem)
    if not isinstance(told, TellResponse):
        return written(told)
    # The ask part waits for the study's turn like an ask, holding no thread meanwhile.
    try:
        if suggestion_pool.may_serve(store, study_id):
            pooled = await suggestion_pool.serve(
                store,
                study_id,
                request,
                lambda: tell_ask.ask_after_from_pool(store, tenant, study_id, body, idem, told),
            )
            if pooled is not None:
                return written(pooled)
        return await admission.run(
            study_id,
            request,
            lambda: written(tell_ask.ask_after(store, tenant, study_id, body, idem, told)),
        )
    except ApiError as busy:
        # study_busy: the tell stands, ``next.problem`` says to ask again later.
        return written(await run_in_threadpool(tell_ask.unserved, store, tenant, idem, told, busy))
    except ClientGone:
        # The tell stands; a retry with the same key finds it and asks once.
        return Response(status_code=CLIENT_CLOSED_REQUEST)


@router.post(
    "/trials/{number}/report",
    response_model=MeasurementPublic,
    status_code=201,
    responses=problems(*TRIAL_WRITE, ProblemCode.NON_FINITE_VALUE),
)
def report(
    study_id: StudyId,
    number: TrialNumber,
    body: ReportRequest,
    store: StoreDep,
    tenant: TenantDep,
    idem: IdemDep,
) -> Response:
    """Store an intermediate measurement at ``step`` (201; a report at the same step
    replaces it); for a running trial it also extends the lease like a heartbeat. An
    ``Idempotency-Key`` replays the first answer."""
    return written(trials.report(store, tenant, study_id, number, body, idem))


@router.get(
    "/trials/{number}/measurements",
    response_model=list[MeasurementPublic],
    responses=problems(*TRIAL),
)
def measurements(
    study_id: StudyId, number: TrialNumber, store: StoreDep, tenant: TenantDep
) -> list[MeasurementPublic]:
    """The trial's intermediate measurements, by step."""
    return trials.list_measurements(store, tenant, study_id, number)


@router.get(
    "/trials/{number}/lineage",
    response_model=Lineage,
    responses=problems(*TRIAL, ProblemCode.NOT_A_SCHEDULER_STUDY),
)
def lineage(study_id: StudyId, number: TrialNumber, store: StoreDep, tenant: TenantDep) -> Lineage:
    """A scheduler study's unit: the units whose checkpoints led to trial ``number``,
    oldest first."""
    return units.lineage(store, tenant, study_id, number)


@router.post(
    "/trials/{number}/heartbeat",
    response_model=TrialPublic,
    responses=problems(*TRIAL_WRITE, ProblemCode.TRIAL_NOT_RUNNING, ProblemCode.TRIAL_REASSIGNED),
)
def heartbeat(
    study_id: StudyId,
    number: TrialNumber,
    store: StoreDep,
    tenant: TenantDep,
    idem: IdemDep,
    body: HeartbeatRequest | None = None,
) -> Response:
    """Extend a running trial's lease: by ``lease_seconds`` when given, else by the study's
    default, never shortening it. A ``stale`` trial not yet re-delivered is taken back.
    With ``worker_id``, a trial re-delivered to another worker is 409 ``trial_reassigned``:
    stop working on it. An ``Idempotency-Key`` replays the first answer."""
    return written(
        leases.heartbeat(store, tenant, study_id, number, body or HeartbeatRequest(), idem)
    )
