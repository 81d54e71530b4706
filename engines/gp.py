"""The ``gp`` engine: classic Gaussian-process Bayesian optimization for small budgets.

Method. Until ``n_initial`` trials (default ``2 d + 1``, completed and pending together) exist,
points come from the study's scrambled Sobol stream (``engines.quasirandom``); a batch that
crosses that boundary is part Sobol, part model-based. After that, each objective and each
outcome constraint gets its own exact GP [Rasmussen2006gpml] on the completed trials (constant
mean, squared-exponential kernel with per-dimension lengthscales under a dimension-scaled
log-normal prior [Hvarfner2024vanilla], inferred noise, standardized outcomes). With data
``(X, y)``, kernel ``k`` and noise ``s2``, the posterior is::

    mu(x)      = m + k(x, X) (K + s2 I)^-1 (y - m)
    sigma^2(x) = k(x, x) - k(x, X) (K + s2 I)^-1 k(X, x),     K = k(X, X)

``History.Y`` is minimized and BoTorch maximizes, so the GPs model ``-Y``.

- One objective: q-log noisy expected improvement, qLogNEI [Ament2023logei]. Expected improvement
  ``EI(x) = E[max(f(x) - f*, 0)]`` becomes ``log E[softplus_tau(f(x) - max_j f(x_j))]``, estimated
  with quasi-Monte-Carlo joint samples of ``f`` at ``x`` and at the observed ``x_j`` (a noisy
  incumbent [Letham2019noisyei]); unlike EI it stays informative where EI underflows to zero.
  For one point with nothing pending and no outcome constraint, analytic log EI, ``log EI(x)``
  with ``EI = sigma (z Phi(z) + phi(z))``, ``z = (mu(x) - f*) / sigma(x)``, computed stably in
  log space, where ``f*`` is the best posterior mean at the observed trials: our choice, for the
  cost of an ask.
- Several objectives: q-log noisy expected hypervolume improvement, qLogNEHVI
  [Daulton2021nehvi]: the expected gain in hypervolume, above a reference point ``r``, over the
  sampled Pareto front of the observed points, computed in log space.
- Outcome constraints ``c_i(x) <= 0``: each sample's improvement is weighted by the smoothed
  feasibility ``prod_i sigmoid(-c_i(x) / eta)`` of the sampled constraint values [Gardner2014cbo].
- Points computed ahead of the asks (``suggest_ahead``: the service's suggestion pool, served
  later to workers that arrive while other trials finish), one objective, no outcome
  constraint, no categorical coordinate: asynchronous parallel Thompson sampling
  [Kandasamy2018pts]. Each point maximizes its own posterior sample path ``f^(s)``, drawn by
  pathwise conditioning [Wilson2020pathwise]: ``f^(s)(x) = m + g(x) + k(x, X) (K + s2 I)^-1
  (y - m - g(X) - e)``, ``g`` a prior sample from random Fourier features, ``e ~ N(0, s2 I)``.
  The pending trials are not conditioned on: the samples' randomness spreads the batch.

Our design (reasons in docs/engines/gp.md):

- Pending trials count toward ``n_initial``; a batch is optimized greedily with the pending
  trials and the points already chosen as ``X_pending``.
- Categorical coordinates get a Hamming kernel summed with and multiplied by the continuous one
  (``MixedSingleTaskGP``, after [Ru2020cocabo]) and are optimized over their choices; integer
  coordinates with at most ``max_discrete_levels`` levels over their levels (cell centres
  ``(k + 0.5) / L``); other coordinates continuously, then snapped.
- The fit stops after 200 L-BFGS iterations. Without a given reference point, ``r`` is the
  nadir of the feasible observed front moved back by 10 % of its range. Non-finite objective
  values count as the worst finite one, non-finite constraint values as violated.
- Thompson sampling for the pool's points: a batch of ``q`` points costs one fit and ``q``
  cheap path maximizations instead of ``q`` greedy qLogNEI optimizations (0.15-0.2 s for 8
  points at 10-60 trials on Hartmann-6 against about 2 s; docs/engines/gp.md), so the pool
  keeps up with several workers; each
  path's maximizer is the best of 2,048 candidates (half Sobol, half around the best
  observed points) refined by L-BFGS-B.
- Duplicates are replaced by fresh Sobol points; a numerical failure falls back to Sobol
  points, said so in their details (``engines.bo``).

References:
    [Rasmussen2006gpml] C. E. Rasmussen, C. K. I. Williams. Gaussian Processes for Machine
        Learning. MIT Press, 2006.
    [Hvarfner2024vanilla] C. Hvarfner et al. Vanilla Bayesian optimization performs great in
        high dimensions. ICML 2024.
    [Letham2019noisyei] B. Letham et al. Constrained Bayesian optimization with noisy
        experiments. Bayesian Analysis 14(2), 2019.
    [Ament2023logei] S. Ament et al. Unexpected improvements to expected improvement for
        Bayesian optimization. NeurIPS 2023.
    [Daulton2021nehvi] S. Daulton, M. Balandat, E. Bakshy. Parallel Bayesian optimization of
        multiple noisy objectives with expected hypervolume improvement. NeurIPS 2021.
    [Kandasamy2018pts] K. Kandasamy, A. Krishnamurthy, J. Schneider, B. Poczos. Parallelised
        Bayesian optimisation via Thompson sampling. AISTATS 2018.
    [Wilson2020pathwise] J. T. Wilson, V. Borovitskiy, A. Terenin, P. Mostowsky,
        M. P. Deisenroth. Efficiently sampling functions from Gaussian process posteriors.
        ICML 2020.
    [Gardner2014cbo] J. R. Gardner et al. Bayesian optimization with inequality constraints.
        ICML 2014.
    [Ru2020cocabo] B. Ru, A. S. Alvi, V. Nguyen, M. A. Osborne, S. J. Roberts. Bayesian
        optimisation over multiple continuous and categorical inputs. ICML 2020.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.multi_objective.objective import IdentityMCMultiOutputObjective
from botorch.acquisition.objective import GenericMCObjective
from botorch.exceptions.errors import BotorchError
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf
from botorch.optim.optimize_mixed import optimize_acqf_mixed_alternating
from numpy.random import Generator

from engines import bo, sample_paths
from engines.base import JSON, History, ModelBasedEngine, Problem, Proposal
from engines.limits import WorkLimits
from engines.options import check_option_ranges
from engines.quasirandom import SobolStream
from engines.space import SearchSpace

_STATE_VERSION = 1
#: Random points the acquisition is evaluated on at once when the optimizer picks its starting
#: points: the default ``raw_samples`` (256) in one batch, more in batches of this size (BoTorch
#: evaluates them all at once otherwise: a qLogNEHVI over 300 observations with 1024 of them
#: is gigabytes).
_RAW_BATCH = 256


@dataclass
class GPEngine(ModelBasedEngine):
    """GP Bayesian optimization with qLogNEI / qLogNEHVI; see the module docstring.

    Options:
        n_initial: Sobol points (completed plus pending trials) before the model is used;
            ``None`` means ``2 d + 1``.
        num_restarts: starting points of the acquisition optimizer, per batch point.
        raw_samples: random points scored to choose those starting points.
        max_discrete_levels: integer coordinates with at most this many levels are optimized
            over their levels; coarser ones continuously, then snapped.
    """

    name: ClassVar[str] = "gp"
    limits: ClassVar[WorkLimits] = WorkLimits(
        max_dimension=50, max_count=10, max_points=250, observations=300
    )

    n_initial: int | None = None
    num_restarts: int = 8
    raw_samples: int = 256
    max_discrete_levels: int = 128

    def __post_init__(self) -> None:
        if self.n_initial is not None and not 1 <= self.n_initial <= 10_000:
            raise ValueError(f"n_initial must be between 1 and 10000 or null, got {self.n_initial}")
        check_option_ranges([("num_restarts", self.num_restarts, 1, 16, False)])
        if not self.num_restarts <= self.raw_samples <= 1024:
            raise ValueError(
                f"raw_samples must be between num_restarts ({self.num_restarts}) and 1024, "
                f"got {self.raw_samples}"
            )
        check_option_ranges([("max_discrete_levels", self.max_discrete_levels, 2, 1000, False)])

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        return self._suggest(problem, history, count, state, rng, ahead=False)

    def suggest_ahead(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        """Points for the suggestion pool: by Thompson sampling where it applies, else as
        ``suggest`` gives them (module docstring)."""
        return self._suggest(problem, history, count, state, rng, ahead=True)

    def _suggest(
        self,
        problem: Problem,
        history: History,
        count: int,
        state: JSON,
        rng: np.random.Generator,
        ahead: bool,
    ) -> Proposal:
        stream = SobolStream.resume(problem.d, state, rng)
        n_initial = self.n_initial if self.n_initial is not None else 2 * problem.d + 1
        model = functools.partial(self._model_points, problem, history, rng=rng, ahead=ahead)
        X, details, _ = bo.sobol_then_model(problem, history, count, n_initial, stream, rng, model)
        return Proposal(X=X, state={"version": _STATE_VERSION, **stream.state()}, details=details)

    def _model_points(
        self,
        problem: Problem,
        history: History,
        X_pending: np.ndarray,
        count: int,
        rng: Generator,
        ahead: bool,
    ) -> tuple[np.ndarray, list[JSON], None]:
        """``count`` points from the acquisition optimizer (by Thompson sampling where
        ``ahead`` and it applies), ``(count, d)`` snapped, with details; points marked with NaN
        rows (and a ``fallback`` reason) when the model cannot be used.

        ``X_pending: (p, d)`` in [0, 1] are the pending trials plus the batch so far.
        """
        torch_seed = int(rng.integers(2**31))
        data = bo.training_data(problem, history)
        if isinstance(data, str):
            return (*bo.unfilled(problem.d, count, data), None)
        X_train, targets = data
        try:
            with bo.seeded(torch_seed, bo.needs_python_random(problem.space)):
                X_new, scales, acquisitions = self._optimize(
                    problem, X_train, targets, X_pending, count, ahead
                )
        except bo.NUMERICAL_ERRORS as exc:
            return (*bo.unfilled(problem.d, count, bo.failure(exc)), None)
        details: list[JSON] = [
            {
                "source": "gp",
                "acquisition": acquisition,
                "n_observations": len(X_train),
                "lengthscales": scales,
            }
            for acquisition in acquisitions
        ]
        return problem.space.snap(X_new), details, None

    def _optimize(
        self,
        problem: Problem,
        X_train: np.ndarray,
        targets: np.ndarray,
        X_pending: np.ndarray,
        count: int,
        ahead: bool,
    ) -> tuple[np.ndarray, list[list[float | None]], list[str]]:
        """Fit the GPs and choose the points; returns ``(count, d)`` in [0, 1], each GP's
        lengthscales (``bo.lengthscales``), objectives then constraints, and the name of the
        acquisition of each point. ``ahead`` with one objective, no outcome constraint and no
        categorical coordinate: the maximizers of Thompson samples (module docstring).

        ``X_train: (n, d)`` snapped, ``targets: (n, m + k)``: ``-Y`` then ``C``,
        ``X_pending: (p, d)``.
        """
        m, k = problem.n_objectives, problem.n_constraints
        model_cat_dims = [
            j for j, dim in enumerate(problem.space.dimensions) if dim.kind == "categorical"
        ]
        tX = torch.as_tensor(X_train, dtype=torch.float64)
        models = [bo.fit_gp(tX, targets[:, i], model_cat_dims) for i in range(m + k)]
        if ahead and m == 1 and k == 0 and not model_cat_dims:
            bounds = _domain(problem.space, self.max_discrete_levels)[0]
            X_new = sample_paths.thompson_points(models[0], count, torch.as_tensor(bounds))
            acquisition = "thompson"
        else:
            X_new, acquisition = self._maximize(problem, models, tX, targets, X_pending, count)
        if not np.all(np.isfinite(X_new)):
            raise BotorchError("the acquisition optimizer returned non-finite points")
        return (
            np.clip(X_new, 0.0, 1.0),
            [bo.lengthscales(gp, problem.d) for gp in models],
            [acquisition] * count,
        )

    def _maximize(
        self,
        problem: Problem,
        models: list[SingleTaskGP],
        tX: torch.Tensor,
        targets: np.ndarray,
        X_pending: np.ndarray,
        count: int,
    ) -> tuple[np.ndarray, str]:
        """``count`` points ``(count, d)`` maximizing the acquisition on the fitted ``models``
        (greedily, with ``X_pending`` and the points chosen so far pending), and its name."""
        bounds, discrete_dims, cat_dims, fixed = _domain(problem.space, self.max_discrete_levels)
        pending = torch.as_tensor(X_pending, dtype=torch.float64) if len(X_pending) else None
        acq, acquisition = _acquisition(problem, models, tX, targets, pending, count)
        tbounds = torch.as_tensor(bounds, dtype=torch.float64)
        opt: dict[str, Any] = {
            "q": count,
            "num_restarts": self.num_restarts,
            "raw_samples": self.raw_samples,
            "fixed_features": fixed or None,
        }
        options: dict[str, bool | float | int | str] = {"init_batch_limit": _RAW_BATCH}
        if discrete_dims or cat_dims:
            options["max_discrete_values"] = self.max_discrete_levels
            candidates, _ = optimize_acqf_mixed_alternating(
                acq, tbounds, discrete_dims=discrete_dims, cat_dims=cat_dims, options=options, **opt
            )
        else:
            candidates, _ = optimize_acqf(acq, tbounds, sequential=True, options=options, **opt)
        return candidates.detach().numpy().reshape(count, problem.d), acquisition


def _acquisition(
    problem: Problem,
    models: list[SingleTaskGP],
    tX: torch.Tensor,
    targets: np.ndarray,
    pending: torch.Tensor | None,
    count: int,
) -> tuple[Any, str]:
    """The acquisition function on the fitted ``models`` (objectives, then constraints) and its
    name: analytic LogEI for one unconstrained point with nothing pending, else qLogNEI (one
    objective) or qLogNEHVI."""
    m, k = problem.n_objectives, problem.n_constraints
    model = bo.joint_model(models)
    if m == 1 and k == 0 and count == 1 and pending is None:
        return bo.log_expected_improvement(models[0], tX), "LogEI"
    common: dict[str, Any] = {
        "X_baseline": tX,
        "constraints": [_column(m + i) for i in range(k)] or None,
        "X_pending": pending,
        "prune_baseline": True,
    }
    if m == 1:
        first = GenericMCObjective(_objective0) if k else None
        return qLogNoisyExpectedImprovement(model, objective=first, **common), "qLogNEI"
    ref_point = bo.reference_point(problem, targets)
    firsts = IdentityMCMultiOutputObjective(outcomes=list(range(m))) if k else None
    acq = qLogNoisyExpectedHypervolumeImprovement(
        model, ref_point=ref_point, objective=firsts, **common
    )
    return acq, "qLogNEHVI"


def _objective0(samples: torch.Tensor, X: torch.Tensor | None = None) -> torch.Tensor:
    """The objective output of ``samples: (..., q, 1 + k)``."""
    return samples[..., 0]


def _column(i: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The constraint callable for output ``i``: feasible when ``samples[..., i] <= 0``."""
    return lambda samples: samples[..., i]


def _domain(
    space: SearchSpace, max_levels: int
) -> tuple[np.ndarray, dict[int, list[float]], dict[int, list[float]], dict[int, float]]:
    """``(bounds: (2, d), discrete_dims, cat_dims, fixed_features)`` for the optimizer.

    Discrete coordinates carry their cell centres ``(k + 0.5) / L`` and are bounded by the first
    and last; a coordinate with a single level is fixed at 0.5.
    """
    bounds = np.array([[0.0] * space.d, [1.0] * space.d])
    discrete: dict[int, list[float]] = {}
    cats: dict[int, list[float]] = {}
    fixed: dict[int, float] = {}
    for j, dim in enumerate(space.dimensions):
        levels = dim.levels
        if levels is None or (dim.kind == "integer" and levels > max_levels):
            continue
        if levels == 1:
            fixed[j] = 0.5
            continue
        values = [(i + 0.5) / levels for i in range(levels)]
        bounds[:, j] = values[0], values[-1]
        (cats if dim.kind == "categorical" else discrete)[j] = values
    return bounds, discrete, cats, fixed
