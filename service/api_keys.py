"""API keys: a tenant's keys, each with a scope, stored as the sha256 of the key.

A key reads ``at_<prefix>_<secret>``: the prefix (8 hex digits) is kept in clear so that lists
can tell keys apart, the secret (43 url-safe characters, 256 random bits) is never stored. A
request's key is found by the hash of the whole key; a secret of 256 random bits needs no salt
and no slow hash. Scopes are ordered: ``read`` (GET and HEAD), ``write`` (every method), ``admin``
(also ``/v1/keys``).

The functions take a ``Database``: the ``asktell keys`` command calls them on the database
directly (it makes the first admin key), the ``/v1/keys`` routes through the store.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from client.key_models import ApiKeyCreated, ApiKeyPublic, KeyScope
from service.db.models import ApiKey, Tenant
from service.db.session import Database
from service.errors import ApiError, ProblemCode
from service.settings import Settings

keys_t = ApiKey.__table__
tenants_t = Tenant.__table__

SCOPES: tuple[KeyScope, ...] = ("read", "write", "admin")
PREFIX = "at_"
#: Seconds a key found valid is trusted without reading the database again: a revoked key
#: (``asktell keys revoke`` in another process) stops working within this time.
CACHE_SECONDS = 5.0
_CACHE_MAX = 10_000


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: a tenant, with a key's scope (and the key's id; None without
    a key)."""

    tenant_id: int
    scope: KeyScope
    key_id: int | None = None

    def allows(self, scope: KeyScope) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """A fresh key and its prefix (``at_<prefix>``)."""
    prefix = PREFIX + secrets.token_hex(4)
    return f"{prefix}_{secrets.token_urlsafe(32)}", prefix


def tenant_id(conn: Connection, name: str, create: bool) -> int | None:
    """The id of the tenant called ``name``, created when missing if ``create``."""
    found = conn.execute(select(tenants_t.c.id).where(tenants_t.c.name == name)).scalar()
    if found is None and create:
        values = {"name": name, "created_at": datetime.now(UTC)}
        found = conn.execute(insert(tenants_t).values(values).returning(tenants_t.c.id)).scalar()
    return found


def create_key(
    db: Database, tenant: int | str, name: str, scope: KeyScope, now: datetime | None = None
) -> ApiKeyCreated:
    """A new key of ``tenant`` (an id, or a name: a tenant created when missing)."""
    key, prefix = new_key()
    now = now or datetime.now(UTC)

    def run(conn: Connection) -> ApiKeyCreated:
        tid = tenant if isinstance(tenant, int) else tenant_id(conn, tenant, create=True)
        values = {
            "tenant_id": tid,
            "name": name,
            "prefix": prefix,
            "key_hash": key_hash(key),
            "scope": scope,
            "created_at": now,
        }
        key_id = conn.execute(insert(keys_t).values(values).returning(keys_t.c.id)).scalar_one()
        row = conn.execute(_listed().where(keys_t.c.id == key_id)).one()
        return ApiKeyCreated(**_public(row).model_dump(), key=key)

    return db.write(run)


def list_keys(db: Database, tenant: int | None = None) -> list[ApiKeyPublic]:
    """The keys of ``tenant`` (every tenant's when None), revoked ones included."""
    query = _listed().order_by(keys_t.c.id)
    if tenant is not None:
        query = query.where(keys_t.c.tenant_id == tenant)
    return db.read(lambda conn: [_public(row) for row in conn.execute(query)])


def revoke_key(db: Database, key_id: int, tenant: int | None = None) -> ApiKeyPublic:
    """Revoke a key (of ``tenant`` when given: another tenant's key is not found)."""

    def run(conn: Connection) -> ApiKeyPublic:
        query = _listed().where(keys_t.c.id == key_id)
        if tenant is not None:
            query = query.where(keys_t.c.tenant_id == tenant)
        row = conn.execute(query).first()
        if row is None:
            raise ApiError(ProblemCode.NOT_FOUND, f"key {key_id} does not exist")
        if row.revoked_at is None:
            revoked = {"revoked_at": datetime.now(UTC)}
            conn.execute(update(keys_t).where(keys_t.c.id == key_id).values(revoked))
            row = conn.execute(query).one()
        return _public(row)

    return db.write(run)


def _listed() -> Any:
    return select(
        keys_t.c.id,
        tenants_t.c.name.label("tenant"),
        keys_t.c.name,
        keys_t.c.prefix,
        keys_t.c.scope,
        keys_t.c.created_at,
        keys_t.c.revoked_at,
    ).join(tenants_t, tenants_t.c.id == keys_t.c.tenant_id)


def _public(row: Any) -> ApiKeyPublic:
    return ApiKeyPublic.model_validate(row._mapping)


class KeyCache:
    """The principals of keys recently found valid, for ``CACHE_SECONDS``; a key the database
    does not know is not cached (a wrong key costs one indexed read)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._entries: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def clear(self) -> None:
        """Forget every key: a key revoked by this process stops working at once here."""
        with self._lock:
            self._entries.clear()

    def principal(self, db: Database, key: str) -> Principal | None:
        digest = key_hash(key)
        now = self._clock()
        with self._lock:
            cached = self._entries.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        found = db.read(lambda conn: _principal(conn, digest))
        with self._lock:
            if len(self._entries) >= _CACHE_MAX:
                self._entries.clear()
            if found is None:
                self._entries.pop(digest, None)
            else:
                self._entries[digest] = (found, now + CACHE_SECONDS)
        return found


def _principal(conn: Connection, digest: str) -> Principal | None:
    query = select(keys_t.c.tenant_id, keys_t.c.scope, keys_t.c.id).where(
        keys_t.c.key_hash == digest, keys_t.c.revoked_at.is_(None)
    )
    row = conn.execute(query).first()
    return None if row is None else Principal(row.tenant_id, row.scope, row.id)


def auth_line(settings: Settings) -> str:
    """The start-up line that says whether requests need a key, and why."""
    if settings.auth_required:
        where = f"listening on {settings.host}" if settings.host else "listening address unknown"
        return (
            f"auth required ({where}): every request but /healthz and /readyz needs an API key "
            "(Authorization: Bearer; make one with `asktell keys create`)"
        )
    if settings.auth == "off":
        return "auth off (ASKTELL_AUTH=off): no API key needed, every request acts as one tenant"
    return f"auth off: listening on loopback only ({settings.host}); no API key needed"
