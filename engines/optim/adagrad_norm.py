"""AdaGrad-Norm: SGD with one scalar AdaGrad step size, optionally with clipped gradients.

Method [Ward2019adagradnorm]. With g_t the stochastic gradient, eta the learning rate and
b_0 > 0 the initial accumulator::

    g~_t  = g_t,  or  min(1, tau / ||g_t||) g_t  when tau is set       [Chezhegov2024clipada]
    b_t^2 = b_0^2 + sum_{s <= t} ||g~_s||^2
    x    <- x - (eta / b_t) g~_t

AdaGrad-Norm converges under heavy-tailed noise with a bounded p-th moment for all 1 < p <= 2
without knowing p (one extra mild assumption) [Liu2026adagrad]; AdaGrad and AdaGrad-Norm have
poor high-probability behaviour under heavy tails, which clipping the gradient fixes
[Chezhegov2024clipada]. Defaults from our research notes (part C5): eta 0.01, b_0 1e-8 (the
method is sensitive to b_0 only in the first steps), no clipping.

Our choices. ``norm_scope`` says which vector the norm is taken over and therefore how many
accumulators there are: "global" (one for all parameters of the groups whose scope is
"global"; the default, as in the theory), "group" (one per group) or "tensor" (one per
parameter). The running sum of ||g~||^2 is stored without b_0, as a Python float in each
parameter's state (float64, so it round-trips exactly through ``state_dict``), so a new b_0 or
lr set in ``param_groups`` (a PBT exploit) takes effect at the next step. The clipped gradient
enters both the accumulator and the step. Weight decay is decoupled, x <- (1 - eta wd) x, and
not part of the accumulator (default 0).

References:
    [Ward2019adagradnorm] R. Ward, X. Wu, L. Bottou. AdaGrad stepsizes: sharp convergence over
        nonconvex landscapes. ICML 2019.
    [Liu2026adagrad] Z. Liu. Convergence of AdaGrad under heavy-tailed noise. arXiv 2605.18694,
        ICML 2026.
    [Chezhegov2024clipada] S. Chezhegov et al. Gradient Clipping Improves AdaGrad when the
        Noise Is Heavy-Tailed. 2024.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

from engines.optim._common import check_hparams, evaluate
from engines.optim.clipped import ScopedNormOptimizer, check_clipping, clip_factor


class AdaGradNorm(ScopedNormOptimizer):
    """x <- (1 - lr wd) x - lr g~ / sqrt(b0^2 + sum ||g~||^2)  [Ward2019adagradnorm].

    ``tau=None`` turns clipping off. The step size used last is in each parameter's state as
    ``step_size`` (a float).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.01,
        b0: float = 1e-8,
        tau: float | None = None,
        norm_scope: str = "global",
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr, norm_scope, weight_decay, b0=b0, tau=tau)

    def _check(self, group: dict[str, Any]) -> None:
        check_hparams(group)
        if group["b0"] < 0.0:
            raise ValueError(f"b0 must be >= 0, got {group['b0']}")
        check_clipping(group)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = evaluate(closure)
        params, grads, sq = self._grads_and_sq_norms()
        for group, ps, gs, sqs in zip(self.param_groups, params, grads, sq, strict=True):
            lr, wd, b0 = group["lr"], group["weight_decay"], group["b0"]
            for p, g, s in zip(ps, gs, sqs, strict=True):
                factor = clip_factor(group["tau"], s)
                state = self.state[p]
                state["sum_sq"] = state.get("sum_sq", 0.0) + factor * factor * s
                b = math.sqrt(b0 * b0 + state["sum_sq"])
                step_size = lr / b if b > 0.0 else 0.0
                state["step_size"] = step_size
                p.mul_(1.0 - lr * wd)
                p.add_(g, alpha=-step_size * factor)
        return loss
