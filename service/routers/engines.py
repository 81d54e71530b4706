"""/v1/engines: the names a study's ``engine.name`` may take."""

from __future__ import annotations

from engines.registry import engine_names
from service.errors import problems
from service.routers.common import api_router

router = api_router("/v1/engines", "engines")


@router.get("", response_model=list[str], responses=problems())
def list_engines() -> list[str]:
    """Every engine this server runs, by name, sorted (see the README's engine table)."""
    return engine_names()
