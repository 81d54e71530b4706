"""Quality metrics for minimization: Pareto masks and hypervolume.

All functions take objective vectors as minimization (``Y: (n, m)``), the orientation of
``History.Y``.

- ``non_dominated(Y)``: ``y_i`` is dominated when some ``y_j <= y_i`` in every objective and
  ``<`` in one. Duplicated non-dominated vectors are all kept.
- ``hypervolume(Y, ref)``: the Lebesgue measure of ``{z : exists i, y_i <= z <= ref}``. Exact: a
  sweep for ``m = 2`` and hypervolume by slicing objectives [While2006hso] above, which is
  exponential in ``m`` in the worst case and meant for the fronts of a study (``m <= 4``, a few
  hundred points).

References:
    [While2006hso] L. While, P. Hingston, L. Barone, S. Huband. A faster algorithm for
        calculating hypervolume. IEEE Transactions on Evolutionary Computation 10(1), 2006.
"""

from __future__ import annotations

import numpy as np


def non_dominated(Y: np.ndarray) -> np.ndarray:
    """``(n,)`` bool mask of the non-dominated rows of ``Y: (n, m)``."""
    Y = np.asarray(Y, dtype=np.float64)
    n = Y.shape[0]
    mask = np.ones(n, dtype=bool)
    for i in range(n):
        if not mask[i]:
            continue
        le = np.all(Y[i] >= Y, axis=1)
        lt = np.any(Y[i] > Y, axis=1)
        if np.any(le & lt):
            mask[i] = False
    return mask


def hypervolume(Y: np.ndarray, ref: np.ndarray) -> float:
    """Hypervolume dominated by ``Y: (n, m)`` and bounded by ``ref: (m,)`` (minimization)."""
    Y = np.asarray(Y, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if Y.size == 0:
        return 0.0
    Y = Y[np.all(ref > Y, axis=1)]
    if len(Y) == 0:
        return 0.0
    Y = np.unique(Y[non_dominated(Y)], axis=0)
    return _hv(Y, ref)


def _hv(Y: np.ndarray, ref: np.ndarray) -> float:
    m = Y.shape[1]
    if m == 1:
        return float(ref[0] - Y[:, 0].min())
    if m == 2:
        order = np.argsort(Y[:, 0])
        volume, best_y1 = 0.0, ref[1]
        for y0, y1 in Y[order]:
            if y1 < best_y1:
                volume += (ref[0] - y0) * (best_y1 - y1)
                best_y1 = y1
        return float(volume)
    # Slice along the last objective: between consecutive levels the cross-section is the
    # (m-1)-dimensional hypervolume of the points at or below that level.
    order = np.argsort(Y[:, -1])
    Y = Y[order]
    levels = np.append(Y[:, -1], ref[-1])
    volume = 0.0
    for i in range(len(Y)):
        depth = levels[i + 1] - levels[i]
        if depth <= 0:
            continue
        front = Y[: i + 1, :-1]
        front = front[non_dominated(front)]
        volume += depth * _hv(front, ref[:-1])
    return float(volume)
