"""Epistemic Nearest Neighbors (ENN): a surrogate whose fit and query cost O(N).

Method [Sweet2025enn]. Given observations ``(x_i, y_i)`` with ``x`` in the unit cube, optional
per-observation noise variances ``v_i``, and a query ``x``, take its ``K = min(k, N)`` nearest
observations by squared Euclidean distance ``d_i^2 = ||x - x_i||^2``. Each neighbour is an
independent estimate of ``f(x)`` whose variance, in units of ``sigma_y^2`` (the population
variance of the observed ``y``), grows with distance::

    s_i^2  = a + b d_i^2 + v_i / sigma_y^2          (b: epistemic, a: aleatoric scale)
    w_i    = 1 / (eps + s_i^2),                      eps = 1e-9
    mu(x)  = sum_i w_i y_i / sum_i w_i               (raw units of y)
    var(x) = 1 / sum_i w_i                            (epistemic)
           [ + a + sum_i w_i v_i / sigma_y^2 / sum_i w_i    with observation noise ]
    sigma(x) = sqrt(max(var(x), eps)) * sigma_y

Several outputs share the neighbours and weights; each has its own ``sigma_y``. With no data,
``mu = 0`` and ``sigma = 1``. With ``a = 0``, ``b`` rescales ``sigma`` and leaves ``mu``
unchanged, so a selection that only ranks ``(mu, sigma)`` pairs needs no fit.

Fit (``fit``): ``(a, b)`` by random search, scored by the Gaussian log-likelihood of
leave-one-out predictions (with observation noise) on a random subset of ``P`` observations::

    LL(a, b) = -1/2 sum_p [ log(2 pi se_p^2 / sigma_y^2) + (y_p - mu_p)^2 / se_p^2 ]

over ``C`` candidates ``log10 b ~ U[-3, 3]``, ``log10 a ~ U[-3, 3]`` plus the previous fit (a
warm start); one neighbour search serves every candidate, so the fit costs ``O(P N d)``.

Neighbours are exact in float64, ties broken by the lower index, so a result never depends on
the backend or the thread count. Our design: a float32 search (faiss's flat L2 index, or a
matrix product with ``torch.topk`` in low dimension) proposes a shortlist of ``k + 16``
neighbours per query; their distances are recomputed directly in
float64 and ranked by (distance, index); a row is accepted only when its ``k``-th exact
distance is below the shortlist's last approximate distance minus a bound on the
approximation error, so no point outside the shortlist can belong to it. Rows that fail the
check (near-ties at the boundary, many duplicates) are searched exhaustively. Leave-one-out
drops every observation at distance zero from the held-out one, not only the first, so
duplicates cannot leak their own value.

References:
    [Sweet2025enn] D. Sweet, S. A. Jadhav. Taking the GP out of the loop. arXiv 2506.12818,
        2025.
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np
import torch

EPS = 1e-9
#: Extra shortlist entries per query beyond ``k``: slack for the exactness check.
_SHORTLIST_EXTRA = 16
#: Up to this dimension the shortlist comes from torch, above it from faiss.
_TORCH_MAX_D = 40
#: Queries per block of the torch shortlist: 32 at N = 50,000, more with fewer points, up to
#: 512 (a block's distances at most 2^20 floats beyond 32 queries). At d = 20 and 500
#: queries: 2.9 -> 1.6 ms at N = 500 and 4.8 -> 2.4 ms at N = 1,000; at N = 50,000 blocks of
#: 512 took twice as long.
_TORCH_BLOCK = 32
_TORCH_BLOCK_MAX = 512
#: faiss's blocking of its distance products: 1024 queries by 4096 points measured ~13 %
#: faster than its defaults (4096 by 1024) at N = 50,000, d = 100 on two cores. Process-wide
#: settings of speed only: results do not depend on them.
faiss.cvar.distance_compute_blas_query_bs = 1024
faiss.cvar.distance_compute_blas_database_bs = 4096
#: Floats per block of gathered differences in the exact ranking.
_BLOCK_ELEMENTS = 1 << 16


@dataclass(frozen=True)
class ENNParams:
    """The fitted scales: ``b`` epistemic, ``a`` aleatoric (standardized units)."""

    b: float = 1.0
    a: float = 0.0


class FlatIndex:
    """Exact k-nearest-neighbour search over the rows of ``X`` (see the module docstring).

    The float32 copy of ``X`` (a faiss index or a tensor) is made at the first search and
    reused by the later ones.
    """

    def __init__(self, X: np.ndarray):
        self.X = X
        self._faiss: faiss.IndexFlatL2 | None = None
        self._torch: tuple[torch.Tensor, torch.Tensor] | None = None
        self._norm_max: float | None = None

    def search(
        self, Q: np.ndarray, k: int, exclude_equal: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest rows of ``X`` to each row of ``Q``, exactly, in float64.

        Args:
            Q: ``(M, d)`` queries.
            k: neighbours per query; at most ``N``.
            exclude_equal: skip observations equal to the query (leave-one-out).

        Returns:
            ``(idx, d2)``, both ``(M, k)``: indices into ``X`` and squared distances, sorted by
            (distance, index). With ``exclude_equal``, a query with fewer than ``k`` other
            points gets index ``-1`` and distance ``inf`` in the missing places.
        """
        X = self.X
        M, N = len(Q), len(X)
        if k == 0 or M == 0:
            return np.zeros((M, k), dtype=np.int64), np.zeros((M, k))
        width = min(N, k + _SHORTLIST_EXTRA)
        approx_idx, approx_d2, slack = self._shortlist(Q, width)
        # Only entries within twice the error of the k-th approximate distance can be among
        # the k nearest; the others keep an infinite distance and never rank before them.
        # (Not for leave-one-out: the excluded copies shift which entry is the k-th.)
        within = None if exclude_equal else approx_d2 <= approx_d2[:, k - 1 : k] + 2.0 * slack
        idx, d2 = _rank_exactly(Q, X, approx_idx, exclude_equal, within)
        if width == N:  # the shortlist holds every observation: nothing can be missing
            return _first(idx, d2, k)
        # Every point outside the shortlist is at least this far, exactly.
        floor = approx_d2[:, -1] - slack
        kth = d2[:, k - 1]
        unsure = np.flatnonzero(~(kth < floor))
        idx, d2 = _first(idx, d2, k)
        if len(unsure):
            full = np.broadcast_to(np.arange(N), (len(unsure), N))
            idx_u, d2_u = _rank_exactly(Q[unsure], X, full, exclude_equal, None)
            idx[unsure], d2[unsure] = _first(idx_u, d2_u, k)
        return idx, d2

    def _shortlist(self, Q: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, float]:
        """The ``width`` nearest by a float32 distance, and a bound on its error.

        faiss's flat index for ``d > 40``; below, a matrix product and ``torch.topk`` on blocks
        of queries (32 at N = 50,000), about twice as fast there on two cores.
        """
        d = self.X.shape[1]
        if self._norm_max is None:
            self._norm_max = float(np.max(np.einsum("nd,nd->n", self.X, self.X)))
        q_norm = np.einsum("md,md->m", Q, Q)
        # float32 distances through ||q||^2 + ||x||^2 - 2 q.x: each of the d products and the
        # norms carries a relative error of about 2^-24, and the inputs were rounded too.
        slack = 8.0 * (d + 4) * 2.0**-24 * (float(q_norm.max()) + self._norm_max + 1.0)
        Q32 = np.ascontiguousarray(Q, dtype=np.float32)
        if d > _TORCH_MAX_D:
            if self._faiss is None:
                self._faiss = faiss.IndexFlatL2(d)
                self._faiss.add(np.ascontiguousarray(self.X, dtype=np.float32))
            found_d2, found = self._faiss.search(Q32, width)
            return found.astype(np.int64), found_d2.astype(np.float64), slack
        if self._torch is None:
            X32 = torch.from_numpy(np.ascontiguousarray(self.X, dtype=np.float32))
            self._torch = (X32.T.contiguous(), (X32 * X32).sum(dim=1))
        XT, x_norm = self._torch
        queries = torch.from_numpy(Q32)
        idx = np.empty((len(Q), width), dtype=np.int64)
        d2 = np.empty((len(Q), width))
        size = max(_TORCH_BLOCK, min(_TORCH_BLOCK_MAX, (1 << 20) // max(len(self.X), 1)))
        for start in range(0, len(Q), size):
            block = slice(start, start + size)
            partial = torch.addmm(x_norm, queries[block], XT, alpha=-2.0)  # d2 - ||q||^2
            nearest = torch.topk(partial, width, dim=1, largest=False, sorted=True)
            idx[block] = nearest.indices.numpy()
            d2[block] = nearest.values.numpy() + q_norm[block, None]
        return idx, d2, slack


def _first(idx: np.ndarray, d2: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.ascontiguousarray(idx[:, :k]), np.ascontiguousarray(d2[:, :k])


def _rank_exactly(
    Q: np.ndarray, X: np.ndarray, idx: np.ndarray, exclude_equal: bool, within: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Direct float64 distances of each query to its listed points (only where ``within``, the
    rest ``inf``, and only as many columns as the longest such row), sorted by (distance,
    index); with ``exclude_equal``, zero distances become ``inf`` and their index ``-1``."""
    # ``within`` is a prefix of each row (the shortlist is sorted): keep the columns up to the
    # longest prefix, and blank what lies beyond each row's own.
    width = idx.shape[1] if within is None else int(within.sum(axis=1).max())
    idx = idx[:, :width].copy()
    d2 = np.empty(idx.shape)
    rows = max(1, _BLOCK_ELEMENTS // max(1, width * X.shape[1]))
    for start in range(0, len(Q), rows):
        block = slice(start, start + rows)
        diff = X[idx[block]] - Q[block, None, :]
        d2[block] = np.einsum("mkd,mkd->mk", diff, diff)
    if within is not None:
        d2[~within[:, :width]] = np.inf
    if exclude_equal:
        equal = d2 == 0.0
        d2[equal], idx[equal] = np.inf, -1
    # lexsort keys: last is primary. Absent neighbours (index -1) sit at inf, after real ones.
    order = np.lexsort((np.where(idx < 0, np.iinfo(np.int64).max, idx), d2), axis=1)
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(d2, order, axis=1)


class ENN:
    """The ENN surrogate on observations ``X: (N, d)``, ``Y: (N, m)``, optional ``Yvar``.

    ``posterior`` and ``fit`` search neighbours from scratch each call; an index is cheap to
    build next to a search (one pass over ``X``).
    """

    def __init__(
        self,
        X: np.ndarray,
        Y: np.ndarray,
        k: int = 10,
        Yvar: np.ndarray | None = None,
        sigma_y: np.ndarray | None = None,
    ):
        """``sigma_y`` overrides the outputs' scales, for a model on a subset of the data."""
        if Y.ndim != 2 or len(Y) != len(X):
            raise ValueError(f"Y has shape {Y.shape}, expected ({len(X)}, m)")
        if Yvar is not None and Yvar.shape != Y.shape:
            raise ValueError(f"Yvar has shape {Yvar.shape}, expected {Y.shape}")
        self.X = np.asarray(X, dtype=np.float64)
        self.Y = np.asarray(Y, dtype=np.float64)
        self.Yvar = Yvar
        self.k = k
        if sigma_y is None:
            std = self.Y.std(axis=0) if len(Y) else np.ones(Y.shape[1])
            # A constant output has no scale of its own: sigma stays in standardized units.
            sigma_y = np.where(std > 0, std, 1.0)
        self.sigma_y = sigma_y
        self.index = FlatIndex(self.X)

    @property
    def n(self) -> int:
        return len(self.X)

    def posterior(
        self, Q: np.ndarray, params: ENNParams, observation_noise: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(mu, sigma)``, each ``(M, m)`` in the units of ``Y``, at the queries ``Q``."""
        M, m = len(Q), self.Y.shape[1]
        if self.n == 0:
            return np.zeros((M, m)), np.ones((M, m))
        idx, d2 = self.index.search(Q, min(self.k, self.n))
        return self._combine(idx, d2, params, observation_noise)

    def _combine(
        self,
        idx: np.ndarray,
        d2: np.ndarray,
        params: ENNParams,
        observation_noise: bool,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Posterior from neighbour lists; ``idx == -1`` marks an absent neighbour."""
        present = idx >= 0
        safe = np.where(present, idx, 0)
        s2 = params.a + params.b * np.where(present, d2, 0.0)  # (M, K)
        s2 = s2[:, :, None] + self._noise(safe)  # (M, K, m)
        w = np.where(present[:, :, None], 1.0 / (EPS + s2), 0.0)
        w_sum = w.sum(axis=1)  # (M, m)
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = np.einsum("mkj,mkj->mj", w, self.Y[safe]) / w_sum
            var = 1.0 / w_sum
            if observation_noise:
                var = var + params.a + (w * self._noise(safe)).sum(axis=1) / w_sum
        none = w_sum == 0  # every neighbour absent: the prior
        mu = np.where(none, 0.0, mu)
        var = np.where(none, 1.0, var)
        sigma = np.sqrt(np.maximum(var, EPS)) * self.sigma_y
        return mu, sigma

    def _noise(self, idx: np.ndarray) -> np.ndarray | float:
        if self.Yvar is None:
            return 0.0
        return self.Yvar[idx] / self.sigma_y**2

    def fit(
        self,
        rng: np.random.Generator,
        n_candidates: int = 30,
        n_samples: int = 100,
        warm_start: ENNParams | None = None,
    ) -> ENNParams:
        """``(a, b)`` maximizing the leave-one-out likelihood; see the module docstring."""
        if self.n < 2:
            return ENNParams()
        rows = (
            np.arange(self.n)
            if self.n <= n_samples
            else np.sort(rng.choice(self.n, n_samples, replace=False))
        )
        idx, d2 = self.index.search(self.X[rows], min(self.k, self.n - 1), exclude_equal=True)
        log_b = rng.uniform(-3.0, 3.0, n_candidates)
        log_a = rng.uniform(-3.0, 3.0, n_candidates)
        candidates = [
            ENNParams(b=10.0**lb, a=10.0**la) for lb, la in zip(log_b, log_a, strict=True)
        ]
        if warm_start is not None:
            candidates.append(warm_start)
        y = self.Y[rows]
        best, best_ll = ENNParams(), -np.inf
        for params in candidates:
            mu, se = self._combine(idx, d2, params, observation_noise=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                ll = -0.5 * np.sum(
                    np.log(2.0 * np.pi * (se / self.sigma_y) ** 2) + ((y - mu) / se) ** 2
                )
            if np.isfinite(ll) and ll > best_ll:
                best, best_ll = params, float(ll)
        return best


def prefilter(enn: ENN, centre: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> ENN:
    """ENN on the observations that can be a neighbour of a point of the box
    ``[lower, upper]`` around ``centre`` (turbo-enn's box region: ``engines.turbo_enn``); the
    same predictions at a fraction of the search cost late in a region."""
    rho = float(np.sqrt(np.sum(np.maximum(centre - lower, upper - centre) ** 2)))
    farthest = float(np.sqrt(np.sum(np.maximum(lower, 1.0 - upper) ** 2)))
    if rho >= farthest:
        return enn  # every point of the unit cube is within reach: nothing to drop
    _, d2_centre = enn.index.search(centre[None, :], min(enn.k, enn.n))
    reach = rho + float(np.sqrt(d2_centre[0, -1]))
    outside = np.maximum(lower - enn.X, 0.0) + np.maximum(enn.X - upper, 0.0)
    to_box = np.sqrt(np.einsum("nd,nd->n", outside, outside))
    keep = np.flatnonzero(to_box <= reach * (1 + 1e-9) + 1e-12)
    if len(keep) > 0.8 * enn.n:
        return enn
    return ENN(enn.X[keep], enn.Y[keep], k=enn.k, sigma_y=enn.sigma_y)


# --- selections on a posterior (turbo-enn) -----------------------------------------------------


def lowest(score: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of the ``count`` lowest scores, best first, ties broken at random."""
    perm = rng.permutation(len(score))
    top = perm[np.argpartition(score[perm], count - 1)[:count]]
    return top[np.argsort(score[top], kind="stable")]


def pareto_select(
    mu: np.ndarray, sigma: np.ndarray, count: int, rng: np.random.Generator
) -> np.ndarray:
    """``count`` indices by non-dominated sorting of (low ``mu``, high ``sigma``): whole fronts
    in rank order, the last front sampled without replacement; returned by ``mu``."""
    remaining = np.arange(len(mu))
    chosen: list[int] = []
    while len(chosen) < count:
        front = remaining[first_front(mu[remaining], sigma[remaining])]
        room = count - len(chosen)
        if len(front) > room:
            front = rng.choice(front, room, replace=False)
        chosen.extend(front.tolist())
        remaining = np.setdiff1d(remaining, front, assume_unique=True)
    picked = np.array(chosen, dtype=np.int64)
    return picked[np.argsort(mu[picked], kind="stable")]


def first_front(mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats in both low ``mu`` and high ``sigma``."""
    order = np.lexsort((-sigma, mu))
    best_before = np.maximum.accumulate(np.concatenate([[-np.inf], sigma[order][:-1]]))
    return np.sort(order[sigma[order] > best_before])
