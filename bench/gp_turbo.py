"""GP-TuRBO: TuRBO-1 with an exact BoTorch GP, as in the BoTorch TuRBO-1 tutorial, for benches.

A reusable ask/tell baseline (``GPTurbo``) and a one-shot cold proposal (``cold_proposal``), on
the unit cube, minimizing. It follows the BoTorch tutorial "BO with TuRBO-1"
(``tutorials/turbo_1``; TuRBO: Eriksson et al., NeurIPS 2019) rule for rule:

- Initial design: scrambled Sobol, ``n_init = 2 d`` points; after a restart a new design.
- Model: ``SingleTaskGP`` (BoTorch's default outcome transform) on ``y`` standardized by its
  mean and std, Matern-5/2 ARD kernel with lengthscales in [0.005, 4] inside a ScaleKernel,
  Gaussian likelihood with noise in [1e-8, 1e-3], fitted by ``botorch.fit.fit_gpytorch_mll``
  (L-BFGS-B on the exact marginal log likelihood), all under
  ``gpytorch.settings.max_cholesky_size(inf)``, float64.
- Trust region: a box centred on the best observed point, side ``L * w_i`` per dimension with
  ``w`` the ARD lengthscales divided by their mean and by their geometric mean (prod w = 1),
  clipped to [0, 1]; ``L`` starts at 0.8, min 0.5^7, max 1.6.
- Candidates: ``n_cand = min(5000, max(2000, 200 d))`` RAASP points: the centre, with each
  coordinate replaced with probability ``min(20 / d, 1)`` by a scrambled Sobol point of the box;
  a row with no replaced coordinate gets one random coordinate (drawn from all ``d``: the
  tutorial's ``randint(0, d - 1)`` never picks the last one, we do not copy that off-by-one).
- Selection: Thompson sampling, ``MaxPosteriorSampling(model, replacement=False)`` (exact joint
  samples of the posterior over the candidates), ``q`` points.
- Trust-region update after each batch (maximization of ``-y``): success when
  ``max(Y_next) > best + 1e-3 |best|``; 10 consecutive successes double ``L`` (capped), ``ceil(
  max(4 / q, d / q))`` consecutive failures halve it; ``L < 0.5^7`` triggers a restart, which
  discards the trust region's data (TuRBO-1), while the caller keeps the global best.

One deliberate deviation, off by default: ``warm_start=True`` starts each fit from the
hyperparameters of the previous fit of the same trust-region run (the tutorial fits from the
GPyTorch defaults every time). It keeps 1,000-evaluation runs affordable on 2 cores; benches
that use it say so.

Also a command line for one cold proposal in its own process (the bench runs it under a
timeout)::

    .venv/bin/python -m bench.gp_turbo --n 2000 --d 20 --q 4   # prints one JSON line
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bench._ennbo_run import timing_data

DTYPE = torch.float64
LENGTH_INIT, LENGTH_MIN, LENGTH_MAX = 0.8, 0.5**7, 1.6
SUCCESS_TOLERANCE = 10  # the tutorial's value (the TuRBO paper uses 3)
#: GP fits whose every attempt failed, in this process (reported by the benches).
FIT_FAILURES = [0]


def n_candidates(d: int) -> int:
    return min(5000, max(2000, 200 * d))


@dataclass
class TrustRegion:
    """The side ``length`` of a trust region and its success / failure counters (the
    tutorials' state): ``SUCCESS_TOLERANCE`` successes in a row double it (capped),
    ``ceil(max(4 / q, d / q))`` failures in a row halve it, below ``LENGTH_MIN`` the run
    restarts."""

    d: int
    q: int
    length: float = LENGTH_INIT
    failure_counter: int = 0
    success_counter: int = 0
    failure_tolerance: int = 0
    success_tolerance: int = SUCCESS_TOLERANCE
    best_value: float = -math.inf
    restart_triggered: bool = False

    def __post_init__(self) -> None:
        self.failure_tolerance = math.ceil(max(4.0 / self.q, float(self.d) / self.q))

    def record(self, success: bool) -> None:
        """One batch's outcome."""
        if success:
            self.success_counter += 1
            self.failure_counter = 0
        else:
            self.success_counter = 0
            self.failure_counter += 1
        if self.success_counter == self.success_tolerance:
            self.length = min(2.0 * self.length, LENGTH_MAX)
            self.success_counter = 0
        elif self.failure_counter == self.failure_tolerance:
            self.length /= 2.0
            self.failure_counter = 0
        if self.length < LENGTH_MIN:
            self.restart_triggered = True


@dataclass
class TurboState(TrustRegion):
    """TuRBO-1's state, for a maximization problem."""

    def update(self, y_next_max: np.ndarray) -> None:
        """One batch of (maximized) values told."""
        best_next = float(np.max(y_next_max))
        self.record(best_next > self.best_value + 1e-3 * math.fabs(self.best_value))
        self.best_value = max(self.best_value, best_next)


class TrustRegionRuns(ABC):
    """What GP-TuRBO and SCBO share: a run restarts (``_new_run``) when its trust region
    collapses; ``restarts`` counts them."""

    restarts: int
    _state: Any

    @abstractmethod
    def _new_run(self) -> None:
        """Start a new run: a fresh trust region and initial design."""

    def _update_region(self, *batch: np.ndarray) -> None:
        """The trust region's update by one batch (``_state.update(*batch)``), then the
        restart it may trigger."""
        self._state.update(*batch)
        if self._state.restart_triggered:
            self.restarts += 1
            self._new_run()

    @property
    def length(self) -> float:
        return float(self._state.length)


@dataclass
class Timing:
    fit_s: float = 0.0
    ts_s: float = 0.0

    @property
    def proposal_s(self) -> float:
        return self.fit_s + self.ts_s


def fit_gp(
    X: torch.Tensor, y_max: torch.Tensor, warm: dict[str, torch.Tensor] | None = None
) -> Any:
    """The tutorial's GP on ``(X, standardized y_max)``, fitted; ``warm`` are raw parameters
    of an earlier fit to start from."""
    from botorch.exceptions.errors import ModelFittingError
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.constraints import Interval
    from gpytorch.kernels import MaternKernel, ScaleKernel
    from gpytorch.likelihoods import GaussianLikelihood
    from gpytorch.mlls import ExactMarginalLogLikelihood

    d = X.shape[-1]
    std = y_max.std() if len(y_max) > 1 else torch.ones((), dtype=DTYPE)
    train_y = (y_max - y_max.mean()) / (std if float(std) > 0 else 1.0)
    likelihood = GaussianLikelihood(noise_constraint=Interval(1e-8, 1e-3))
    covar = ScaleKernel(
        MaternKernel(nu=2.5, ard_num_dims=d, lengthscale_constraint=Interval(0.005, 4.0))
    )
    model = SingleTaskGP(X, train_y.unsqueeze(-1), covar_module=covar, likelihood=likelihood)
    if warm is not None:
        model.load_state_dict(warm, strict=False)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optimization and numerical warnings of the fit
        try:
            fit_gpytorch_mll(mll)
        except ModelFittingError:
            # Every attempt failed (rare); go on with the starting hyperparameters rather
            # than stop a long run. The tutorial would raise here.
            FIT_FAILURES[0] += 1
    model.eval()
    return model


def thompson_batch(
    model: Any,
    X: torch.Tensor,
    y_max: torch.Tensor,
    length: float,
    q: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """The tutorial's ``generate_batch(acqf="ts")``: RAASP candidates in the lengthscale-scaled
    box around the best point, then q Thompson samples without replacement."""
    from botorch.generation import MaxPosteriorSampling
    from torch.quasirandom import SobolEngine

    d = X.shape[-1]
    x_center = X[y_max.argmax()].clone()
    weights = model.covar_module.base_kernel.lengthscale.detach().squeeze()
    weights = weights / weights.mean()
    weights = weights / torch.prod(weights.pow(1.0 / len(weights)))
    lb = torch.clamp(x_center - weights * length / 2.0, 0.0, 1.0)
    ub = torch.clamp(x_center + weights * length / 2.0, 0.0, 1.0)
    m = n_candidates(d)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    sobol = SobolEngine(d, scramble=True, seed=seed)
    pert = lb + (ub - lb) * sobol.draw(m).to(dtype=DTYPE)
    prob = min(20.0 / d, 1.0)
    mask = torch.rand(m, d, dtype=DTYPE, generator=generator) <= prob
    empty = torch.where(mask.sum(dim=1) == 0)[0]
    mask[empty, torch.randint(0, d, (len(empty),), generator=generator)] = True
    X_cand = x_center.expand(m, d).clone()
    X_cand[mask] = pert[mask]
    sampler = MaxPosteriorSampling(model=model, replacement=False)
    with torch.no_grad():
        return sampler(X_cand, num_samples=q)


def cold_proposal(X: np.ndarray, y: np.ndarray, q: int, seed: int = 0) -> tuple[np.ndarray, Timing]:
    """One GP-TuRBO proposal from scratch on ``(X, y)`` (y minimized): a fresh trust region
    (L = 0.8 around the best point), a cold GP fit, Thompson sampling."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    Xt = torch.as_tensor(X, dtype=DTYPE)
    yt = -torch.as_tensor(y, dtype=DTYPE)
    timing = Timing()
    import gpytorch

    with gpytorch.settings.max_cholesky_size(float("inf")):
        t0 = time.perf_counter()
        model = fit_gp(Xt, yt)
        t1 = time.perf_counter()
        X_next = thompson_batch(model, Xt, yt, LENGTH_INIT, q, generator)
        t2 = time.perf_counter()
    timing.fit_s, timing.ts_s = t1 - t0, t2 - t1
    return X_next.numpy(), timing


@dataclass
class GPTurbo(TrustRegionRuns):
    """TuRBO-1 with the tutorial's GP, ask/tell on [0,1]^d, minimizing.

    ``ask()`` returns ``(q, d)`` points (fewer only if the initial design has fewer left);
    ``tell(X, y)`` takes the values to minimize. ``timings`` holds the fit and Thompson
    sampling time of every model-based ask; ``restarts`` counts trust-region restarts.
    """

    d: int
    q: int
    seed: int = 0
    n_init: int | None = None
    warm_start: bool = False
    timings: list[Timing] = field(default_factory=list)
    restarts: int = 0

    def __post_init__(self) -> None:
        if self.n_init is None:
            self.n_init = 2 * self.d
        torch.manual_seed(self.seed)
        self._generator = torch.Generator().manual_seed(self.seed)
        self._new_run()

    def _new_run(self) -> None:
        from torch.quasirandom import SobolEngine

        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self._generator))
        assert self.n_init is not None
        self._init = SobolEngine(self.d, scramble=True, seed=seed).draw(self.n_init).to(DTYPE)
        self._X = torch.zeros((0, self.d), dtype=DTYPE)
        self._y = torch.zeros(0, dtype=DTYPE)  # maximized: -y
        self._state = TurboState(self.d, self.q)
        self._in_tr = False
        self._warm: dict[str, torch.Tensor] | None = None

    def ask(self) -> np.ndarray:
        if len(self._init):
            batch, self._init = self._init[: self.q], self._init[self.q :]
            return batch.numpy().copy()
        import gpytorch

        timing = Timing()
        with gpytorch.settings.max_cholesky_size(float("inf")):
            t0 = time.perf_counter()
            model = fit_gp(self._X, self._y, self._warm if self.warm_start else None)
            t1 = time.perf_counter()
            X_next = thompson_batch(
                model, self._X, self._y, self._state.length, self.q, self._generator
            )
            timing.fit_s, timing.ts_s = t1 - t0, time.perf_counter() - t1
        if self.warm_start:
            self._warm = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.timings.append(timing)
        return X_next.numpy().copy()

    def tell(self, X: np.ndarray, y: np.ndarray) -> None:
        y_max = -torch.as_tensor(np.asarray(y, dtype=np.float64).reshape(-1), dtype=DTYPE)
        self._X = torch.cat([self._X, torch.as_tensor(X, dtype=DTYPE)])
        self._y = torch.cat([self._y, y_max])
        if not self._in_tr:
            if len(self._init) == 0:  # the design is complete: the trust region starts
                self._in_tr = True
                self._state.best_value = float(self._y.max())
            return
        self._update_region(y_max.numpy())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one cold GP-TuRBO proposal, JSON out")
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--d", type=int, required=True)
    parser.add_argument("--q", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    X, y = timing_data(args.n, args.d, args.seed)
    X_next, timing = cold_proposal(X, y, args.q, args.seed)
    assert X_next.shape == (args.q, args.d)
    print(
        json.dumps(
            {
                "n": args.n,
                "d": args.d,
                "q": args.q,
                "n_candidates": n_candidates(args.d),
                "fit_s": timing.fit_s,
                "ts_s": timing.ts_s,
                "proposal_s": timing.proposal_s,
                "threads": torch.get_num_threads(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
