"""Writes to one study that queue behind each other, made in one transaction (flat combining).

Every write to a study takes the study's row lock for its whole transaction (the revision it
bumps orders the study's changes), so concurrent writes to one study run one after the other
anyway. In worker threads each then also waits for the row lock inside the database and, once
it has it, for the interpreter between its statements, while the other threads run: 8 clients
on one PostgreSQL study made 175 tell-and-asks a second where 8 clients on 8 studies made
226-249. Here the writes of one study take turns in the process instead: the thread whose
turn it is writes everything queued by then in one transaction, in arrival order, each with
its own idempotency record, and hands each waiting thread its answer.

A group is all or nothing: when any write of a group fails (a replay, a finished trial, an ask
that cannot serve), the transaction rolls back and each write runs again alone, in its turn,
as it would have without the group (``alone``), so a group never changes an answer.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel
from sqlalchemy.engine import Connection

from service.db.session import Database
from service.idempotency import Answer, IdemKey, remember

log = logging.getLogger("asktell")

#: The most writes one transaction makes: a group's rollback repeats each of them alone.
MAX_GROUP = 16


@dataclass(eq=False)
class _Write:
    tenant_id: int
    idem: IdemKey | None
    change: Callable[[Connection], tuple[int, BaseModel]]
    alone: Callable[[], Answer]
    answer: Answer | None = None
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.answer is not None or self.error is not None


@dataclass(eq=False)
class _Queue:
    changed: threading.Condition = field(default_factory=threading.Condition)
    busy: bool = False
    waiting: list[_Write] = field(default_factory=list)


class WriteGroups:
    """The queues of writes per study, of one process."""

    def __init__(self, db: Database, now: Callable[[], datetime]) -> None:
        self._db = db
        self._now = now
        self._queues: weakref.WeakValueDictionary[int, _Queue] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()

    def write(
        self,
        study_id: int,
        tenant_id: int,
        idem: IdemKey | None,
        change: Callable[[Connection], tuple[int, BaseModel]],
        alone: Callable[[], Answer],
    ) -> Answer:
        """``change`` in the study's next group transaction, its answer stored under ``idem``;
        ``alone()`` when it runs by itself (the group is this write only, or failed). Blocks
        the calling thread until its turn: never call it on the event loop."""
        with self._guard:
            queue = self._queues.get(study_id)
            if queue is None:
                queue = self._queues[study_id] = _Queue()
        mine = _Write(tenant_id, idem, change, alone)
        group: list[_Write] = []
        with queue.changed:
            queue.waiting.append(mine)
            while queue.busy and not mine.done:
                queue.changed.wait()
            if not mine.done:  # this thread's turn: it writes what is queued
                queue.busy = True
                group = queue.waiting[:MAX_GROUP]
                del queue.waiting[:MAX_GROUP]
        if group:
            try:
                self._serve(group)
            except BaseException as exc:  # an interrupt: no thread of the group waits forever
                for w in group:
                    if not w.done:
                        w.error = exc
                raise
            finally:
                with queue.changed:
                    queue.busy = False
                    queue.changed.notify_all()
        if mine.error is not None:
            raise mine.error
        assert mine.answer is not None
        return mine.answer

    def _serve(self, group: list[_Write]) -> None:
        if len(group) > 1:
            try:
                answers = self._db.write(lambda conn: [self._apply(conn, w) for w in group])
            except Exception as exc:  # each runs alone below, as without the group
                log.debug("a group of %d writes rolled back (%r); each runs alone", len(group), exc)
            else:
                for w, answer in zip(group, answers, strict=True):
                    w.answer = answer
                return
        for w in group:
            try:
                w.answer = w.alone()
            except BaseException as exc:  # raised again in the thread that asked for it
                w.error = exc

    def _apply(self, conn: Connection, w: _Write) -> Answer:
        status, model = w.change(conn)
        answer = Answer(status, model.model_dump_json())
        if w.idem is not None:
            remember(conn, w.tenant_id, w.idem, answer, self._now())
        return answer
