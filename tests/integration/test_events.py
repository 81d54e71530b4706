"""GET /v1/studies/{id}/events on the real server (two worker processes), SQLite and PostgreSQL:
what any worker writes reaches a stream served by any worker, and Last-Event-ID resumes."""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any

import httpx
import pytest

from tests.conftest import study_body
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration


class EventStream:
    """A stream read by a thread of its own, its events put on a queue as dicts."""

    def __init__(self, url: str, last_event_id: str | None = None) -> None:
        headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
        self.client = httpx.Client(timeout=httpx.Timeout(5, read=30))
        self.response = self.client.send(
            self.client.build_request("GET", url, headers=headers), stream=True
        )
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        event: dict[str, Any] = {}
        try:
            for line in self.response.iter_lines():
                if not line:
                    if event:
                        self.events.put(event)
                    event = {}
                elif not line.startswith(":"):
                    field, _, value = line.partition(":")
                    event[field] = value.removeprefix(" ")
        except httpx.HTTPError:
            pass  # closed by the test

    def next(self, timeout: float) -> dict[str, Any]:
        event = self.events.get(timeout=timeout)
        return {**event, "data": json.loads(event["data"])}

    def take(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        return [self.next(max(deadline - time.monotonic(), 0.01)) for _ in range(n)]

    def close(self) -> None:
        self.response.close()
        self.client.close()


def _ask_and_tell(url: str, sid: int, value: float) -> int:
    (trial,) = httpx.post(f"{url}/v1/studies/{sid}/ask", json={"worker_id": "w"}).json()["trials"]
    told = httpx.post(
        f"{url}/v1/studies/{sid}/trials/{trial['number']}/tell", json={"values": {"value": value}}
    )
    assert told.status_code == 200, told.text
    return trial["number"]


def _stream_workers(server: Server) -> set[int]:
    return {pid for pid, _port, _method, path, _status in server.access() if "/events" in path}


def test_a_tell_reaches_an_open_stream_within_2_s(server: Server) -> None:
    sid = httpx.post(f"{server.url}/v1/studies", json=study_body()).json()["id"]
    # Streams until both workers serve one: whichever worker takes the tell, a stream of the
    # other one must see it too.
    streams: list[EventStream] = []
    try:
        deadline = time.monotonic() + 20
        while len(_stream_workers(server)) < 2 and time.monotonic() < deadline:
            streams.append(EventStream(f"{server.url}/v1/studies/{sid}/events"))
            time.sleep(0.05)
        assert len(_stream_workers(server)) == 2, server.log_tail()
        number = _ask_and_tell(server.url, sid, 0.5)
        told_at = time.monotonic()
        for stream in streams:
            asked, told = stream.take(2, timeout=2.0)
            assert time.monotonic() - told_at < 2.0
            assert (asked["event"], told["event"]) == ("trial_asked", "trial_told")
            assert asked["data"]["number"] == number
            assert told["data"] == {
                "study_id": sid,
                "number": number,
                "state": "completed",
                "values": {"value": 0.5},
                "revision": told["data"]["revision"],
            }
            assert asked["data"]["revision"] < told["data"]["revision"]
    finally:
        for stream in streams:
            stream.close()


def test_last_event_id_resumes_without_loss_or_duplicates(server: Server) -> None:
    sid = httpx.post(f"{server.url}/v1/studies", json=study_body()).json()["id"]
    url = f"{server.url}/v1/studies/{sid}/events"
    first = EventStream(url)
    try:
        _ask_and_tell(server.url, sid, 1.0)
        _ask_and_tell(server.url, sid, 2.0)
        seen = first.take(4)
    finally:
        first.close()
    # Written while no stream is open: a failure, a state change, a tell.
    (failing,) = httpx.post(f"{server.url}/v1/studies/{sid}/ask", json={"worker_id": "w"}).json()[
        "trials"
    ]
    httpx.post(
        f"{server.url}/v1/studies/{sid}/trials/{failing['number']}/tell",
        json={"state": "failed"},
    ).raise_for_status()
    httpx.patch(f"{server.url}/v1/studies/{sid}", json={"state": "paused"}).raise_for_status()

    resumed = EventStream(url, last_event_id=seen[1]["id"])
    try:
        rest = resumed.take(5)
        with pytest.raises(queue.Empty):
            resumed.next(timeout=1.5)
    finally:
        resumed.close()
    assert [e["event"] for e in rest] == [
        "trial_asked",
        "trial_told",
        "trial_asked",
        "trial_failed",
        "study_state",
    ]
    assert [e["id"] for e in seen[2:]] == [e["id"] for e in rest[:2]]
    assert rest[-1]["data"]["state"] == "paused"
    ids = [e["id"] for e in seen[:2] + rest]
    assert len(set(ids)) == len(ids)
