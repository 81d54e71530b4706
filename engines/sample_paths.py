"""Posterior sample paths of the GPs ``engines.bo.fit_gp`` fits, and batch Thompson sampling
from them.

- ``SamplePaths``: ``S`` sample paths of each of several GPs by pathwise conditioning with
  random Fourier features [Wilson2020pathwise], written out in torch (``pom`` evaluates its
  samples on them).
- ``thompson_points``: the maximizers of posterior sample paths of one GP (batch Thompson
  sampling [Kandasamy2018pts]), for points computed ahead of the asks
  (``GPEngine.suggest_ahead``).

References:
    [Wilson2020pathwise] J. T. Wilson, V. Borovitskiy, A. Terenin, P. Mostowsky,
        M. P. Deisenroth. Efficiently sampling functions from Gaussian process posteriors.
        ICML 2020.
    [Kandasamy2018pts] K. Kandasamy, A. Krishnamurthy, J. Schneider, B. Poczos. Parallelised
        Bayesian optimisation via Thompson sampling. AISTATS 2018.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms.outcome import Standardize
from linear_operator.utils.cholesky import psd_safe_cholesky
from scipy.optimize import minimize
from torch.autograd.function import once_differentiable
from torch.quasirandom import SobolEngine

from engines.bo import plain_rbf, stacked_hyperparameters
from engines.local_gp import rbf

#: ``thompson_points``: random Fourier features per sample path; candidates each path is scored
#: on, half Sobol points, half Gaussian perturbations (this deviation, in the unit cube) of the
#: best observed points (this many); L-BFGS-B iterations refining each path's best candidate.
_TS_FEATURES = 1024
_TS_CANDIDATES = 2048
_TS_LOCAL_SIGMA = 0.05
_TS_TOP = 10
_TS_MAXITER = 50
#: Points are evaluated in chunks whose ``(G, S or 1, chunk, F)`` features stay under this many
#: numbers (128 MB in float64).
FEATURES_AT_ONCE = 2**24


class SamplePaths:
    """``S`` posterior sample paths of each of several GPs, by pathwise conditioning with random
    Fourier features [Wilson2020pathwise]. For a GP as ``fit_gp`` fits it without categorical
    coordinates (constant mean ``c``, RBF kernel ``k`` with lengthscales ``l`` and unit
    variance, noise ``s2``, targets ``y`` standardized), on inputs ``X``, path ``s`` is::

        f(x) = c + g(x) + k(x, X) (K + s2 I)^-1 (y - c - g(X) - e),   e ~ N(0, s2 I)
        g(x) = sqrt(2 / F) sum_i w_i cos(o_i . (x / l) + b_i)

    with ``F`` features, ``o_i ~ N(0, I)`` and ``b_i ~ U(0, 2 pi)`` shared by a GP's paths,
    ``w_i ~ N(0, 1)`` each path's own, then un-standardized: the paths BoTorch's
    ``draw_matheron_paths`` draws for these models, written out in torch, so that evaluating and
    differentiating them costs a few tensor operations instead of a tree of kernel modules.
    Draws from torch's random generator: seed it (``seeded``).
    """

    def __init__(self, models: list[SingleTaskGP], S: int, num_features: int) -> None:
        if not all(plain_rbf(m) for m in models):
            raise TypeError("SamplePaths needs one-output RBF GPs as fit_gp fits them")
        X = models[0].train_inputs[0]
        if any(not torch.equal(m.train_inputs[0], X) for m in models):
            raise ValueError("SamplePaths needs GPs fitted on the same inputs")
        G, n, d = len(models), X.shape[0], X.shape[-1]
        dtype = X.dtype
        # Fixed functions: no graph to the GPs' hyperparameters.
        self.lengthscale, noise, self.constant = stacked_hyperparameters(models)
        transforms: list[Standardize] = [m.outcome_transform for m in models]  # type: ignore[misc]
        self.y_mean = torch.stack([t.means.reshape(()) for t in transforms])
        self.y_std = torch.stack([t.stdvs.reshape(()) for t in transforms])
        self.omega = torch.randn(G, 1, num_features, d, dtype=dtype)
        self.phase = 2 * math.pi * torch.rand(G, 1, 1, num_features, dtype=dtype)
        self.weight = math.sqrt(2 / num_features) * torch.randn(G, S, num_features, dtype=dtype)
        self.Z_train = (X / self.lengthscale[:, None, :])[:, None]  # (G, 1, n, d)
        K = rbf(self.Z_train, self.Z_train)[:, 0] + noise[:, None, None] * torch.eye(n, dtype=dtype)
        targets = torch.stack([m.train_targets for m in models])[:, None, :]  # (G, 1, n)
        errors = noise.sqrt()[:, None, None] * torch.randn(G, S, n, dtype=dtype)
        residual = targets - self.constant[:, None, None] - self._prior(self.Z_train) - errors
        solved = torch.cholesky_solve(residual.transpose(1, 2), psd_safe_cholesky(K))  # (G, n, S)
        self.update = solved  # (G, n, S)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``(S, N, G)``: every path at ``x``, ``(N, d)`` or, one set per path, ``(S, N, d)``;
        differentiable in ``x`` (per-path points: by the closed-form gradient,
        ``values_and_gradients``)."""
        own_points = x.dim() == 3 and x.shape[0] == self.weight.shape[1]
        if own_points and x.requires_grad and torch.is_grad_enabled():
            return _PathValues.apply(x, self)
        # (G, 1, N, d) for the same points on every path, else (G, S, N, d).
        Z = x.to(self.lengthscale.dtype)[None] / self.lengthscale[:, None, None, :]
        parts = []
        for Zc in self._chunks(Z):
            kernel = rbf(Zc, self.Z_train)  # (G, S or 1, chunk, n)
            parts.append(self._prior(Zc) + self._update(kernel))
        return self._outputs(torch.cat(parts, dim=2))

    def values_and_gradients(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(S, N, G)`` values and ``(S, N, G, d)`` gradients of every path at its own points
        ``x: (S, N, d)``, in closed form: with ``z = x / l``,
        ``dg/dz = -sqrt(2 / F) sum_i w_i sin(o_i . z + b_i) o_i`` and, for the update
        ``sum_j v_j k(z, z_j)``, ``sum_j v_j k(z, z_j) (z_j - z)``; both times ``y_std / l``.
        One pass instead of autograd's graph: half the work of a refinement step. Builds no
        graph (the in-place sines overwrite what autograd would keep)."""
        x = x.detach().to(self.lengthscale.dtype)
        Z = x[None] / self.lengthscale[:, None, None, :]  # (G, S, N, d)
        G, S, _, d = Z.shape
        omega, weight = self.omega[:, 0], self.weight[:, :, None, :]  # (G, F, d), (G, S, 1, F)
        F = omega.shape[1]
        values, slopes = [], []
        for Zc in self._chunks(Z):
            # All points of a GP in one product (a batch per path is many tiny products).
            angle = (Zc.reshape(G, -1, d) @ omega.transpose(1, 2)).reshape(G, S, -1, F)
            angle += self.phase
            prior = (torch.cos(angle) * weight).sum(-1)  # (G, S, chunk)
            sine = angle.sin_().mul_(weight).reshape(G, -1, F)
            prior_slope = -(sine @ omega).reshape(Zc.shape)
            weighted = rbf(Zc, self.Z_train) * self.update.transpose(1, 2)[:, :, None, :]
            update = weighted.sum(-1)  # (G, S, chunk)
            update_slope = weighted @ self.Z_train - Zc * update[..., None]
            values.append(prior + update)
            slopes.append(prior_slope + update_slope)
        scale = self.y_std[:, None, None, None] / self.lengthscale[:, None, None, :]
        slope = scale * torch.cat(slopes, 2)  # (G, S, N, d)
        return self._outputs(torch.cat(values, 2)), slope.permute(1, 2, 0, 3)

    def _chunks(self, Z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``Z: (G, S or 1, N, d)`` split along the points so that each chunk's features
        ``(G, S or 1, chunk, F)`` stay under ``FEATURES_AT_ONCE`` numbers."""
        chunk = max(1, FEATURES_AT_ONCE // (Z.shape[0] * Z.shape[1] * self.omega.shape[2]))
        return torch.split(Z, chunk, dim=2)

    def _outputs(self, centred: torch.Tensor) -> torch.Tensor:
        """``(S, N, G)``: the paths' values from ``centred: (G, S, N)``, their prior and
        update terms: plus the constant mean, in the targets' units."""
        values = self.constant[:, None, None] + centred
        return (self.y_mean[:, None, None] + self.y_std[:, None, None] * values).permute(1, 2, 0)

    def _update(self, kernel: torch.Tensor) -> torch.Tensor:
        """``(G, S, N)``: ``k(x, X) (K + s2 I)^-1 (...)`` from ``kernel: (G, S or 1, N, n)``."""
        if kernel.shape[1] == 1:  # the same points for every path: no copy of the kernel per path
            return (kernel[:, 0] @ self.update).transpose(1, 2)
        return (kernel @ self.update.transpose(1, 2)[..., None])[..., 0]

    def _prior(self, Z: torch.Tensor) -> torch.Tensor:
        """``(G, S, N)``: the prior samples ``g`` at ``Z: (G, S or 1, N, d)`` (scaled inputs)."""
        features = torch.cos(Z @ self.omega.transpose(-1, -2) + self.phase)  # (G, S or 1, N, F)
        if Z.shape[1] == 1:  # the same points for every path: one product for all
            return (features[:, 0] @ self.weight.transpose(1, 2)).transpose(1, 2)
        return (features @ self.weight[..., None])[..., 0]


class _PathValues(torch.autograd.Function):
    """``SamplePaths`` at per-path points as one autograd node over its closed-form gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, paths: SamplePaths) -> torch.Tensor:
        values, gradients = paths.values_and_gradients(x)
        ctx.save_for_backward(gradients)
        return values

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, upstream: torch.Tensor) -> tuple[torch.Tensor, None]:
        (gradients,) = ctx.saved_tensors  # (S, N, G, d)
        return (upstream[..., None] * gradients).sum(-2), None


def thompson_points(model: SingleTaskGP, count: int, bounds: torch.Tensor) -> np.ndarray:
    """``(count, d)`` within ``bounds: (2, d)``: the maximizers of ``count`` posterior sample
    paths of ``model`` (one output, maximized), drawn by pathwise conditioning with random
    Fourier features. Each path's best of the candidates (Sobol points, and perturbations of
    the best observed points) is refined by L-BFGS-B. Uses torch's random generator: seed it
    (``seeded``)."""
    X, y = model.train_inputs[0], model.train_targets
    d = X.shape[-1]
    lower, upper = bounds[0], bounds[1]
    half = _TS_CANDIDATES // 2
    best = X[torch.argsort(y, descending=True)[:_TS_TOP]]
    local = best[torch.randint(len(best), (half,))] + _TS_LOCAL_SIGMA * torch.randn(half, d)
    sobol = SobolEngine(d, scramble=True, seed=int(torch.randint(2**31, ())))
    candidates = torch.cat([lower + (upper - lower) * sobol.draw(half, dtype=X.dtype), local])
    candidates = torch.maximum(torch.minimum(candidates, upper), lower)
    paths = SamplePaths([model], count, _TS_FEATURES)
    with torch.no_grad():
        start_values, best = paths(candidates)[..., 0].max(dim=-1)
    starts = candidates[best]  # (count, d)

    def negated_sum(z: np.ndarray) -> tuple[float, np.ndarray]:
        # The paths are independent: one sum, each point's gradient is its own path's.
        x = torch.tensor(z.reshape(count, 1, d), dtype=X.dtype, requires_grad=True)
        loss = -paths(x).sum()
        loss.backward()
        assert x.grad is not None
        return loss.detach().item(), x.grad.reshape(-1).numpy()

    box = list(zip(lower.tolist() * count, upper.tolist() * count, strict=True))
    result = minimize(
        negated_sum,
        starts.numpy().reshape(-1),
        jac=True,
        method="L-BFGS-B",
        bounds=box,
        options={"maxiter": _TS_MAXITER},
    )
    refined = torch.as_tensor(result.x.reshape(count, d))
    # One line search for all paths: keep a path's start where its own value went down.
    with torch.no_grad():
        better = paths(refined[:, None])[:, 0, 0] >= start_values
    return torch.where(better[:, None], refined, starts).numpy()
