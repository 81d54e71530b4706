"""The built-in ``mlp`` workload: a multilayer perceptron in torch.

Classification trains on the cross entropy of the class scores; regression on the mean squared
error of the standardized target (output column 0). Options (``workload.options`` of a job):

- ``hidden``: the hidden layers' sizes, default ``[128]`` (``[]``: a linear model); each layer
  is ``Linear -> ReLU -> Dropout``.
- ``dropout``: the dropout probability after each hidden layer, default ``0.0``, in [0, 1).
- ``batch_size``: examples per step, drawn at random with replacement, default ``64``.

``dropout`` and ``batch_size`` may be given as a search range instead of a value, and are then
tuned with the optimizer's hyperparameters: ``{"batch_size": {"low": 16, "high": 256, "log":
true}}`` (an int parameter), ``{"dropout": {"low": 0, "high": 0.5}}`` (a float parameter;
``log`` defaults to false). ``parameters(options)`` returns them as wire parameters named
``batch_size`` and ``dropout``; a trial's value reaches ``train`` in ``unit.hparams``.

Scores (validation, higher is better): accuracy, or R^2 of the standardized target. A unit whose
loss becomes NaN or infinite stops training at that step and is scored as it is; outputs that
are not finite score as the worst: accuracy 0, R^2 ``WORST_R2`` (R^2 is also floored there, so
every score is a finite number an engine can compare).

The checkpoint is ``torch.save`` of a dict: ``format``, ``arch`` (n_features, n_outputs,
hidden, dropout, task), ``model`` (the state dict), ``optimizer`` (the registry name),
``optimizer_state`` and ``steps`` (total steps trained); ``predict`` needs nothing else.
"""

from __future__ import annotations

import io
import math
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from engines.optim import registry
from service.jobs import data
from service.jobs.workloads import UnitInput, UnitOutput

FORMAT = "asktell.mlp/1"
DEFAULTS: dict[str, Any] = {"hidden": [128], "dropout": 0.0, "batch_size": 64}
#: The options that may be tuned: their wire type and bounds.
TUNABLE: dict[str, tuple[str, float, float]] = {
    "dropout": ("float", 0.0, 0.99),
    "batch_size": ("int", 1, 1 << 16),
}
WORST_R2 = -1e6
MAX_LAYERS, MAX_WIDTH = 16, 8192


def _is_range(value: Any) -> bool:
    return isinstance(value, dict)


def _check_value(name: str, value: Any) -> None:
    kind, low, high = TUNABLE[name]
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "int" and not (isinstance(value, int) and not isinstance(value, bool)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not numeric or not low <= value <= high:
        raise ValueError(f"{name} must be a number in [{low}, {high}], got {value!r}")


def _check_range(name: str, value: dict[str, Any]) -> dict[str, Any]:
    unknown = set(value) - {"low", "high", "log"}
    if unknown or not {"low", "high"} <= set(value):
        raise ValueError(f"{name}: a range is {{'low': x, 'high': y, 'log': false}}")
    low, high, log = value["low"], value["high"], value.get("log", False)
    _check_value(name, low)
    _check_value(name, high)
    if not low < high or not isinstance(log, bool) or (log and low <= 0):
        raise ValueError(f"{name}: need low < high, and low > 0 when log is true")
    return {"type": TUNABLE[name][0], "name": name, "low": low, "high": high, "log": log}


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options with defaults filled in. Raises ValueError on a bad one."""
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown mlp option(s) {unknown}; known: {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **options}
    hidden = merged["hidden"]
    if (
        not isinstance(hidden, list)
        or len(hidden) > MAX_LAYERS
        or not all(isinstance(h, int) and not isinstance(h, bool) for h in hidden)
        or not all(1 <= h <= MAX_WIDTH for h in hidden)
    ):
        raise ValueError(
            f"hidden must be a list of at most {MAX_LAYERS} layer sizes in [1, {MAX_WIDTH}]"
        )
    for name in TUNABLE:
        value = merged[name]
        _check_range(name, value) if _is_range(value) else _check_value(name, value)
    if not _is_range(merged["dropout"]) and merged["dropout"] >= 1:
        raise ValueError("dropout must be below 1")
    return merged


def _resolve(unit: UnitInput) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the unit's workload values, the optimizer's hparams) from the options and hparams."""
    options = check_options(dict(unit.options))
    allowed = registry.get_spec(unit.optimizer).allowed()
    optimizer_hparams = {k: v for k, v in unit.hparams.items() if k in allowed}
    for name, value in unit.hparams.items():
        if name in allowed:
            continue
        if name not in TUNABLE:
            raise ValueError(f"hyperparameter {name!r} is neither the optimizer's nor the mlp's")
        options[name] = int(value) if TUNABLE[name][0] == "int" else float(value)
    for name in TUNABLE:
        if _is_range(options[name]):
            raise ValueError(f"{name} is tuned but the unit's hparams have no value for it")
        _check_value(name, options[name])
    return options, optimizer_hparams


def build_model(arch: dict[str, Any], seed: int) -> nn.Sequential:
    """A fresh model of ``arch``, initialized from ``seed`` (the global RNG is left as is)."""
    layers: list[nn.Module] = []
    width = int(arch["n_features"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for size in arch["hidden"]:
            layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(arch["dropout"])]
            width = size
        layers.append(nn.Linear(width, int(arch["n_outputs"])))
    return nn.Sequential(*layers)


def score(task: str, y: np.ndarray, outputs: np.ndarray) -> float:
    """``service.jobs.data.score``, always a finite number an engine can compare: non-finite
    outputs score 0 (accuracy) or ``WORST_R2``, and R^2 is floored at ``WORST_R2``."""
    value = data.score(task, y, outputs)  # type: ignore[arg-type]
    if math.isnan(value):
        return 0.0 if task == "classification" else WORST_R2
    return value if task == "classification" else max(value, WORST_R2)


def _evaluate(model: nn.Module, X: np.ndarray) -> np.ndarray:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        outputs = model(torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))).numpy()
    model.train(was_training)
    return outputs


def _loss_fn(task: str) -> Any:
    if task == "classification":
        return nn.CrossEntropyLoss()
    mse = nn.MSELoss()
    return lambda outputs, y: mse(outputs[:, 0], y)


def load_checkpoint(data: bytes) -> dict[str, Any]:
    try:
        document = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle, zip and runtime errors alike
        raise ValueError(f"not an mlp checkpoint (format {FORMAT!r}): {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"not an mlp checkpoint (format {FORMAT!r})")
    return document


def _start(unit: UnitInput, arch: dict[str, Any]) -> tuple[nn.Module, dict[str, Any] | None, int]:
    """The model to train (fresh, loaded, shrunk and perturbed), the optimizer state to
    restore (``None``: start the optimizer afresh) and the steps trained before."""
    model = build_model(arch, unit.seed)
    state, steps = None, 0
    if unit.start is not None:
        document = load_checkpoint(unit.start)
        saved = document["arch"]
        same = (saved["n_features"], saved["n_outputs"], list(saved["hidden"])) == (
            arch["n_features"],
            arch["n_outputs"],
            arch["hidden"],
        )
        if not same:
            raise ValueError(f"the start checkpoint's architecture {saved} is not {arch}")
        model.load_state_dict(document["model"])
        steps = int(document.get("steps", 0))
        if document["optimizer"] == unit.optimizer:
            state = document["optimizer_state"]
    if unit.transform.get("kind", "none") == "shrink_perturb":
        shrink, perturb = float(unit.transform["shrink"]), float(unit.transform["perturb"])
        fresh = build_model(arch, int(unit.transform["seed"]))
        with torch.no_grad():
            for w, w0 in zip(model.parameters(), fresh.parameters(), strict=True):
                w.mul_(shrink).add_(w0, alpha=perturb)
        state = None
    elif unit.transform.get("kind", "none") != "none":
        raise ValueError(f"unknown transform {unit.transform.get('kind')!r}")
    return model, state, steps


def _closure(model: nn.Module, loss_fn: Any, xb: torch.Tensor, yb: torch.Tensor) -> Any:
    """Forward and backward on one batch (every optimizer gets it; SAM-SPS needs it)."""

    def closure() -> torch.Tensor:
        loss = loss_fn(model(xb), yb)
        loss.backward()
        return loss

    return closure


def _train_steps(unit: UnitInput, model: nn.Module, optimizer: Any, batch_size: int) -> int:
    """Take ``unit.steps`` steps (fewer if the loss stops being finite); the steps taken."""
    split = unit.data
    X = torch.from_numpy(np.ascontiguousarray(split.X_train, dtype=np.float32))
    y = torch.from_numpy(np.ascontiguousarray(split.y_train))
    y = y.long() if split.task == "classification" else y.float()
    loss_fn = _loss_fn(split.task)
    generator = torch.Generator().manual_seed(unit.seed)
    model.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(unit.seed)  # dropout masks
        for step in range(unit.steps):
            index = torch.randint(0, len(X), (batch_size,), generator=generator)
            optimizer.zero_grad()
            loss = optimizer.step(_closure(model, loss_fn, X[index], y[index]))
            if loss is not None and not math.isfinite(float(loss.detach())):
                return step + 1
    return unit.steps


class MLPWorkload:
    """The ``mlp`` workload (the module's docstring says what it does)."""

    name = "mlp"
    predicts = True

    def parameters(self, options: dict[str, Any]) -> list[dict[str, Any]]:
        """The options given as ranges, as wire parameters. Raises ValueError on bad options."""
        merged = check_options(dict(options))
        return [_check_range(n, merged[n]) for n in TUNABLE if _is_range(merged[n])]

    def train(self, unit: UnitInput) -> UnitOutput:
        t0 = time.perf_counter()
        values, optimizer_hparams = _resolve(unit)
        split = unit.data
        arch = {
            "n_features": int(split.n_features),
            "n_outputs": int(split.n_outputs),
            "hidden": list(values["hidden"]),
            "dropout": float(values["dropout"]),
            "task": split.task,
        }
        model, state, steps_before = _start(unit, arch)
        optimizer = registry.build(unit.optimizer, model, **optimizer_hparams)
        if state is not None:
            optimizer.load_state_dict(state)
        registry.set_hparams(optimizer, unit.optimizer, optimizer_hparams)
        if unit.report is not None:
            unit.report(score(split.task, split.y_val, _evaluate(model, split.X_val)))
        taken = _train_steps(unit, model, optimizer, int(values["batch_size"]))
        val_score = score(split.task, split.y_val, _evaluate(model, split.X_val))
        document = {
            "format": FORMAT,
            "arch": arch,
            "model": model.state_dict(),
            "optimizer": unit.optimizer,
            "optimizer_state": optimizer.state_dict(),
            "steps": steps_before + taken,
        }
        buffer = io.BytesIO()
        torch.save(document, buffer)
        return UnitOutput(val_score, buffer.getvalue(), time.perf_counter() - t0)

    def predict(self, checkpoint: bytes, X: np.ndarray) -> np.ndarray:
        """The outputs ``(n, n_outputs)`` of the model saved in ``checkpoint``."""
        document = load_checkpoint(checkpoint)
        model = build_model(document["arch"], 0)
        model.load_state_dict(document["model"])
        return _evaluate(model, X)
