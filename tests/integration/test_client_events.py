"""``Study.events()`` of the sync client on a real server's stream (SQLite and PostgreSQL):
events arrive as they happen, and a new iteration resumes after a given event id."""

from __future__ import annotations

import threading

import pytest

from client import Client
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration

X = {"type": "float", "name": "x", "low": 0.0, "high": 1.0}


def test_events_arrive_live_and_resume_after_an_id(server: Server) -> None:
    with Client(server.url, timeout=10) as client:
        study = client.create_study("events", [X])
        asked_trials = []
        # The stream starts when it connects (at the first next()): the ask comes after.
        timer = threading.Timer(1.0, lambda: asked_trials.extend(study.ask(worker_id="w1")))
        timer.start()
        stream = study.events()
        asked = next(stream)
        timer.join()
        (trial,) = asked_trials
        assert (asked.event, asked.data.number, asked.data.state) == (
            "trial_asked",
            trial.number,
            "running",
        )
        # A tell made while the iteration waits reaches it.
        timer = threading.Timer(0.5, lambda: study.tell(trial.number, 0.25))
        timer.start()
        told = next(stream)
        timer.join()
        stream.close()
        assert (told.event, told.data.values) == ("trial_told", {"value": 0.25})
        # Resuming after the ask's id gives the tell again, and nothing before it.
        resumed = study.events(last_event_id=asked.id)
        again = next(resumed)
        resumed.close()
        assert (again.event, again.id) == ("trial_told", told.id)
