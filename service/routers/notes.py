"""/v1/studies/{id}/...: a trial's note, and the intermediate-value curves of a study's trials
(the dashboard's notes and intermediate-values views)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Response

from client.models import ProblemCode, StudyCurves, TrialNote, TrialPublic
from client.notes_models import CurveSelection
from service import curves, notes
from service.deps import IdemDep, StoreDep, TenantDep
from service.errors import problems
from service.routers.common import (
    STUDY,
    TRIAL,
    WRITE,
    StudyId,
    TrialFilter,
    TrialNumber,
    api_router,
    written,
)

router = api_router("/v1/studies/{study_id}", "trials")


@router.put("/trials/{number}/note", response_model=TrialPublic, responses=problems(*WRITE, *TRIAL))
def put_note(
    study_id: StudyId,
    number: TrialNumber,
    body: TrialNote,
    store: StoreDep,
    tenant: TenantDep,
    idem: IdemDep,
) -> Response:
    """Replace the trial's note (an empty note removes it), in any state of the trial."""
    return written(notes.set_trial_note(store, tenant, study_id, number, body, idem))


@router.get(
    "/measurements",
    response_model=StudyCurves,
    responses=problems(*STUDY, ProblemCode.UNKNOWN_OBJECTIVE),
)
def curves_of_trials(
    study_id: StudyId,
    store: StoreDep,
    tenant: TenantDep,
    selection: CurveSelection = "recent",
    objective: Annotated[
        str | None, Query(max_length=256, description="What `best` ranks by; the first one.")
    ] = None,
    max_trials: Annotated[int, Query(ge=1, le=50)] = 10,
    max_points_per_trial: Annotated[int, Query(ge=2, le=500)] = 200,
    filter: TrialFilter = None,
) -> StudyCurves:
    """The intermediate values (``report`` measurements) of at most ``max_trials`` trials of the
    selection, each downsampled on the server to at most ``max_points_per_trial`` steps (evenly
    spaced, always the first and the last): ``recent`` trials that reported, the ``best``
    completed ones, or the ``running`` ones; among those that meet ``filter``."""
    query = curves.CurvesQuery(selection, objective, max_trials, max_points_per_trial, filter)
    return curves.study_curves(store, tenant, study_id, query)
