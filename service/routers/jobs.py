"""/v1/jobs: tuning jobs the server runs itself: create, list, get (with progress), cancel,
their event stream, the model of a succeeded job and its predictions."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Path, Query, Request, Response
from sse_starlette import EventSourceResponse

from client.models import JobCreate, JobPublic, JobsPage, PredictRequest, PredictResponse
from service.deps import ArtifactsDep, IdemDep, StoreDep, TenantDep
from service.errors import ProblemCode, problems
from service.jobs import events, jobs, results
from service.routers.common import CONFIG, WRITE, api_router, cursor_int, written
from service.settings import Settings, get_settings

router = api_router("/v1/jobs", "jobs")

JobId = Annotated[int, Path(ge=0, le=2**31 - 1)]
JOB = (ProblemCode.VALIDATION_ERROR, ProblemCode.JOB_NOT_FOUND)


async def _settings(request: Request) -> Settings:
    return getattr(request.app.state, "settings", None) or get_settings()


SettingsDep = Annotated[Settings, Depends(_settings)]


@router.post(
    "",
    response_model=JobPublic,
    status_code=201,
    responses=problems(
        *WRITE,
        *CONFIG,
        ProblemCode.INVALID_STUDY,
        ProblemCode.INVALID_JOB,
        ProblemCode.UNKNOWN_OPTIMIZER,
        ProblemCode.UNKNOWN_WORKLOAD,
        ProblemCode.EXECUTOR_UNAVAILABLE,
        ProblemCode.DATASET_NOT_FOUND,
        ProblemCode.JOB_EXISTS,
    ),
)
def create_job(
    body: JobCreate, store: StoreDep, tenant: TenantDep, idem: IdemDep, settings: SettingsDep
) -> Response:
    """Create a queued job and its study (``job-<name>``); a server process with
    ``ASKTELL_RUN_JOBS`` takes its lease and runs its workers."""
    return written(jobs.create_job(store, tenant, body, settings, idem))


@router.get(
    "",
    response_model=JobsPage,
    responses=problems(ProblemCode.VALIDATION_ERROR, ProblemCode.INVALID_CURSOR),
)
def list_jobs(
    store: StoreDep,
    tenant: TenantDep,
    cursor: Annotated[str | None, Query(description="The `next_cursor` of the last page.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobsPage:
    """A page of the tenant's jobs; pass ``next_cursor`` as ``cursor`` for
    the next page until it is null."""
    return jobs.list_jobs(store, tenant, cursor_int(cursor), limit)


@router.get("/{job_id}", response_model=JobPublic, responses=problems(*JOB))
def get_job(job_id: JobId, store: StoreDep, tenant: TenantDep) -> JobPublic:
    """The job with its state and progress."""
    return jobs.get_job(store, tenant, job_id)


@router.post(
    "/{job_id}/cancel",
    response_model=JobPublic,
    responses=problems(*WRITE, *JOB, ProblemCode.JOB_FINISHED),
)
def cancel_job(job_id: JobId, store: StoreDep, tenant: TenantDep, idem: IdemDep) -> Response:
    """Stop the job: its workers are stopped within a few seconds, then it is ``cancelled``."""
    return written(jobs.cancel_job(store, tenant, job_id, idem))


@router.get(
    "/{job_id}/events",
    response_class=EventSourceResponse,
    responses={200: events.OPENAPI_RESPONSE, **problems(*JOB, ProblemCode.INVALID_CURSOR)},
)
def job_events(
    job_id: JobId,
    store: StoreDep,
    tenant: TenantDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=256)] = None,
) -> EventSourceResponse:
    """Server-sent events of the job's study; send the last event's id as ``Last-Event-ID``
    to resume with nothing lost or repeated."""
    position = events.start(store, tenant, job_id, last_event_id)
    return EventSourceResponse(
        events.stream(store, tenant, job_id, position), ping=events.KEEP_ALIVE_SECONDS
    )


@router.get(
    "/{job_id}/model",
    response_class=Response,
    responses={
        200: {
            "description": "The model file (torch.load-able).",
            "content": {"application/octet-stream": {}},
        },
        **problems(*JOB, ProblemCode.JOB_NOT_SUCCEEDED, ProblemCode.ARTIFACT_NOT_FOUND),
    },
)
def job_model(
    job_id: JobId, store: StoreDep, tenant: TenantDep, artifacts: ArtifactsDep
) -> Response:
    """The best model of a succeeded job: ``torch.load`` gives a dict with the workload's
    name, its checkpoint bytes and the preprocessor (see the README)."""
    data = results.model_bytes(store, artifacts, tenant, job_id)
    headers = {"Content-Disposition": f'attachment; filename="job-{job_id}-model.pt"'}
    return Response(data, media_type="application/octet-stream", headers=headers)


@router.post(
    "/{job_id}/predict",
    response_model=PredictResponse,
    responses=problems(
        *WRITE,
        *JOB,
        ProblemCode.JOB_NOT_SUCCEEDED,
        ProblemCode.INVALID_PREDICT_ROWS,
        ProblemCode.INVALID_JOB,
        ProblemCode.ARTIFACT_NOT_FOUND,
    ),
)
def predict(
    job_id: JobId,
    body: PredictRequest,
    store: StoreDep,
    tenant: TenantDep,
    artifacts: ArtifactsDep,
) -> PredictResponse:
    """Predictions of the job's best model: class labels or regression values."""
    return results.predict(store, artifacts, tenant, job_id, body)
