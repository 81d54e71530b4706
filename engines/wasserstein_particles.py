"""Multiple Wasserstein gradient descent on particles: MWGraD and its accelerated form A-MWGraD.

A library on any differentiable log-densities (float64 numpy); the ``mwgd`` study engine and the
sampler resource build on it.

Problem [Nguyen2025]. Minimize ``(F_1(rho), ..., F_K(rho))`` over distributions, with
``F_k(rho) = KL(rho || pi_k)`` and ``pi_k ∝ exp(-f_k)`` (multi-target sampling). The Wasserstein
gradient of ``F_k`` at a particle ``x`` is ``Delta_k(x) = grad f_k(x) + grad log rho(x)``; with
particles ``x_1..x_m`` it is estimated with an RBF kernel ``K(x, y) = exp(-|x - y|^2 / (2 h^2))``:

- SVGD: ``Delta_k(x_i) = (1/m) sum_j [K(x_i, x_j) grad f_k(x_j) - grad_{x_j} K(x_i, x_j)]``
  (``-Delta_k`` is the SVGD field).
- Blob [Carrillo2019]: ``Delta_k(x_i) = grad f_k(x_i) + sum_j grad_{x_i} K(x_i, x_j) / rho(x_j)
  + sum_j grad_{x_i} K(x_i, x_j) / rho(x_i)``, ``rho(x) = sum_l K(x, x_l)``.

Bandwidth by the median heuristic, ``h^2 = median_{i<j} |x_i - x_j|^2 / (2 log(m + 1))``,
recomputed every step. Objective weights: the min-norm point of the convex hull of the
``Delta_k`` (MGDA), ``w = argmin_{w in simplex} w^T Q w``, ``Q_kl = (1/m) sum_i <Delta_k(x_i),
Delta_l(x_i)>``: closed form for ``K = 2``, Frank-Wolfe with exact line search beyond, then an
exact solve on the face it found (ours: Frank-Wolfe alone converges only as 1/t there).
Common direction ``D(x_i) = sum_k w_k Delta_k(x_i)``; ``GradNorm = (1/m) sum_i |D(x_i)|^2``.
Per-particle weights (ours, for the ``mwgd`` study engine, in the spirit of MOO-SVGD
[Liu2021]): each particle solves its own problem, ``Q^(i)_kl = <Delta_k(x_i), Delta_l(x_i)>``,
so particles at different places of a Pareto set take different compromises instead of all
following one global scalarization; solved exactly for all particles at once by trying every
face of the simplex (``K <= 6``).

- MWGraD [Nguyen2025]: ``x <- x - eta D``.
- A-MWGraD [Nguyen2026], Nesterov-style damped particle dynamics::

      x^{n+1} = x^n + sqrt(eta) v^n
      v^{n+1} = alpha_n v^n - sqrt(eta) D(x^n),      v^1 = 0
      alpha_n = (n - 1) / (n + 2)                                  (convex)
      alpha_n = (1 - sqrt(beta eta)) / (1 + sqrt(beta eta))        (beta-strongly convex)

  with adaptive restart (our choice, from accelerated information gradient flows [Wang2022]):
  when ``sum_i <v_i, -D(x_i)> < 0`` the velocity is reset to 0 and ``n`` to 1.

References:
    [Nguyen2025] H. Nguyen, H. Mamitsuka, A. Nakamura. Multiple Wasserstein Gradient Descent
        Algorithm for Multi-Objective Distributional Optimization. UAI 2025 (arXiv:2505.18765).
    [Nguyen2026] H. Nguyen et al. Accelerated Multiple Wasserstein Gradient Flows for
        Multi-objective Distributional Optimization. ICML 2026 (arXiv:2601.19220).
    [Carrillo2019] J. A. Carrillo, K. Craig, F. S. Patacchini. A blob method for diffusion.
        Calc. Var. PDE 58, 2019.
    [Wang2022] Y. Wang, W. Li. Accelerated information gradient flow. J. Sci. Comput. 90, 2022.
    [Liu2021] X. Liu, X. Tong, Q. Liu. Profiling Pareto front with multi-objective Stein
        variational gradient descent. NeurIPS 2021.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

Kernel = Literal["svgd", "blob"]
Schedule = Literal["convex", "strongly_convex"]
Weighting = Literal["shared", "per_particle"]

#: Frank-Wolfe iterations of the min-norm solver (K > 2) and its stopping gap.
FW_ITERATIONS = 250
FW_TOL = 1e-12
#: The per-particle solver tries every face of the simplex up to this many targets.
MAX_ENUMERATED_TARGETS = 6


def median_bandwidth(X: np.ndarray) -> float:
    """``h`` of the median heuristic for particles ``X: (m, d)``."""
    m = len(X)
    sq = _square_distances(X)[np.triu_indices(m, k=1)]
    med = float(np.median(sq)) if len(sq) else 1.0
    return math.sqrt(max(med, 1e-12) / (2.0 * math.log(m + 1.0)))


def _square_distances(X: np.ndarray) -> np.ndarray:
    diff = X[:, None, :] - X[None, :, :]
    return np.einsum("ijd,ijd->ij", diff, diff)


def rbf(X: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
    """``K: (m, m)`` and ``grad_{x_i} K(x_i, x_j): (m, m, d)``."""
    diff = X[:, None, :] - X[None, :, :]
    K = np.exp(-np.einsum("ijd,ijd->ij", diff, diff) / (2.0 * h * h))
    return K, -K[:, :, None] * diff / (h * h)


def svgd_gradient(X: np.ndarray, grad_f: np.ndarray, h: float) -> np.ndarray:
    """The SVGD estimate of ``Delta(x_i)`` for one target, ``grad_f: (m, d)``; ``(m, d)``."""
    m = len(X)
    K, grad_K = rbf(X, h)
    # grad_{x_j} K(x_i, x_j) = -grad_{x_i} K(x_i, x_j)
    return (K @ grad_f + grad_K.sum(axis=1)) / m


def blob_gradient(X: np.ndarray, grad_f: np.ndarray, h: float) -> np.ndarray:
    """The blob estimate of ``Delta(x_i)`` for one target, ``grad_f: (m, d)``; ``(m, d)``."""
    K, grad_K = rbf(X, h)
    density = K.sum(axis=1)
    return (
        grad_f
        + np.einsum("ijd,j->id", grad_K, 1.0 / density)
        + grad_K.sum(axis=1) / density[:, None]
    )


def wasserstein_gradients(
    X: np.ndarray, grad_f: np.ndarray, kernel: Kernel = "svgd", h: float | None = None
) -> np.ndarray:
    """``Delta_k(x_i)`` for every target: ``grad_f: (K, m, d)`` -> ``(K, m, d)``."""
    h = median_bandwidth(X) if h is None else h
    estimate = svgd_gradient if kernel == "svgd" else blob_gradient
    return np.stack([estimate(X, g, h) for g in grad_f])


def min_norm_weights(Q: np.ndarray, w0: np.ndarray | None = None) -> np.ndarray:
    """``argmin_{w in simplex} w^T Q w`` for a symmetric PSD ``Q: (K, K)``."""
    n = len(Q)
    if n == 1:
        return np.ones(1)
    if not np.all(np.isfinite(Q)):
        return np.full(n, np.nan)  # the caller's finiteness check decides
    if n == 2:
        denom = Q[0, 0] + Q[1, 1] - 2.0 * Q[0, 1]
        w1 = 0.5 if denom <= 1e-300 else min(max((Q[1, 1] - Q[0, 1]) / denom, 0.0), 1.0)
        return np.array([w1, 1.0 - w1])
    w = np.full(n, 1.0 / n) if w0 is None else np.asarray(w0, dtype=np.float64).copy()
    for _ in range(FW_ITERATIONS):
        Qw = Q @ w
        t = int(np.argmin(Qw))
        # Exact line search on (1 - g) w + g e_t.
        a, b, c = w @ Qw, Qw[t], Q[t, t]
        denom = a - 2.0 * b + c
        if a - b <= FW_TOL or denom <= 1e-300:
            break
        gamma = min(max((a - b) / denom, 0.0), 1.0)
        w = (1.0 - gamma) * w
        w[t] += gamma
    polished = _solve_on_support(Q, np.flatnonzero(w > 1e-10))
    return polished if polished is not None and polished @ Q @ polished <= w @ Q @ w else w


def min_norm_weights_per_particle(Delta: np.ndarray) -> np.ndarray:
    """Per-particle min-norm weights for ``Delta: (K, m, d)``: row ``i`` of the ``(m, K)``
    result minimizes ``|sum_k w_k Delta_k(x_i)|^2`` over the simplex.

    Exact: for ``K <= MAX_ENUMERATED_TARGETS`` every face of the simplex is tried at once for
    all particles (the KKT system of each support, batched), keeping the best feasible one;
    beyond, each particle runs ``min_norm_weights``.
    """
    n_targets, m = Delta.shape[:2]
    if n_targets == 1:
        return np.ones((m, 1))
    if not np.all(np.isfinite(Delta)):
        return np.full((m, n_targets), np.nan)  # the caller's finiteness check decides
    # The minimizer does not change with each particle's scale; at scale 1 nothing overflows
    # and the KKT systems below are well conditioned whatever the size of the gradients.
    scale = np.abs(Delta).max(axis=(0, 2))
    unit = Delta / np.where(scale > 0, scale, 1.0)[None, :, None]
    Q = np.einsum("kid,lid->ikl", unit, unit)  # (m, K, K)
    if n_targets > MAX_ENUMERATED_TARGETS:
        return np.stack([min_norm_weights(Q[i]) for i in range(m)])
    best_w = np.zeros((m, n_targets))
    best_value = np.full(m, np.inf)
    for size in range(1, n_targets + 1):
        for support in itertools.combinations(range(n_targets), size):
            idx = list(support)
            A = np.zeros((m, size + 1, size + 1))
            A[:, :size, :size] = 2.0 * Q[:, idx][:, :, idx]
            A[:, :size, size] = A[:, size, :size] = 1.0
            b = np.zeros(size + 1)
            b[size] = 1.0
            sol = np.einsum("mij,j->mi", np.linalg.pinv(A), b)[:, :size]
            w = np.zeros((m, n_targets))
            w[:, idx] = np.clip(sol, 0.0, None)
            total = w.sum(axis=1)
            feasible = np.all(sol >= -1e-12, axis=1) & (total > 0)
            w /= np.where(total > 0, total, 1.0)[:, None]
            value = np.einsum("mk,mkl,ml->m", w, Q, w)
            better = feasible & (value < best_value)
            best_w[better], best_value[better] = w[better], value[better]
    return best_w


def _solve_on_support(Q: np.ndarray, face: np.ndarray) -> np.ndarray | None:
    """The exact minimizer on the face of the simplex that Frank-Wolfe found (which converges
    only as 1/t inside a face): solve the KKT system of ``min w^T Q w, sum w = 1`` on the
    support, dropping the most negative weight until all are >= 0."""
    support = [int(i) for i in face]
    while support:
        k = len(support)
        A = np.zeros((k + 1, k + 1))
        A[:k, :k] = 2.0 * Q[np.ix_(support, support)]
        A[:k, k] = A[k, :k] = 1.0
        b = np.zeros(k + 1)
        b[k] = 1.0
        sol = np.linalg.lstsq(A, b, rcond=None)[0][:k]
        if np.all(sol >= -1e-12):
            w = np.zeros(len(Q))
            w[support] = np.clip(sol, 0.0, None)
            return w / w.sum()
        support.pop(int(np.argmin(sol)))
    return None


def gram(Delta: np.ndarray) -> np.ndarray:
    """``Q_kl = (1/m) sum_i <Delta_k(x_i), Delta_l(x_i)>`` for ``Delta: (K, m, d)``."""
    flat = Delta.reshape(len(Delta), -1)
    return flat @ flat.T / Delta.shape[1]


@dataclass(frozen=True)
class Particles:
    """Positions ``X: (m, d)``, velocities ``V: (m, d)``, the momentum counter ``n`` (from 1) and
    the last objective weights ``w`` (a warm start for Frank-Wolfe)."""

    X: np.ndarray
    V: np.ndarray
    n: int = 1
    w: np.ndarray | None = None

    @classmethod
    def at(cls, X: np.ndarray) -> Particles:
        X = np.asarray(X, dtype=np.float64)
        return cls(X.copy(), np.zeros_like(X))

    def clamped(self, low: float, high: float) -> Particles:
        """The particles kept in the box ``[low, high]^d``: one that left it is put back on
        the bound and its velocity zeroed (a reflection that keeps no momentum)."""
        out = np.any((self.X < low) | (self.X > high), axis=1)  # noqa: SIM300
        if not out.any():
            return self
        V = self.V.copy()
        V[out] = 0.0
        return replace(self, X=np.clip(self.X, low, high), V=V)


@dataclass(frozen=True)
class StepInfo:
    """``weights``: ``(K,)`` shared, or ``(m, K)`` per particle."""

    weights: np.ndarray
    grad_norm: float
    bandwidth: float
    restarted: bool


def step(
    particles: Particles,
    grad_f: np.ndarray,
    eta: float,
    accelerated: bool = True,
    kernel: Kernel = "svgd",
    schedule: Schedule = "convex",
    beta: float = 1.0,
    restart: bool = True,
    bandwidth: float | None = None,
    weighting: Weighting = "shared",
) -> tuple[Particles, StepInfo]:
    """One step of A-MWGraD (``accelerated``) or MWGraD, given ``grad_f: (K, m, d)``, the
    gradients of ``f_k = -log pi_k`` at ``particles.X``."""
    X, V = particles.X, particles.V
    h = median_bandwidth(X) if bandwidth is None else bandwidth
    Delta = wasserstein_gradients(X, np.asarray(grad_f, dtype=np.float64), kernel, h)
    if weighting == "per_particle":
        w = min_norm_weights_per_particle(Delta)
        D = np.einsum("mk,kmd->md", w, Delta)
    else:
        w = min_norm_weights(gram(Delta), particles.w)
        D = np.einsum("k,kmd->md", w, Delta)
    grad_norm = float(np.mean(np.sum(D * D, axis=1)))
    if not accelerated:
        moved = replace(particles, X=X - eta * D, w=w)
        return moved, StepInfo(w, grad_norm, h, False)
    n, restarted = particles.n, False
    if restart and float(np.sum(V * -D)) < 0.0:
        V, n, restarted = np.zeros_like(V), 1, True
    if schedule == "convex":
        alpha = (n - 1.0) / (n + 2.0)
    else:
        root = math.sqrt(beta * eta)
        alpha = (1.0 - root) / (1.0 + root)
    root_eta = math.sqrt(eta)
    moved = Particles(X + root_eta * V, alpha * V - root_eta * D, n + 1, w)
    return moved, StepInfo(w, grad_norm, h, restarted)


def run(
    X0: np.ndarray,
    grad_f: Callable[[np.ndarray], np.ndarray],
    iterations: int,
    eta: float,
    **options: object,
) -> tuple[Particles, list[StepInfo]]:
    """``iterations`` steps from ``X0`` with ``grad_f(X) -> (K, m, d)``; the final particles and
    the information of every step (``options`` as in ``step``)."""
    particles = Particles.at(X0)
    infos = []
    for _ in range(iterations):
        particles, info = step(particles, grad_f(particles.X), eta, **options)  # type: ignore[arg-type]
        infos.append(info)
    return particles, infos
