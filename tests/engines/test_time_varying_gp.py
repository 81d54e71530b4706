"""The time-varying GP of ``ipbt`` on arrays: fit, LCB in a trust region, copula, smoother."""

from __future__ import annotations

import botorch.fit
import numpy as np
import pytest
import torch
from gpytorch.mlls import ExactMarginalLogLikelihood
from linear_operator.utils.errors import NotPSDError

from engines.time_varying_gp import (
    FIT_MAXITER,
    WARM_MAXITER,
    TimeVaryingLoss,
    copula,
    fit_time_varying_gp,
    hyperparameters,
    lcb_in_trust_region,
    mean_and_std,
    smoothed_improvement,
)


def test_the_smoothed_detector_sees_noisy_progress_and_a_plateau():
    rng = np.random.default_rng(0)
    progress = list(-np.linspace(0, 1, 12) + 0.05 * rng.standard_normal(12))
    improved, hypers = smoothed_improvement(progress)
    assert improved
    worse = list(np.linspace(0, 1, 12))
    assert not smoothed_improvement(worse)[0]
    assert not smoothed_improvement(worse, hypers)[0]


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


def test_a_fit_that_retries_does_not_depend_on_the_global_torch_generator(monkeypatch):
    # BoTorch retries a failed fit from hyperparameters drawn from their priors; make the
    # first attempt of every fit fail so that each fit takes that path.
    first_attempt = botorch.fit._fit_fallback.__kwdefaults__["optimizer"]
    attempts = []

    def fail_first(mll, *args, **kwargs):
        attempts.append(1)
        if len(attempts) % 2 == 1:
            raise NotPSDError("the first attempt fails")
        return first_attempt(mll, *args, **kwargs)

    monkeypatch.setitem(botorch.fit._fit_fallback.__kwdefaults__, "optimizer", fail_first)
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.random((12, 2)), np.repeat(np.arange(4.0), 3)])
    y = rng.standard_normal(12)
    fitted = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        model = fit_time_varying_gp(X, y)
        fitted.append({name: p.detach().clone() for name, p in model.named_parameters()})
    assert len(attempts) == 4
    for name, value in fitted[0].items():
        assert torch.equal(value, fitted[1][name]), name


def _likelihood(model) -> float:
    model.train()
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    with torch.no_grad():
        return float(mll(model(*model.train_inputs), model.train_targets))


def test_a_warm_started_fit_reaches_a_cold_fits_likelihood_in_fewer_iterations(monkeypatch):
    rng = np.random.default_rng(0)

    def rows(n):
        X = np.column_stack([rng.random((n, 3)), np.repeat(np.arange(n / 4), 4)[:n]])
        y = np.sin(3 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.standard_normal(n)
        return X, (y - y.mean()) / y.std()

    previous = hyperparameters(fit_time_varying_gp(*rows(96)))
    X, y = rows(100)
    cold = _likelihood(fit_time_varying_gp(X, y))
    iterations = []
    original = botorch.fit._fit_fallback.__kwdefaults__["optimizer"]

    def counting(mll, *args, **kwargs):
        iterations.append(kwargs["options"]["maxiter"])
        return original(mll, *args, **kwargs)

    monkeypatch.setitem(botorch.fit._fit_fallback.__kwdefaults__, "optimizer", counting)
    warm = _likelihood(fit_time_varying_gp(X, y, previous))
    assert iterations == [WARM_MAXITER] and WARM_MAXITER < FIT_MAXITER
    assert warm >= cold - 0.01 * abs(cold)
    # Hyperparameters of another shape (another number of parameters) start a cold fit.
    iterations.clear()
    fit_time_varying_gp(X[:, 1:], y, previous)
    assert iterations == [FIT_MAXITER]


def _rows(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    X = np.column_stack([rng.random((n, 3)), np.repeat(np.arange(n / 8), 8)[:n]])
    y = np.sin(4 * X[:, 0]) + 0.2 * X[:, 3] + 0.1 * rng.standard_normal(n)
    return X, (y - y.mean()) / y.std()


def test_the_written_out_loss_is_gpytorchs_in_value_and_gradient():
    rng = np.random.default_rng(3)
    model = fit_time_varying_gp(*_rows(rng, 60))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    model.train()
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        with torch.no_grad():
            for _, p in mll.named_parameters():
                p.add_(0.3 * torch.randn(p.shape, dtype=p.dtype, generator=generator))
            model.likelihood.noise_covar.raw_noise.clamp_(min=1e-3)  # its bound in a fit
        loss, grads = TimeVaryingLoss(mll)()
        mll.zero_grad()
        reference = -mll(model(*model.train_inputs), model.train_targets)
        reference.backward()
        assert float(loss) == pytest.approx(float(reference), rel=1e-12)
        for (name, p), grad in zip(mll.named_parameters(), grads, strict=True):
            assert torch.allclose(grad, p.grad, rtol=1e-9, atol=1e-12), name


def test_the_written_out_posterior_is_gpytorchs_with_fantasies():
    rng = np.random.default_rng(4)
    model = fit_time_varying_gp(*_rows(rng, 60))
    lcb_in_trust_region(model, np.full(3, 0.5), np.array([8.0]), 0.4, 2, rng)  # 2 fantasies
    assert len(model.train_targets) == 62
    Z = torch.as_tensor(np.column_stack([rng.random((20, 3)), np.full(20, 8.0)]))
    with torch.no_grad():
        posterior = model.posterior(Z.unsqueeze(-2))
        mean, std = mean_and_std(model, Z)
    assert torch.allclose(mean, posterior.mean.reshape(-1), rtol=1e-9, atol=1e-12)
    assert torch.allclose(std, posterior.variance.sqrt().reshape(-1), rtol=1e-9, atol=1e-12)
