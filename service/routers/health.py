"""Liveness, readiness and metrics."""

from __future__ import annotations

from functools import cache

from alembic.runtime.migration import MigrationContext
from fastapi import Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError

from service.db.migrate import UPGRADE_COMMAND, head_revision
from service.deps import StoreDep, get_admin
from service.errors import ProblemCode, problems, unavailable
from service.observability import metrics_text
from service.routers.common import api_router

router = api_router("", "health", public=True)


# Async: it answers from the event loop, never waiting for a pool thread.
@router.get("/healthz", responses=problems())
async def healthz() -> dict[str, str]:
    """200 while the process answers (liveness); checks nothing else, see ``/readyz``."""
    return {"status": "ok"}


@cache
def _code_head(url: str) -> str | None:
    return head_revision(url)


@router.get("/readyz", responses=problems(ProblemCode.UNAVAILABLE))
def readyz(store: StoreDep) -> dict[str, str]:
    """200 when the database answers and its schema is at this code's migration head."""
    try:
        current = store.db.read(lambda c: MigrationContext.configure(c).get_current_revision())
    except SQLAlchemyError as exc:
        raise unavailable(f"the database does not answer: {type(exc).__name__}") from exc
    head = _code_head(store.db.engine.url.render_as_string(hide_password=False))
    if current != head:
        raise unavailable(
            f"the database is at revision {current or 'none'}, this server needs {head}; "
            f"run `{UPGRADE_COMMAND}`"
        )
    return {"status": "ready", "revision": str(head)}


@router.get(
    "/metrics",
    response_class=Response,
    # Counts over every tenant: an admin key reads them when the server needs keys.
    dependencies=[Depends(get_admin)],
    responses={
        **problems(),
        200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"},
    },
)
def metrics(request: Request) -> Response:
    """This process's metrics in the Prometheus text format: requests by route and status,
    ask and engine seconds by engine, asks dropped and turned away, the ask queue depth,
    trials by state."""
    return Response(metrics_text(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)
