"""Gradient-based optimizers for tuning jobs, each a ``torch.optim.Optimizer`` subclass.

What is here (module: classes):

- ``lion``: ``Lion``, ``LionPlus`` (Lion+: clipped / variance-reduced momentum for heavy tails)
- ``muon``: ``Muon``, ``MuonPlus`` (Muon+), ``muon_param_groups``
- ``olion``: ``OLion`` (Orthogonal Lion), ``olion_param_groups``
- ``sam_sps``: ``SAMSPS`` (SAM and, with ``unnormalized=True``, USAM with a stochastic Polyak
  step; ``step`` needs a closure)
- ``clipped``: ``ClippedSGD``, ``NormalizedSGD``
- ``adagrad_norm``: ``AdaGradNorm``
- ``shampoo``: ``Shampoo`` (AdamW-style, Adam grafting)
- ``registry``: ``OPTIMIZERS`` (name -> ``OptimizerSpec``), ``get_optimizer``,
  ``search_space``, ``build``, ``set_hparams``: a job names an optimizer and gets its class,
  defaults and hyperparameter search space in the asktell wire format.
- helpers: ``split_matrix_params`` (matrices vs the rest, for Muon/OLion), ``newton_schulz5``.

Every name is imported lazily (module ``__getattr__``): ``import engines.optim`` loads neither
torch nor any optimizer module, and a name resolves only when used.

Common conventions:

- Param groups: every hyperparameter is a key of each param group (``optimizer.param_groups``),
  read at every step, never cached. Groups may differ in any of them.
- Weight decay is decoupled where the method has it (Lion, Muon, OLion, Shampoo, the AdamW
  groups): ``p <- p - lr * wd * p``, i.e. ``p <- (1 - lr * wd) p`` before the update. Methods
  defined with coupled L2 (SAM-SPS) say so in their docstring.
- Muon and OLion step matrices only; the rest of a model goes to groups flagged ``adamw=True``,
  which the same optimizer steps with AdamW (``split_matrix_params(model)`` builds both groups).
- float32 and float64 parameters are supported; state tensors have the parameter's dtype.
  Newton-Schulz runs in float32 (float64 for float64 parameters).
- ``state_dict()`` / ``load_state_dict()`` round-trip exactly: a fresh optimizer loaded with a
  saved state takes bitwise the same next step as the original. Step counters are Python ints,
  everything else tensors, ints, floats, bools, strings, None or tuples, so
  ``torch.save`` / ``torch.load(weights_only=True)`` work. Every optimizer here derives from
  ``engines.optim._common.StatefulOptimizer``, whose ``load_state_dict`` deep-copies, so a state
  loaded from memory never shares buffers with its source (plain ``torch.optim`` shares them
  when dtype and device match).
- PBT exploit: copy the weights and ``optimizer.state_dict()`` of the donor, load both, then
  overwrite the tuned hyperparameters in ``param_groups`` (``registry.set_hparams`` does it by
  registry name); the next step uses the new values.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Lion": "engines.optim.lion",
    "LionPlus": "engines.optim.lion",
    "Muon": "engines.optim.muon",
    "MuonPlus": "engines.optim.muon",
    "muon_param_groups": "engines.optim.muon",
    "OLion": "engines.optim.olion",
    "olion_param_groups": "engines.optim.olion",
    "SAMSPS": "engines.optim.sam_sps",
    "ClippedSGD": "engines.optim.clipped",
    "NormalizedSGD": "engines.optim.clipped",
    "AdaGradNorm": "engines.optim.adagrad_norm",
    "Shampoo": "engines.optim.shampoo",
    "split_matrix_params": "engines.optim._common",
    "newton_schulz5": "engines.optim._newton_schulz",
    "OPTIMIZERS": "engines.optim.registry",
    "OptimizerSpec": "engines.optim.registry",
    "build": "engines.optim.registry",
    "get_optimizer": "engines.optim.registry",
    "optimizer_names": "engines.optim.registry",
    "search_space": "engines.optim.registry",
    "set_hparams": "engines.optim.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
