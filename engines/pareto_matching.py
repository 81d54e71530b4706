"""The set functions of the ``pom`` engine on sampled Pareto sets (``engines/pom.py``).

Given the values ``F: (S, N, m)`` (minimized) and violations ``V: (S, N)`` of ``N`` points
on ``S`` posterior sample paths:

- ``pareto_sample_masks``: ``P: (S, n_pool)``, whether pool point ``x`` is in the sample's
  Pareto set ``P^(s)`` (eligible, and dominated by no eligible point, observed ones included).
- ``non_dominated_per_sample``: the non-dominated rows of each sample, vectorized over samples.
- ``greedy_batch``: the greedy non-replacement batch, ``score(x) = log max(PPO(x), 1/(2S)) +
  lambda log(1e-6 + gain_A(x))``, ``gain_A`` the expected coverage gain over the ``P^(s)``.
- ``batch_score``: ``log POM``, ``log P_PO`` and ``log P_cov`` of a batch.

The equations and their reasons are in the ``pom`` module docstring and docs/engines/pom.md.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from engines.base import JSON

#: Added to the coverage gain inside its log, so a zero gain still ranks by PPO.
_GAIN_EPS = 1e-6
#: Witnesses per sample that prefilter the non-dominated test for three or more objectives.
_WITNESSES = 32
#: Elements of a ``(samples, n, n)`` pairwise-dominance block (~8 MB of booleans).
_PAIRWISE_BLOCK = 8_000_000


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
