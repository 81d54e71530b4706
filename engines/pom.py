"""The ``pom`` engine: batch multi-objective BO by Probability of Matching.

Method [POM2026]. A batch ``X_q = {x_1, ..., x_q}`` *matches* the Pareto set ``P*`` when every
batch point is Pareto-optimal and together they cover ``P*``. POM scores a batch by::

    log POM(X_q) = log P_PO(X_q) + lambda log P_cov(X_q)

(quality times coverage) and builds it by sampling without replacement from the posterior
distribution of the Pareto set. The paper's equations are not public: the formulas below are
our reading of its abstract, and everything past this paragraph is our design.

Model. Until ``n_initial`` trials (default ``2 (d + 1)``, completed and pending together) exist,
points come from the study's Sobol stream, as in ``engines.gp``. Then each objective and each
outcome constraint gets an exact GP (``SingleTaskGP``, standardized outcomes, in a
``ModelListGP``; ``History.Y`` is minimized, so the GPs model ``-Y``), and ``S`` posterior
sample paths ``f^(s)`` are drawn by pathwise conditioning [Wilson2020pathwise] with
``num_features`` random Fourier features: each path is a function, so every pool point and
every observed point is evaluated on the same ``S`` functions (common random numbers).

Pool and sample Pareto sets. The pool ``Z`` is ``pool_size`` points: scrambled Sobol (3/4) and
Gaussian perturbations (sigma 0.05) of the observed non-dominated points (1/4), snapped to the
parameter grid, without observed or pending points. Then each sample path ``f^(s)`` refines
more points, by 100 projected Adam steps in the unit cube through the path (a path is a
differentiable function), each from the best pool or observed point of what it minimizes:

1. each objective alone, ``u_i + rho sum_l u_l`` (so a minimizer is Pareto-optimal, not only
   weakly), which gives the sample's ideal point ``z^(s)``, the least value of each objective
   over these minimizers, the pool and the observed points;
2. ``K = ceil(refine_points / S)`` random augmented Chebyshev scalarizations (``refine_points``
   = 256 by default), ``w ~ Dirichlet(1)``::

    g_w^(s)(x) = max_i w_i u_i(x) + rho sum_i u_i(x) + beta sum_j max(0, c_j^(s)(x)) / sd_j
    u_i(x)     = (f_i^(s)(x) - z_i^(s)) / sd_i

(``sd``: the observed spread of each output, ``rho = 0.05``, ``beta = 10``). The ideal comes
first because a Chebyshev centre above what the path reaches sends every scalarization to one
end of the front. The refined points join the pool and, like every pool point, are judged on all
``S`` paths. Pareto sets often lie on the boundary or on a thin manifold (ZDT3: ``x_2..x_d =
0``) that a finite pool in ``d >= 5`` misses; the refined points reach them, as qLogNEHVI's
gradient-based acquisition optimizer does. Research notes 3.3 offer an NSGA-II run per path; a
gradient descent per weight vector serves the same purpose at less cost.

``P^(s)`` is the set of pool points that no pool point and no observed point dominates under
``f^(s)``, among the *eligible* points: feasible under the sampled constraints (``c^(s)(x) <=
0``) and below the reference point ``r`` in every objective (the problem's, else the nadir of
the observed feasible front moved back by 10 % of its range, as in ``engines.gp``). In a sample
where nothing is below ``r``, eligible means feasible; where nothing is feasible, the least
total sampled violation. Observed points
enter with their sampled values, not their noisy observations. Then::

    PPO(x)      = (1/S) sum_s 1[x in P^(s)]                      (per-point Pareto probability)
    P_PO(X_q)   = (1/S) sum_s prod_i 1[x_i in P^(s)]
    m_i^(s)     = |{z in P^(s) : x_i is the batch point nearest to z}| / |P^(s)|
    C^(s)(X_q)  = prod_i (q m_i^(s))                             in [0, 1]
    P_cov(X_q)  = (1/S) sum_s C^(s)(X_q)

``q! prod_i m_i`` is the probability that ``q`` uniform draws from ``P^(s)`` fall one in each
batch point's Voronoi cell (a perfect matching of draws to batch points); ``C^(s)`` divides it
by its maximum ``q! / q^q``. Distances are Euclidean in the unit cube. Probabilities enter logs
with a floor of ``1 / (2 S)``, the resolution of ``S`` samples. Every ask that uses the model
reports ``log POM``, ``log P_PO`` and ``log P_cov`` of its returned batch (pending trials are
not part of it) in each point's details and in the engine state.

Batch by greedy non-replacement sampling. Let ``A`` be the selected points, starting with the
observed feasible non-dominated points and the pending trials, and ``delta_A(z) = min(1,
min_{a in A} ||z - a|| / sqrt(d))`` (1 when ``A`` is empty) the distance from a Pareto point
``z`` to its nearest selected point. Each step adds::

    gain_A(x)  = (1/S) sum_s (1/|P^(s)|) sum_{z in P^(s)} max(0, delta_A(z) - ||z - x|| / sqrt(d))
    score(x)   = log max(PPO(x), 1/(2S)) + lambda log(1e-6 + gain_A(x))
    x_j        = argmax score over the ``top_candidates`` pool points of highest PPO (PPO > 0)

``gain_A(x)`` is the expected decrease, over posterior Pareto sets, of the EMD
(``engines.metrics``) of the study's non-dominated points plus the batch: Pareto mass near a
selected point is already covered and counts no more, which is the "non-replacement". Starting
``A`` with the observed front (not only the pending trials) sends the batch to the parts of the
Pareto set the study has not found yet rather than to those it has. It is a facility-location
function, monotone and submodular, so for the coverage term the greedy batch is within
``1 - 1/e`` of the best [Nemhauser1978submodular]. We do not run the greedy on ``P_cov``
itself: with ``x_1`` fixed, a second point right beside it splits the Voronoi masses evenly and
maximizes ``C^(s)``, so greedy steps on ``P_cov`` cluster. As ``delta_A`` does not depend on
``s``, the sums fold into one weight per pool point, ``w(z) = (1/S) sum_s 1[z in P^(s)] /
|P^(s)|``, and a step costs one ``(top_candidates x |union of P^(s)|)`` array operation
whatever ``S``.

Edge cases, also ours:

- When no pool point is in any ``P^(s)`` (the observed front dominates the pool in every
  sample, late in a study), the sets are recomputed without observed dominators and the
  details say ``relaxed``.
- When fewer than ``q`` pool points have ``PPO > 0``, the rest of the batch comes from the
  others by the same score (quality at the floor, so coverage decides); never before.
- One objective: ``P^(s)`` is the minimizer of ``f^(s)`` over the pool when it beats every
  observed point, so ``PPO`` is the Thompson-sampling probability of improving on the
  observations and the batch is Thompson sampling spread by the coverage term.
- Outcome constraints as above (sampled feasibility); categorical coordinates are ordinal in
  the GPs, because random Fourier features need a stationary continuous kernel.
- A numerical failure of the fit or the paths falls back to Sobol points, with the reason in
  their details; so does a point equal (after snapping) to an observed, pending, failed or
  earlier one.

References:
    [POM2026] Probability of Matching (POM) for batch multi-objective BO, ICML 2026; only the
        abstract is public. An earlier version: OpenReview y7VeiCT7HG, "qEHVI-SF".
    [Wilson2020pathwise] J. T. Wilson, V. Borovitskiy, A. Terenin, P. Mostowsky,
        M. P. Deisenroth. Efficiently sampling functions from Gaussian process posteriors.
        ICML 2020.
    [Nemhauser1978submodular] G. L. Nemhauser, L. A. Wolsey, M. L. Fisher. An analysis of
        approximations for maximizing submodular set functions. Mathematical Programming 14,
        1978.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from botorch.exceptions.errors import BotorchError
from botorch.models import ModelListGP
from botorch.sampling.pathwise import draw_kernel_feature_paths, draw_matheron_paths
from scipy.stats import qmc

from engines.base import JSON, History, Problem, Proposal, check_option_ranges
from engines.gp import (
    _NUMERICAL_ERRORS,
    _fit_gp,
    _reference_point,
    _seeded,
    _training_data,
    _unfilled,
    sobol_then_model,
)
from engines.metrics import non_dominated
from engines.quasirandom import SobolStream
from engines.space import distinct_rows

_STATE_VERSION = 1
#: Share of the pool made of perturbations of the observed non-dominated points, and their
#: standard deviation in the unit cube.
_LOCAL_SHARE = 0.25
_LOCAL_SIGMA = 0.05
#: Added to the coverage gain inside its log, so a zero gain still ranks by PPO.
_GAIN_EPS = 1e-6
#: Witnesses per sample that prefilter the non-dominated test for three or more objectives.
_WITNESSES = 32
#: Elements of a ``(samples, n, n)`` pairwise-dominance block (~8 MB of booleans).
_PAIRWISE_BLOCK = 8_000_000
#: Refinement on the sample paths: Adam steps and rate in the unit cube, the augmented
#: Chebyshev term ``rho`` and the weight ``beta`` of the sampled constraint violation.
_REFINE_STEPS = 100
_REFINE_LR = 0.02
_AUGMENT = 0.05
_PENALTY = 10.0


@dataclass
class POMEngine:
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
    uses_observations: ClassVar[bool] = True
    max_objectives: ClassVar[int | None] = None
    schedules_units: ClassVar[bool] = False

    n_initial: int | None = None
    n_samples: int | None = None
    pool_size: int = 2048
    lambda_coverage: float = 1.0
    top_candidates: int = 512
    num_features: int = 1024
    refine_points: int = 256

    def __post_init__(self) -> None:
        check_option_ranges(
            [
                ("n_initial", self.n_initial, 1, 10_000, True),
                ("n_samples", self.n_samples, 2, 4_096, True),
                ("pool_size", self.pool_size, 16, 100_000, False),
                ("top_candidates", self.top_candidates, 1, 100_000, False),
                ("num_features", self.num_features, 16, 16_384, False),
                ("refine_points", self.refine_points, 0, 16_384, False),
            ]
        )
        if not (math.isfinite(self.lambda_coverage) and 0 <= self.lambda_coverage <= 100):
            raise ValueError(
                f"lambda_coverage must be between 0 and 100, got {self.lambda_coverage}"
            )

    def suggest(
        self,
        problem: Problem,
        history: History,
        count: int,
        state: JSON,
        rng: np.random.Generator,
    ) -> Proposal:
        stream = SobolStream.resume(problem.d, state, rng)
        last = dict(state["last"]) if isinstance(state.get("last"), dict) else None
        n_initial = self.n_initial if self.n_initial is not None else 2 * (problem.d + 1)
        X, details, summary = sobol_then_model(
            problem,
            history,
            count,
            n_initial,
            stream,
            rng,
            lambda X_pending, k: self._model_points(problem, history, X_pending, k, rng),
        )
        last = summary or last
        new_state = {
            "version": _STATE_VERSION,
            "seed": stream.seed,
            "index": stream.index,
            "last": last,
        }
        return Proposal(X=X, state=new_state, details=details)

    def _model_points(
        self,
        problem: Problem,
        history: History,
        X_pending: np.ndarray,
        count: int,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, list[JSON], JSON | None]:
        """``count`` points ``(count, d)`` snapped, their details and the batch's POM summary;
        NaN rows (with a ``fallback`` reason) where the model gives no point.

        ``X_pending: (p, d)`` in [0, 1]: the pending trials plus the batch so far.
        """
        m, d = problem.n_objectives, problem.d
        S = self.n_samples or (128 if m >= 3 else 64)
        torch_seed = int(rng.integers(2**31))
        data = _training_data(problem, history)
        if isinstance(data, str):
            return (*_unfilled(d, count, data), None)
        X_train, targets = data
        front = X_train[_observed_front(-targets[:, :m], targets[:, m:])]
        pool = self._pool(problem, X_train, front, X_pending, rng)
        if len(pool) == 0:
            return (*_unfilled(d, count, "no untried point left in the candidate pool"), None)
        try:
            with _seeded(torch_seed, False):
                pool, F, V, ref = self._sample(problem, X_train, targets, pool, X_pending, S, rng)
        except _NUMERICAL_ERRORS as exc:
            return (*_unfilled(d, count, f"{type(exc).__name__}: {str(exc)[:120]}"), None)

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
        model = ModelListGP(*[_fit_gp(tX, targets[:, i], []) for i in range(m + k)])
        prior = functools.partial(draw_kernel_feature_paths, num_features=self.num_features)
        with torch.no_grad():  # the paths are fixed functions: no graph to the GP parameters
            paths = draw_matheron_paths(model, torch.Size([S]), prior_sampler=prior)
        X_all = np.vstack([pool, X_train])
        with torch.no_grad():
            values = _path_values(paths, torch.as_tensor(X_all))  # (S, N + n, m + k)
        if self.refine_points:
            scale = torch.as_tensor(np.maximum(targets.std(axis=0), 1e-9))  # observed spreads
            refined = refine_on_paths(
                paths, torch.as_tensor(X_all), values, scale, m, self.refine_points, rng
            )
            taken = problem.space.snap(np.vstack([X_all, X_pending]))
            refined = distinct_rows(problem.space.snap(refined), taken)
            with torch.no_grad():
                extra = _path_values(paths, torch.as_tensor(refined))
            n_pool = len(pool)
            pool = np.vstack([pool, refined])
            values = torch.cat([values[:, :n_pool], extra, values[:, n_pool:]], dim=1)
        sampled = values.numpy()
        if not np.all(np.isfinite(sampled)):
            raise BotorchError("the posterior sample paths are not finite")
        F = -sampled[..., :m]
        V = np.maximum(sampled[..., m:], 0.0).sum(axis=-1)
        ref = None if m == 1 else -_reference_point(problem, targets).numpy()
        return pool, F, V, ref


def _path_values(paths: Any, X: torch.Tensor) -> torch.Tensor:
    """``(S, n, m + k)``: every sample path of every GP at ``X``, ``(n, d)`` or, one set of points
    per sample, ``(S, n, d)``; in the models' orientation (objectives maximized)."""
    outputs = paths(X.to(torch.float64))
    assert isinstance(outputs, list)  # a ModelListGP's paths give one tensor per GP
    return torch.stack(outputs, dim=-1)


def refine_on_paths(
    paths: Any,
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
        candidates = torch.cat([values, _path_values(paths, extremes)], dim=1)
    # The ideal must not lie above what the path can reach, or the scalarizations all end at
    # one end of the front: hence the minimizers first, then the ideal over them and the starts.
    lo = (-candidates[..., :m] / scale[:m]).amin(dim=1)[:, None, None]  # (S, 1, 1, m)
    weights = torch.as_tensor(rng.dirichlet(np.ones(m), size=(S, K, 1)))  # (S, K, 1, m)
    spread = _descend(paths, X_start, values, scale, lo, weights, m)  # (S, K, d)
    return torch.cat([extremes, spread], dim=1).reshape(S * (m + K), -1).numpy()


def _descend(
    paths: Any,
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
    optimizer = torch.optim.Adam([x], lr=_REFINE_LR)
    for _ in range(_REFINE_STEPS):
        optimizer.zero_grad()
        scores = _scalarized(_path_values(paths, x), scale, lo[:, 0], weights[:, :, 0], m)
        scores.sum().backward()  # the scalarizations are independent: one backward for all
        optimizer.step()
        with torch.no_grad():
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


def pareto_sample_masks(
    F: np.ndarray, V: np.ndarray, ref: np.ndarray | None, n_pool: int
) -> np.ndarray:
    """``(S, n_pool)`` bool: the pool points in each sample's Pareto set (module docstring).

    ``F: (S, N, m)`` sampled objectives (minimization), ``V: (S, N)`` sampled total violation
    (0 is feasible), ``ref: (m,)`` or ``None``; the first ``n_pool`` of the ``N`` points are the
    pool, the others dominate but are never candidates.
    """
    feasible = V <= 0.0
    eligible = feasible
    if ref is not None:
        below = feasible & np.less(F, ref).all(axis=-1)
        eligible = np.where(below.any(axis=1, keepdims=True), below, feasible)
    least = np.equal(V, V.min(axis=1, keepdims=True))
    eligible = np.where(feasible.any(axis=1, keepdims=True), eligible, least)
    return non_dominated_per_sample(F, eligible)[:, :n_pool]


def non_dominated_per_sample(F: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """``(S, N)`` bool: for each sample ``s``, the eligible rows of ``F[s]: (N, m)`` that no
    eligible row dominates (minimization). Of exact duplicates, ties may keep one or all."""
    S, N, m = F.shape
    G = np.where(eligible[..., None], F, np.inf)
    if N == 0:
        return np.zeros((S, 0), dtype=bool)
    if m == 1:
        best = G[..., 0].min(axis=1, keepdims=True)
        return eligible & (G[..., 0] == best)
    if m == 2:
        # Sort each sample by (f0, f1); a point is non-dominated iff its f1 is below every f1
        # before it. One lexsort of all samples at once, the sample index as primary key.
        rows = np.repeat(np.arange(S), N)
        order = np.lexsort((G[..., 1].ravel(), G[..., 0].ravel(), rows)).reshape(S, N) % N
        f1 = np.take_along_axis(G[..., 1], order, axis=1)
        before = np.minimum.accumulate(np.concatenate([np.full((S, 1), np.inf), f1[:, :-1]], 1), 1)
        mask = np.zeros((S, N), dtype=bool)
        np.put_along_axis(mask, order, f1 < before, axis=1)
        return mask & eligible
    # Three or more objectives: discard what a few good points (lowest sum of range-scaled
    # objectives) dominate, then compare the survivors pairwise. Exact: whatever dominates a
    # survivor is dominated in turn by a non-dominated point, which survives.
    finite = np.where(eligible[..., None], F, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # samples with no eligible point
        lo, hi = np.nanmin(finite, axis=1, keepdims=True), np.nanmax(finite, axis=1, keepdims=True)
        key = np.where(eligible, ((F - lo) / np.maximum(hi - lo, 1e-300)).sum(-1), np.inf)
    n_w = min(_WITNESSES, N)
    witnesses = np.argpartition(key, n_w - 1, axis=1)[:, :n_w]
    dominated = np.zeros((S, N), dtype=bool)
    for j in range(n_w):
        w = np.take_along_axis(G, witnesses[:, j, None, None], axis=1)  # (S, 1, m)
        dominated |= _dominates(w, G)
    survivors = eligible & ~dominated
    counts = survivors.sum(axis=1)
    width = int(counts.max())
    idx = np.argsort(~survivors, axis=1, kind="stable")[:, :width]  # survivors first
    valid = np.arange(width)[None, :] < counts[:, None]
    H = np.where(valid[..., None], np.take_along_axis(G, idx[..., None], axis=1), np.inf)
    keep = np.zeros((S, width), dtype=bool)
    block = max(1, _PAIRWISE_BLOCK // max(1, width * width * m))
    for start in range(0, S, block):
        h = H[start : start + block]
        keep[start : start + block] = ~_dominates(h[:, :, None, :], h[:, None, :, :]).any(axis=1)
    mask = np.zeros((S, N), dtype=bool)
    np.put_along_axis(mask, idx, keep & valid, axis=1)
    return mask


def _dominates(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` dominates ``b`` (minimization), broadcast over all but the last axis, the objectives.

    One comparison per objective: numpy's ``all``/``any`` over a short last axis are many times
    slower than these elementwise passes.
    """
    no_worse = a[..., 0] <= b[..., 0]
    equal = a[..., 0] == b[..., 0]
    for i in range(1, a.shape[-1]):
        no_worse &= a[..., i] <= b[..., i]
        equal &= a[..., i] == b[..., i]
    return no_worse & ~equal


def greedy_batch(
    pool: np.ndarray,
    P: np.ndarray,
    X_selected: np.ndarray,
    count: int,
    lam: float,
    top: int,
) -> list[int]:
    """Up to ``count`` pool rows by the greedy non-replacement rule (module docstring).

    ``pool: (N, d)`` in [0, 1], ``P: (S, N)`` sample Pareto sets, ``X_selected: (p, d)`` the
    points that start the selected set (the observed front and the pending trials), ``top``:
    candidates of highest PPO. Points with PPO 0 are taken only once no candidate with PPO > 0
    is left. Fewer than ``count`` rows come back only when the pool has fewer points.
    """
    S = P.shape[0]
    d = pool.shape[1]
    top = max(top, count)
    scale = math.sqrt(d) if d else 1.0
    ppo = P.mean(axis=0)
    union = np.flatnonzero(ppo > 0)
    weight = _pareto_weights(P)[union]  # (u,)
    Z = pool[union]
    order = np.argsort(-ppo, kind="stable")
    positive = order[: min(top, len(union))]
    candidates = positive
    if len(positive) < count:  # not enough Pareto candidates: the rest may be PPO-0 points
        candidates = np.concatenate([positive, order[len(union) :]])
    D = _distances(pool[candidates], Z) / scale  # (K, u)
    cover = np.ones(len(union))
    if len(X_selected) and len(union):
        cover = np.minimum(1.0, _distances(X_selected, Z).min(axis=0) / scale)
    quality = np.log(np.maximum(ppo[candidates], 1.0 / (2 * S)))
    available = np.ones(len(candidates), dtype=bool)
    is_positive = np.arange(len(candidates)) < len(positive)
    chosen: list[int] = []
    for _ in range(min(count, len(candidates))):
        gain = np.maximum(cover[None, :] - D, 0.0) @ weight
        score = quality + lam * np.log(_GAIN_EPS + gain)
        tier = available & is_positive
        score[~(tier if tier.any() else available)] = -np.inf
        best = int(np.argmax(score))
        chosen.append(int(candidates[best]))
        available[best] = False
        cover = np.minimum(cover, D[best])
    return chosen


def batch_score(pool: np.ndarray, P: np.ndarray, chosen: list[int], lam: float) -> JSON:
    """The POM summary of the batch ``pool[chosen]``: ``log_score = log_p_po + lam log_p_cov``
    (module docstring) and ``expected_emd``, the batch's EMD averaged over the sample Pareto
    sets (``None`` when they are all empty).

    ``pool: (N, d)``, ``P: (S, N)``, ``chosen``: distinct pool rows.
    """
    S = P.shape[0]
    d = pool.shape[1]
    floor = 1.0 / (2 * S)
    q = len(chosen)
    if q == 0:
        return {"log_score": None, "log_p_po": None, "log_p_cov": None, "expected_emd": None}
    p_po = float(np.all(P[:, chosen], axis=1).mean())
    union = np.flatnonzero(P.any(axis=0))
    X = pool[chosen]
    D = _distances(pool[union], X)  # (u, q)
    cell = np.argmin(D, axis=1)
    shares = P[:, union] / np.maximum(P.sum(axis=1, keepdims=True), 1)  # (S, u)
    masses = shares @ np.eye(q)[cell]  # (S, q)
    p_cov = float(np.prod(q * masses, axis=1).mean())
    weight = _pareto_weights(P)[union]
    emd = None
    if weight.sum() > 0:
        emd = float(weight @ D.min(axis=1) / weight.sum() / (math.sqrt(d) if d else 1.0))
    log_p_po, log_p_cov = math.log(max(p_po, floor)), math.log(max(p_cov, floor))
    return {
        "log_score": log_p_po + lam * log_p_cov,
        "log_p_po": log_p_po,
        "log_p_cov": log_p_cov,
        "expected_emd": emd,
    }


def _pareto_weights(P: np.ndarray) -> np.ndarray:
    """``(N,)``: ``w(z) = (1/S) sum_s 1[z in P^(s)] / |P^(s)|``, the Pareto mass of each point."""
    sizes = np.maximum(P.sum(axis=1, keepdims=True), 1)
    return (P / sizes).mean(axis=0)


def _distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``(a, b)`` Euclidean distances between the rows of ``A: (a, d)`` and ``B: (b, d)``."""
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
    return np.sqrt(np.maximum(d2, 0.0))


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
