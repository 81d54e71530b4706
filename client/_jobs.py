"""Tuning jobs in the client, without I/O: the operations of ``client.submit_job``,
``client.job``, ``client.jobs`` and of a ``Job`` handle (``wait``, ``cancel``, ``best``,
``download_model``, ``predict``, ``refresh``), the binding that wraps a job in its handle, and
the parser of a job's event stream."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, overload

import httpx

from client._base import Call, body, decoder
from client._events import SSEStream
from client._methods import Awaiting, Blocking, Coro, Method, _Binding
from client._operations import Op, Pages, Sleep, _listing
from client.models import (
    JOB_ENDED,
    JobCreate,
    JobEvent,
    JobPublic,
    JobResult,
    JobsPage,
    PredictRequest,
    PredictResponse,
)

if TYPE_CHECKING:
    from client._async import AsyncJob
    from client._sync import Job

P = ParamSpec("P")
_job = decoder(JobPublic)


def _content(response: httpx.Response) -> bytes:
    return response.content


# --- the client ---------------------------------------------------------------------------


def submit_job(client: object, **fields: Any) -> Op[JobPublic]:
    """Create a tuning job from ``JobCreate``'s fields (``name``, ``dataset``, ``optimizer``,
    ``optimizer_options``, ``budget``, ``workload``, ``engine``, ``parallelism``, ``seed``,
    ``executor``, ``resources``); the server runs it."""
    spec = JobCreate.model_validate(fields)
    return (yield Call("POST", "/v1/jobs", _job, json=body(spec)))


def get_job(client: object, job_id: int) -> Op[JobPublic]:
    return (yield Call("GET", f"/v1/jobs/{job_id}", _job))


def list_jobs(client: object, page_size: int = 100) -> Pages[JobPublic]:
    """Every job, in id order."""
    return _listing("/v1/jobs", decoder(JobsPage), {"limit": page_size})


# --- a job --------------------------------------------------------------------------------


class JobHandle:
    """A job on the server; ``info`` is its state when last fetched (``refresh()``)."""

    def __init__(self, client: Any, info: JobPublic) -> None:
        self.client, self.id = client, info.id
        self.info = info

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id}, name={self.info.name!r})"

    def _run(self, op: Op[Any]) -> Any:
        return self.client._run(op)


def refresh(job: JobHandle) -> Op[JobPublic]:
    job.info = yield from get_job(None, job.id)
    return job.info


def cancel(job: JobHandle) -> Op[JobPublic]:
    """Stop the job; its workers stop within a few seconds (``wait()`` for ``cancelled``)."""
    job.info = yield Call("POST", f"/v1/jobs/{job.id}/cancel", _job)
    return job.info


def wait(
    job: JobHandle, progress: bool = True, poll_seconds: float = 1.0, timeout: float | None = None
) -> Op[JobPublic]:
    """Wait until the job has ended, drawing a progress bar on stderr when ``progress``;
    returns its final state. Raises ``TimeoutError`` after ``timeout`` seconds."""
    started = time.monotonic()
    while True:
        info = yield from refresh(job)
        if progress:
            _draw(info)
        if info.state in JOB_ENDED:
            if progress:
                sys.stderr.write("\n")
            return info
        if timeout is not None and time.monotonic() - started > timeout:
            raise TimeoutError(f"job {job.id} still {info.state} after {timeout} s")
        yield Sleep(poll_seconds)


def progress_line(info: JobPublic, width: int = 30) -> str:
    """``job NAME [#####.....]  45%  units 12  best 0.9512  12s elapsed  15s left  running``."""
    share = min(1.0, info.steps_done / info.steps_budget) if info.steps_budget else 0.0
    if info.state == "succeeded":
        share = 1.0
    filled = round(share * width)
    parts = [f"job {info.name} [{'#' * filled}{'.' * (width - filled)}] {share:4.0%}"]
    parts.append(f"units {info.units_done}")
    if info.best_score is not None:
        parts.append(f"best {info.best_score:.4f}")
    if info.elapsed_seconds is not None:
        parts.append(f"{info.elapsed_seconds:.0f}s elapsed")
    if info.remaining_seconds is not None and info.state == "running":
        parts.append(f"{info.remaining_seconds:.0f}s left")
    parts.append(info.state)
    return "  ".join(parts)


def _draw(info: JobPublic) -> None:
    line = progress_line(info)
    if sys.stderr.isatty():
        sys.stderr.write("\r" + line + "\x1b[K")
    else:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def best(job: JobHandle) -> Op[JobResult | None]:
    """What the job produced (best trial, schedule, test score, model key); None until it has
    succeeded."""
    info = yield from refresh(job)
    return info.result


def model_bytes(job: JobHandle) -> Op[bytes]:
    """The model file of a succeeded job (``torch.load``-able)."""
    return (yield Call("GET", f"/v1/jobs/{job.id}/model", _content))


def download_model(job: JobHandle, path: str | Path) -> Op[Path]:
    """Save the model of a succeeded job to ``path``; returns the path."""
    data = yield from model_bytes(job)
    target = Path(path)
    target.write_bytes(data)
    return target


def predict(job: JobHandle, rows: list[dict[str, Any]]) -> Op[list[Any]]:
    """Predictions of the job's model for feature rows (by column name, raw values)."""
    req = PredictRequest(rows=rows)
    path = f"/v1/jobs/{job.id}/predict"
    return (yield Call("POST", path, decoder(PredictResponse), json=body(req))).predictions


class JobMethods(JobHandle):
    """The methods of ``Job`` and ``AsyncJob``."""

    refresh = Method(refresh)
    cancel = Method(cancel)
    wait = Method(wait)
    best = Method(best)
    model_bytes = Method(model_bytes)
    download_model = Method(download_model)
    predict = Method(predict)


class JobOpening(_Binding, Generic[P]):
    """A client's method that returns a job's handle."""

    _perform = "_open_job"

    def __init__(self, op: Callable[Concatenate[Any, P], Op[JobPublic]]) -> None:
        super().__init__(op)

    @overload
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, Job]: ...
    @overload
    def __get__(self, obj: Awaiting, owner: type) -> Callable[P, Coro[AsyncJob]]: ...
    @overload
    def __get__(self, obj: None, owner: type) -> Callable[Concatenate[Any, P], Op[JobPublic]]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        return self.op if obj is None else self._bind(obj)


# --- events -------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobServerEvent:
    """One event of a job's stream: ``event`` is ``job_state`` or ``unit_told``."""

    event: str
    id: str | None
    data: JobEvent


class JobEventStream(SSEStream[JobServerEvent]):
    """A job's stream (``GET /v1/jobs/{id}/events``); it ends with the job."""

    def __init__(self, job_id: int, last_event_id: str | None, retries: int) -> None:
        super().__init__(f"/v1/jobs/{job_id}/events", last_event_id, retries)
        self.ended = False

    def _event(self, kind: str, event_id: str | None, data_json: str) -> JobServerEvent:
        event = JobServerEvent(kind, event_id, JobEvent.model_validate_json(data_json))
        self.ended = event.event == "job_state" and event.data.state in JOB_ENDED
        return event
