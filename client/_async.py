"""The asynchronous client: ``AsyncClient`` and its ``AsyncStudy`` and ``AsyncSampler`` handles,
with the methods of the sync client as coroutines.

The methods are listed once in ``client._methods``; ``AsyncClient`` performs the steps of their
operations: calls and sleeps are awaited, ``Parallel`` operations run as tasks, a plain user
function runs in a thread, and a task sends heartbeats while it works on a trial.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx

from client._base import Call, raise_for_problem, retry_delay
from client._events import E, EventStream, ServerEvent, SSEStream
from client._jobs import (
    JobEventStream,
    JobMethods,
    JobOpening,
    JobServerEvent,
    get_job,
    list_jobs,
    submit_job,
)
from client._methods import Awaiting, ClientMethods, Listing, SamplerMethods, StudyMethods
from client._operations import Done, Evaluate, Lease, Op, Pages, Sleep, Step, advance
from client.models import JobPublic, SamplerPublic, StudyPublic

T = TypeVar("T")


class AsyncStudy(StudyMethods, Awaiting):
    """As ``client.Study``, with coroutines; ``optimize`` and ``train`` also take coroutine
    functions."""

    client: AsyncClient

    async def events(self, last_event_id: str | None = None) -> AsyncIterator[ServerEvent]:
        """As ``Study.events``: ``async for event in study.events()``."""
        stream = EventStream(self.id, last_event_id, self.client.retries)
        while True:
            try:
                async for event in self.client._stream(stream):
                    yield event
                error = None
            except httpx.TransportError as exc:
                error = exc
            await asyncio.sleep(stream.lost(error))


class AsyncSampler(SamplerMethods, Awaiting):
    """As ``client.Sampler``, with coroutines; ``scores`` in ``run`` may be async."""

    client: AsyncClient


class AsyncClient(ClientMethods[httpx.AsyncClient, httpx.AsyncBaseTransport], Awaiting):
    """The async twin of ``Client``; use ``async with AsyncClient(url) as client``."""

    _http_class = httpx.AsyncClient

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send ``call``, retrying transient failures, and decode the answer."""
        request = self._prepare(call)
        for attempt in range(self.retries + 1):
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = await self._http.send(request)
            except httpx.TransportError as exc:
                outcome = exc
            delay = retry_delay(attempt, self.retries, outcome)
            if delay is None:
                break
            await asyncio.sleep(delay)
        return call.answer(outcome)

    async def _run(self, op: Op[T]) -> T:
        """Perform the steps of the operation ``op`` and return its result."""
        try:
            step = advance(op)
            while not isinstance(step, Done):
                try:
                    outcome, error = await self._perform(step), None
                except Exception as exc:  # raised where ``op`` yielded: it handles it or not
                    outcome, error = None, exc
                step = advance(op, outcome, error)
            return step.value
        finally:
            op.close()  # a cancelled task leaves ``op`` waiting: end it here

    async def _list(self, pages: Pages[T]) -> AsyncIterator[T]:
        page = await self.send(pages.call(None))
        for item in page.data:
            yield item
        while page.next_cursor is not None:
            page = await self.send(pages.call(page.next_cursor))
            for item in page.data:
                yield item

    async def _stream(self, stream: SSEStream[E]) -> AsyncIterator[E]:
        """One connection of ``stream``: its events until the server or the network ends it."""
        response = await self._http.send(self._prepare(stream.call()), stream=True)
        try:
            if response.is_error:
                await response.aread()
                raise_for_problem(response)
            async for line in response.aiter_lines():
                event = stream.feed(line)
                if event is not None:
                    yield event
        finally:
            await response.aclose()

    async def _open(self, op: Op[StudyPublic | SamplerPublic]) -> AsyncStudy | AsyncSampler:
        info = await self._run(op)
        if isinstance(info, StudyPublic):
            return AsyncStudy(self, info)
        return AsyncSampler(self, info)

    async def _perform(self, step: Step) -> Any:
        if isinstance(step, Call):
            return await self.send(step)
        if isinstance(step, Sleep):
            return await asyncio.sleep(step.seconds)
        if isinstance(step, Evaluate):
            return await self._evaluate(step)
        return await self._parallel(step.ops)

    async def _evaluate(self, step: Evaluate) -> Any:
        beating = asyncio.create_task(self._beat(step.lease)) if step.lease else None
        try:
            if step.lease is None or inspect.iscoroutinefunction(step.fn):
                result = step.fn(step.arg)
            else:  # a plain function runs in a thread, so that heartbeats keep flowing meanwhile
                result = await asyncio.to_thread(step.fn, step.arg)
            return await result if inspect.isawaitable(result) else result
        finally:
            if beating is not None:
                beating.cancel()

    async def _beat(self, lease: Lease) -> None:
        while True:
            await asyncio.sleep(lease.interval)
            try:
                await self.send(lease.heartbeat())
            except Exception:
                return  # the trial finished or the server is away; the tell decides

    async def _parallel(self, ops: list[Op[None]]) -> None:
        tasks = [asyncio.create_task(self._run(op)) for op in ops]
        _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in pending:  # one failed: stop the others before raising
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in tasks:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error

    submit_job = JobOpening(submit_job)
    job = JobOpening(get_job)
    jobs = Listing(list_jobs)

    async def _open_job(self, op: Op[JobPublic]) -> AsyncJob:
        return AsyncJob(self, await self._run(op))


class AsyncJob(JobMethods, Awaiting):
    """As ``client.Job``, with coroutines."""

    client: AsyncClient

    async def events(self, last_event_id: str | None = None) -> AsyncIterator[JobServerEvent]:
        """As ``Job.events``: ``async for event in job.events()``."""
        stream = JobEventStream(self.id, last_event_id, self.client.retries)
        while not stream.ended:
            try:
                async for event in self.client._stream(stream):
                    yield event
                error = None
            except httpx.TransportError as exc:
                error = exc
            if not stream.ended:
                await asyncio.sleep(stream.lost(error))
