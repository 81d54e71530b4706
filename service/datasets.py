"""Datasets: CSV uploads checked and stored in the database, and the scikit-learn datasets
bundled in its wheel, which tuning jobs train on (``service.jobs.data`` splits and encodes
them).

An upload is a ``text/csv`` body with ``name``, ``target`` and ``task`` in the query, or a
``multipart/form-data`` form with the CSV in the field ``file`` (``name``, ``target`` and
``task`` as query parameters or form fields; the query wins). It is read and checked whole
before anything is written, so a bad upload stores nothing. Names are unique per tenant; the
bundled datasets' names are taken, and a name of digits only or with a ``/`` is refused (a
dataset is looked up by id or by name, in its URL).
"""

from __future__ import annotations

import email.parser
import email.policy
import functools
from dataclasses import dataclass
from typing import Any, get_args

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection, Row

from client.dataset_models import DatasetPublic, DatasetTask
from service.db.models import Dataset, Job
from service.errors import ApiError, ProblemCode
from service.idempotency import IdemKey
from service.jobs import data
from service.jobs.table import BUILTIN_TARGET, builtin_frame
from service.store import Answer, Store, utcnow

datasets_t = Dataset.__table__
jobs_t = Job.__table__

#: The media types an upload may have.
CSV, MULTIPART = "text/csv", "multipart/form-data"
#: Job states that keep a dataset from being deleted.
ACTIVE_JOB_STATES = ("queued", "running")
_MAX_NAME = 256


@dataclass(frozen=True)
class UploadFields:
    """What names an upload; each may come from the query or from the form."""

    name: str | None = None
    target: str | None = None
    task: str | None = None


def upload_dataset(
    store: Store,
    tenant_id: int,
    content_type: str | None,
    body: bytes,
    query: UploadFields,
    max_rows: int,
    idem: IdemKey | None,
) -> Answer:
    """Check and store an uploaded CSV.

    Raises: ApiError 413 ``dataset_too_large``; 415 ``unsupported_media_type``; 422
    ``validation_error`` (name, target or task missing or invalid), ``dataset_*`` (the CSV);
    409 ``dataset_exists``.
    """
    content, fields = read_upload(content_type, body, query)
    name, target, task = _checked_fields(fields)
    if name in data.BUILTIN_DATASETS:
        raise _exists(name)
    try:
        frame = data.parse_csv(content, target, task, max_rows)
    except data.DatasetError as exc:
        raise ApiError(exc.code, exc.detail) from exc

    def run(conn: Connection) -> tuple[int, DatasetPublic]:
        if _find(conn, tenant_id, name) is not None:
            raise _exists(name)
        values = {
            "tenant_id": tenant_id,
            "name": name,
            "target": target,
            "task": task,
            "content": content,
            "n_rows": frame.n_rows,
            "columns": frame.describe(),
            "classes": None if frame.classes is None else list(frame.classes),
            "created_at": utcnow(),
        }
        dataset_id = conn.execute(
            insert(datasets_t).values(**values).returning(datasets_t.c.id)
        ).scalar_one()
        return 201, _public(values | {"id": dataset_id, "n_bytes": len(content)})

    return store.write(tenant_id, idem, run)


def read_upload(
    content_type: str | None, body: bytes, query: UploadFields
) -> tuple[bytes, UploadFields]:
    """The CSV bytes of an upload and its fields (the query's, else the form's)."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media == CSV:
        return body, query
    if media != MULTIPART:
        raise ApiError(
            ProblemCode.UNSUPPORTED_MEDIA_TYPE,
            f"a dataset is uploaded as {CSV} or {MULTIPART} (field 'file'), not "
            f"{media or 'a body without Content-Type'}",
        )
    form = _form(content_type or "", body)
    if "file" not in form:
        raise ApiError(
            ProblemCode.DATASET_UNREADABLE,
            "the form has no field 'file'; send the CSV in a field named 'file'",
        )

    def text(key: str) -> str | None:
        given = getattr(query, key)
        if given is not None or key not in form:
            return given
        try:
            return form[key].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid(key, "is not UTF-8 text") from exc

    return form["file"], UploadFields(text("name"), text("target"), text("task"))


def _form(content_type: str, body: bytes) -> dict[str, bytes]:
    """The fields of a multipart/form-data body by name (the first of a repeated name)."""
    headers = _parse_headers(f"Content-Type: {content_type}".encode())
    boundary = headers.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise ApiError(ProblemCode.DATASET_UNREADABLE, "the multipart Content-Type has no boundary")
    delimiter = b"--" + boundary.encode("latin-1")
    chunks = body.split(delimiter)
    if len(chunks) < 2 or not chunks[-1].startswith(b"--"):
        raise ApiError(
            ProblemCode.DATASET_UNREADABLE,
            "the multipart body is cut short: its closing boundary is missing",
        )
    fields: dict[str, bytes] = {}
    for chunk in chunks[1:-1]:
        head, separator, content = chunk.partition(b"\r\n\r\n")
        if not separator:  # a sender that ends lines with LF alone
            head, separator, content = chunk.partition(b"\n\n")
        if not separator:
            raise ApiError(ProblemCode.DATASET_UNREADABLE, "a multipart part has no headers")
        disposition = _parse_headers(head.strip(b"\r\n"))
        name = disposition.get_param("name", header="content-disposition")
        if isinstance(name, str):
            fields.setdefault(name, content.removesuffix(b"\n").removesuffix(b"\r"))
    return fields


def _parse_headers(head: bytes) -> Any:
    parser = email.parser.BytesHeaderParser(policy=email.policy.HTTP)
    return parser.parsebytes(head + b"\r\n\r\n")


def _checked_fields(fields: UploadFields) -> tuple[str, str, DatasetTask]:
    for key in ("name", "target", "task"):
        value = getattr(fields, key)
        if value is None:
            raise _invalid(key, "is required (a query parameter or a form field)")
        if not value.strip() or len(value) > _MAX_NAME:
            raise _invalid(key, f"needs a visible character and at most {_MAX_NAME} characters")
    assert fields.name is not None and fields.target is not None  # checked above
    if _is_id(fields.name):
        raise _invalid("name", "has a letter or sign besides digits (ids are digits)")
    if "/" in fields.name:
        raise _invalid("name", "has no '/' (the name is a segment of the dataset's URL)")
    tasks = get_args(DatasetTask)
    if fields.task not in tasks:
        raise _invalid("task", f"is one of {', '.join(tasks)}, not {fields.task!r}")
    task: DatasetTask = fields.task  # type: ignore[assignment]  # checked against its values
    return fields.name, fields.target, task


def _invalid(field: str, message: str) -> ApiError:
    return ApiError(
        ProblemCode.VALIDATION_ERROR,
        f"{field}: {message}",
        errors=[{"field": field, "message": message}],
    )


def _exists(name: str) -> ApiError:
    taken = "is bundled" if name in data.BUILTIN_DATASETS else "exists"
    return ApiError(
        ProblemCode.DATASET_EXISTS, f"a dataset named {name!r} {taken}; choose another name"
    )


# --- reads and delete ---------------------------------------------------------------------

_COLUMNS = (
    *(c for c in datasets_t.c if c.name != "content"),
    func.length(datasets_t.c.content).label("n_bytes"),
)


def list_datasets(store: Store, tenant_id: int) -> list[DatasetPublic]:
    """The uploaded datasets by id, then the bundled ones."""
    query = select(*_COLUMNS).where(datasets_t.c.tenant_id == tenant_id).order_by(datasets_t.c.id)
    rows = store.db.read(lambda conn: conn.execute(query).all())
    return [_public(row._mapping) for row in rows] + [
        builtin_public(name) for name in data.BUILTIN_DATASETS
    ]


def get_dataset(store: Store, tenant_id: int, ref: str) -> DatasetPublic:
    """A dataset by id or name, uploaded or bundled; raises ApiError 404."""
    if ref in data.BUILTIN_DATASETS:  # no transaction held while scikit-learn loads
        return builtin_public(ref)
    return store.db.read(lambda conn: dataset_in(conn, tenant_id, ref))


def dataset_in(conn: Connection, tenant_id: int, ref: str) -> DatasetPublic:
    """A dataset by id or name, uploaded or bundled (``id`` ``None``), read in the caller's
    transaction (a job's creation: ``jobs.dataset_id`` is the ``id``); raises ApiError 404."""
    if ref in data.BUILTIN_DATASETS:
        return builtin_public(ref)
    row = _find(conn, tenant_id, ref)
    if row is None:
        raise _not_found(ref)
    return _public(row._mapping)


def dataset_csv(store: Store, tenant_id: int, ref: str) -> bytes:
    """An uploaded dataset's CSV as stored; raises ApiError 404 (a bundled one included)."""
    row = store.db.read(lambda conn: _find(conn, tenant_id, ref, content=True))
    if row is None:
        raise _not_found(ref)
    return bytes(row.content)


def delete_dataset(store: Store, tenant_id: int, ref: str) -> None:
    """Delete an uploaded dataset; raises ApiError 404, 409 ``dataset_in_use`` (a queued or
    running job trains on it). Ended jobs that trained on it keep their config and results;
    their link to it is cleared."""

    def run(conn: Connection) -> None:
        row = _find(conn, tenant_id, ref, lock=True)
        if row is None:
            raise _not_found(ref)
        using = conn.execute(
            select(jobs_t.c.id, jobs_t.c.name)
            .where(jobs_t.c.dataset_id == row.id, jobs_t.c.state.in_(ACTIVE_JOB_STATES))
            .order_by(jobs_t.c.id)
        ).first()
        if using is not None:
            raise ApiError(
                ProblemCode.DATASET_IN_USE,
                f"job {using.id} ({using.name!r}) trains on dataset {row.name!r}; cancel it or "
                "wait until it ends",
            )
        conn.execute(update(jobs_t).where(jobs_t.c.dataset_id == row.id).values(dataset_id=None))
        conn.execute(delete(datasets_t).where(datasets_t.c.id == row.id))

    store.db.write(run)


def _is_id(ref: str) -> bool:
    """Whether ``ref`` names a dataset by id: ASCII digits only (``str.isdigit`` also takes
    ``'³'``, which ``int`` refuses)."""
    return ref.isascii() and ref.isdigit()


def _find(
    conn: Connection, tenant_id: int, ref: str, *, content: bool = False, lock: bool = False
) -> Row | None:
    """An uploaded dataset by id (digits) or name, or ``None``."""
    columns = [*_COLUMNS, datasets_t.c.content] if content else _COLUMNS
    query = select(*columns).where(datasets_t.c.tenant_id == tenant_id)
    if _is_id(ref):
        if int(ref) >= 2**31:
            return None
        query = query.where(datasets_t.c.id == int(ref))
    else:
        query = query.where(datasets_t.c.name == ref)
    return conn.execute(query.with_for_update() if lock else query).first()


def _not_found(ref: str) -> ApiError:
    if ref in data.BUILTIN_DATASETS:
        return ApiError(
            ProblemCode.DATASET_NOT_FOUND,
            f"{ref!r} is bundled with scikit-learn: it has no CSV here and cannot be deleted",
        )
    return ApiError(ProblemCode.DATASET_NOT_FOUND, f"no dataset has the id or name {ref!r}")


def _public(row: Any) -> DatasetPublic:
    fields = {name: row[name] for name in DatasetPublic.model_fields if name in row}
    return DatasetPublic.model_validate(fields)


@functools.cache
def builtin_public(name: str) -> DatasetPublic:
    """A bundled dataset's description (loaded once per process)."""
    frame = builtin_frame(name)
    return DatasetPublic.model_validate(
        {
            "id": None,
            "name": name,
            "target": BUILTIN_TARGET,
            "task": frame.task,
            "builtin": True,
            "n_rows": frame.n_rows,
            "columns": frame.describe(),
            "classes": None if frame.classes is None else list(frame.classes),
        }
    )
