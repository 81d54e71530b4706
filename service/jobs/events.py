"""A job's server-sent events, polled from the database (any replica serves them):
``job_state`` when the job's state changes (the first event tells the state the stream starts
in) and ``unit_told`` when a unit or run of its study finishes (completed or failed).

An event's id is ``<seq>.<state>``: the study's ``completed_seq`` of the last finished trial
sent and the job state last sent, so ``Last-Event-ID`` resumes with nothing lost or repeated.
The stream ends after the event of a final state.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, get_args

import anyio
from sqlalchemy import select
from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool

from client.models import JOB_ENDED, JobEvent, JobState
from service.errors import ApiError, ProblemCode
from service.jobs import spec
from service.jobs.jobs import find_job, progress
from service.store import Store, trials_t

POLL_SECONDS = 0.5
KEEP_ALIVE_SECONDS = 15.0
_EVENT_ID = re.compile(r"(\d{1,18})\.([a-z]+)")


@dataclass(frozen=True)
class Position:
    seq: int
    state: str

    def event_id(self) -> str:
        return f"{self.seq}.{self.state}"


def start(store: Store, tenant_id: int, job_id: int, last_event_id: str | None) -> Position:
    """Where a stream begins: after ``last_event_id``, or now (before the current state).

    Raises:
        ApiError: 404 ``job_not_found``; 422 ``invalid_cursor`` for an id not of this API.
    """

    def fn(conn: Connection) -> Position:
        job = find_job(conn, tenant_id, job_id)
        if last_event_id is None:
            seq = conn.execute(
                select(trials_t.c.completed_seq)
                .where(trials_t.c.study_id == job.study_id, trials_t.c.completed_seq.is_not(None))
                .order_by(trials_t.c.completed_seq.desc())
                .limit(1)
            ).scalar()
            return Position(int(seq or 0), "")
        match = _EVENT_ID.fullmatch(last_event_id)
        if match is None or match[2] not in get_args(JobState):
            raise ApiError(
                ProblemCode.INVALID_CURSOR, f"Last-Event-ID {last_event_id!r} is not of this API"
            )
        return Position(int(match[1]), match[2])

    return store.db.read(fn)


def poll(
    store: Store, tenant_id: int, job_id: int, after: Position
) -> tuple[list[dict[str, str]], Position]:
    """The events after ``after`` as server-sent event fields, and the new position."""

    def fn(conn: Connection) -> tuple[list[dict[str, str]], Position]:
        job = find_job(conn, tenant_id, job_id)
        rows = conn.execute(
            select(
                trials_t.c.number, trials_t.c.state, trials_t.c["values"], trials_t.c.completed_seq
            )
            .where(trials_t.c.study_id == job.study_id, trials_t.c.completed_seq > after.seq)
            .order_by(trials_t.c.completed_seq)
        ).all()
        done = progress(conn, job) if rows or job.state != after.state else {}
        done.pop("train_seconds", None)
        base: dict[str, Any] = {"job_id": job_id, "state": job.state, **done}
        events, seq = [], after.seq
        for row in rows:
            seq = int(row.completed_seq)
            score = (row.values or {}).get(spec.OBJECTIVE)
            data = JobEvent(**base, trial=row.number, trial_state=row.state, score=score)
            events.append(_sse(Position(seq, after.state), "unit_told", data))
        if job.state != after.state:
            data = JobEvent(**base, error=job.error)
            events.append(_sse(Position(seq, job.state), "job_state", data))
        return events, Position(seq, job.state)

    return store.db.read(fn)


def _sse(position: Position, kind: str, data: JobEvent) -> dict[str, str]:
    return {"id": position.event_id(), "event": kind, "data": data.model_dump_json()}


async def stream(
    store: Store, tenant_id: int, job_id: int, position: Position
) -> AsyncIterator[dict[str, str]]:
    """The job's events from ``position`` on, until the job has ended."""
    while True:
        try:
            events, position = await run_in_threadpool(poll, store, tenant_id, job_id, position)
        except ApiError:
            return
        for event in events:
            yield event
        if position.state in JOB_ENDED:
            return
        await anyio.sleep(POLL_SECONDS)


#: The 200 response of the events route in the OpenAPI document.
OPENAPI_RESPONSE: dict[str, Any] = {
    "description": (
        "A text/event-stream until the job ends. Events: `job_state` (the first tells the "
        "job's state when the stream opens, then each change; the last is a final state) and "
        "`unit_told` (a unit or run finished, with its score and the job's progress). Send an "
        "event's `id` back as `Last-Event-ID` to resume. The `data` schema is under "
        "`x-event-data`."
    ),
    "content": {
        "text/event-stream": {
            "schema": {"type": "string"},
            "x-event-data": JobEvent.model_json_schema(),
        }
    },
}
