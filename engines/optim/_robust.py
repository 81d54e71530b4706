"""Gradient clipping and the STORM-like variance-reduced estimate of Lion+ and Muon+ (part C3).

For one param group at step t, with g_t the stochastic gradient at x_t:

    g~_t = min(1, tau_t / ||g_t||) g_t
    vr:    d_t = g~(x_t; xi_t) + (1 - a) (d_{t-1} - g~(x_{t-1}; xi_t)),   d_1 = g~_1
    the optimizer then uses d_t (vr) or g~_t (no vr) wherever Lion/Muon use the gradient.

Group keys: ``tau`` (None: adaptive), ``tau_exponent``, ``tau_quantile``, ``tau_window``,
``norm_scope`` ("global", "group", "tensor" or "element"), ``vr``, ``vr_a``. Our choices where the
paper's exact pseudo-code was not available [Sfyraki2025lions]:

- ``norm_scope`` (as in ``engines.optim.clipped``): "global" takes one norm over all parameters
  of all groups whose scope is "global" (the default: the whole model), "group" over the
  group's parameters, "tensor" over each parameter alone. Each group keeps its own threshold.
- "element" clips each coordinate alone: g~_i = clamp(g_i, -tau_t, tau_t), with tau_t per tensor.
  A norm clip scales a whole vector, so under elementwise heavy-tailed noise the coordinate hit
  by an outlier still dominates its momentum; clamping bounds each coordinate's share. Adaptive
  (tau=None): tau_t = the tau_quantile quantile of the tensor's nonzero |g_i| at this step (no
  history, no tau_window; a tensor with no nonzero entry is left as it is).
- Fixed threshold: tau_t = tau * t^tau_exponent (tau_exponent = 1/(3p-2) is the theory's shape
  for a p-th moment; 0 keeps tau constant). Adaptive (tau=None): tau_t = the tau_quantile
  quantile of the previous tau_window raw norms, no clipping until 10 norms are recorded.
- The gradient at the previous point on the same batch comes from a second closure call with
  the parameters set back to x_{t-1}; both gradients are clipped with the same tau_t. With VR,
  d_t replaces the gradient in the momentum lines, so vr_a = 1 is plain clipping.
- Only the groups with ``vr=True`` are moved back to x_{t-1} (AdamW groups of Muon+ never are),
  so the second pass sees the other groups at x_t; use vr on all clipped groups or none.

References:
    [Sfyraki2025lions] M.-E. Sfyraki, J.-K. Wang. Lions and Muons: Optimization via Stochastic
        Frank-Wolfe. arXiv 2506.04192, 2025.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from engines.optim._common import dense_grad, evaluate

SCOPES = ("global", "group", "tensor", "element")
#: Norms recorded before the adaptive threshold starts clipping.
MIN_HISTORY = 10

State = MutableMapping[Tensor, dict[str, Any]]


def robust_hparams(
    tau: float | None,
    tau_exponent: float,
    tau_quantile: float,
    tau_window: int,
    norm_scope: str,
    vr: bool,
    vr_a: float,
) -> dict[str, Any]:
    """The clipping and variance-reduction keys of a Lion+ or Muon+ param group."""
    return {
        "tau": tau,
        "tau_exponent": tau_exponent,
        "tau_quantile": tau_quantile,
        "tau_window": tau_window,
        "norm_scope": norm_scope,
        "vr": vr,
        "vr_a": vr_a,
    }


def robust_step(
    optimizer: Optimizer,
    closure: Callable[[], Any] | None,
    update: Callable[[Tensor, Tensor, dict[str, Any]], None],
    clips: Callable[[dict[str, Any]], bool],
) -> Any:
    """One Lion+ or Muon+ step: ``update(p, direction, group)`` for every parameter with a
    gradient, in order. The direction is the robust gradient (``robust_grads``) in the groups
    that ``clips`` selects and the raw gradient elsewhere. Returns the first ``closure()``.
    """
    loss = evaluate(closure)
    previous = previous_point_grads(optimizer, closure)
    groups = optimizer.param_groups
    params = [[p for p in g["params"] if dense_grad(p) is not None] for g in groups]
    clipped = [clips(g) for g in groups]
    robust = iter(
        robust_grads(
            optimizer.state,
            [g for g, c in zip(groups, clipped, strict=True) if c],
            [ps for ps, c in zip(params, clipped, strict=True) if c],
            previous,
        )
    )
    for group, ps, c in zip(groups, params, clipped, strict=True):
        directions = next(robust) if c else [_grad(p) for p in ps]
        for p, d in zip(ps, directions, strict=True):
            update(p, d, group)
    return loss


def check_robust(group: Mapping[str, Any]) -> None:
    """Raise ValueError on invalid clipping or variance-reduction settings."""
    if group["tau"] is not None and not group["tau"] > 0.0:
        raise ValueError(f"tau must be > 0 or None (adaptive), got {group['tau']}")
    if not 0.0 < group["tau_quantile"] <= 1.0:
        raise ValueError(f"tau_quantile must lie in (0, 1], got {group['tau_quantile']}")
    if int(group["tau_window"]) < MIN_HISTORY:
        raise ValueError(f"tau_window must be >= {MIN_HISTORY}, got {group['tau_window']}")
    if group["norm_scope"] not in SCOPES:
        raise ValueError(f"norm_scope must be one of {SCOPES}, got {group['norm_scope']!r}")
    if not 0.0 < group["vr_a"] <= 1.0:
        raise ValueError(f"vr_a must lie in (0, 1], got {group['vr_a']}")


def previous_point_grads(
    optimizer: Optimizer, closure: Callable[[], Any] | None
) -> dict[Tensor, Tensor]:
    """Gradients at x_{t-1} on the current batch for the parameters of ``vr`` groups.

    Sets those parameters to their stored ``prev_param``, calls ``closure`` (which must
    recompute the loss on the same batch and call backward), then restores parameters and
    every ``.grad``. Returns an empty dict when no group uses vr or nothing is stored yet.
    """
    vr_groups = [g for g in optimizer.param_groups if g.get("vr") and not g.get("adamw")]
    if not vr_groups:
        return {}
    if closure is None:
        raise ValueError(
            "vr=True needs step(closure): the closure must recompute the loss on the same batch "
            "and call backward, so the optimizer can take the gradient at the previous point"
        )
    moved = [
        p for group in vr_groups for p in group["params"] if "prev_param" in optimizer.state[p]
    ]
    if not moved:
        return {}
    everything = [p for group in optimizer.param_groups for p in group["params"]]
    saved_grads = [p.grad for p in everything]
    current = [p.detach().clone() for p in moved]
    for p in everything:
        p.grad = None
    for p in moved:
        p.copy_(optimizer.state[p]["prev_param"])
    evaluate(closure)
    previous = {p: p.grad if p.grad is not None else torch.zeros_like(p) for p in moved}
    for p, value in zip(moved, current, strict=True):
        p.copy_(value)
    for p, grad in zip(everything, saved_grads, strict=True):
        p.grad = grad
    return previous


def _threshold(
    group: Mapping[str, Any], store: dict[str, Any], key: str, norm: Tensor, t: int
) -> Tensor | float:
    """tau_t for one norm; records ``norm`` in the adaptive history ``store[key]``.

    Callers pass ``norm`` in the dtype of the parameter whose state is ``store``, so that
    ``load_state_dict``, which casts floating state to the parameter dtype, keeps it bitwise.
    """
    if group["tau"] is not None:
        return group["tau"] * float(t) ** group["tau_exponent"]
    history = store.get(key)
    if history is None:
        history = norm.new_zeros(0)
    tau = (
        torch.quantile(history, group["tau_quantile"])
        if history.numel() >= MIN_HISTORY
        else math.inf
    )
    store[key] = torch.cat([history, norm.reshape(1)])[-int(group["tau_window"]) :]
    return tau


def _norm(tensors: list[Tensor], like: Tensor) -> Tensor:
    """The Euclidean norm of all ``tensors`` as one vector (float64 sums), in ``like``'s dtype."""
    squares = [torch.linalg.vector_norm(t, dtype=torch.float64) ** 2 for t in tensors]
    return torch.stack(squares).sum().sqrt().to(like.dtype)


def _grad(p: Tensor) -> Tensor:
    assert p.grad is not None
    return p.grad


def _factor(tau: Tensor | float, norm: Tensor) -> Tensor:
    """min(1, tau / norm); 1 for a zero norm."""
    ratio = torch.clamp(tau / norm, max=1.0)
    return torch.where(norm > 0, ratio, torch.ones_like(ratio))


def robust_grads(
    state: State,
    groups: list[dict[str, Any]],
    params: list[list[Tensor]],
    previous: Mapping[Tensor, Tensor],
) -> list[list[Tensor]]:
    """The clipped (and, with vr, variance-reduced) gradients of ``params``; see the module doc.

    ``params[i]`` are the parameters of ``groups[i]`` that have a gradient. The "global" norm
    runs over all of them in groups whose scope is "global". Stores ``prev_param`` (x_t) and
    ``vr_d`` (d_t) in each parameter's state when vr is on; the adaptive history of a global or
    group norm, and the group's step counter, live in the state of the group's first parameter.
    """
    global_norms = _global_norms(groups, params, previous)
    out: list[list[Tensor]] = []
    for group, ps in zip(groups, params, strict=True):
        if not ps:
            out.append([])
            continue
        head = state[group["params"][0]]
        head["group_step"] = head.get("group_step", 0) + 1
        t = head["group_step"]
        if group["norm_scope"] == "tensor":
            clipped, prev_clipped = _clip_each_tensor(state, group, ps, previous, t)
        elif group["norm_scope"] == "element":
            clipped, prev_clipped = _clip_each_element(group, ps, previous, t)
        else:
            clipped, prev_clipped = _clip_jointly(head, group, ps, previous, t, global_norms)
        if group["vr"]:
            out.append(_variance_reduced(state, group, ps, clipped, prev_clipped))
        else:
            out.append(clipped)
    return out


def _global_norms(
    groups: list[dict[str, Any]], params: list[list[Tensor]], previous: Mapping[Tensor, Tensor]
) -> tuple[Tensor | None, Tensor | None]:
    """The norm of the gradients, and of the previous-point gradients, of every parameter in a
    group whose scope is "global" (``None`` where there is none)."""
    glob_ps = [
        p
        for group, ps in zip(groups, params, strict=True)
        if group["norm_scope"] == "global"
        for p in ps
    ]
    if not glob_ps:
        return None, None
    glob_norm = _norm([_grad(p) for p in glob_ps], glob_ps[0])
    glob_prev = [previous[p] for p in glob_ps if p in previous]
    return glob_norm, _norm(glob_prev, glob_ps[0]) if glob_prev else None


def _clip_each_tensor(
    state: State,
    group: Mapping[str, Any],
    ps: list[Tensor],
    previous: Mapping[Tensor, Tensor],
    t: int,
) -> tuple[list[Tensor], dict[Tensor, Tensor]]:
    """Scope "tensor": each gradient (and previous-point gradient) clipped by its own norm,
    against a threshold of its own; returns the clipped gradients and previous gradients."""
    clipped: list[Tensor] = []
    prev_clipped: dict[Tensor, Tensor] = {}
    for p in ps:
        g = _grad(p)
        norm = _norm([g], p)
        tau = _threshold(group, state[p], "norm_history", norm, t)
        clipped.append(g * _factor(tau, norm))
        if p in previous:
            prev_clipped[p] = previous[p] * _factor(tau, _norm([previous[p]], p))
    return clipped, prev_clipped


def _clip_each_element(
    group: Mapping[str, Any], ps: list[Tensor], previous: Mapping[Tensor, Tensor], t: int
) -> tuple[list[Tensor], dict[Tensor, Tensor]]:
    """Scope "element": each coordinate of each gradient (and previous-point gradient) clamped
    to [-tau_t, tau_t], tau_t from the tensor's current gradient when adaptive; returns the
    clipped gradients and previous-point gradients."""
    clipped: list[Tensor] = []
    prev_clipped: dict[Tensor, Tensor] = {}
    for p in ps:
        g = _grad(p)
        tau = _element_threshold(group, g, t)
        clipped.append(g.clamp(-tau, tau))
        if p in previous:
            prev_clipped[p] = previous[p].clamp(-tau, tau)
    return clipped, prev_clipped


def _element_threshold(group: Mapping[str, Any], g: Tensor, t: int) -> float:
    """tau_t of scope "element": fixed (tau t^tau_exponent), or the tau_quantile quantile of the
    nonzero |g_i| (inf when there is none, so the tensor is not clipped)."""
    if group["tau"] is not None:
        return float(group["tau"] * float(t) ** group["tau_exponent"])
    magnitudes = g.abs().flatten()
    magnitudes = magnitudes[magnitudes > 0]
    if magnitudes.numel() == 0:
        return math.inf
    rank = max(1, math.ceil(group["tau_quantile"] * magnitudes.numel()))
    return float(magnitudes.kthvalue(rank).values)


def _clip_jointly(
    head: dict[str, Any],
    group: Mapping[str, Any],
    ps: list[Tensor],
    previous: Mapping[Tensor, Tensor],
    t: int,
    global_norms: tuple[Tensor | None, Tensor | None],
) -> tuple[list[Tensor], dict[Tensor, Tensor]]:
    """Scopes "global" and "group": all gradients of the group clipped by one norm (the global
    one or the group's), against the group's threshold, whose adaptive history lives in ``head``
    (the state of the group's first parameter); returns the clipped gradients and previous-point
    gradients."""
    glob_norm, prev_glob_norm = global_norms
    grads = [_grad(p) for p in ps]
    is_global = group["norm_scope"] == "global"
    norm = glob_norm if is_global and glob_norm is not None else _norm(grads, ps[0])
    head_dtype = group["params"][0].dtype
    tau = _threshold(group, head, "group_norm_history", norm.to(head_dtype), t)
    clipped = [g * _factor(tau, norm) for g in grads]
    prev_clipped: dict[Tensor, Tensor] = {}
    prev = [previous[p] for p in ps if p in previous]
    if prev:
        prev_norm = prev_glob_norm if is_global else _norm(prev, ps[0])
        assert prev_norm is not None
        for p in ps:
            if p in previous:
                prev_clipped[p] = previous[p] * _factor(tau, prev_norm)
    return clipped, prev_clipped


def _variance_reduced(
    state: State,
    group: Mapping[str, Any],
    ps: list[Tensor],
    clipped: list[Tensor],
    prev_clipped: Mapping[Tensor, Tensor],
) -> list[Tensor]:
    """d_t = g~_t + (1 - vr_a) (d_{t-1} - g~(x_{t-1})) per parameter (d_1 = g~_1); stores d_t
    as ``vr_d`` and x_t as ``prev_param`` in the parameter's state."""
    directions = []
    for p, g in zip(ps, clipped, strict=True):
        st = state[p]
        if "vr_d" in st and p in prev_clipped:
            d = g + (1.0 - group["vr_a"]) * (st["vr_d"] - prev_clipped[p])
        else:
            d = g.clone()
        st["vr_d"] = d
        st["prev_param"] = p.detach().clone()
        directions.append(d)
    return directions
