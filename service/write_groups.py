"""Writes to one study that queue behind each other, made in one transaction (flat combining).

Every write to a study takes the study's row lock for its whole transaction (the revision it
bumps orders the study's changes), so concurrent writes to one study run one after the other
anyway. In worker threads each then also waits for the row lock inside the database and, once
it has it, for the interpreter between its statements, while the other threads run: 8 clients
on one PostgreSQL study made 175 tell-and-asks a second where 8 clients on 8 studies made
226-249. Here the writes of one study take turns in the process instead: the thread whose
turn it is writes its own and those queued behind it by then (at most ``MAX_GROUP``, in arrival
order) in one transaction, each with its own idempotency record, and hands each waiting thread
its answer.

A group is all or nothing: when any write of a group fails (a replay, a finished trial, an ask
that cannot serve), the transaction rolls back and each write runs again alone, in the thread
that asked for it, as it would have without the group (``alone``), so a group never changes an
answer.
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
from service.idempotency import Answer, IdemKey, answered

log = logging.getLogger("asktell")

#: The most writes one transaction makes: a group's rollback repeats each of them alone.
MAX_GROUP = 16


@dataclass(eq=False)
class _Write:
    tenant_id: int
    idem: IdemKey | None
    change: Callable[[Connection], tuple[int, BaseModel]]
    answer: Answer | None = None
    #: Its group rolled back: the thread that asked for it writes it alone.
    run_alone: bool = False

    @property
    def settled(self) -> bool:
        return self.answer is not None or self.run_alone


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
        ``alone()`` when it runs by itself (the group is this write only, or rolled back).
        Blocks the calling thread until its turn: never call it on the event loop."""
        with self._guard:
            queue = self._queues.get(study_id)
            if queue is None:
                queue = self._queues[study_id] = _Queue()
        mine = _Write(tenant_id, idem, change)
        group: list[_Write] = []
        with queue.changed:
            queue.waiting.append(mine)
            while queue.busy and not mine.settled:
                queue.changed.wait()
            if not mine.settled:
                # This thread's turn: its write and those queued behind it, in arrival order.
                queue.busy = True
                queue.waiting.remove(mine)
                group = [mine, *queue.waiting[: MAX_GROUP - 1]]
                del queue.waiting[: MAX_GROUP - 1]
        if group:
            try:
                if len(group) == 1:  # in its turn, so that the next writes queue into a group
                    return alone()
                self._write_together(group)
            finally:
                with queue.changed:
                    queue.busy = False
                    for w in group:
                        w.run_alone = w.answer is None  # no thread of the group waits forever
                    queue.changed.notify_all()
        # Written in a group (this thread's or another's), or to be written alone, unlocked.
        return mine.answer if mine.answer is not None else alone()

    def _write_together(self, group: list[_Write]) -> None:
        """The group in one transaction; on any failure, nothing (each then runs alone)."""
        try:
            answers = self._db.write(
                lambda conn: [
                    answered(conn, w.tenant_id, w.idem, w.change, self._now()) for w in group
                ]
            )
        except Exception as exc:
            log.debug("a group of %d writes rolled back (%r); each runs alone", len(group), exc)
            return
        for w, answer in zip(group, answers, strict=True):
            w.answer = answer
