"""Admission of asks: one ask per study runs at a time, the others wait in the event loop.

An ask on a study whose engine reads observations waits for the asks before it (see
``service.ask``). Were it to wait inside a pool thread, forty asks on one slow study would hold
forty threads and every other request, ``/healthz`` included, would wait for a free one. Here an
ask waits as a coroutine, holding no thread; at most ``queue_per_study`` asks wait per study and
the next one is answered 503 ``study_busy`` with ``Retry-After`` (the client retries it). A
waiting ask whose client has disconnected is dropped. The admitted ask runs in a thread of its
own limiter (``engine_threads``), so engine work never takes the threads of the default pool
that reads and tells of other studies use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.to_thread
from starlette.requests import Request

from service.errors import ApiError, ProblemCode
from service.observability import ASKS_BUSY, ASKS_DROPPED

T = TypeVar("T")

log = logging.getLogger("asktell.admission")

#: Seconds between two looks at whether a waiting ask's client is still connected.
DISCONNECT_POLL_SECONDS = 0.1
#: ``Retry-After`` of a ``study_busy`` answer, in seconds.
BUSY_RETRY_AFTER = 1.0


class ClientGone(Exception):
    """The client of a waiting ask disconnected; the ask was dropped before it ran."""


@dataclass
class _StudyQueue:
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiting: int = 0
    #: Asks waiting or running; the queue is forgotten when it drops to zero.
    users: int = 0


class AskAdmission:
    """The per-study queues of one process and the thread limiter of engine work."""

    def __init__(self, queue_per_study: int, engine_threads: int) -> None:
        self.queue_per_study = queue_per_study
        self.threads = anyio.CapacityLimiter(engine_threads)
        self._queues: dict[int, _StudyQueue] = {}

    def waiting(self, study_id: int) -> int:
        queue = self._queues.get(study_id)
        return queue.waiting if queue else 0

    def total_waiting(self) -> int:
        return sum(q.waiting for q in self._queues.values())

    async def run(self, study_id: int, request: Request, work: Callable[[], T]) -> T:
        """Wait for the study's turn, then run ``work`` in an engine thread. Raises
        ``ApiError(study_busy)`` when the study's queue is full and ``ClientGone`` when the
        client disconnects while waiting."""
        queue = self._queues.setdefault(study_id, _StudyQueue())
        if queue.turn.locked() and queue.waiting >= self.queue_per_study:
            ASKS_BUSY.inc()
            raise ApiError(
                ProblemCode.STUDY_BUSY,
                f"{queue.waiting} asks are already waiting on this study; retry later",
                headers={"Retry-After": str(round(BUSY_RETRY_AFTER))},
                retry_after=BUSY_RETRY_AFTER,
            )
        queue.users += 1
        try:
            await self._wait_turn(study_id, queue, request)
            try:
                return await anyio.to_thread.run_sync(work, limiter=self.threads)
            finally:
                queue.turn.release()
        finally:
            queue.users -= 1
            if queue.users == 0:
                del self._queues[study_id]

    async def _wait_turn(self, study_id: int, queue: _StudyQueue, request: Request) -> None:
        queue.waiting += 1
        acquire = asyncio.ensure_future(queue.turn.acquire())
        try:
            while True:
                done, _ = await asyncio.wait({acquire}, timeout=DISCONNECT_POLL_SECONDS)
                # Looked at once more when the turn comes: a client that left since the last
                # look would otherwise have its ask run.
                if await request.is_disconnected():
                    ASKS_DROPPED.inc()
                    log.info("an ask on study %d was dropped: its client disconnected", study_id)
                    raise ClientGone
                if done:
                    return
        except BaseException:
            acquire.cancel()
            # The lock may have been granted between the last look and the cancel.
            if acquire.done() and not acquire.cancelled() and acquire.exception() is None:
                queue.turn.release()
            raise
        finally:
            queue.waiting -= 1
