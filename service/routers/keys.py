"""API keys of the caller's tenant: create, list, revoke (admin keys only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Request

from client.key_models import ApiKeyCreate, ApiKeyCreated, ApiKeyPublic
from service import api_keys
from service.deps import AdminDep, StoreDep
from service.errors import ProblemCode, problems
from service.routers.common import api_router

router = api_router("/v1/keys", "keys")

KeyId = Annotated[int, Path(ge=0, le=2**31 - 1)]


@router.post(
    "",
    status_code=201,
    response_model=ApiKeyCreated,
    responses=problems(
        ProblemCode.MALFORMED_JSON, ProblemCode.BODY_TOO_LARGE, ProblemCode.VALIDATION_ERROR
    ),
)
def create_key(body: ApiKeyCreate, store: StoreDep, admin: AdminDep) -> ApiKeyCreated:
    """A new key of the caller's tenant. Its secret (``key``) is in this answer only: the server
    keeps its sha256."""
    return api_keys.create_key(store.db, admin.tenant_id, body.name, body.scope)


@router.get("", response_model=list[ApiKeyPublic], responses=problems())
def list_keys(store: StoreDep, admin: AdminDep) -> list[ApiKeyPublic]:
    """The keys of the caller's tenant, revoked ones included, without their secrets."""
    return api_keys.list_keys(store.db, admin.tenant_id)


@router.delete(
    "/{key_id}",
    response_model=ApiKeyPublic,
    responses=problems(ProblemCode.VALIDATION_ERROR, ProblemCode.NOT_FOUND),
)
def revoke_key(key_id: KeyId, request: Request, store: StoreDep, admin: AdminDep) -> ApiKeyPublic:
    """Revoke a key of the caller's tenant: it stops working at once on this server process,
    within a few seconds on the others (``service.api_keys.CACHE_SECONDS``)."""
    revoked = api_keys.revoke_key(store.db, key_id, admin.tenant_id)
    request.app.state.key_cache.clear()
    return revoked
