"""The ``pom`` engine: batch multi-objective BO by Probability of Matching.

Method [POM2026]. A batch ``X_q`` *matches* the Pareto set ``P*`` when every point is
Pareto-optimal and together they cover ``P*``: ``log POM = log P_PO + lambda log P_cov``. The
paper's equations are not public; the formulas are our reading of its abstract. After a Sobol
initial design (``n_initial``, default ``2 (d + 1)``, ``engines.bo``), one GP per objective and
constraint, and ``S`` posterior sample paths ``f^(s)`` by pathwise conditioning
[Wilson2020pathwise]. ``P^(s)`` is the set of eligible (sampled feasible, below the reference
point) pool points that no pool or observed point dominates under ``f^(s)``::

    PPO(x)     = (1/S) sum_s 1[x in P^(s)]
    P_PO(X_q)  = (1/S) sum_s prod_i 1[x_i in P^(s)]
    P_cov(X_q) = (1/S) sum_s prod_i (q m_i^(s)),  m_i^(s): share of P^(s) nearest to x_i

The batch is built greedily from the selected set ``A`` (observed front, pending trials, batch
so far), ``delta_A(z) = min(1, min_a ||z - a|| / sqrt(d))``::

    gain_A(x) = (1/S) sum_s (1/|P^(s)|) sum_{z in P^(s)} max(0, delta_A(z) - ||z - x|| / sqrt(d))
    score(x)  = log max(PPO(x), 1/(2S)) + lambda log(1e-6 + gain_A(x))

``gain_A`` is a facility-location function (monotone, submodular), so the greedy coverage is
within ``1 - 1/e`` of the best [Nemhauser1978submodular].

Our design (reasons in docs/engines/pom.md): the pool (Sobol plus perturbed front points) and
each path's refined points (projected Adam on the objectives and on random augmented
Chebyshev scalarizations from the sample's ideal point); the greedy on ``gain_A`` rather than on
``P_cov`` (which clusters); ``A`` starting with the observed front; a probability floor of
``1 / (2 S)``; sets recomputed without observed dominators when empty (``relaxed``); one
objective as Thompson sampling spread by coverage; categoricals ordinal in the GPs.

References:
    [POM2026] Probability of Matching (POM) for batch multi-objective BO, ICML 2026; only the
        abstract is public. An earlier version: OpenReview y7VeiCT7HG, "qEHVI-SF".
    [Wilson2020pathwise] J. T. Wilson, V. Borovitskiy, A. Terenin, P. Mostowsky,
        M. P. Deisenroth. Efficiently sampling functions from Gaussian process posteriors.
        ICML 2020.
    [Nemhauser1978submodular] G. L. Nemhauser, L. A. Wolsey, M. L. Fisher. An analysis of
        approximations for maximizing submodular set functions. Mathematical Programming 14,
        1978.
    [Kingma2015] D. P. Kingma, J. Ba. Adam: a method for stochastic optimization. ICLR 2015.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from botorch.exceptions.errors import BotorchError
from numpy.random import Generator
from scipy.stats import qmc

from engines import bo, sample_paths
from engines.base import JSON, History, ModelBasedEngine, Problem, Proposal
from engines.limits import WorkLimits
from engines.metrics import non_dominated
from engines.options import check_int_options, int_option
from engines.pareto_matching import batch_score, greedy_batch, pareto_sample_masks
from engines.quasirandom import SobolStream
from engines.space import distinct_rows

_STATE_VERSION = 1
#: Share of the pool made of perturbations of the observed non-dominated points, and their
#: standard deviation in the unit cube.
_LOCAL_SHARE = 0.25
_LOCAL_SIGMA = 0.05
#: Refinement on the sample paths: Adam steps and rate in the unit cube, the augmented
#: Chebyshev term ``rho`` and the weight ``beta`` of the sampled constraint violation.
_REFINE_STEPS = 100
_REFINE_LR = 0.02
_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8
_AUGMENT = 0.05
_PENALTY = 10.0


@dataclass
class POMEngine(ModelBasedEngine):
    """Batch multi-objective BO by Probability of Matching; see the module docstring.

    Options:
        n_initial: Sobol points (completed plus pending trials) before the model is used;
            ``None`` means ``2 (d + 1)``.
        n_samples: ``S``, posterior sample paths; ``None`` means 64, or 128 with three or more
            objectives.
        pool_size: candidate points per ask (3/4 Sobol, 1/4 near the observed front).
        lambda_coverage: ``lambda``, the weight of coverage against Pareto probability.
        top_candidates: pool points of highest PPO the greedy batch chooses from.
        num_features: random Fourier features per sample path.
        refine_points: pool points optimized on the sample paths per ask (0: none).
    """

    name: ClassVar[str] = "pom"
    limits: ClassVar[WorkLimits] = WorkLimits(
        max_dimension=50, max_count=20, max_points=500, observations=300
    )

    n_initial: int | None = int_option(None, 1, 10_000)
    n_samples: int | None = int_option(None, 2, 128)
    pool_size: int = int_option(2048, 16, 4096)
    lambda_coverage: float = 1.0
    top_candidates: int = int_option(512, 1, 1024)
    num_features: int = int_option(1024, 16, 1024)
    refine_points: int = int_option(256, 0, 256)

    def __post_init__(self) -> None:
        check_int_options(self)
        if not (math.isfinite(self.lambda_coverage) and 0 <= self.lambda_coverage <= 100):
            raise ValueError(
                f"lambda_coverage must be between 0 and 100, got {self.lambda_coverage}"
            )

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        stream = SobolStream.resume(problem.d, state, rng)
        last = dict(state["last"]) if isinstance(state.get("last"), dict) else None
        n_initial = self.n_initial if self.n_initial is not None else 2 * (problem.d + 1)
        model = functools.partial(self._model_points, problem, history, rng=rng)
        X, details, summary = bo.sobol_then_model(
            problem, history, count, n_initial, stream, rng, model
        )
        new_state = {"version": _STATE_VERSION, **stream.state(), "last": summary or last}
        return Proposal(X=X, state=new_state, details=details)

    def _model_points(
        self, problem: Problem, history: History, X_pending: np.ndarray, count: int, rng: Generator
    ) -> tuple[np.ndarray, list[JSON], JSON | None]:
        """``count`` points ``(count, d)`` snapped, their details and the batch's POM summary;
        NaN rows (with a ``fallback`` reason) where the model gives no point.

        ``X_pending: (p, d)`` in [0, 1]: the pending trials plus the batch so far.
        """
        m, d = problem.n_objectives, problem.d
        S = self.n_samples or (128 if m >= 3 else 64)
        torch_seed = int(rng.integers(2**31))
        data = bo.training_data(problem, history)
        if isinstance(data, str):
            return (*bo.unfilled(d, count, data), None)
        X_train, targets = data
        front = X_train[_observed_front(-targets[:, :m], targets[:, m:])]
        pool = self._pool(problem, X_train, front, X_pending, rng)
        if len(pool) == 0:
            return (*bo.unfilled(d, count, "no untried point left in the candidate pool"), None)
        try:
            with bo.seeded(torch_seed, False):
                pool, F, V, ref = self._sample(problem, X_train, targets, pool, X_pending, S, rng)
        except bo.NUMERICAL_ERRORS as exc:
            return (*bo.unfilled(d, count, bo.failure(exc)), None)

        P = pareto_sample_masks(F, V, ref, len(pool))
        relaxed = not P.any()
        if relaxed:  # the observed front dominates the whole pool in every sample
            n = len(pool)
            P = pareto_sample_masks(F[:, :n], V[:, :n], ref, n)
        covered = np.vstack([front, X_pending])  # the batch adds to what the study has
        chosen = greedy_batch(pool, P, covered, count, self.lambda_coverage, self.top_candidates)
        X_new = np.full((count, d), np.nan)
        X_new[: len(chosen)] = pool[chosen]
        summary = batch_score(pool, P, chosen, self.lambda_coverage)
        summary |= {"n_observations": len(X_train), "n_samples": S, "relaxed": relaxed}
        ppo = P.mean(axis=0)
        details: list[JSON] = [
            {"source": "pom", "ppo": float(ppo[i]), "pom": dict(summary)} for i in chosen
        ]
        reason = "fewer untried candidate points than asked"
        details += [{"source": "sobol", "fallback": reason} for _ in range(count - len(chosen))]
        return X_new, details, summary

    def _pool(
        self,
        problem: Problem,
        X_train: np.ndarray,
        front: np.ndarray,
        X_pending: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """``(N, d)`` distinct snapped candidates, none equal to an observed or pending point.

        ``X_train: (n, d)`` snapped, ``front: (f, d)`` its non-dominated rows (f >= 1).
        """
        d = problem.d
        n_local = int(self.pool_size * _LOCAL_SHARE)
        sobol = qmc.Sobol(d, scramble=True, rng=int(rng.integers(2**31)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # n need not be a power of two
            Z = sobol.random(self.pool_size - n_local)
        centres = front[rng.integers(len(front), size=n_local)]
        local = np.clip(centres + _LOCAL_SIGMA * rng.standard_normal((n_local, d)), 0.0, 1.0)
        pool = problem.space.snap(np.vstack([Z, local]))
        return distinct_rows(pool, problem.space.snap(np.vstack([X_train, X_pending])))

    def _sample(
        self,
        problem: Problem,
        X_train: np.ndarray,
        targets: np.ndarray,
        pool: np.ndarray,
        X_pending: np.ndarray,
        S: int,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Fit the GPs, draw ``S`` sample paths, add each path's refined points to the pool and
        evaluate every path on the pool and the observed points.

        Returns the pool ``(N, d)`` with the refined points appended, ``F: (S, N + n, m)``
        objective samples (minimization), ``V: (S, N + n)`` total sampled constraint violation
        (0 when feasible) and the reference point ``(m,)`` (minimization; ``None`` for one
        objective). Rows of ``F`` and ``V``: the pool, then ``X_train``.
        """
        m, k = problem.n_objectives, problem.n_constraints
        tX = torch.as_tensor(X_train, dtype=torch.float64)
        models = [bo.fit_gp(tX, targets[:, i], []) for i in range(m + k)]
        paths = sample_paths.SamplePaths(models, S, self.num_features)
        X_all = np.vstack([pool, X_train])
        with torch.no_grad():
            values = paths(torch.as_tensor(X_all))  # (S, N + n, m + k)
        if self.refine_points:
            scale = torch.as_tensor(np.maximum(targets.std(axis=0), 1e-9))  # observed spreads
            refined = refine_on_paths(
                paths, torch.as_tensor(X_all), values, scale, m, self.refine_points, rng
            )
            taken = problem.space.snap(np.vstack([X_all, X_pending]))
            refined = distinct_rows(problem.space.snap(refined), taken)
            with torch.no_grad():
                extra = paths(torch.as_tensor(refined))
            n_pool = len(pool)
            pool = np.vstack([pool, refined])
            values = torch.cat([values[:, :n_pool], extra, values[:, n_pool:]], dim=1)
        sampled = values.numpy()
        if not np.all(np.isfinite(sampled)):
            raise BotorchError("the posterior sample paths are not finite")
        F = -sampled[..., :m]
        V = np.maximum(sampled[..., m:], 0.0).sum(axis=-1)
        ref = None if m == 1 else -bo.reference_point(problem, targets).numpy()
        return pool, F, V, ref


def refine_on_paths(
    paths: sample_paths.SamplePaths,
    X_start: torch.Tensor,
    values: torch.Tensor,
    scale: torch.Tensor,
    m: int,
    n_points: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``(S (m + K), d)`` points in [0, 1], ``K = ceil(n_points / S)``, each a local minimizer on
    one sample path: of each objective alone, then of ``K`` random augmented Chebyshev
    scalarizations around the ideal point that those minimizers give (module docstring).

    ``X_start: (N, d)`` the points ``values: (S, N, m + k)`` were evaluated at (models'
    orientation), ``scale: (m + k,)`` the observed spread of each output.
    """
    S = values.shape[0]
    K = max(1, math.ceil(n_points / S))
    one_hot = torch.eye(m, dtype=torch.float64).expand(S, m, m)[:, :, None]  # (S, m, 1, m)
    zero = torch.zeros((S, 1, 1, m), dtype=torch.float64)
    extremes = _descend(paths, X_start, values, scale, zero, one_hot, m)  # (S, m, d)
    with torch.no_grad():
        candidates = torch.cat([values, paths(extremes)], dim=1)
    # The ideal must not lie above what the path can reach, or the scalarizations all end at
    # one end of the front: hence the minimizers first, then the ideal over them and the starts.
    lo = (-candidates[..., :m] / scale[:m]).amin(dim=1)[:, None, None]  # (S, 1, 1, m)
    weights = torch.as_tensor(rng.dirichlet(np.ones(m), size=(S, K, 1)))  # (S, K, 1, m)
    spread = _descend(paths, X_start, values, scale, lo, weights, m)  # (S, K, d)
    return torch.cat([extremes, spread], dim=1).reshape(S * (m + K), -1).numpy()


def _descend(
    paths: sample_paths.SamplePaths,
    X_start: torch.Tensor,
    values: torch.Tensor,
    scale: torch.Tensor,
    lo: torch.Tensor,
    weights: torch.Tensor,
    m: int,
) -> torch.Tensor:
    """``(S, K, d)``: for each sample path ``s`` and weight vector ``weights[s, k, 0]``, projected
    Adam on the scalarization from the best of ``X_start`` (``values``: its path values)."""
    start_scores = _scalarized(values[:, None], scale, lo, weights, m)  # (S, K, N)
    x = X_start[start_scores.argmin(dim=-1)].clone().requires_grad_(True)  # (S, K, d)
    # Adam [Kingma2015] with torch's defaults, written out: torch.optim's first use imports
    # torch._dynamo, about a second of every new engine process's first pom ask.
    first, second = torch.zeros_like(x), torch.zeros_like(x)
    for step in range(1, _REFINE_STEPS + 1):
        scores = _scalarized(paths(x), scale, lo[:, 0], weights[:, :, 0], m)
        # The scalarizations are independent: one gradient of the sum for all.
        (gradient,) = torch.autograd.grad(scores.sum(), x)
        with torch.no_grad():
            first.mul_(_ADAM_BETAS[0]).add_(gradient, alpha=1 - _ADAM_BETAS[0])
            second.mul_(_ADAM_BETAS[1]).addcmul_(gradient, gradient, value=1 - _ADAM_BETAS[1])
            scaled = (second / (1 - _ADAM_BETAS[1] ** step)).sqrt_().add_(_ADAM_EPS)
            x.addcdiv_(first, scaled, value=-_REFINE_LR / (1 - _ADAM_BETAS[0] ** step))
            x.clamp_(0.0, 1.0)
    return x.detach()


def _scalarized(
    values: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor, weights: torch.Tensor, m: int
) -> torch.Tensor:
    """The penalized augmented Chebyshev scalarization of ``values: (..., m + k)`` (models'
    orientation): ``max_{i: w_i > 0} w_i u_i + rho sum_i u_i + beta sum_j max(0, c_j) / scale_j``
    with ``u_i = -f_i / scale_i - lo_i``; ``lo`` and ``weights`` broadcast against ``(..., m)``.
    With one weight 1 and the others 0 it is ``f_i`` plus ``rho`` times the others, whose
    minimizer is Pareto-optimal, not only weakly."""
    units = values / scale
    u = -units[..., :m] - lo
    weighted = torch.where(weights > 0, weights * u, -torch.inf)
    penalty = torch.relu(units[..., m:]).sum(-1)
    return weighted.amax(-1) + _AUGMENT * u.sum(-1) + _PENALTY * penalty


def _observed_front(Y: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the observed feasible non-dominated rows of ``Y: (n, m)``; while no row is
    feasible, the rows of least total violation. ``C: (n, k)``."""
    violation = np.maximum(C, 0.0).sum(axis=1) if C.shape[1] else np.zeros(len(Y))
    feasible = violation <= 0.0
    if not feasible.any():
        return violation == violation.min()
    mask = np.zeros(len(Y), dtype=bool)
    mask[np.flatnonzero(feasible)[non_dominated(Y[feasible])]] = True
    return mask
