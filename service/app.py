"""The FastAPI application: routers, problem+json errors, body and header limits, security
headers, rate limits, CORS, start-up checks."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from client.models import ProblemCode, ProblemDetail
from service import dashboard, docs
from service.admission import AskAdmission
from service.api_keys import KeyCache, auth_line
from service.artifacts import ArtifactStore, artifacts_root
from service.db.migrate import check_current, upgrade
from service.db.session import Database
from service.engine_pool import EnginePool
from service.errors import PROBLEM, ApiError, problems
from service.http_guards import BodyTimeout, HeaderLimits, SecurityHeaders
from service.jobs.runner import JobRunner
from service.leases import Reaper
from service.observability import (
    RequestContext,
    configure_logging,
    state_registry,
)
from service.pool_refill import PoolRefiller
from service.rate_limit import RateLimiter
from service.routers import artifacts as artifacts_router
from service.routers import datasets as datasets_router
from service.routers import engines, health, notes, samplers, studies, trials
from service.routers import jobs as jobs_router
from service.routers import keys as keys_router
from service.settings import Settings, get_settings
from service.store import Store

log = logging.getLogger("asktell")

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def problem(
    code: ProblemCode, detail: str, status: int | None = None, **extra: Any
) -> JSONResponse:
    """The problem+json response of ``code``, with its own status unless ``status`` is given."""
    status = code.status if status is None else status
    body = {
        "type": "about:blank",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


class AskTellAPI(FastAPI):
    def openapi(self) -> dict[str, Any]:
        """The generated document, with the ``ProblemDetail`` schema that every route's
        problem+json responses refer to (``service.errors.problems``)."""
        document = super().openapi()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        schemas.setdefault("ProblemDetail", ProblemDetail.model_json_schema())
        declare_auth_problems(document)
        declare_transport_problems(document)
        return document

    def build_middleware_stack(self) -> ASGIApp:
        """Starlette's stack inside the request id and the security headers: the 500 that its
        outermost layer (``ServerErrorMiddleware``) answers carries them too, and the error's
        log record its request id."""
        return SecurityHeaders(RequestContext(super().build_middleware_stack()))


def declare_auth_problems(document: dict[str, Any]) -> None:
    """Add to each operation that takes an API key (``security``) its 401, and its 403 when a
    key's scope can refuse it: any method but GET, and key management."""
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            if not operation.get("security"):
                continue
            codes = [ProblemCode.UNAUTHORIZED]
            if method != "get" or path.startswith("/v1/keys"):
                codes.append(ProblemCode.INSUFFICIENT_SCOPE)
            for status, response in problems(*codes).items():
                operation.setdefault("responses", {}).setdefault(str(status), response)


def declare_transport_problems(document: dict[str, Any]) -> None:
    """Add to every operation its 431 (the header limits), and to each that takes a body its
    408 (a stalled body): the middleware answers them before any route."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            codes = [ProblemCode.HEADERS_TOO_LARGE]
            if "requestBody" in operation:
                codes.append(ProblemCode.REQUEST_TIMEOUT)
            for status, response in problems(*codes).items():
                operation.setdefault("responses", {}).setdefault(str(status), response)


def open_database(settings: Settings) -> Database:
    """Open the database; upgrade an embedded SQLite file, refuse a PostgreSQL one behind."""
    db = Database(settings.database_url, settings.pool_size)
    if db.is_sqlite:
        upgrade(db.engine)
    else:
        check_current(db.engine)
    return db


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(settings.log_format)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = open_database(settings)
        engine_pool = EnginePool(settings.engine_processes, settings.ask_time_budget)
        store = Store(db, settings.history_cache_bytes, engine_pool)
        app.state.store = store
        start_operations(app, store, settings)
        app.state.artifacts = ArtifactStore(artifacts_root(settings))
        log.info(auth_line(settings))
        reaper = Reaper(store, settings.reaper_interval)
        reaper.start()
        runner = start_job_runner(app, store, settings)
        try:
            yield
        finally:
            if runner is not None:
                runner.stop()
            app.state.refiller.stop()
            reaper.stop()
            engine_pool.close()
            db.dispose()

    app = AskTellAPI(
        title="asktell",
        version="0.1.0",
        summary="Bayesian and black-box optimization over HTTP: ask for trials, tell results.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    docs.install(app)
    app.include_router(health.router)
    app.include_router(studies.router)
    app.include_router(trials.router)
    app.include_router(notes.router)
    app.include_router(samplers.router)
    app.include_router(engines.router)
    app.include_router(dashboard.router)
    app.include_router(jobs_router.router)
    app.include_router(artifacts_router.router)
    app.include_router(datasets_router.router)
    app.include_router(keys_router.router)
    app.state.key_cache = KeyCache()
    rate = settings.effective_rate_limit
    app.state.rate_limiter = RateLimiter(rate, settings.rate_burst) if rate > 0 else None
    _install_errors(app)
    _install_middleware(app, settings)
    return app


def _install_middleware(app: FastAPI, settings: Settings) -> None:
    """The body and header limits and CORS; the last added runs first. RequestContext and
    SecurityHeaders wrap all of these (``AskTellAPI.build_middleware_stack``)."""
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        routes=(
            ("POST", "/v1/datasets", settings.max_dataset_bytes, ProblemCode.DATASET_TOO_LARGE),
            ("PUT", "/v1/artifacts/", settings.max_artifact_bytes, ProblemCode.BODY_TOO_LARGE),
        ),
    )
    app.add_middleware(BodyTimeout, seconds=settings.body_timeout, problem=problem)
    app.add_middleware(
        HeaderLimits,
        max_headers=settings.max_headers,
        max_bytes=settings.max_header_bytes,
        problem=problem,
    )
    if settings.cors_origin_list:
        # Outermost of the app's own: a preflight is answered before any limit or key check,
        # and every answer (errors too) carries the CORS headers.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["*"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "X-Request-ID"],
            expose_headers=["Retry-After", "X-Request-ID"],
            max_age=600,
        )


def start_operations(app: FastAPI, store: Store, settings: Settings) -> None:
    """The ask admission, the refills of suggestion pools (``ASKTELL_SUGGESTION_POOL``) and the
    metrics of this process, and its startup line."""
    app.state.admission = AskAdmission(settings.ask_queue_per_study, settings.ask_threads)
    # Its threads start with the first refill: none when the pool is off.
    app.state.refiller = PoolRefiller(store)
    if settings.suggestion_pool:
        store.refill_pool = app.state.refiller.request
        store.pool_refills = app.state.refiller
    app.state.metrics = state_registry(store, app.state.admission)
    docs_url = f"{settings.self_url}/docs"
    log.info("asktell serving database %s; API docs at %s", store.db.engine.url, docs_url)


def start_job_runner(app: FastAPI, store: Store, settings: Settings) -> JobRunner | None:
    """The job runner of this process (``ASKTELL_RUN_JOBS``), started; None when off."""
    if not settings.run_jobs:
        return None
    runner = JobRunner(store, lambda: app.state.artifacts, settings)
    runner.start()
    app.state.job_runner = runner
    return runner


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        response = problem(exc.code, exc.detail, **exc.extra)
        response.headers.update(exc.headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(_is_malformed_body(e) for e in errors):
            return problem(
                ProblemCode.MALFORMED_JSON,
                "the request body is not a valid JSON object; "
                "send JSON with Content-Type: application/json",
            )
        details = []
        for e in errors:
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            details.append({"field": where, "message": e.get("msg", "")})
        summary = "; ".join(f"{d['field'] or 'body'}: {d['message']}" for d in details[:5])
        return problem(ProblemCode.VALIDATION_ERROR, summary, errors=details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, ProblemCode.HTTP_ERROR)
        detail = str(exc.detail)
        if code is ProblemCode.MALFORMED_JSON:
            detail = (
                "the request body could not be read as JSON: it is not UTF-8, or nests too deep"
            )
        response = problem(code, detail, exc.status_code)
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:
            response.headers["Allow"] = ", ".join(_allowed_methods(app, request))
        return response

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(ProblemCode.INTERNAL_ERROR, "the server failed; the error is logged")


#: Starlette's and FastAPI's own HTTP errors: a body that is not text (say, invalid UTF-8), no
#: route, a wrong method; any other status is ``http_error``.
_HTTP_CODES = {
    400: ProblemCode.MALFORMED_JSON,
    404: ProblemCode.NOT_FOUND,
    405: ProblemCode.METHOD_NOT_ALLOWED,
}


#: The methods a 405's Allow may name.
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """The methods some route answers on the request's path. HTTP requires them in a 405's
    Allow; Starlette names only those of the first route that matched the path."""
    return [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in app.routes
        )
    ]


def _is_malformed_body(error: dict[str, Any]) -> bool:
    if error.get("type") == "json_invalid":
        return True
    # A body that is not JSON at all reaches the model as raw bytes or text.
    return tuple(error.get("loc", ())) == ("body",) and isinstance(error.get("input"), bytes | str)


class BodyLimit:
    """Reject request bodies over their route's limit with 413, whether or not Content-Length
    is set. ``routes`` raise the limit of some routes: ``(method, path, bytes, code)``, where a
    path ending in ``/`` is a prefix; every other request gets ``max_bytes``."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        routes: tuple[tuple[str, str, int, ProblemCode], ...] = (),
    ) -> None:
        self.app, self.max_bytes, self.routes = app, max_bytes, routes

    def _limit(self, scope: Scope) -> tuple[int, ProblemCode]:
        method, path = scope.get("method", ""), scope.get("path", "")
        for route_method, route_path, max_bytes, code in self.routes:
            matches = (
                path.startswith(route_path)
                if route_path.endswith("/")
                else path
                in (
                    route_path,
                    route_path + "/",
                )
            )
            if method == route_method and matches:
                return max_bytes, code
        return self.max_bytes, ProblemCode.BODY_TOO_LARGE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes, code = self._limit(scope)
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > max_bytes:
                await self._too_large(scope, receive, send, max_bytes, code)
                return
        seen = 0
        rejected = False

        async def limited() -> Message:
            nonlocal seen, rejected
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes and not rejected:
                    # Answer 413 now and tell the app the client is gone; it stops reading.
                    rejected = True
                    await self._too_large(scope, receive, send, max_bytes, code)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not rejected:
                await send(message)

        try:
            await self.app(scope, limited, guarded_send)
        except Exception:
            if not rejected:
                raise

    async def _too_large(
        self, scope: Scope, receive: Receive, send: Send, max_bytes: int, code: ProblemCode
    ) -> None:
        response = problem(code, f"the request body is over {max_bytes} bytes")
        await response(scope, receive, send)
