"""The problems and the methods of the lcbo bench (``bench/lcbo.py`` describes each): the
``lcbo`` engine through the engine contract, SCBO, Optuna's TPE with constraints and Sobol.
Each proposes points in the unit cube; the problems return ``f`` and the constraints ``C``
(feasible where every ``c <= 0``)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.stats import qmc

from bench.harness import EngineMethod, Method, seed_int, unit_problem
from engines.base import History

Q = 4


@dataclass(frozen=True)
class Spec:
    key: str
    label: str
    d: int
    k: int
    budget: int
    seeds: int
    best_known: float

    @property
    def n_init(self) -> int:
        return min(max(10, self.d), 100)


SPECS = {
    s.key: s
    for s in [
        Spec("ackley10", "Ackley-10 (SCBO constraints)", 10, 2, 200, 5, 0.0),
        Spec("ackley50", "Ackley-50 (SCBO constraints)", 50, 2, 500, 3, 0.0),
        Spec("ackley100", "Ackley-100 (SCBO constraints)", 100, 2, 500, 3, 0.0),
        Spec("keane30", "KeaneBump-30", 30, 2, 500, 3, -0.818056),
        Spec("speedreducer", "SpeedReducer (7D, 11 c)", 7, 11, 200, 5, 2996.3482),
        Spec("pressurevessel", "PressureVessel (4D, 4 c)", 4, 4, 200, 5, 6059.946341),
    ]
}
PROBLEMS = list(SPECS)


def problem_index(spec: Spec) -> int:
    return PROBLEMS.index(spec.key)


class Evaluator:
    """``f(U) -> (f: (n,), C: (n, k))`` for ``U: (n, d)`` in the unit cube."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        if spec.key.startswith("ackley"):
            self.low, self.high = np.full(spec.d, -5.0), np.full(spec.d, 10.0)
            self.fn: Any = None
            return
        self.fn = botorch_problem(spec)
        self.low, self.high = (b.numpy() for b in self.fn.bounds)

    def __call__(self, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = self.low + (self.high - self.low) * np.asarray(U, dtype=np.float64)
        if self.fn is None:
            f = (
                -20.0 * np.exp(-0.2 * np.sqrt((X**2).mean(axis=1)))
                - np.exp(np.cos(2.0 * math.pi * X).mean(axis=1))
                + 20.0
                + math.e
            )
            return f, np.column_stack([X.sum(axis=1), np.linalg.norm(X, axis=1) - 5.0])
        with torch.no_grad():
            tX = torch.as_tensor(X)
            return self.fn.evaluate_true(tX).numpy(), -self.fn.evaluate_slack_true(tX).numpy()


def botorch_problem(spec: Spec) -> Any:
    """The BoTorch constrained test function of a problem key (``bench/lcbo.py``'s and
    ``bench/lcbo_gpsampler.py``'s)."""
    from botorch.test_functions import synthetic

    if spec.key.startswith("keane"):
        return synthetic.KeaneBumpFunction(dim=spec.d)
    return {
        "speedreducer": synthetic.SpeedReducer,
        "pressurevessel": synthetic.PressureVessel,
        "gramacy": synthetic.ConstrainedGramacy,
        "hartmann6": synthetic.ConstrainedHartmann,
        "tension": synthetic.TensionCompressionString,
        "weldedbeam": synthetic.WeldedBeamSO,
    }[spec.key]()


def initial_design(spec: Spec, seed: int) -> tuple[np.ndarray, qmc.Sobol]:
    """The shared design ``(n_init, d)`` and its Sobol sequence (for the ``sobol`` method)."""
    sobol = qmc.Sobol(spec.d, scramble=True, seed=seed_int(seed, problem_index(spec)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n not a power of 2
        return sobol.random(spec.n_init), sobol


class LcboPeer(EngineMethod):
    """``lcbo`` through the engine contract; asks ``Q`` points every time, counts the
    proposals' fallbacks and replaced points by reason."""

    def __init__(self, spec: Spec, seed: int) -> None:
        super().__init__(
            "lcbo",
            {"n_initial": spec.n_init},
            unit_problem(spec.d, spec.k),
            np.random.default_rng(seed_int(seed, problem_index(spec), 1)),
            batch=Q,
            note_keys=("fallback", "replaced"),
        )

    def run_notes(self) -> list[str]:
        notes = [f"{k}: {v}" for k, v in self.notes.items()]
        if self.state.get("generation"):
            notes.append(f"restarts: {self.state['generation']}")
        return notes


class ScboPeer(Method):
    """``bench/scbo.py``'s SCBO, asked ``Q`` points at a time."""

    def __init__(self, spec: Spec, seed: int) -> None:
        from bench.scbo import SCBO

        self.scbo = SCBO(spec.d, Q, spec.k, seed=seed_int(seed, problem_index(spec), 2) % 2**31)
        self.scbo.n_init = spec.n_init

    def start(self, U0: np.ndarray, Y0: np.ndarray, C0: np.ndarray) -> None:
        self.scbo.start(U0, Y0[:, 0], C0)

    def propose(self, history: History, count: int) -> np.ndarray:
        return self.scbo.ask()

    def tell(self, U: np.ndarray, Y: np.ndarray, C: np.ndarray) -> None:
        self.scbo.tell(U, Y[:, 0], C)

    def run_notes(self) -> list[str]:
        return [f"restarts: {self.scbo.restarts}"] if self.scbo.restarts else []


class TpePeer(Method):
    """Optuna's ``TPESampler(constraints_func=...)``, the shared design as its startup trials;
    it asks only the ``count`` points a batch still needs."""

    def __init__(self, spec: Spec, seed: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(
            n_startup_trials=spec.n_init,
            constraints_func=lambda t: t.user_attrs["constraints"],
            seed=seed_int(seed, problem_index(spec), 3) % 2**31,
        )
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.names = [f"x{i}" for i in range(spec.d)]

    def start(self, U0: np.ndarray, Y0: np.ndarray, C0: np.ndarray) -> None:
        for u in U0:
            self.study.enqueue_trial(dict(zip(self.names, map(float, u), strict=True)))
        if not np.allclose(self.ask(len(U0)), U0):
            raise RuntimeError("TPE did not take the enqueued design")
        self.tell(U0, Y0, C0)

    def ask(self, n: int) -> np.ndarray:
        self.trials = [self.study.ask() for _ in range(n)]
        return np.array([[t.suggest_float(n, 0.0, 1.0) for n in self.names] for t in self.trials])

    def propose(self, history: History, count: int) -> np.ndarray:
        return self.ask(count)

    def tell(self, U: np.ndarray, Y: np.ndarray, C: np.ndarray) -> None:
        for t, value, c in zip(self.trials, Y[:, 0], C, strict=True):
            t.set_user_attr("constraints", [float(v) for v in c])
            self.study.tell(t, float(value))


class SobolPeer(Method):
    """The continuation of the design's scrambled Sobol sequence, ``Q`` points at a time."""

    def __init__(self, sobol: qmc.Sobol) -> None:
        self.sobol = sobol

    def propose(self, history: History, count: int) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.sobol.random(Q)


def make_method(method: str, spec: Spec, seed: int, sobol: qmc.Sobol) -> Method:
    if method == "lcbo":
        return LcboPeer(spec, seed)
    if method == "scbo":
        return ScboPeer(spec, seed)
    if method == "tpe":
        return TpePeer(spec, seed)
    return SobolPeer(sobol)


def run_notes(method: Method) -> list[str]:
    """What a run reports besides its figures (restarts, fallbacks)."""
    notes = getattr(method, "run_notes", None)
    return notes() if notes is not None else []
