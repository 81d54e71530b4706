"""The wire models of the sampler resource (multi-target particle sampling, A-MWGraD);
``client.models`` re-exports them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from client._wire import FloatPair, Integer, JsonDict, _Request, _Results, required_tag


class GaussianInit(_Request):
    """Particles drawn from ``N(loc, scale^2 I)`` with the sampler's seed."""

    model_config = ConfigDict(json_schema_extra=required_tag("kind"))

    kind: Literal["gaussian"] = "gaussian"
    loc: float | list[float] = 0.0
    scale: float = Field(default=1.0, gt=0)


class PointsInit(_Request):
    """Particles at the given positions, ``n_particles x dim``."""

    model_config = ConfigDict(json_schema_extra=required_tag("kind"))

    kind: Literal["points"] = "points"
    X: list[list[float]]


class SamplerCreate(_Request):
    """A multi-target sampler: ``n_particles`` particles in ``R^dim`` that move so that their
    distribution approaches ``n_targets`` target densities ``pi_k`` at once (the min-norm
    compromise of the KL divergences to each), by A-MWGraD or MWGraD
    (``engines.wasserstein_particles``).

    ``eta`` is the step size; ``schedule`` the momentum of A-MWGraD (``convex``:
    ``(n - 1) / (n + 2)``; ``strongly_convex``: from ``beta``); ``restart`` resets the momentum
    when it points uphill; ``bandwidth`` ``median`` recomputes the RBF kernel's bandwidth by the
    median heuristic at every step; ``weighting`` one weight vector for all particles (the
    papers) or one per particle; ``bounds`` keeps every coordinate in ``[low, high]`` (a
    particle that leaves is put back on the bound, at rest).
    """

    name: Annotated[str, Field(max_length=256)] | None = None
    algorithm: Literal["a-mwgrad", "mwgrad"] = "a-mwgrad"
    n_particles: Integer = Field(default=50, ge=2, le=4096)
    dim: Integer = Field(ge=1, le=10_000)
    n_targets: Integer = Field(ge=1, le=64)
    kernel: Literal["svgd", "blob"] = "svgd"
    bandwidth: Literal["median"] | Annotated[float, Field(gt=0)] = "median"
    eta: float = Field(default=0.01, gt=0, le=100)
    schedule: Literal["convex", "strongly_convex"] = "convex"
    beta: float = Field(default=1.0, gt=0)
    restart: bool = True
    weighting: Literal["shared", "per_particle"] = "shared"
    init: Annotated[GaussianInit | PointsInit, Field(discriminator="kind")] = Field(
        default_factory=GaussianInit
    )
    bounds: FloatPair | None = None
    seed: Integer | None = Field(default=None, ge=0, lt=2**63)
    metadata: JsonDict = Field(default_factory=dict)


class SamplerAsk(BaseModel):
    """Where to evaluate the targets' scores: ``X`` is ``n_particles x dim``."""

    iteration: int
    X: list[list[float]]


class SamplerTell(_Results):
    """The scores ``grad log pi_k`` at the asked positions, ``n_targets x n_particles x dim``,
    for ``iteration`` (the one asked; a tell for another is a 409). ``log_prob`` (``n_targets x
    n_particles``, optional) adds the mean negative log-density per target to the history."""

    iteration: Integer = Field(ge=0)
    grad_log_prob: list[list[list[float]]]
    log_prob: list[list[float]] | None = None


class SamplerStep(BaseModel):
    """What one tell did: the new iteration, the weights of the targets (per particle with
    ``per_particle`` weighting), ``grad_norm`` (``(1/m) sum_i |sum_k w_k Delta_k(x_i)|^2``),
    the bandwidth used and whether the momentum restarted."""

    iteration: int
    weights: list[float] | list[list[float]]
    grad_norm: float
    bandwidth: float
    restarted: bool


class SamplerPublic(SamplerCreate):
    """A sampler: its configuration, the particles now, and one entry per step so far."""

    model_config = ConfigDict(extra="ignore")

    id: int
    iteration: int
    X: list[list[float]]
    weights: list[float] | list[list[float]] | None
    grad_norm_history: list[float]
    #: Per step, the mean of ``-log pi_k`` over the particles, per target; ``None`` for the steps
    #: told without ``log_prob``.
    mean_nll_history: list[list[float] | None]
    restarts: int
    created_at: datetime
    updated_at: datetime
