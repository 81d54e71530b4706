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
    return written(transfer.import_study(store, tenant, body, name, idem))


@router.get("/{study_id}", response_model=StudyPublic, responses=problems(*STUDY))
def get_study(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> StudyPublic:
    return studies.get_study(store, tenant, study_id)


@router.patch("/{study_id}", response_model=StudyPublic, responses=problems(*WRITE, *STUDY))
def update_study(
    study_id: StudyId, body: StudyUpdate, store: StoreDep, tenant: TenantDep, idem: IdemDep
) -> Response:
    return written(studies.update_study(store, tenant, study_id, body, idem))


@router.delete("/{study_id}", status_code=204, responses=problems(*STUDY))
def delete_study(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> Response:
    studies.delete_study(store, tenant, study_id)
    return Response(status_code=204)


@router.get("/{study_id}/best", response_model=BestPublic, responses=problems(*STUDY))
def best(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> BestPublic:
    return studies.best(store, tenant, study_id)


@router.get(
    "/{study_id}/best/schedule",
    response_model=Lineage,
    responses=problems(*STUDY, ProblemCode.NOT_A_SCHEDULER_STUDY, ProblemCode.NO_COMPLETED_UNIT),
)
def best_schedule(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> Lineage:
    return units.best_schedule(store, tenant, study_id)


@router.get(
    "/{study_id}/checkpoints",
    response_model=CheckpointsPublic,
    responses=problems(*STUDY, ProblemCode.NOT_A_SCHEDULER_STUDY),
)
def checkpoints(study_id: StudyId, store: StoreDep, tenant: TenantDep) -> CheckpointsPublic:
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
    position = events.start(store, tenant, study_id, last_event_id)
    return EventSourceResponse(
        events.stream(store, tenant, study_id, position), ping=events.KEEP_ALIVE_SECONDS
    )
