"""Muon and Muon+: orthogonalized momentum for matrices, read as stochastic Frank-Wolfe.

Muon [Jordan2024muon], for a matrix parameter X (m x n; conv kernels flattened to
(out, rest)) with gradient G and momentum buffer B (B_0 = 0):

    B <- beta B + (1 - beta) G
    U  = (1 - beta) G + beta B        (nesterov=True; U = B otherwise)
    O  = NS5(U)                       5 Newton-Schulz quintic steps ~ U V^T of U's SVD
    X <- (1 - lr wd) X - lr s O       s = max(1, m/n)^0.5 ("muon"), or 0.2 sqrt(max(m, n))
                                      ("moonlight": update RMS ~ 0.2, AdamW-range lr)

Defaults lr 0.02, momentum 0.95, nesterov True, wd 0, ns_steps 5, shape_scale "muon". Only
matrices belong in Muon groups; biases, gains, embeddings and the head go to groups flagged
``adamw=True``, which this class steps with AdamW (defaults lr 3e-4, betas (0.9, 0.95), eps 1e-10,
wd 0; set them with the ``adamw_*`` arguments or per group). ``muon_param_groups(model)`` builds
that split. A parameter with fewer than 2 dimensions in a Muon group raises ValueError.

Frank-Wolfe reading [Sfyraki2025lions]: with C = {X : ||X||_2 <= s/wd} (spectral norm), the
LMO of the momentum is -(s/wd) U V^T, and the step above is SFW with step size lr wd. The gap

    G(X) = <grad f(X), X> + (s/wd) ||grad f(X)||_*        (nuclear norm)

is returned by ``Muon.fw_gap()`` (our monitoring choice): summed over the matrices of Muon
groups (AdamW groups are left out), from ``p.grad`` at the current ``p``; call it after
``backward()`` and before ``step()``. It is ``inf`` for a group with wd = 0 and a nonzero gradient.

Muon+ [Sfyraki2025lions] runs Muon on clipped (optionally variance-reduced) gradients:
g~ = min(1, tau_t/||g||) g replaces G in the momentum line; details and our choices are in
``engines.optim._robust``. Clipping and vr apply to Muon groups only, not to AdamW groups.

References:
    [Jordan2024muon] K. Jordan et al. Muon: an optimizer for hidden layers in neural networks.
        2024. https://kellerjordan.github.io/posts/muon/
    [Liu2025moonlight] J. Liu et al. Muon is Scalable for LLM Training. arXiv 2502.16982, 2025.
    [Sfyraki2025lions] M.-E. Sfyraki, J.-K. Wang. Lions and Muons: Optimization via Stochastic
        Frank-Wolfe. arXiv 2506.04192, 2025.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from engines.optim._common import (
    MatrixOptimizer,
    Params,
    count_step,
    dense_grad,
    fw_gap_term,
    split_matrix_params,
)
from engines.optim._newton_schulz import as_matrix, newton_schulz5
from engines.optim._robust import check_robust, robust_hparams, robust_step


def shape_scale(rows: int, cols: int, kind: str) -> float:
    """The factor s of the update of an m x n matrix: "muon" or "moonlight" (module doc)."""
    if kind == "muon":
        return max(1.0, rows / cols) ** 0.5
    if kind == "moonlight":
        return 0.2 * math.sqrt(max(rows, cols))
    raise ValueError(f"shape_scale must be 'muon' or 'moonlight', got {kind!r}")


def muon_hparams(
    lr: float, momentum: float, nesterov: bool, weight_decay: float, ns_steps: int, shape_scale: str
) -> dict[str, Any]:
    """The keys of a Muon param group but its ``adamw`` flag, in the order ``Muon`` sets them
    (``MuonPlus`` puts its clipping keys first)."""
    return {
        "lr": lr,
        "momentum": momentum,
        "nesterov": nesterov,
        "weight_decay": weight_decay,
        "ns_steps": ns_steps,
        "shape_scale": shape_scale,
    }


class Muon(MatrixOptimizer):
    """Muon on matrix groups, AdamW on ``adamw=True`` groups; see the module docstring.

    State per matrix: ``momentum_buffer``, ``step``; per AdamW parameter: ``exp_avg``,
    ``exp_avg_sq``, ``step``.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 0.02,
        momentum: float = 0.95,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        ns_steps: int = 5,
        shape_scale: str = "muon",
        adamw_lr: float = 3e-4,
        adamw_betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-10,
        adamw_weight_decay: float = 0.0,
    ) -> None:
        defaults = muon_hparams(lr, momentum, nesterov, weight_decay, ns_steps, shape_scale)
        super().__init__(params, defaults, adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay)

    def _check_matrix_group(self, group: dict[str, Any]) -> None:
        super()._check_matrix_group(group)
        shape_scale(1, 1, group["shape_scale"])

    def _update_matrix(self, p: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        count_step(state, p, "momentum_buffer")
        beta, lr, wd = group["momentum"], group["lr"], group["weight_decay"]
        buf = state["momentum_buffer"]
        buf.mul_(beta).add_(grad, alpha=1.0 - beta)
        u = grad.mul(1.0 - beta).add_(buf, alpha=beta) if group["nesterov"] else buf
        matrix = as_matrix(u)
        ortho = newton_schulz5(matrix, int(group["ns_steps"])).to(p.dtype).reshape(p.shape)
        scale = shape_scale(matrix.shape[0], matrix.shape[1], group["shape_scale"])
        p.mul_(1.0 - lr * wd)
        p.add_(ortho, alpha=-lr * scale)

    @torch.no_grad()
    def fw_gap(self) -> float:
        """<G, X> + (s/wd) ||G||_* summed over the matrices of Muon groups; see module doc."""
        total = 0.0
        for group in self.param_groups:
            if group["adamw"]:
                continue
            for p in group["params"]:
                g = dense_grad(p)
                if g is None:
                    continue
                matrix = as_matrix(g)
                s = shape_scale(matrix.shape[0], matrix.shape[1], group["shape_scale"])
                nuclear = torch.linalg.matrix_norm(matrix, "nuc")
                total += fw_gap_term(torch.sum(g * p), nuclear, s, group["weight_decay"])
        return total


class MuonPlus(Muon):
    """Muon+ ("Muon+"): Muon on clipped, optionally variance-reduced gradients.

    Keys beyond Muon's, per Muon group (see ``engines.optim._robust``): ``tau`` (None =
    adaptive), ``tau_exponent``, ``tau_quantile`` 0.9, ``tau_window`` 200, ``norm_scope``
    "global", ``vr`` False, ``vr_a`` 0.1. ``vr=True`` needs ``step(closure)``.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 0.02,
        momentum: float = 0.95,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        ns_steps: int = 5,
        shape_scale: str = "muon",
        adamw_lr: float = 3e-4,
        adamw_betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-10,
        adamw_weight_decay: float = 0.0,
        tau: float | None = None,
        tau_exponent: float = 0.0,
        tau_quantile: float = 0.9,
        tau_window: int = 200,
        norm_scope: str = "global",
        vr: bool = False,
        vr_a: float = 0.1,
    ) -> None:
        defaults = {
            **robust_hparams(tau, tau_exponent, tau_quantile, tau_window, norm_scope, vr, vr_a),
            **muon_hparams(lr, momentum, nesterov, weight_decay, ns_steps, shape_scale),
        }
        MatrixOptimizer.__init__(
            self, params, defaults, adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay
        )

    def _check_matrix_group(self, group: dict[str, Any]) -> None:
        super()._check_matrix_group(group)
        check_robust(group)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Muon+ step; returns the first ``closure()`` value if a closure is given."""
        return robust_step(self, closure, self._update, clips=lambda group: not group["adamw"])


def muon_param_groups(model: nn.Module, **options: Any) -> list[dict[str, Any]]:
    """``split_matrix_params(model, **options)``: hidden matrices for Muon, the rest AdamW."""
    return split_matrix_params(model, **options)
