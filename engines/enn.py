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
the backend or the thread count. Our design: faiss's flat L2 index, in float32, proposes a
shortlist of ``k + 16`` neighbours per query; their distances are recomputed directly in
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

EPS = 1e-9
#: Extra shortlist entries per query beyond ``k``: slack for the exactness check.
_SHORTLIST_EXTRA = 16
#: Floats per block of gathered differences in the exact ranking.
_BLOCK_ELEMENTS = 1 << 19


@dataclass(frozen=True)
class ENNParams:
    """The fitted scales: ``b`` epistemic, ``a`` aleatoric (standardized units)."""

    b: float = 1.0
    a: float = 0.0


def nearest(
    Q: np.ndarray, X: np.ndarray, k: int, exclude_equal: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest rows of ``X`` to each row of ``Q``, exactly, in float64.

    Args:
        Q: ``(M, d)`` queries.
        X: ``(N, d)`` observations.
        k: neighbours per query; at most ``N``.
        exclude_equal: skip observations equal to the query (leave-one-out).

    Returns:
        ``(idx, d2)``, both ``(M, k)``: indices into ``X`` and squared distances, sorted by
        (distance, index). With ``exclude_equal``, a query with fewer than ``k`` other points
        gets index ``-1`` and distance ``inf`` in the missing places.
    """
    M, N = len(Q), len(X)
    if k == 0 or M == 0:
        return np.zeros((M, k), dtype=np.int64), np.zeros((M, k))
    width = min(N, k + _SHORTLIST_EXTRA)
    approx_idx, approx_d2, slack = _shortlist(Q, X, width)
    idx, d2 = _rank_exactly(Q, X, approx_idx, exclude_equal)
    if width == N:  # the shortlist holds every observation: nothing can be missing
        return _first(idx, d2, k)
    # Every point outside the shortlist is at least this far, exactly.
    floor = approx_d2[:, -1] - slack
    kth = d2[:, k - 1]
    unsure = np.flatnonzero(~(kth < floor))
    if len(unsure):
        full = np.broadcast_to(np.arange(N), (len(unsure), N))
        idx_u, d2_u = _rank_exactly(Q[unsure], X, full, exclude_equal)
        idx_k, d2_k = _first(idx_u, d2_u, k)
        idx, d2 = _first(idx, d2, k)
        idx[unsure], d2[unsure] = idx_k, d2_k
        return idx, d2
    return _first(idx, d2, k)


def _first(idx: np.ndarray, d2: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.ascontiguousarray(idx[:, :k]), np.ascontiguousarray(d2[:, :k])


def _shortlist(Q: np.ndarray, X: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, float]:
    """faiss's flat L2 search in float32: the ``width`` nearest by approximate distance, and
    a bound on the error of those distances."""
    d = X.shape[1]
    index = faiss.IndexFlatL2(d)
    index.add(np.ascontiguousarray(X, dtype=np.float32))
    d2, idx = index.search(np.ascontiguousarray(Q, dtype=np.float32), width)
    # float32 distances through ||q||^2 + ||x||^2 - 2 q.x: each of the d products and the
    # norms carries a relative error of about 2^-24, and the inputs were rounded too.
    scale = float(np.max(np.sum(Q * Q, axis=1))) + float(np.max(np.sum(X * X, axis=1)))
    slack = 8.0 * (d + 4) * 2.0**-24 * (scale + 1.0)
    return idx.astype(np.int64), d2.astype(np.float64), slack


def _rank_exactly(
    Q: np.ndarray, X: np.ndarray, idx: np.ndarray, exclude_equal: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Direct float64 distances of each query to its listed points, sorted by (distance,
    index); with ``exclude_equal``, zero distances become ``inf`` and their index ``-1``."""
    d2 = np.empty(idx.shape)
    rows = max(1, _BLOCK_ELEMENTS // max(1, idx.shape[1] * X.shape[1]))
    for start in range(0, len(Q), rows):
        block = slice(start, start + rows)
        diff = X[idx[block]] - Q[block, None, :]
        d2[block] = np.einsum("mkd,mkd->mk", diff, diff)
    idx = idx.copy()
    if exclude_equal:
        equal = d2 == 0.0
        d2[equal], idx[equal] = np.inf, -1
    # lexsort keys: last is primary. -1 placeholders sit at inf, after every real point.
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
        idx, d2 = nearest(Q, self.X, min(self.k, self.n))
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
        idx, d2 = nearest(self.X[rows], self.X, min(self.k, self.n - 1), exclude_equal=True)
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
