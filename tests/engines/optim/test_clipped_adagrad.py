"""Tests of ``ClippedSGD``, ``NormalizedSGD`` (engines/optim/clipped.py) and ``AdaGradNorm``
(engines/optim/adagrad_norm.py).

Every run here is deterministic (fixed gradients or an exact quadratic), so the tolerances are
not statistical: float64 results are compared at 1e-12, float32 at 1e-5 (rounding only).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.optim import Optimizer

from engines.optim.adagrad_norm import AdaGradNorm
from engines.optim.clipped import ClippedSGD, NormalizedSGD
from tests.engines.optim.harness import Tolerances, step_with, through_torch_save
from tests.engines.optim.problem import DTYPES, G1, G2, X0, X_STAR, H, param

# Strongly convex quadratic f(x) = 1/2 sum h (x - x*)^2 + F_MIN on 2x3 tensors, kappa = 10.
F_MIN = 0.7
tol = Tolerances(float64=1e-12, float32_rtol=1e-5, float32_atol=1e-6)
close = tol.close


def quad(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (H.to(x.dtype) * (x - X_STAR.to(x.dtype)) ** 2).sum() + F_MIN


def closure_for(opt: Optimizer, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = quad(x)
        loss.backward()
        return loss

    return closure


def hand_clip(g: torch.Tensor, tau: float | None) -> torch.Tensor:
    """min(1, tau / ||g||) g (g itself without a threshold), for the hand computations."""
    return g if tau is None else g * min(1.0, tau / g.norm().item())


# ---- update rules against steps computed by hand --------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_clipped_sgd_matches_hand(dtype: torch.dtype) -> None:
    lr, tau, beta, wd = 0.1, 2.0, 0.8, 0.05
    x = param(dtype)
    opt = ClippedSGD([x], lr=lr, tau=tau, momentum=beta, weight_decay=wd)
    step_with(opt, x, G1)
    step_with(opt, x, G2)
    g1 = G1 * min(1.0, tau / G1.norm().item())  # ||G1|| ~ 4.1: clipped
    g2 = G2 * min(1.0, tau / G2.norm().item())  # ||G2|| ~ 2.6: clipped
    m1 = g1  # the buffer starts at the first clipped gradient
    x1 = X0 * (1 - lr * wd) - lr * m1
    m2 = beta * m1 + (1 - beta) * g2
    x2 = x1 * (1 - lr * wd) - lr * m2
    close(x.detach(), x2.to(dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_clipped_sgd_without_clipping_is_sgd(dtype: torch.dtype) -> None:
    x = param(dtype)
    opt = ClippedSGD([x], lr=0.1, tau=100.0)
    step_with(opt, x, G1)
    close(x.detach(), (X0 - 0.1 * G1).to(dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", [None, 1.5])
def test_normalized_sgd_matches_hand(dtype: torch.dtype, tau: float | None) -> None:
    lr, beta, wd = 0.1, 0.9, 0.01
    x = param(dtype)
    opt = NormalizedSGD([x], lr=lr, momentum=beta, tau=tau, weight_decay=wd)
    step_with(opt, x, G1, G2)
    m1 = hand_clip(G1, tau)  # momentum first, then normalize (part C4)
    x1 = X0 * (1 - lr * wd) - lr * m1 / m1.norm()
    m2 = beta * m1 + (1 - beta) * hand_clip(G2, tau)
    x2 = x1 * (1 - lr * wd) - lr * m2 / m2.norm()
    close(x.detach(), x2.to(dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau", [None, 2.0])
def test_adagrad_norm_matches_hand(dtype: torch.dtype, tau: float | None) -> None:
    lr, b0, wd = 0.5, 0.3, 0.02
    g1, g2 = hand_clip(G1, tau), hand_clip(G2, tau)
    x = param(dtype)
    opt = AdaGradNorm([x], lr=lr, b0=b0, tau=tau, weight_decay=wd)
    step_with(opt, x, G1, G2)
    b1 = math.sqrt(b0**2 + g1.norm().item() ** 2)
    x1 = X0 * (1 - lr * wd) - lr / b1 * g1
    b2 = math.sqrt(b1**2 + g2.norm().item() ** 2)
    x2 = x1 * (1 - lr * wd) - lr / b2 * g2
    close(x.detach(), x2.to(dtype), dtype)
    assert opt.state[x]["step_size"] == pytest.approx(lr / b2, rel=1e-12)


# ---- param groups and norm scopes -----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_groups_share_the_global_norm_with_their_own_hparams(dtype: torch.dtype) -> None:
    a, b = param(dtype, X0[0]), param(dtype, X0[1])
    opt = ClippedSGD([{"params": [a], "lr": 0.1, "tau": 1.0}, {"params": [b], "lr": 0.3}], tau=2.0)
    a.grad, b.grad = G1[0].to(dtype).clone(), G1[1].to(dtype).clone()
    opt.step()
    norm = G1.norm().item()  # global scope: one norm over both groups
    torch.testing.assert_close(a.detach(), (X0[0] - 0.1 * min(1, 1.0 / norm) * G1[0]).to(dtype))
    torch.testing.assert_close(b.detach(), (X0[1] - 0.3 * min(1, 2.0 / norm) * G1[1]).to(dtype))


@pytest.mark.parametrize("scope", ["group", "tensor"])
def test_local_scopes_equal_separate_optimizers(scope: str) -> None:
    """With group or tensor norms, two groups step exactly like two separate optimizers."""
    for cls, kw in [(NormalizedSGD, {}), (AdaGradNorm, {"tau": 1.0}), (ClippedSGD, {})]:
        a, b = param(torch.float64, X0[0]), param(torch.float64, X0[1])
        a2, b2 = param(torch.float64, X0[0]), param(torch.float64, X0[1])
        joint = cls(
            [{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.2}], **kw, norm_scope=scope
        )
        alone_a = cls([a2], lr=0.1, norm_scope=scope, **kw)
        alone_b = cls([b2], lr=0.2, norm_scope=scope, **kw)
        for g in (G1, G2):
            a.grad, a2.grad, b.grad, b2.grad = (
                g[0].clone(),
                g[0].clone(),
                g[1].clone(),
                g[1].clone(),
            )
            joint.step()
            alone_a.step()
            alone_b.step()
        assert torch.equal(a, a2) and torch.equal(b, b2), cls.__name__


def test_invalid_hparams_raise() -> None:
    x = param(torch.float64)
    with pytest.raises(ValueError, match="norm_scope"):
        ClippedSGD([x], norm_scope="layer")
    with pytest.raises(ValueError, match="tau"):
        NormalizedSGD([x], tau=0.0)
    with pytest.raises(ValueError, match="b0"):
        AdaGradNorm([x], b0=-1.0)
    with pytest.raises(ValueError, match="lr"):
        AdaGradNorm([x], lr=-1.0)


# ---- convergence, state round trip, PBT overwrite -------------------------------------------

Ours = ClippedSGD | NormalizedSGD | AdaGradNorm
FACTORIES: dict[str, Callable[[list[torch.Tensor]], Ours]] = {
    "clipped_sgd": lambda ps: ClippedSGD(ps, lr=0.1, tau=1.0, momentum=0.5),
    "normalized_sgd": lambda ps: NormalizedSGD(ps, lr=0.2, momentum=0.9),
    "adagrad_norm": lambda ps: AdaGradNorm(ps, lr=3.0, tau=5.0),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_converges_on_strongly_convex_quadratic(name: str, dtype: torch.dtype) -> None:
    """||x - x*|| < 1e-4 after 500 steps from ||x0 - x*|| ~ 6.3 (kappa = 10). NormalizedSGD
    moves lr per step whatever the gradient, so its lr decays geometrically (x0.98 per step)."""
    x = param(dtype)
    opt = FACTORIES[name]([x])
    closure = closure_for(opt, x)
    for _ in range(500):
        opt.step(closure)
        if name == "normalized_sgd":
            opt.param_groups[0]["lr"] *= 0.98
    assert (x.detach().double() - X_STAR).norm().item() < 1e-4
    assert quad(x).item() - F_MIN < 1e-7


def run_steps(opt: Ours, x: torch.Tensor, n: int) -> None:
    closure = closure_for(opt, x)
    for _ in range(n):
        opt.step(closure)


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_state_dict_round_trip_is_bitwise(name: str, dtype: torch.dtype) -> None:
    x = param(dtype)
    opt = FACTORIES[name]([x])
    run_steps(opt, x, 5)
    saved = through_torch_save(opt.state_dict())
    x_copy = x.detach().clone().requires_grad_(True)
    fresh = FACTORIES[name]([x_copy])
    fresh.load_state_dict(saved)
    run_steps(opt, x, 1)
    run_steps(fresh, x_copy, 1)
    assert torch.equal(x, x_copy)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_lr_overwritten_after_load_takes_effect(name: str) -> None:
    """A PBT exploit loads the donor's state, then sets a new lr: the step scales with it."""
    x = param(torch.float64)
    opt = FACTORIES[name]([x])
    run_steps(opt, x, 3)
    saved: dict[str, Any] = copy.deepcopy(opt.state_dict())
    deltas = []
    for factor in (1.0, 0.5):
        y = x.detach().clone().requires_grad_(True)
        child = FACTORIES[name]([y])
        child.load_state_dict(saved)
        child.param_groups[0]["lr"] = saved["param_groups"][0]["lr"] * factor
        before = y.detach().clone()
        run_steps(child, y, 1)
        deltas.append(y.detach() - before)
    torch.testing.assert_close(deltas[1], 0.5 * deltas[0], rtol=1e-12, atol=1e-14)
