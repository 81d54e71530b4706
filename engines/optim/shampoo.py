"""AdamW-style Shampoo: Kronecker-factored preconditioning with Adam grafting.

Method [Gupta2018shampoo, Shi2023distshampoo]. For a matrix block X (m x n) with gradient G, at
step t (from 1), betas (beta1, beta2), learning rate eta and weight decay wd::

    L <- beta2 L + (1 - beta2) G G^T        R <- beta2 R + (1 - beta2) G^T G      every step
    M <- beta1 M + (1 - beta1) G            V <- beta2 V + (1 - beta2) G * G      (Adam moments)
    M^ = M / (1 - beta1^t),  V^ = V / (1 - beta2^t),  L^ = L / (1 - beta2^t),  R^ likewise
    A  = M^ / (sqrt(V^) + graft_eps)                                          Adam direction
    every precondition_frequency steps, from start_preconditioning_step on, in float64:
        P_L = (L^ + eps I)^(-a),  P_R = (R^ + eps I)^(-b)    via eigh
    D  = P_L M^ P_R,  then  D <- D ||A||_F / ||D||_F  per block                Adam grafting
    X <- (1 - eta wd) X - eta D                                      decoupled weight decay

Two-sided: a = b = 1/4; one-sided: only one factor, exponent 1/2. The exponents sum to 1/2,
where the unified analysis gives an SGD-like rate in the nuclear norm [Li2026shampoo]. Before
``start_preconditioning_step`` (default: ``precondition_frequency``) and for parameters that are
not matrices (biases, gains, conv kernels) the step is plain AdamW (the grafting direction A).
Matrices larger than ``max_preconditioner_dim`` are cut into blocks of at most that size on
each side; each block has its own factors and grafting norm, as in [Shi2023distshampoo].

Our choices. Defaults: lr 1e-3, betas (0.9, 0.95) (beta2 0.95 for the factors and for Adam, a
setting reported to work), eps 1e-12, graft_eps 1e-8, weight_decay 0, max_preconditioner_dim
128, precondition_frequency 10 (part C6's CPU plan). ``one_sided=True`` preconditions only the
smaller side of each block (the cheaper factor). With ``blocking=False`` a matrix is one block,
a side longer than ``max_preconditioner_dim`` is left unpreconditioned (so the other side gets
the one-sided exponent 1/2) and a block with no side left takes the Adam step. Eigenvalues
below zero (round-off) are clamped to 0 before eps is added. The factor statistics and their
roots are stored in the parameter's dtype (so ``state_dict`` round-trips exactly; torch casts
floating state to that dtype on load); the roots are computed in float64. A change of
``max_preconditioner_dim``, ``one_sided`` or ``blocking`` restarts the factor statistics.

References:
    [Gupta2018shampoo] V. Gupta, T. Koren, Y. Singer. Shampoo: preconditioned stochastic tensor
        optimization. ICML 2018.
    [Shi2023distshampoo] H.-J. M. Shi et al. A distributed data-parallel PyTorch implementation
        of the distributed Shampoo optimizer for training neural networks at-scale. arXiv
        2309.06497, 2023 (the AlgoPerf external-tuning winner).
    [Li2026shampoo] Li, Dong, Lin. Convergence of AdamW-style Shampoo, unifying one-sided and
        two-sided preconditioning. arXiv 2601.07326, ICML 2026 (title paraphrased from the
        abstract).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from engines.optim._common import StatefulOptimizer, check_hparams, evaluate

Block = tuple[slice, slice]


def blocks_of(shape: tuple[int, int], size: int | None) -> list[Block]:
    """The (row, column) slices cutting a matrix of ``shape`` into blocks of at most ``size``
    per side, row-major; one block when ``size`` is None."""
    rows, cols = shape
    if size is None:
        return [(slice(0, rows), slice(0, cols))]
    return [
        (slice(i, min(i + size, rows)), slice(j, min(j + size, cols)))
        for i in range(0, rows, size)
        for j in range(0, cols, size)
    ]


def preconditioned_sides(rows: int, cols: int, max_dim: int, one_sided: bool) -> tuple[bool, bool]:
    """Whether a ``rows x cols`` block gets a left and a right factor."""
    if one_sided:
        left = rows <= cols
        return (left and rows <= max_dim, not left and cols <= max_dim)
    return (rows <= max_dim, cols <= max_dim)


def inverse_root(stat: Tensor, exponent: float, eps: float, scale: float) -> Tensor:
    """(stat / scale + eps I)^(-exponent) by eigendecomposition in float64, in ``stat``'s dtype."""
    evals, evecs = torch.linalg.eigh(stat.to(torch.float64) / scale)
    powers = (evals.clamp(min=0.0) + eps).pow(-exponent)
    return ((evecs * powers) @ evecs.T).to(stat.dtype)


class Shampoo(StatefulOptimizer):
    """AdamW-style Shampoo with Adam grafting and blocking; see the module docstring."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-12,
        graft_eps: float = 1e-8,
        weight_decay: float = 0.0,
        max_preconditioner_dim: int = 128,
        precondition_frequency: int = 10,
        start_preconditioning_step: int | None = None,
        one_sided: bool = False,
        blocking: bool = True,
    ) -> None:
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "graft_eps": graft_eps,
            "weight_decay": weight_decay,
            "max_preconditioner_dim": max_preconditioner_dim,
            "precondition_frequency": precondition_frequency,
            "start_preconditioning_step": (
                precondition_frequency
                if start_preconditioning_step is None
                else start_preconditioning_step
            ),
            "one_sided": one_sided,
            "blocking": blocking,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            _check(group)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = evaluate(closure)
        for group in self.param_groups:
            _check(group)
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Shampoo does not support sparse gradients")
                g = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                state["exp_avg"].lerp_(g, 1.0 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
                m_hat = state["exp_avg"] / (1.0 - beta1**t)
                v_hat = state["exp_avg_sq"] / (1.0 - beta2**t)
                direction = m_hat / (v_hat.sqrt() + group["graft_eps"])
                if p.ndim == 2:
                    direction = self._shampoo_direction(state, group, g, m_hat, direction)
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
                p.add_(direction, alpha=-group["lr"])
        return loss

    def _shampoo_direction(
        self,
        state: dict[str, Any],
        group: dict[str, Any],
        grad: Tensor,
        m_hat: Tensor,
        adam: Tensor,
    ) -> Tensor:
        """Update the factor statistics of every block of a matrix and, once preconditioning
        has started, return the grafted Shampoo direction (else ``adam`` unchanged)."""
        max_dim = group["max_preconditioner_dim"]
        layout = (max_dim, bool(group["one_sided"]), bool(group["blocking"]))
        blocks = blocks_of((grad.shape[0], grad.shape[1]), max_dim if layout[2] else None)
        if state.get("layout") != layout:
            state["layout"] = layout
            state["blocks"] = []
            for rows, cols in blocks:
                m, n = rows.stop - rows.start, cols.stop - cols.start
                left, right = preconditioned_sides(m, n, max_dim, layout[1])
                factors = {}
                if left:
                    factors["L"] = grad.new_zeros(m, m)
                if right:
                    factors["R"] = grad.new_zeros(n, n)
                state["blocks"].append(factors)

        _, beta2 = group["betas"]
        t, start = state["step"], group["start_preconditioning_step"]
        precondition = t >= start
        refresh = precondition and (t - start) % group["precondition_frequency"] == 0
        out = adam.clone()
        for (rows, cols), factors in zip(blocks, state["blocks"], strict=True):
            g = grad[rows, cols]
            if "L" in factors:
                factors["L"].mul_(beta2).add_(g @ g.T, alpha=1.0 - beta2)
            if "R" in factors:
                factors["R"].mul_(beta2).add_(g.T @ g, alpha=1.0 - beta2)
            if not precondition or not factors:
                continue
            exponent = 0.25 if "L" in factors and "R" in factors else 0.5
            scale = 1.0 - beta2**t
            for side in ("L", "R"):
                if side in factors and (refresh or "P" + side not in factors):
                    factors["P" + side] = inverse_root(factors[side], exponent, group["eps"], scale)
            d = m_hat[rows, cols]
            if "PL" in factors:
                d = factors["PL"] @ d
            if "PR" in factors:
                d = d @ factors["PR"]
            d_norm = torch.linalg.vector_norm(d)
            graft = torch.linalg.vector_norm(adam[rows, cols])
            out[rows, cols] = d * torch.where(d_norm > 0, graft / d_norm, 0.0)
        return out


def _check(group: dict[str, Any]) -> None:
    check_hparams(group)
    if group["graft_eps"] < 0.0:
        raise ValueError(f"graft_eps must be >= 0, got {group['graft_eps']}")
    for key in ("max_preconditioner_dim", "precondition_frequency", "start_preconditioning_step"):
        if int(group[key]) < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {group[key]}")
