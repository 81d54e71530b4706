"""The wire model of the artifact store (``PUT /v1/artifacts/{key}``)."""

from __future__ import annotations

from pydantic import BaseModel


class ArtifactPublic(BaseModel):
    """An artifact just stored: its key and its size in bytes."""

    key: str
    size: int
