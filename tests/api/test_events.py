"""The event stream's errors and its events, read in process with ``service.events.poll``
(the streaming itself is tested on a real server: tests/integration/test_events.py)."""

from __future__ import annotations

import anyio
import pytest

from service import events
from tests.conftest import study_body

PROBLEM = "application/problem+json"


def _poll_all(http, sid, after):
    polled = events.poll(http.app.state.store, 1, sid, after)
    assert polled is not None
    return polled


def _ask(http, sid, worker_id):
    (trial,) = http.post(f"/v1/studies/{sid}/ask", json={"worker_id": worker_id}).json()["trials"]
    return trial["number"]


def test_a_missing_study_is_a_404_problem(http):
    r = http.get("/v1/studies/999/events")
    assert r.status_code == 404
    assert r.headers["content-type"] == PROBLEM
    assert r.json()["code"] == "not_found"


@pytest.mark.parametrize(
    "last_event_id", ["x", "1.2", "1.2.sleeping", "-1.0.active", "99.0.active"]
)
def test_a_last_event_id_the_stream_did_not_send_is_invalid_cursor(http, last_event_id):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    r = http.get(f"/v1/studies/{sid}/events", headers={"Last-Event-ID": last_event_id})
    assert (r.status_code, r.json()["code"]) == (422, "invalid_cursor")


def test_events_come_in_commit_order_and_resume_after_any_of_them(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    store = http.app.state.store
    start = events.start(store, 1, sid, None)
    first, second = _ask(http, sid, "w1"), _ask(http, sid, "w2")
    tell = {"values": {"value": 3.0}}
    http.post(f"/v1/studies/{sid}/trials/{second}/tell", json=tell).raise_for_status()
    http.post(f"/v1/studies/{sid}/trials/{first}/tell", json={"state": "failed"}).raise_for_status()
    http.patch(f"/v1/studies/{sid}", json={"state": "paused"}).raise_for_status()

    found, end = _poll_all(http, sid, start)
    assert [(e.kind, e.data.number, e.data.state) for e in found] == [
        ("trial_asked", first, "running"),
        ("trial_asked", second, "running"),
        ("trial_told", second, "completed"),
        ("trial_failed", first, "failed"),
        ("study_state", None, "paused"),
    ]
    assert found[2].data.values == {"value": 3.0}
    assert [e.position for e in found] == sorted(e.position for e in found)
    assert end.seq == http.get(f"/v1/studies/{sid}").json()["revision"] == found[-1].data.revision
    assert _poll_all(http, sid, end) == ([], end)
    for i, event in enumerate(found):
        resumed = events.start(store, 1, sid, event.position.event_id())
        assert _poll_all(http, sid, resumed)[0] == found[i + 1 :]


def test_a_stream_of_a_deleted_study_ends(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    start = events.start(http.app.state.store, 1, sid, None)
    http.delete(f"/v1/studies/{sid}")
    assert events.poll(http.app.state.store, 1, sid, start) is None


def test_the_stream_ends_when_the_client_disconnects(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    sent: list[dict] = []

    async def receive():
        await anyio.sleep(1.2)  # two polls or so, then the client leaves
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": f"/v1/studies/{sid}/events",
        "raw_path": f"/v1/studies/{sid}/events".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": {},
        "app": http.app,
    }

    async def call():
        with anyio.fail_after(5):
            await http.app(scope, receive, send)

    anyio.run(call)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
