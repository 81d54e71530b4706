"""/v1/artifacts/{key}: opaque files (checkpoints, trained models) under path-like keys.

The bodies are raw bytes (``application/octet-stream``), not JSON: a PUT streams its body to a
temporary file renamed over the key's file once complete; a GET streams the file back.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Request, Response, status
from fastapi.responses import StreamingResponse
from starlette.convertors import PathConvertor, register_url_convertor

from client.artifact_models import ArtifactPublic
from client.models import ProblemCode
from service import artifacts
from service.deps import ArtifactsDep, TenantDep
from service.errors import problems
from service.routers.common import api_router

router = api_router("/v1/artifacts", "artifacts")


class _AnyKeyConvertor(PathConvertor):
    """Starlette's ``path`` without its blind spot: ``.*`` stops at a newline, so a key holding
    one matched no route and got a bare 404. Every key reaches the handler, which answers a bad
    one with ``invalid_artifact_key``."""

    regex = "(?s:.*)"


register_url_convertor("artifact_key", _AnyKeyConvertor())

OCTETS = artifacts.OCTET_STREAM
_BINARY = {OCTETS: {"schema": {"type": "string", "format": "binary"}}}
ArtifactKey = Annotated[
    str,
    Path(
        description="A path of segments made of A-Z a-z 0-9 . _ - (not `.` or `..`) joined by `/`, "
        "e.g. `jobs/3/trial-7.pt`.",
        examples=["jobs/3/trial-7.pt"],
    ),
]
_KEY = (ProblemCode.INVALID_ARTIFACT_KEY, ProblemCode.VALIDATION_ERROR)
_PUT_RESPONSES: dict[int | str, dict[str, Any]] = {
    201: {"description": "The artifact is stored under a key that was free."},
    200: {"description": "The artifact replaced the one under the key.", "model": ArtifactPublic},
    **problems(*_KEY, ProblemCode.BODY_TOO_LARGE),
}


@router.put(
    "/{key:artifact_key}",
    status_code=status.HTTP_201_CREATED,
    response_model=ArtifactPublic,
    responses=_PUT_RESPONSES,
    openapi_extra={"requestBody": {"required": True, "content": _BINARY}},
)
async def put_artifact(
    key: ArtifactKey, request: Request, store: ArtifactsDep, tenant: TenantDep, response: Response
) -> ArtifactPublic:
    """Store the request body (raw bytes, any size up to the server's `max_artifact_bytes`)
    under `key`: 201 for a new key, 200 when it replaces an artifact. The write is atomic: a
    reader gets the old bytes or the new, and a failed upload changes nothing."""
    info = await artifacts.receive(store, tenant, key, request.stream())
    response.status_code = status.HTTP_201_CREATED if info.created else status.HTTP_200_OK
    return ArtifactPublic(key=key, size=info.size)


@router.get(
    "/{key:artifact_key}",
    response_class=StreamingResponse,
    responses={
        200: {"description": "The artifact's bytes.", "content": _BINARY},
        **problems(*_KEY, ProblemCode.ARTIFACT_NOT_FOUND),
    },
)
def get_artifact(key: ArtifactKey, store: ArtifactsDep, tenant: TenantDep) -> StreamingResponse:
    """The bytes stored under `key`, as `application/octet-stream`."""
    return artifacts.download(store, tenant, key)


@router.delete(
    "/{key:artifact_key}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=problems(*_KEY, ProblemCode.ARTIFACT_NOT_FOUND),
)
def delete_artifact(key: ArtifactKey, store: ArtifactsDep, tenant: TenantDep) -> Response:
    """Remove the artifact under `key`."""
    artifacts.remove(store, tenant, key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
