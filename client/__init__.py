"""The asktell client: typed sync and async access to an asktell server.

Depends on httpx and pydantic only, so a worker installs it without the server's numerics. The
clients load on first use, so that ``client.models`` and ``client.errors`` (which the server
imports) load no HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from client.errors import (
    ApiError,
    AsktellError,
    BodyTooLarge,
    CheckpointRequired,
    ClientClosed,
    Conflict,
    EngineSchedulesUnits,
    EngineUnsupported,
    HttpError,
    IdempotencyKeyReused,
    InternalError,
    InvalidCursor,
    InvalidEngine,
    InvalidIdempotencyKey,
    InvalidImport,
    InvalidParams,
    InvalidRequest,
    InvalidSampler,
    InvalidSearchSpace,
    InvalidStudy,
    MalformedJson,
    MaxTrialsReached,
    MethodNotAllowed,
    MissingConstraint,
    MissingObjective,
    NoCompletedUnit,
    NonFiniteGradient,
    NonFiniteLogProb,
    NonFiniteValue,
    NotASchedulerStudy,
    NotFound,
    ShapeMismatch,
    StaleIteration,
    StepNotFinite,
    StudyExists,
    StudyNotActive,
    TransportError,
    TrialFinished,
    TrialNotFound,
    TrialNotRunning,
    TrialReassigned,
    Unavailable,
    UnknownConstraint,
    UnknownObjective,
    ValidationError,
)

if TYPE_CHECKING:
    from client._async import AsyncClient, AsyncSampler, AsyncStudy
    from client._events import ServerEvent
    from client._sync import Client, Sampler, Study

#: The names that load httpx, by the module that defines them.
_LAZY = {
    "AsyncClient": "client._async",
    "AsyncSampler": "client._async",
    "AsyncStudy": "client._async",
    "Client": "client._sync",
    "Sampler": "client._sync",
    "ServerEvent": "client._events",
    "Study": "client._sync",
}

__all__ = [
    "ApiError",
    "AsktellError",
    "AsyncClient",
    "AsyncSampler",
    "AsyncStudy",
    "BodyTooLarge",
    "CheckpointRequired",
    "Client",
    "ClientClosed",
    "Conflict",
    "EngineSchedulesUnits",
    "EngineUnsupported",
    "HttpError",
    "IdempotencyKeyReused",
    "InternalError",
    "InvalidCursor",
    "InvalidEngine",
    "InvalidIdempotencyKey",
    "InvalidImport",
    "InvalidParams",
    "InvalidRequest",
    "InvalidSampler",
    "InvalidSearchSpace",
    "InvalidStudy",
    "MalformedJson",
    "MaxTrialsReached",
    "MethodNotAllowed",
    "MissingConstraint",
    "MissingObjective",
    "NoCompletedUnit",
    "NonFiniteGradient",
    "NonFiniteLogProb",
    "NonFiniteValue",
    "NotASchedulerStudy",
    "NotFound",
    "Sampler",
    "ServerEvent",
    "ShapeMismatch",
    "StaleIteration",
    "StepNotFinite",
    "Study",
    "StudyExists",
    "StudyNotActive",
    "TransportError",
    "TrialFinished",
    "TrialNotFound",
    "TrialNotRunning",
    "TrialReassigned",
    "Unavailable",
    "UnknownConstraint",
    "UnknownObjective",
    "ValidationError",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
