"""The HTTP/1.1 protocol ``asktell serve`` runs uvicorn with: uvicorn's httptools protocol, plus
the limits that protocol lacks (it buffers headers of any size, and it waits for a request's
headers without end).

- A request's line and headers may take ``ASKTELL_MAX_HEADER_BYTES`` at most: reading stops
  there with 431 ``headers_too_large``, so a many-megabyte header is never buffered.
- A client has ``ASKTELL_HEADER_TIMEOUT`` seconds to send them, from the connection's open (or
  the request's first byte on a kept-alive connection); then 408 ``request_timeout``, or no
  answer when not a byte came.

Both answers are problem+json written here (the app never sees the request) and close the
connection. The app checks the header size and count again (``service.http_guards``), and a
request body's pace (``ASKTELL_BODY_TIMEOUT``), under any server. Run the app under bare uvicorn
with ``--http service.transport:LimitedHttpToolsProtocol`` for the same limits.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from http import HTTPStatus
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from client.models import ProblemCode
from service.errors import PROBLEM
from service.http_guards import API_CSP, SECURITY_HEADERS
from service.settings import get_settings

#: uvicorn's ``--http`` value for this protocol.
PROTOCOL = "service.transport:LimitedHttpToolsProtocol"


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        settings = get_settings()
        self.max_header_bytes = settings.max_header_bytes
        self.header_timeout = settings.header_timeout
        #: Bytes received since the last request's headers ended; None while a body is read.
        self.header_bytes: int | None = 0
        self.header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_header_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.header_bytes is not None:
            self.header_bytes += len(data)
        super().data_received(data)
        # Still in the headers after this chunk: the whole chunk counted (over by at most one
        # read, the limit bounds what is buffered).
        if self.header_bytes is not None and self.header_bytes > self.max_header_bytes:
            self._refuse(
                ProblemCode.HEADERS_TOO_LARGE,
                f"the request line and headers are over {self.max_header_bytes} bytes",
            )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_header_clock()

    def on_headers_complete(self) -> None:
        self._stop_header_clock()
        self.header_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.header_bytes = 0

    def _start_header_clock(self) -> None:
        if self.header_deadline is None:
            self.header_deadline = self.loop.call_later(self.header_timeout, self._too_slow)

    def _stop_header_clock(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def _too_slow(self) -> None:
        self.header_deadline = None
        if not self.header_bytes:
            # Not a byte of a request: close without an answer (as uvicorn closes an idle
            # kept-alive connection), so a client that sends its first request on this
            # connection just now sees it closed, not a 408 it would take for that request's.
            self.header_bytes = None
            self.transport.close()
            return
        self._refuse(
            ProblemCode.REQUEST_TIMEOUT,
            f"the request line and headers did not arrive within {self.header_timeout:g} s",
        )

    def _refuse(self, code: ProblemCode, detail: str) -> None:
        """Answer problem+json ``code`` and close the connection."""
        self._stop_header_clock()
        self.header_bytes = None
        if self.transport.is_closing():
            return
        self.logger.warning("refused a request from %s: %s", self.client, detail)
        self.transport.write(refusal(code, detail, self.server_state.default_headers))
        self.transport.close()


def refusal(code: ProblemCode, detail: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """A whole HTTP/1.1 problem+json response of ``code`` that closes the connection."""
    status = HTTPStatus(code.status)
    body = json.dumps(
        {
            "type": "about:blank",
            "title": status.phrase,
            "status": status.value,
            "detail": detail,
            "code": code.value,
        },
        separators=(",", ":"),
    ).encode()
    headers = [
        *default_headers,
        (b"content-type", PROBLEM.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"x-request-id", uuid.uuid4().hex.encode()),
        *SECURITY_HEADERS,
        (b"content-security-policy", API_CSP.encode()),
    ]
    head = f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode()
    lines = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return head + lines + b"\r\n" + body
