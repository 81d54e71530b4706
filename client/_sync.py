"""The synchronous client: ``Client`` and its ``Study`` handle."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
Result = float | Mapping[str, float] | Sequence[float]


class Client:
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

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout, headers=headers, transport=transport
        )
        self.retries = retries
        self._closed = False

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send ``call``, retrying transient failures, and decode the answer."""
        if self._closed:
            raise ClientClosed("this Client is closed; create a new one")
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers
                )
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
                time.sleep(retry_delay(attempt, None))
                continue
            if should_retry(response) and attempt < self.retries:
                time.sleep(retry_delay(attempt, response))
                continue
            raise_for_problem(response)
            return call.decode(response)
        raise AssertionError("unreachable")

    # --- studies ---

    def create_study(
        self,
        name: str,
        parameters: list[Any],
        objectives: list[Any] | None = None,
        constraints: list[Any] | None = None,
        engine: str | dict[str, Any] = "random",
        **fields: Any,
    ) -> Study:
        """Create a study, or get the live one of that name with the same config.

        ``parameters``, ``objectives`` and ``constraints`` are model instances or plain dicts
        (``{"type": "float", "name": "x", "low": 0, "high": 1}``); ``fields`` are other
        ``StudyCreate`` fields (``seed``, ``lease_seconds``, ``metadata``...).
        """
        spec = _calls.study_create(name, parameters, objectives, constraints, engine, fields)
        return self.create_study_from(spec)

    def create_study_from(self, spec: StudyCreate) -> Study:
        return Study(self, self.send(_calls.create_study(spec)))

    def get_study(self, study_id: int) -> Study:
        return Study(self, self.send(_calls.get_study(study_id)))

    def list_studies(self, page_size: int = 100) -> Iterator[StudyPublic]:
        cursor: str | None = None
        while True:
            page = self.send(_calls.list_studies(cursor, page_size))
            yield from page.data
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def import_study(self, export: StudyExport | dict[str, Any], name: str | None = None) -> Study:
        export = StudyExport.model_validate(export)
        return Study(self, self.send(_calls.import_study(export, name)))

    # --- samplers ---

    def create_sampler(self, dim: int, n_targets: int, **fields: Any) -> Sampler:
        """Create a multi-target sampler; ``fields`` are other ``SamplerCreate`` fields
        (``n_particles``, ``algorithm``, ``kernel``, ``eta``, ``init``, ``bounds``, ``seed``...)."""
        return Sampler(self, self.send(_calls.create_sampler(dim, n_targets, fields)))

    def get_sampler(self, sampler_id: int) -> Sampler:
        return Sampler(self, self.send(_calls.get_sampler(sampler_id)))


class Study:
    """A study on the server; ``info`` is its state when last fetched (``refresh()``)."""

    def __init__(self, client: Client, info: StudyPublic) -> None:
        self.client, self.info, self.id = client, info, info.id

    def __repr__(self) -> str:
        return f"Study(id={self.id}, name={self.info.name!r})"

    def refresh(self) -> StudyPublic:
        self.info = self.client.send(_calls.get_study(self.id))
        return self.info

    def ask(
        self, count: int = 1, worker_id: str | None = None, lease_seconds: float | None = None
    ) -> list[TrialPublic]:
        req = AskRequest(count=count, worker_id=worker_id, lease_seconds=lease_seconds)
        return self.client.send(_calls.ask(self.id, req)).trials

    def ask_units(
        self, count: int = 1, worker_id: str | None = None, lease_seconds: float | None = None
    ) -> AskResponse:
        """Ask a scheduler study (``pbt``, ``ipbt``) for training units: the whole answer, with
        ``retry_after`` while a generation is still training and ``finished`` at the end."""
        req = AskRequest(count=count, worker_id=worker_id, lease_seconds=lease_seconds)
        return self.client.send(_calls.ask(self.id, req))

    def tell(
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
        return self.client.send(_calls.tell(self.id, number, req))

    def fail(self, number: int, reason: str | None = None, infeasible: bool = False) -> TrialPublic:
        req = TellRequest(state="infeasible" if infeasible else "failed", reason=reason)
        return self.client.send(_calls.tell(self.id, number, req))

    def report(
        self, number: int, step: int, values: Mapping[str, float], checkpoint: str | None = None
    ) -> MeasurementPublic:
        req = ReportRequest(step=step, values=dict(values), checkpoint=checkpoint)
        return self.client.send(_calls.report(self.id, number, req))

    def heartbeat(
        self, number: int, lease_seconds: float | None = None, worker_id: str | None = None
    ) -> TrialPublic:
        req = HeartbeatRequest(lease_seconds=lease_seconds, worker_id=worker_id)
        return self.client.send(_calls.heartbeat(self.id, number, req))

    def enqueue(
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
        return self.client.send(_calls.enqueue(self.id, req))

    def trial(self, number: int) -> TrialPublic:
        return self.client.send(_calls.get_trial(self.id, number))

    def trials(
        self, states: list[str] | None = None, page_size: int = 500
    ) -> Iterator[TrialPublic]:
        cursor: str | None = None
        while True:
            page = self.client.send(_calls.list_trials(self.id, states, cursor, page_size))
            yield from page.data
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def measurements(self, number: int) -> list[MeasurementPublic]:
        return self.client.send(_calls.measurements(self.id, number))

    def best(self) -> BestPublic:
        return self.client.send(_calls.best(self.id))

    def lineage(self, number: int) -> Lineage:
        """The units whose checkpoints led to unit ``number`` (scheduler studies)."""
        return self.client.send(_calls.lineage(self.id, number))

    def best_schedule(self) -> Lineage:
        """The lineage of the best unit: the best member's hyperparameter schedule."""
        return self.client.send(_calls.best_schedule(self.id))

    def checkpoints(self) -> CheckpointsPublic:
        """Which checkpoints are still needed (``pinned``) and which may be deleted."""
        return self.client.send(_calls.checkpoints(self.id))

    def export(self) -> StudyExport:
        return self.client.send(_calls.export_json(self.id))

    def export_csv(self) -> str:
        return self.client.send(_calls.export_csv(self.id))

    def update(
        self, state: StudyState | None = None, metadata: dict[str, Any] | None = None
    ) -> StudyPublic:
        change = StudyUpdate.model_validate(
            {k: v for k, v in {"state": state, "metadata": metadata}.items() if v is not None}
        )
        self.info = self.client.send(_calls.update_study(self.id, change))
        return self.info

    def delete(self) -> None:
        self.client.send(_calls.delete_study(self.id))

    def optimize(
        self,
        fn: Callable[[dict[str, Any]], Result],
        n_trials: int,
        n_workers: int = 1,
        *,
        catch: tuple[type[BaseException], ...] = (),
        progress: bool = True,
        lease_seconds: float | None = None,
    ) -> None:
        """Run ask, ``fn(params)``, tell, until ``n_trials`` trials are told, on ``n_workers``
        threads. A heartbeat keeps each running trial's lease alive while ``fn`` works.

        ``fn`` returns a number (one objective), a list of objective values, or a dict naming
        objectives and constraint metrics. If ``fn`` raises, the trial is told as failed, and
        the error propagates unless its type is in ``catch``.
        """
        objectives = [o.name for o in self.info.objectives]
        constraints = [c.name for c in self.info.constraints]
        lease = lease_seconds or self.info.lease_seconds
        budget = Budget(n_trials, progress)
        errors: list[BaseException] = []

        def run_one(worker_id: str) -> None:
            trials = self.ask(1, worker_id=worker_id, lease_seconds=lease)
            if not trials:  # a scheduler waiting for its generation: come back later
                budget.release()
                time.sleep(1.0)
                return
            (trial,) = trials
            with _Heartbeat(self, trial.number, lease, worker_id):
                try:
                    result = fn(dict(trial.params))
                except BaseException as exc:
                    self.fail(trial.number, reason=repr(exc))
                    budget.done(ok=False)
                    if not isinstance(exc, catch):
                        raise
                    return
            values, cons, problem = split_results(result, objectives, constraints)
            if problem is not None:
                self.fail(trial.number, reason=problem)
                budget.done(ok=False)
                return
            self.tell(trial.number, values, cons)
            budget.done(ok=True)

        def worker(index: int) -> None:
            worker_id = worker_name(index)
            while not errors and budget.take():
                try:
                    run_one(worker_id)
                except BaseException as exc:  # stop every worker and re-raise in the caller
                    errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        budget.finish()
        if errors:
            raise errors[0]

    def train(
        self,
        fn: Callable[[TrialPublic], tuple[Result, str]],
        *,
        worker_id: str | None = None,
        lease_seconds: float | None = None,
        max_units: int | None = None,
    ) -> int:
        """Work a scheduler study's (``pbt``, ``ipbt``) units until it is finished.

        ``fn(trial)`` trains one unit: it loads ``trial.unit.start`` (applying
        ``trial.unit.transform``), sets ``trial.params``, reports the objective at
        ``trial.unit.from_step`` first when ``trial.unit.eval_before`` is set, trains to
        ``trial.unit.to_step``, saves a new checkpoint and returns ``(result, checkpoint
        reference)``. While a generation is still training, this waits the server's
        ``retry_after``. If ``fn`` raises, the unit is told as failed and the error propagates.
        Returns the number of units trained (at most ``max_units``).
        """
        objectives = [o.name for o in self.info.objectives]
        lease = lease_seconds or self.info.lease_seconds
        worker_id = worker_id or worker_name(0)
        done = 0
        while max_units is None or done < max_units:
            answer = self.ask_units(1, worker_id=worker_id, lease_seconds=lease)
            if answer.finished:
                return done
            if not answer.trials:
                time.sleep(answer.retry_after or 1.0)
                continue
            (trial,) = answer.trials
            with _Heartbeat(self, trial.number, lease, worker_id):
                try:
                    result, checkpoint = fn(trial)
                except BaseException as exc:
                    self.fail(trial.number, reason=repr(exc))
                    raise
            values, _, problem = split_results(result, objectives, [])
            if problem is not None:
                self.fail(trial.number, reason=problem)
            else:
                self.tell(trial.number, values, checkpoint=checkpoint)
            done += 1
        return done


class Sampler:
    """A multi-target sampler on the server; ``info`` is its state when last fetched.

    Example (``scores(X)`` returns ``grad log pi_k`` at every particle, ``K x m x d``)::

        sampler = client.create_sampler(dim=2, n_targets=4, n_particles=50, seed=0)
        info = sampler.run(scores, iterations=500)
        print(info.X, info.grad_norm_history[-1])
    """

    def __init__(self, client: Client, info: SamplerPublic) -> None:
        self.client, self.info, self.id = client, info, info.id

    def __repr__(self) -> str:
        return f"Sampler(id={self.id}, iteration={self.info.iteration})"

    def refresh(self) -> SamplerPublic:
        self.info = self.client.send(_calls.get_sampler(self.id))
        return self.info

    def ask(self) -> SamplerAsk:
        return self.client.send(_calls.ask_sampler(self.id))

    def tell(self, iteration: int, grad_log_prob: Any, log_prob: Any = None) -> SamplerStep:
        """Tell the scores at the positions of ``iteration`` (nested lists or arrays)."""
        call = _calls.tell_sampler(self.id, iteration, grad_log_prob, log_prob)
        return self.client.send(call)

    def run(self, scores: Callable[[list[list[float]]], Any], iterations: int) -> SamplerPublic:
        """``iterations`` rounds of ask, ``scores(X)``, tell; ``scores`` returns the gradients
        ``K x m x d``, or ``(gradients, log_prob)`` with ``log_prob`` ``K x m``."""
        for _ in range(iterations):
            asked = self.ask()
            answer = scores(asked.X)
            grads, log_prob = answer if isinstance(answer, tuple) else (answer, None)
            self.tell(asked.iteration, grads, log_prob)
        return self.refresh()

    def delete(self) -> None:
        self.client.send(_calls.delete_sampler(self.id))


class _Heartbeat:
    """Sends heartbeats for one trial every third of its lease until the block exits."""

    def __init__(self, study: Study, number: int, lease: float, worker_id: str) -> None:
        self.study, self.number, self.lease, self.worker_id = study, number, lease, worker_id
        self.interval = lease / 3
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.study.heartbeat(self.number, self.lease, worker_id=self.worker_id)
            except Exception:
                return  # the trial finished or the server is away; the tell decides
