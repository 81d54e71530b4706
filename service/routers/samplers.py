"""/v1/samplers: multi-target particle samplers (A-MWGraD) over ask/tell."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Response

from client.models import (
    ProblemCode,
    SamplerAsk,
    SamplerCreate,
    SamplerPublic,
    SamplerStep,
    SamplerTell,
)
from service import samplers
from service.deps import IdemDep, StoreDep, TenantDep
from service.errors import problems
from service.routers.common import WRITE, api_router, written

router = api_router("/v1/samplers", "samplers")
SamplerId = Annotated[int, Path(ge=0, le=2**31 - 1)]
#: A read of a sampler named in the path.
SAMPLER = (ProblemCode.VALIDATION_ERROR, ProblemCode.NOT_FOUND)


@router.post(
    "",
    response_model=SamplerPublic,
    status_code=201,
    responses=problems(*WRITE, ProblemCode.INVALID_SAMPLER),
)
def create_sampler(
    body: SamplerCreate, store: StoreDep, tenant: TenantDep, idem: IdemDep
) -> Response:
    """Create a particle sampler (201) from its targets, bounds and particle
    initialization. An ``Idempotency-Key`` replays the first answer."""
    return written(samplers.create_sampler(store, tenant, body, idem))


@router.get("/{sampler_id}", response_model=SamplerPublic, responses=problems(*SAMPLER))
def get_sampler(sampler_id: SamplerId, store: StoreDep, tenant: TenantDep) -> SamplerPublic:
    """The sampler and its current state."""
    return samplers.get_sampler(store, tenant, sampler_id)


@router.post("/{sampler_id}/ask", response_model=SamplerAsk, responses=problems(*SAMPLER))
def ask(sampler_id: SamplerId, store: StoreDep, tenant: TenantDep) -> SamplerAsk:
    """The particles' positions where the next tell's scores are wanted, with the iteration
    the tell must name; changes nothing, so it may be repeated."""
    return samplers.ask_sampler(store, tenant, sampler_id)


@router.post(
    "/{sampler_id}/tell",
    response_model=SamplerStep,
    responses=problems(
        *WRITE,
        *SAMPLER,
        ProblemCode.STALE_ITERATION,
        ProblemCode.SHAPE_MISMATCH,
        ProblemCode.NON_FINITE_GRADIENT,
        ProblemCode.NON_FINITE_LOG_PROB,
        ProblemCode.STEP_NOT_FINITE,
    ),
)
def tell(
    sampler_id: SamplerId, body: SamplerTell, store: StoreDep, tenant: TenantDep, idem: IdemDep
) -> Response:
    """Apply one step with the scores told at the asked positions; 409 ``stale_iteration``
    when the tell names another iteration than the sampler's (so a step is never applied
    twice). An ``Idempotency-Key`` replays the first answer."""
    return written(samplers.tell_sampler(store, tenant, sampler_id, body, idem))


@router.delete("/{sampler_id}", status_code=204, responses=problems(*SAMPLER))
def delete_sampler(sampler_id: SamplerId, store: StoreDep, tenant: TenantDep) -> Response:
    """Delete the sampler."""
    samplers.delete_sampler(store, tenant, sampler_id)
    return Response(status_code=204)
