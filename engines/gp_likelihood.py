"""The marginal likelihood of the GPs ``engines.bo.fit_gp`` fits, with its gradient in closed
form, for BoTorch's L-BFGS-B to maximize without autograd's graph.

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

A batch of ``m`` independent GPs (``fit_gp`` with several columns, as ``lcbo`` fits its
objective and constraints) is evaluated at once, each member's loss and gradient its own:
``ClosedFormLoss`` is the closure of a one-output fit, ``ClosedFormMLL`` the marginal
likelihood whose ``compute_custom_loss`` (BoTorch's hook for a custom loss) BoTorch's batched
fit calls, one autograd node over the same computation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import RBFKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.means import ConstantMean
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.priors import LogNormalPrior
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch.autograd.function import once_differentiable

#: The parameter names of ``ExactMarginalLogLikelihood(model.likelihood, model)`` whose
#: gradients ``ClosedFormLoss`` returns, for a model ``applies_to`` accepts, in any order.
NOISE = "likelihood.noise_covar.raw_noise"
CONSTANT = "model.mean_module.raw_constant"
LENGTHSCALE = "model.covar_module.raw_lengthscale"


def has_default_rbf_modules(model: SingleTaskGP) -> bool:
    """Whether ``model`` (one output or a batch of independent ones) is made of BoTorch's
    default modules: RBF kernel, constant mean, homoskedastic Gaussian noise, no input
    transform."""
    return (
        type(model) is SingleTaskGP
        and type(model.covar_module) is RBFKernel
        and type(model.mean_module) is ConstantMean
        and type(model.likelihood) is GaussianLikelihood
        and getattr(model, "input_transform", None) is None
    )


def applies_to(model: SingleTaskGP) -> bool:
    """Whether the closed form is the likelihood of this model: the modules, free parameters
    (one lengthscale per input coordinate, the noise, the mean), priors and constraints it
    assumes."""
    if not has_default_rbf_modules(model):
        return False
    kernel, likelihood = model.covar_module, model.likelihood
    free = [name.rsplit(".", 1)[-1] for name, p in model.named_parameters() if p.requires_grad]
    priors = {name: prior for name, _, prior, _, _ in model.named_priors()}  # type: ignore[operator]
    return (
        sorted(free) == ["raw_constant", "raw_lengthscale", "raw_noise"]
        and kernel.active_dims is None
        and kernel.raw_lengthscale.shape[-1] == model.train_inputs[0].shape[-1]
        and set(priors) == {"covar_module.lengthscale_prior", "likelihood.noise_covar.noise_prior"}
        and all(type(p) is LogNormalPrior for p in priors.values())
        and not kernel.raw_lengthscale_constraint.enforced
        and not likelihood.noise_covar.raw_noise_constraint.enforced
    )


def objective(
    model: SingleTaskGP,
) -> tuple[ExactMarginalLogLikelihood, Callable[[], Any] | None]:
    """What BoTorch's ``fit_gpytorch_mll`` maximizes for ``model``, and the closure it calls
    (``None``: BoTorch's own, autograd through gpytorch): the closed form where it
    ``applies_to`` the model, for one GP as the closure itself, for a batch through
    ``ClosedFormMLL.compute_custom_loss`` (BoTorch fits each member on its own, and only its
    own path does); else gpytorch's exact marginal likelihood."""
    if not applies_to(model):
        return ExactMarginalLogLikelihood(model.likelihood, model), None
    mll = ClosedFormMLL(model)
    return mll, mll.closed_form if model.num_outputs == 1 else None


class ClosedFormLoss:
    """The loss of each GP of ``model`` (one, or a batch of ``m``) at its current
    hyperparameters with its gradients; called with no arguments, a closure for
    ``botorch.fit.fit_gpytorch_mll``: the summed loss and the gradients in the order of
    ``names``."""

    def __init__(self, model: SingleTaskGP, names: list[str]) -> None:
        X = model.train_inputs[0]
        self.model, self.names = model, names
        self.n, d = X.shape[-2], X.shape[-1]
        self.X = (X - X.mean(-2, keepdim=True)).reshape(-1, self.n, d)  # (b, n, d)
        self.y = model.train_targets.reshape(-1, self.n)  # (b, n)
        self.lengthscale_prior = _LogNormal(model.covar_module.lengthscale_prior)
        self.noise_prior = _LogNormal(model.likelihood.noise_covar.noise_prior)

    def __call__(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        loss, grads = self.losses_and_gradients()
        return loss.sum(), tuple(grads[name] for name in self.names)

    def losses_and_gradients(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Each GP's loss ``(b,)`` and the gradients of their sum, by parameter name, each
        shaped as its parameter."""
        model, X, b = self.model, self.X, len(self.X)
        with torch.no_grad():
            lengthscale = model.covar_module.raw_lengthscale  # (1, d) or (m, 1, d)
            noise = model.likelihood.noise_covar.raw_noise  # (1,) or (m, 1)
            constant = model.mean_module.raw_constant  # () or (m,)
            scales = lengthscale.reshape(b, 1, -1)
            Z = X / scales
            norms = (Z * Z).sum(-1)
            # In place where it can be: at a few hundred trials allocating the (n, n) arrays
            # costs as much as the arithmetic.
            square = torch.baddbmm(
                norms[:, :, None] + norms[:, None, :], Z, Z.transpose(1, 2), alpha=-2.0
            )
            square.clamp_min_(0.0).diagonal(dim1=1, dim2=2).zero_()
            K0 = square.mul_(-0.5).exp_()
            K = K0.clone()
            K.diagonal(dim1=1, dim2=2).add_(noise.reshape(b, 1))
            L = psd_safe_cholesky(K)
            residual = self.y - constant.reshape(b, 1)
            alpha = torch.cholesky_solve(residual[..., None], L)[..., 0]  # (b, n)
            log_density = -0.5 * (
                (residual * alpha).sum(-1)
                + 2.0 * torch.diagonal(L, dim1=1, dim2=2).log().sum(-1)
                + self.n * math.log(2 * math.pi)
            )
            W = torch.cholesky_inverse(L).neg_().baddbmm_(alpha[:, :, None], alpha[:, None, :])
            trace_W = torch.diagonal(W, dim1=1, dim2=2).sum(-1)
            V = W.mul_(K0)
            d_scales = ((X * X * V.sum(-1)[..., None]).sum(1) - ((V @ X) * X).sum(1)) / (
                scales[:, 0] ** 3
            )
            log_lengthscale, d_log_lengthscale = self.lengthscale_prior(lengthscale)
            log_noise, d_log_noise = self.noise_prior(noise)
            log_prior = log_lengthscale.reshape(b, -1).sum(-1) + log_noise.reshape(b)
            grads = {
                LENGTHSCALE: -(d_scales.reshape(lengthscale.shape) + d_log_lengthscale),
                NOISE: -(0.5 * trace_W.reshape(noise.shape) + d_log_noise),
                CONSTANT: -alpha.sum(-1).reshape(constant.shape),
            }
            loss = -(log_density + log_prior) / self.n
            return loss, {name: grad / self.n for name, grad in grads.items()}


class ClosedFormMLL(ExactMarginalLogLikelihood):
    """gpytorch's exact marginal likelihood of a model ``applies_to`` accepts, whose loss
    BoTorch's fit reads from ``compute_custom_loss``: each GP's loss, differentiable in the
    hyperparameters through one autograd node with the closed-form gradient."""

    def __init__(self, model: SingleTaskGP) -> None:
        super().__init__(model.likelihood, model)
        names = [name for name, p in self.named_parameters() if p.requires_grad]
        self.closed_form = ClosedFormLoss(model, names)

    def compute_custom_loss(self, **kwargs: Any) -> torch.Tensor:
        """Each GP's loss ``(b,)`` (BoTorch's batched fit sums them and differentiates the
        sum); BoTorch's keyword arguments are for losses that take data, which this one
        reads from the model."""
        model = self.model
        return _Losses.apply(
            self.closed_form,
            model.covar_module.raw_lengthscale,
            model.likelihood.noise_covar.raw_noise,
            model.mean_module.raw_constant,
        )


class _Losses(torch.autograd.Function):
    """The GPs' losses ``(b,)`` as a function of their hyperparameters, the gradient from
    ``ClosedFormLoss`` (each loss depends on its own GP's hyperparameters only)."""

    @staticmethod
    def forward(
        ctx: Any,
        closed_form: ClosedFormLoss,
        lengthscale: torch.Tensor,
        noise: torch.Tensor,
        constant: torch.Tensor,
    ) -> torch.Tensor:
        # The hyperparameters are passed only so that autograd routes their gradients here;
        # ``closed_form`` reads the same tensors from the model.
        loss, grads = closed_form.losses_and_gradients()
        ctx.save_for_backward(grads[LENGTHSCALE], grads[NOISE], grads[CONSTANT])
        return loss

    @staticmethod
    @once_differentiable  # the saved gradients carry no graph
    def backward(
        ctx: Any, grad: torch.Tensor
    ) -> tuple[None, torch.Tensor, torch.Tensor, torch.Tensor]:
        d_lengthscale, d_noise, d_constant = (
            grad.reshape(len(grad), *[1] * (d.ndim - 1)) * d for d in ctx.saved_tensors
        )
        return None, d_lengthscale, d_noise, d_constant


class _LogNormal:
    """A log-normal prior's log density at each element of ``x`` and its derivative there, in
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
        return log_density, -(deviation / self.variance + 1.0) / x
