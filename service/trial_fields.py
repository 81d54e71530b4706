"""The fields of a trial that lists and charts sort and filter on, as SQL expressions.

A field is a column (``number``, ``state``, ``worker_id``, ``created_at``, ``completed_at``),
``duration`` (seconds from start to completion), or a value read from a JSON column:
``values.OBJECTIVE``, ``constraints.NAME`` or ``params.NAME`` (numeric for float and int
parameters, as text for categorical and fixed ones).

A filter is a JSON object from field to condition, all of which a trial must meet::

    {"params.lr": {"min": 0.001, "max": 0.1}, "state": {"in": ["completed"]}}

``min`` and ``max`` (inclusive, either may be left out) are for numeric fields; ``in`` lists
the allowed values of any field. A trial without the field's value never matches. This is the
shape the dashboard's brushing sends; any client can build it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import Float, String, and_, cast, false
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from client.models import CategoryValue
from service.errors import ApiError, ProblemCode
from service.problem import ParsedStudy
from service.store import trials_t

#: Column fields, in the order the API documents them.
COLUMNS = ("number", "state", "worker_id", "created_at", "completed_at")
#: Fields besides ``values.``, ``constraints.`` and ``params.`` ones.
PLAIN_FIELDS = (*COLUMNS, "duration")
#: The longest filter accepted, in characters of JSON.
MAX_FILTER_LENGTH = 20_000
_NUMERIC_COLUMNS = ("number",)


class _Seconds(FunctionElement[float]):
    """Seconds from the first timestamp to the second, on SQLite and PostgreSQL."""

    type = Float()
    inherit_cache = True


@compiles(_Seconds, "sqlite")
def _seconds_sqlite(element: _Seconds, compiler: SQLCompiler, **kw: Any) -> str:
    start, end = list(element.clauses)
    return (
        f"((julianday({compiler.process(end, **kw)}) - "
        f"julianday({compiler.process(start, **kw)})) * 86400.0)"
    )


@compiles(_Seconds, "postgresql")
def _seconds_postgresql(element: _Seconds, compiler: SQLCompiler, **kw: Any) -> str:
    start, end = list(element.clauses)
    return f"EXTRACT(EPOCH FROM ({compiler.process(end, **kw)} - {compiler.process(start, **kw)}))"


class FieldCondition(BaseModel):
    """What one field of a trial must be: within ``[min, max]`` and/or one of ``in``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    min: float | None = None
    max: float | None = None
    in_: list[CategoryValue] | None = Field(default=None, alias="in", max_length=1000)


def field_expression(parsed: ParsedStudy, name: str) -> tuple[ColumnElement[Any], bool]:
    """The SQL expression of a trial field, and whether it is numeric.

    Raises: ApiError 422 ``validation_error`` for a field the study does not have."""
    if name in COLUMNS:
        return trials_t.c[name], name in _NUMERIC_COLUMNS
    if name == "duration":
        return _Seconds(trials_t.c.started_at, trials_t.c.completed_at), True
    kind, _, key = name.partition(".")
    if kind == "values" and key in parsed.objective_names:
        return trials_t.c["values"][key].as_float(), True
    if kind == "constraints" and key in {c.name for c in parsed.config.constraints}:
        return trials_t.c.constraints[key].as_float(), True
    numeric = {p.name: p.type in ("float", "int") for p in parsed.config.parameters}
    if kind == "params" and key in numeric:
        field = trials_t.c.params[key]
        return (field.as_float(), True) if numeric[key] else (field.as_string(), False)
    raise ValueError(
        f"{name!r} is not one of {list(PLAIN_FIELDS)}, values.OBJECTIVE, constraints.NAME or "
        "params.NAME of this study"
    )


def sort_key(parsed: ParsedStudy, sort: str) -> ColumnElement[Any]:
    """The SQL expression to order trials by the field ``sort``.

    Raises: ApiError 422 ``validation_error`` for an unknown field."""
    try:
        return field_expression(parsed, sort)[0]
    except ValueError as error:
        raise _invalid("sort", f"sort: {error}") from None


def filter_clauses(parsed: ParsedStudy, raw: str | None) -> list[ColumnElement[bool]]:
    """The WHERE clauses of a filter given as JSON text (see the module docstring); none for
    ``None``.

    Raises: ApiError 422 ``validation_error`` for text that is not such a filter."""
    if raw is None:
        return []
    try:
        conditions = json.loads(raw)
        if not isinstance(conditions, dict):
            raise ValueError("a filter is a JSON object from field to condition")
        return [_clause(parsed, name, cond) for name, cond in conditions.items()]
    except (ValueError, ValidationError) as error:
        message = error.errors()[0]["msg"] if isinstance(error, ValidationError) else str(error)
        raise _invalid("filter", f"filter: {message}") from None


def _clause(parsed: ParsedStudy, name: str, raw: Any) -> ColumnElement[bool]:
    expression, numeric = field_expression(parsed, name)
    condition = FieldCondition.model_validate(raw)
    if (condition.min is not None or condition.max is not None) and not numeric:
        raise ValueError(f"{name!r} is not numeric: use 'in', not 'min' or 'max'")
    parts: list[ColumnElement[bool]] = [expression.is_not(None)]
    if condition.min is not None:
        parts.append(expression >= condition.min)
    if condition.max is not None:
        parts.append(expression <= condition.max)
    if condition.in_ is not None:
        parts.append(_one_of(name, expression, numeric, condition.in_))
    return and_(*parts)


def _one_of(
    name: str, expression: ColumnElement[Any], numeric: bool, allowed: list[CategoryValue]
) -> ColumnElement[bool]:
    """``expression IN allowed``. A categorical parameter's choices may mix text, numbers and
    booleans, so they are compared as the text of their JSON; as in Python, ``true`` is the
    choice ``1`` and ``false`` is ``0`` (SQLite cannot tell them apart)."""
    if not allowed:
        return false()
    if numeric or not name.startswith("params."):
        return expression.in_(allowed)
    texts: list[str] = []
    for value in allowed:
        if isinstance(value, str):
            texts.append(value)
        else:
            texts.append(json.dumps(value))
            if value in (0, 1):
                texts += [json.dumps(bool(value)), json.dumps(int(value))]
    return cast(expression, String).in_(texts)


def _invalid(field: str, message: str) -> ApiError:
    return ApiError(
        ProblemCode.VALIDATION_ERROR, message, errors=[{"field": field, "message": message}]
    )
