"""The time-varying GP of ``ipbt`` on arrays: fit, LCB in a trust region, copula, smoother."""

from __future__ import annotations

import numpy as np
import pytest

from engines.time_varying_gp import (
    copula,
    fit_time_varying_gp,
    lcb_in_trust_region,
    smoothed_improvement,
)


def test_the_smoothed_detector_sees_noisy_progress_and_a_plateau():
    rng = np.random.default_rng(0)
    progress = list(-np.linspace(0, 1, 12) + 0.05 * rng.standard_normal(12))
    assert smoothed_improvement(progress)
    worse = list(np.linspace(0, 1, 12))
    assert not smoothed_improvement(worse)


def test_copula_maps_ranks_to_normal_quantiles():
    z = copula(np.array([10.0, -3.0, 7.0, 0.0]))
    assert list(np.argsort(z)) == [1, 3, 2, 0]
    assert z.sum() == pytest.approx(0.0)


def test_lcb_points_stay_in_the_trust_region_and_fantasies_spread_the_batch():
    rng = np.random.default_rng(0)
    H = rng.random((20, 2))
    t = np.repeat(np.arange(4.0), 5)[:, None]
    y = np.sum((H - 0.3) ** 2, axis=1) + 0.01 * t[:, 0]
    model = fit_time_varying_gp(np.hstack([H, t]), copula(y))
    center = np.array([0.5, 0.5])
    ls_before = model.covar_module.base_kernel.kernels[0].lengthscale.detach().numpy().ravel()
    points = lcb_in_trust_region(model, center, np.array([4.0]), 0.4, 3, rng)
    assert points.shape == (3, 2)
    half = np.clip(ls_before / np.exp(np.mean(np.log(ls_before))) * 0.4 / 2.0, 0.0, 0.5)
    assert np.all(np.abs(points - center) <= half + 1e-12)
    assert len({tuple(p) for p in points}) == 3
    # Each chosen point joined the training data as a fantasy.
    assert model.train_inputs[0].shape == (23, 3)
    assert 0.0 < float(model.covar_module.base_kernel.kernels[1].eps) < 1.0
