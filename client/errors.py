"""Errors raised by the asktell client.

AsktellError
├── TransportError        the server could not be reached or did not answer (httpx errors)
└── ApiError              the server answered with a problem+json error
    ├── InvalidRequest    400, 405, 408, 413, 431, 422: the request is wrong; ``detail`` says what
    │                     to fix
    ├── NotFound          404
    ├── Conflict          409 (a finished trial, a study name taken, a reused key)
    └── Unavailable       429, 503: retried by the client, raised when retries run out
ClientClosed (RuntimeError): the client was used after ``close()``.

Below the status classes, one class per problem+json ``code`` (``client.models.ProblemCode``),
named by the code in CamelCase: ``trial_finished`` raises ``TrialFinished``, a ``Conflict``. Catch
the status class to handle a kind of error, the code's class to handle one case.
"""

from __future__ import annotations

import re
from typing import Any


class AsktellError(Exception):
    """Base class of every error the client raises on purpose."""


class TransportError(AsktellError):
    """The request did not get an HTTP answer (connection refused, timeout, protocol error)."""


class ApiError(AsktellError):
    """The server answered with a problem+json error; ``code`` is stable and safe to branch on."""

    def __init__(self, status: int, code: str, detail: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail, self.body = status, code, detail, body


class InvalidRequest(ApiError):
    """400, 405, 408, 413, 415, 422, 431: the request is wrong; ``detail`` says what to fix."""


class NotFound(ApiError):
    """404 ``not_found``: the path names no study, sampler or route."""


class Conflict(ApiError):
    """409 ``conflict``: the request is well formed but conflicts with what is stored."""


class Unavailable(ApiError):
    """429, 503 ``unavailable``: retried by the client, raised when the retries run out."""


class ClientClosed(RuntimeError):
    """The client was closed; create a new one."""


# --- one class per problem+json code (400, 405, 413) --------------------------------------


class MalformedJson(InvalidRequest):
    """400: the body is not valid JSON."""


class HttpError(InvalidRequest):
    """Any other HTTP error the server's framework raised, with its own status."""


class MethodNotAllowed(InvalidRequest):
    """405: the path exists but not with this HTTP method."""


class RequestTimeout(InvalidRequest):
    """408: the request's headers or body came too slowly; the server stopped waiting."""


class HeadersTooLarge(InvalidRequest):
    """431: the request's headers are over the server's size or count limit."""


class BodyTooLarge(InvalidRequest):
    """413: the request body is over the server's size limit."""


class DatasetTooLarge(InvalidRequest):
    """413: the uploaded dataset has more bytes or rows than the server's limits."""


class UnsupportedMediaType(InvalidRequest):
    """415: the body's Content-Type is not one the route reads (a dataset: text/csv or
    multipart/form-data)."""


# --- 404 ----------------------------------------------------------------------------------


class TrialNotFound(NotFound):
    """404: the study has no trial of that number."""


class NoCompletedUnit(NotFound):
    """404: a scheduler study has no completed unit yet, so no best schedule."""


class DatasetNotFound(NotFound):
    """404: no uploaded dataset of that id or name (nor a bundled one of that name)."""


class JobNotFound(NotFound):
    """404: no job of that id."""


class ArtifactNotFound(NotFound):
    """404: no artifact under that key."""


# --- 409 ----------------------------------------------------------------------------------


class StudyExists(Conflict):
    """409: a live study of that name exists with another configuration."""


class StudyNotActive(Conflict):
    """409: the study is paused or completed, so it hands out and takes no trials."""


class TrialFinished(Conflict):
    """409: the trial is already finished (told twice, or failed by its lease)."""


class TrialNotRunning(Conflict):
    """409: a heartbeat for a trial that is not running."""


class TrialReassigned(Conflict):
    """409: the trial's lease expired and it was handed to another worker."""


class IdempotencyKeyReused(Conflict):
    """409: an Idempotency-Key was sent again with another request."""


class StaleIteration(Conflict):
    """409: a sampler tell for another iteration than the one asked."""


class EngineSchedulesUnits(Conflict):
    """409: enqueueing a point in a scheduler study, whose engine plans its own units."""


class NotASchedulerStudy(Conflict):
    """409: lineage or checkpoints asked of a study whose engine is not a scheduler."""


class MaxTrialsReached(Conflict):
    """409: ask on a study whose running and finished trials reached its ``max_trials``."""


class DatasetExists(Conflict):
    """409: a dataset has that name already (the bundled datasets' names are taken)."""


class DatasetInUse(Conflict):
    """409: a queued or running job trains on the dataset; cancel it or wait."""


class JobExists(Conflict):
    """409: a job has that name already."""


class JobFinished(Conflict):
    """409: the job has ended (succeeded, failed or cancelled); it cannot be cancelled."""


class JobNotSucceeded(Conflict):
    """409: the job has no model (yet): it is queued, running, failed or cancelled."""


# --- 422 ----------------------------------------------------------------------------------


class ValidationError(InvalidRequest):
    """422: a field of the body, path or query has the wrong type or value."""


class InvalidSearchSpace(InvalidRequest):
    """422: a parameter is wrong (bounds, log scale, no choices, a name used twice)."""


class InvalidEngine(InvalidRequest):
    """422: no engine of that name, or an option it does not have or accept."""


class EngineUnsupported(InvalidRequest):
    """422: the engine cannot handle this study (its parameters, objectives or constraints)."""


class EngineWorkTooLarge(InvalidRequest):
    """422: the study has more parameters, or the ask a larger ``count``, than the engine's caps
    allow; ``detail`` says what to lower."""


class InvalidStudy(InvalidRequest):
    """422: the study's configuration is inconsistent (e.g. two objectives of one name)."""


class InvalidImport(InvalidRequest):
    """422: the export does not describe a valid study."""


class InvalidParams(InvalidRequest):
    """422: enqueued parameters do not fit the search space."""


class InvalidCursor(InvalidRequest):
    """422: a page cursor this API did not return."""


class InvalidIdempotencyKey(InvalidRequest):
    """422: the Idempotency-Key header is empty or too long."""


class UnknownObjective(InvalidRequest):
    """422: a tell or report names an objective the study does not have."""


class UnknownConstraint(InvalidRequest):
    """422: a tell names a constraint metric the study does not have."""


class MissingObjective(InvalidRequest):
    """422: a completed tell lacks the value of an objective."""


class MissingConstraint(InvalidRequest):
    """422: a completed tell lacks the value of a declared constraint."""


class NonFiniteValue(InvalidRequest):
    """422: a told or reported value is NaN or infinite; tell the trial as failed instead."""


class CheckpointRequired(InvalidRequest):
    """422: a scheduler's unit was told completed without the checkpoint it saved."""


class InvalidSampler(InvalidRequest):
    """422: the sampler's configuration is inconsistent (initial points, bounds)."""


class ShapeMismatch(InvalidRequest):
    """422: a sampler tell's arrays do not have the asked shape."""


class NonFiniteGradient(InvalidRequest):
    """422: a sampler tell's gradients hold NaN or infinities."""


class NonFiniteLogProb(InvalidRequest):
    """422: a sampler tell's log-densities hold NaN or infinities, or overflow."""


class StepNotFinite(InvalidRequest):
    """422: the sampler's step overflowed; lower ``eta`` or rescale the scores."""


class DatasetEmpty(InvalidRequest):
    """422: the CSV has no header or no data row."""


class DatasetUnreadable(InvalidRequest):
    """422: the body is not UTF-8 CSV text, or the multipart form has no file."""


class DatasetRagged(InvalidRequest):
    """422: a row has another number of cells than the header; ``detail`` names the line."""


class DatasetNoTarget(InvalidRequest):
    """422: the CSV has no column of the target's name."""


class DatasetTargetNotNumeric(InvalidRequest):
    """422: a regression target with a value that is not a number."""


class DatasetSingleClass(InvalidRequest):
    """422: a classification target with a single class."""


class InvalidArtifactKey(InvalidRequest):
    """422: an artifact key with an empty, ``.``/``..`` or non-[A-Za-z0-9._-] segment."""


class UnknownWorkload(InvalidRequest):
    """422: no built-in workload and no ``asktell.workloads`` entry point of that name."""


class UnknownOptimizer(InvalidRequest):
    """422: a name that is not in ``engines.optim.registry``."""


class InvalidJob(InvalidRequest):
    """422: the job cannot run as asked (budget, engine, options); ``detail`` says why."""


class InvalidPredictRows(InvalidRequest):
    """422: feature rows that do not fit the job's dataset (columns, types)."""


class ExecutorUnavailable(InvalidRequest):
    """422: the job's executor (``ray``) is not installed on the server; ``detail`` names the
    extra to install."""


class StudyBusy(Unavailable):
    """503: as many asks as the server queues per study are already waiting on this study;
    retried by the client after ``Retry-After``."""


class RateLimited(Unavailable):
    """429: this API key (or client address) sent more requests per second than the server
    allows; retried by the client after ``Retry-After``."""


# --- 401, 403 -----------------------------------------------------------------------------


class Unauthorized(InvalidRequest):
    """401: no API key, or one the server does not know or has revoked (``ASKTELL_API_KEY``)."""


class InsufficientScope(InvalidRequest):
    """403: the key's scope does not allow the request (a read key that writes, a key that is
    not admin managing keys)."""


# --- 500 ----------------------------------------------------------------------------------


class InternalError(ApiError):
    """500: a bug of the server; it logged the error."""


def _code_of(cls: type[ApiError]) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


def _subclasses(cls: type[ApiError]) -> list[type[ApiError]]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


#: Every class by the code it is named after (``TrialFinished`` by ``trial_finished``).
_BY_CODE: dict[str, type[ApiError]] = {_code_of(c): c for c in _subclasses(ApiError)}


def _by_status(status: int) -> type[ApiError]:
    return {404: NotFound, 409: Conflict, 429: Unavailable, 503: Unavailable}.get(
        status, InvalidRequest if 400 <= status < 500 else ApiError
    )


def error_for(status: int, body: dict[str, Any]) -> ApiError:
    """The exception for a problem+json answer: the class of its ``code``, or of its status
    when the code is unknown."""
    code = str(body.get("code", "http_error"))
    detail = str(body.get("detail", body))
    by_status = _by_status(status)
    cls = _BY_CODE.get(code, by_status)
    # A code under an unexpected status (``http_error`` is sent with any) keeps the status class,
    # so that ``except NotFound`` still catches every 404.
    if not issubclass(cls, by_status):
        cls = by_status
    return cls(status, code, detail, body)
