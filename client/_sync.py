"""The synchronous client: ``Client`` and its ``Study`` and ``Sampler`` handles.

The methods are listed once in ``client._methods``; ``Client`` performs the steps of their
operations: calls are sent (with retries), sleeps block, ``Parallel`` operations run on
threads, and a thread sends heartbeats while the user's function works on a trial.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
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
from client._methods import Blocking, ClientMethods, Listing, SamplerMethods, StudyMethods
from client._operations import Done, Evaluate, Lease, Op, Pages, Sleep, Step, advance
from client.models import JobPublic, SamplerPublic, StudyPublic

T = TypeVar("T")


class Study(StudyMethods, Blocking):
    """A study on the server; ``info`` is its state when last fetched (``refresh()``)."""

    client: Client

    def events(self, last_event_id: str | None = None) -> Iterator[ServerEvent]:
        """The study's events as they happen (trial asked, told, failed; study state), after
        the event ``last_event_id`` when given; endless until the loop breaks. A lost connection
        is opened again where it stopped (``client.retries`` times in a row at most)."""
        stream = EventStream(self.id, last_event_id, self.client.retries)
        while True:
            try:
                yield from self.client._stream(stream)
                error = None
            except httpx.TransportError as exc:
                error = exc
            time.sleep(stream.lost(error))


class Sampler(SamplerMethods, Blocking):
    """A multi-target sampler on the server; ``info`` is its state when last fetched.

    Example (``scores(X)`` returns ``grad log pi_k`` at every particle, ``K x m x d``)::

        sampler = client.create_sampler(dim=2, n_targets=4, n_particles=50, seed=0)
        info = sampler.run(scores, iterations=500)
        print(info.X, info.grad_norm_history[-1])
    """

    client: Client


class Client(ClientMethods[httpx.Client, httpx.BaseTransport], Blocking):
    """A connection to an asktell server.

    Connection errors, 429 and 503 are retried ``retries`` times with backoff; that is safe for
    POSTs because each call carries its own Idempotency-Key.

    Example::

        with Client("http://127.0.0.1:8000") as client:
            x = {"type": "float", "name": "x", "low": -5, "high": 5}
            study = client.create_study("demo", [x])
            study.optimize(lambda p: (p["x"] - 1) ** 2, n_trials=30)
            print(study.best().trials[0].params)
    """

    _http_class = httpx.Client

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send ``call``, retrying transient failures, and decode the answer."""
        request = self._prepare(call)
        for attempt in range(self.retries + 1):
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = self._http.send(request)
            except httpx.TransportError as exc:
                outcome = exc
            delay = retry_delay(attempt, self.retries, outcome)
            if delay is None:
                break
            time.sleep(delay)
        return call.answer(outcome)

    def _run(self, op: Op[T]) -> T:
        """Perform the steps of the operation ``op`` and return its result."""
        step = advance(op)
        while not isinstance(step, Done):
            try:
                outcome, error = self._perform(step), None
            except BaseException as exc:  # raised where ``op`` yielded: it handles it or not
                outcome, error = None, exc
            step = advance(op, outcome, error)
        return step.value

    def _list(self, pages: Pages[T]) -> Iterator[T]:
        cursor = None
        while True:
            page = self.send(pages.call(cursor))
            yield from page.data
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def _stream(self, stream: SSEStream[E]) -> Iterator[E]:
        """One connection of ``stream``: its events until the server or the network ends it."""
        response = self._http.send(self._prepare(stream.call()), stream=True)
        try:
            if response.is_error:
                response.read()
                raise_for_problem(response)
            for line in response.iter_lines():
                event = stream.feed(line)
                if event is not None:
                    yield event
        finally:
            response.close()

    def _open(self, op: Op[StudyPublic | SamplerPublic]) -> Study | Sampler:
        info = self._run(op)
        return Study(self, info) if isinstance(info, StudyPublic) else Sampler(self, info)

    def _perform(self, step: Step) -> Any:
        if isinstance(step, Call):
            return self.send(step)
        if isinstance(step, Sleep):
            return time.sleep(step.seconds)
        if isinstance(step, Evaluate):
            with _Heartbeat(self, step.lease) if step.lease else contextlib.nullcontext():
                return step.fn(step.arg)
        return self._parallel(step.ops)

    def _parallel(self, ops: list[Op[None]]) -> None:
        errors: list[BaseException] = []

        def work(op: Op[None]) -> None:
            try:
                self._run(op)
            except BaseException as exc:  # re-raised in the caller once every thread is done
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(op,)) for op in ops]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    submit_job = JobOpening(submit_job)
    job = JobOpening(get_job)
    jobs = Listing(list_jobs)

    def _open_job(self, op: Op[JobPublic]) -> Job:
        return Job(self, self._run(op))


class Job(JobMethods, Blocking):
    """A tuning job on the server; ``info`` is its state when last fetched (``refresh()``).

    Example::

        job = client.submit_job(name="digits", dataset="digits", optimizer="olion",
                                budget={"steps": 2000, "population": 8})
        job.wait()  # a progress bar on stderr
        print(job.info.result.test_score, job.predict([{"x0": 0.0, ...}]))
    """

    client: Client

    def events(self, last_event_id: str | None = None) -> Iterator[JobServerEvent]:
        """The job's events (``job_state``, ``unit_told``) until it ends; a lost connection
        is opened again where it stopped."""
        stream = JobEventStream(self.id, last_event_id, self.client.retries)
        while not stream.ended:
            try:
                yield from self.client._stream(stream)
                error = None
            except httpx.TransportError as exc:
                error = exc
            if not stream.ended:
                time.sleep(stream.lost(error))


class _Heartbeat:
    """Sends heartbeats for one trial every third of its lease until the block exits."""

    def __init__(self, client: Client, lease: Lease) -> None:
        self.client, self.lease = client, lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.lease.interval):
            try:
                self.client.send(self.lease.heartbeat())
            except Exception:
                return  # the trial finished or the server is away; the tell decides
