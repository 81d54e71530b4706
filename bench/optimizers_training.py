"""One training run of the optimizers bench (``bench/optimizers.py`` describes the set-up): the
digits split, the MLP, the minibatches, the Student-t gradient noise, the bench-only baselines
(``FixedLrSAM``, plain SGD) and the learning-rate sweeps."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits, make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import Tensor, nn
from torch.nn import functional as F

from engines.optim.registry import OPTIMIZERS, build, search_space

BATCH = 64
VAL_FRACTION = 0.2
HIDDEN = 256
NU = 1.5
NOISE_SCALE = 1.0

# Bench-only baselines: name -> (knob, grid centre, low, high).
SAM = "sam"  # FixedLrSAM, no momentum (same settings as SAM-SPS's defaults)
SAM_MOMENTUM = "sam-m0.9"  # FixedLrSAM, momentum 0.9
SGD_PLAIN = "sgd-plain"  # torch.optim.SGD, no momentum
EXTRA_GRIDS: dict[str, tuple[str, float, float, float]] = {
    SAM: ("lr", 0.1, 0.01, 1.0),
    SAM_MOMENTUM: ("lr", 0.01, 0.001, 0.1),
    SGD_PLAIN: ("lr", 0.01, 0.001, 0.1),
}
NOISE_OPTIMIZERS = [
    SGD_PLAIN,
    "sgd",
    "clipped-sgd",
    "normalized-sgd",
    "adagrad-norm",
    "lion",
    "lion+",
    "muon",
    "muon+",
]


# --- optimizers defined here -------------------------------------------------------------------


class FixedLrSAM(torch.optim.Optimizer):
    """SAM [Foret et al. 2021] with a constant learning rate: SAM-SPS's step with gamma = lr.

    g = grad f(x); e = x + rho g / ||g|| (global norm); g_e = grad f(e);
    d = g_e + weight_decay * x (coupled L2, as SAM-SPS); buf <- momentum * buf + d (if momentum);
    x <- x - lr * (buf or d). ``step`` needs a closure doing forward and backward; it zeroes the
    gradients before each pass and returns the loss at x.
    """

    #: SAM-SPS's rho and weight decay, no momentum.
    DEFAULTS = {"lr": 0.1, "rho": 0.1, "momentum": 0.0, "weight_decay": 5e-4}

    def __init__(self, params: Iterable[Any], **hyper: float) -> None:
        if unknown := sorted(set(hyper) - set(self.DEFAULTS)):
            raise TypeError(f"FixedLrSAM has no hyperparameters {unknown}")
        super().__init__(params, self.DEFAULTS | hyper)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        if closure is None:
            raise TypeError("FixedLrSAM.step needs a closure (two passes)")
        self.zero_grad(set_to_none=True)
        with torch.enable_grad():
            loss = closure()
        groups = [[p for p in g["params"] if p.grad is not None] for g in self.param_groups]
        norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for ps in groups for p in ps))
        saved: list[tuple[Tensor, Tensor]] = []
        for group, ps in zip(self.param_groups, groups, strict=True):
            scale = group["rho"] / norm if norm > 0.0 else 0.0
            for p in ps:
                saved.append((p, p.detach().clone()))
                p.add_(p.grad, alpha=scale)
        self.zero_grad(set_to_none=True)
        with torch.enable_grad():
            closure()
        for p, x in saved:
            p.copy_(x)
        for group, ps in zip(self.param_groups, groups, strict=True):
            lr, wd, mom = group["lr"], group["weight_decay"], group["momentum"]
            for p in ps:
                if p.grad is None:
                    continue
                d = p.grad.add(p, alpha=wd) if wd else p.grad
                if mom:
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = d.clone()
                    else:
                        state["momentum_buffer"].mul_(mom).add_(d)
                    d = state["momentum_buffer"]
                p.add_(d, alpha=-lr)
        return loss


def make_optimizer(
    name: str,
    model: nn.Module,
    knob: str,
    value: float | None,
    options: dict[str, Any] | None = None,
) -> Any:
    """Registry optimizers via ``build`` (defaults, then ``options``, knob overridden); bench
    baselines here."""
    hp = {**(options or {}), **({} if value is None else {knob: value})}
    if name == SAM:
        return FixedLrSAM(model.parameters(), **hp)
    if name == SAM_MOMENTUM:
        return FixedLrSAM(model.parameters(), momentum=0.9, **hp)
    if name == SGD_PLAIN:
        return torch.optim.SGD(model.parameters(), momentum=0.0, **hp)
    return build(name, model, **hp)


def needs_closure(name: str) -> bool:
    if name in EXTRA_GRIDS:
        return name in (SAM, SAM_MOMENTUM)
    return OPTIMIZERS[name].needs_closure


# --- sweeps ------------------------------------------------------------------------------------


def knob_of(name: str) -> str:
    if name in EXTRA_GRIDS:
        return EXTRA_GRIDS[name][0]
    return "lr_max" if name in ("sam-sps", "usam-sps") else "lr"


def grid_of(name: str, points: int) -> tuple[float | None, list[float]]:
    """(default value of the knob or None, the sweep values)."""
    knob = knob_of(name)
    if name in EXTRA_GRIDS:
        _, _centre, low, high = EXTRA_GRIDS[name]
        return None, [float(v) for v in np.geomspace(low, high, points)]
    default = float(OPTIMIZERS[name].defaults[knob])
    (bounds,) = [p for p in search_space(name) if p["name"] == knob]
    low = max(float(bounds["low"]), default / 10.0)
    high = min(float(bounds["high"]), default * 10.0)
    return default, [float(v) for v in np.geomspace(low, high, points)]


def configs_of(name: str, points: int) -> list[tuple[float, bool]]:
    """(knob value, is the default) for every run of ``name``; the default added if off-grid."""
    default, grid = grid_of(name, points)
    out = [(v, default is not None and math.isclose(v, default, rel_tol=1e-9)) for v in grid]
    if default is not None and not any(is_default for _, is_default in out):
        out.append((default, True))
        out.sort()
    return out


# --- data, model, one training run --------------------------------------------------------------


@dataclass
class Split:
    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor


#: The synthetic task's data seed: one fixed dataset, split by the run's seed like digits.
SYNTHETIC_DATA_SEED = 20261206


def load_split(seed: int, task: str = "digits") -> Split:
    """The task's train/validation split for ``seed``: "digits", or "synthetic" (a tuning task
    of digits' shape: 1,797 rows, 64 features, 10 classes, from ``make_classification``)."""
    if task == "digits":
        x, y = load_digits(return_X_y=True)
    elif task == "synthetic":
        x, y = make_classification(
            n_samples=1797,
            n_features=64,
            n_informative=24,
            n_redundant=8,
            n_classes=10,
            n_clusters_per_class=2,
            random_state=SYNTHETIC_DATA_SEED,
        )
    else:
        raise ValueError(f"unknown task {task!r}")
    x_tr, x_va, y_tr, y_va = train_test_split(
        x,
        y,
        test_size=VAL_FRACTION,
        stratify=y,
        random_state=seed,
    )
    scaler = StandardScaler().fit(x_tr)
    return Split(
        torch.tensor(scaler.transform(x_tr), dtype=torch.float32),
        torch.tensor(y_tr, dtype=torch.long),
        torch.tensor(scaler.transform(x_va), dtype=torch.float32),
        torch.tensor(y_va, dtype=torch.long),
    )


def make_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, 10),
    )


def batch_indices(n: int, steps: int, seed: int) -> list[Tensor]:
    """Minibatch indices for ``steps`` steps: reshuffled each epoch, partial batch dropped."""
    gen = torch.Generator().manual_seed(seed)
    out: list[Tensor] = []
    while len(out) < steps:
        perm = torch.randperm(n, generator=gen)
        out.extend(perm[i : i + BATCH] for i in range(0, n - BATCH + 1, BATCH))
    return out[:steps]


def student_t(shape: torch.Size, nu: float, gen: torch.Generator) -> Tensor:
    """Student-t(nu) samples by Bailey's polar method (exact; 2.5x faster here than
    ``torch.distributions.StudentT``, and it takes a generator): (u, v) uniform in the unit
    disc, w = u^2 + v^2, t = u sqrt(nu (w^(-2/nu) - 1) / w). The draws depend only on ``gen``.
    """
    n = math.prod(shape)
    parts: list[Tensor] = []
    got = 0
    while got < n:
        uv = torch.rand(2, int((n - got) * 1.3) + 64, generator=gen) * 2.0 - 1.0
        w = uv[0] * uv[0] + uv[1] * uv[1]
        inside = (w < 1.0) & (w > 0.0)
        u, w = uv[0][inside], w[inside]
        parts.append(u * torch.sqrt(nu * (w.pow(-2.0 / nu) - 1.0) / w))
        got += parts[-1].numel()
    return torch.cat(parts)[:n].reshape(shape)


def add_student_t_noise(params: list[Tensor], gen: torch.Generator, scale: float) -> None:
    """g <- g + scale * RMS(g) * xi, xi ~ t(NU) elementwise, RMS per tensor."""
    for p in params:
        if p.grad is None:
            continue
        rms = p.grad.pow(2).mean().sqrt()
        p.grad.add_(student_t(p.grad.shape, NU, gen) * (scale * rms))


@dataclass
class RunResult:
    val_acc: float
    seconds_per_step: float
    train_loss: float  # mean minibatch loss over the last 10% of steps
    diverged: bool
    steps_done: int
    extra: dict[str, float] = field(default_factory=dict)


def train_one(
    name: str,
    knob: str,
    value: float | None,
    seed: int,
    steps: int,
    split: Split,
    noise_scale: float = 0.0,
    options: dict[str, Any] | None = None,
) -> RunResult:
    """One training run; ``noise_scale > 0`` adds Student-t noise of that scale (x RMS(g)) to
    every gradient; ``options`` override the optimizer's defaults."""
    torch.manual_seed(seed)
    model = make_mlp()
    params = list(model.parameters())
    opt = make_optimizer(name, model, knob, value, options)
    batches = batch_indices(len(split.y_train), steps, seed)
    # Own generator per seed: the same noise draws for every optimizer with one backward pass
    # per step (the noise experiment has no two-pass optimizer).
    noise = torch.Generator().manual_seed(1_000_003 + seed) if noise_scale > 0 else None
    two_pass = needs_closure(name)
    losses: list[float] = []
    gammas: list[float] = []
    xb = yb = split.x_train[:0]

    def closure() -> Tensor:
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        if noise is not None:
            add_student_t_noise(params, noise, noise_scale)
        return loss

    diverged = False
    done = 0
    tail = max(1, steps // 10)
    start = time.perf_counter()
    for t, idx in enumerate(batches):
        xb, yb = split.x_train[idx], split.y_train[idx]
        if two_pass:
            loss = opt.step(closure)
        else:
            opt.zero_grad(set_to_none=True)
            loss = closure()
            opt.step()
        done = t + 1
        if t >= steps - tail:
            losses.append(float(loss.detach()))
            if name in ("sam-sps", "usam-sps"):
                gammas.append(float(opt.param_groups[0]["last_step_size"]))
        if t % 50 == 0 and not math.isfinite(float(loss.detach())):
            diverged = True
            break
    seconds = time.perf_counter() - start
    with torch.no_grad():
        diverged = diverged or not all(bool(torch.isfinite(p).all()) for p in params)
        logits = model(split.x_val)
        acc = float((logits.argmax(dim=1) == split.y_val).float().mean())
    extra = {"mean_step_size_last10pct": statistics.fmean(gammas)} if gammas else {}
    return RunResult(
        val_acc=acc,
        seconds_per_step=seconds / max(done, 1),
        train_loss=statistics.fmean(losses) if losses else float("nan"),
        diverged=diverged,
        steps_done=done,
        extra=extra,
    )
