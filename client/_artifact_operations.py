"""The artifact store's operations (``client._operations`` explains operations): put, get and
delete raw bytes under a path-like key (``jobs/3/trial-7.pt``), without I/O."""

from __future__ import annotations

from urllib.parse import quote

import httpx

from client._base import Call, decoder, no_content
from client._operations import Op
from client.artifact_models import ArtifactPublic


def _path(key: str) -> str:
    # Dot segments are escaped so that URL normalization does not resolve them: the server
    # answers invalid_artifact_key instead of another route's 404.
    segments = key.split("/")
    quoted = ["%2E" * len(s) if s in (".", "..") else quote(s, safe="") for s in segments]
    return "/v1/artifacts/" + "/".join(quoted)


def _content(response: httpx.Response) -> bytes:
    return response.content


def put_artifact(client: object, key: str, data: bytes) -> Op[ArtifactPublic]:
    """Store ``data`` under ``key`` (segments of A-Z a-z 0-9 . _ - joined by ``/``), replacing
    what was there; the write is atomic on the server."""
    headers = {"Content-Type": "application/octet-stream"}
    call = Call("PUT", _path(key), decoder(ArtifactPublic), headers=headers, content=bytes(data))
    return (yield call)


def get_artifact(client: object, key: str) -> Op[bytes]:
    """The bytes stored under ``key``. Raises ``ArtifactNotFound``."""
    return (yield Call("GET", _path(key), _content))


def delete_artifact(client: object, key: str) -> Op[None]:
    """Remove the artifact under ``key``. Raises ``ArtifactNotFound``."""
    return (yield Call("DELETE", _path(key), no_content))
