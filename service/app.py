"""The FastAPI application: routers, problem+json errors, body limit, start-up checks."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from client.models import ProblemCode, ProblemDetail
from service import dashboard, docs
from service.db.migrate import check_current, upgrade
from service.db.session import Database
from service.errors import PROBLEM, ApiError
from service.leases import Reaper
from service.routers import engines, health, notes, samplers, studies, trials
from service.settings import Settings, get_settings
from service.store import Store

log = logging.getLogger("asktell")

_TITLES = {
    400: "Bad Request",
    404: "Not Found",
    409: "Conflict",
    413: "Payload Too Large",
    422: "Unprocessable Content",
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
        return document


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

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = open_database(settings)
        store = Store(db, settings.history_cache_bytes)
        app.state.store = store
        reaper = Reaper(store, settings.reaper_interval)
        reaper.start()
        try:
            yield
        finally:
            reaper.stop()
            db.dispose()

    app = AskTellAPI(
        title="asktell",
        version="0.1.0",
        summary="Bayesian and black-box optimization over HTTP: ask for trials, tell results.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    docs.install(app)
    app.include_router(health.router)
    app.include_router(studies.router)
    app.include_router(trials.router)
    app.include_router(notes.router)
    app.include_router(samplers.router)
    app.include_router(engines.router)
    app.include_router(dashboard.router)
    _install_errors(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app


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
    """Reject request bodies over ``max_bytes`` with 413, whether or not Content-Length is set."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        seen = 0
        rejected = False

        async def limited() -> Message:
            nonlocal seen, rejected
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes and not rejected:
                    # Answer 413 now and tell the app the client is gone; it stops reading.
                    rejected = True
                    await self._too_large(scope, receive, send)
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

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(
            ProblemCode.BODY_TOO_LARGE, f"the request body is over {self.max_bytes} bytes"
        )
        await response(scope, receive, send)
