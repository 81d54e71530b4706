"""Pieces shared by the optimizers of this package: the base classes (``StatefulOptimizer``;
``ParameterwiseOptimizer``, whose step updates each parameter alone; ``MatrixOptimizer``, which
sends matrices to Muon's or OLion's rule and ``adamw=True`` groups to AdamW), the hyperparameter
checks, the step counter of per-parameter state, the AdamW step, and the split of a model into
matrix and other parameters.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.optimizer import Optimizer, StateDict

#: What the optimizers here take as ``params``: tensors, or param groups (dicts).
Params = Iterable[Tensor] | Iterable[dict[str, Any]]


class StatefulOptimizer(Optimizer):
    """An ``Optimizer`` whose ``load_state_dict`` copies what it loads.

    ``torch.optim.Optimizer.load_state_dict`` keeps the loaded tensors when dtype and device
    already match, so two optimizers loaded from one in-memory ``state_dict()`` would share
    (and both update) the same momentum buffers. A PBT exploit does exactly that; this class
    deep-copies first, so the copy is independent of its source.
    """

    def load_state_dict(self, state_dict: StateDict) -> None:
        super().load_state_dict(copy.deepcopy(state_dict))


def evaluate(closure: Callable[[], Any] | None) -> Any:
    """``closure()`` with gradients enabled (``step`` runs under ``no_grad``), or ``None``."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class ParameterwiseOptimizer(StatefulOptimizer):
    """An optimizer whose step updates each parameter with a gradient on its own (``_update``)."""

    def _update(self, p: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        raise TypeError(f"{type(self).__name__} must define _update")

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One step on every parameter with a gradient; returns ``closure()`` if given."""
        loss = evaluate(closure)
        for group in self.param_groups:
            for p in group["params"]:
                grad = dense_grad(p)
                if grad is not None:
                    self._update(p, grad, group)
        return loss


class MatrixOptimizer(ParameterwiseOptimizer):
    """Base of Muon and OLion: matrices take the subclass's rule (``_update_matrix``), groups
    flagged ``adamw=True`` take AdamW."""

    def __init__(
        self,
        params: Any,
        defaults: dict[str, Any],
        adamw_lr: float,
        adamw_betas: tuple[float, float],
        adamw_eps: float,
        adamw_weight_decay: float,
    ) -> None:
        self._adamw_defaults = {
            "lr": adamw_lr,
            "betas": tuple(adamw_betas),
            "eps": adamw_eps,
            "weight_decay": adamw_weight_decay,
        }
        super().__init__(params, {**defaults, "adamw": False})

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        fill_adamw_group(param_group, self._adamw_defaults)
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        check_hparams(group)
        if not group["adamw"]:
            self._check_matrix_group(group)

    def _check_matrix_group(self, group: dict[str, Any]) -> None:
        """Checks of a matrix group; subclasses add their own hyperparameters'."""
        if int(group["ns_steps"]) < 0:
            raise ValueError(f"ns_steps must be >= 0, got {group['ns_steps']}")
        for p in group["params"]:
            if p.ndim < 2:
                raise ValueError(
                    f"{type(self).__name__} steps matrices only; a parameter of shape "
                    f"{tuple(p.shape)} belongs in a group with adamw=True "
                    "(split_matrix_params(model) builds the split)"
                )

    def _update(self, p: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        if group["adamw"]:
            adamw_update(p, grad, self.state[p], group)
        else:
            self._update_matrix(p, grad, group)

    def _update_matrix(self, p: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        raise TypeError(f"{type(self).__name__} must define _update_matrix")


def check_hparams(group: Mapping[str, Any]) -> None:
    """Raise ValueError on a negative learning rate or weight decay, or a beta outside [0, 1)."""
    if group.get("lr", 0.0) < 0.0:
        raise ValueError(f"lr must be >= 0, got {group['lr']}")
    if group.get("weight_decay", 0.0) < 0.0:
        raise ValueError(f"weight_decay must be >= 0, got {group['weight_decay']}")
    betas = list(group.get("betas", ()))
    betas += [group[k] for k in ("momentum", "momentum_2") if k in group]
    for beta in betas:
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"betas and momenta must lie in [0, 1), got {beta}")
    if group.get("eps", 0.0) < 0.0:
        raise ValueError(f"eps must be >= 0, got {group['eps']}")


def dense_grad(p: Tensor) -> Tensor | None:
    """``p.grad``, refusing sparse gradients."""
    if p.grad is not None and p.grad.is_sparse:
        raise RuntimeError("sparse gradients are not supported")
    return p.grad


def adamw_update(p: Tensor, grad: Tensor, state: dict[str, Any], group: Mapping[str, Any]) -> None:
    """One AdamW step on ``p`` in place (decoupled weight decay, bias-corrected moments):

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  p <- (1 - lr wd) p
    p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
    """
    beta1, beta2 = group["betas"]
    lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
    t = count_step(state, p, "exp_avg", "exp_avg_sq")
    m, v = state["exp_avg"], state["exp_avg_sq"]
    m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    denom = (v / (1.0 - beta2**t)).sqrt_().add_(eps)
    p.mul_(1.0 - lr * wd)
    p.addcdiv_(m, denom, value=-lr / (1.0 - beta1**t))


def count_step(state: dict[str, Any], p: Tensor, *buffers: str) -> int:
    """Count one more step of ``p`` in ``state["step"]`` and return the count; on the first
    step, first set the count to 0 and create the zero ``buffers`` shaped like ``p``."""
    if buffers[0] not in state:
        state["step"] = 0
        for name in buffers:
            state[name] = torch.zeros_like(p)
    state["step"] += 1
    return state["step"]


def fill_adamw_group(group: dict[str, Any], adamw_defaults: Mapping[str, Any]) -> None:
    """Give a group flagged ``adamw=True`` the AdamW settings it does not set itself."""
    if group.get("adamw", False):
        for key, value in adamw_defaults.items():
            group.setdefault(key, value)


def split_matrix_params(
    model: nn.Module,
    *,
    exclude_head: bool = True,
    exclude: Iterable[str] = (),
    matrix_options: Mapping[str, Any] | None = None,
    adamw_options: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Split ``model``'s trainable parameters into a matrix group and an ``adamw=True`` group.

    Matrices are parameters with 2 or more dimensions (conv kernels count, flattened to
    ``(out, rest)``), except: the weights of ``nn.Embedding``/``nn.EmbeddingBag`` modules; the
    head, i.e. the last parameter with 2 or more dimensions in ``model.named_parameters()``
    order (when ``exclude_head``); and any parameter whose name starts with a prefix in
    ``exclude``. Everything else (biases, gains, embeddings, head) goes to the AdamW group, as
    part C prescribes for Muon and OLion. Empty groups are left out. ``matrix_options`` and
    ``adamw_options`` are copied into the respective group (e.g. ``{"lr": 1e-3}``).
    """
    prefixes = tuple(exclude)
    embedding_ids = {
        id(p)
        for module in model.modules()
        if isinstance(module, nn.Embedding | nn.EmbeddingBag)
        for p in module.parameters(recurse=False)
    }
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    candidates = [n for n, p in named if p.ndim >= 2 and id(p) not in embedding_ids]
    head = candidates[-1] if exclude_head and candidates else None
    matrices: list[Tensor] = []
    others: list[Tensor] = []
    for name, p in named:
        is_matrix = name in candidates and name != head and not name.startswith(prefixes)
        (matrices if is_matrix else others).append(p)
    groups: list[dict[str, Any]] = []
    if matrices:
        groups.append({"params": matrices, **dict(matrix_options or {})})
    if others:
        groups.append({"params": others, **dict(adamw_options or {}), "adamw": True})
    return groups


def fw_gap_term(inner: Tensor, dual_norm: Tensor, radius_scale: float, wd: float) -> float:
    """One parameter's share of the Frank-Wolfe gap over the ball of radius ``radius_scale/wd``:
    ``<grad, x> + (radius_scale / wd) * ||grad||_dual``; ``inf`` when ``wd == 0`` and the
    gradient is not zero (the ball is then unbounded)."""
    dual = float(dual_norm)
    if wd == 0.0:
        return math.inf if dual > 0.0 else float(inner)
    return float(inner) + radius_scale / wd * dual
