"""The marginal likelihood of the GPs ``engines.bo.fit_gp`` fits, with its gradient in closed
form, for BoTorch's L-BFGS-B to maximize without autograd.

For BoTorch's default one-output ``SingleTaskGP`` (RBF kernel with one lengthscale ``l_k`` per
coordinate and no outputscale, constant mean ``c``, Gaussian noise ``s2``, log-normal priors
on ``l`` and ``s2``, no constraint transform, targets ``y`` standardized), gpytorch's exact
marginal likelihood loss is

    loss = -(log N(y | c, K) + sum_k log p_l(l_k) + log p_s(s2)) / n,
    K = K0 + s2 I,   K0_ij = exp(-sum_k D_ijk / (2 l_k^2)),   D_ijk = (x_ik - x_jk)^2,

and with ``alpha = K^-1 (y - c)``, ``W = alpha alpha^T - K^-1`` and ``V = W * K0`` (elementwise,
symmetric, row sums ``v``),

    d log N / d l_k = sum_ij V_ij D_ijk / (2 l_k^3)
                    = (sum_i x_ik^2 v_i - sum_ij V_ij x_ik x_jk) / l_k^3,
    d log N / d s2  = tr(W) / 2,
    d log N / d c   = sum_i alpha_i,
    d log LogNormal(x | mu, sigma) / dx = -(1 + (log x - mu) / sigma^2) / x.

(the second form needs no ``(n, n, d)`` array). An evaluation is one Cholesky factorization,
one inverse and a few products, without autograd's graph, whose per-operation overhead
dominates at tens of trials (figures in docs/engines/gp.md). The distances are computed as
gpytorch computes them (centred inputs, by the norms, clamped, an exact zero diagonal), so the
value is gpytorch's; a test compares both and their gradients.
"""

from __future__ import annotations

import math

import torch
from botorch.models import SingleTaskGP
from gpytorch.priors import LogNormalPrior
from linear_operator.utils.cholesky import psd_safe_cholesky

#: The parameter names of ``ExactMarginalLogLikelihood(model.likelihood, model)`` whose
#: gradients ``MarginalLikelihood`` returns, for a model ``applies_to`` accepts.
NOISE = "likelihood.noise_covar.raw_noise"
CONSTANT = "model.mean_module.raw_constant"
LENGTHSCALE = "model.covar_module.raw_lengthscale"


def applies_to(model: SingleTaskGP, names: list[str]) -> bool:
    """Whether the closed form is the likelihood of this model, whose marginal likelihood has
    the free parameters ``names``: the parameters, priors and constraints it assumes
    (``engines.bo.plain_rbf`` checks the modules)."""
    kernel, noise = model.covar_module, model.likelihood.noise_covar
    priors = {name: prior for name, _, prior, _, _ in model.named_priors()}  # type: ignore[operator]
    return (
        sorted(names) == sorted([NOISE, CONSTANT, LENGTHSCALE])
        and set(priors) == {"covar_module.lengthscale_prior", "likelihood.noise_covar.noise_prior"}
        and all(type(p) is LogNormalPrior for p in priors.values())
        and not kernel.raw_lengthscale_constraint.enforced
        and not noise.raw_noise_constraint.enforced
    )


class MarginalLikelihood:
    """A closure for ``botorch.fit.fit_gpytorch_mll``: called with no arguments, the loss at
    the model's current hyperparameters and its gradients, in the order of ``names``."""

    def __init__(self, model: SingleTaskGP, names: list[str]) -> None:
        X = model.train_inputs[0]
        self.model, self.names = model, names
        self.y = model.train_targets
        self.n = len(X)
        self.X = X - X.mean(0)
        self.lengthscale_prior = _LogNormal(model.covar_module.lengthscale_prior)
        self.noise_prior = _LogNormal(model.likelihood.noise_covar.noise_prior)

    def __call__(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        model = self.model
        with torch.no_grad():
            lengthscale = model.covar_module.raw_lengthscale  # (1, d)
            noise = model.likelihood.noise_covar.raw_noise  # (1,)
            constant = model.mean_module.raw_constant  # ()
            scales = lengthscale.reshape(-1)
            Z = self.X / scales
            norms = (Z * Z).sum(-1)
            # In place where it can be: at a few hundred trials allocating the (n, n) arrays
            # costs as much as the arithmetic.
            square = torch.addmm(norms[:, None] + norms[None, :], Z, Z.T, alpha=-2.0)
            square.clamp_min_(0.0).fill_diagonal_(0.0)
            K0 = square.mul_(-0.5).exp_()
            K = K0.clone()
            K.diagonal().add_(noise)
            L = psd_safe_cholesky(K)
            residual = self.y - constant
            alpha = torch.cholesky_solve(residual.unsqueeze(-1), L).squeeze(-1)
            log_density = -0.5 * (
                residual @ alpha
                + 2.0 * torch.diagonal(L).log().sum()
                + self.n * math.log(2 * math.pi)
            )
            W = torch.cholesky_inverse(L).neg_().addr_(alpha, alpha)
            trace_W = torch.diagonal(W).sum()
            V = W.mul_(K0)
            X = self.X
            d_lengthscale = ((X * X).T @ V.sum(1) - ((V @ X) * X).sum(0)) / scales**3
            log_lengthscale, d_log_lengthscale = self.lengthscale_prior(lengthscale)
            log_noise, d_log_noise = self.noise_prior(noise)
            grads = {
                LENGTHSCALE: -(d_lengthscale.reshape(lengthscale.shape) + d_log_lengthscale),
                NOISE: -(0.5 * trace_W + d_log_noise),
                CONSTANT: -alpha.sum(),
            }
            loss = -(log_density + log_lengthscale + log_noise) / self.n
            return loss, tuple(grads[name] / self.n for name in self.names)


class _LogNormal:
    """A log-normal prior's summed log density at ``x`` and its derivative at each element, in
    torch.distributions' order of operations: the prior's ``loc`` and ``scale`` may be
    float32, and its variance and log scale are then rounded in float32, as there (computed
    once, not at every evaluation)."""

    def __init__(self, prior: LogNormalPrior) -> None:
        self.loc = prior.loc.double()
        self.variance = (prior.scale**2).double()
        self.constant = prior.scale.log().double() + 0.5 * math.log(2 * math.pi)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_x = x.log()
        deviation = log_x - self.loc
        log_density = (-(deviation**2) / (2 * self.variance) - self.constant) - log_x
        return log_density.sum(), -(deviation / self.variance + 1.0) / x
