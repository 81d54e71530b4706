"""Liveness and readiness."""

from __future__ import annotations

from sqlalchemy import text

from service.deps import StoreDep
from service.errors import problems
from service.routers.common import api_router

router = api_router("", "health")


@router.get("/healthz", responses=problems())
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses=problems())
def readyz(store: StoreDep) -> dict[str, str]:
    store.db.read(lambda conn: conn.execute(text("SELECT 1")))
    return {"status": "ready"}
