"""Idempotency keys: the same key and request return the stored response; another request
under the same key is a 409.

The record is written in the same transaction as the change it answers for, so a response is
stored exactly when its change committed. A second request with the same key either fails on
the unique key when it stores its own answer, or fails earlier because the first request
already changed the state (a finished trial); it is rolled back whole and replays the first
one's stored response (``service.store.Store.write``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel
from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from service.db.models import IdempotencyKey
from service.errors import ApiError, ProblemCode

#: How long a key is remembered.
KEY_TTL = timedelta(hours=24)

_keys = IdempotencyKey.__table__


@dataclass(frozen=True)
class IdemKey:
    key: str
    request_hash: str

    @classmethod
    def build(cls, key: str, method: str, path: str, body: bytes) -> IdemKey:
        digest = hashlib.sha256(f"{method} {path}\n".encode() + body).hexdigest()
        return cls(key, digest)


@dataclass(frozen=True)
class Answer:
    """The answer to a write: HTTP status and the JSON body, already serialized; stored under
    an idempotency key and replayed from it."""

    status: int
    body: str


def replay(conn: Connection, tenant_id: int, idem: IdemKey) -> Answer | None:
    """The stored response for ``idem``, or ``None`` when the key is new.

    Raises:
        ApiError: 409 ``idempotency_key_reused`` when the key was used for another request.
    """
    row = conn.execute(
        select(_keys.c.request_hash, _keys.c.status_code, _keys.c.response).where(
            _keys.c.tenant_id == tenant_id, _keys.c.key == idem.key
        )
    ).first()
    if row is None:
        return None
    if row.request_hash != idem.request_hash:
        raise ApiError(
            ProblemCode.IDEMPOTENCY_KEY_REUSED,
            "this Idempotency-Key was already used with a different request; "
            "send a new key for a new request",
        )
    return Answer(row.status_code, row.response)


_REMEMBER = insert(_keys)


def answered(
    conn: Connection,
    tenant_id: int,
    idem: IdemKey | None,
    change: Callable[[Connection], tuple[int, BaseModel]],
    now: datetime,
) -> Answer:
    """The answer of ``change`` (status and model) made in the caller's transaction, stored
    under ``idem`` when there is one (``remember``)."""
    status, model = change(conn)
    answer = Answer(status, model.model_dump_json())
    if idem is not None:
        remember(conn, tenant_id, idem, answer, now)
    return answer


def remember(
    conn: Connection, tenant_id: int, idem: IdemKey, stored: Answer, now: datetime
) -> None:
    """Store the answer under the key, in the transaction of the change it answers for.

    Raises:
        IntegrityError: the key exists (committed, or being committed by a concurrent request).
    """
    conn.execute(
        _REMEMBER,
        {
            "tenant_id": tenant_id,
            "key": idem.key,
            "request_hash": idem.request_hash,
            "status_code": stored.status,
            "response": stored.body,
            "created_at": now,
        },
    )


def forget_old(conn: Connection, now: datetime) -> int:
    return conn.execute(delete(_keys).where(_keys.c.created_at < now - KEY_TTL)).rowcount
