"""The ENN surrogate (engines/enn.py): neighbours, posterior and fit against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engines.enn import ENN, EPS, ENNParams, FlatIndex


def _brute_nearest(Q: np.ndarray, X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    d2 = ((Q[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    order = np.array([np.lexsort((np.arange(len(X)), row))[:k] for row in d2])
    return order, np.take_along_axis(d2, order, axis=1)


def test_posterior_of_a_tiny_case_by_hand():
    X = np.array([[0.0], [0.25], [0.75]])
    Y = np.array([[1.0], [2.0], [4.0]])
    enn = ENN(X, Y, k=2)
    mu, sigma = enn.posterior(np.array([[0.5]]), ENNParams(b=1.0, a=0.0))
    # Neighbours 0.25 and 0.75, both at d^2 = 1/16: equal weights 1 / (eps + 1/16).
    w = 1.0 / (EPS + 0.0625)
    sigma_y = math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 3)
    assert mu[0, 0] == pytest.approx(3.0)
    assert sigma[0, 0] == pytest.approx(math.sqrt(1.0 / (2 * w)) * sigma_y)


def test_posterior_with_aleatoric_scale_noise_and_two_outputs():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    Y = np.array([[1.0, 10.0], [3.0, 30.0], [5.0, 20.0]])
    Yvar = np.array([[0.5, 1.0], [0.0, 2.0], [1.0, 0.0]])
    enn = ENN(X, Y, k=2, Yvar=Yvar)
    params = ENNParams(b=2.0, a=0.1)
    q = np.array([[0.2, 0.0]])
    mu, sigma = enn.posterior(q, params, observation_noise=True)
    # Neighbours: row 0 (d^2 = 0.04) and row 2 (d^2 = 0.04 + 1 = 1.04); row 1 at 0.64 is
    # closer than row 2: the two nearest are rows 0 and 1.
    d2 = np.array([0.04, 0.64])
    rows = [0, 1]
    for j in range(2):
        s_y2 = Y[:, j].var()
        v = Yvar[rows, j] / s_y2
        w = 1.0 / (EPS + 0.1 + 2.0 * d2 + v)
        expected_mu = (w * Y[rows, j]).sum() / w.sum()
        expected_var = 1.0 / w.sum() + 0.1 + (w * v).sum() / w.sum()
        assert mu[0, j] == pytest.approx(expected_mu)
        assert sigma[0, j] == pytest.approx(math.sqrt(expected_var * s_y2))
    # Without observation noise only the epistemic part remains, with the same mean.
    mu_epi, sigma_epi = enn.posterior(q, params)
    np.testing.assert_allclose(mu_epi, mu)
    assert np.all(sigma_epi < sigma)


def test_posterior_without_data_is_the_prior():
    enn = ENN(np.zeros((0, 3)), np.zeros((0, 2)))
    mu, sigma = enn.posterior(np.random.default_rng(0).random((4, 3)), ENNParams())
    np.testing.assert_array_equal(mu, np.zeros((4, 2)))
    np.testing.assert_array_equal(sigma, np.ones((4, 2)))


def test_b_rescales_sigma_and_leaves_mu_when_a_is_zero():
    rng = np.random.default_rng(1)
    enn = ENN(rng.random((50, 3)), rng.random((50, 1)))
    Q = rng.random((20, 3))
    mu1, s1 = enn.posterior(Q, ENNParams(b=1.0))
    mu4, s4 = enn.posterior(Q, ENNParams(b=4.0))
    np.testing.assert_allclose(mu1, mu4)
    np.testing.assert_allclose(s4, 2.0 * s1, rtol=1e-6)


# d <= 40 searches with torch, d > 40 with faiss: both backends are checked.
@pytest.mark.parametrize("n, d", [(30, 2), (3000, 5), (20_000, 12), (3000, 48)])
def test_nearest_is_exact_with_ties_broken_by_index(n, d):
    rng = np.random.default_rng(n)
    # A coarse lattice gives many exact ties; duplicated rows too.
    X = rng.integers(0, 4, (n, d)) / 4.0
    Q = np.vstack([rng.integers(0, 4, (50, d)) / 4.0, rng.random((50, d))])
    idx, d2 = FlatIndex(X).search(Q, 10)
    want_idx, want_d2 = _brute_nearest(Q, X, 10)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_allclose(d2, want_d2, rtol=1e-12)


@pytest.mark.parametrize("d", [40, 100])
def test_nearest_on_continuous_data_matches_brute_force(d):
    rng = np.random.default_rng(3)
    X, Q = rng.random((5000, d)), rng.random((200, d))
    idx, d2 = FlatIndex(X).search(Q, 10)
    want_idx, want_d2 = _brute_nearest(Q, X, 10)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_allclose(d2, want_d2, rtol=1e-12)


def test_leave_one_out_skips_every_copy_of_the_point():
    X = np.array([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.0, 0.0], [1.0, 1.0]])
    idx, d2 = FlatIndex(X).search(X[:1], 2, exclude_equal=True)
    assert sorted(idx[0]) == [3, 4]
    assert np.all(d2 == 0.5)
    idx, d2 = FlatIndex(X).search(X[3:4], 4, exclude_equal=True)
    assert list(idx[0]) == [0, 1, 2, 4]
    # Fewer other points than k: the missing places are marked.
    idx, d2 = FlatIndex(X[:3]).search(X[:1], 2, exclude_equal=True)
    assert list(idx[0]) == [-1, -1] and np.all(np.isinf(d2))


def test_fit_recovers_a_known_aleatoric_scale():
    rng = np.random.default_rng(7)
    n, noise_sd = 4000, 0.3
    X = rng.random((n, 2))
    f = np.sin(3 * X[:, 0]) + np.cos(2 * X[:, 1])
    y = (f + noise_sd * rng.standard_normal(n))[:, None]
    enn = ENN(X, y, k=30)
    params = enn.fit(rng, n_candidates=300, n_samples=1000)
    fitted_sd = math.sqrt(params.a) * float(y.std())
    assert 0.7 * noise_sd < fitted_sd < 1.4 * noise_sd
    # Noise-free data of the same function want a much smaller aleatoric scale.
    clean = ENN(X, f[:, None], k=30).fit(rng, n_candidates=300, n_samples=1000)
    assert clean.a < 0.1 * params.a


def test_fit_keeps_the_warm_start_when_it_is_best():
    rng = np.random.default_rng(0)
    X = rng.random((500, 2))
    y = (X.sum(axis=1) + 0.1 * rng.standard_normal(500))[:, None]
    enn = ENN(X, y)
    best = enn.fit(np.random.default_rng(1), n_candidates=200, n_samples=200)
    again = enn.fit(np.random.default_rng(1), n_candidates=2, n_samples=200, warm_start=best)
    assert again == best
