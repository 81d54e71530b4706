"""Optimizer names to classes, defaults and hyperparameter search spaces, imported lazily.

A tuning job names an optimizer (``"lion"``, ``"olion"``, ``"sam-sps"``...) and gets:

- ``get_optimizer(name)``: its class (the module is imported only now; torch's ``adamw`` and
  ``sgd`` are included as references);
- ``search_space(name)``: its tuned hyperparameters as asktell wire parameters, e.g.
  ``{"type": "float", "name": "lr", "low": 1e-5, "high": 1e-3, "log": true}``, ready for a
  study's ``parameters``;
- ``build(name, model_or_params, **hparams)``: an optimizer built with the registry defaults,
  overridden by ``hparams`` (flat names from the search space). Given a model, Muon and OLion
  get ``split_matrix_params(model)`` (matrices vs AdamW groups);
- ``set_hparams(optimizer, name, hparams)``: the PBT exploit's second half, writing tuned values
  into ``param_groups`` after ``load_state_dict``.

Flat names: tuples are searched per entry (``beta1``, ``beta2`` pack into ``betas``), and an
``adamw_`` prefix (``adamw_lr``) addresses the AdamW groups of Muon and OLion, which
``set_hparams`` writes without the prefix; the other names go to the non-AdamW groups.

Bounds (our reading of part C of the research notes, on log scales where the range spans
decades): Lion lr 3-10x below AdamW's and wd 3-10x above; Muon around its lr 0.02; OLion with
RMS scaling in AdamW's lr range; SAM-SPS rho around 0.05-0.4 and the step cap lr_max around
1; Shampoo eps over 1e-12..1e-1 as its tuning guide says. Weight decay ranges are log scales and
exclude 0, so a default of 0 lies outside them (a job wanting 0 keeps the default).
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engines.errors import EngineOptionsError


def _f(name: str, low: float, high: float, log: bool = False) -> dict[str, Any]:
    return {"type": "float", "name": name, "low": low, "high": high, "log": log}


def _i(name: str, low: int, high: int, log: bool = False) -> dict[str, Any]:
    return {"type": "int", "name": name, "low": low, "high": high, "log": log}


@dataclass(frozen=True)
class OptimizerSpec:
    """One registered optimizer.

    ``defaults`` are flat hyperparameters ``build`` passes unless overridden; ``packed`` maps a
    constructor argument to the flat names it is built from; ``needs_closure`` says ``step``
    must get a closure (two passes); ``split_matrices`` says a model is split into matrix and
    ``adamw=True`` groups.
    """

    name: str
    import_path: str
    defaults: dict[str, Any]
    search_space: list[dict[str, Any]]
    needs_closure: bool = False
    split_matrices: bool = False
    packed: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def allowed(self) -> set[str]:
        """Flat names ``build`` and ``set_hparams`` accept."""
        return set(self.defaults) | {p["name"] for p in self.search_space}


_BETAS: dict[str, tuple[str, ...]] = {"betas": ("beta1", "beta2")}
_LION = {"lr": 1e-4, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0}
_LION_SPACE = [
    _f("lr", 1e-5, 1e-3, log=True),
    _f("weight_decay", 1e-3, 1.0, log=True),
    _f("beta1", 0.8, 0.99),
    _f("beta2", 0.9, 0.999),
]
_ROBUST = {"tau": None, "tau_quantile": 0.9, "norm_scope": "global", "vr": False, "vr_a": 0.1}
_MUON = {
    "lr": 0.02,
    "momentum": 0.95,
    "nesterov": True,
    "weight_decay": 0.0,
    "adamw_lr": 3e-4,
}
_MUON_SPACE = [
    _f("lr", 1e-3, 0.1, log=True),
    _f("momentum", 0.8, 0.99),
    _f("weight_decay", 1e-4, 1.0, log=True),
    _f("adamw_lr", 1e-5, 1e-2, log=True),
]
_SAM = {"rho": 0.1, "c": 1.0, "lr_max": 1.0, "f_star": 0.0, "weight_decay": 5e-4}
_LION_SPEC = OptimizerSpec(
    "lion", "engines.optim.lion:Lion", dict(_LION), list(_LION_SPACE), packed=_BETAS
)
_MUON_SPEC = OptimizerSpec(
    "muon", "engines.optim.muon:Muon", dict(_MUON), list(_MUON_SPACE), split_matrices=True
)


def _robust_variant(spec: OptimizerSpec, name: str, import_path: str) -> OptimizerSpec:
    """``spec`` on clipped, optionally variance-reduced gradients (Lion+ from Lion, Muon+ from
    Muon): the clipping keys join the defaults and ``tau_quantile`` the search space."""
    return replace(
        spec,
        name=name,
        import_path=import_path,
        defaults={**spec.defaults, **_ROBUST},
        search_space=[*spec.search_space, _f("tau_quantile", 0.5, 0.99)],
    )


def _sam_sps(name: str, unnormalized: bool, rho_low: float) -> OptimizerSpec:
    """SAM-SPS (``unnormalized=False``) or USAM-SPS; USAM's rho range starts lower."""
    return OptimizerSpec(
        name,
        "engines.optim.sam_sps:SAMSPS",
        {**_SAM, "unnormalized": unnormalized},
        [
            _f("rho", rho_low, 0.5, log=True),
            _f("lr_max", 0.1, 10.0, log=True),
            _f("weight_decay", 1e-5, 1e-2, log=True),
        ],
        needs_closure=True,
    )


OPTIMIZERS: dict[str, OptimizerSpec] = {
    spec.name: spec
    for spec in [
        _LION_SPEC,
        _robust_variant(_LION_SPEC, "lion+", "engines.optim.lion:LionPlus"),
        _MUON_SPEC,
        _robust_variant(_MUON_SPEC, "muon+", "engines.optim.muon:MuonPlus"),
        OptimizerSpec(
            "olion",
            "engines.optim.olion:OLion",
            {
                "lr": 1e-3,
                "momentum": 0.95,
                "momentum_2": 0.98,
                "weight_decay": 0.0,
                "adamw_lr": 3e-4,
            },
            [
                _f("lr", 1e-5, 1e-2, log=True),
                _f("weight_decay", 1e-4, 1.0, log=True),
                _f("momentum", 0.8, 0.99),
                _f("momentum_2", 0.9, 0.999),
                _f("adamw_lr", 1e-5, 1e-2, log=True),
            ],
            split_matrices=True,
        ),
        _sam_sps("sam-sps", unnormalized=False, rho_low=0.01),
        _sam_sps("usam-sps", unnormalized=True, rho_low=1e-3),
        OptimizerSpec(
            "clipped-sgd",
            "engines.optim.clipped:ClippedSGD",
            {"lr": 0.01, "tau": 1.0, "momentum": 0.0, "norm_scope": "global", "weight_decay": 0.0},
            [
                _f("lr", 1e-3, 1.0, log=True),
                _f("tau", 0.1, 100.0, log=True),
                _f("momentum", 0.0, 0.99),
            ],
        ),
        OptimizerSpec(
            "normalized-sgd",
            "engines.optim.clipped:NormalizedSGD",
            {"lr": 0.01, "momentum": 0.9, "tau": None, "norm_scope": "global", "weight_decay": 0.0},
            [_f("lr", 1e-4, 0.3, log=True), _f("momentum", 0.5, 0.99)],
        ),
        OptimizerSpec(
            "adagrad-norm",
            "engines.optim.adagrad_norm:AdaGradNorm",
            {"lr": 0.01, "b0": 1e-8, "tau": None, "norm_scope": "global", "weight_decay": 0.0},
            [_f("lr", 1e-3, 10.0, log=True)],
        ),
        OptimizerSpec(
            "shampoo",
            "engines.optim.shampoo:Shampoo",
            {
                "lr": 1e-3,
                "beta1": 0.9,
                "beta2": 0.95,
                "eps": 1e-12,
                "weight_decay": 0.0,
                "precondition_frequency": 10,
                "max_preconditioner_dim": 128,
            },
            [
                _f("lr", 1e-5, 1e-2, log=True),
                _f("beta1", 0.8, 0.99),
                _f("beta2", 0.9, 0.999),
                _f("eps", 1e-12, 1e-1, log=True),
                _f("weight_decay", 1e-4, 0.3, log=True),
                _i("precondition_frequency", 1, 100, log=True),
            ],
            packed=_BETAS,
        ),
        OptimizerSpec(
            "adamw",
            "torch.optim:AdamW",
            {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01},
            [
                _f("lr", 1e-5, 1e-2, log=True),
                _f("weight_decay", 1e-4, 0.3, log=True),
                _f("beta1", 0.8, 0.99),
                _f("beta2", 0.9, 0.9999),
            ],
            packed=_BETAS,
        ),
        OptimizerSpec(
            "sgd",
            "torch.optim:SGD",
            {"lr": 0.01, "momentum": 0.9, "nesterov": False, "weight_decay": 0.0},
            [
                _f("lr", 1e-4, 1.0, log=True),
                _f("momentum", 0.5, 0.99),
                _f("weight_decay", 1e-6, 1e-2, log=True),
            ],
        ),
    ]
}


def optimizer_names() -> list[str]:
    return sorted(OPTIMIZERS)


def get_spec(name: str) -> OptimizerSpec:
    """The spec registered under ``name``.

    Raises:
        EngineOptionsError (a ValueError): the name is unknown; the message lists the names.
    """
    try:
        return OPTIMIZERS[name]
    except KeyError:
        raise EngineOptionsError(
            f"unknown optimizer {name!r}; choose one of {optimizer_names()}"
        ) from None


def get_optimizer(name: str) -> type:
    """The optimizer class of ``name``, importing its module now."""
    module_name, class_name = get_spec(name).import_path.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def search_space(name: str) -> list[dict[str, Any]]:
    """A fresh copy of the wire-format search space of ``name``."""
    return copy.deepcopy(get_spec(name).search_space)


def to_kwargs(name: str, hparams: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Constructor keyword arguments: defaults, overridden by ``hparams``, tuples packed.

    Raises:
        EngineOptionsError: a name that is neither a default nor in the search space.
    """
    spec = get_spec(name)
    hparams = dict(hparams or {})
    unknown = sorted(set(hparams) - spec.allowed())
    if unknown:
        raise EngineOptionsError(
            f"optimizer {name!r} has no hyperparameter(s) {unknown}; "
            f"known: {sorted(spec.allowed())}"
        )
    kwargs = {**spec.defaults, **hparams}
    for target, names in spec.packed.items():
        kwargs[target] = tuple(kwargs.pop(n) for n in names)
    for p in spec.search_space:
        if p["type"] == "int":
            kwargs[p["name"]] = int(kwargs[p["name"]])
    return kwargs


def build(name: str, params: Any, **hparams: Any) -> Any:
    """Build optimizer ``name`` over ``params`` (an ``nn.Module``, tensors or param groups)."""
    from torch import nn

    from engines.optim._common import split_matrix_params

    spec = get_spec(name)
    kwargs = to_kwargs(name, hparams)
    if isinstance(params, nn.Module):
        params = split_matrix_params(params) if spec.split_matrices else params.parameters()
    return get_optimizer(name)(params, **kwargs)


def set_hparams(optimizer: Any, name: str, hparams: Mapping[str, Any]) -> None:
    """Write tuned flat hyperparameters of optimizer ``name`` into ``optimizer.param_groups``.

    ``adamw_<key>`` goes to groups with ``adamw=True`` as ``<key>``, every other name to the
    remaining groups; a packed name (``beta1``) replaces its entry of the tuple (``betas``).

    Raises:
        EngineOptionsError: an unknown name, or a name that is not a param-group key.
    """
    spec = get_spec(name)
    unknown = sorted(set(hparams) - spec.allowed())
    if unknown:
        raise EngineOptionsError(f"optimizer {name!r} has no hyperparameter(s) {unknown}")
    position = {
        n: (target, i) for target, names in spec.packed.items() for i, n in enumerate(names)
    }
    groups: Iterable[dict[str, Any]] = optimizer.param_groups
    for group in groups:
        is_adamw = bool(group.get("adamw", False))
        for flat, value in hparams.items():
            if flat.startswith("adamw_") != is_adamw:
                continue
            key = flat.removeprefix("adamw_")
            if key in position:
                target, i = position[key]
                entries = list(group[target])
                entries[i] = value
                group[target] = tuple(entries)
            elif key in group:
                group[key] = value
            else:
                raise EngineOptionsError(f"{flat!r} is not a param-group key of {name!r}")
