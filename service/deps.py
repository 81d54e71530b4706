"""Request dependencies: the store, the tenant, and the idempotency key of a POST."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from service.db.models import DEFAULT_TENANT_ID
from service.errors import ApiError, ProblemCode
from service.idempotency import IdemKey
from service.store import Store


# Dependencies that do no I/O are async so that FastAPI runs them in the event loop instead of
# sending each to the thread pool.
async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_tenant() -> int:
    # One tenant until API keys land; every table already carries tenant ids.
    return DEFAULT_TENANT_ID


async def get_idempotency_key(
    request: Request,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> IdemKey | None:
    if idempotency_key is None:
        return None
    if not idempotency_key.strip():
        raise ApiError(ProblemCode.INVALID_IDEMPOTENCY_KEY, "the Idempotency-Key header is empty")
    body = await request.body()
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return IdemKey.build(idempotency_key, request.method, target, body)


StoreDep = Annotated[Store, Depends(get_store)]
TenantDep = Annotated[int, Depends(get_tenant)]
IdemDep = Annotated[IdemKey | None, Depends(get_idempotency_key)]
