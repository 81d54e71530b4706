"""A CMA-ES search distribution as the region of a local search (``turbo-enn``'s
``trust_region: "cma"``).

Method [Hansen2016tutorial]. The region is the Gaussian ``N(m, sigma^2 C)`` over the unit cube.
After each generation of ``lambda`` evaluated points ``x_1 .. x_lambda`` (ranked best first),
with ``y_i = (x_i - m) / sigma``, weights ``w_i`` (positive for the better half, which sum to
1, negative for the worse half: active CMA), ``mu_eff = (sum_+ w)^2 / sum_+ w^2``::

    y_w     = sum_{i <= mu} w_i y_i,          m <- m + sigma y_w
    p_sigma <- (1 - c_s) p_sigma + sqrt(c_s (2 - c_s) mu_eff) C^-1/2 y_w
    sigma   <- sigma exp(c_s / d_s (|p_sigma| / E|N(0, I)| - 1))
    p_c     <- (1 - c_c) p_c + h_sigma sqrt(c_c (2 - c_c) mu_eff) y_w
    C       <- (1 + c_1 delta(h_sigma) - c_1 - c_mu sum w) C + c_1 p_c p_c^T
               + c_mu sum_i w_i' y_i y_i^T

where ``w_i' = w_i`` for ``w_i >= 0`` and ``w_i d / |C^-1/2 y_i|^2`` otherwise, and the learning
rates ``c_s, d_s, c_c, c_1, c_mu`` are the tutorial's defaults for ``d`` and ``mu_eff``. A
region is exhausted by the tutorial's stopping rules: the best and worst values of the last
``10 + ceil(30 d / lambda)`` generations within 1e-12, every coordinate's and the path's step
under ``1e-12 sigma_0``, a coordinate that 0.2 standard deviations no longer move, or a
condition number of ``C`` over 1e14.

Our design: a generation is whatever the region's trials told since the last update hold once
there are at least ``lambda`` of them (asks come in batches of any size, and asynchronously),
with the weights computed for that size; points are drawn from the distribution and redrawn
(at most 10 times) while outside the unit cube, then clipped; the evaluated points, snapped to
the space, are the population, whether they were drawn from this distribution or an earlier
one (a pending trial told late), so each ``y_i`` is clipped to the Mahalanobis length
``2 (sqrt(d) + 2 d / (d + 2))``, twice the bound for injected solutions [Hansen2011injection]
(a draw of the current distribution practically never reaches it: the update is then CMA-ES's
exactly), and one update changes ``sigma`` by at most a factor ``e``; ``sigma`` stays at most 1
(the cube's side). The state is JSON: plain lists.

References:
    [Hansen2016tutorial] N. Hansen. The CMA evolution strategy: a tutorial. arXiv 1604.00772,
        2016.
    [Hansen2011injection] N. Hansen. Injecting external solutions into CMA-ES. INRIA research
        report RR-7748, 2011.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from engines.base import JSON

_RESAMPLES = 10
_TOL_FUN = 1e-12
_TOL_X = 1e-12
_MAX_CONDITION = 1e14


def population_size(d: int) -> int:
    """The default ``lambda``: ``4 + floor(3 ln d)``."""
    return 4 + int(3 * math.log(max(d, 1)))


def start(mean: np.ndarray, sigma: float, lam: int) -> JSON:
    """A new distribution ``N(mean, sigma^2 I)``, as JSON; ``lam``, the generation size the
    stopping rule counts generations of."""
    d = len(mean)
    return {
        "mean": [float(v) for v in mean],
        "sigma": float(sigma),
        "sigma0": float(sigma),
        "cov": np.eye(d).tolist(),
        "p_sigma": [0.0] * d,
        "p_c": [0.0] * d,
        "updates": 0,
        "recent": [],
        "recent_max": 2 * (10 + math.ceil(30 * d / lam)),
    }


def valid(cma: Any, d: int) -> bool:
    """Whether ``cma`` is a distribution of dimension ``d`` as ``start`` and ``update`` write it."""
    try:
        mean, cov = np.asarray(cma["mean"], float), np.asarray(cma["cov"], float)
        paths = np.asarray([cma["p_sigma"], cma["p_c"]], float)
        steps = [cma["sigma"], cma["sigma0"]]
        recent = np.asarray(cma["recent"], float)
        counters = [cma["updates"], cma["recent_max"]]
    except (KeyError, TypeError, ValueError):
        return False
    arrays = (mean, cov, paths, recent)
    return (
        mean.shape == (d,)
        and cov.shape == (d, d)
        and paths.shape == (2, d)
        and recent.ndim == 1
        and all(bool(np.all(np.isfinite(a))) for a in arrays)
        and all(type(v) is float and math.isfinite(v) and v > 0 for v in steps)
        and all(type(v) is int and v >= 0 for v in counters)
    )


def sample(cma: JSON, n: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, d)`` points of the distribution inside the unit cube: redrawn while outside, at
    most ``_RESAMPLES`` times, then clipped."""
    mean, sigma = np.asarray(cma["mean"]), float(cma["sigma"])
    B, D = _eigen(np.asarray(cma["cov"]))
    X = np.empty((n, len(mean)))
    todo = np.arange(n)
    for _ in range(_RESAMPLES):
        X[todo] = mean + sigma * (rng.standard_normal((len(todo), len(mean))) * D) @ B.T
        todo = todo[np.any((X[todo] < 0.0) | (X[todo] > 1.0), axis=1)]
        if len(todo) == 0:
            break
    return np.clip(X, 0.0, 1.0)


def update(cma: JSON, X: np.ndarray, values: np.ndarray) -> JSON:
    """The distribution after the generation ``X: (lambda, d)``, ranked best first, with its
    ``values: (lambda,)`` (only the best and worst are kept, for the stopping rule)."""
    lam, d = X.shape
    mean, sigma = np.asarray(cma["mean"]), float(cma["sigma"])
    C, p_sigma, p_c = np.asarray(cma["cov"]), np.asarray(cma["p_sigma"]), np.asarray(cma["p_c"])
    r = _rates(d, lam)
    w, mu = r["weights"], r["mu"]
    B, D = _eigen(C)
    C_inv_sqrt = (B / D) @ B.T
    Y = _clip_lengths((X - mean) / sigma, C_inv_sqrt)
    y_w = w[:mu] @ Y[:mu]
    mean = mean + sigma * y_w
    p_sigma = (1 - r["c_s"]) * p_sigma + math.sqrt(r["c_s"] * (2 - r["c_s"]) * r["mu_eff"]) * (
        C_inv_sqrt @ y_w
    )
    norm = float(np.linalg.norm(p_sigma))
    sigma = min(sigma * math.exp(min(1.0, r["c_s"] / r["d_s"] * (norm / r["chi_d"] - 1))), 1.0)
    generation = cma["updates"] + 1
    h_sigma = (
        norm / math.sqrt(1 - (1 - r["c_s"]) ** (2 * generation)) < (1.4 + 2 / (d + 1)) * r["chi_d"]
    )
    p_c = (1 - r["c_c"]) * p_c + h_sigma * math.sqrt(r["c_c"] * (2 - r["c_c"]) * r["mu_eff"]) * y_w
    whitened = np.sum((Y @ C_inv_sqrt) ** 2, axis=1)
    w_cov = np.where(w >= 0, w, w * d / np.maximum(whitened, 1e-300))
    delta = (1 - h_sigma) * r["c_c"] * (2 - r["c_c"])
    C = (
        (1 + r["c_1"] * delta - r["c_1"] - r["c_mu"] * w.sum()) * C
        + r["c_1"] * np.outer(p_c, p_c)
        + r["c_mu"] * (Y.T * w_cov) @ Y
    )
    C = (C + C.T) / 2
    recent = [*cma["recent"], float(values[0]), float(values[-1])][-cma["recent_max"] :]
    return {
        **cma,
        "mean": mean.tolist(),
        "sigma": sigma,
        "cov": C.tolist(),
        "p_sigma": p_sigma.tolist(),
        "p_c": p_c.tolist(),
        "updates": generation,
        "recent": recent,
    }


def exhausted(cma: JSON) -> bool:
    """Whether the distribution has converged or degenerated (module docstring)."""
    mean, sigma = np.asarray(cma["mean"]), float(cma["sigma"])
    C, p_c = np.asarray(cma["cov"]), np.asarray(cma["p_c"])
    steps = sigma * np.sqrt(np.maximum(np.diag(C), 0))  # each coordinate's deviation
    recent = cma["recent"]
    if len(recent) >= cma["recent_max"] and max(recent) - min(recent) < _TOL_FUN:
        return True
    tol_x = _TOL_X * float(cma["sigma0"])
    if np.all(steps < tol_x) and np.all(sigma * np.abs(p_c) < tol_x):
        return True
    if np.any(mean == mean + 0.2 * steps):
        return True
    _, D = _eigen(C)
    return bool((D.max() / D.min()) ** 2 > _MAX_CONDITION)


def _clip_lengths(Y: np.ndarray, C_inv_sqrt: np.ndarray) -> np.ndarray:
    """``Y: (n, d)`` with each row's Mahalanobis length ``|C^-1/2 y|`` at most
    ``2 (sqrt(d) + 2 d / (d + 2))``."""
    d = Y.shape[1]
    lengths = np.linalg.norm(Y @ C_inv_sqrt, axis=1)
    cap = 2 * (math.sqrt(d) + 2 * d / (d + 2))
    return Y * np.minimum(1.0, cap / np.maximum(lengths, 1e-300))[:, None]


def _eigen(C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``C = B diag(D^2) B^T``: the eigenvectors ``B`` and the square roots ``D`` of the
    eigenvalues (floored at 1e-300, so a degenerate ``C`` still samples). ``update`` keeps
    ``C`` symmetric (``eigh`` reads one triangle)."""
    eigenvalues, B = np.linalg.eigh(C)
    return B, np.sqrt(np.maximum(eigenvalues, 1e-300))


def _rates(d: int, lam: int) -> dict[str, Any]:
    """The tutorial's default weights and learning rates for dimension ``d`` and ``lam``
    points in a generation."""
    mu = lam // 2
    raw = np.log((lam + 1) / 2) - np.log(np.arange(1, lam + 1))
    mu_eff = raw[:mu].sum() ** 2 / (raw[:mu] ** 2).sum()
    mu_eff_minus = raw[mu:].sum() ** 2 / max((raw[mu:] ** 2).sum(), 1e-300)
    c_1 = 2 / ((d + 1.3) ** 2 + mu_eff)
    c_mu = min(1 - c_1 - 1e-8, 2 * (mu_eff - 2 + 1 / mu_eff) / ((d + 2) ** 2 + mu_eff))
    alpha = min(1 + c_1 / c_mu, 1 + 2 * mu_eff_minus / (mu_eff + 2), (1 - c_1 - c_mu) / (d * c_mu))
    positive, negative = raw[raw > 0].sum(), -raw[raw < 0].sum()
    weights = np.where(raw >= 0, raw / positive, alpha * raw / max(negative, 1e-300))
    c_s = (mu_eff + 2) / (d + mu_eff + 5)
    return {
        "weights": weights,
        "mu": mu,
        "mu_eff": mu_eff,
        "c_s": c_s,
        "d_s": 1 + 2 * max(0.0, math.sqrt((mu_eff - 1) / (d + 1)) - 1) + c_s,
        "c_c": (4 + mu_eff / d) / (d + 4 + 2 * mu_eff / d),
        "c_1": c_1,
        "c_mu": c_mu,
        "chi_d": math.sqrt(d) * (1 - 1 / (4 * d) + 1 / (21 * d**2)),
    }
