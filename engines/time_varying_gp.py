"""Gaussian processes over time for the ``ipbt`` engine (PB2's surrogate [Parker-Holder2020]).

- ``fit_time_varying_gp``: a GP on rows ``(z, t)``, ``z`` in the unit cube and ``t`` a time,
  with kernel ``k = s^2 Matern52_ARD(z, z') (1 - eps)^{|t - t'| / 2}`` (``TimeKernel``, ``eps``
  in (0, 1) learned): the closer two rows are in time, the more they share.
- ``lcb_in_trust_region``: a batch of points minimizing ``LCB = mu - 3 sigma`` over random
  points of a box around a centre whose sides follow the normalized ARD lengthscales; each
  chosen point enters the model as a fantasy at its posterior mean (batch diversity, as in PB2).
- ``copula``: targets standardized by rank (rank to standard normal quantile).
- ``smoothed_improvement``: whether a GP smoothing of a score curve ends lower than the step
  before (IPBT's stagnation test); ``too_slow``, its other test, needs no GP.

Our design, for speed (a generation's fits and LCBs run while every worker waits): the fit's
loss (``TimeVaryingLoss``) and the LCB's posterior (``mean_and_std``) are written out in plain
torch, the same functions as gpytorch's (tests compare them), at a fraction of the cost of its
modules; the smoother's fit takes the closed form of ``engines.gp_likelihood``.

Fits stop after ``FIT_MAXITER`` L-BFGS iterations (IPBT fits two GPs a generation, and at most
100 rows the optimum moves little); a fit that fails keeps the initial hyperparameters. A fit
may start from the hyperparameters of the previous one (``init``, from ``hyperparameters``):
a generation adds a few rows, the optimum moves little, and ``WARM_MAXITER`` iterations from
there reach the likelihood of a cold fit's ``FIT_MAXITER`` (measured on 100 rows: within 0.5 %
of it, in a quarter of the time). Our design, for speed: a generation's fits run while every
worker waits for the next generation.

References:
    [Parker-Holder2020] J. Parker-Holder, V. Nguyen, S. Roberts. Provably Efficient Online
        Hyperparameter Optimization with Population-Based Bandits. NeurIPS 2020.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from botorch.exceptions.errors import ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from gpytorch.constraints import Interval
from gpytorch.kernels import Kernel, MaternKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.models import ExactGP
from linear_operator.utils.cholesky import psd_safe_cholesky
from scipy.stats import norm

from engines import bo, gp_likelihood

#: Random points of the trust region scored by the LCB.
N_CANDIDATES = 1024
LCB_BETA = 3.0
#: Points of the best-score curve ``too_slow`` looks at.
TOO_SLOW_WINDOW = 15
FIT_MAXITER = 50
WARM_MAXITER = 15
#: A GP's hyperparameters as JSON (raw values by parameter name), to warm-start the next fit.
Hyperparameters = dict[str, list[float]]


class TimeKernel(Kernel):
    """``k(t, t') = (1 - eps)^{|t - t'| / 2}`` on one input column (PB2's time-varying
    kernel); ``eps`` in (0, 1) is learned."""

    has_lengthscale = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.register_parameter("raw_eps", torch.nn.Parameter(torch.zeros(*self.batch_shape, 1)))
        self.register_constraint("raw_eps", Interval(1e-4, 0.999))

    @property
    def eps(self) -> torch.Tensor:
        return self.raw_eps_constraint.transform(self.raw_eps)

    def forward(
        self, x1: torch.Tensor, x2: torch.Tensor, diag: bool = False, **params: Any
    ) -> torch.Tensor:
        if diag:
            gap = (x1[..., 0] - x2[..., 0]).abs()
        else:
            gap = (x1[..., :, None, 0] - x2[..., None, :, 0]).abs()
        return torch.pow(1.0 - self.eps, gap / 2.0)


def copula(y: np.ndarray) -> np.ndarray:
    """Ranks mapped to standard normal quantiles (ties by order)."""
    ranks = np.argsort(np.argsort(y, kind="stable"), kind="stable")
    return norm.ppf((ranks + 0.5) / len(y))


def fit_time_varying_gp(
    X: np.ndarray, y: np.ndarray, init: Hyperparameters | None = None
) -> SingleTaskGP:
    """A GP on ``X: (n, k + 1)`` whose last column is time, ``y: (n,)`` already standardized:
    ``s^2 Matern52_ARD(first k columns) x TimeKernel(last column)``; its fit starts from
    ``init`` when given (and of this GP's shapes)."""
    k = X.shape[1] - 1
    covar = ScaleKernel(
        MaternKernel(nu=2.5, ard_num_dims=k, active_dims=tuple(range(k)))
        * TimeKernel(active_dims=(k,))
    )
    train_X = torch.as_tensor(X, dtype=torch.float64)
    train_Y = torch.as_tensor(y, dtype=torch.float64).unsqueeze(-1)
    with warnings.catch_warnings():
        # Time is not in [0, 1] and y is standardized by the caller: no transforms, so that
        # fantasies (lcb_in_trust_region) are on the scale of the targets.
        warnings.simplefilter("ignore")
        model = SingleTaskGP(train_X, train_Y, covar_module=covar, outcome_transform=None)
        _fit(model, init)
    return model


def hyperparameters(model: SingleTaskGP) -> Hyperparameters:
    """The model's raw hyperparameters, for ``init`` of a later fit."""
    return {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}


def _warm_start(model: SingleTaskGP, init: Hyperparameters | None) -> bool:
    """Set the model's hyperparameters from ``init`` if it has every one, in its shape."""
    params = dict(model.named_parameters())
    if not init or set(init) != set(params):
        return False
    if any(len(init[name]) != p.numel() for name, p in params.items()):
        return False
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.as_tensor(init[name], dtype=p.dtype).reshape(p.shape))
    return True


class TimeVaryingLoss:
    """gpytorch's exact marginal likelihood loss of a ``fit_time_varying_gp`` model, written in
    plain torch, with its gradient by autograd: a closure for ``fit_gpytorch_mll``, which calls
    it about 20 times a fit, where gpytorch's kernel and distribution modules cost about 3 ms an
    evaluation at 100 rows, nearly all of it per-operation overhead. With ``s^2`` the
    outputscale, ``M`` the Matern-5/2 kernel (``r`` the distance scaled by the lengthscales:
    ``(1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r)``), ``g_ij = |t_i - t_j| / 2``, constant mean
    ``c`` and noise ``s2`` under its log-normal prior::

        K = s^2 M * (1 - eps)^g + s2 I
        loss = -(log N(y | c, K) + log p(s2)) / n

    Each hyperparameter goes through its own constraint's transform, so the values and bounds
    are the model's; a test compares value and gradient with gpytorch's."""

    def __init__(self, mll: ExactMarginalLogLikelihood) -> None:
        model = mll.model
        self.named = [(name, p) for name, p in mll.named_parameters() if p.requires_grad]
        self.scale_kernel = model.covar_module
        self.matern, self.time = model.covar_module.base_kernel.kernels
        self.noise_covar = model.likelihood.noise_covar
        X = model.train_inputs[0]
        self.square, self.gap = _differences(X, X)
        self.y = model.train_targets

    def __call__(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        raws = [p.detach().requires_grad_() for _, p in self.named]
        values = dict(zip((name for name, _ in self.named), raws, strict=True))
        with torch.enable_grad():
            loss = self._loss(values)
            grads = torch.autograd.grad(loss, raws)
        return loss.detach(), grads

    def _loss(self, raw: dict[str, torch.Tensor]) -> torch.Tensor:
        def value(module: Any, name: str, full: str) -> torch.Tensor:
            # An unenforced constraint (the noise's: a bound of the fit) transforms nothing.
            return getattr(module, f"raw_{name}_constraint").transform(raw[full])

        prefix = "model.covar_module."
        outputscale = value(self.scale_kernel, "outputscale", prefix + "raw_outputscale")
        lengthscale = value(
            self.matern, "lengthscale", prefix + "base_kernel.kernels.0.raw_lengthscale"
        ).reshape(-1)
        eps = value(self.time, "eps", prefix + "base_kernel.kernels.1.raw_eps").reshape(())
        noise = value(self.noise_covar, "noise", "likelihood.noise_covar.raw_noise").reshape(())
        constant = raw["model.mean_module.raw_constant"].reshape(())
        L = _cholesky(self.square, self.gap, outputscale, lengthscale, eps, noise)
        resid = (self.y - constant).unsqueeze(-1)
        white = torch.linalg.solve_triangular(L, resid, upper=False)
        n = len(self.y)
        log_density = -0.5 * (white**2).sum() - L.diagonal().log().sum()
        log_density = log_density - 0.5 * n * math.log(2 * math.pi)
        log_prior = self.noise_covar.noise_prior.log_prob(noise).sum()
        return -(log_density + log_prior) / n


def _differences(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For rows ``(z, t)`` of ``A: (a, k + 1)`` and ``B: (b, k + 1)``: the squared differences
    of their ``z`` coordinates ``(a, b, k)`` and half their time gaps ``(a, b)``."""
    k = A.shape[-1] - 1
    square = (A[:, None, :k] - B[None, :, :k]) ** 2
    return square, (A[:, None, k] - B[None, :, k]).abs() / 2.0


def _covariance(
    square: torch.Tensor,
    gap: torch.Tensor,
    outputscale: torch.Tensor,
    lengthscale: torch.Tensor,
    eps: torch.Tensor,
) -> torch.Tensor:
    """``s^2 M(r) (1 - eps)^g`` from ``_differences``, the distance ``r`` clamped as gpytorch
    clamps it (so that its gradient at zero distance is zero)."""
    r = (square / lengthscale**2).sum(-1).clamp_min(1e-30).sqrt()
    matern = (1.0 + math.sqrt(5) * r + 5.0 / 3.0 * r**2) * torch.exp(-math.sqrt(5) * r)
    return outputscale * matern * torch.pow(1.0 - eps, gap)


def _cholesky(
    square: torch.Tensor,
    gap: torch.Tensor,
    outputscale: torch.Tensor,
    lengthscale: torch.Tensor,
    eps: torch.Tensor,
    noise: torch.Tensor,
) -> torch.Tensor:
    """The Cholesky factor of ``K + s2 I`` on the training rows, as gpytorch factors it: with
    jitter if need be, then ``NotPSDError`` (which BoTorch's fit retries on)."""
    K = _covariance(square, gap, outputscale, lengthscale, eps)
    return psd_safe_cholesky(K + noise * torch.eye(len(K), dtype=K.dtype))


def mean_and_std(model: SingleTaskGP, Z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The posterior mean and standard deviation ``(z,)`` of ``f`` at the rows of ``Z`` under a
    ``fit_time_varying_gp`` model and its training data (fantasies included), written out:
    ``mu = c + k(Z, X) alpha``, ``sigma^2 = s^2 - |L^-1 k(X, Z)|^2`` (gpytorch's posterior
    call costs about 9 ms of overhead, several times a generation)."""
    kernel = model.covar_module
    matern, time_kernel = kernel.base_kernel.kernels
    outputscale = kernel.outputscale.detach()
    lengthscale = matern.lengthscale.detach().reshape(-1)
    eps = time_kernel.eps.detach().reshape(())
    X, y = model.train_inputs[0], model.train_targets
    noise = model.likelihood.noise.detach().reshape(())
    L = _cholesky(*_differences(X, X), outputscale, lengthscale, eps, noise)
    constant = model.mean_module.constant.detach().reshape(())
    alpha = torch.cholesky_solve((y - constant).unsqueeze(-1), L).squeeze(-1)
    cross = _covariance(*_differences(Z, X), outputscale, lengthscale, eps)
    V = torch.linalg.solve_triangular(L, cross.T, upper=False)
    variance = (outputscale - (V * V).sum(0)).clamp_min(1e-12)
    return constant + cross @ alpha, variance.sqrt()


def _likelihood(
    model: SingleTaskGP,
) -> tuple[ExactMarginalLogLikelihood, Callable[[], Any]]:
    """The marginal likelihood to fit ``model`` by and the closure that evaluates it: the
    closed form of ``engines.gp_likelihood`` for the smoother (BoTorch's default modules),
    ``TimeVaryingLoss`` for a time-varying GP (gpytorch's likelihood, no closure of its own)."""
    mll, closure = gp_likelihood.objective(model)
    return mll, closure or TimeVaryingLoss(mll)


def _fit(model: SingleTaskGP, init: Hyperparameters | None = None) -> None:
    """Maximum marginal likelihood (at most ``FIT_MAXITER`` L-BFGS iterations: a generation
    fits two GPs, and the optimum moves little at this size); if the fit fails, the initial
    hyperparameters stay (a usable, if blunt, model).

    Under a fixed torch seed: after a failed attempt (a ``NotPSDError``) BoTorch retries from
    hyperparameters drawn from their priors with torch's global generator, which would make the
    proposal depend on what the process ran before. Seed 0 leaves every fit without a retry as
    it was."""
    maxiter = WARM_MAXITER if _warm_start(model, init) else FIT_MAXITER
    mll, closure = _likelihood(model)
    with bo.seeded(0, False), contextlib.suppress(ModelFittingError):
        fit_gpytorch_mll(mll, closure=closure, optimizer_kwargs={"options": {"maxiter": maxiter}})


def lcb_in_trust_region(
    model: SingleTaskGP,
    center: np.ndarray,
    fixed: np.ndarray,
    length: float,
    count: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``count`` points ``h`` in [0, 1]^d minimizing ``mu - 3 sigma`` at ``(h, fixed)`` over
    random points of the trust region around ``center``; each chosen point enters the model as
    a fantasy at its posterior mean before the next is chosen. Returns ``(count, d)``."""
    d = len(center)
    kernel = model.covar_module.base_kernel.kernels[0]
    ls = kernel.lengthscale.detach().numpy().ravel()[:d]
    weights = ls / np.exp(np.mean(np.log(ls)))
    half = np.clip(weights * length / 2.0, 0.0, 0.5)
    lower, upper = np.clip(center - half, 0.0, 1.0), np.clip(center + half, 0.0, 1.0)
    chosen = []
    for _ in range(count):
        H = lower + (upper - lower) * rng.random((N_CANDIDATES, d))
        Z = torch.as_tensor(np.hstack([H, np.tile(fixed, (N_CANDIDATES, 1))]))
        with torch.no_grad():
            mean, std = mean_and_std(model, Z)
            lcb = mean - LCB_BETA * std
        best = int(torch.argmin(lcb))
        chosen.append(H[best])
        fantasy_X = torch.cat([model.train_inputs[0], Z[best : best + 1]])
        fantasy_Y = torch.cat([model.train_targets, mean[best : best + 1]])
        ExactGP.set_train_data(model, fantasy_X, fantasy_Y, strict=False)
    return np.array(chosen)


def too_slow(best: list[float]) -> bool:
    """IPBT's "too slow": less than one standard deviation gained over the last
    ``TOO_SLOW_WINDOW - 1`` steps of ``best`` (lower is better)."""
    if len(best) < TOO_SLOW_WINDOW:
        return False
    fitness = -np.asarray(best, dtype=np.float64)
    z = (fitness - fitness.mean()) / (fitness.std() or 1.0)
    return bool(z.max() - z[: -(TOO_SLOW_WINDOW - 1)].max() < 1.0)


def smoothed_improvement(
    best: list[float], init: Hyperparameters | None = None
) -> tuple[bool, Hyperparameters]:
    """Whether a GP smoothing of ``best`` (lower is better) ends lower than the step before;
    and the smoother's hyperparameters (its fit starts from ``init`` when given)."""
    z = np.asarray(best, dtype=np.float64)
    z = (z - z.mean()) / (z.std() or 1.0)
    X = torch.linspace(0, 1, len(z), dtype=torch.float64).unsqueeze(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SingleTaskGP(X, torch.as_tensor(z).unsqueeze(-1), outcome_transform=None)
        _fit(model, init)
    with torch.no_grad():
        mean = model.posterior(X[-2:]).mean.squeeze(-1)
    return bool(mean[1] < mean[0]), hyperparameters(model)
