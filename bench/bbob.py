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
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import markdown_table

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


def regret_summary(
    runs: list[dict[str, Any]], optimum: float, seconds: str
) -> dict[str, Any] | None:
    """The median over the runs (those with a ``best``) of the regret ``best - optimum``, its
    range, and the mean of the runs' ``seconds`` figure; ``None`` without such a run."""
    done = [r for r in runs if r["best"] is not None]
    if not done:
        return None
    regrets = [r["best"] - optimum for r in done]
    return {
        "regret": statistics.median(regrets),
        "low": min(regrets),
        "high": max(regrets),
        "seconds": statistics.mean(r[seconds] for r in done),
    }


def print_regret_table(
    title: str,
    functions: list[int],
    methods: tuple[str, ...],
    results: dict[int, dict[str, dict[str, Any] | None]],
    seconds: str,
) -> None:
    """One half's table: per function and method, the median regret [range over seeds] and
    the mean seconds (``seconds`` names them)."""
    print(f"\n## {title}: median regret [range over seeds]; {seconds}\n")
    rows = []
    for f in functions:
        row: list[object] = [f"f{f}"]
        for m in methods:
            s = results[f].get(m)
            row.append(
                "-"
                if s is None
                else f"{s['regret']:.3g} [{s['low']:.3g}, {s['high']:.3g}]; {s['seconds']:.2f} s"
            )
        rows.append(row)
    markdown_table(["function", *methods], rows, "l")


def at_most(
    functions: list[int],
    results: dict[int, dict[str, dict[str, Any] | None]],
    method: str,
    peer: str,
) -> tuple[int, int]:
    """Functions where ``method``'s median regret is at most ``peer``'s, of those with both."""
    both = [f for f in functions if results[f].get(method) and results[f].get(peer)]
    won = sum(results[f][method]["regret"] <= results[f][peer]["regret"] for f in both)  # type: ignore[index]
    return won, len(both)
