"""A job's artifact keys, and the server side's reads and writes of them in the artifact store
(``service.artifacts.ArtifactStore``; the workers go through ``PUT|GET /v1/artifacts/...``)."""

from __future__ import annotations

from typing import Any

from service.errors import ApiError, ProblemCode


def checkpoint_key(job_id: int, number: int) -> str:
    """The checkpoint trial ``number`` saved: the reference told to the study."""
    return f"jobs/{job_id}/trial-{number}.pt"


def split_key(job_id: int) -> str:
    """The job's dataset split and encoded (``Split.to_bytes``), which its runner publishes for
    its workers (``service.jobs.worker.fetch_split``)."""
    return f"jobs/{job_id}/split.npz"


def model_key(job_id: int) -> str:
    return f"jobs/{job_id}/model.pt"


def read(artifacts: Any, tenant_id: int, key: str) -> bytes:
    """Raises: ApiError 404 ``artifact_not_found``."""
    from service.artifacts import ArtifactNotFound

    try:
        return bytes(artifacts.read(tenant_id, key))
    except ArtifactNotFound as exc:
        raise ApiError(ProblemCode.ARTIFACT_NOT_FOUND, f"no artifact {key!r}") from exc


def write(artifacts: Any, tenant_id: int, key: str, data: bytes) -> None:
    artifacts.put(tenant_id, key, data)


def delete(artifacts: Any, tenant_id: int, keys: list[str]) -> int:
    """Delete ``keys`` (missing ones are skipped); how many there were."""
    return int(artifacts.delete_many(tenant_id, keys) or 0)
