"""SAM and USAM with the stochastic Polyak step size: SAM-SPS and USAM-SPS.

Method [Oikonomou2026samsps]. Sharpness-aware minimization [Foret2021sam] takes the gradient at
an ascent point e instead of at x; SAM-SPS sets the step size with the stochastic Polyak rule
[Loizou2021sps] evaluated at e. One step, with f the mini-batch loss (the closure), radius rho,
and norms and inner products over all parameters of the model::

    g     = grad f(x)                                          closure pass 1
    e     = x + rho * g / ||g||        (SAM)
    e     = x + rho * g                (USAM, unnormalized=True)
    f_e   = f(e),  g_e = grad f(e)                             closure pass 2
    gamma = min( [f_e - f_star - <g_e, e - x>]_+ / (c ||g_e||^2),  lr_max )
    x    <- x - gamma * (g_e + weight_decay * x)

f_star is a lower bound on the mini-batch loss (0 for non-negative losses). For USAM the
numerator reads f(e) - f_star - rho <g_e, g>; its [.]_+ is provably redundant when
rho <= 1/L (convex, L-smooth). rho = 0 gives SPS_max [Loizou2021sps]. The paper's rule is c = 1;
``c`` divides the Polyak ratio as in SPS_max. Defaults follow the reference implementation:
rho 0.1, lr_max (the paper's gamma_b) 1.0, weight_decay 5e-4 (coupled L2, plain SGD, no
momentum), f_star 0. Theory: linear rate on strongly convex, O(1/T) on convex deterministic
problems; in the stochastic case the same up to a neighbourhood set by E[f_S(x*) - f*_S].

Our choices. Param groups may differ in rho, c, lr_max, weight_decay and unnormalized: the ascent
of each group uses its own rho (SAM: divided by the norm of g over all groups), the Polyak ratio
is one scalar for the model, and each group caps it with its own c and lr_max. ``f_star`` must
be the same in every group (it bounds the one model loss). The optimizer zeroes the gradients
before each closure pass, so the closure only needs forward and backward. x is restored from a
copy after pass 2 (never by subtracting the perturbation, which would not round-trip exactly).
``step`` returns f(x), the loss of pass 1; the applied step size of each group is kept in
``group["last_step_size"]`` (saved with ``state_dict``), the uncapped ratio in
``group["last_polyak_ratio"]``. A zero gradient gives no ascent (e = x); a zero g_e gives
gamma = 0. BatchNorm statistics are updated by both passes; the step size depends on the loss
scale (mean vs sum reduction) and label smoothing makes f_star > 0.

References:
    [Oikonomou2026samsps] D. Oikonomou, N. Loizou. Polyak step sizes for SAM-style updates.
        arXiv 2606.01827, ICML 2026 (title paraphrased from the abstract).
    [Foret2021sam] P. Foret et al. Sharpness-aware minimization for efficiently improving
        generalization. ICLR 2021.
    [Loizou2021sps] N. Loizou et al. Stochastic Polyak step-size for SGD: an adaptive learning
        rate for fast convergence. AISTATS 2021.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from engines.optim._common import StatefulOptimizer, check_hparams, evaluate

NEEDS_CLOSURE = (
    "SAMSPS.step() needs a closure that re-evaluates the loss: SAM-SPS evaluates the loss and its "
    "gradient twice per step (at w and at the ascent point). Pass one that runs forward and "
    "backward and returns the loss, e.g.\n"
    "    def closure():\n"
    "        loss = loss_fn(model(inputs), targets)\n"
    "        loss.backward()\n"
    "        return loss\n"
    "    optimizer.step(closure)\n"
    "(the optimizer zeroes the gradients before each pass)."
)


class SAMSPS(StatefulOptimizer):
    """SAM (``unnormalized=False``) or USAM with the stochastic Polyak step [Oikonomou2026samsps].

    ``step(closure)`` is required; see the module docstring for the update and the group keys.
    """

    def __init__(
        self,
        params: Iterable[Any],
        rho: float = 0.1,
        c: float = 1.0,
        lr_max: float = 1.0,
        f_star: float = 0.0,
        unnormalized: bool = False,
        weight_decay: float = 5e-4,
    ) -> None:
        defaults = {
            "rho": rho,
            "c": c,
            "lr_max": lr_max,
            "f_star": f_star,
            "unnormalized": unnormalized,
            "weight_decay": weight_decay,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            _check(group)
            group.setdefault("last_step_size", 0.0)
            group.setdefault("last_polyak_ratio", 0.0)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One SAM-SPS step; returns the loss at the current point (closure pass 1)."""
        if closure is None:
            raise TypeError(NEEDS_CLOSURE)
        f_stars = {float(group["f_star"]) for group in self.param_groups}
        if len(f_stars) != 1:
            raise ValueError(f"f_star must be the same in every param group, got {f_stars}")
        f_star = f_stars.pop()
        for group in self.param_groups:
            _check(group)

        self.zero_grad(set_to_none=True)
        loss = evaluate(closure)
        params = [[p for p in group["params"] if p.grad is not None] for group in self.param_groups]
        grad_norm = math.sqrt(_sum_sq(p.grad for ps in params for p in ps))

        # Ascent to e = x + d, d = rho g / ||g|| (SAM) or rho g (USAM).
        saved: list[tuple[Tensor, Tensor, Tensor]] = []  # (p, x, d)
        for group, ps in zip(self.param_groups, params, strict=True):
            if group["unnormalized"]:
                scale = group["rho"]
            else:
                scale = group["rho"] / grad_norm if grad_norm > 0.0 else 0.0
            for p in ps:
                d = p.grad * scale
                saved.append((p, p.detach().clone(), d))
                p.add_(d)

        self.zero_grad(set_to_none=True)
        value = evaluate(closure)
        loss_e = float(value.detach() if isinstance(value, Tensor) else value)
        for p, x, _ in saved:
            p.copy_(x)

        pairs = [(p.grad, d) for p, _, d in saved if p.grad is not None]
        inner = sum(float(torch.sum(ge.double() * d.double())) for ge, d in pairs)
        ge_sq = _sum_sq(ge for ge, _ in pairs)
        numerator = loss_e - f_star - inner
        ratio = numerator / ge_sq if ge_sq > 0.0 else 0.0
        for group, ps in zip(self.param_groups, params, strict=True):
            gamma = min(max(ratio / group["c"], 0.0), group["lr_max"])
            group["last_step_size"] = gamma
            group["last_polyak_ratio"] = ratio
            wd = group["weight_decay"]
            for p in ps:
                if p.grad is None:
                    continue
                update = p.grad.add(p, alpha=wd) if wd != 0.0 else p.grad
                p.add_(update, alpha=-gamma)
        return loss


def _sum_sq(tensors: Iterable[Tensor]) -> float:
    """Sum of squared entries of all ``tensors``, accumulated in float64."""
    return sum(float(torch.linalg.vector_norm(t, dtype=torch.float64)) ** 2 for t in tensors)


def _check(group: dict[str, Any]) -> None:
    check_hparams(group)
    if group["rho"] < 0.0:
        raise ValueError(f"rho must be >= 0, got {group['rho']}")
    if not group["c"] > 0.0:
        raise ValueError(f"c must be > 0, got {group['c']}")
    if group["lr_max"] < 0.0:
        raise ValueError(f"lr_max must be >= 0, got {group['lr_max']}")
