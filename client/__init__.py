"""The asktell client: typed sync and async access to an asktell server.

Depends on httpx and pydantic only, so a worker installs it without the server's numerics.
"""

from client._async import AsyncClient, AsyncSampler, AsyncStudy
from client._sync import Client, Sampler, Study
from client.errors import (
    ApiError,
    AsktellError,
    ClientClosed,
    Conflict,
    InvalidRequest,
    NotFound,
    TransportError,
    Unavailable,
)

__all__ = [
    "ApiError",
    "AsktellError",
    "AsyncClient",
    "AsyncSampler",
    "AsyncStudy",
    "Client",
    "ClientClosed",
    "Conflict",
    "InvalidRequest",
    "NotFound",
    "Sampler",
    "Study",
    "TransportError",
    "Unavailable",
]
