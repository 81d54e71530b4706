"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from service.deps import StoreDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(store: StoreDep) -> dict[str, str]:
    store.db.read(lambda conn: conn.execute(text("SELECT 1")))
    return {"status": "ready"}
