"""Workloads: what a tuning job trains. ``mlp`` is built in; others are installed packages.

The contract of a workload
--------------------------
A job's worker calls ``workload.train(unit)`` once per unit of work (a PBT segment, or a whole
run for the other engines) with a ``UnitInput``:

- ``data``: the job's ``Split`` (``service.jobs.data``): float32 features ``X_train``,
  ``X_val``, ``X_test``; targets ``y_*`` (int64 class indices, or the float32 standardized
  regression target); ``task``, ``n_features``, ``n_outputs`` (classes, or 1).
- ``hparams``: the trial's values: the optimizer's tuned hyperparameters (flat names of
  ``engines.optim.registry``, e.g. ``lr``) and the workload's own (``parameters``).
- ``optimizer``: the registry name of the optimizer to use (``engines.optim.registry.build``).
- ``options``: the job's workload options, as submitted (``{"hidden": [64]}``).
- ``start``: the bytes of a checkpoint this unit continues from (one this workload's
  ``train`` returned before, possibly of another member), or ``None`` for fresh weights.
- ``transform``: ``{"kind": "none"}`` or ``{"kind": "shrink_perturb", "shrink": a,
  "perturb": b, "seed": s}``: after loading ``start``, set every weight to ``a * w + b * w0``
  where ``w0`` is a fresh initialization from seed ``s``, and start the optimizer afresh.
- ``steps``: optimizer steps to take; ``seed``: the unit's seed (fresh weights, batch order).
- ``report``: when not ``None``, call it once with the validation score before training.

and expects a ``UnitOutput``: ``score`` (validation score after training; higher is better:
accuracy, or R^2 for regression; a finite number), ``checkpoint`` (bytes from which ``train``
can continue and ``predict`` can rebuild the model on its own) and ``train_seconds``.
``predict(checkpoint, X)`` returns the model's outputs ``(n, n_outputs)`` (class scores, or the
standardized regression value in column 0); the job scores the best checkpoint on the test
split with it and answers ``POST /v1/jobs/{id}/predict``. ``parameters(options)`` lists
the workload's hyperparameters to tune (asktell wire parameters, ``[]`` for none) and raises
``ValueError`` on options it does not accept (the job is then refused with 422).

Registering a workload
----------------------
Declare an entry point in the group ``asktell.workloads`` of your package::

    [project.entry-points."asktell.workloads"]
    tabular-net = "mypackage.workload:WORKLOAD"

The entry point may name an object (or a class, instantiated without arguments) with ``train``
and optionally ``predict``, ``parameters`` and ``name``, or a plain function
``train(unit) -> UnitOutput``: then ``predict`` raises ``NotImplementedError`` (a job can train
it but has no test score nor predictions) and ``parameters`` is ``[]``. The worker processes
must be able to import the package (install it in the server's environment).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from service.jobs.data import Split

ENTRY_POINT_GROUP = "asktell.workloads"
BUILTIN = ("mlp",)


class UnknownWorkload(LookupError):
    """No built-in workload and no ``asktell.workloads`` entry point has that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no workload {name!r}; known: {', '.join(workload_names())}")
        self.name = name


@dataclass(frozen=True)
class UnitInput:
    """One unit of training (see the module's docstring)."""

    data: Split
    hparams: dict[str, Any]
    optimizer: str
    options: dict[str, Any]
    start: bytes | None
    transform: dict[str, Any]
    steps: int
    seed: int
    report: Callable[[float], None] | None = None


@dataclass(frozen=True)
class UnitOutput:
    score: float
    checkpoint: bytes
    train_seconds: float


@runtime_checkable
class Workload(Protocol):
    name: str
    #: Whether ``predict`` works: a workload without it trains, with no test score.
    predicts: bool

    def parameters(self, options: dict[str, Any]) -> list[dict[str, Any]]:
        """Workload hyperparameters to tune besides the optimizer's (wire parameter dicts)."""
        ...

    def train(self, unit: UnitInput) -> UnitOutput: ...

    def predict(self, checkpoint: bytes, X: np.ndarray) -> np.ndarray: ...


class _Adapted:
    """A user's entry point as a ``Workload``: its ``train``, and its ``predict`` and
    ``parameters`` when it has them."""

    def __init__(self, name: str, target: Any) -> None:
        self.name, self._target = name, target
        self._train = target if _is_function(target) else target.train
        self._predict = None if _is_function(target) else getattr(target, "predict", None)
        self.predicts = self._predict is not None

    def parameters(self, options: dict[str, Any]) -> list[dict[str, Any]]:
        method = getattr(self._target, "parameters", None)
        if method is None or _is_function(self._target):
            return []
        return list(method(options))

    def train(self, unit: UnitInput) -> UnitOutput:
        return self._train(unit)

    def predict(self, checkpoint: bytes, X: np.ndarray) -> np.ndarray:
        if self._predict is None:
            raise NotImplementedError(f"workload {self.name!r} has no predict()")
        return np.asarray(self._predict(checkpoint, X))


def _is_function(target: Any) -> bool:
    return callable(target) and not hasattr(target, "train")


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry_point.name, entry_point)
    return found


def load_workload(name: str) -> Workload:
    """The workload ``name``: built in (``mlp``) or an ``asktell.workloads`` entry point.

    Raises:
        UnknownWorkload: no such name.
        TypeError: the entry point is neither a workload nor a function.
    """
    if name == "mlp":
        from service.jobs.mlp import MLPWorkload

        return MLPWorkload()
    entry_point = _entry_points().get(name)
    if entry_point is None:
        raise UnknownWorkload(name)
    target = entry_point.load()
    if isinstance(target, type):
        target = target()
    if not (callable(target) or callable(getattr(target, "train", None))):
        raise TypeError(
            f"entry point {entry_point.value!r} of workload {name!r} is neither a workload "
            "(an object with train) nor a function train(unit)"
        )
    return _Adapted(name, target)


def workload_names() -> list[str]:
    """The built-in workloads, then the installed entry points' names, sorted."""
    return [*BUILTIN, *sorted(set(_entry_points()) - set(BUILTIN))]
