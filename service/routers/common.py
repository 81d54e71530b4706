"""Small pieces every router uses."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response
from fastapi.routing import APIRoute

from service.deps import get_principal, limit_rate
from service.errors import ApiError, ProblemCode, problems
from service.store import Answer
from service.trial_fields import MAX_FILTER_LENGTH

JSON = "application/json"

# The codes of ``service.errors.problems`` that several routes share.
#: A write: a JSON body, an Idempotency-Key, a transaction that may meet a concurrent one.
WRITE = (
    ProblemCode.MALFORMED_JSON,
    ProblemCode.BODY_TOO_LARGE,
    ProblemCode.VALIDATION_ERROR,
    ProblemCode.INVALID_IDEMPOTENCY_KEY,
    ProblemCode.IDEMPOTENCY_KEY_REUSED,
    ProblemCode.CONFLICT,
)
#: A read of a study named in the path.
STUDY = (ProblemCode.VALIDATION_ERROR, ProblemCode.NOT_FOUND)
#: A read of a trial named in the path.
TRIAL = (*STUDY, ProblemCode.TRIAL_NOT_FOUND)
#: A write to an unfinished trial named in the path.
TRIAL_WRITE = (*WRITE, *TRIAL, ProblemCode.TRIAL_FINISHED)
#: A study config checked (``service.studies.validate_config``) or its engine run.
CONFIG = (
    ProblemCode.INVALID_SEARCH_SPACE,
    ProblemCode.INVALID_ENGINE,
    ProblemCode.ENGINE_UNSUPPORTED,
    ProblemCode.ENGINE_WORK_TOO_LARGE,
    ProblemCode.UNAVAILABLE,
)
#: Told results checked (``service.trials.validate_results``).
RESULTS = (
    ProblemCode.UNKNOWN_OBJECTIVE,
    ProblemCode.MISSING_OBJECTIVE,
    ProblemCode.UNKNOWN_CONSTRAINT,
    ProblemCode.MISSING_CONSTRAINT,
    ProblemCode.NON_FINITE_VALUE,
)


def written(result: Answer) -> Response:
    """A stored or fresh write result as a response (its body is already JSON)."""
    return Response(content=result.body, status_code=result.status, media_type=JSON)


#: Path ids within the range of the database's integer columns.
StudyId = Annotated[int, Path(ge=0, le=2**31 - 1)]
TrialNumber = Annotated[int, Path(ge=0, le=2**31 - 1)]
#: Which trials a list or chart reads: a JSON object from field to condition.
TrialFilter = Annotated[
    str | None,
    Query(
        max_length=MAX_FILTER_LENGTH,
        description="Only the trials that meet every condition: a JSON object from field "
        '(as for `sort`) to `{"min": x, "max": y}` (inclusive, numeric fields) and/or '
        '`{"in": [...]}` (allowed values), e.g. '
        '`{"params.lr": {"min": 0.001, "max": 0.1}, "state": {"in": ["completed"]}}`.',
        examples=['{"params.lr": {"min": 0.001, "max": 0.1}}'],
    ),
]


def cursor_int(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    try:
        value = int(cursor)
    except ValueError:
        value = -1
    if not 0 <= value < 2**31:
        raise ApiError(
            ProblemCode.INVALID_CURSOR, f"cursor {cursor!r} is not one this API returned"
        )
    return value


def api_router(prefix: str, tag: str, public: bool = False) -> APIRouter:
    """A router of ``tag`` whose operations get ``operation_id``'s ids and, unless ``public``,
    need an API key (``service.deps.get_principal``) and count against its rate limit
    (``service.deps.limit_rate``: 429)."""
    if public:
        return APIRouter(prefix=prefix, tags=[tag], generate_unique_id_function=operation_id)
    return APIRouter(
        prefix=prefix,
        tags=[tag],
        generate_unique_id_function=operation_id,
        dependencies=[Depends(get_principal), Depends(limit_rate)],
        responses=problems(ProblemCode.RATE_LIMITED),
    )


def operation_id(route: APIRoute) -> str:
    """Stable OpenAPI operation ids, "tag-name", so generated clients get readable names."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name
