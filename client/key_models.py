"""The wire models of API keys (``/v1/keys``, admin keys only); ``client.models`` re-exports
them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from client._wire import Name

#: What a key may do: ``read`` (GET), ``write`` (also every other method), ``admin`` (also keys).
KeyScope = Literal["read", "write", "admin"]


class ApiKeyCreate(BaseModel):
    """A new key of the caller's tenant."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    scope: KeyScope = "read"


class ApiKeyPublic(BaseModel):
    """A key as listed: never its secret."""

    id: int
    tenant: str
    name: str
    #: The key's first characters, to tell keys apart.
    prefix: str
    scope: KeyScope
    created_at: datetime
    revoked_at: datetime | None = None


class ApiKeyCreated(ApiKeyPublic):
    """A key just created, with its secret: shown this once, the server keeps only its hash."""

    key: str
