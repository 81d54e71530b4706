"""Rows to wire models: every ``...Public`` model and export document the service answers with
is built here from database rows (or from the values of a row just inserted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy.engine import Row

from client.models import (
    MeasurementPublic,
    SamplerPublic,
    StudyCreate,
    StudyExport,
    StudyPublic,
    TrialExport,
    TrialPublic,
)

M = TypeVar("M", bound=BaseModel)


def from_columns(model: type[M], columns: Row | Mapping[str, Any], /, **more: Any) -> M:
    """``model`` from the columns named like its fields, and ``more``."""
    mapping = columns._mapping if isinstance(columns, Row) else columns
    fields = {name: mapping[name] for name in model.model_fields if name in mapping}
    return model.model_validate({**fields, **more})


def trial_public(trial: Row | Mapping[str, Any]) -> TrialPublic:
    """A trial's columns, from a row or from the values just inserted."""
    return from_columns(TrialPublic, trial)


def measurement_public(row: Row) -> MeasurementPublic:
    return from_columns(MeasurementPublic, row)


def study_public(
    row: Row, counts: dict[str, int], best_values: dict[str, float] | None
) -> StudyPublic:
    """The study row with its config spread out, its trial counts by state and, for one
    objective, the best feasible values."""
    return from_columns(
        StudyPublic,
        row,
        **{**row.config, "seed": row.seed},
        # The wire keeps the column's name from before revision 0006, for compatibility.
        engine_state_version=row.ask_count,
        trial_counts=counts,
        best_values=best_values,
    )


def study_export(
    row: Row, trials: Sequence[Row], measurements: dict[int, list[dict[str, Any]]]
) -> StudyExport:
    """The study row, its trials in number order and their measurements by trial id."""
    study = StudyCreate.model_validate({**row.config, "name": row.name, "metadata": row.metadata})
    return StudyExport(
        study=study,
        engine_state=row.engine_state,
        engine_state_version=row.ask_count,
        notes=row.notes,
        trials=[
            from_columns(TrialExport, t, measurements=measurements.get(t.id, [])) for t in trials
        ],
    )


def sampler_public(row: Row) -> SamplerPublic:
    particles, history = row.particles, row.history
    return from_columns(
        SamplerPublic,
        row,
        **row.config,
        X=particles["X"],
        weights=particles["w"],
        grad_norm_history=history["grad_norm"],
        mean_nll_history=history["mean_nll"],
        restarts=history["restarts"],
    )
