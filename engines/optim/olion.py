"""OLion (Orthogonal Lion): the sign of an orthogonalized Lion momentum, scaled to a fixed RMS.

Method [Wang2026olion], for a matrix parameter W (m x n; conv kernels flattened to (out, rest))
with gradient G and one momentum buffer M (M_0 = 0):

    M  <- b2 M + (1 - b2) G                    momentum_2 = 0.98
    U   = (1 - b1) G + b1 M                    momentum = 0.95 (Nesterov / Lion interpolation)
    O   = NS5(U)                               5 Newton-Schulz quintic steps, float32
    S   = sign(O)                              entrywise; sign(0) = 0
    S  <- S sqrt(min(m, n)) / (||S||_F + eps)  use_scale (= S / sqrt(max(m, n)) without zeros)
    S  <- S * rms_scale * sqrt(max(m, n))      rms_scale = 0.2 (Moonlight): entries ~ +-0.2
    W  <- (1 - lr wd) W - lr S

The step is an approximate maximal step over the intersection of a spectral-norm ball and an
l_inf ball (a "Hadamard-like" set); convergence holds under a diagonal-isotropy assumption.
Non-matrix parameters (biases, gains) and, by the usual split, embeddings and the head are
trained with AdamW: one optimizer must step all groups, so ``OLion`` runs AdamW itself on every
group flagged ``adamw=True`` (defaults lr 3e-4, betas (0.9, 0.95), eps 1e-10, wd 0; set them
with the ``adamw_*`` arguments or per group). ``olion_param_groups(model)`` builds the split
(``engines.optim._common.split_matrix_params``). A parameter with fewer than 2 dimensions in an
OLion group raises ValueError.

Defaults and our choices: momentum 0.95, momentum_2 0.98, ns_steps 5, eps 1e-8 and rms_scale
0.2 follow the reference code. Its lr of 0.02 predates the RMS scaling; with rms_scale the
update has AdamW's scale, so our default lr is AdamW's, 1e-3 (the nanoGPT runs used 6e-4 with
wd 0.1); wd defaults to 0. ``eps`` is used both in the Newton-Schulz normalization and in
use_scale. ``rms_scale=None`` turns the RMS scaling off. Newton-Schulz runs in float64 for
float64 parameters (``engines.optim._newton_schulz``). The reference repository's nanoGPT file
never calls NS in its step (a Lion variant); the equations above follow its SIT/olion.py.

References:
    [Wang2026olion] K. Wang, L. Shen, T. Zhang. OLion: Orthogonal Lion. arXiv 2602.01105,
        ICML 2026. Code: kv-wang/OLion (SIT/olion.py).
    [Liu2025moonlight] J. Liu et al. Muon is Scalable for LLM Training. arXiv 2502.16982, 2025.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from engines.optim._common import MatrixOptimizer, Params, count_step, split_matrix_params
from engines.optim._newton_schulz import as_matrix, newton_schulz5


class OLion(MatrixOptimizer):
    """OLion on matrix groups, AdamW on ``adamw=True`` groups; see the module docstring.

    State per matrix: ``momentum_buffer`` (M), ``step``; per AdamW parameter: ``exp_avg``,
    ``exp_avg_sq``, ``step``.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        momentum: float = 0.95,
        momentum_2: float = 0.98,
        weight_decay: float = 0.0,
        ns_steps: int = 5,
        eps: float = 1e-8,
        use_scale: bool = True,
        rms_scale: float | None = 0.2,
        adamw_lr: float = 3e-4,
        adamw_betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-10,
        adamw_weight_decay: float = 0.0,
    ) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "momentum_2": momentum_2,
            "weight_decay": weight_decay,
            "ns_steps": ns_steps,
            "eps": eps,
            "use_scale": use_scale,
            "rms_scale": rms_scale,
        }
        super().__init__(params, defaults, adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay)

    def _check_matrix_group(self, group: dict[str, Any]) -> None:
        super()._check_matrix_group(group)
        if group["rms_scale"] is not None and group["rms_scale"] <= 0.0:
            raise ValueError(f"rms_scale must be > 0 or None, got {group['rms_scale']}")

    def _update_matrix(self, p: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        count_step(state, p, "momentum_buffer")
        beta1, beta2 = group["momentum"], group["momentum_2"]
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        buf = state["momentum_buffer"]
        buf.mul_(beta2).add_(grad, alpha=1.0 - beta2)
        u = as_matrix(grad.mul(1.0 - beta1).add_(buf, alpha=beta1))
        rows, cols = u.shape
        s = torch.sign(newton_schulz5(u, int(group["ns_steps"]), eps))
        if group["use_scale"]:
            s = s * (math.sqrt(min(rows, cols)) / (torch.linalg.matrix_norm(s) + eps))
        if group["rms_scale"] is not None:
            s = s * (group["rms_scale"] * math.sqrt(max(rows, cols)))
        p.mul_(1.0 - lr * wd)
        p.add_(s.to(p.dtype).reshape(p.shape), alpha=-lr)


def olion_param_groups(model: nn.Module, **options: Any) -> list[dict[str, Any]]:
    """The usual OLion split of ``model``: hidden matrices get OLion, the rest AdamW.

    Same as ``split_matrix_params(model, **options)``: 2-D+ weights except embeddings, the head
    (last 2-D+ parameter) and names in ``exclude`` form the OLion group; everything else forms
    the ``adamw=True`` group. Pass the result to ``OLion(...)``.
    """
    return split_matrix_params(model, **options)
