"""engines/bo.py: the building blocks the model-based engines share, tested on arrays."""

from __future__ import annotations

import random
from unittest.mock import patch

import numpy as np
import pytest
import torch
from botorch.acquisition.analytic import LogExpectedImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.models import MixedSingleTaskGP, ModelListGP, SingleTaskGP
from botorch.models.transforms.outcome import Standardize
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import RBFKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.priors import GammaPrior, LogNormalPrior

from engines import sample_paths
from engines.base import History, Problem
from engines.bo import (
    failure,
    fit_gp,
    joint_model,
    log_expected_improvement,
    needs_python_random,
    reference_point,
    replace_duplicates,
    seeded,
    sobol_then_model,
    training_data,
    unfilled,
)
from engines.gp_likelihood import ClosedFormLoss, ClosedFormMLL, applies_to
from engines.quasirandom import SobolStream
from engines.sample_paths import SamplePaths
from engines.space import CategoricalParam, FloatParam, IntParam, SearchSpace


def floats(d: int) -> SearchSpace:
    return SearchSpace([FloatParam(f"x{i}", 0.0, 1.0) for i in range(d)])


def history(X: np.ndarray, Y: np.ndarray, C: np.ndarray | None = None, pending=None) -> History:
    n, d = X.shape
    C = np.zeros((n, 0)) if C is None else C
    return History(X, Y, C, np.zeros((0, d)) if pending is None else pending)


def test_training_data_negates_objectives_and_makes_values_finite():
    problem = Problem(floats(2), n_objectives=1, n_constraints=1)
    X = np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
    Y = np.array([[1.0], [np.inf], [3.0]])
    C = np.array([[-1.0], [np.nan], [2.0]])
    data = training_data(problem, history(X, Y, C))
    assert not isinstance(data, str)
    X_train, targets = data
    np.testing.assert_array_equal(X_train, X)
    # A non-finite objective counts as the worst finite one; the GP models -Y.
    np.testing.assert_array_equal(targets[:, 0], [-1.0, -3.0, -3.0])
    # A non-finite constraint is violated: max(c, 0) plus the range of the finite values.
    np.testing.assert_array_equal(targets[:, 1], [-1.0, 5.0, 2.0])


def test_training_data_gives_a_reason_when_there_is_too_little_data():
    problem = Problem(floats(1))
    assert training_data(problem, history(np.array([[0.5]]), np.array([[1.0]]))) == (
        "fewer than 2 completed trials"
    )
    two = history(np.array([[0.1], [0.9]]), np.array([[1.0], [np.nan]]))
    assert training_data(problem, two) == "objective 0 has fewer than 2 finite values"


def test_fit_gp_interpolates_a_smooth_function():
    X = torch.linspace(0, 1, 12, dtype=torch.float64).unsqueeze(-1)
    y = np.sin(6 * X[:, 0].numpy())
    with seeded(0, False):
        model = fit_gp(X, y, [])
    assert type(model) is SingleTaskGP
    Z = torch.tensor([[0.25], [0.55]], dtype=torch.float64)
    mean = model.posterior(Z).mean.detach().numpy().ravel()
    np.testing.assert_allclose(mean, np.sin(6 * Z[:, 0].numpy()), atol=0.05)


def _smooth_data(n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(3)
    X = torch.as_tensor(rng.random((n, d)))
    y = ((X - 0.3) ** 2).sum(1) + 0.1 * torch.sin(10 * X[:, 0]) + 0.01 * torch.randn(n)
    return X, y.unsqueeze(-1)


def _botorchs_fit_agrees(model: SingleTaskGP, X: torch.Tensor, Y: torch.Tensor) -> SingleTaskGP:
    """BoTorch's own fit of the GP(s) of ``Y: (n, m)``, after asserting that ``model``'s
    lengthscales are within 1 % of its."""
    reference = SingleTaskGP(X, Y, outcome_transform=Standardize(m=Y.shape[-1]))
    fit_gpytorch_mll(ExactMarginalLogLikelihood(reference.likelihood, reference))
    np.testing.assert_allclose(
        model.covar_module.lengthscale.detach().numpy(),
        reference.covar_module.lengthscale.detach().numpy(),
        rtol=1e-2,
    )
    return reference


def test_the_closed_form_likelihood_and_its_gradient_are_gpytorchs():
    X, y = _smooth_data(30, 3)
    model = SingleTaskGP(X, y, outcome_transform=Standardize(m=1))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    mll.train()
    named = [(name, p) for name, p in mll.named_parameters() if p.requires_grad]
    names, params = [name for name, _ in named], [p for _, p in named]
    assert applies_to(model)
    with torch.no_grad():  # away from the initial values, where priors and data disagree
        model.covar_module.lengthscale = torch.tensor([[0.2, 0.7, 2.0]])
        model.likelihood.noise = torch.tensor([0.05])
        model.mean_module.constant.fill_(0.3)
    expected = -mll(model(*model.train_inputs), model.train_targets)
    expected_grads = torch.autograd.grad(expected, params)
    loss, grads = ClosedFormLoss(model, names)()
    assert float(loss) == pytest.approx(float(expected), rel=1e-10)
    for g, e in zip(grads, expected_grads, strict=True):
        assert g.shape == e.shape
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-7, atol=1e-10)


def test_a_batch_of_gps_has_each_members_likelihood_and_gradient():
    X, y = _smooth_data(25, 3)
    Y = torch.cat([y, torch.sin(6 * X[:, :1]), X[:, 1:2] ** 2], dim=1)
    model = SingleTaskGP(X, Y, outcome_transform=Standardize(m=3))
    reference = ExactMarginalLogLikelihood(model.likelihood, model)
    reference.train()
    with torch.no_grad():
        model.covar_module.lengthscale = torch.tensor(
            [[[0.2, 0.7, 2.0]], [[1.0, 0.1, 0.4]], [[3.0, 3.0, 0.3]]]
        )
        model.likelihood.noise = torch.tensor([[0.05], [0.2], [0.001]])
        model.mean_module.constant.copy_(torch.tensor([0.3, -0.1, 0.0]))
    params = [p for p in reference.parameters() if p.requires_grad]
    expected = -reference(model(*model.train_inputs), model.train_targets)  # (3,)
    expected_grads = torch.autograd.grad(expected.sum(), params)
    mll = ClosedFormMLL(model)
    losses = mll.compute_custom_loss()
    grads = torch.autograd.grad(losses.sum(), params)
    np.testing.assert_allclose(losses.detach(), expected.detach(), rtol=1e-10)
    for g, e in zip(grads, expected_grads, strict=True):
        assert g.shape == e.shape
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-7, atol=1e-10)


def test_fit_gp_of_several_columns_reaches_botorchs_batched_optimum():
    X, y = _smooth_data(40, 3)
    Y = torch.cat([y, torch.sin(6 * X[:, :1])], dim=1)
    calls = []
    custom_loss = ClosedFormMLL.compute_custom_loss
    with (
        seeded(0, False),
        patch.object(
            ClosedFormMLL,
            "compute_custom_loss",
            lambda self, **kw: calls.append(1) or custom_loss(self, **kw),
        ),
    ):
        model = fit_gp(X, Y.numpy(), [])
    assert calls  # BoTorch's batched fit evaluated the closed form
    _botorchs_fit_agrees(model, X, Y)


def test_the_closed_form_likelihood_applies_only_to_the_default_priors_and_ard():
    X, y = _smooth_data(10, 2)
    model = SingleTaskGP(X, y, outcome_transform=Standardize(m=1))
    assert applies_to(model)
    model.covar_module.register_prior(
        "lengthscale_prior", GammaPrior(3.0, 6.0), lambda m: m.lengthscale
    )
    assert not applies_to(model)
    kernel = RBFKernel(  # one lengthscale for both coordinates, otherwise as BoTorch's
        lengthscale_prior=LogNormalPrior(1.0, 1.0),
        lengthscale_constraint=GreaterThan(0.025, transform=None),
    )
    shared = SingleTaskGP(X, y, covar_module=kernel)
    assert not applies_to(shared)


def test_fit_gp_reaches_gpytorchs_optimum():
    X, y = _smooth_data(40, 4)
    with seeded(0, False):
        model = fit_gp(X, y[:, 0].numpy(), [])
    reference = _botorchs_fit_agrees(model, X, y)
    names = [n for n, _ in ExactMarginalLogLikelihood(model.likelihood, model).named_parameters()]
    loss, reference_loss = (ClosedFormLoss(m, names)()[0] for m in (model, reference))
    assert float(loss) == pytest.approx(float(reference_loss), abs=1e-5)


def test_fit_gp_uses_a_mixed_kernel_with_categorical_dimensions_and_the_start():
    X = torch.tensor([[0.1, 0.25], [0.5, 0.75], [0.9, 0.25], [0.3, 0.75]], dtype=torch.float64)
    started = []
    with seeded(0, False):
        model = fit_gp(X, np.array([0.0, 1.0, 0.5, 0.2]), [1], maxiter=5, start=started.append)
    assert type(model) is MixedSingleTaskGP
    assert started == [model]


def test_seeded_is_reproducible_and_restores_the_global_generators():
    torch.manual_seed(123)
    random.seed(123)
    expected_torch, expected_python = torch.rand(1), random.random()
    torch.manual_seed(123)
    random.seed(123)
    with seeded(7, True):
        first = torch.rand(3), random.random()
    with seeded(7, True):
        second = torch.rand(3), random.random()
    assert torch.equal(first[0], second[0]) and first[1] == second[1]
    assert torch.equal(torch.rand(1), expected_torch)
    assert random.random() == expected_python


def test_needs_python_random_only_for_categoricals_of_more_than_20_choices():
    assert not needs_python_random(SearchSpace([CategoricalParam("c", list(range(20)))]))
    assert needs_python_random(SearchSpace([CategoricalParam("c", list(range(21)))]))
    assert not needs_python_random(floats(3))


def test_reference_point_is_the_given_one_in_the_models_orientation():
    problem = Problem(floats(1), n_objectives=2, reference_point=np.array([1.0, 2.0]))
    ref = reference_point(problem, np.zeros((3, 2)))
    np.testing.assert_array_equal(ref.numpy(), [-1.0, -2.0])


def test_reference_point_lies_below_the_feasible_front():
    problem = Problem(floats(1), n_objectives=2, n_constraints=1)
    # Columns: -Y (maximized), then the constraint; the last row is infeasible and far out.
    targets = np.array([[0.0, 1.0, -1.0], [1.0, 0.0, -1.0], [0.5, 0.5, -1.0], [-9, -9, 1.0]])
    ref = reference_point(problem, targets).numpy()
    assert np.all(ref < 0.0) and np.all(ref > -1.0)


def test_unfilled_and_failure():
    X, details = unfilled(2, 3, "why")
    assert X.shape == (3, 2) and np.isnan(X).all()
    assert details == [{"source": "sobol", "fallback": "why"}] * 3
    assert failure(ValueError("x" * 200)) == "ValueError: " + "x" * 120


def test_replace_duplicates_fills_nan_rows_and_replaces_repeats():
    problem = Problem(floats(2))
    observed = np.array([[0.25, 0.25]])
    X = np.array([[0.25, 0.25], [np.nan, np.nan], [0.7, 0.7], [0.7, 0.7]])
    details = [{"source": "m"} for _ in range(4)]
    stream = SobolStream(2, seed=1)
    new = replace_duplicates(
        problem, history(observed, np.ones((1, 1))), X, details, stream, np.random.default_rng(0)
    )
    assert np.isfinite(new).all()
    assert len({tuple(row) for row in np.vstack([observed, new])}) == 5
    np.testing.assert_array_equal(new[2], [0.7, 0.7])
    assert details[0]["replaced"] and details[3]["replaced"]
    assert details[1] == {"source": "m"} and details[2] == {"source": "m"}
    assert np.isnan(X[1]).all()  # the input is not modified


def test_replace_duplicates_draws_a_free_cell_or_says_none_is_left():
    problem = Problem(SearchSpace([IntParam("i", 0, 1)]))
    observed = np.array([[0.25]])
    stream = SobolStream(1, seed=0)
    rng = np.random.default_rng(0)
    details: list = [{"source": "m"}, {"source": "m"}]
    new = replace_duplicates(
        problem,
        history(observed, np.ones((1, 1))),
        np.array([[0.25], [0.25]]),
        details,
        stream,
        rng,
    )
    assert new[0, 0] == 0.75
    assert "duplicate" not in details[0]
    assert details[1]["duplicate"] == "no free value left in the space"


@pytest.mark.parametrize("n_done", [0, 3, 5])
def test_sobol_then_model_asks_the_model_only_past_n_initial(n_done):
    problem = Problem(floats(2))
    rng = np.random.default_rng(0)
    X = rng.random((n_done, 2))
    calls = []

    def model_points(X_pending, k):
        calls.append((X_pending.copy(), k))
        return np.full((k, 2), 0.5) + 0.01 * np.arange(k)[:, None], [{"source": "m"}] * k, "extra"

    X_new, details, extra = sobol_then_model(
        problem, history(X, np.ones((n_done, 1))), 4, 5, SobolStream(2, seed=3), rng, model_points
    )
    n_sobol = max(0, min(4, 5 - n_done))
    assert X_new.shape == (4, 2)
    assert [d["source"] for d in details] == ["sobol"] * n_sobol + ["m"] * (4 - n_sobol)
    if n_sobol == 4:
        assert calls == [] and extra is None
    else:
        ((pending, k),) = calls
        assert k == 4 - n_sobol and extra == "extra"
        np.testing.assert_array_equal(pending, X_new[:n_sobol])


def test_joint_model_has_each_gps_posterior():
    X, y = _smooth_data(25, 3)
    columns = np.column_stack([y[:, 0].numpy(), X[:, 0].numpy() - 0.5, np.cos(4 * X[:, 1].numpy())])
    with seeded(0, False):
        models = [fit_gp(X, columns[:, i], []) for i in range(3)]
    joint = joint_model(models)
    assert type(joint) is SingleTaskGP and joint.num_outputs == 3
    Z = torch.as_tensor(np.random.default_rng(4).random((6, 3)))
    with torch.no_grad():
        expected = ModelListGP(*models).posterior(Z)
        posterior = joint.posterior(Z)
    np.testing.assert_allclose(posterior.mean.numpy(), expected.mean.numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(
        posterior.variance.numpy(), expected.variance.numpy(), rtol=1e-5, atol=1e-9
    )
    # A mixed GP (categorical coordinates) keeps the list.
    with seeded(0, False):
        mixed = fit_gp(X, columns[:, 1], [2], maxiter=5)
    assert type(joint_model([models[0], mixed])) is ModelListGP


def _two_gps() -> list[SingleTaskGP]:
    X = torch.as_tensor(np.random.default_rng(0).random((30, 3)))
    columns = [torch.sin(5 * X[:, 0]) + X[:, 1], (X**2).sum(-1) * 10 + 3]
    return [fit_gp(X, y.numpy(), []) for y in columns]


def test_sample_paths_follow_each_gps_posterior():
    models = _two_gps()
    with seeded(0, False):
        paths = SamplePaths(models, 2000, 4096)
    Z = torch.as_tensor(np.random.default_rng(1).random((5, 3)))
    with torch.no_grad():
        values = paths(Z)  # (2000, 5, 2)
    assert values.shape == (2000, 5, 2)
    many = torch.cat([Z, torch.rand(3000, 3, dtype=Z.dtype)])  # evaluated in chunks
    with torch.no_grad():
        np.testing.assert_allclose(paths(many)[:, :5], values, rtol=1e-9, atol=1e-9)
    for i, model in enumerate(models):
        with torch.no_grad():
            posterior = model.posterior(Z)
            mean, cov = posterior.mean[:, 0], posterior.mvn.covariance_matrix
        std = cov.diagonal().sqrt()
        # Margins: 2000 paths give the mean to about 0.022 standard deviations and each
        # deviation to about 1.6 %; 4096 features leave the kernel a few % off.
        np.testing.assert_allclose((values[:, :, i].mean(0) - mean) / std, 0.0, atol=0.1)
        np.testing.assert_allclose(values[:, :, i].std(0) / std, 1.0, atol=0.08)
        correlation = torch.corrcoef(values[:, :, i].T) - cov / torch.outer(std, std)
        assert correlation.abs().max() < 0.1


def test_sample_paths_per_path_points_and_gradient():
    models = _two_gps()
    with seeded(0, False):
        paths = SamplePaths(models, 3, 256)
    points = torch.as_tensor(np.random.default_rng(1).random((3, 4, 3)))  # 4 points per path
    with torch.no_grad():
        own = paths(points)  # (3, 4, 2): path s at points[s]
        for s in range(3):
            np.testing.assert_allclose(own[s], paths(points[s])[s], rtol=1e-10)
    x = points.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(paths(x)[..., 1].sum(), x)
    h = 1e-6
    for j in range(3):
        step = torch.zeros_like(points)
        step[..., j] = h
        with torch.no_grad():
            numeric = (paths(points + step)[..., 1] - paths(points - step)[..., 1]) / (2 * h)
        np.testing.assert_allclose(grad[..., j], numeric, rtol=1e-5, atol=1e-6)


def test_sample_paths_closed_form_gradient_is_autograds():
    """Per-path points take the closed-form gradient; the same points shared by every path
    take autograd through the written-out paths: path s's gradient is the same either way."""
    models = _two_gps()
    with seeded(0, False):
        paths = SamplePaths(models, 3, 256)
    point = torch.as_tensor(np.random.default_rng(2).random((4, 3)))
    shared = point.clone().requires_grad_(True)
    own = point.expand(3, 4, 3).clone().requires_grad_(True)
    weights = torch.as_tensor(np.random.default_rng(3).standard_normal((3, 4, 2)))
    (grad_own,) = torch.autograd.grad((paths(own) * weights).sum(), own)
    for s in range(3):
        (grad_shared,) = torch.autograd.grad((paths(shared)[s] * weights[s]).sum(), shared)
        np.testing.assert_allclose(grad_own[s], grad_shared, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(paths(own).detach(), paths(point).expand(3, 4, 2), rtol=1e-12)


def test_sample_paths_closed_form_in_chunks_and_in_float32(monkeypatch):
    """Points evaluated a few at a time give the values and gradients of all at once; a
    float32 input gets its gradient in float32."""
    models = _two_gps()
    with seeded(0, False):
        paths = SamplePaths(models, 3, 256)
    points = torch.as_tensor(np.random.default_rng(4).random((3, 5, 3)))
    values, gradients = paths.values_and_gradients(points)
    # 2 GPs x 3 paths x 256 features x 2 points per chunk: chunks of 2, 2 and 1 points.
    monkeypatch.setattr(sample_paths, "FEATURES_AT_ONCE", 2 * 3 * 256 * 2)
    chunked_values, chunked_gradients = paths.values_and_gradients(points)
    np.testing.assert_allclose(chunked_values, values, rtol=1e-12)
    np.testing.assert_allclose(chunked_gradients, gradients, rtol=1e-10, atol=1e-12)
    x = points.float().requires_grad_(True)
    (grad,) = torch.autograd.grad(paths(x).sum(), x)
    assert grad.dtype == torch.float32
    np.testing.assert_allclose(grad, gradients.sum(-2).float(), rtol=1e-4, atol=1e-5)


def test_log_ei_on_the_written_out_posterior_equals_botorchs_and_its_gradient():
    model = _two_gps()[1]
    best_f = model.posterior(model.train_inputs[0]).mean.max().detach()
    fast = log_expected_improvement(model, model.train_inputs[0])
    assert type(fast) is not LogExpectedImprovement  # the moments written out
    assert float(fast.best_f) == pytest.approx(float(best_f), rel=1e-10)
    reference = LogExpectedImprovement(model, best_f=best_f)
    # Near the data (small variance), far from it, and at a training point.
    X = torch.cat([torch.rand(64, 1, 3, dtype=torch.float64), model.train_inputs[0][:2, None]])
    X[:8] += 2.0
    x1, x2 = X.clone().requires_grad_(True), X.clone().requires_grad_(True)
    ours, theirs = fast(x1), reference(x2)
    np.testing.assert_allclose(ours.detach(), theirs.detach(), rtol=1e-6, atol=1e-8)
    with torch.no_grad():  # the value alone, as the optimizer's raw samples take it
        np.testing.assert_allclose(fast(X), theirs.detach(), rtol=1e-6, atol=1e-8)
    ours.sum().backward()
    theirs.sum().backward()
    np.testing.assert_allclose(x1.grad, x2.grad, rtol=1e-5, atol=1e-8)


def test_log_ei_of_a_mixed_gp_is_botorchs():
    X = torch.as_tensor(np.random.default_rng(0).random((10, 2)))
    X[:, 1] = (X[:, 1] > 0.5).double()
    model = fit_gp(X, X[:, 0].numpy(), [1])
    assert type(log_expected_improvement(model, X)) is LogExpectedImprovement


def test_sample_paths_refuse_a_mixed_gp():
    X = torch.as_tensor(np.random.default_rng(0).random((10, 2)))
    X[:, 1] = (X[:, 1] > 0.5).double()
    model = fit_gp(X, X[:, 0].numpy(), [1])
    with pytest.raises(TypeError, match="one-output RBF"):
        SamplePaths([model], 2, 16)
