"""The ``random`` engine: a scrambled Sobol sequence, seeded per study.

Method. A scrambled Sobol sequence in ``[0, 1]^d`` [Owen1998scrambling]: the first ``2^k``
points of any run are better spread than i.i.d. uniform draws, which is why every model-based
engine here starts from it. The engine keeps the scrambling seed and the index of the next
point in its state, so successive asks continue one sequence (a study's first 2^k trials form a
balanced design whatever the batch sizes). A point that equals a pending one after snapping to
the parameter grid (``SearchSpace.snap``) is skipped; when a finite space has fewer free values
than asked, duplicates are allowed after a bounded search, so ``count`` points always come back.

References:
    [Owen1998scrambling] A. B. Owen. Scrambling Sobol' and Niederreiter-Xing points.
        Journal of Complexity 14(4), 1998.
"""

from __future__ import annotations

import copy
import functools
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.stats import qmc

from engines.base import JSON, History, Problem, Proposal
from engines.limits import WorkLimits

#: How many extra Sobol points to draw per requested point before accepting duplicates.
_MAX_SKIPS_PER_POINT = 16


@functools.lru_cache(maxsize=256)
def _scrambled_sobol(d: int, seed: int) -> qmc.Sobol:
    """Scrambling costs most of a draw; this cache keeps the scrambled generator of a
    ``(d, seed)``. It only saves time: the points are the same with or without it."""
    return qmc.Sobol(d, scramble=True, seed=seed)


#: Generators left where a draw ended, by ``(d, seed, index)``, so that a study's next draw
#: continues without re-creating and fast-forwarding one (reset deep-copies its random state:
#: about 90 us, a noticeable share of a random-engine ask). Each is taken out while in use.
_resumable: OrderedDict[tuple[int, int, int], qmc.Sobol] = OrderedDict()
_resumable_lock = threading.Lock()
_MAX_RESUMABLE = 256


def _sampler_at(d: int, seed: int, index: int) -> qmc.Sobol:
    """A scrambled Sobol generator of ``(d, seed)`` whose next point is number ``index``."""
    with _resumable_lock:
        sampler = _resumable.pop((d, seed, index), None)
    if sampler is not None:
        return sampler
    # A shallow copy shares the scrambled direction numbers; reset() gives it its own
    # position, so the cached generator is never advanced.
    sampler = copy.copy(_scrambled_sobol(d, seed))
    sampler.reset()
    if index:
        sampler.fast_forward(index)
    return sampler


def _keep_resumable(d: int, seed: int, index: int, sampler: qmc.Sobol) -> None:
    with _resumable_lock:
        _resumable[(d, seed, index)] = sampler
        if len(_resumable) > _MAX_RESUMABLE:
            _resumable.popitem(last=False)


class SobolStream:
    """A resumable scrambled Sobol stream: ``(seed, index)`` is its whole state."""

    def __init__(self, d: int, seed: int, index: int = 0) -> None:
        self.d, self.seed, self.index = d, seed, index

    @classmethod
    def resume(cls, d: int, state: JSON, rng: np.random.Generator) -> SobolStream:
        """The stream an engine's ``state`` left off (its ``seed`` and ``index``), or a new one
        seeded from ``rng`` when the state has none that is valid."""
        seed, index = state.get("seed"), state.get("index", 0)
        if not (type(seed) is int and type(index) is int and seed >= 0 and index >= 0):
            seed, index = int(rng.integers(2**31)), 0
        return cls(d, seed, index)

    def state(self) -> JSON:
        """The stream's part of an engine's state: ``{"seed", "index"}``."""
        return {"seed": self.seed, "index": self.index}

    def draw(self, n: int) -> np.ndarray:
        """The next ``n`` points, ``(n, d)`` in [0, 1)."""
        if self.d == 0:
            self.index += n
            return np.zeros((n, 0))
        sampler = _sampler_at(self.d, self.seed, self.index)
        with warnings.catch_warnings():
            # Sobol warns when n is not a power of two; a continued stream is balanced overall.
            warnings.simplefilter("ignore", UserWarning)
            points = sampler.random(n)
        self.index += n
        _keep_resumable(self.d, self.seed, self.index, sampler)
        return points


def sobol_points(
    problem: Problem,
    X_pending: np.ndarray,
    count: int,
    stream: SobolStream,
) -> np.ndarray:
    """``count`` Sobol points from ``stream``, none equal to a pending point or to each other
    after snapping, unless the space runs out of distinct values. Returns ``(count, d)``."""
    space = problem.space
    taken = {row.tobytes() for row in space.snap(X_pending)} if len(X_pending) else set()
    chosen: list[np.ndarray] = []
    duplicates: list[np.ndarray] = []
    budget = count * (1 + _MAX_SKIPS_PER_POINT)
    while len(chosen) < count and budget > 0:
        batch = stream.draw(min(budget, count - len(chosen)))
        budget -= len(batch)
        for x, key in zip(batch, space.snap(batch), strict=True):
            k = key.tobytes()
            if k in taken or problem.d == 0:
                duplicates.append(x)
                continue
            taken.add(k)
            chosen.append(x)
            if len(chosen) == count:
                break
    chosen.extend(duplicates[: count - len(chosen)])
    while len(chosen) < count:  # every draw was a duplicate and the budget is spent
        chosen.extend(stream.draw(count - len(chosen)))
    return np.array(chosen, dtype=np.float64).reshape(count, problem.d)


@dataclass
class RandomEngine:
    """Scrambled Sobol points; no options."""

    name: ClassVar[str] = "random"
    limits: ClassVar[WorkLimits] = WorkLimits(
        max_dimension=1000, max_count=1000, max_points=1_000_000
    )
    uses_observations: ClassVar[bool] = False
    max_objectives: ClassVar[int | None] = None
    schedules_units: ClassVar[bool] = False

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        stream = SobolStream.resume(problem.d, state, rng)
        X = sobol_points(problem, history.X_pending, count, stream)
        return Proposal(
            X=X,
            state=stream.state(),
            details=[{"source": "sobol"} for _ in range(count)],
        )

    def light_call(self, history: History, state: JSON) -> bool:
        return True  # Sobol points only
