"""The building blocks of the wire models (``client.models``, ``client.sampler_models``):
value types, bounded numbers, free-form JSON, and the base classes of request bodies."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

CategoryValue = str | bool | int | float
ParamValue = CategoryValue
StudyState = Literal["active", "paused", "completed"]
TrialState = Literal["waiting", "running", "stale", "completed", "failed", "infeasible"]
#: Trial states that end a trial; a finished trial cannot be told again.
FINISHED_STATES: tuple[TrialState, ...] = ("completed", "failed", "infeasible")

#: A name a user gives (a study, an objective...): some visible character, 256 at most.
Name = Annotated[str, Field(min_length=1, max_length=256, pattern=r"\S")]
#: A parameter's name: bounded like a Name; the search space itself refuses empty ones.
ParameterName = Annotated[str, Field(max_length=256)]


def _whole_number_as_int(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: An integer in a request body: a JSON integer, ``2.0`` included (an integer in JSON Schema,
#: the OpenAPI document's ``integer``); never ``2.5``, text or a boolean.
Integer = Annotated[int, BeforeValidator(_whole_number_as_int)]
#: Bounded like the database columns that store them (PostgreSQL integer and bigint).
Int32 = Annotated[Integer, Field(ge=0, le=2**31 - 1)]
Int64 = Annotated[Integer, Field(ge=0, le=2**63 - 1)]
#: A study's settings (``StudyCreate``): its trial budget, its engine's seconds per ask.
MaxTrials = Annotated[Integer, Field(ge=1, lt=2**31)]
AskTimeBudget = Annotated[float, Field(gt=0, le=86400)]
#: A study's notes or a trial's note: free text, bounded so that a page of trials stays small.
Note = Annotated[str, Field(max_length=10_000)]
#: A time in a request body: ISO 8601 text (request models are otherwise strict, so that
#: "1.5" is not a number and true is not a count).
Timestamp = Annotated[datetime, Field(strict=False)]
#: A number in a request body: an int or a float, never text or a boolean.
StrictFloat = Annotated[float, Field(strict=True)]
#: ``[low, high]`` in a request body (a JSON array; strict numbers inside).
FloatPair = Annotated[tuple[StrictFloat, StrictFloat], Field(strict=False)]


#: How deep objects and arrays in free-form JSON may nest: deeper documents are refused when
#: parsed, because the server could not serialize them back (and no metadata needs more).
MAX_JSON_DEPTH = 32


def _plain_json(value: Any, depth: int = 1) -> Any:
    """Reject NaN and infinities anywhere in free-form JSON (metadata, options): JSON has no
    such numbers and PostgreSQL refuses to store them; and nesting deeper than
    ``MAX_JSON_DEPTH``."""
    if isinstance(value, dict | list) and depth > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and infinite numbers are not valid JSON")
    if isinstance(value, dict):
        for item in value.values():
            _plain_json(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _plain_json(item, depth + 1)
    return value


JsonDict = Annotated[dict[str, Any], AfterValidator(_plain_json)]


def required_tag(tag: str) -> Callable[[dict[str, Any]], None]:
    """``json_schema_extra`` of a member of a tagged union: the server picks the member by its
    ``tag`` field, so a body must carry it. The schema lists it as required, with no default;
    Python callers may still leave it out (the model fills it in)."""

    def mark(schema: dict[str, Any]) -> None:
        schema["properties"][tag].pop("default", None)
        schema["required"] = [tag, *(f for f in schema.get("required", []) if f != tag)]

    return mark


class _Request(BaseModel):
    # NaN and infinities are refused in configs; bodies that carry results accept them so
    # that the server can answer with its own message (tell the trial as failed).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class _Results(_Request):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True, strict=True)


class _TypeTagged(_Request):
    """A member of a union tagged by ``type`` (a search-space parameter)."""

    model_config = ConfigDict(json_schema_extra=required_tag("type"))
