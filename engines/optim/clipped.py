"""Clipped SGD and normalized SGD with momentum, the standard methods for heavy-tailed noise.

Methods. With g the stochastic gradient, tau the clipping threshold, beta the momentum and eta
the learning rate::

    clip(g)  = min(1, tau / ||g||) g                                   [Zhang2020clip]
    ClippedSGD:     g~ = clip(g);  m <- beta m + (1 - beta) g~;  x <- x - eta m
    NormalizedSGD:  g~ = g, or clip(g) when tau is set (NSGDC);
                    m <- beta m + (1 - beta) g~;  x <- x - eta m / ||m||  [Cutkosky2021hightail]

NormalizedSGD follows the NSGD-M order of part C4 of our research notes: momentum first, then
normalize the momentum (not a momentum of normalized gradients). For non-convex L-smooth f with
a bounded p-th moment of the noise (1 < p <= 2), both attain the optimal sample complexity
O(eps^-(3p-2)/(p-1)) for E||grad f|| <= eps with tuned tau, eta, beta [Hubler2025nsgd].

Our choices. The momentum buffer starts at the first (clipped) gradient, m_1 = g~_1 (as
torch.optim.SGD and the NSGD-M analysis do), so beta does not shrink the first steps. ClippedSGD
defaults to no momentum (the plain Clip-SGD rule), NormalizedSGD to beta = 0.9. ``norm_scope``
says which vector the norms ||g|| and ||m|| are taken over: "global" (all parameters of all
groups whose scope is "global"; the default, as in the theory), "group" (the parameters of one
group) or "tensor" (each parameter alone). Weight decay is decoupled, x <- (1 - eta wd) x,
applied before the step, so it is neither clipped nor normalized (default 0). A zero momentum
has no direction: NormalizedSGD then leaves x (but not the weight decay) alone.

References:
    [Zhang2020clip] J. Zhang et al. Why gradient clipping accelerates training: a theoretical
        justification for adaptivity. ICLR 2020.
    [Cutkosky2021hightail] A. Cutkosky, H. Mehta. High-probability bounds for non-convex
        stochastic optimization with heavy tails. NeurIPS 2021.
    [Hubler2025nsgd] Clipping and normalization for heavy-tailed SGD. arXiv 2410.16561,
        JMLR 2025 (authors and title not checked here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from engines.optim._common import StatefulOptimizer, check_hparams, evaluate

SCOPES = ("global", "group", "tensor")


def scoped_sq_norms(
    groups: Sequence[dict[str, Any]], tensors: Sequence[Sequence[Tensor]]
) -> list[list[float]]:
    """The squared norm each tensor sees under its group's ``norm_scope`` (float64 sums).

    ``tensors[i]`` holds one tensor per parameter of ``groups[i]`` that takes part in the
    step; the result has the same nesting.
    """
    own = [
        [float(torch.linalg.vector_norm(t, dtype=torch.float64)) ** 2 for t in ts] for ts in tensors
    ]
    total = sum(
        sum(sq) for group, sq in zip(groups, own, strict=True) if group["norm_scope"] == "global"
    )
    out: list[list[float]] = []
    for group, sq in zip(groups, own, strict=True):
        scope = group["norm_scope"]
        if scope not in SCOPES:
            raise ValueError(f"norm_scope must be one of {SCOPES}, got {scope!r}")
        if scope == "global":
            out.append([total] * len(sq))
        elif scope == "group":
            out.append([sum(sq)] * len(sq))
        else:
            out.append(list(sq))
    return out


def clip_factor(tau: float | None, sq_norm: float) -> float:
    """min(1, tau / ||g||) for ||g||^2 = ``sq_norm``; 1 without a threshold or for g = 0."""
    if tau is None or sq_norm == 0.0:
        return 1.0
    return min(1.0, tau / sq_norm**0.5)


def active_params(
    groups: Sequence[dict[str, Any]],
) -> tuple[list[list[Tensor]], list[list[Tensor]]]:
    """Per group, the parameters that have a (dense) gradient, and those gradients."""
    params: list[list[Tensor]] = []
    grads: list[list[Tensor]] = []
    for group in groups:
        pairs = [(p, p.grad) for p in group["params"] if p.grad is not None]
        if any(g.is_sparse for _, g in pairs):
            raise RuntimeError("sparse gradients are not supported")
        params.append([p for p, _ in pairs])
        grads.append([g for _, g in pairs])
    return params, grads


def check_clipping(group: Mapping[str, Any]) -> None:
    """Raise ValueError on a ``tau`` that is neither None nor > 0, or an unknown ``norm_scope``."""
    if group["tau"] is not None and not group["tau"] > 0.0:
        raise ValueError(f"tau must be > 0 or None (no clipping), got {group['tau']}")
    if group["norm_scope"] not in SCOPES:
        raise ValueError(f"norm_scope must be one of {SCOPES}, got {group['norm_scope']!r}")


class ScopedNormOptimizer(StatefulOptimizer):
    """Base of the optimizers here and of ``AdaGradNorm``: groups with ``tau`` and
    ``norm_scope``, checked at construction and again at every step (a PBT exploit may have
    rewritten them).

    Group defaults: ``lr``, the subclass's own hyperparameters (``own``, in its signature's
    order), then ``norm_scope`` and ``weight_decay``, the order the keys of ``param_groups``
    have always had.
    """

    def __init__(
        self, params: Iterable[Any], lr: float, norm_scope: str, weight_decay: float, **own: Any
    ) -> None:
        defaults = {"lr": lr, **own, "norm_scope": norm_scope, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self._check_groups()

    def _check_groups(self) -> None:
        for group in self.param_groups:
            self._check(group)

    def _check(self, group: dict[str, Any]) -> None:
        check_hparams(group)
        check_clipping(group)

    def _grads_and_sq_norms(
        self,
    ) -> tuple[list[list[Tensor]], list[list[Tensor]], list[list[float]]]:
        """Per group, once every group is checked: the parameters with a gradient, those
        gradients, and the squared norm each sees under its group's ``norm_scope``."""
        self._check_groups()
        params, grads = active_params(self.param_groups)
        return params, grads, scoped_sq_norms(self.param_groups, grads)


class _MomentumSGD(ScopedNormOptimizer):
    """Momentum SGD on clipped gradients, the shared part of ClippedSGD and NormalizedSGD; its
    ``step`` is ClippedSGD's, which NormalizedSGD overrides to normalize the momentum."""

    def _directions(self) -> tuple[list[list[Tensor]], list[list[Tensor]]]:
        """Per group: the parameters with gradients and their momentum m (clipped g~ if beta=0)."""
        params, grads, sq = self._grads_and_sq_norms()
        moms: list[list[Tensor]] = []
        for group, ps, gs, sqs in zip(self.param_groups, params, grads, sq, strict=True):
            beta = group["momentum"]
            out = []
            for p, raw, s in zip(ps, gs, sqs, strict=True):
                g = raw.mul(clip_factor(group["tau"], s))
                state = self.state[p]
                if beta == 0.0:
                    out.append(g)
                elif "momentum_buffer" not in state:
                    state["momentum_buffer"] = g.clone()
                    out.append(state["momentum_buffer"])
                else:
                    out.append(state["momentum_buffer"].mul_(beta).add_(g, alpha=1.0 - beta))
            moms.append(out)
        return params, moms

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """x <- (1 - lr wd) x - lr m for every parameter with a gradient."""
        loss = evaluate(closure)
        params, moms = self._directions()
        for group, ps, ms in zip(self.param_groups, params, moms, strict=True):
            lr, wd = group["lr"], group["weight_decay"]
            for p, m in zip(ps, ms, strict=True):
                p.mul_(1.0 - lr * wd)
                p.add_(m, alpha=-lr)
        return loss


class ClippedSGD(_MomentumSGD):
    """x <- (1 - lr wd) x - lr m,  m = EMA of min(1, tau/||g||) g  [Zhang2020clip].

    ``tau=None`` turns clipping off; ``momentum=0`` is plain Clip-SGD.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.01,
        tau: float | None = 1.0,
        momentum: float = 0.0,
        norm_scope: str = "global",
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr, norm_scope, weight_decay, tau=tau, momentum=momentum)


class NormalizedSGD(_MomentumSGD):
    """x <- (1 - lr wd) x - lr m / ||m||,  m = EMA of g (or of clip(g) when tau is set).

    NSGD-M [Cutkosky2021hightail]; with ``tau`` it is NSGDC, with ``momentum=0`` plain NSGD.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.01,
        momentum: float = 0.9,
        tau: float | None = None,
        norm_scope: str = "global",
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr, norm_scope, weight_decay, momentum=momentum, tau=tau)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """x <- (1 - lr wd) x - lr m / ||m|| for every parameter with a gradient."""
        loss = evaluate(closure)
        params, moms = self._directions()
        sq = scoped_sq_norms(self.param_groups, moms)
        for group, ps, ms, sqs in zip(self.param_groups, params, moms, sq, strict=True):
            lr, wd = group["lr"], group["weight_decay"]
            for p, m, s in zip(ps, ms, sqs, strict=True):
                p.mul_(1.0 - lr * wd)
                if s > 0.0:
                    p.add_(m, alpha=-lr / s**0.5)
        return loss
