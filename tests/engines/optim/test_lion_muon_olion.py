"""Tests of Lion, Lion+, Muon, Muon+ and OLion (``engines/optim/lion.py``, ``muon.py``,
``olion.py``) and their shared helpers.

Hand-computed steps use plain torch ops written here (including a separate Newton-Schulz loop),
never the implementation. Every run is deterministic (seeded generators, fixed step counts), so
the tolerances below are not statistical: a run meets them or the code changed. Tolerances of
hand checks: 1e-12 (float64) and 1e-5 relative / 1e-6 absolute (float32, where the order of
operations differs). State round trips are compared bitwise (torch.equal).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from engines.optim import (
    Lion,
    LionPlus,
    Muon,
    MuonPlus,
    OLion,
    newton_schulz5,
    olion_param_groups,
    split_matrix_params,
)
from tests.engines.optim.harness import through_torch_save

DTYPES = [torch.float32, torch.float64]
A, B, C = 3.4445, -4.7750, 2.0315


def tol(dtype: torch.dtype) -> dict[str, float]:
    return (
        {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    )


def hand_ns5(g: Tensor, eps: float = 1e-7) -> Tensor:
    """Five quintic Newton-Schulz steps, written out independently of the implementation."""
    x = g.to(torch.float64 if g.dtype == torch.float64 else torch.float32)
    flip = x.shape[0] > x.shape[1]
    if flip:
        x = x.T
    x = x / (torch.sqrt((x * x).sum()) + eps)
    for _ in range(5):
        gram = x @ x.T
        x = A * x + (B * gram + C * gram @ gram) @ x
    return x.T if flip else x


def data(dtype: torch.dtype, shape: tuple[int, ...] = (2, 3), seed: int = 0) -> list[Tensor]:
    """x0, g1, g2 for a hand check: a parameter and two gradients."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen, dtype=dtype) for _ in range(3)]


def run_grads(opt: torch.optim.Optimizer, p: Tensor, grads: list[Tensor]) -> None:
    for g in grads:
        p.grad = g.clone()
        opt.step()


# --- hand-computed steps -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_lion_two_steps_match_hand_computation(dtype: torch.dtype) -> None:
    x0, g1, g2 = data(dtype)
    lr, b1, b2, wd = 0.01, 0.9, 0.99, 0.5
    p = x0.clone()
    run_grads(Lion([p], lr=lr, betas=(b1, b2), weight_decay=wd), p, [g1, g2])
    x, m = x0.clone(), torch.zeros_like(x0)
    for g in (g1, g2):
        c = b1 * m + (1 - b1) * g
        x = x * (1 - lr * wd) - lr * torch.sign(c)
        m = b2 * m + (1 - b2) * g
    torch.testing.assert_close(p, x, **tol(dtype))
    assert p.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_lion_plus_clips_gradients_into_the_momentum(dtype: torch.dtype) -> None:
    x0, g1, g2 = data(dtype)
    lr, b1, b2, tau = 0.01, 0.9, 0.99, 0.3
    p = x0.clone()
    opt = LionPlus([p], lr=lr, betas=(b1, b2), tau=tau)
    run_grads(opt, p, [g1, g2])
    x, m = x0.clone(), torch.zeros_like(x0)
    for g in (g1, g2):
        gc = g * min(1.0, tau / float(torch.sqrt((g * g).sum())))
        c = b1 * m + (1 - b1) * gc
        x = x - lr * torch.sign(c)
        m = b2 * m + (1 - b2) * gc
    torch.testing.assert_close(p, x, **tol(dtype))
    # the clipped gradient is really in the momentum (the sign alone would not show it)
    torch.testing.assert_close(opt.state[p]["exp_avg"], m, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scope", ["global", "element"])
def test_lion_plus_variance_reduction_matches_hand_computation(
    dtype: torch.dtype, scope: str
) -> None:
    x0, w, target = data(dtype, seed=1)
    w = w.abs() + 0.5
    lr, b1, b2, tau, a = 0.05, 0.9, 0.99, 2.0, 0.3
    if scope == "element":
        tau = 0.4  # below the largest coordinates, so the clamp acts

    def grad_at(x: Tensor) -> Tensor:
        return w * (x - target)

    p = x0.clone().requires_grad_(True)
    opt = LionPlus([p], lr=lr, betas=(b1, b2), tau=tau, vr=True, vr_a=a, norm_scope=scope)

    def closure() -> Tensor:
        opt.zero_grad()
        loss = 0.5 * (w * (p - target) ** 2).sum()
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)

    def clip(g: Tensor) -> Tensor:
        if scope == "element":
            return g.clamp(-tau, tau)
        return g * min(1.0, tau / float(torch.sqrt((g * g).sum())))

    x, m, d, x_prev = x0.clone(), torch.zeros_like(x0), None, None
    for _ in range(3):
        gc = clip(grad_at(x))
        d = gc if d is None else gc + (1 - a) * (d - clip(grad_at(x_prev)))
        x_prev = x.clone()
        c = b1 * m + (1 - b1) * d
        x = x - lr * torch.sign(c)
        m = b2 * m + (1 - b2) * d
    torch.testing.assert_close(p.detach(), x, **tol(dtype))
    torch.testing.assert_close(opt.state[p]["vr_d"], d, **tol(dtype))
    torch.testing.assert_close(opt.state[p]["exp_avg"], m, **tol(dtype))
    assert p.grad is not None and torch.equal(p.grad, grad_at(x_prev))  # pass-1 gradient kept


def test_lion_plus_vr_needs_a_closure() -> None:
    p = torch.zeros(2, 3, requires_grad=True)
    p.grad = torch.ones(2, 3)
    with pytest.raises(ValueError, match="closure"):
        LionPlus([p], vr=True).step()


def test_lion_plus_adaptive_threshold_clips_an_outlier() -> None:
    """After 10 unit-norm gradients, a gradient of norm 1000 is clipped to the 0.9 quantile (1)."""
    p = torch.zeros(2, 3)
    opt = LionPlus([p], lr=0.0, betas=(0.0, 0.0))
    unit = torch.full((2, 3), 1 / math.sqrt(6.0))
    run_grads(opt, p, [unit] * 10 + [1000 * unit])
    # beta2 = 0: the momentum is the last clipped gradient
    torch.testing.assert_close(opt.state[p]["exp_avg"], unit)
    assert opt.state[p]["group_norm_history"].numel() == 11


@pytest.mark.parametrize("scope", ["global", "group", "tensor"])
def test_lion_plus_norm_scopes(scope: str) -> None:
    """With betas (0, 0) the momentum is the clipped gradient; check it for each norm scope."""
    x0, g1, h1 = data(torch.float64, seed=4)
    p, q = x0.clone(), x0.clone()
    groups = [{"params": [p]}, {"params": [q], "tau": 0.7}]
    opt = LionPlus(groups, lr=0.0, betas=(0.0, 0.0), tau=0.5, norm_scope=scope)
    p.grad, q.grad = g1.clone(), h1.clone()
    opt.step()
    norm_p, norm_q = float(g1.norm()), float(h1.norm())
    if scope == "global":
        norm_p = norm_q = math.sqrt(norm_p**2 + norm_q**2)
    torch.testing.assert_close(opt.state[p]["exp_avg"], g1 * min(1.0, 0.5 / norm_p))
    torch.testing.assert_close(opt.state[q]["exp_avg"], h1 * min(1.0, 0.7 / norm_q))


def test_lion_plus_element_scope_clamps_each_coordinate() -> None:
    """Scope "element": a fixed tau clamps every coordinate; the adaptive tau is the quantile of
    the tensor's nonzero |g_i| at this step, and a zero gradient passes unclipped."""
    g = torch.tensor([[0.1, -0.2, 0.3], [-4.0, 0.0, 50.0]])
    p, q, z = torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(4)
    fixed = LionPlus([p], lr=0.0, betas=(0.0, 0.0), tau=0.25, norm_scope="element")
    run_grads(fixed, p, [g])
    torch.testing.assert_close(fixed.state[p]["exp_avg"], g.clamp(-0.25, 0.25))
    # nonzero magnitudes 0.1 0.2 0.3 4 50: the 0.6 quantile is the 3rd, 0.3
    adaptive = LionPlus([q, z], lr=0.0, betas=(0.0, 0.0), tau_quantile=0.6, norm_scope="element")
    q.grad, z.grad = g.clone(), torch.zeros(4)
    adaptive.step()
    torch.testing.assert_close(adaptive.state[q]["exp_avg"], g.clamp(-0.3, 0.3))
    assert torch.equal(adaptive.state[z]["exp_avg"], torch.zeros(4))


def test_lion_plus_element_scope_bounds_an_outlier_in_the_momentum() -> None:
    """One huge coordinate: a norm clip scales the whole gradient, so the hit coordinate still
    pushes its momentum past every clean value; the element clip bounds it."""
    signal = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    grads = [signal.clone() for _ in range(10)]
    grads.append(signal + torch.tensor([0.0] * 9 + [1e4]))
    moms = {}
    for scope in ("global", "element"):
        p = torch.zeros(10)
        opt = LionPlus([p], lr=0.0, betas=(0.0, 0.5), norm_scope=scope)
        run_grads(opt, p, grads)
        moms[scope] = opt.state[p]["exp_avg"]
    # element: the last coordinate is clamped to the 0.9 quantile of |g| (1), so it stays +-1
    assert abs(float(moms["element"][-1])) <= 1.0
    assert float(moms["global"][-1]) > 1.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3), (3, 2)])
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_two_steps_match_hand_computation(
    dtype: torch.dtype, shape: tuple[int, int], nesterov: bool
) -> None:
    x0, g1, g2 = data(dtype, shape)
    lr, beta, wd = 0.02, 0.95, 0.1
    p = x0.clone()
    run_grads(Muon([p], lr=lr, momentum=beta, nesterov=nesterov, weight_decay=wd), p, [g1, g2])
    x, buf = x0.clone(), torch.zeros_like(x0)
    scale = max(1.0, shape[0] / shape[1]) ** 0.5
    for g in (g1, g2):
        buf = beta * buf + (1 - beta) * g
        u = (1 - beta) * g + beta * buf if nesterov else buf
        x = (1 - lr * wd) * x - lr * scale * hand_ns5(u).to(dtype)
    torch.testing.assert_close(p, x, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_muon_moonlight_scale_and_muon_plus_clipping(dtype: torch.dtype) -> None:
    x0, g1, g2 = data(dtype, (3, 2))
    lr, beta, tau = 0.02, 0.9, 0.5
    p = x0.clone()
    opt = MuonPlus([p], lr=lr, momentum=beta, shape_scale="moonlight", tau=tau)
    run_grads(opt, p, [g1, g2])
    x, buf = x0.clone(), torch.zeros_like(x0)
    for g in (g1, g2):
        g = g * min(1.0, tau / float(torch.sqrt((g * g).sum())))
        buf = beta * buf + (1 - beta) * g
        u = (1 - beta) * g + beta * buf
        x = x - lr * 0.2 * math.sqrt(3.0) * hand_ns5(u).to(dtype)
    torch.testing.assert_close(p, x, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3), (3, 2)])
def test_olion_two_steps_match_hand_computation(dtype: torch.dtype, shape: tuple[int, int]) -> None:
    x0, g1, g2 = data(dtype, shape)
    lr, b1, b2, wd, eps = 1e-3, 0.95, 0.98, 0.1, 1e-8
    p = x0.clone()
    opt = OLion([p], lr=lr, momentum=b1, momentum_2=b2, weight_decay=wd)
    run_grads(opt, p, [g1, g2])
    x, m = x0.clone(), torch.zeros_like(x0)
    for g in (g1, g2):
        m = b2 * m + (1 - b2) * g
        u = (1 - b1) * g + b1 * m
        s = torch.sign(hand_ns5(u, eps))
        s = s * math.sqrt(min(shape)) / (torch.sqrt((s * s).sum()) + eps)
        s = s * 0.2 * math.sqrt(max(shape))
        x = (1 - lr * wd) * x - lr * s.to(dtype)
    torch.testing.assert_close(p, x, **tol(dtype))
    # no zero entries here, so one step moves every entry by lr * 0.2 (after the weight decay)
    q = x0.clone()
    run_grads(OLion([q], lr=lr, weight_decay=wd), q, [g1])
    step = (q - (1 - lr * wd) * x0).abs()
    atol = 1e-6 if dtype == torch.float32 else 1e-12  # float32 rounding of x0 ~ 1
    torch.testing.assert_close(step, torch.full_like(step, lr * 0.2), rtol=0.0, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls", [Muon, OLion])
def test_adamw_groups_match_hand_computation(cls: type, dtype: torch.dtype) -> None:
    x0, g1, g2 = data(dtype)
    lr, b1, b2, eps, wd = 3e-3, 0.9, 0.95, 1e-10, 0.2
    p, q = x0.clone(), x0.clone()
    opt = cls([{"params": [p], "adamw": True, "weight_decay": wd}, {"params": [q]}], adamw_lr=lr)
    for g in (g1, g2):
        p.grad, q.grad = g.clone(), g.clone()
        opt.step()
    x, m, v = x0.clone(), torch.zeros_like(x0), torch.zeros_like(x0)
    for t, g in enumerate((g1, g2), start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        x = x * (1 - lr * wd) - lr * (m / (1 - b1**t)) / (torch.sqrt(v / (1 - b2**t)) + eps)
    torch.testing.assert_close(p, x, **tol(dtype))
    assert opt.param_groups[0]["lr"] == lr and opt.param_groups[0]["betas"] == (b1, b2)


# --- Frank-Wolfe gap ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_fw_gap_matches_its_closed_form(dtype: torch.dtype) -> None:
    x0, g, _ = data(dtype, (3, 2))
    wd = 0.5
    p = x0.clone()
    p.grad = g.clone()
    lion_gap = float((g * x0).sum() + g.abs().sum() / wd)
    assert Lion([p], weight_decay=wd).fw_gap() == pytest.approx(lion_gap, rel=1e-6)
    nuclear = float(torch.linalg.svdvals(g).sum())
    muon_gap = float((g * x0).sum()) + math.sqrt(1.5) / wd * nuclear
    assert Muon([p], weight_decay=wd).fw_gap() == pytest.approx(muon_gap, rel=1e-6)
    assert Lion([p]).fw_gap() == math.inf  # wd = 0: the ball is unbounded


def test_lion_with_weight_decay_solves_the_box_constrained_problem() -> None:
    """SFW reading: Lion with wd converges to the minimizer over ||x||_inf <= 1/wd, FW gap -> 0.

    f(x) = 0.5 ||x - t||^2 with t outside the box; the solution is clip(t, -1/wd, 1/wd).
    """
    t = torch.tensor([[3.0, -0.5, 0.2], [-4.0, 1.5, -1.0]], dtype=torch.float64)
    wd = 1.0
    p = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    opt = Lion([p], lr=0.05, betas=(0.9, 0.99), weight_decay=wd)
    steps = 1000
    for k in range(steps):
        opt.param_groups[0]["lr"] = 0.05 * 0.5 * (1 + math.cos(math.pi * k / steps))
        opt.zero_grad()
        (0.5 * ((p - t) ** 2).sum()).backward()
        opt.step()
    opt.zero_grad()
    (0.5 * ((p - t) ** 2).sum()).backward()
    # 1000 cosine-decayed steps reach about 1e-5 in both
    torch.testing.assert_close(p.detach(), t.clamp(-1 / wd, 1 / wd), atol=1e-3, rtol=0.0)
    assert 0.0 <= opt.fw_gap() < 1e-3


# --- convergence on a strongly convex quadratic ------------------------------------------------


FACTORIES: dict[str, Callable[[list[Any]], torch.optim.Optimizer]] = {
    "lion": lambda ps: Lion(ps, lr=0.05),
    "lion+": lambda ps: LionPlus(ps, lr=0.05, tau=0.5),
    "muon": lambda ps: Muon(ps, lr=0.05),
    "muon+": lambda ps: MuonPlus(ps, lr=0.05, tau=0.5, norm_scope="tensor"),
    "olion": lambda ps: OLion(ps, lr=0.1),
    "olion-adamw": lambda ps: OLion([{"params": ps, "adamw": True}], adamw_lr=0.05),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_converges_on_a_strongly_convex_quadratic(name: str, dtype: torch.dtype) -> None:
    """f(X) = 0.5 sum h (X - T)^2, h in [1, 4], X_0 = 0; 1000 steps, cosine-decayed lr.

    Sign and orthogonalized steps move entries by about lr whatever the gradient, so they end
    within about the last learning rates of T; we require max |X - T| < 1e-3 from |T| ~ 1 (all
    reach about 1e-5). Lion+ and Muon+ clip (tau = 0.5 is below the early gradient norms).
    """
    gen = torch.Generator().manual_seed(3)
    t = torch.randn(4, 6, generator=gen, dtype=dtype)
    h = 1 + 3 * torch.rand(4, 6, generator=gen, dtype=dtype)
    p = torch.zeros(4, 6, dtype=dtype, requires_grad=True)
    opt = FACTORIES[name]([p])
    lr0 = [g["lr"] for g in opt.param_groups]
    steps = 1000
    for k in range(steps):
        for group, lr in zip(opt.param_groups, lr0, strict=True):
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * k / steps))
        opt.zero_grad()
        (0.5 * (h * (p - t) ** 2).sum()).backward()
        opt.step()
    assert float((p.detach() - t).abs().max()) < 1e-3


# --- state_dict round trip, PBT exploit, param groups ------------------------------------------


def _model_params(dtype: torch.dtype) -> list[Tensor]:
    gen = torch.Generator().manual_seed(5)
    shapes = [(4, 3), (3,), (2, 4), (2,)]
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_(True) for s in shapes]


def _groups(params: list[Tensor], name: str) -> list[dict[str, Any]]:
    """Matrices in the first group, vectors in an AdamW group (Muon, OLion) or a second group."""
    if name.startswith(("muon", "olion")):
        return [{"params": params[0::2]}, {"params": params[1::2], "adamw": True}]
    return [{"params": params[0::2]}, {"params": params[1::2], "lr": 2e-3}]


STATEFUL: dict[str, Callable[[list[dict[str, Any]]], torch.optim.Optimizer]] = {
    "lion": lambda g: Lion(g, lr=1e-3, weight_decay=0.1),
    "lion+": lambda g: LionPlus(g, lr=1e-3, weight_decay=0.1),  # adaptive tau: history in state
    "lion+vr": lambda g: LionPlus(g, lr=1e-3, tau=1.0, vr=True, norm_scope="tensor"),
    "muon": lambda g: Muon(g, weight_decay=0.1),
    "muon+": lambda g: MuonPlus(g, norm_scope="group"),
    "muon+vr": lambda g: MuonPlus(g, tau=2.0, tau_exponent=0.25, vr=True),
    "olion": lambda g: OLion(g, weight_decay=0.1),
}


def _closure(opt: torch.optim.Optimizer, params: list[Tensor], k: int) -> Callable[[], Tensor]:
    """Batch k of a noisy quadratic: f_k(x) = sum 0.5 (x - t_k)^2 with t_k drawn from seed k."""
    gen = torch.Generator().manual_seed(100 + k)
    targets = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]

    def closure() -> Tensor:
        opt.zero_grad()
        loss = sum(0.5 * ((p - t) ** 2).sum() for p, t in zip(params, targets, strict=True))
        assert isinstance(loss, Tensor)
        loss.backward()
        return loss

    return closure


def _run(opt: torch.optim.Optimizer, params: list[Tensor], start: int, steps: int) -> None:
    for k in range(start, start + steps):
        opt.step(_closure(opt, params, k))


def _fresh(name: str, params: list[Tensor]) -> tuple[list[Tensor], torch.optim.Optimizer]:
    copies = [p.detach().clone().requires_grad_(True) for p in params]
    return copies, STATEFUL[name](_groups(copies, name))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(STATEFUL))
def test_state_dict_round_trip_gives_bitwise_the_same_next_step(
    name: str, dtype: torch.dtype
) -> None:
    """12 steps (past the 10 norms the adaptive threshold needs), save through torch.save with
    weights_only loading, restore into a fresh optimizer, then both take step 13 and 14."""
    params = _model_params(dtype)
    opt = STATEFUL[name](_groups(params, name))
    _run(opt, params, 0, 12)
    saved = through_torch_save(opt.state_dict())
    copies, restored = _fresh(name, params)
    restored.load_state_dict(saved)
    _run(opt, params, 12, 2)
    _run(restored, copies, 12, 2)
    for p, q in zip(params, copies, strict=True):
        assert p.dtype == dtype and torch.equal(p, q)
    for p, q in zip(params, copies, strict=True):
        for key, value in opt.state[p].items():
            other = restored.state[q][key]
            if isinstance(value, Tensor):
                assert value.dtype == dtype and torch.equal(value, other), key
            else:
                assert value == other, key


@pytest.mark.parametrize("name", sorted(STATEFUL))
def test_loading_in_memory_state_does_not_share_buffers(name: str) -> None:
    params = _model_params(torch.float64)
    opt = STATEFUL[name](_groups(params, name))
    _run(opt, params, 0, 3)
    before = {k: v.clone() for k, v in opt.state[params[0]].items() if isinstance(v, Tensor)}
    copies, other = _fresh(name, params)
    other.load_state_dict(opt.state_dict())
    _run(other, copies, 3, 2)
    for key, value in before.items():
        assert torch.equal(opt.state[params[0]][key], value), key


@pytest.mark.parametrize("name", sorted(STATEFUL))
def test_lr_overwritten_after_load_takes_effect(name: str) -> None:
    """The PBT exploit: load the donor's state, then set a new lr in param_groups.

    With wd = 0 every method here moves by lr times a direction that does not depend on lr, so
    doubling lr in every group doubles the next step.
    """
    params = _model_params(torch.float64)
    opt = STATEFUL[name](_groups(params, name))
    for group in opt.param_groups:
        group["weight_decay"] = 0.0
    _run(opt, params, 0, 4)
    state = opt.state_dict()
    start = [p.detach().clone() for p in params]
    same, same_opt = _fresh(name, params)
    same_opt.load_state_dict(state)
    doubled, doubled_opt = _fresh(name, params)
    doubled_opt.load_state_dict(state)
    for group in doubled_opt.param_groups:
        group["lr"] *= 2
    _run(same_opt, same, 4, 1)
    _run(doubled_opt, doubled, 4, 1)
    for p0, p1, p2 in zip(start, same, doubled, strict=True):
        torch.testing.assert_close(p2 - p0, 2 * (p1 - p0), rtol=1e-9, atol=1e-12)
        assert not torch.equal(p1, p0)


@pytest.mark.parametrize("name", ["lion", "lion+", "muon", "muon+", "olion"])
def test_param_groups_with_different_hyperparameters_act_independently(name: str) -> None:
    """Two groups with their own hyperparameters step exactly as two separate optimizers."""
    settings = {
        "lion": (Lion, {"lr": 1e-3, "betas": (0.8, 0.9)}, {"lr": 5e-3, "weight_decay": 0.3}),
        "lion+": (LionPlus, {"tau": 0.5, "norm_scope": "group"}, {"tau_quantile": 0.5}),
        "muon": (Muon, {"lr": 0.01, "nesterov": False}, {"momentum": 0.8, "weight_decay": 0.2}),
        "muon+": (MuonPlus, {"norm_scope": "group", "tau": 0.3}, {"shape_scale": "moonlight"}),
        "olion": (OLion, {"lr": 1e-2, "momentum_2": 0.9}, {"use_scale": False, "rms_scale": None}),
    }
    cls, first, second = settings[name]
    x0, g1, g2 = data(torch.float64, (3, 4), seed=7)
    y0, h1, h2 = data(torch.float64, (3, 4), seed=8)
    p, q = x0.clone(), y0.clone()
    both = cls([{"params": [p], **first}, {"params": [q], **second}])
    p_alone, q_alone = x0.clone(), y0.clone()
    opt_p, opt_q = cls([p_alone], **first), cls([q_alone], **second)
    for gp, gq in ((g1, h1), (g2, h2)):
        p.grad, q.grad, p_alone.grad, q_alone.grad = gp, gq, gp.clone(), gq.clone()
        both.step()
        opt_p.step()
        opt_q.step()
    assert torch.equal(p, p_alone) and torch.equal(q, q_alone)
    assert not torch.equal(p - x0, q - y0)


# --- helpers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_newton_schulz_maps_singular_values_near_one(dtype: torch.dtype) -> None:
    """Part C's numeric check: normalized singular values in [2e-3, 1] land in [0.68, 1.20]."""
    gen = torch.Generator().manual_seed(11)
    u, _ = torch.linalg.qr(torch.randn(8, 8, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(5, 5, generator=gen, dtype=torch.float64))
    s = torch.tensor([1.0, 0.5, 0.1, 0.01, 2e-3], dtype=torch.float64)
    g = (u[:, :5] * s) @ v.T
    out = newton_schulz5(g.to(dtype))
    assert out.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    sv = torch.linalg.svdvals(out.to(torch.float64))
    assert float(sv.min()) > 0.6 and float(sv.max()) < 1.25
    torch.testing.assert_close(out, hand_ns5(g.to(dtype)), rtol=1e-5, atol=1e-6)
    assert torch.equal(newton_schulz5(torch.zeros(3, 2)), torch.zeros(3, 2))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.conv = nn.Conv1d(4, 4, 3)
        self.hidden = nn.Linear(4, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 3)


def test_split_matrix_params_leaves_embeddings_head_and_vectors_to_adamw() -> None:
    net = _Net()
    matrices, rest = split_matrix_params(net, matrix_options={"lr": 0.1})
    assert matrices["lr"] == 0.1 and rest["adamw"] is True
    assert [id(p) for p in matrices["params"]] == [id(net.conv.weight), id(net.hidden.weight)]
    assert len(rest["params"]) == len(list(net.parameters())) - 2
    assert any(p is net.head.weight for p in rest["params"])
    matrices, _ = olion_param_groups(net, exclude_head=False, exclude=["conv"])
    assert [id(p) for p in matrices["params"]] == [id(net.hidden.weight), id(net.head.weight)]
    opt = OLion(split_matrix_params(net))
    x = torch.randint(0, 10, (2, 5))
    out = net.head(net.norm(net.hidden(net.conv(net.embed(x).mT).mT))).sum()
    out.backward()
    opt.step()  # conv kernels (3-D) are flattened for Newton-Schulz


@pytest.mark.parametrize("cls", [Muon, MuonPlus, OLion])
def test_matrix_groups_refuse_vectors(cls: type) -> None:
    with pytest.raises(ValueError, match="adamw=True"):
        cls([torch.zeros(3, requires_grad=True)])


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (Lion, {"lr": -1.0}),
        (Lion, {"betas": (0.9, 1.0)}),
        (LionPlus, {"tau": 0.0}),
        (LionPlus, {"norm_scope": "layer"}),
        (Muon, {"shape_scale": "other"}),
        (MuonPlus, {"vr_a": 0.0}),
        (OLion, {"rms_scale": -0.2}),
    ],
)
def test_invalid_hyperparameters_raise(cls: type, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        cls([torch.zeros(2, 3, requires_grad=True)], **kwargs)
