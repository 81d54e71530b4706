"""Errors raised by the asktell client.

AsktellError
├── TransportError        the server could not be reached or did not answer (httpx errors)
└── ApiError              the server answered with a problem+json error
    ├── InvalidRequest    400, 413, 422: the request is wrong; ``detail`` says what to fix
    ├── NotFound          404
    ├── Conflict          409 (a finished trial, a study name taken, a reused key)
    └── Unavailable       429, 503: retried by the client, raised when retries run out
ClientClosed (RuntimeError): the client was used after ``close()``.
"""

from __future__ import annotations

from typing import Any


class AsktellError(Exception):
    """Base class of every error the client raises on purpose."""


class TransportError(AsktellError):
    """The request did not get an HTTP answer (connection refused, timeout, protocol error)."""


class ApiError(AsktellError):
    def __init__(self, status: int, code: str, detail: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail, self.body = status, code, detail, body


class InvalidRequest(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class Unavailable(ApiError):
    pass


class ClientClosed(RuntimeError):
    """The client was closed; create a new one."""


def error_for(status: int, body: dict[str, Any]) -> ApiError:
    code = str(body.get("code", "http_error"))
    detail = str(body.get("detail", body))
    cls: type[ApiError] = {404: NotFound, 409: Conflict, 429: Unavailable, 503: Unavailable}.get(
        status, InvalidRequest if 400 <= status < 500 else ApiError
    )
    return cls(status, code, detail, body)
