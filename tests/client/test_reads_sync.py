"""The sync client's notes and dashboard reads (history, Pareto front, curves) and its event
stream (``Study.events``, over a mock transport); test_reads_async.py mirrors these tests by
name."""

import httpx
import pytest

from client import Client, NotFound, TransportError
from tests.client.sse import EVENTS_PATH, FIRST, SECOND, StreamServer
from tests.conftest import FLOAT_X, FLOAT_Y, SEGMENT_OBJECTIVES


def test_notes_on_the_study_and_a_trial(client):
    study = client.create_study("notes", [FLOAT_X])
    assert study.update(notes="first sweep").notes == "first sweep"
    assert study.info.notes == "first sweep"
    (trial,) = study.ask()
    study.tell(trial.number, 1.0)
    assert study.set_note(trial.number, "looks good").note == "looks good"
    assert study.trial(trial.number).note == "looks good"
    assert study.export().trials[0].note == "looks good"
    assert study.update(notes="").notes is None
    with pytest.raises(NotFound):
        study.set_note(99, "no such trial")


def test_history_pareto_and_curves(client):
    study = client.create_study("reads", [FLOAT_X, FLOAT_Y], objectives=SEGMENT_OBJECTIVES)
    for x in (0.0, 1.0, 3.0):
        study.enqueue({"x": x, "y": 0.0}, values={"f1": x * x, "f2": (x - 2) ** 2})
    (running,) = study.ask()
    for step in range(5):
        study.report(running.number, step, {"f1": 5.0 - step})
    history = study.history(max_points=10)
    assert history.objectives == ["f1", "f2"] and history.finished == 3
    front = study.pareto()
    assert {p.number: p.kind for p in front.points} == {
        0: "non_dominated",
        1: "non_dominated",
        2: "dominated",
    }
    curves = study.curves(selection="running", max_points_per_trial=2)
    (curve,) = curves.trials
    assert curve.number == running.number and curve.measurements == 5
    assert [p.step for p in curve.points] == [0, 4]


def test_events_resume_after_the_last_event_when_the_connection_ends():
    server = StreamServer()
    with Client("http://testserver", transport=httpx.MockTransport(server.handle)) as c:
        study = c.get_study(1)
        seen = []
        with pytest.raises(NotFound):  # the third connection: the study is gone
            for event in study.events():
                seen.append((event.event, event.id, event.data.number))
    assert seen == [FIRST, SECOND]
    assert server.last_event_ids == [None, FIRST[1], SECOND[1]]


def test_events_start_after_a_given_id_and_give_up_after_the_retries():
    server = StreamServer(fail=True)
    transport = httpx.MockTransport(server.handle)
    with Client("http://testserver", transport=transport, retries=2) as c:
        study = c.get_study(1)
        with pytest.raises(TransportError, match=EVENTS_PATH):
            list(study.events(last_event_id="3.0.active"))
    assert server.last_event_ids == ["3.0.active"] * 3
