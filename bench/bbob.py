"""COCO's ``bbob`` functions (the ``coco-experiment`` package, in the bench extra) on the unit
cube, for the benches that compare engines with what a user would pick instead
(``bench/gp_peers.py``, ``bench/turbo_enn_peers.py``).

Instance 1 of each function; the domain [-5, 5]^d is mapped to the unit cube. ``f_opt``: the
function at its optimum, which COCO writes to a file on request (it hides it otherwise), so
that a run's regret is ``best f - f_opt``. The problems are split by function: defaults may be
chosen on the tuning half; the held-out half is reported apart and the targets are counted on
it only.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: f1 sphere, f6 attractive sector, f10 ellipsoid, f15 rotated Rastrigin, f20 Schwefel.
TUNING = (1, 6, 10, 15, 20)
#: f3 separable Rastrigin, f8 Rosenbrock, f12 bent cigar, f17 Schaffer F7, f21 Gallagher 101.
HELD_OUT = (3, 8, 12, 17, 21)


def bbob(function: int, d: int) -> Any:
    """The bbob function ``function`` (instance 1) in dimension ``d`` as a COCO problem."""
    import cocoex

    suite = cocoex.Suite("bbob", "instances: 1", f"dimensions: {d} function_indices: {function}")
    return next(iter(suite))


@functools.cache
def f_opt(function: int, d: int) -> float:
    """The function's value at its optimum."""
    problem = bbob(function, d)
    with tempfile.TemporaryDirectory() as tmp:
        here = os.getcwd()
        os.chdir(tmp)
        try:
            problem._best_parameter("print")
            x_opt = np.loadtxt(Path(tmp) / "._bbob_problem_best_parameter.txt")
        finally:
            os.chdir(here)
    return float(problem(x_opt))


class Objective:
    """A bbob function on the unit cube: ``(n, d) -> (n,)``, minimized."""

    def __init__(self, function: int, d: int) -> None:
        self.problem = bbob(function, d)
        self.lower = np.asarray(self.problem.lower_bounds)
        self.upper = np.asarray(self.problem.upper_bounds)

    def __call__(self, U: np.ndarray) -> np.ndarray:
        X = self.lower + np.clip(U, 0.0, 1.0) * (self.upper - self.lower)
        return np.array([float(self.problem(x)) for x in X])
