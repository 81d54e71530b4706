"""Tests of ``SAMSPS`` (engines/optim/sam_sps.py): SAM and USAM with the stochastic Polyak step.

The problems are exact quadratics with a known minimum value F_MIN, passed as ``f_star``, so
every tolerance below covers rounding only (float64 at 1e-12, float32 at 1e-5), except the
convergence radius of SAM, which is the analytic bound stated in its test.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import pytest
import torch

from engines.optim.sam_sps import SAMSPS
from tests.engines.optim.harness import Tolerances, through_torch_save
from tests.engines.optim.problem import DTYPES, X0, X_STAR, H, param

# f(x) = 1/2 sum h (x - x*)^2 + F_MIN on a 2x3 tensor: mu = 1, L = 10.
F_MIN = 0.7
tol = Tolerances(float64=1e-12, float32_rtol=1e-5, float32_atol=1e-5)
close = tol.close


def quad(x: torch.Tensor, h: torch.Tensor = H) -> torch.Tensor:
    return 0.5 * (h.to(x.dtype) * (x - X_STAR.to(x.dtype)) ** 2).sum() + F_MIN


def closure_for(x: torch.Tensor, h: torch.Tensor = H) -> Callable[[], torch.Tensor]:
    def closure() -> torch.Tensor:  # no zero_grad: SAMSPS zeroes before each pass
        loss = quad(x, h)
        loss.backward()
        return loss

    return closure


def hand_step(
    x: torch.Tensor, rho: float, unnormalized: bool, lr_max: float, wd: float, c: float = 1.0
) -> tuple[torch.Tensor, float]:
    """One SAM-SPS step on ``quad`` in float64 with plain torch ops: (new x, gamma)."""
    g = H * (x - X_STAR)
    d = rho * g if unnormalized else rho * g / g.norm()
    e = x + d
    f_e = (0.5 * (H * (e - X_STAR) ** 2).sum() + F_MIN).item()
    g_e = H * (e - X_STAR)
    ratio = (f_e - F_MIN - (g_e * d).sum().item()) / (g_e.norm().item() ** 2)
    gamma = min(max(ratio / c, 0.0), lr_max)
    return x - gamma * (g_e + wd * x), gamma


# ---- the update rule ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("unnormalized", [False, True])
def test_step_matches_hand(dtype: torch.dtype, unnormalized: bool) -> None:
    rho, wd, c = 0.05, 0.01, 1.5
    x = param(dtype)
    opt = SAMSPS(
        [x], rho=rho, c=c, lr_max=10.0, f_star=F_MIN, unnormalized=unnormalized, weight_decay=wd
    )
    expected = X0
    for _ in range(3):
        loss = opt.step(closure_for(x))
        assert loss.item() == pytest.approx(quad(expected).item(), rel=1e-6)
        expected, gamma = hand_step(expected, rho, unnormalized, 10.0, wd, c)
        assert opt.param_groups[0]["last_step_size"] == pytest.approx(gamma, rel=tol(dtype)["rtol"])
        close(x.detach(), expected.to(dtype), dtype)
    assert 0.0 < gamma < 10.0  # the cap did not bind: this is the Polyak formula itself


@pytest.mark.parametrize("dtype", DTYPES)
def test_step_size_is_polyak_on_isotropic_quadratic(dtype: torch.dtype) -> None:
    """With H = h I, f_star = F_MIN and r = ||x - x*||, the formula has closed forms:
    SPS (rho = 0): 1 / (2h); SAM: (r - rho) / (2h (r + rho)); USAM: (1 - rho h) / (2h (1 + rho h)).
    """
    h, rho = 4.0, 0.1
    iso = torch.full((2, 3), h, dtype=torch.float64)
    r = (X0 - X_STAR).norm().item()
    cases = [
        (0.0, False, 1 / (2 * h)),
        (rho, False, (r - rho) / (2 * h * (r + rho))),
        (rho, True, (1 - rho * h) / (2 * h * (1 + rho * h))),
    ]
    for rho_, unnormalized, expected in cases:
        x = param(dtype)
        opt = SAMSPS(
            [x], rho=rho_, lr_max=1.0, f_star=F_MIN, unnormalized=unnormalized, weight_decay=0.0
        )
        opt.step(closure_for(x, iso))
        assert opt.param_groups[0]["last_step_size"] == pytest.approx(
            expected, rel=tol(dtype)["rtol"]
        )


def test_cap_and_clip_at_zero() -> None:
    x = param(torch.float64)
    opt = SAMSPS([x], lr_max=1e-3, f_star=F_MIN, weight_decay=0.0)
    opt.step(closure_for(x))
    assert opt.param_groups[0]["last_step_size"] == 1e-3
    y = param(torch.float64)
    low = SAMSPS([y], f_star=1e6, weight_decay=0.0)  # f - f_star < 0: gamma = [.]_+ = 0
    low.step(closure_for(y))
    assert low.param_groups[0]["last_step_size"] == 0.0
    assert torch.equal(y.detach(), X0)


def test_step_without_closure_raises_clear_error() -> None:
    x = param(torch.float64)
    opt = SAMSPS([x])
    x.grad = torch.ones_like(x)
    with pytest.raises(TypeError, match="needs a closure that re-evaluates the loss") as info:
        opt.step()
    assert "loss.backward()" in str(info.value) and "optimizer.step(closure)" in str(info.value)


# ---- convergence ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_usam_sps_converges_exactly(dtype: torch.dtype) -> None:
    """rho = 0.05 <= 1/L: the numerator stays >= 0 and USAM-SPS converges linearly to x*, until
    f - F_MIN rounds to 0 at ||x - x*|| ~ sqrt(machine eps) (~1e-8 in float64, ~3e-4 in float32)."""
    x = param(dtype)
    opt = SAMSPS([x], rho=0.05, f_star=F_MIN, unnormalized=True, weight_decay=0.0)
    for _ in range(300):
        opt.step(closure_for(x))
    limit = 1e-7 if dtype == torch.float64 else 1e-3
    assert (x.detach().double() - X_STAR).norm().item() < limit


@pytest.mark.parametrize("dtype", DTYPES)
def test_sam_sps_converges_to_the_rho_neighbourhood(dtype: torch.dtype) -> None:
    """SAM-SPS stops (gamma = 0) once f - F_MIN <= rho^2 g^T H g / (2 ||g||^2) <= rho^2 L / 2,
    so it ends within ||x - x*|| <= rho sqrt(L / mu) = rho sqrt(10) of x*."""
    rho = 0.01
    x = param(dtype)
    opt = SAMSPS([x], rho=rho, f_star=F_MIN, weight_decay=0.0)
    for _ in range(300):
        opt.step(closure_for(x))
    assert (x.detach().double() - X_STAR).norm().item() <= rho * math.sqrt(10.0) + 1e-6


# ---- groups, state round trip, PBT overwrite ------------------------------------------------


def test_groups_have_their_own_rho_and_cap() -> None:
    """One Polyak ratio for the model; each group ascends with its own rho and caps with its
    own lr_max and c."""
    a, b = param(torch.float64, X0[0]), param(torch.float64, X0[1])
    opt = SAMSPS(
        [{"params": [a], "rho": 0.2}, {"params": [b], "rho": 0.05, "lr_max": 0.01}],
        rho=0.1,
        f_star=F_MIN,
        weight_decay=0.0,
    )
    opt.step(closure_for_split(a, b))
    g = H * (X0 - X_STAR)
    d = torch.stack([0.2 * g[0], 0.05 * g[1]]) / g.norm()
    g_e = H * (X0 + d - X_STAR)
    f_e = (0.5 * (H * (X0 + d - X_STAR) ** 2).sum() + F_MIN).item()
    ratio = (f_e - F_MIN - (g_e * d).sum().item()) / g_e.norm().item() ** 2
    assert ratio > 0.01
    assert opt.param_groups[0]["last_step_size"] == pytest.approx(min(ratio, 1.0), rel=1e-12)
    assert opt.param_groups[1]["last_step_size"] == 0.01
    torch.testing.assert_close(a.detach(), X0[0] - min(ratio, 1.0) * g_e[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(b.detach(), X0[1] - 0.01 * g_e[1], rtol=1e-12, atol=1e-12)


def closure_for_split(a: torch.Tensor, b: torch.Tensor) -> Callable[[], torch.Tensor]:
    def closure() -> torch.Tensor:
        loss = quad(torch.stack([a, b]))
        loss.backward()
        return loss

    return closure


def test_f_star_must_agree_across_groups() -> None:
    a, b = param(torch.float64, X0[0]), param(torch.float64, X0[1])
    opt = SAMSPS([{"params": [a], "f_star": 1.0}, {"params": [b]}])
    with pytest.raises(ValueError, match="f_star"):
        opt.step(closure_for_split(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_state_dict_round_trip_is_bitwise(dtype: torch.dtype) -> None:
    x = param(dtype)
    opt = SAMSPS([x], rho=0.05, f_star=F_MIN)
    for _ in range(4):
        opt.step(closure_for(x))
    saved = through_torch_save(opt.state_dict())
    y = x.detach().clone().requires_grad_(True)
    fresh = SAMSPS([y])
    fresh.load_state_dict(saved)
    assert fresh.param_groups[0]["last_step_size"] == opt.param_groups[0]["last_step_size"]
    opt.step(closure_for(x))
    fresh.step(closure_for(y))
    assert torch.equal(x, y)
    assert fresh.param_groups[0]["last_step_size"] == opt.param_groups[0]["last_step_size"]


def test_lr_max_overwritten_after_load_takes_effect() -> None:
    x = param(torch.float64)
    opt = SAMSPS([x], rho=0.05, f_star=F_MIN, weight_decay=0.0)
    opt.step(closure_for(x))
    y = x.detach().clone().requires_grad_(True)
    child = SAMSPS([y])
    child.load_state_dict(copy.deepcopy(opt.state_dict()))
    child.param_groups[0]["lr_max"] = 1e-4
    before = y.detach().clone()
    child.step(closure_for(y))
    assert child.param_groups[0]["last_step_size"] == 1e-4
    assert opt.param_groups[0]["lr_max"] == 1.0
    g_e = y.grad  # the gradient of pass 2, left in .grad
    assert g_e is not None
    torch.testing.assert_close(y.detach(), before - 1e-4 * g_e, rtol=1e-12, atol=1e-15)
