"""Parameter importance by functional ANOVA (fANOVA) of a random forest [Hutter2014fanova],
the method Optuna uses by default (``optuna.importance.FanovaImportanceEvaluator``).

A random forest of regression trees is fitted to the objective over the points ``X: (n, d)`` in
the unit cube (``engines.space``'s encoding: log parameters in log space, a categorical's
choices ordinal, each owning an equal cell). Each tree is a piecewise-constant function ``f``
over axis-aligned boxes; under the uniform measure on ``[0, 1]^d`` its variance splits into
the variances of its main effects and interactions. The importance of parameter ``j`` is the
variance of the marginal ``f_j(u) = E[f(x) | x_j = u]`` divided by the variance of ``f``,
averaged over the trees, then scaled so that the importances sum to 1 (as Optuna reports
them). A parameter that the objective ignores gets (close to) 0.

Only main effects are computed: one pass over each tree's leaves per parameter, so that a few
thousand trials take well under a second.

References:
    [Hutter2014fanova] F. Hutter, H. Hoos, K. Leyton-Brown. An efficient approach for assessing
        hyperparameter importance. ICML 2014.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sklearn.tree import BaseDecisionTree

#: The forest Optuna's fANOVA evaluator fits (``n_trees=64, max_depth=64``).
N_TREES = 64
MAX_DEPTH = 64
#: The range of max |y| in which the variances neither overflow nor underflow; outside it, y
#: is divided by max |y|.
SAFE_SCALE = (1e-100, 1e100)


def fanova_importances(X: np.ndarray, y: np.ndarray, seed: int = 0) -> np.ndarray:
    """``(d,)`` importances of the columns of ``X: (n, d)`` (unit cube) for ``y: (n,)``,
    non-negative and summing to 1; all zero when ``y`` is constant. The forest's seed is
    ``seed``: the same data give the same importances.

    Raises:
        ValueError: fewer than two rows, or ``X`` and ``y`` of different lengths.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or len(X) != len(y) or len(X) < 2:
        raise ValueError(f"X {X.shape} and y {y.shape}: expected (n, d) and (n,) with n >= 2")
    d = X.shape[1]
    if d == 0 or np.ptp(y) == 0:
        return np.zeros(d)
    # The importances are ratios of variances, the same for any scale of y; values near 1e300
    # would overflow those variances to inf (the importances to NaN), near 1e-300 underflow them
    # to 0. Other scales are left alone: a rescaled y moves the forest's splits, and the
    # importances would no longer equal Optuna's.
    largest = np.abs(y).max()
    if not SAFE_SCALE[0] <= largest <= SAFE_SCALE[1]:
        y = y / largest
    # Imported here: scikit-learn takes most of a server worker's start-up time otherwise.
    from sklearn.ensemble import RandomForestRegressor

    forest = RandomForestRegressor(
        n_estimators=N_TREES, max_depth=MAX_DEPTH, random_state=seed, n_jobs=1
    ).fit(X, y)
    shares = np.array([_tree_shares(tree, d) for tree in forest.estimators_])
    total = shares.mean(axis=0)
    return total / total.sum() if total.sum() > 0 else total


def _tree_shares(tree: BaseDecisionTree, d: int) -> np.ndarray:
    """``(d,)``: the variance of each main effect of one tree over its total variance."""
    lo, hi, value = _leaf_boxes(tree, d)
    width = hi - lo
    volume = width.prod(axis=1)
    mean = float(volume @ value)
    variance = float(volume @ (value - mean) ** 2)
    if variance <= 0:
        return np.zeros(d)
    shares = np.zeros(d)
    for j in range(d):
        # The marginal over x_j is constant between consecutive split points of x_j; each leaf
        # adds value * (volume of its box outside x_j) on the cells its x_j range covers.
        edges = np.unique(np.r_[lo[:, j], hi[:, j]])
        cells = np.diff(edges)
        first = np.searchsorted(edges, lo[:, j])
        last = np.searchsorted(edges, hi[:, j])
        added = np.zeros(len(edges))
        np.add.at(added, first, value * volume / width[:, j])
        np.add.at(added, last, -value * volume / width[:, j])
        marginal = np.cumsum(added)[:-1]
        shares[j] = float(cells @ (marginal - mean) ** 2) / variance
    return shares


def _leaf_boxes(tree: BaseDecisionTree, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The leaves of a fitted tree as boxes of the unit cube: ``lo, hi: (leaves, d)`` and
    each leaf's prediction ``(leaves,)``. Built level by level from the root."""
    t = tree.tree_
    lo = np.zeros((t.node_count, d))
    hi = np.ones((t.node_count, d))
    nodes = np.array([0])
    while len(nodes):
        nodes = nodes[t.children_left[nodes] >= 0]
        left, right = t.children_left[nodes], t.children_right[nodes]
        feature, threshold = t.feature[nodes], np.clip(t.threshold[nodes], 0.0, 1.0)
        for child in (left, right):
            lo[child], hi[child] = lo[nodes], hi[nodes]
        hi[left, feature] = np.minimum(hi[left, feature], threshold)
        lo[right, feature] = np.maximum(lo[right, feature], threshold)
        nodes = np.r_[left, right]
    leaves = np.flatnonzero(t.children_left < 0)
    keep = leaves[np.all(hi[leaves] > lo[leaves], axis=1)]
    return lo[keep], hi[keep], t.value[keep, 0, 0]
