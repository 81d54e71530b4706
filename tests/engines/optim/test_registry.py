"""Tests of the optimizer registry (``engines/optim/registry.py``) and the package exports."""

from __future__ import annotations

import copy
import inspect
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import engines.optim
from client.models import StudyConfig
from engines.errors import EngineOptionsError
from engines.optim import registry
from engines.optim.registry import (
    OPTIMIZERS,
    build,
    get_optimizer,
    search_space,
    set_hparams,
    to_kwargs,
)
from engines.space import SearchSpace
from service.problem import to_param

NAMES = sorted(OPTIMIZERS)
ROOT = Path(__file__).resolve().parents[3]
#: Registry defaults that differ from the class's own on purpose.
OVERRIDES = {("sgd", "lr"), ("sgd", "momentum"), ("usam-sps", "unnormalized")}


def test_every_method_of_the_issue_is_registered() -> None:
    expected = {"lion", "lion+", "muon", "muon+", "olion", "sam-sps", "usam-sps", "clipped-sgd"}
    expected |= {"normalized-sgd", "adagrad-norm", "shampoo", "adamw", "sgd"}
    assert set(NAMES) == expected


@pytest.mark.parametrize("name", NAMES)
def test_every_name_resolves_to_an_optimizer_class(name: str) -> None:
    cls = get_optimizer(name)
    assert issubclass(cls, torch.optim.Optimizer)
    assert OPTIMIZERS[name].import_path.endswith(":" + cls.__name__)


def test_unknown_name_raises_a_value_error_listing_the_names() -> None:
    with pytest.raises(ValueError, match=r"unknown optimizer 'adam'.*'lion\+'"):
        get_optimizer("adam")
    with pytest.raises(EngineOptionsError):
        search_space("nope")


@pytest.mark.parametrize("name", NAMES)
def test_search_space_validates_as_asktell_parameters(name: str) -> None:
    space = search_space(name)
    config = StudyConfig.model_validate({"parameters": space})
    encoded = SearchSpace([to_param(p) for p in config.parameters])
    assert [p.name for p in encoded.free] == [p["name"] for p in space]
    for value, p in zip(encoded.decode(np.full(encoded.d, 0.5)).values(), space, strict=True):
        assert p["low"] <= value <= p["high"]
    assert any(p["name"] in ("lr", "rho") and p["log"] for p in space)
    assert search_space(name) is not OPTIMIZERS[name].search_space  # a copy


@pytest.mark.parametrize("name", NAMES)
def test_defaults_are_constructor_arguments_and_inside_the_bounds(name: str) -> None:
    spec = OPTIMIZERS[name]
    signature = inspect.signature(get_optimizer(name))
    for key, value in to_kwargs(name).items():
        assert key in signature.parameters, key
        declared = signature.parameters[key].default
        if (name, key) not in OVERRIDES and declared is not inspect.Parameter.empty:
            assert value == (tuple(declared) if isinstance(declared, list) else declared), key
    for p in spec.search_space:
        default = spec.defaults[p["name"]]
        # a log range cannot hold 0; the registry keeps 0 as the untuned default
        assert default == 0 or p["low"] <= default <= p["high"], p["name"]


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)
    )


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(64, 6, generator=gen), torch.randint(0, 3, (64,), generator=gen)


@pytest.mark.parametrize("name", NAMES)
def test_build_from_a_model_trains_a_few_steps(name: str) -> None:
    """20 full-batch steps at the registry defaults lower the loss of a small MLP."""
    model = _mlp()
    opt = build(name, model)
    x, y = _batch()

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    first = float(closure().detach())
    for _ in range(20):
        opt.step(closure)
    last = float(closure().detach())
    assert math.isfinite(last) and last < first


@pytest.mark.parametrize("name", [n for n in NAMES if OPTIMIZERS[n].needs_closure])
def test_needs_closure_is_enforced(name: str) -> None:
    model = _mlp()
    opt = build(name, model)
    x, y = _batch()
    nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises((ValueError, RuntimeError, TypeError)):
        opt.step()


def test_build_applies_and_packs_hyperparameters() -> None:
    opt = build("lion", [torch.zeros(2, 3, requires_grad=True)], lr=3e-4, beta2=0.95)
    assert opt.param_groups[0]["lr"] == 3e-4 and opt.param_groups[0]["betas"] == (0.9, 0.95)
    opt = build("usam-sps", [torch.zeros(2, requires_grad=True)])
    assert opt.param_groups[0]["unnormalized"] is True
    opt = build("olion", _mlp(), lr=2e-3, adamw_lr=1e-4)
    assert [(g["adamw"], g["lr"]) for g in opt.param_groups] == [(False, 2e-3), (True, 1e-4)]
    with pytest.raises(ValueError, match="no hyperparameter"):
        build("muon", _mlp(), learning_rate=0.1)


def test_set_hparams_is_the_second_half_of_a_pbt_exploit() -> None:
    """Load the donor's weights and optimizer state, then overwrite the tuned values."""
    donor = _mlp()
    donor_opt = build("olion", donor)
    x, y = _batch()
    for _ in range(3):
        donor_opt.zero_grad()
        nn.functional.cross_entropy(donor(x), y).backward()
        donor_opt.step()
    member = copy.deepcopy(donor)
    member_opt = build("olion", member)
    member_opt.load_state_dict(donor_opt.state_dict())
    set_hparams(member_opt, "olion", {"lr": 5e-3, "adamw_lr": 1e-2, "momentum": 0.9})
    matrix, adamw = member_opt.param_groups
    assert (matrix["lr"], matrix["momentum"], adamw["lr"]) == (5e-3, 0.9, 1e-2)
    assert adamw["betas"] == (0.9, 0.95) and donor_opt.param_groups[0]["lr"] == 1e-3
    head_bias = list(member.parameters())[-1]
    before = head_bias.detach().clone()
    member_opt.zero_grad()
    nn.functional.cross_entropy(member(x), y).backward()
    member_opt.step()
    assert float((head_bias.detach() - before).abs().max()) > 1e-3  # AdamW at lr 1e-2 moved it

    lion = build("lion", [torch.zeros(2, 3, requires_grad=True)])
    set_hparams(lion, "lion", {"beta1": 0.5})
    assert lion.param_groups[0]["betas"] == (0.5, 0.99)
    with pytest.raises(ValueError):
        set_hparams(lion, "lion", {"rho": 0.1})


def test_package_exports_resolve_lazily_without_importing_torch() -> None:
    for name in engines.optim.__all__:
        assert getattr(engines.optim, name) is not None
    code = (
        "import sys, engines.optim, engines.optim.registry as r; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "r.search_space('shampoo'); assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)
    assert registry.optimizer_names() == NAMES
