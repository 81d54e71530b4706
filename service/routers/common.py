"""Small pieces every router uses."""

from __future__ import annotations

from fastapi import Response
from fastapi.routing import APIRoute

from service.store import Written

JSON = "application/json"


def written(result: Written) -> Response:
    """A stored or fresh write result as a response (its body is already JSON)."""
    return Response(content=result.body, status_code=result.status, media_type=JSON)


def cursor_int(cursor: str | None) -> int | None:
    from service.errors import invalid

    if cursor is None:
        return None
    try:
        return int(cursor)
    except ValueError:
        raise invalid("invalid_cursor", f"cursor {cursor!r} is not one this API returned") from None


def operation_id(route: APIRoute) -> str:
    """Stable OpenAPI operation ids, "tag-name", so generated clients get readable names."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name
