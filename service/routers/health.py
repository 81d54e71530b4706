"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from service.deps import StoreDep
from service.errors import problems
from service.routers.common import operation_id

router = APIRouter(tags=["health"], generate_unique_id_function=operation_id)


@router.get("/healthz", responses=problems())
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses=problems())
def readyz(store: StoreDep) -> dict[str, str]:
    store.db.read(lambda conn: conn.execute(text("SELECT 1")))
    return {"status": "ready"}
