"""The building blocks the model-based engines share (``gp``, ``pom``, ``mwgd``, ``lcbo``).

- ``sobol_then_model``: the skeleton of an ask: Sobol points until ``n_initial`` trials exist,
  then the engine's model; NaN rows and duplicates are replaced by fresh Sobol points.
- ``training_data``: the completed trials as ``(X, [-Y, C])``, made finite for a GP.
- ``fit_gp``: an exact GP (BoTorch ``SingleTaskGP``, or ``MixedSingleTaskGP`` with categorical
  coordinates) by maximum marginal likelihood. Under BoTorch's default RBF kernel (one
  output, or a batch of independent ones) the loss and its gradient are written out in closed
  form (``engines.gp_likelihood``): the same function as gpytorch's
  ``ExactMarginalLogLikelihood``, priors included, cheaper per L-BFGS step than gpytorch's
  evaluation and autograd (figures in docs/engines/gp.md). BoTorch still drives the fit
  (bounds, L-BFGS-B, retries).
- ``joint_model``: the fitted GPs of several outputs as one model for an acquisition: a batched
  ``SingleTaskGP`` holding each one's hyperparameters when they allow (the same posterior as
  their ``ModelListGP``, computed in one batch, so an acquisition over several GPs evaluates
  faster), else their ``ModelListGP``.
- ``log_expected_improvement``: BoTorch's analytic LogEI above the best posterior mean at the
  observed points; for a GP ``fit_gp`` fitted without categorical coordinates, its value and
  gradient in closed form from the posterior ``engines.local_gp.LocalGP`` writes out (fewer
  operations per evaluation than gpytorch's modules and autograd).
- ``plain_rbf``, ``stacked_hyperparameters``: which GPs have the posterior that the modules
  writing it out in torch assume (``log_expected_improvement``, ``engines.sample_paths``), and their
  hyperparameters.
- ``lengthscales``: a fitted GP's lengthscale per input coordinate, for the trials' details.
- ``seeded``: run with torch (and optionally Python's ``random``) seeded, under one lock.
- ``reference_point``: the hypervolume reference point for several objectives.
- ``unfilled``, ``failure``: NaN rows with the reason the model was not used.
- ``replace_duplicates``: fill NaN rows and replace repeated points.

Arrays are in the unit cube of ``engines.space``; ``History.Y`` is minimized, and the models
fitted here maximize, so their targets are ``-Y``.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import torch

# BoTorch's numerically careful log(phi(u) + u Phi(u)): private, so the version is pinned and a
# test compares the acquisition with BoTorch's public LogExpectedImprovement.
from botorch.acquisition.analytic import LogExpectedImprovement, _log_ei_helper
from botorch.exceptions.errors import BotorchError, ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import MixedSingleTaskGP, ModelListGP, SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms.outcome import Standardize
from botorch.utils.multi_objective.hypervolume import infer_reference_point
from botorch.utils.multi_objective.pareto import is_non_dominated
from botorch.utils.transforms import t_batch_mode_transform
from torch.autograd.function import once_differentiable

from engines import gp_likelihood
from engines.base import JSON, History, Problem
from engines.local_gp import LocalGP
from engines.quasirandom import SobolStream, sobol_points
from engines.space import SearchSpace

#: Failures that mean "the numerics did not work out on this data": fall back to Sobol.
NUMERICAL_ERRORS = (BotorchError, ModelFittingError, RuntimeError)
#: L-BFGS iterations of the marginal-likelihood fit: a flat likelihood (few points, many
#: kernel hyperparameters) can take thousands for a negligible gain.
FIT_MAXITER = 200
#: A fully discrete space with at most this many cells is enumerated to replace duplicates.
_MAX_ENUMERATED_CELLS = 100_000
#: Seeding torch (and, for large categoricals, Python's ``random`` that BoTorch's mixed optimizer
#: draws from) is process-global; asks in threads of one process take turns.
_SEEDED_LOCK = threading.Lock()
_REPLACED = "duplicate of an observed, pending or earlier point"
#: BoTorch's floor on LogEI's posterior standard deviation (the square root of its min_var).
_MIN_SIGMA = 1e-6

Extra = TypeVar("Extra")


def sobol_then_model(
    problem: Problem,
    history: History,
    count: int,
    n_initial: int,
    stream: SobolStream,
    rng: np.random.Generator,
    model_points: Callable[[np.ndarray, int], tuple[np.ndarray, list[JSON], Extra]],
) -> tuple[np.ndarray, list[JSON], Extra | None]:
    """The skeleton of a model-based ask: until ``n_initial`` trials (completed plus pending)
    exist, points come from the study's Sobol ``stream``; the rest from ``model_points(X_pending,
    k) -> (X: (k, d) snapped, details, extra)``, where ``X_pending`` holds the pending trials
    plus this batch's Sobol points and NaN rows ask for a fallback. Rows equal (after snapping) to
    an observed, pending, failed or earlier point are replaced by Sobol points.

    Returns ``X: (count, d)``, the details, and the model's ``extra`` (``None`` when the model
    was not asked).
    """
    space, d = problem.space, problem.d
    n_sobol = min(count, max(0, n_initial - history.n - len(history.X_pending)))
    if d == 0:  # only fixed parameters: every point is the same empty point
        n_sobol = count
    taken = np.vstack([history.X, history.X_pending])
    X = space.snap(sobol_points(problem, taken, n_sobol, stream))
    details: list[JSON] = [{"source": "sobol"} for _ in range(n_sobol)]
    extra = None
    if count > n_sobol:
        X_model, model_details, extra = model_points(
            np.vstack([history.X_pending, X]), count - n_sobol
        )
        X = np.vstack([X, X_model])
        details += model_details
    if d:
        X = replace_duplicates(problem, history, X, details, stream, rng)
    return X.reshape(count, d), details, extra


def training_data(problem: Problem, history: History) -> tuple[np.ndarray, np.ndarray] | str:
    """``(X: (n, d) snapped, targets: (n, m + k))`` with ``targets = [-Y, C]`` made finite,
    or the reason the model cannot be fitted."""
    if history.n < 2:
        return "fewer than 2 completed trials"
    columns = []
    for j in range(problem.n_objectives):
        y = history.Y[:, j]
        finite = np.isfinite(y)
        if finite.sum() < 2:
            return f"objective {j} has fewer than 2 finite values"
        columns.append(-np.where(finite, y, y[finite].max()))
    for i in range(problem.n_constraints):
        c = history.C[:, i]
        finite = np.isfinite(c)
        if finite.any():
            worst = max(c[finite].max(), 0.0) + max(float(np.ptp(c[finite])), 1.0)
        else:
            worst = 1.0
        columns.append(np.where(finite, c, worst))
    return problem.space.snap(history.X), np.stack(columns, axis=1)


def fit_gp(
    X: torch.Tensor,
    y: np.ndarray,
    cat_dims: list[int],
    maxiter: int = FIT_MAXITER,
    start: Callable[[SingleTaskGP], None] | None = None,
) -> SingleTaskGP:
    """A GP on ``X: (n, d)`` and ``y: (n,)``, hyperparameters by maximum marginal likelihood
    (at most ``maxiter`` L-BFGS iterations, from the hyperparameters ``start`` sets on the new
    model, when given). With ``y: (n, m)``, a batch of ``m`` independent GPs, one per column,
    fitted together: BoTorch runs L-BFGS for each member on its own likelihood, evaluating all
    members in one call."""
    Y = torch.as_tensor(y, dtype=torch.float64)
    Y = Y.unsqueeze(-1) if Y.ndim == 1 else Y
    model: SingleTaskGP
    if cat_dims:
        model = MixedSingleTaskGP(
            X, Y, cat_dims=cat_dims, outcome_transform=Standardize(m=Y.shape[-1])
        )
    else:
        model = SingleTaskGP(X, Y, outcome_transform=Standardize(m=Y.shape[-1]))
    if start is not None:
        start(model)
    mll, closure = gp_likelihood.objective(model)
    fit_gpytorch_mll(mll, closure=closure, optimizer_kwargs={"options": {"maxiter": maxiter}})
    return model


def plain_rbf(model: SingleTaskGP) -> bool:
    """Whether the posterior written out in torch applies to this model
    (``log_expected_improvement``, ``engines.sample_paths``): one output of the modules
    ``engines.gp_likelihood.has_default_rbf_modules`` accepts."""
    return gp_likelihood.has_default_rbf_modules(model) and model.num_outputs == 1


def joint_model(models: list[SingleTaskGP]) -> Model:
    """The GPs of ``models`` (each fitted by ``fit_gp`` on the same inputs, one output each) as
    one model with their outputs in order; see the module docstring."""
    if len(models) == 1:
        return models[0]
    if not all(plain_rbf(m) for m in models):
        return ModelListGP(*models)
    X = models[0].train_inputs[0]
    Y = torch.stack([_raw_targets(m) for m in models], dim=-1)
    joint = SingleTaskGP(X, Y, outcome_transform=Standardize(m=len(models)))
    lengthscale, noise, constant = stacked_hyperparameters(models)
    with torch.no_grad():
        joint.covar_module.lengthscale = lengthscale.reshape(joint.covar_module.lengthscale.shape)
        joint.likelihood.noise = noise.reshape(joint.likelihood.noise.shape)
        joint.mean_module.constant.copy_(constant.reshape(joint.mean_module.constant.shape))
    return joint.eval()


def stacked_hyperparameters(
    models: list[SingleTaskGP],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lengthscales ``(G, d)``, noises ``(G,)`` and mean constants ``(G,)`` of one-output RBF
    GPs, detached from their parameters."""
    lengthscale = torch.stack([m.covar_module.lengthscale.detach().reshape(-1) for m in models])
    noise = torch.stack([m.likelihood.noise.detach().reshape(()) for m in models])
    constant = torch.stack([m.mean_module.constant.detach().reshape(()) for m in models])
    return lengthscale, noise, constant


class _RBFLogEI(LogExpectedImprovement):
    """BoTorch's analytic LogEI of a GP as ``fit_gp`` fits it without categorical coordinates,
    its posterior moments read from ``LocalGP``, which writes them out, and its gradient in
    closed form (``_LogEIValue``) instead of by autograd through gpytorch's modules: the
    acquisition optimizer evaluates it about 40 times per ask, where each evaluation's cost is
    mostly per-operation overhead."""

    def __init__(self, model: SingleTaskGP, gp: LocalGP, best_f: torch.Tensor) -> None:
        super().__init__(model, best_f=best_f)
        self._gp = gp

    @t_batch_mode_transform(expected_q=1)  # type: ignore[arg-type]  # (typed for the base class)
    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """LogEI ``(...)`` at ``X: (..., 1, d)``, as ``LogExpectedImprovement.forward``."""
        Z = X.reshape(-1, X.shape[-1])
        return _LogEIValue.apply(Z, self._gp, self.best_f).reshape(X.shape[:-2])


class _LogEIValue(torch.autograd.Function):
    """``log EI(x) = log h(u) + log sigma``, ``u = (mu - best) / sigma``,
    ``h(u) = phi(u) + u Phi(u)`` (BoTorch's ``_log_ei_helper`` for the value), with
    ``d log EI / dx = Phi(u) / h(u) du/dx + dsigma/dx / sigma`` and
    ``du/dx = (dmu/dx - u dsigma/dx) / sigma`` from ``LocalGP``'s closed-form moments, in
    original units. sigma is clamped at BoTorch's 1e-6, where its gradient is zero."""

    @staticmethod
    def forward(ctx: Any, Z: torch.Tensor, gp: LocalGP, best_f: torch.Tensor) -> torch.Tensor:
        with_gradient = ctx.needs_input_grad[0]
        mean, std, d_mean, d_std = gp.moments_and_gradients(Z, with_gradient)
        mean = gp.offset + gp.scale * mean
        sigma = (gp.scale * std).clamp_min(_MIN_SIGMA)
        u = (mean - best_f) / sigma
        log_h = _log_ei_helper(u)
        if with_gradient:
            assert d_mean is not None and d_std is not None
            clamped = (gp.scale * std < _MIN_SIGMA)[:, None]
            d_sigma = torch.where(clamped, 0.0, gp.scale * d_std)
            d_u = (gp.scale * d_mean - u[:, None] * d_sigma) / sigma[:, None]
            d_log_h = torch.exp(torch.special.log_ndtr(u) - log_h)[:, None]
            ctx.save_for_backward(d_log_h * d_u + d_sigma / sigma[:, None])
        return log_h + sigma.log()

    @staticmethod
    @once_differentiable  # the saved gradient carries no graph: a second derivative would be 0
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (d_value,) = ctx.saved_tensors
        return grad[:, None] * d_value, None, None


def log_expected_improvement(
    model: SingleTaskGP, X_observed: torch.Tensor
) -> LogExpectedImprovement:
    """Analytic LogEI of a one-output ``model`` above its best posterior mean at ``X_observed``
    (the incumbent of noisy observations): with its posterior written out (``_RBFLogEI``, whose
    factorization also gives that mean) when ``fit_gp`` fitted it without categorical
    coordinates."""
    with torch.no_grad():
        if not plain_rbf(model):
            best_f = model.posterior(X_observed).mean.max()
            return LogExpectedImprovement(model, best_f=best_f)
        gp = LocalGP(model)
        best_f = gp.offset + gp.scale * gp.mean(X_observed).max()
    return _RBFLogEI(model, gp, best_f)


def _raw_targets(model: SingleTaskGP) -> torch.Tensor:
    """A fitted model's training targets ``(n,)`` in their original units."""
    transform: Standardize = model.outcome_transform  # type: ignore[assignment]
    return transform.means.reshape(()) + transform.stdvs.reshape(()) * model.train_targets


def lengthscales(model: SingleTaskGP, d: int) -> list[float | None]:
    """The fitted lengthscale of each of the ``d`` input coordinates (unit-cube units, four
    significant digits), from the first kernel that has one for it; ``None`` where no kernel
    has one (a mixed GP's categorical coordinates under an isotropic kernel have a shared one)."""
    found: list[float | None] = [None] * d
    for kernel in model.covar_module.modules():
        scale = getattr(kernel, "lengthscale", None)
        if not isinstance(scale, torch.Tensor):
            continue
        active = getattr(kernel, "active_dims", None)
        dims = active.tolist() if isinstance(active, torch.Tensor) else list(range(d))
        values = scale.detach().reshape(-1).tolist()
        values = values * len(dims) if len(values) == 1 else values
        for j, value in zip(dims, values, strict=False):
            if found[j] is None:
                found[j] = float(f"{value:.4g}")
    return found


def reference_point(problem: Problem, targets: np.ndarray) -> torch.Tensor:
    """The reference point ``(m,)`` in the maximization orientation of the models.

    ``targets: (n, m + k)``, the first ``m`` columns are ``-Y``.
    """
    if problem.reference_point is not None:
        return torch.as_tensor(-problem.reference_point, dtype=torch.float64)
    m = problem.n_objectives
    feasible = np.all(targets[:, m:] <= 0.0, axis=1)
    Y = torch.as_tensor(targets[feasible if feasible.any() else slice(None), :m])
    return infer_reference_point(Y[is_non_dominated(Y)])


def needs_python_random(space: SearchSpace) -> bool:
    # BoTorch's mixed optimizer samples the neighbours of categoricals with more than 20 choices
    # with Python's global ``random``.
    return any(dim.kind == "categorical" and (dim.levels or 0) > 20 for dim in space.dimensions)


@contextmanager
def seeded(seed: int, python_random: bool) -> Iterator[None]:
    """Run with torch (and optionally Python's ``random``) seeded, restoring both afterwards."""
    with _SEEDED_LOCK, torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"botorch|gpytorch|linear_operator")
        torch.manual_seed(seed)
        saved = random.getstate() if python_random else None
        if python_random:
            random.seed(seed)
        try:
            yield
        finally:
            if saved is not None:
                random.setstate(saved)


def unfilled(d: int, count: int, reason: str) -> tuple[np.ndarray, list[JSON]]:
    """``count`` NaN rows, ``(count, d)``, to be filled with Sobol points, and their details."""
    details: list[JSON] = [{"source": "sobol", "fallback": reason} for _ in range(count)]
    return np.full((count, d), np.nan), details


def failure(exc: Exception) -> str:
    """The reason, for a point's details, that the model failed with ``exc``."""
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def replace_duplicates(
    problem: Problem,
    history: History,
    X: np.ndarray,
    details: list[JSON],
    stream: SobolStream,
    rng: np.random.Generator,
) -> np.ndarray:
    """Fill NaN rows of ``X: (count, d)`` and replace rows equal (after snapping) to an observed,
    pending, failed or earlier row by fresh Sobol points; updates ``details`` and returns the new
    X.

    In a fully discrete space that Sobol fails to cover, a free cell is drawn uniformly; when
    every cell is taken, duplicates remain.
    """
    space = problem.space
    X = X.copy()
    rows = list(space.snap(np.vstack([history.X, history.X_pending, history.X_failed])))
    taken = {_key(row) for row in rows}
    for i in range(len(X)):
        fill = bool(np.isnan(X[i]).any())
        if fill or _key(X[i]) in taken:
            X[i] = space.snap(
                sobol_points(problem, np.array(rows).reshape(-1, space.d), 1, stream)
            )[0]
            if not fill:
                details[i] = {"source": "sobol", "replaced": _REPLACED}
        if _key(X[i]) in taken:
            free = _free_cell(space, taken, rng)
            if free is None:
                details[i] = {**details[i], "duplicate": "no free value left in the space"}
            else:
                X[i], details[i] = free, {**details[i], "source": "uniform"}
        rows.append(X[i])
        taken.add(_key(X[i]))
    return X


def _key(x: np.ndarray) -> bytes:
    """A hashable key of a snapped point ``x: (d,)`` (``+ 0.0`` turns -0.0 into 0.0)."""
    return (np.asarray(x, dtype=np.float64) + 0.0).tobytes()


def _free_cell(
    space: SearchSpace, taken: set[bytes], rng: np.random.Generator
) -> np.ndarray | None:
    """A uniformly drawn cell centre ``(d,)`` not in ``taken``, if the space is fully discrete and
    small enough to enumerate; otherwise or when all cells are taken, ``None``."""
    levels = [dim.levels for dim in space.dimensions]
    if any(n is None for n in levels) or math.prod(n or 1 for n in levels) > _MAX_ENUMERATED_CELLS:
        return None
    axes = [[(i + 0.5) / (n or 1) for i in range(n or 1)] for n in levels]
    cells = space.snap(np.array(list(itertools.product(*axes)), dtype=np.float64))
    free = [cell for cell in cells if _key(cell) not in taken]
    return free[int(rng.integers(len(free)))] if free else None
