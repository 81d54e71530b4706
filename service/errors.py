"""Errors the service raises; the app turns each into an application/problem+json response.

Every error has a stable ``code`` from ``client.models.ProblemCode`` that clients may branch
on, and the code gives the HTTP status; ``detail`` says what to fix. ``problems`` declares
the codes a route can answer with in the OpenAPI document.
"""

from __future__ import annotations

from typing import Any

from client.models import ProblemCode
from engines.errors import (
    EngineError,
    EngineOptionsError,
    EngineRetryable,
    EngineWorkTooLarge,
    SpaceError,
)

__all__ = ["PROBLEM", "ApiError", "ProblemCode", "engine_error", "problems", "unavailable"]

PROBLEM = "application/problem+json"


class ApiError(Exception):
    """An error answered with ``code``'s status; ``extra`` fields join the problem+json body,
    ``headers`` the response."""

    def __init__(
        self,
        code: ProblemCode,
        detail: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.code, self.detail, self.extra = code, detail, extra
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return self.code.status


def unavailable(detail: str, retry_after: float = 1.0) -> ApiError:
    """503: the same request may succeed after ``retry_after`` seconds."""
    return ApiError(
        ProblemCode.UNAVAILABLE,
        detail,
        headers={"Retry-After": str(max(1, round(retry_after)))},
        retry_after=retry_after,
    )


def engine_error(exc: EngineError) -> ApiError:
    """The answer to an error of the engines, the same at study creation and at ask."""
    if isinstance(exc, EngineRetryable):
        return unavailable(f"the engine could not answer now: {exc}")
    if isinstance(exc, SpaceError):
        return ApiError(ProblemCode.INVALID_SEARCH_SPACE, str(exc))
    if isinstance(exc, EngineOptionsError):
        return ApiError(ProblemCode.INVALID_ENGINE, str(exc))
    if isinstance(exc, EngineWorkTooLarge):
        return ApiError(ProblemCode.ENGINE_WORK_TOO_LARGE, str(exc))
    # EngineUnsupported, and the base class, which the engines do not raise themselves.
    return ApiError(ProblemCode.ENGINE_UNSUPPORTED, str(exc))


#: Where every error response's schema lives in the OpenAPI document (``service.app`` puts it
#: there).
PROBLEM_SCHEMA = {"$ref": "#/components/schemas/ProblemDetail"}


def problems(*codes: ProblemCode) -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses=`` declaring ``codes``, and ``internal_error`` (any route may fail),
    as problem+json responses: one per status, its description listing the codes."""
    by_status: dict[int, list[ProblemCode]] = {}
    for code in dict.fromkeys((*codes, ProblemCode.INTERNAL_ERROR)):
        by_status.setdefault(code.status, []).append(code)
    return {
        status: {
            "description": "problem+json, code " + ", ".join(f"`{c}`" for c in group),
            "content": {PROBLEM: {"schema": PROBLEM_SCHEMA}},
        }
        for status, group in sorted(by_status.items())
    }
