"""A fake study event stream for the clients' ``events()`` tests: a mock transport handler
whose every connection ends early, as a lost connection does."""

from __future__ import annotations

import json

import httpx

EVENTS_PATH = "/v1/studies/1/events"
#: ``(event, id, trial number)`` of the events the fake server sends.
FIRST = ("trial_asked", "2.0.active", 0)
SECOND = ("trial_told", "3.0.active", 0)

STUDY = {
    "id": 1,
    "name": "s",
    "parameters": [{"type": "float", "name": "x", "low": 0.0, "high": 1.0}],
    "state": "active",
    "metadata": {},
    "seed": 1,
    "revision": 3,
    "engine_state": {},
    "engine_state_version": 1,
    "trial_counts": {"completed": 1},
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:00Z",
}


def _event(kind: str, event_id: str, number: int) -> str:
    state = "running" if kind == "trial_asked" else "completed"
    data = {"study_id": 1, "number": number, "state": state, "values": None, "revision": 2}
    # A comment line (a keep-alive ping) and an unknown field, both ignored by the client.
    return f": ping\nevent: {kind}\nretry: 100\nid: {event_id}\ndata: {json.dumps(data)}\n\n"


class StreamServer:
    """Connection 1 sends FIRST and SECOND's first half, then ends; connection 2 sends SECOND;
    the next ones answer 404. With ``fail``, every connection fails at the network level."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.last_event_ids: list[str | None] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/studies/1":
            return httpx.Response(200, json=STUDY)
        assert request.url.path == EVENTS_PATH
        assert request.headers["Accept"] == "text/event-stream"
        self.last_event_ids.append(request.headers.get("Last-Event-ID"))
        if self.fail:
            raise httpx.ConnectError("refused", request=request)
        if len(self.last_event_ids) == 1:
            cut = "event: trial_told\nid: 3.0.active\n"  # cut before its data: dropped
            body = _event(*FIRST) + cut
        elif len(self.last_event_ids) == 2:
            body = _event(*SECOND)
        else:
            problem = {"title": "Not Found", "status": 404, "detail": "gone", "code": "not_found"}
            return httpx.Response(404, json=problem)
        headers = {"Content-Type": "text/event-stream"}
        return httpx.Response(200, content=body.encode(), headers=headers)
