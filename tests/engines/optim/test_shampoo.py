"""Tests of ``Shampoo`` (engines/optim/shampoo.py): AdamW-style Shampoo with Adam grafting.

Runs are deterministic (fixed gradients or an exact quadratic). Hand computations run in
float64 with plain torch ops; tolerances cover rounding only: 1e-10 in float64, 1e-4 in float32
(the inverse roots amplify float32 rounding of the factor statistics).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

from engines.optim.shampoo import Shampoo
from tests.engines.optim.harness import Tolerances, step_with, through_torch_save
from tests.engines.optim.problem import DTYPES, G1, G2, X0, X_STAR, H, param

tol = Tolerances(float64=1e-10, float32_rtol=1e-4, float32_atol=1e-4)
close = tol.close


def inv_root(s: torch.Tensor, exponent: float, eps: float) -> torch.Tensor:
    """(s + eps I)^(-exponent) for symmetric PSD ``s``, written independently of the module."""
    evals, evecs = torch.linalg.eigh(s)
    return evecs @ torch.diag((evals.clamp(min=0) + eps) ** -exponent) @ evecs.T


def hand_shampoo(
    grads: list[torch.Tensor], lr: float, betas: tuple[float, float], wd: float, one_sided: bool
) -> torch.Tensor:
    """Shampoo with preconditioning from step 1, refreshed every step, float64."""
    b1, b2 = betas
    eps, graft_eps = 1e-12, 1e-8
    x, m, v = X0.clone(), torch.zeros_like(X0), torch.zeros_like(X0)
    left, right = torch.zeros(2, 2, dtype=torch.float64), torch.zeros(3, 3, dtype=torch.float64)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        left = b2 * left + (1 - b2) * g @ g.T
        right = b2 * right + (1 - b2) * g.T @ g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        adam = m_hat / (v_hat.sqrt() + graft_eps)
        if one_sided:  # the smaller side (rows: 2 < 3), exponent 1/2
            d = inv_root(left / (1 - b2**t), 0.5, eps) @ m_hat
        else:
            d = (
                inv_root(left / (1 - b2**t), 0.25, eps)
                @ m_hat
                @ inv_root(right / (1 - b2**t), 0.25, eps)
            )
        d = d * adam.norm() / d.norm()
        x = x * (1 - lr * wd) - lr * d
    return x


# ---- update rules ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("one_sided", [False, True])
def test_first_step_is_grafted_polar_factor(dtype: torch.dtype, one_sided: bool) -> None:
    """At step 1, (G G^T)^-1/4 G (G^T G)^-1/4 = (G G^T)^-1/2 G = U V^T (G = U S V^T), and its
    norm (sqrt(2)) is replaced by that of Adam's first step G / (|G| + eps_g) ~ sign(G), sqrt(6)."""
    lr = 0.1
    x = param(dtype)
    opt = Shampoo([x], lr=lr, precondition_frequency=1, one_sided=one_sided)
    step_with(opt, x, G1)
    u, _, vh = torch.linalg.svd(G1, full_matrices=False)
    adam_norm = (G1 / (G1.abs() + 1e-8)).norm()
    polar = u @ vh
    expected = X0 - lr * adam_norm * polar / polar.norm()
    close(x.detach(), expected.to(dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("one_sided", [False, True])
def test_three_steps_match_hand(dtype: torch.dtype, one_sided: bool) -> None:
    lr, betas, wd = 0.05, (0.9, 0.95), 0.1
    x = param(dtype)
    opt = Shampoo(
        [x], lr=lr, betas=betas, weight_decay=wd, precondition_frequency=1, one_sided=one_sided
    )
    grads = [G1, G2, G1 - G2]
    for g in grads:
        step_with(opt, x, g)
    expected = hand_shampoo(grads, lr, betas, wd, one_sided)
    close(x.detach(), expected.to(dtype), dtype)
    assert ("R" in opt.state[x]["blocks"][0]) is not one_sided


@pytest.mark.parametrize("dtype", DTYPES)
def test_adamw_before_start_and_for_vectors(dtype: torch.dtype) -> None:
    """Before start_preconditioning_step, and always for non-matrices, the step is AdamW."""
    lr, (b1, b2), wd = 0.1, (0.9, 0.95), 0.1
    x, bias = param(dtype), param(dtype, X0[0])
    opt = Shampoo([x, bias], lr=lr, betas=(b1, b2), weight_decay=wd, precondition_frequency=5)
    ex, eb = X0.clone(), X0[0].clone()
    m, v = torch.zeros_like(X0), torch.zeros_like(X0)
    for t, g in enumerate([G1, G2, G1 + G2], start=1):
        x.grad, bias.grad = g.to(dtype).clone(), g[0].to(dtype).clone()
        opt.step()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        adam = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + 1e-8)
        ex, eb = ex * (1 - lr * wd) - lr * adam, eb * (1 - lr * wd) - lr * adam[0]
    close(x.detach(), ex.to(dtype), dtype)
    close(bias.detach(), eb.to(dtype), dtype)
    assert "PL" not in opt.state[x]["blocks"][0]  # no root computed before the start step
    assert "blocks" not in opt.state[bias]


# ---- blocking and one-sided mode ------------------------------------------------------------


def test_blocking_equals_shampoo_on_each_block() -> None:
    """A 5x7 matrix with blocks of at most 3 is 2x3 = 6 blocks (3/2 rows, 3/3/1 columns); each
    moves exactly like the same block optimized alone."""
    gen = torch.Generator().manual_seed(0)
    big = torch.randn(5, 7, generator=gen, dtype=torch.float64).requires_grad_(True)
    grads = [torch.randn(5, 7, generator=gen, dtype=torch.float64) for _ in range(4)]
    opt = Shampoo([big], lr=0.1, max_preconditioner_dim=3, precondition_frequency=2)
    cuts = [
        (slice(r0, r1), slice(c0, c1))
        for r0, r1 in [(0, 3), (3, 5)]
        for c0, c1 in [(0, 3), (3, 6), (6, 7)]
    ]
    pieces = [big.detach()[r, c].clone().requires_grad_(True) for r, c in cuts]
    alone = [Shampoo([p], lr=0.1, precondition_frequency=2) for p in pieces]
    for g in grads:
        step_with(opt, big, g)
        for (r, c), p, o in zip(cuts, pieces, alone, strict=True):
            step_with(o, p, g[r, c])
    state = opt.state[big]
    assert [(b["L"].shape[0], b["R"].shape[0]) for b in state["blocks"]] == [
        (3, 3),
        (3, 3),
        (3, 1),
        (2, 3),
        (2, 3),
        (2, 1),
    ]
    for (r, c), p in zip(cuts, pieces, strict=True):
        torch.testing.assert_close(big.detach()[r, c], p.detach(), rtol=1e-12, atol=1e-12)


def test_unblocked_long_side_is_left_unpreconditioned() -> None:
    """blocking=False: a 2x9 matrix with max dim 4 keeps only the 2x2 left factor (exponent
    1/2); a 6x9 matrix has no side left and takes the AdamW step."""
    gen = torch.Generator().manual_seed(1)
    wide = torch.randn(2, 9, generator=gen, dtype=torch.float64).requires_grad_(True)
    big = torch.randn(6, 9, generator=gen, dtype=torch.float64).requires_grad_(True)
    start_wide, start_big = wide.detach().clone(), big.detach().clone()
    opt = Shampoo(
        [wide, big], lr=0.1, max_preconditioner_dim=4, blocking=False, precondition_frequency=1
    )
    gw = torch.randn(2, 9, generator=gen, dtype=torch.float64)
    gb = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    wide.grad, big.grad = gw.clone(), gb.clone()
    opt.step()
    assert set(opt.state[wide]["blocks"][0]) == {"L", "PL"}
    assert opt.state[big]["blocks"] == [{}]
    d = inv_root(gw @ gw.T, 0.5, 1e-12) @ gw
    d = d * (gw / (gw.abs() + 1e-8)).norm() / d.norm()
    torch.testing.assert_close(wide.detach(), start_wide - 0.1 * d, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(big.detach(), start_big - 0.1 * gb / (gb.abs() + 1e-8))


def test_changing_the_layout_restarts_the_statistics() -> None:
    x = param(torch.float64)
    opt = Shampoo([x], precondition_frequency=1)
    step_with(opt, x, G1)
    assert set(opt.state[x]["blocks"][0]) == {"L", "R", "PL", "PR"}
    opt.param_groups[0]["one_sided"] = True
    step_with(opt, x, G2)
    left = opt.state[x]["blocks"][0]["L"]
    torch.testing.assert_close(left, (1 - 0.95) * G2 @ G2.T)  # only G2: restarted
    assert "R" not in opt.state[x]["blocks"][0]


# ---- convergence, groups, state round trip, PBT overwrite ----------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("one_sided", [False, True])
def test_converges_on_strongly_convex_quadratic(dtype: torch.dtype, one_sided: bool) -> None:
    """||x - x*|| < 1e-5 after 300 steps from ||x0 - x*|| ~ 6.3. Grafted steps have Adam's
    size (~lr per entry whatever the gradient), so lr decays geometrically (x0.98 per step)."""
    x = param(dtype)
    opt = Shampoo([x], lr=0.3, precondition_frequency=5, one_sided=one_sided)
    for _ in range(300):
        opt.zero_grad()
        loss = 0.5 * (H.to(dtype) * (x - X_STAR.to(dtype)) ** 2).sum()
        loss.backward()
        opt.step()
        opt.param_groups[0]["lr"] *= 0.98
    assert (x.detach().double() - X_STAR).norm().item() < 1e-5


def test_groups_with_different_hparams_equal_separate_optimizers() -> None:
    a, b = param(torch.float64), param(torch.float64, X0.flip(0))
    a2, b2 = param(torch.float64), param(torch.float64, X0.flip(0))
    joint = Shampoo(
        [{"params": [a], "lr": 0.05, "one_sided": True}, {"params": [b], "betas": (0.8, 0.9)}],
        lr=0.01,
        precondition_frequency=2,
    )
    alone_a = Shampoo([a2], lr=0.05, one_sided=True, precondition_frequency=2)
    alone_b = Shampoo([b2], lr=0.01, betas=(0.8, 0.9), precondition_frequency=2)
    for g in [G1, G2, G1 * G2, G2 - G1]:
        for p in (a, b, a2, b2):
            p.grad = g.clone()
        for o in (joint, alone_a, alone_b):
            o.step()
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert not torch.equal(a, b)


def factory(params: list[torch.Tensor]) -> Shampoo:
    return Shampoo(
        params, lr=0.05, weight_decay=0.0, max_preconditioner_dim=2, precondition_frequency=3
    )


def run(opt: Shampoo, x: torch.Tensor, grads: list[torch.Tensor]) -> None:
    for g in grads:
        step_with(opt, x, g)


@pytest.mark.parametrize("dtype", DTYPES)
def test_state_dict_round_trip_is_bitwise(dtype: torch.dtype) -> None:
    """Saved at step 4, between two root refreshes (steps 3 and 6), with 2x2 blocks."""
    x = param(dtype)
    opt = factory([x])
    run(opt, x, [G1, G2, G1 + G2, G1 - G2])
    saved = through_torch_save(opt.state_dict())
    y = x.detach().clone().requires_grad_(True)
    fresh = factory([y])
    fresh.load_state_dict(saved)
    run(opt, x, [G2, G1])
    run(fresh, y, [G2, G1])
    assert torch.equal(x, y)


def test_lr_overwritten_after_load_takes_effect() -> None:
    x = param(torch.float64)
    opt = factory([x])
    run(opt, x, [G1, G2, G1 + G2, G1 - G2])
    saved: dict[str, Any] = copy.deepcopy(opt.state_dict())
    deltas = []
    for lr in (0.05, 0.2):
        y = x.detach().clone().requires_grad_(True)
        child = factory([y])
        child.load_state_dict(saved)
        child.param_groups[0]["lr"] = lr
        before = y.detach().clone()
        run(child, y, [G2])
        deltas.append(y.detach() - before)
    torch.testing.assert_close(deltas[1], 4.0 * deltas[0], rtol=1e-12, atol=1e-14)


def test_invalid_hparams_raise() -> None:
    make: Callable[..., Shampoo] = Shampoo
    for bad in (
        {"precondition_frequency": 0},
        {"max_preconditioner_dim": 0},
        {"betas": (0.9, 1.5)},
    ):
        with pytest.raises(ValueError):
            make([param(torch.float64)], **bad)
