"""The asynchronous client: ``AsyncClient`` and its ``AsyncStudy`` handle, mirroring the sync
client method for method."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx

from client import _calls
from client._base import (
    DEFAULT_BASE_URL,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    Budget,
    Call,
    raise_for_problem,
    retry_delay,
    should_retry,
    split_results,
    worker_name,
)
from client._sync import Result
from client.errors import ClientClosed, TransportError
from client.models import (
    AskRequest,
    AskResponse,
    BestPublic,
    CheckpointsPublic,
    HeartbeatRequest,
    Lineage,
    MeasurementPublic,
    ReportRequest,
    SamplerAsk,
    SamplerPublic,
    SamplerStep,
    StudyCreate,
    StudyExport,
    StudyPublic,
    StudyState,
    StudyUpdate,
    TellRequest,
    TrialCreate,
    TrialPublic,
)

T = TypeVar("T")


class AsyncClient:
    """The async twin of ``Client``; use ``async with AsyncClient(url) as client``."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=timeout, headers=headers, transport=transport
        )
        self.retries = retries
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        if self._closed:
            raise ClientClosed("this AsyncClient is closed; create a new one")
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers
                )
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
                await asyncio.sleep(retry_delay(attempt, None))
                continue
            if should_retry(response) and attempt < self.retries:
                await asyncio.sleep(retry_delay(attempt, response))
                continue
            raise_for_problem(response)
            return call.decode(response)
        raise AssertionError("unreachable")

    async def create_study(
        self,
        name: str,
        parameters: list[Any],
        objectives: list[Any] | None = None,
        constraints: list[Any] | None = None,
        engine: str | dict[str, Any] = "random",
        **fields: Any,
    ) -> AsyncStudy:
        spec = _calls.study_create(name, parameters, objectives, constraints, engine, fields)
        return await self.create_study_from(spec)

    async def create_study_from(self, spec: StudyCreate) -> AsyncStudy:
        return AsyncStudy(self, await self.send(_calls.create_study(spec)))

    async def get_study(self, study_id: int) -> AsyncStudy:
        return AsyncStudy(self, await self.send(_calls.get_study(study_id)))

    async def list_studies(self, page_size: int = 100) -> AsyncIterator[StudyPublic]:
        cursor: str | None = None
        while True:
            page = await self.send(_calls.list_studies(cursor, page_size))
            for study in page.data:
                yield study
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def import_study(
        self, export: StudyExport | dict[str, Any], name: str | None = None
    ) -> AsyncStudy:
        export = StudyExport.model_validate(export)
        return AsyncStudy(self, await self.send(_calls.import_study(export, name)))

    # --- samplers ---

    async def create_sampler(self, dim: int, n_targets: int, **fields: Any) -> AsyncSampler:
        """As ``Client.create_sampler``."""
        return AsyncSampler(self, await self.send(_calls.create_sampler(dim, n_targets, fields)))

    async def get_sampler(self, sampler_id: int) -> AsyncSampler:
        return AsyncSampler(self, await self.send(_calls.get_sampler(sampler_id)))


class AsyncStudy:
    def __init__(self, client: AsyncClient, info: StudyPublic) -> None:
        self.client, self.info, self.id = client, info, info.id

    def __repr__(self) -> str:
        return f"AsyncStudy(id={self.id}, name={self.info.name!r})"

    async def refresh(self) -> StudyPublic:
        self.info = await self.client.send(_calls.get_study(self.id))
        return self.info

    async def ask(
        self, count: int = 1, worker_id: str | None = None, lease_seconds: float | None = None
    ) -> list[TrialPublic]:
        req = AskRequest(count=count, worker_id=worker_id, lease_seconds=lease_seconds)
        return (await self.client.send(_calls.ask(self.id, req))).trials

    async def ask_units(
        self, count: int = 1, worker_id: str | None = None, lease_seconds: float | None = None
    ) -> AskResponse:
        """Ask a scheduler study (``pbt``, ``ipbt``) for training units: the whole answer, with
        ``retry_after`` while a generation is still training and ``finished`` at the end."""
        req = AskRequest(count=count, worker_id=worker_id, lease_seconds=lease_seconds)
        return await self.client.send(_calls.ask(self.id, req))

    async def tell(
        self,
        number: int,
        values: Mapping[str, float] | float | None = None,
        constraints: Mapping[str, float] | None = None,
        metadata: dict[str, Any] | None = None,
        checkpoint: str | None = None,
    ) -> TrialPublic:
        """Tell a trial's results; ``checkpoint`` is the reference of the checkpoint saved at its
        end (required for a scheduler's unit unless a report gave it)."""
        if values is None or isinstance(values, Mapping):
            by_name = dict(values or {})
        else:  # a number (numpy scalars included) for a single-objective study
            by_name = {self.info.objectives[0].name: float(values)}
        req = TellRequest(
            values=by_name,
            constraints=dict(constraints or {}),
            metadata=metadata,
            checkpoint=checkpoint,
        )
        return await self.client.send(_calls.tell(self.id, number, req))

    async def fail(
        self, number: int, reason: str | None = None, infeasible: bool = False
    ) -> TrialPublic:
        req = TellRequest(state="infeasible" if infeasible else "failed", reason=reason)
        return await self.client.send(_calls.tell(self.id, number, req))

    async def report(
        self, number: int, step: int, values: Mapping[str, float], checkpoint: str | None = None
    ) -> MeasurementPublic:
        req = ReportRequest(step=step, values=dict(values), checkpoint=checkpoint)
        return await self.client.send(_calls.report(self.id, number, req))

    async def heartbeat(
        self, number: int, lease_seconds: float | None = None, worker_id: str | None = None
    ) -> TrialPublic:
        req = HeartbeatRequest(lease_seconds=lease_seconds, worker_id=worker_id)
        return await self.client.send(_calls.heartbeat(self.id, number, req))

    async def enqueue(
        self,
        params: Mapping[str, Any],
        values: Mapping[str, float] | None = None,
        constraints: Mapping[str, float] | None = None,
    ) -> TrialPublic:
        req = TrialCreate(
            params=dict(params),
            values=dict(values) if values is not None else None,
            constraints=dict(constraints or {}),
        )
        return await self.client.send(_calls.enqueue(self.id, req))

    async def trial(self, number: int) -> TrialPublic:
        return await self.client.send(_calls.get_trial(self.id, number))

    async def trials(
        self, states: list[str] | None = None, page_size: int = 500
    ) -> AsyncIterator[TrialPublic]:
        cursor: str | None = None
        while True:
            page = await self.client.send(_calls.list_trials(self.id, states, cursor, page_size))
            for trial in page.data:
                yield trial
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def measurements(self, number: int) -> list[MeasurementPublic]:
        return await self.client.send(_calls.measurements(self.id, number))

    async def best(self) -> BestPublic:
        return await self.client.send(_calls.best(self.id))

    async def lineage(self, number: int) -> Lineage:
        """The units whose checkpoints led to unit ``number`` (scheduler studies)."""
        return await self.client.send(_calls.lineage(self.id, number))

    async def best_schedule(self) -> Lineage:
        """The lineage of the best unit: the best member's hyperparameter schedule."""
        return await self.client.send(_calls.best_schedule(self.id))

    async def checkpoints(self) -> CheckpointsPublic:
        """Which checkpoints are still needed (``pinned``) and which may be deleted."""
        return await self.client.send(_calls.checkpoints(self.id))

    async def export(self) -> StudyExport:
        return await self.client.send(_calls.export_json(self.id))

    async def export_csv(self) -> str:
        return await self.client.send(_calls.export_csv(self.id))

    async def update(
        self, state: StudyState | None = None, metadata: dict[str, Any] | None = None
    ) -> StudyPublic:
        change = StudyUpdate.model_validate(
            {k: v for k, v in {"state": state, "metadata": metadata}.items() if v is not None}
        )
        self.info = await self.client.send(_calls.update_study(self.id, change))
        return self.info

    async def delete(self) -> None:
        await self.client.send(_calls.delete_study(self.id))

    async def optimize(
        self,
        fn: Callable[[dict[str, Any]], Result | Awaitable[Result]],
        n_trials: int,
        n_workers: int = 1,
        *,
        catch: tuple[type[BaseException], ...] = (),
        progress: bool = True,
        lease_seconds: float | None = None,
    ) -> None:
        """As ``Study.optimize``, with ``n_workers`` tasks; ``fn`` may be sync or async."""
        objectives = [o.name for o in self.info.objectives]
        constraints = [c.name for c in self.info.constraints]
        lease = lease_seconds or self.info.lease_seconds
        budget = Budget(n_trials, progress)

        async def beat(number: int, worker_id: str) -> None:
            while True:
                await asyncio.sleep(lease / 3)
                try:
                    await self.heartbeat(number, lease, worker_id=worker_id)
                except Exception:
                    return  # the trial finished or the server is away; the tell decides

        async def evaluate(params: dict[str, Any]) -> Result:
            if inspect.iscoroutinefunction(fn):
                return await fn(params)
            # A plain function runs in a thread, so heartbeats keep flowing meanwhile.
            result = await asyncio.to_thread(fn, params)
            if inspect.isawaitable(result):
                result = await result
            return result

        async def run_one(worker_id: str) -> None:
            trials = await self.ask(1, worker_id=worker_id, lease_seconds=lease)
            if not trials:  # a scheduler waiting for its generation: come back later
                budget.release()
                await asyncio.sleep(1.0)
                return
            (trial,) = trials
            beating = asyncio.create_task(beat(trial.number, worker_id))
            try:
                result = await evaluate(dict(trial.params))
            except Exception as exc:
                await self.fail(trial.number, reason=repr(exc))
                budget.done(ok=False)
                if not isinstance(exc, catch):
                    raise
                return
            finally:
                beating.cancel()
            values, cons, problem = split_results(result, objectives, constraints)
            if problem is not None:
                await self.fail(trial.number, reason=problem)
                budget.done(ok=False)
                return
            await self.tell(trial.number, values, cons)
            budget.done(ok=True)

        async def worker(index: int) -> None:
            worker_id = worker_name(index)
            while budget.take():
                await run_one(worker_id)

        tasks = [asyncio.create_task(worker(i)) for i in range(n_workers)]
        try:
            _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in pending:  # one worker failed: stop the others before raising
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            budget.finish()
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]


class AsyncSampler:
    """As ``client.Sampler``, with coroutines; ``scores`` in ``run`` may be async."""

    def __init__(self, client: AsyncClient, info: SamplerPublic) -> None:
        self.client, self.info, self.id = client, info, info.id

    def __repr__(self) -> str:
        return f"AsyncSampler(id={self.id}, iteration={self.info.iteration})"

    async def refresh(self) -> SamplerPublic:
        self.info = await self.client.send(_calls.get_sampler(self.id))
        return self.info

    async def ask(self) -> SamplerAsk:
        return await self.client.send(_calls.ask_sampler(self.id))

    async def tell(self, iteration: int, grad_log_prob: Any, log_prob: Any = None) -> SamplerStep:
        call = _calls.tell_sampler(self.id, iteration, grad_log_prob, log_prob)
        return await self.client.send(call)

    async def run(
        self, scores: Callable[[list[list[float]]], Any], iterations: int
    ) -> SamplerPublic:
        for _ in range(iterations):
            asked = await self.ask()
            answer = scores(asked.X)
            if inspect.isawaitable(answer):
                answer = await answer
            grads, log_prob = answer if isinstance(answer, tuple) else (answer, None)
            await self.tell(asked.iteration, grads, log_prob)
        return await self.refresh()

    async def delete(self) -> None:
        await self.client.send(_calls.delete_sampler(self.id))
