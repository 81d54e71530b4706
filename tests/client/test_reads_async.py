"""The async client's notes, dashboard reads and event stream; mirrors test_reads_sync.py by
test name."""

import asyncio

import httpx
import pytest

from client import AsyncClient, NotFound, TransportError
from tests.client.sse import EVENTS_PATH, FIRST, SECOND, StreamServer
from tests.client.test_async import run
from tests.conftest import FLOAT_X, FLOAT_Y, SEGMENT_OBJECTIVES


def test_notes_on_the_study_and_a_trial(sqlite_url):
    async def body(client):
        study = await client.create_study("notes", [FLOAT_X])
        assert (await study.update(notes="first sweep")).notes == "first sweep"
        assert study.info.notes == "first sweep"
        (trial,) = await study.ask()
        await study.tell(trial.number, 1.0)
        assert (await study.set_note(trial.number, "looks good")).note == "looks good"
        assert (await study.trial(trial.number)).note == "looks good"
        assert (await study.export()).trials[0].note == "looks good"
        assert (await study.update(notes="")).notes is None
        with pytest.raises(NotFound):
            await study.set_note(99, "no such trial")

    run(body, sqlite_url)


def test_history_pareto_and_curves(sqlite_url):
    async def body(client):
        study = await client.create_study(
            "reads", [FLOAT_X, FLOAT_Y], objectives=SEGMENT_OBJECTIVES
        )
        for x in (0.0, 1.0, 3.0):
            await study.enqueue({"x": x, "y": 0.0}, values={"f1": x * x, "f2": (x - 2) ** 2})
        (running,) = await study.ask()
        for step in range(5):
            await study.report(running.number, step, {"f1": 5.0 - step})
        history = await study.history(max_points=10)
        assert history.objectives == ["f1", "f2"] and history.finished == 3
        front = await study.pareto()
        assert {p.number: p.kind for p in front.points} == {
            0: "non_dominated",
            1: "non_dominated",
            2: "dominated",
        }
        curves = await study.curves(selection="running", max_points_per_trial=2)
        (curve,) = curves.trials
        assert curve.number == running.number and curve.measurements == 5
        assert [p.step for p in curve.points] == [0, 4]

    run(body, sqlite_url)


def _read_events(server: StreamServer, retries: int, seen: list, last_event_id=None) -> None:
    """Reads the fake server's stream into ``seen`` until the client raises."""

    async def main():
        transport = httpx.MockTransport(server.handle)
        async with AsyncClient("http://testserver", transport=transport, retries=retries) as c:
            study = await c.get_study(1)
            async for event in study.events(last_event_id):
                seen.append((event.event, event.id, event.data.number))

    asyncio.run(main())


def test_events_resume_after_the_last_event_when_the_connection_ends():
    server = StreamServer()
    seen: list = []
    with pytest.raises(NotFound):  # the third connection: the study is gone
        _read_events(server, 5, seen)
    assert seen == [FIRST, SECOND]
    assert server.last_event_ids == [None, FIRST[1], SECOND[1]]


def test_events_start_after_a_given_id_and_give_up_after_the_retries():
    server = StreamServer(fail=True)
    seen: list = []
    with pytest.raises(TransportError, match=EVENTS_PATH):
        _read_events(server, 2, seen, last_event_id="3.0.active")
    assert seen == [] and server.last_event_ids == ["3.0.active"] * 3
