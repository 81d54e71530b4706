"""Lion and Lion+: sign updates of an interpolated momentum, read as stochastic Frank-Wolfe.

Lion [Chen2023lion], per parameter x with gradient g and momentum m (m_0 = 0):

    x <- (1 - lr * wd) x                       decoupled weight decay
    c  = b1 m + (1 - b1) g
    x <- x - lr * sign(c)
    m <- b2 m + (1 - b2) g

Defaults lr 1e-4, betas (0.9, 0.99), wd 0. Use an lr 3-10x smaller and a wd 3-10x larger than
for AdamW. sign(0) = 0, so an entry with c = 0 does not move.

Frank-Wolfe reading [Sfyraki2025lions]: with C = {x : ||x||_inf <= 1/wd} and c the momentum,
the linear minimization oracle is v = -(1/wd) sign(c), and x <- x + (lr wd)(v - x) is the Lion
step above. Iterates started inside C stay in C, so wd sets the box radius, and the method
converges in the Frank-Wolfe gap

    G(x) = max_{v in C} <grad f(x), x - v> = <grad f(x), x> + ||grad f(x)||_1 / wd

which is zero exactly at the KKT points of min f over C. ``Lion.fw_gap()`` returns it (our
monitoring choice): summed over parameters and groups (C is a product of boxes, one radius per
group), from ``p.grad`` at the current ``p``. Call it after ``backward()`` and before
``step()``: it is then the gap at x_t, estimated with the stochastic gradient. It is ``inf`` for
a group with wd = 0 (unbounded box) and a nonzero gradient.

Lion+ [Sfyraki2025lions] is Lion on clipped gradients, optionally with a STORM-like
variance-reduced estimate; it targets heavy-tailed gradient noise. sign() is scale-invariant, so
clipping acts only through the momentum: one outlier can no longer dominate m. The exact rule,
its group keys and our choices are in ``engines.optim._robust``:

    g~ = min(1, tau_t / ||g||) g               (or d_t with vr=True; needs step(closure))
    c  = b1 m + (1 - b1) g~;   x <- (1 - lr wd) x - lr sign(c);   m <- b2 m + (1 - b2) g~

References:
    [Chen2023lion] X. Chen et al. Symbolic Discovery of Optimization Algorithms. NeurIPS 2023.
    [Sfyraki2025lions] M.-E. Sfyraki, J.-K. Wang. Lions and Muons: Optimization via Stochastic
        Frank-Wolfe. arXiv 2506.04192, 2025.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from engines.optim._common import (
    ParameterwiseOptimizer,
    Params,
    check_hparams,
    count_step,
    dense_grad,
    fw_gap_term,
)
from engines.optim._robust import check_robust, robust_hparams, robust_step


class Lion(ParameterwiseOptimizer):
    """Lion with decoupled weight decay; state per parameter: ``exp_avg`` (m) and ``step``."""

    def __init__(
        self,
        params: Params,
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        defaults = {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay}
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        self._check(self.param_groups[-1])

    def _check(self, group: dict[str, Any]) -> None:
        check_hparams(group)

    def _update(self, p: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        count_step(state, p, "exp_avg")
        beta1, beta2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        m = state["exp_avg"]
        c = m.mul(beta1).add_(grad, alpha=1.0 - beta1)
        p.mul_(1.0 - lr * wd)
        p.add_(torch.sign(c), alpha=-lr)
        m.mul_(beta2).add_(grad, alpha=1.0 - beta2)

    @torch.no_grad()
    def fw_gap(self) -> float:
        """The Frank-Wolfe gap <g, x> + ||g||_1 / wd at the current parameters; see module doc."""
        total = 0.0
        for group in self.param_groups:
            for p in group["params"]:
                g = dense_grad(p)
                if g is not None:
                    gap = fw_gap_term(torch.sum(g * p), g.abs().sum(), 1.0, group["weight_decay"])
                    total += gap
        return total


class LionPlus(Lion):
    """Lion+ ("Lion+"): Lion on clipped, optionally variance-reduced gradients.

    Keys beyond Lion's (all per param group, see ``engines.optim._robust``): ``tau`` (None =
    adaptive quantile of recent norms), ``tau_exponent``, ``tau_quantile`` 0.9, ``tau_window``
    200, ``norm_scope`` "global", ``vr`` False, ``vr_a`` 0.1. With ``vr=True``, ``step`` needs a
    closure that recomputes loss and gradients on the same batch (it is called twice per step).
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        tau: float | None = None,
        tau_exponent: float = 0.0,
        tau_quantile: float = 0.9,
        tau_window: int = 200,
        norm_scope: str = "global",
        vr: bool = False,
        vr_a: float = 0.1,
    ) -> None:
        robust = robust_hparams(tau, tau_exponent, tau_quantile, tau_window, norm_scope, vr, vr_a)
        defaults = {**robust, "lr": lr, "betas": tuple(betas), "weight_decay": weight_decay}
        ParameterwiseOptimizer.__init__(self, params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        check_hparams(group)
        check_robust(group)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Lion+ step; returns the first ``closure()`` value if a closure is given."""
        return robust_step(self, closure, self._update, clips=lambda group: True)
