"""/v1/datasets: upload, list, read and delete the datasets tuning jobs train on."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from client.models import DatasetPublic, DatasetTask, ProblemCode
from service import datasets
from service.deps import IdemDep, StoreDep, TenantDep
from service.errors import problems
from service.routers.common import api_router, written

router = api_router("/v1/datasets", "datasets")
#: An uploaded dataset's id, or the name of an uploaded or bundled one.
DatasetRef = Annotated[
    str, Path(min_length=1, max_length=256, description="An id, or a dataset's name.")
]
#: A read of a dataset named in the path.
DATASET = (ProblemCode.VALIDATION_ERROR, ProblemCode.DATASET_NOT_FOUND)
UPLOAD_ERRORS = (
    ProblemCode.VALIDATION_ERROR,
    ProblemCode.INVALID_IDEMPOTENCY_KEY,
    ProblemCode.IDEMPOTENCY_KEY_REUSED,
    ProblemCode.CONFLICT,
    ProblemCode.DATASET_EXISTS,
    ProblemCode.DATASET_TOO_LARGE,
    ProblemCode.UNSUPPORTED_MEDIA_TYPE,
    ProblemCode.DATASET_EMPTY,
    ProblemCode.DATASET_UNREADABLE,
    ProblemCode.DATASET_RAGGED,
    ProblemCode.DATASET_NO_TARGET,
    ProblemCode.DATASET_TARGET_NOT_NUMERIC,
    ProblemCode.DATASET_SINGLE_CLASS,
)
_FIELD = {"type": "string", "minLength": 1, "maxLength": 256}
#: The upload's body in the OpenAPI document (the route reads it raw, so FastAPI cannot).
UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The CSV (UTF-8, a header row first), as the body or as the form "
        "field `file`; `name`, `target` and `task` as query parameters or form fields.",
        "content": {
            datasets.CSV: {"schema": {"type": "string"}},
            datasets.MULTIPART: {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "name": _FIELD,
                        "target": _FIELD,
                        "task": {"type": "string", "enum": ["classification", "regression"]},
                    },
                }
            },
        },
    }
}
NameQuery = Annotated[str | None, Query(description="The dataset's name (unique).")]
TargetQuery = Annotated[str | None, Query(description="The column to predict.")]


@router.post(
    "",
    response_model=DatasetPublic,
    status_code=201,
    responses=problems(*UPLOAD_ERRORS),
    openapi_extra=UPLOAD_BODY,
)
async def upload_dataset(
    request: Request,
    store: StoreDep,
    tenant: TenantDep,
    idem: IdemDep,
    name: NameQuery = None,
    target: TargetQuery = None,
    task: DatasetTask | None = None,
) -> Response:
    """Upload a CSV: a header row, then one row per example. Numeric columns are
    standardized, other columns one-hot encoded; a bad file is refused with a ``dataset_*``
    code and nothing is stored."""
    body = await request.body()
    fields = datasets.UploadFields(name, target, task)
    max_rows = request.app.state.settings.max_dataset_rows
    content_type = request.headers.get("content-type")
    return written(
        await run_in_threadpool(
            datasets.upload_dataset, store, tenant, content_type, body, fields, max_rows, idem
        )
    )


@router.get("", response_model=list[DatasetPublic], responses=problems())
def list_datasets(store: StoreDep, tenant: TenantDep) -> list[DatasetPublic]:
    """The uploaded datasets, then the ones bundled with scikit-learn (``builtin``)."""
    return datasets.list_datasets(store, tenant)


@router.get("/{dataset}", response_model=DatasetPublic, responses=problems(*DATASET))
def get_dataset(dataset: DatasetRef, store: StoreDep, tenant: TenantDep) -> DatasetPublic:
    """An uploaded or built-in dataset, by id or name."""
    return datasets.get_dataset(store, tenant, dataset)


@router.get(
    "/{dataset}/csv",
    response_class=Response,
    responses={
        200: {"content": {datasets.CSV: {"schema": {"type": "string"}}}},
        **problems(*DATASET),
    },
)
def dataset_csv(dataset: DatasetRef, store: StoreDep, tenant: TenantDep) -> Response:
    """An uploaded dataset's CSV, the bytes as uploaded (the job workers read it here)."""
    return Response(datasets.dataset_csv(store, tenant, dataset), media_type=datasets.CSV)


@router.delete(
    "/{dataset}",
    status_code=204,
    responses=problems(*DATASET, ProblemCode.DATASET_IN_USE),
)
def delete_dataset(dataset: DatasetRef, store: StoreDep, tenant: TenantDep) -> Response:
    """Delete an uploaded dataset; 409 ``dataset_in_use`` while a job uses it."""
    datasets.delete_dataset(store, tenant, dataset)
    return Response(status_code=204)
