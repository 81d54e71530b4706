"""A study's server-sent events, read from the database so that every replica serves the same
stream and a client may reconnect to any of them.

Each event has a position ``(seq, number)`` in the study: ``seq`` is a study revision, taken
under the study row lock by the transaction that caused the event, so positions increase in
commit order on SQLite and PostgreSQL alike:

- ``trial_asked``: the trial's ``asked_seq`` (set by the ask that last handed it out);
- ``trial_told`` / ``trial_failed``: the trial's ``completed_seq``;
- ``study_state``: the study's revision when a poll saw a state other than the one before,
  with number -1, so that it comes before the trial events of that revision.

A stream polls the study row every ``POLL_SECONDS`` and reads trials only when the revision
moved, through the ``(study_id, asked_seq)`` and ``(study_id, completed_seq)`` indexes. An
event's id is its position and the study state the stream had seen, so ``Last-Event-ID`` tells
where to resume: nothing is lost or sent twice. A trial asked twice between two polls (its
lease expired, then another worker got it) gives one ``trial_asked``, for the last ask; a state
changed and changed back between two polls gives none.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, get_args

import anyio
from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool

from client.models import StudyEvent, StudyState
from service.errors import ApiError, ProblemCode
from service.store import Store, find_study, trials_t

POLL_SECONDS = 0.5
KEEP_ALIVE_SECONDS = 15.0

#: A position after every trial event of its seq (trial numbers are below 2**31).
_AFTER_TRIALS = 2**31
_STUDY_EVENT = -1
_FINISHED_KINDS = {"completed": "trial_told", "infeasible": "trial_told", "failed": "trial_failed"}


@dataclass(frozen=True, order=True)
class Position:
    """Where a stream is: after the event at ``(seq, number)``, with the study ``state`` it has
    reported last."""

    seq: int
    number: int
    state: str = field(compare=False)

    def event_id(self) -> str:
        return f"{self.seq}.{self.number}.{self.state}"

    @classmethod
    def parse(cls, event_id: str) -> Position:
        match = _EVENT_ID.fullmatch(event_id)
        if match is None or match[3] not in get_args(StudyState):
            raise ApiError(
                ProblemCode.INVALID_CURSOR,
                f"Last-Event-ID {event_id!r} is not an id this stream sent",
            )
        return cls(int(match[1]), int(match[2]), match[3])


_EVENT_ID = re.compile(r"(\d{1,18})\.(-1|\d{1,10})\.([a-z]+)")


@dataclass(frozen=True)
class Event:
    position: Position
    kind: str
    data: StudyEvent

    def sse(self) -> dict[str, str]:
        """The fields of the event on the wire."""
        data = self.data.model_dump_json()
        return {"id": self.position.event_id(), "event": self.kind, "data": data}


_TRIAL_COLUMNS = (
    trials_t.c.number,
    trials_t.c.state,
    trials_t.c["values"],
    trials_t.c.asked_seq,
    trials_t.c.completed_seq,
)
_ASKED_SINCE = select(*_TRIAL_COLUMNS).where(
    trials_t.c.study_id == bindparam("study_id"),
    trials_t.c.asked_seq >= bindparam("since"),
    trials_t.c.asked_seq <= bindparam("until"),
)
_FINISHED_SINCE = select(*_TRIAL_COLUMNS).where(
    trials_t.c.study_id == bindparam("study_id"),
    trials_t.c.completed_seq >= bindparam("since"),
    trials_t.c.completed_seq <= bindparam("until"),
)


def start(store: Store, tenant_id: int, study_id: int, last_event_id: str | None) -> Position:
    """Where a new stream begins: after ``last_event_id``, or after everything so far.

    Raises:
        ApiError: 404 ``not_found`` for a missing study, 422 ``invalid_cursor`` for an id that
            this study's streams did not send.
    """

    def fn(conn: Connection) -> Position:
        study = find_study(conn, tenant_id, study_id, columns=("revision", "state"))
        if last_event_id is None:
            return Position(study.revision, _AFTER_TRIALS, study.state)
        position = Position.parse(last_event_id)
        if position.seq > study.revision:
            raise ApiError(
                ProblemCode.INVALID_CURSOR,
                f"Last-Event-ID {last_event_id!r} is ahead of study {study_id}",
            )
        return position

    return store.db.read(fn)


def poll(
    store: Store, tenant_id: int, study_id: int, after: Position
) -> tuple[list[Event], Position] | None:
    """The events after ``after`` in position order, and the position after all of them at
    the study's current revision; None once the study is deleted."""

    def fn(conn: Connection) -> tuple[list[Event], Position] | None:
        try:
            study = find_study(conn, tenant_id, study_id, columns=("revision", "state"))
        except ApiError:
            return None
        end = Position(study.revision, _AFTER_TRIALS, study.state)
        if end == after and end.state == after.state:
            return [], end
        # Trial events at after.seq are read again (one transaction's), then left out below.
        found = _trial_events(conn, study_id, after.seq, study.revision)
        if study.state != after.state:
            found.append((study.revision, _STUDY_EVENT, "study_state", study.state, None))
        events, state = [], after.state
        for seq, number, kind, event_state, values in sorted(found, key=lambda e: e[:2]):
            if kind == "study_state":
                state = event_state
            position = Position(seq, number, state)
            if position > after:
                data = StudyEvent(
                    study_id=study_id,
                    number=None if kind == "study_state" else number,
                    state=event_state,
                    values=values,
                    revision=seq,
                )
                events.append(Event(position, kind, data))
        return events, end

    return store.db.read(fn)


#: A found event: seq, number, kind, state (the trial's, or the study's), told values.
_Found = tuple[int, int, str, str, dict[str, float] | None]


def _trial_events(conn: Connection, study_id: int, since: int, until: int) -> list[_Found]:
    params = {"study_id": study_id, "since": since, "until": until}
    found: list[_Found] = [
        (row.asked_seq, row.number, "trial_asked", "running", None)
        for row in conn.execute(_ASKED_SINCE, params)
    ]
    found += [
        (row.completed_seq, row.number, _FINISHED_KINDS[row.state], row.state, row.values)
        for row in conn.execute(_FINISHED_SINCE, params)
    ]
    return found


async def stream(
    store: Store, tenant_id: int, study_id: int, position: Position
) -> AsyncIterator[dict[str, str]]:
    """The events of the study from ``position`` on, as server-sent event fields, until the
    study is deleted; the caller cancels it when the client goes away."""
    while True:
        polled = await run_in_threadpool(poll, store, tenant_id, study_id, position)
        if polled is None:
            return
        events, position = polled
        for event in events:
            yield event.sse()
        await anyio.sleep(POLL_SECONDS)


#: The 200 response of the events route in the OpenAPI document.
OPENAPI_RESPONSE: dict[str, Any] = {
    "description": (
        "A text/event-stream that stays open until the client leaves or the study is deleted. "
        "Each event has an `event` field, `trial_asked`, `trial_told` (a trial told completed "
        "or infeasible), `trial_failed` or `study_state` (the study's state changed); an `id` "
        "to send back as the `Last-Event-ID` header when reconnecting, to resume with nothing "
        "lost or repeated; and a JSON `data` line (its schema is under `x-event-data`). Without "
        "`Last-Event-ID` the stream starts with what happens after it opens. A comment line "
        f"keeps the connection alive every {KEEP_ALIVE_SECONDS:g} s."
    ),
    "content": {
        "text/event-stream": {
            "schema": {"type": "string"},
            "x-event-data": StudyEvent.model_json_schema(),
            "example": (
                "id: 7.3.active\nevent: trial_told\ndata: "
                '{"study_id":1,"number":3,"state":"completed",'
                '"values":{"loss":0.25},"revision":7}\n\n'
            ),
        }
    },
}
