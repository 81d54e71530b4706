"""The building blocks of the wire models (``client.models``, ``client.sampler_models``):
value types, bounded numbers, free-form JSON, and the base classes of request bodies."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

CategoryValue = str | bool | int | float
ParamValue = CategoryValue
StudyState = Literal["active", "paused", "completed"]
TrialState = Literal["waiting", "running", "stale", "completed", "failed", "infeasible"]
#: Trial states that end a trial; a finished trial cannot be told again.
FINISHED_STATES: tuple[TrialState, ...] = ("completed", "failed", "infeasible")

Name = Annotated[str, Field(min_length=1, max_length=256)]
#: Bounded like the database columns that store them (PostgreSQL integer and bigint).
Int32 = Annotated[int, Field(ge=0, le=2**31 - 1)]
Int64 = Annotated[int, Field(ge=0, le=2**63 - 1)]
#: A study's notes or a trial's note: free text, bounded so that a page of trials stays small.
Note = Annotated[str, Field(max_length=10_000)]


def _finite_json(value: Any) -> Any:
    """Reject NaN and infinities anywhere in free-form JSON (metadata, options): JSON has no
    such numbers and PostgreSQL refuses to store them."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and infinite numbers are not valid JSON")
    if isinstance(value, dict):
        for item in value.values():
            _finite_json(item)
    elif isinstance(value, list):
        for item in value:
            _finite_json(item)
    return value


JsonDict = Annotated[dict[str, Any], AfterValidator(_finite_json)]


class _Request(BaseModel):
    # NaN and infinities are refused in configs; bodies that carry results accept them so
    # that the server can answer with its own message (tell the trial as failed).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Results(_Request):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True)
