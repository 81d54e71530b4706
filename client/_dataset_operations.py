"""The client's dataset operations (``client._operations`` explains operations): upload, list,
read and delete the datasets tuning jobs train on, without I/O."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import httpx

from client._base import Call, decoder, no_content
from client._operations import Op
from client.dataset_models import DatasetPublic, DatasetTask

_dataset = decoder(DatasetPublic)


def upload_dataset(
    client: object,
    name: str,
    data: bytes | str | os.PathLike[str],
    target: str,
    task: DatasetTask = "classification",
) -> Op[DatasetPublic]:
    """Upload a CSV (UTF-8, a header row first) as the dataset ``name``, predicting the column
    ``target``. ``data`` is the CSV's bytes, its text, or a file's path (a path-like, or a
    ``str`` without a line break)."""
    content = _content(data)
    params = {"name": name, "target": target, "task": task}
    headers = {"Content-Type": "text/csv"}
    return (
        yield Call(
            "POST", "/v1/datasets", _dataset, params=params, headers=headers, content=content
        )
    )


def _content(data: bytes | str | os.PathLike[str]) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, os.PathLike) or "\n" not in data:
        return Path(data).read_bytes()
    return data.encode("utf-8")


def datasets(client: object) -> Op[list[DatasetPublic]]:
    """The uploaded datasets, then the ones bundled with scikit-learn (``builtin``)."""
    return (yield Call("GET", "/v1/datasets", decoder(list[DatasetPublic])))


def dataset(client: object, id_or_name: int | str) -> Op[DatasetPublic]:
    """An uploaded dataset by id or name, or a bundled one by name (``iris``...)."""
    return (yield Call("GET", f"/v1/datasets/{_ref(id_or_name)}", _dataset))


def dataset_csv(client: object, id_or_name: int | str) -> Op[bytes]:
    """An uploaded dataset's CSV, the bytes as uploaded (what job workers train on)."""
    return (yield Call("GET", f"/v1/datasets/{_ref(id_or_name)}/csv", _content_of))


def _content_of(response: httpx.Response) -> bytes:
    return response.content


def delete_dataset(client: object, id_or_name: int | str) -> Op[None]:
    """Delete an uploaded dataset (refused while a queued or running job uses it)."""
    return (yield Call("DELETE", f"/v1/datasets/{_ref(id_or_name)}", no_content))


def _ref(id_or_name: int | str) -> str:
    return quote(str(id_or_name), safe="")
