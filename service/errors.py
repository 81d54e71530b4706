"""Errors the service raises; the app turns each into an application/problem+json response.

Every 4xx has a stable ``code`` that clients may branch on; ``detail`` says what to fix.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.extra = status, code, detail, extra
        self.headers: dict[str, str] = {}


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} does not exist")


def invalid(code: str, detail: str, **extra: Any) -> ApiError:
    return ApiError(422, code, detail, **extra)


def conflict(code: str, detail: str, **extra: Any) -> ApiError:
    return ApiError(409, code, detail, **extra)


def unavailable(detail: str, retry_after: float = 1.0) -> ApiError:
    err = ApiError(503, "unavailable", detail, retry_after=retry_after)
    err.headers["Retry-After"] = str(max(1, round(retry_after)))
    return err
