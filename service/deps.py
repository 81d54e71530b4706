"""Request dependencies: the store, the caller (its tenant and scope), and the idempotency key
of a POST."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from client.key_models import KeyScope
from service.admission import AskAdmission
from service.api_keys import KeyCache, Principal
from service.artifacts import ArtifactStore
from service.db.models import DEFAULT_TENANT_ID
from service.errors import ApiError, ProblemCode
from service.idempotency import IdemKey
from service.rate_limit import RateLimiter, retry_after
from service.store import Store


# Dependencies that do no I/O are async so that FastAPI runs them in the event loop instead of
# sending each to the thread pool.
async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_artifacts(request: Request) -> ArtifactStore:
    return request.app.state.artifacts


async def get_admission(request: Request) -> AskAdmission:
    return request.app.state.admission


#: The OpenAPI security scheme; its own errors are off so that a missing key is our problem+json.
bearer = HTTPBearer(
    auto_error=False,
    description="An API key (`asktell keys create`), unless the server runs with auth off.",
)
#: What a request acts as when auth is off: the default tenant, with every scope.
KEYLESS = Principal(DEFAULT_TENANT_ID, "admin")
_READS = ("GET", "HEAD")


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> Principal:
    """The caller, from its key; a GET or HEAD needs a ``read`` key, other methods ``write``.

    EventSource cannot send headers: a GET may carry the key as ``?access_token=`` instead."""
    if not request.app.state.settings.auth_required:
        return KEYLESS
    key = credentials.credentials if credentials is not None else None
    if key is None and request.method in _READS:
        key = request.query_params.get("access_token")
    if not key:
        raise _unauthorized("this server needs an API key: send Authorization: Bearer <key>")
    store: Store = request.app.state.store
    cache: KeyCache = request.app.state.key_cache
    principal = await run_in_threadpool(cache.principal, store.db, key)
    if principal is None:
        raise _unauthorized("the API key is unknown or revoked")
    needed: KeyScope = "read" if request.method in _READS else "write"
    if not principal.allows(needed):
        raise ApiError(
            ProblemCode.INSUFFICIENT_SCOPE, f"a {principal.scope} key cannot send {request.method}"
        )
    return principal


async def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if not principal.allows("admin"):
        raise ApiError(ProblemCode.INSUFFICIENT_SCOPE, "only admin keys manage keys")
    return principal


def _unauthorized(detail: str) -> ApiError:
    return ApiError(ProblemCode.UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


async def limit_rate(
    request: Request, principal: Annotated[Principal, Depends(get_principal)]
) -> None:
    """429 ``rate_limited`` when the caller (its key; its address without one) is over
    ``ASKTELL_RATE_LIMIT`` in this process."""
    limiter: RateLimiter | None = request.app.state.rate_limiter
    if limiter is None:
        return
    if principal.key_id is not None:
        caller = f"key {principal.key_id}"
    else:
        caller = f"address {request.client.host if request.client else '-'}"
    wait = limiter.take(caller)
    if wait is not None:
        raise ApiError(
            ProblemCode.RATE_LIMITED,
            f"over {limiter.rate:g} requests per second for this {caller.split()[0]}; "
            f"retry after {wait:.2f} s",
            headers={"Retry-After": retry_after(wait)},
            retry_after=wait,
        )


async def get_tenant(principal: Annotated[Principal, Depends(get_principal)]) -> int:
    return principal.tenant_id


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
ArtifactsDep = Annotated[ArtifactStore, Depends(get_artifacts)]
AdmissionDep = Annotated[AskAdmission, Depends(get_admission)]
AdminDep = Annotated[Principal, Depends(get_admin)]
