"""What the local-search engines (``lcbo``, ``turbo-enn``) share.

Both search one region of the unit cube at a time. A region's data are the ``History`` rows
from its start row on (rows are in completion order), and it opens with an initial design of
Sobol points; its state is a frozen dataclass stored as the study's JSON state. Here:

- ``SearchState``: the first fields of such a state, and how they start.
- ``parse_state``: the state dataclass from JSON, or ``None`` when the JSON does not fit it.
- ``initial_design``: the Sobol points of a region's initial design within a batch.
- ``perturbation_mask``: which coordinates of a candidate move away from the centre, the
  random-axis subsets of RAASP [Regis2013raasp], as TuRBO's candidates use them
  [Eriksson2019turbo].

References:
    [Regis2013raasp] R. G. Regis, C. A. Shoemaker. Combining radial basis function surrogates
        and dynamic coordinate search in high-dimensional expensive black-box optimization.
        Engineering Optimization 45(5), 2013.
    [Eriksson2019turbo] D. Eriksson, M. Pearce, J. Gardner, R. D. Turner, M. Poloczek.
        Scalable global optimization via local Bayesian optimization. NeurIPS 2019.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

import numpy as np

from engines.base import JSON, History, Problem
from engines.quasirandom import SobolStream, sobol_points

State = TypeVar("State")
Search = TypeVar("Search", bound="SearchState")


@dataclass(frozen=True)
class SearchState:
    """The first fields of a local-search engine's state; the engine's subclass adds the
    region's start row (a field named ``*_start``), ``n_seen`` and its own fields."""

    version: int
    seed: int  # of the Sobol stream of initial designs
    index: int  # next point of that stream
    generation: int  # restarts so far

    @staticmethod
    def first_fields(version: int, rng: np.random.Generator) -> dict[str, Any]:
        """The counters a state starts with at a study's first ask (or when its state was
        lost), with ``n_seen``: a new Sobol seed drawn from ``rng``, nothing drawn, seen or
        restarted yet."""
        seed = int(rng.integers(2**31))
        return {"version": version, "seed": seed, "index": 0, "generation": 0, "n_seen": 0}

    def as_json(self) -> JSON:
        """The state as the study stores it: its fields, not copied (``dataclasses.asdict``
        deep-copies nested lists, 1.4 ms an ask for a CMA region's covariance at d = 20)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def restarted(self: Search, history: History, **new: Any) -> Search:
        """This state after a restart: the next generation, a region that starts at the end of
        the history (its ``*_start`` field) with nothing seen or handed out yet, and the fields
        ``new`` the engine starts a region with."""
        start = next(f.name for f in fields(self) if f.name.endswith("_start"))
        changes = {start: history.n, "n_seen": history.n, "n_init_given": 0, **new}
        return replace(self, generation=self.generation + 1, **changes)


def parse_state(cls: type[State], state: JSON, history: History, version: int) -> State | None:
    """``cls(**state)`` when ``state`` has exactly the fields of ``cls``, every field annotated
    ``int`` holds a non-negative int, ``version`` matches and the region's rows are in the
    history: ``start <= n_seen <= history.n`` (``start`` is the first field ending in
    ``_start``). ``None`` otherwise: the engine then starts afresh."""
    try:
        st: Any = cls(**state)
    except TypeError:
        return None
    counters = [getattr(st, f.name) for f in fields(st) if f.type == "int"]
    if not all(type(v) is int and v >= 0 for v in counters) or st.version != version:
        return None
    start = next(getattr(st, f.name) for f in fields(st) if f.name.endswith("_start"))
    if not start <= st.n_seen <= history.n:
        return None
    return st


def initial_design(
    problem: Problem,
    history: History,
    count: int,
    n_left: int,
    centred: bool,
    stream: SobolStream,
    generation: int,
) -> tuple[np.ndarray, list[JSON]]:
    """The Sobol points of a batch of ``count``, ``(n, d)``, and their details: ``n_left``
    initial points of the region are still to be handed out; all ``count`` when the region has
    no observation to centre on yet (not ``centred``) or the space has no dimension."""
    n_sobol = count if problem.d == 0 or not centred else min(count, max(0, n_left))
    X = sobol_points(problem, history.X_pending, n_sobol, stream)
    return X, [{"source": "sobol", "generation": generation} for _ in range(n_sobol)]


def perturbation_mask(
    rng: np.random.Generator, M: int, d: int, dtype: type[np.floating[Any]] = np.float64
) -> np.ndarray:
    """``(M, d)`` booleans: each coordinate is perturbed with probability ``min(20 / d, 1)``,
    at least one per row (drawn uniformly where none was)."""
    mask = rng.random((M, d), dtype=dtype) < min(20.0 / d, 1.0)
    empty = np.flatnonzero(~mask.any(axis=1))
    mask[empty, rng.integers(0, d, len(empty))] = True
    return mask
