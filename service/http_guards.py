"""ASGI middleware that guards the app under any server: security headers on every response,
the header size and count limits (431), and the pace of a request body (408).

``asktell serve``'s HTTP protocol (``service.transport``) also stops reading oversized headers
and slow header senders before the app sees them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from client.models import ProblemCode

#: Headers every response carries. API answers are JSON or text: no page of this origin may
#: frame them, no browser may guess their type, and no Referer leaves the dashboard.
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
#: The Content-Security-Policy of a response that does not set its own: nothing may load.
API_CSP = "default-src 'none'; frame-ancestors 'none'"
_CSP = b"content-security-policy"


class SecurityHeaders:
    """Add ``SECURITY_HEADERS`` to every response, and ``API_CSP`` unless the response has its
    own Content-Security-Policy (the dashboard's and the docs' pages do)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(SECURITY_HEADERS)
                if not any(name.lower() == _CSP for name, _ in headers):
                    headers.append((_CSP, API_CSP.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HeaderLimits:
    """Answer 431 ``headers_too_large`` to a request with more than ``max_headers`` header
    lines or more than ``max_bytes`` of request target and headers."""

    def __init__(
        self,
        app: ASGIApp,
        max_headers: int,
        max_bytes: int,
        problem: Callable[[ProblemCode, str], Response],
    ) -> None:
        self.app, self.max_headers, self.max_bytes = app, max_headers, max_bytes
        self.problem = problem

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope.get("headers", [])
            size = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b""))
            size += sum(len(name) + len(value) + 4 for name, value in headers)
            detail = None
            if len(headers) > self.max_headers:
                detail = f"the request has {len(headers)} headers; at most {self.max_headers}"
            elif size > self.max_bytes:
                detail = f"the request target and headers are over {self.max_bytes} bytes"
            if detail is not None:
                response = self.problem(ProblemCode.HEADERS_TOO_LARGE, detail)
                response.headers["Connection"] = "close"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyTimeout:
    """Answer 408 ``request_timeout`` when a request body goes ``seconds`` without a byte,
    and tell the app the client is gone. Only reads of an unfinished body are timed: once the
    body is whole, a ``receive`` (a stream waiting for the client to leave) waits untimed."""

    def __init__(
        self,
        app: ASGIApp,
        seconds: float,
        problem: Callable[[ProblemCode, str], Response],
    ) -> None:
        self.app, self.seconds, self.problem = app, seconds, problem

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done = False
        started = timed_out = False

        async def timed_receive() -> Message:
            nonlocal body_done, timed_out
            if body_done or timed_out:
                return await receive()
            try:
                async with asyncio.timeout(self.seconds):
                    message = await receive()
            except TimeoutError:
                timed_out = True
                if not started:
                    detail = f"no byte of the request body arrived for {self.seconds:g} s"
                    response = self.problem(ProblemCode.REQUEST_TIMEOUT, detail)
                    response.headers["Connection"] = "close"
                    await response(scope, receive, send)
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if timed_out:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, timed_receive, guarded_send)
        except Exception:
            if not timed_out:
                raise
