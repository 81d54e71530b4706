"""A study's server-sent events (``GET /v1/studies/{id}/events``), without I/O: the request to
(re)connect with, the parser of the ``text/event-stream`` lines, and when to reconnect.

``Study.events()`` (``client._sync``) and ``AsyncStudy.events()`` (``client._async``) only open
the stream and feed its lines here. A lost connection is opened again with ``Last-Event-ID``,
the id of the last event received, so the server resumes after it: nothing is lost or repeated.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generic, TypeVar

import httpx

from client._base import Call, _backoff, no_content
from client.errors import TransportError
from client.models import StudyEvent


@dataclass(frozen=True)
class ServerEvent:
    """One event of a study's stream: ``event`` is ``trial_asked``, ``trial_told``,
    ``trial_failed`` or ``study_state``; ``id`` resumes the stream after it."""

    event: str
    id: str | None
    data: StudyEvent


E = TypeVar("E")


class SSEStream(ABC, Generic[E]):
    """The state of one ``events()`` iteration across its connections, for the stream at
    ``path`` whose events a subclass decodes (``_event``).

    ``retries`` connections in a row may fail (or end) before the error is raised; each event
    received starts the count again.
    """

    def __init__(self, path: str, last_event_id: str | None, retries: int) -> None:
        self.path = path
        self.last_event_id = last_event_id
        self.retries = retries
        self._failures = 0
        self._kind = ""
        self._data: list[str] = []
        self._id: str | None = None

    def call(self) -> Call[None]:
        """The request of the next connection."""
        headers = {"Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        self._kind, self._data, self._id = "", [], None  # a cut event is dropped
        return Call("GET", self.path, no_content, headers=headers)

    def feed(self, line: str) -> E | None:
        """Take one line of the stream; the event it completes (an empty line), if any.

        Lines starting with ``:`` are comments (the server's keep-alive pings); fields other
        than ``event``, ``data`` and ``id`` are ignored, as the SSE standard says."""
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._kind = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None

    def _dispatch(self) -> E | None:
        kind, data, event_id = self._kind, self._data, self._id
        self._kind, self._data, self._id = "", [], None
        if not data:
            return None
        if event_id is not None:
            self.last_event_id = event_id
        self._failures = 0
        return self._event(kind or "message", event_id, "\n".join(data))

    @abstractmethod
    def _event(self, kind: str, event_id: str | None, data_json: str) -> E:
        """The event decoded from one dispatched block of the stream."""

    def lost(self, error: httpx.TransportError | None) -> float:
        """Seconds to wait before connecting again after the connection failed with ``error``
        (``None``: the server ended the stream).

        Raises:
            TransportError: after ``retries`` connections in a row failed.
        """
        self._failures += 1
        if self._failures > self.retries:
            cause = "the server ended the stream" if error is None else repr(error)
            raise TransportError(f"GET {self.path}: {cause}") from error
        return _backoff(self._failures - 1)


class EventStream(SSEStream[ServerEvent]):
    """A study's stream (``GET /v1/studies/{id}/events``)."""

    def __init__(self, study_id: int, last_event_id: str | None, retries: int) -> None:
        super().__init__(f"/v1/studies/{study_id}/events", last_event_id, retries)

    def _event(self, kind: str, event_id: str | None, data_json: str) -> ServerEvent:
        return ServerEvent(kind, event_id, StudyEvent.model_validate_json(data_json))
