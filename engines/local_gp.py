"""The local GP surrogate of the ``lcbo`` engine: posterior, gradient information, merit, KKT.

``LocalGP`` holds a fitted BoTorch GP (``engines.bo.fit_gp``) in standardized units, with the
posterior written out so that torch autograd gives its gradients, or, for the mean and
standard deviation, ``moments_and_gradients`` in closed form (the kernel too: BoTorch's
default RBF, ``k(a, b) = exp(-||(a - b) / l||^2 / 2)``, evaluated directly, because gpytorch's
kernel call costs about a millisecond of Python per evaluation and the descent makes
thousands)::

    mu(x) = m + k(x, X) (K + s2 I)^-1 (y - m)
    sigma^2(x) = k(x, x) - k(x, X) (K + s2 I)^-1 k(X, x)

and the gradient information of extra points at an anchor ``a`` [Muller2021gibo]: with a
conditioning set ``A``, ``G = dk(a, A)/da``, ``g(z) = dk(a, z)/da`` and ``M = (K_A + s2 I)^-1``,
the trace of the gradient's posterior covariance drops by ``||G M k(A, z) - g(z)||^2 / v(z)``,
``v(z) = k(z, z) + s2 - k(z, A) M k(A, z)``, when ``z`` joins ``A`` (no values needed).

``Merit`` is the penalized surrogate ``Phi(x) = mu_f(x) + rho sum_j softplus_tau(u_j(x))`` with
the pessimistic scaled constraints ``u_j = (mu_cj + beta sigma_cj) / s_j``; ``kkt_residual`` the
KKT residual of ``min f s.t. c <= 0`` on the unit cube, with multipliers by non-negative least
squares. The ``lcbo`` module docstring states how the engine uses them.

References:
    [Muller2021gibo] S. Muller, A. von Rohr, S. Trimpe. Local policy search with Bayesian
        optimization. NeurIPS 2021.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import RBFKernel
from linear_operator.utils.cholesky import psd_safe_cholesky
from scipy.optimize import nnls

#: A constraint takes part in the multipliers when ``u_j >= -_ACTIVE`` (standardized units).
_ACTIVE = 0.1
#: A coordinate this close to 0 or 1 is on its bound.
_AT_BOUND = 1e-6
#: The largest ``(a, b, d)`` array of differences ``LocalGP.k`` builds (32 MB in float64).
_DIFFERENCES_MAX = 2**22


def rbf(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``exp(-|a - b|^2 / 2)`` for the rows of ``A: (..., N, d)`` and ``B: (..., n, d)``
    (inputs already divided by the lengthscales), the squared distances from the norms and one
    product, without an ``(N, n, d)`` array."""
    square = (
        (A * A).sum(-1)[..., :, None] + (B * B).sum(-1)[..., None, :] - 2 * A @ B.transpose(-1, -2)
    )
    return torch.exp(-0.5 * square.clamp_min(0.0))


class LocalGP:
    """A fitted GP in standardized units: its posterior, with gradients by autograd or in
    closed form, and the gradient information of extra points (module docstring)."""

    def __init__(self, model: SingleTaskGP, output: int = 0) -> None:
        """The GP of output ``output`` of ``model`` (a batch of independent GPs when it has
        several outputs, as ``fit_gp`` makes for several columns)."""
        model.eval()
        if not isinstance(model.covar_module, RBFKernel):
            raise TypeError(f"LocalGP needs an RBF kernel, got {type(model.covar_module)}")
        m = model.num_outputs
        X = model.train_inputs[0].detach()
        self.X: torch.Tensor = X[output] if m > 1 else X
        self.lengthscale = model.covar_module.lengthscale.detach().reshape(m, -1)[output]
        self.noise = float(model.likelihood.noise.detach().reshape(m, -1)[output, 0])
        self.constant = float(model.mean_module.constant.detach().reshape(m)[output])
        transform: Any = model.outcome_transform
        #: Standardization of the outputs: ``value = offset + scale * standardized``.
        self.offset = float(transform.means.reshape(m)[output])
        self.scale = float(transform.stdvs.reshape(m)[output])
        targets = model.train_targets.detach().reshape(m, -1)[output]
        with torch.no_grad():
            K = self.k(self.X, self.X) + self.noise * torch.eye(len(self.X), dtype=self.X.dtype)
            self.L = psd_safe_cholesky(K)
            resid = (targets - self.constant).unsqueeze(-1)
            self.alpha = torch.cholesky_solve(resid, self.L).squeeze(-1)

    def k(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """``(a, b)``: the kernel between the rows of ``A: (a, d)`` and ``B: (b, d)``. Small
        arrays take the differences themselves (exact, and the fewest operations for the
        descent's thousands of small calls); above ``_DIFFERENCES_MAX`` numbers the squared
        distances come from the norms and one product, centred as gpytorch does, since the
        ``(a, b, d)`` differences of 500 conditioning points, 5,000 candidates and d = 100
        would take 2 GB."""
        if A.shape[0] * B.shape[0] * A.shape[1] <= _DIFFERENCES_MAX:
            scaled = (A[:, None, :] - B[None, :, :]) / self.lengthscale
            return torch.exp(-0.5 * (scaled * scaled).sum(-1))
        centre = B.mean(0)
        return rbf((A - centre) / self.lengthscale, (B - centre) / self.lengthscale)

    def mean(self, Z: torch.Tensor) -> torch.Tensor:
        """Standardized posterior mean at ``Z: (s, d)``, ``(s,)``."""
        return self.constant + self.k(Z, self.X) @ self.alpha

    def std(self, Z: torch.Tensor) -> torch.Tensor:
        """Standardized posterior standard deviation at ``Z: (s, d)``, ``(s,)``."""
        V = torch.linalg.solve_triangular(self.L, self.k(self.X, Z), upper=False)
        return (1.0 - (V * V).sum(0)).clamp_min(1e-12).sqrt()

    def moments_and_gradients(
        self, Z: torch.Tensor, gradients: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Standardized posterior mean and standard deviation at ``Z: (s, d)``, each ``(s,)``,
        and (with ``gradients``) their gradients ``(s, d)`` in closed form: with
        ``k_i = k(z, x_i)``, ``dk_i/dz = -k_i (z - x_i) / l^2`` and ``beta = (K + s2 I)^-1 k``,
        ``dmu/dz = sum_i alpha_i dk_i/dz`` and ``dsigma/dz = -sum_i beta_i dk_i/dz / sigma``
        (zero where the variance is clamped, as autograd through ``std`` gives)."""
        k = self.k(Z, self.X)
        mean = self.constant + k @ self.alpha
        V = torch.linalg.solve_triangular(self.L, k.T, upper=False)
        variance = 1.0 - (V * V).sum(0)
        std = variance.clamp_min(1e-12).sqrt()
        if not gradients:
            return mean, std, None, None
        beta = torch.linalg.solve_triangular(self.L.T, V, upper=True).T
        inverse_square = self.lengthscale**-2

        def along(weights: torch.Tensor) -> torch.Tensor:
            """``sum_i w_i dk_i/dz`` for weights ``(s, n)``."""
            kw = k * weights
            return (kw @ self.X - Z * kw.sum(1, keepdim=True)) * inverse_square

        d_std = torch.where((variance > 1e-12)[:, None], -along(beta) / std[:, None], 0.0)
        return mean, std, along(self.alpha.expand_as(k)), d_std

    def hyperparameters(self) -> list[float]:
        """Log lengthscales, then log noise, rounded for the JSON state."""
        values = [*self.lengthscale.log().tolist(), math.log(self.noise)]
        return [round(v, 4) for v in values]

    def gradient_information(
        self, anchor: torch.Tensor, A: torch.Tensor, Z: torch.Tensor
    ) -> torch.Tensor:
        """``tr Sigma_grad(anchor | A) - tr Sigma_grad(anchor | A + z)`` for each row ``z`` of
        ``Z: (m, d)``, ``(m,)``; ``A: (a, d)`` is the conditioning set (no values needed)."""
        L, W = self._conditioning(anchor, A)
        V = torch.linalg.solve_triangular(L, self.k(A, Z), upper=False)
        u = W.T @ V - self._kernel_gradient(anchor, Z).T
        variance = 1.0 + self.noise - (V * V).sum(0)
        return (u * u).sum(0) / variance.clamp_min(1e-12)

    def gradient_trace(self, anchor: torch.Tensor, A: torch.Tensor) -> float:
        """``tr Sigma_grad(anchor | A)``: the posterior variance of the gradient, summed."""
        _, W = self._conditioning(anchor, A)
        r = torch.zeros_like(anchor, requires_grad=True)
        k = self.k(anchor[None, :], (anchor + r)[None, :]).reshape(())
        (g,) = torch.autograd.grad(k, r, create_graph=True)
        # For a stationary kernel, d2 k(a, b) / da_i db_i at b = a is -d2 k(a, a + r) / dr_i2.
        prior = -sum(
            float(torch.autograd.grad(g[i], r, retain_graph=True)[0][i]) for i in range(len(r))
        )
        return prior - float((W * W).sum().detach())

    def _conditioning(
        self, anchor: torch.Tensor, A: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The Cholesky factor ``L`` of ``K_A + s2 I`` and ``W = L^-1 G``, ``G = dk(anchor, A)``."""
        K = self.k(A, A) + self.noise * torch.eye(len(A), dtype=A.dtype)
        L = psd_safe_cholesky(K)
        W = torch.linalg.solve_triangular(L, self._kernel_gradient(anchor, A), upper=False)
        return L, W

    def _kernel_gradient(self, anchor: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        """``(m, d)``: row ``i`` is ``dk(anchor, z_i) / d anchor``. The kernel is stationary, so
        that is ``-dk(anchor, z_i) / dz_i``, all rows from one backward pass."""
        Z = Z.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(self.k(anchor[None, :], Z).sum(), Z)
        return -grad


class Merit:
    """``Phi(Z)`` for ``Z: (s, d)``, ``(s,)``: the penalized surrogate of the module docstring
    (the smooth total violation when ``feasibility``)."""

    def __init__(
        self,
        models: Sequence[LocalGP],
        penalty: float,
        feasibility: bool,
        beta: float,
        temperature: float,
    ) -> None:
        self.objective, self.constraints = models[0], list(models[1:])
        self.penalty, self.feasibility = penalty, feasibility
        self.beta, self.tau = beta, temperature

    def scaled_constraints(self, Z: torch.Tensor) -> torch.Tensor:
        """``u_j(Z)``, ``(s, k)``: pessimistic constraint values over their local std."""
        columns = [c.offset / c.scale + c.mean(Z) + self.beta * c.std(Z) for c in self.constraints]
        return torch.stack(columns, dim=-1) if columns else torch.zeros(len(Z), 0)

    def __call__(self, Z: torch.Tensor) -> torch.Tensor:
        u = self.scaled_constraints(Z)
        violation = (self.tau * torch.nn.functional.softplus(u / self.tau)).sum(-1)
        if self.feasibility:
            return violation
        return self.objective.mean(Z) + self.penalty * violation

    def weights(self, x: torch.Tensor) -> list[float]:
        """Each GP's weight in the merit's linearization at ``x: (d,)``."""
        with torch.no_grad():
            slopes = torch.sigmoid(self.scaled_constraints(x[None, :])[0] / self.tau).tolist()
        if self.feasibility:
            return [0.0, *slopes] if any(s > 0 for s in slopes) else [1.0] * (1 + len(slopes))
        return [1.0, *(self.penalty * s for s in slopes)]


def merit_gradient_std(
    models: Sequence[LocalGP], weights: list[float], anchor: torch.Tensor, A: torch.Tensor
) -> float:
    """``sqrt(sum_i w_i^2 tr Sigma_grad_i(anchor | A))``: the posterior standard deviation of
    the merit's gradient at ``anchor: (d,)``, conditioned on ``A: (a, d)``."""
    total = sum(w**2 * m.gradient_trace(anchor, A) for w, m in zip(weights, models, strict=True))
    return math.sqrt(max(total, 0.0))


def most_informative(
    models: Sequence[LocalGP],
    weights: list[float],
    anchor: torch.Tensor,
    A: torch.Tensor,
    candidates: torch.Tensor,
    n: int,
) -> list[np.ndarray]:
    """``n`` rows of ``candidates: (M, d)`` chosen greedily, each the one whose addition to
    ``A`` most reduces the weighted trace of the gradient's posterior covariance at
    ``anchor``; each chosen row joins ``A`` before the next choice."""
    chosen = []
    for _ in range(n):
        gain = torch.zeros(len(candidates), dtype=torch.float64)
        for w, m in zip(weights, models, strict=True):
            if w > 0:
                gain += w**2 * m.gradient_information(anchor, A, candidates)
        j = int(torch.argmax(gain))
        chosen.append(candidates[j].numpy().copy())
        A = torch.cat([A, candidates[j : j + 1]])
        candidates = torch.cat([candidates[:j], candidates[j + 1 :]])
    return chosen


def kkt_at(models: Sequence[LocalGP], x: np.ndarray) -> tuple[float, np.ndarray]:
    """The KKT residual of the posterior means at ``x: (d,)`` and the constraint multipliers
    ``(k,)`` (zero for inactive constraints), all in standardized units."""
    tx = torch.as_tensor(x, dtype=torch.float64)[None, :].requires_grad_(True)
    grads, values = [], []
    for m in models:
        mean = m.mean(tx).sum()
        (g,) = torch.autograd.grad(mean, tx)
        grads.append(g[0].numpy())
        values.append(m.offset / m.scale + float(mean.detach()))
    c = np.array(values[1:])
    return kkt_residual(grads[0], np.array(grads[1:]).reshape(len(c), len(x)), c, x)


def kkt_residual(
    grad_f: np.ndarray, jac_c: np.ndarray, c: np.ndarray, x: np.ndarray
) -> tuple[float, np.ndarray]:
    """``(r_KKT, lambda)`` of minimizing ``f`` subject to ``c <= 0`` and ``x`` in the unit cube.

    ``grad_f: (d,)``, ``jac_c: (k, d)``, ``c: (k,)``, ``x: (d,)``. The multipliers of the
    constraints with ``c_j >= -0.1`` and of the bounds ``x`` sits on come from non-negative
    least squares of ``grad_f + J^T lambda + bound terms``; ``lambda: (k,)``.
    """
    d, k = len(x), len(c)
    active = np.flatnonzero(c >= -_ACTIVE)
    at_lower, at_upper = np.flatnonzero(x <= _AT_BOUND), np.flatnonzero(x >= 1 - _AT_BOUND)
    eye = np.eye(d)
    # Columns: gradients of the active constraints, -e_i for x_i >= 0, +e_i for x_i <= 1.
    A = np.column_stack([jac_c[active].T, -eye[:, at_lower], eye[:, at_upper]]).reshape(d, -1)
    multipliers = np.zeros(k)
    stationarity = grad_f
    if A.shape[1]:
        weights, _ = nnls(A, -grad_f)
        multipliers[active] = weights[: len(active)]
        stationarity = grad_f + A @ weights
    residual = np.linalg.norm(stationarity) + np.abs(multipliers * c).sum()
    return float(residual + np.maximum(c, 0.0).sum()), multipliers


def warm_start(values: list[list[float]]) -> Callable[[SingleTaskGP], None]:
    """A ``start`` for ``bo.fit_gp`` that sets the lengthscales and noise of ``values``, one
    list per output of the model."""

    def start(model: SingleTaskGP) -> None:
        tensor = torch.as_tensor(values, dtype=torch.float64).exp()
        lengthscale = tensor[:, :-1].clamp(min=0.03, max=1e4)
        model.covar_module.lengthscale = lengthscale.reshape(model.covar_module.lengthscale.shape)
        noise = tensor[:, -1].clamp(min=2e-4, max=1.0)
        model.likelihood.noise = noise.reshape(model.likelihood.noise.shape)

    return start
