"""/v1/studies: create, list, get, update, delete, best, export, import, the event stream; for
schedulers the best member's schedule, the checkpoints and the population."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Header, Query, Response
from sse_starlette import EventSourceResponse

from client.models import (
    BestPublic,
    CheckpointsPublic,
    Lineage,
    ProblemCode,
    StudiesPage,
    StudyCreate,
    StudyExport,
    StudyPopulation,
    StudyPublic,
    StudyState,
    StudyUpdate,
)
from service import events, population, studies, transfer, units
from service.deps import IdemDep, StoreDep, TenantDep
from service.errors import problems
from service.routers.common import (
    CONFIG,
    JSON,
    RESULTS,
    STUDY,
    WRITE,
    StudyId,
    api_router,
    cursor_int,
    written,
)

router = api_router("/v1/studies", "studies")


@router.post(
    "",
    response_model=StudyPublic,
    status_code=201,
    responses={
        200: {"model": StudyPublic, "description": "A study of this name and config existed"},
        **problems(*WRITE, *CONFIG, ProblemCode.INVALID_STUDY, ProblemCode.STUDY_EXISTS),
    },
)
def create_study(body: StudyCreate, store: StoreDep, tenant: TenantDep, idem: IdemDep) -> Response:
    """Get-or-create by name: 201 with a new study, or 200 with the live study of that name
    when its config is the same (a retried create is safe); 409 ``study_exists`` when it
    has another config. An ``Idempotency-Key`` replays the first answer."""
    return written(studies.create_study(store, tenant, body, idem))


@router.get(
    "",
    response_model=StudiesPage,
    responses=problems(ProblemCode.VALIDATION_ERROR, ProblemCode.INVALID_CURSOR),
)
def list_studies(
    store: StoreDep,
    tenant: TenantDep,
    state: Annotated[list[StudyState] | None, Query(description="Any of these states.")] = None,
    engine: Annotated[str | None, Query(max_length=100, description="The engine's name.")] = None,
    q: Annotated[
        str | None,
        Query(max_length=256, description="A case-insensitive part of the study's name."),
    ] = None,
    sort: Annotated[
        studies.StudySort,
        Query(description="`trials`: the number of trials; ties in id order."),
    ] = "id",
    order: Literal["asc", "desc"] = "asc",
    cursor: Annotated[
        str | None, Query(description="The `next_cursor` of the previous page, same query.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> StudiesPage:
    """A page of the tenant's live studies, filtered and sorted; pass ``next_cursor`` as
    ``cursor`` (with the same query) for the next page until it is null."""
    page = studies.StudiesQuery(
        state or (), engine, q, sort, order == "desc", cursor_int(cursor), limit
    )
    return studies.list_studies(store, tenant, page)


@router.post(
    "/import",
    response_model=StudyPublic,
    status_code=201,
    responses=problems(
        *WRITE,
        *CONFIG,
        *RESULTS,
        ProblemCode.INVALID_STUDY,
        ProblemCode.STUDY_EXISTS,
        ProblemCode.INVALID_IMPORT,
    ),
)
def import_study(
    body: StudyExport,
    store: StoreDep,
    tenant: TenantDep,
    idem: IdemDep,
    name: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
) -> Response:
    """A new study from an export (``GET .../export``), with the same trial numbers, states
    and results; trials running when exported come back ``stale``, to be re-delivered to
    the next asker. ``name`` overrides the exported name."""
    return written(transfer.import_study(store, tenant, body, name, idem))


@router.get("/{study_id}", response_model=StudyPublic, responses=problems(*STUDY))
def get_study(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> StudyPublic:
    """The study with its trial counts and, for one objective, its best values."""
    return studies.get_study(store, tenant, study_id)


@router.patch("/{study_id}", response_model=StudyPublic, responses=problems(*WRITE, *STUDY))
def update_study(
    study_id: StudyId, body: StudyUpdate, store: StoreDep, tenant: TenantDep, idem: IdemDep
) -> Response:
    """Change the state (pause, resume, complete), merge metadata (a key set to null is
    removed), set or remove (null) ``max_trials``, ``ask_time_budget`` and
    ``max_staleness``, replace the notes. An ``Idempotency-Key`` replays the first answer."""
    return written(studies.update_study(store, tenant, study_id, body, idem))


@router.delete("/{study_id}", status_code=204, responses=problems(*STUDY))
def delete_study(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> Response:
    """Soft delete: the study and its trials are no longer served. Deleting a deleted study
    is 204 again (a retried DELETE succeeds); a study that never existed is 404."""
    studies.delete_study(store, tenant, study_id)
    return Response(status_code=204)


@router.get("/{study_id}/best", response_model=BestPublic, responses=problems(*STUDY))
def best(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> BestPublic:
    """One objective: the best feasible trial. Several: the feasible non-dominated set,
    with its hypervolume when every objective has a reference. With constraints and no
    feasible trial yet: no trials, ``feasible_found`` false, and the least violating trial."""
    return studies.best(store, tenant, study_id)


@router.get(
    "/{study_id}/best/schedule",
    response_model=Lineage,
    responses=problems(*STUDY, ProblemCode.NOT_A_SCHEDULER_STUDY, ProblemCode.NO_COMPLETED_UNIT),
)
def best_schedule(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> Lineage:
    """A scheduler study's (``pbt``, ``ipbt``) best completed unit with the units whose
    checkpoints led to it: the best member's hyperparameter schedule."""
    return units.best_schedule(store, tenant, study_id)


@router.get(
    "/{study_id}/checkpoints",
    response_model=CheckpointsPublic,
    responses=problems(*STUDY, ProblemCode.NOT_A_SCHEDULER_STUDY),
)
def checkpoints(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> CheckpointsPublic:
    """A scheduler study's checkpoints, split into those still needed (pinned) and those
    its workers may delete."""
    return units.checkpoints(store, tenant, study_id)


MaxUnits = Annotated[
    int, Query(ge=1, le=1000, description="Units at most: those of the highest numbers.")
]
MaxCheckpoints = Annotated[
    int, Query(ge=0, le=200, description="Checkpoints of each kind at most: the newest.")
]


@router.get(
    "/{study_id}/population",
    response_model=StudyPopulation,
    responses=problems(*STUDY, ProblemCode.NOT_A_SCHEDULER_STUDY),
)
def study_population(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    max_units: MaxUnits = 500,
    max_checkpoints: MaxCheckpoints = 100,
) -> StudyPopulation:
    """A scheduler study's (``pbt``, ``ipbt``) population, for charts: its most recent units,
    each with its member, steps, hyperparameters, score and the unit whose checkpoint it loaded
    (the lineage forest), the best unit, and its most recent checkpoints, pinned or
    releasable (as ``/checkpoints`` splits them)."""
    return population.study_population(store, tenant, study_id, max_units, max_checkpoints)


@router.get(
    "/{study_id}/export",
    response_model=StudyExport,
    responses={
        200: {
            "description": "The study as JSON (`format=json`, re-importable), or its trials as "
            "CSV (`format=csv`, one row per trial)",
            "content": {"text/csv": {"schema": {"type": "string"}}},
        },
        **problems(*STUDY),
    },
)
def export_study(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    format: Literal["json", "csv"] = "json",
) -> Response:
    """The study with every trial and measurement as JSON (``format=json``, accepted by
    ``POST /v1/studies/import``), or its trials as CSV (``format=csv``, one row per trial;
    cells that would start a spreadsheet formula are quoted)."""
    if format == "csv":
        return Response(transfer.export_csv(store, tenant, study_id), media_type="text/csv")
    return Response(
        transfer.export_study(store, tenant, study_id).model_dump_json(), media_type=JSON
    )


@router.get(
    "/{study_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: events.OPENAPI_RESPONSE,
        **problems(*STUDY, ProblemCode.INVALID_CURSOR),
    },
)
def study_events(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=256)] = None,
) -> EventSourceResponse:
    """Server-sent events of the study: ``trial_asked``, ``trial_told``, ``trial_failed``
    and ``study_state``, in commit order. Send the last event's id as ``Last-Event-ID`` to
    resume on any replica with nothing lost or repeated."""
    position = events.start(store, tenant, study_id, last_event_id)
    return EventSourceResponse(
        events.stream(store, tenant, study_id, position), ping=events.KEEP_ALIVE_SECONDS
    )
