"""engines/wasserstein_particles.py: the min-norm solver, kernel estimates and the dynamics."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engines.wasserstein_particles import (
    Particles,
    blob_gradient,
    gram,
    median_bandwidth,
    min_norm_weights,
    min_norm_weights_per_particle,
    run,
    step,
    svgd_gradient,
)


def _simplex_grid(k: int, n: int) -> np.ndarray:
    points = [c for c in itertools.product(range(n + 1), repeat=k - 1) if sum(c) <= n]
    return np.array([[*c, n - sum(c)] for c in points], dtype=np.float64) / n


@pytest.mark.parametrize("k, n", [(2, 2000), (3, 200), (4, 40)])
def test_min_norm_weights_match_a_brute_force_search_on_the_simplex(k, n):
    rng = np.random.default_rng(k)
    for _ in range(5):
        A = rng.standard_normal((k, 3))
        Q = A @ A.T
        w = min_norm_weights(Q)
        assert w.min() >= 0 and w.sum() == pytest.approx(1.0)
        grid = _simplex_grid(k, n)
        brute = np.min(np.einsum("ik,kl,il->i", grid, Q, grid))
        assert w @ Q @ w <= brute + 1e-9
        # Optimality (KKT): no vertex of the simplex is a descent direction from w.
        assert np.all(Q @ w >= w @ Q @ w - 1e-9)


def test_min_norm_weights_pick_the_shorter_gradient_when_one_dominates():
    Q = np.array([[1.0, 2.0], [2.0, 9.0]])  # <g1, g2> >= |g1|^2: w = (1, 0)
    np.testing.assert_allclose(min_norm_weights(Q), [1.0, 0.0])


@pytest.mark.parametrize("k", [2, 3, 4, 7])
def test_per_particle_weights_solve_each_particles_own_min_norm_problem(k):
    rng = np.random.default_rng(10 + k)
    Delta = rng.standard_normal((k, 6, 3))
    W = min_norm_weights_per_particle(Delta)
    assert W.shape == (6, k)
    assert np.all(W >= 0) and np.allclose(W.sum(axis=1), 1.0)
    for i in range(6):
        Q = Delta[:, i, :] @ Delta[:, i, :].T
        best = min_norm_weights(Q)
        assert W[i] @ Q @ W[i] <= best @ Q @ best + 1e-12
        assert np.all(Q @ W[i] >= W[i] @ Q @ W[i] - 1e-9)  # KKT: no vertex descends


@pytest.mark.parametrize("scale", [1e-8, 1.0, 1e4, 1e8, 1e200])
def test_per_particle_weights_do_not_depend_on_the_gradients_scale(scale):
    # |Delta_0| = 1, |Delta_1| = 2, orthogonal: w = (0.8, 0.2); three orthogonal unit
    # gradients: uniform weights.
    two = np.array([[[1.0, 0.0, 0.0]], [[0.0, 2.0, 0.0]]]) * scale
    np.testing.assert_allclose(min_norm_weights_per_particle(two), [[0.8, 0.2]], atol=1e-9)
    three = np.eye(3)[:, None, :] * scale
    np.testing.assert_allclose(min_norm_weights_per_particle(three), [[1 / 3] * 3], atol=1e-9)
    same = np.ones((3, 2, 2)) * scale  # identical gradients: any weights, on the simplex
    W = min_norm_weights_per_particle(same)
    assert np.all(W >= 0) and np.allclose(W.sum(axis=1), 1.0)


def test_weights_of_non_finite_gradients_are_nan():
    Delta = np.ones((3, 2, 2))
    Delta[1, 0, 0] = np.inf
    assert np.isnan(min_norm_weights_per_particle(Delta)).all()
    assert np.isnan(min_norm_weights(np.full((3, 3), np.inf))).all()


def test_per_particle_weights_differ_where_the_gradients_do():
    # Particle 0 sits where objective 1 is flat (weight goes to it), particle 1 the reverse.
    Delta = np.zeros((2, 2, 2))
    Delta[0] = [[1.0, 0.0], [0.0, 0.0]]
    Delta[1] = [[0.0, 0.0], [0.0, 1.0]]
    W = min_norm_weights_per_particle(Delta)
    np.testing.assert_allclose(W, [[0.0, 1.0], [1.0, 0.0]])


def _direct(X, grad_f, h, kind):
    """The estimates written out particle by particle, with the kernel's gradient by central
    finite differences."""
    m, d = X.shape

    def k(a, b):
        return np.exp(-np.sum((a - b) ** 2) / (2 * h * h))

    def grad_second(a, b):  # d/db k(a, b)
        e = 1e-6
        return np.array([(k(a, b + e * u) - k(a, b - e * u)) / (2 * e) for u in np.eye(d)])

    out = np.zeros((m, d))
    for i in range(m):
        if kind == "svgd":
            out[i] = sum(k(X[i], X[j]) * grad_f[j] - grad_second(X[i], X[j]) for j in range(m)) / m
        else:
            rho = [sum(k(X[a], X[b]) for b in range(m)) for a in range(m)]
            out[i] = grad_f[i] - sum(
                grad_second(X[i], X[j]) / rho[j] + grad_second(X[i], X[j]) / rho[i]
                for j in range(m)
            )
    return out


@pytest.mark.parametrize("kind", ["svgd", "blob"])
def test_kernel_estimates_match_a_direct_computation_on_three_particles(kind):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3, 2))
    grad_f = rng.standard_normal((3, 2))
    h = 0.9
    estimate = svgd_gradient if kind == "svgd" else blob_gradient
    np.testing.assert_allclose(estimate(X, grad_f, h), _direct(X, grad_f, h, kind), atol=1e-7)


def test_median_bandwidth():
    X = np.array([[0.0], [1.0], [3.0]])  # squared distances 1, 9, 4: median 4
    assert median_bandwidth(X) == pytest.approx(np.sqrt(4 / (2 * np.log(4))))


def test_one_target_with_svgd_is_svgd_with_momentum():
    rng = np.random.default_rng(1)
    X0 = rng.standard_normal((6, 2)) * 2

    def grad_f(X):  # standard normal target: f = |x|^2 / 2
        return X[None]

    eta, h = 0.05, 1.0
    particles = Particles.at(X0)
    X, V = X0.copy(), np.zeros_like(X0)
    for n in range(1, 5):
        particles, info = step(particles, grad_f(particles.X), eta, bandwidth=h, restart=False)
        assert info.weights.tolist() == [1.0]
        # SVGD's field phi = -Delta, then x += sqrt(eta) v; v = alpha_n v + sqrt(eta) phi.
        phi = -svgd_gradient(X, X, h)
        X, V = X + np.sqrt(eta) * V, (n - 1) / (n + 2) * V + np.sqrt(eta) * phi
        np.testing.assert_allclose(particles.X, X)
        np.testing.assert_allclose(particles.V, V)


def test_mwgrad_without_acceleration_is_a_gradient_step_with_min_norm_weights():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((5, 2))
    grad = np.stack([X - 1.0, X + 1.0])  # two Gaussians at +-1
    moved, info = step(Particles.at(X), grad, 0.1, accelerated=False, bandwidth=1.0)
    Delta = np.stack([svgd_gradient(X, g, 1.0) for g in grad])
    w = min_norm_weights(gram(Delta))
    np.testing.assert_allclose(info.weights, w)
    np.testing.assert_allclose(moved.X, X - 0.1 * np.einsum("k,kmd->md", w, Delta))


def test_acceleration_reaches_a_small_gradnorm_in_fewer_steps_on_two_gaussians():
    rng = np.random.default_rng(3)
    X0 = rng.standard_normal((30, 2)) * 3 + 5

    def grad_f(X):
        return np.stack([X - np.array([1.0, 0.0]), X + np.array([1.0, 0.0])])

    _, plain = run(X0, grad_f, 400, 0.01, accelerated=False, kernel="svgd")
    _, fast = run(X0, grad_f, 400, 0.01, accelerated=True, kernel="svgd")
    target = plain[-1].grad_norm

    def first_below(infos):
        return next(i for i, info in enumerate(infos) if info.grad_norm <= target)

    assert first_below(fast) < 0.5 * first_below(plain)
