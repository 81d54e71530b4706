"""The artifact store: opaque files (checkpoints, trained models) under keys, per tenant.

A key is a relative path of segments ``[A-Za-z0-9._-]+`` joined by ``/`` (``jobs/3/trial-7.pt``),
no segment being ``.`` or ``..``, at most ``MAX_KEY_LENGTH`` characters. Tenant ``t``'s key
``k`` is the file ``<root>/<t>/<k>``. Writes go to a temporary file under ``<root>/.partial/``
(the same file system) that is renamed over the target once complete, so a reader sees the old
file or the new one, never a part; a failed or cut upload leaves nothing behind. Replicas share
the root folder (``Settings.artifacts_dir``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from fastapi.responses import StreamingResponse

from service.errors import ApiError, ProblemCode
from service.settings import Settings

MAX_KEY_LENGTH = 512
CHUNK_BYTES = 1024 * 1024
OCTET_STREAM = "application/octet-stream"
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
#: Temporary files of writes in progress, beside the tenants' folders (which are numbers).
_PARTIAL = ".partial"


class InvalidArtifactKey(ValueError):
    """A key that is not a path of ``[A-Za-z0-9._-]+`` segments (or ``.``/``..`` is one)."""


class ArtifactNotFound(FileNotFoundError):
    """No artifact under that key."""


def check_key(key: str, *, prefix: bool = False) -> list[str]:
    """The segments of ``key``; a ``prefix`` may end with ``/``.

    Raises:
        InvalidArtifactKey: an empty, ``.``/``..`` or non-``[A-Za-z0-9._-]`` segment, or a key
            over ``MAX_KEY_LENGTH`` characters.
    """
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidArtifactKey(f"the key is over {MAX_KEY_LENGTH} characters")
    segments = key.split("/")
    if prefix and len(segments) > 1 and segments[-1] == "":
        segments = segments[:-1]
    for segment in segments:
        if segment in (".", "..") or not _SEGMENT.fullmatch(segment):
            raise InvalidArtifactKey(
                f"artifact key {key!r}: every '/'-separated segment must be made of "
                "A-Z a-z 0-9 . _ - and not be '.' or '..'"
            )
    return segments


def artifacts_root(settings: Settings) -> Path:
    """``settings.artifacts_dir``; by default the folder beside an SQLite database file
    (``asktell.db`` -> ``asktell-artifacts``), else ``./asktell-artifacts``."""
    if settings.artifacts_dir:
        return Path(settings.artifacts_dir)
    url = settings.database_url
    if url.startswith("sqlite:///") and ":memory:" not in url:
        database = Path(url.removeprefix("sqlite:///"))
        return database.parent / f"{database.stem}-artifacts"
    return Path("asktell-artifacts")


class ArtifactStore:
    """Files under ``root``, one folder per tenant; every method checks its key first
    (``InvalidArtifactKey``)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, tenant: int, key: str) -> Path:
        """The file of ``key`` (whether or not it exists)."""
        return self.root.joinpath(str(int(tenant)), *check_key(key))

    def exists(self, tenant: int, key: str) -> bool:
        return self.path(tenant, key).is_file()

    def size(self, tenant: int, key: str) -> int:
        """The artifact's size in bytes. Raises ArtifactNotFound."""
        try:
            return self.path(tenant, key).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            raise ArtifactNotFound(f"no artifact {key!r}") from None

    def open(self, tenant: int, key: str) -> IO[bytes]:
        """The artifact opened for reading; a later replace does not change what it reads.
        Raises ArtifactNotFound."""
        try:
            return self.path(tenant, key).open("rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ArtifactNotFound(f"no artifact {key!r}") from None

    def read(self, tenant: int, key: str) -> bytes:
        with self.open(tenant, key) as f:
            return f.read()

    def put(self, tenant: int, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` atomically; whether the key is new."""
        with self.writer(tenant, key) as (f, outcome):
            f.write(data)
        return outcome.created

    @contextlib.contextmanager
    def writer(self, tenant: int, key: str) -> Iterator[tuple[IO[bytes], _Outcome]]:
        """A temporary file to write; on a clean exit it replaces ``key``'s file (the outcome
        then says whether the key was new), on an error it is removed."""
        target = self.path(tenant, key)
        partial = self.root / _PARTIAL
        partial.mkdir(parents=True, exist_ok=True)
        temp = partial / f"{uuid.uuid4().hex}.tmp"
        outcome = _Outcome()
        try:
            with temp.open("wb") as f:
                yield f, outcome
            outcome.created = not target.is_file()
            _replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)

    async def receive(self, tenant: int, key: str, chunks: AsyncIterator[bytes]) -> bool:
        """Store the bytes of ``chunks`` (a request body) under ``key``; whether it is new.
        An error while receiving (the client went away, the body was too large) leaves the
        previous artifact, if any, in place and no partial file."""
        with self.writer(tenant, key) as (f, outcome):
            async for chunk in chunks:
                f.write(chunk)
        return outcome.created

    def delete(self, tenant: int, key: str) -> None:
        """Remove ``key``'s artifact. Raises ArtifactNotFound."""
        try:
            self.path(tenant, key).unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ArtifactNotFound(f"no artifact {key!r}") from None

    def delete_many(self, tenant: int, keys: Iterable[str]) -> int:
        """Remove the artifacts of ``keys`` that exist; how many were removed."""
        removed = 0
        for key in keys:
            with contextlib.suppress(ArtifactNotFound):
                self.delete(tenant, key)
                removed += 1
        return removed

    def delete_prefix(self, tenant: int, prefix: str) -> int:
        """Remove every artifact whose key starts with ``prefix`` (``jobs/3/`` removes the
        folder ``jobs/3``; ``jobs/3/trial-`` the files starting so); how many were removed."""
        segments = check_key(prefix, prefix=True)
        tenant_dir = self.root / str(int(tenant))
        folder = tenant_dir.joinpath(*segments[:-1]) if not prefix.endswith("/") else None
        base = folder if folder is not None else tenant_dir.joinpath(*segments)
        if not base.is_dir():
            return 0
        removed = 0
        for path in sorted(base.rglob("*")):
            key = path.relative_to(tenant_dir).as_posix()
            if path.is_file() and key.startswith(prefix):
                path.unlink(missing_ok=True)
                removed += 1
        if folder is None:
            shutil.rmtree(base, ignore_errors=True)
        return removed


class _Outcome:
    created = False


def _replace(temp: Path, target: Path) -> None:
    """Rename ``temp`` over ``target``, creating its folders (again if a concurrent delete of
    a prefix removed them in between)."""
    for attempt in range(3):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp, target)
            return
        except FileNotFoundError:
            if attempt == 2:
                raise
        except (FileExistsError, IsADirectoryError, NotADirectoryError):
            raise InvalidArtifactKey(
                f"artifact key {target.name!r}: a part of the key is both a file and a folder "
                "of other artifacts"
            ) from None


# --- the routes' service functions: store errors as problems --------------------------------


@dataclass(frozen=True)
class Stored:
    created: bool
    size: int


@contextlib.contextmanager
def _problems(key: str) -> Iterator[None]:
    try:
        yield
    except InvalidArtifactKey as exc:
        raise ApiError(ProblemCode.INVALID_ARTIFACT_KEY, str(exc)) from None
    except ArtifactNotFound:
        raise ApiError(ProblemCode.ARTIFACT_NOT_FOUND, f"no artifact {key!r}") from None


async def receive(
    store: ArtifactStore, tenant: int, key: str, chunks: AsyncIterator[bytes]
) -> Stored:
    """``PUT``: the body's chunks stored under ``key``."""
    with _problems(key):
        store.path(tenant, key)  # check the key before reading the body
        created = await store.receive(tenant, key, chunks)
        return Stored(created, store.size(tenant, key))


def download(store: ArtifactStore, tenant: int, key: str) -> StreamingResponse:
    """``GET``: the file, opened now (a concurrent replace does not cut it), streamed."""
    with _problems(key):
        f = store.open(tenant, key)
    size = os.fstat(f.fileno()).st_size

    def chunks() -> Iterator[bytes]:
        with f:
            while chunk := f.read(CHUNK_BYTES):
                yield chunk

    headers = {"Content-Length": str(size)}
    return StreamingResponse(chunks(), media_type=OCTET_STREAM, headers=headers)


def remove(store: ArtifactStore, tenant: int, key: str) -> None:
    """``DELETE``."""
    with _problems(key):
        store.delete(tenant, key)
