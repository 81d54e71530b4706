"""The ``pbt`` engine: Population Based Training as a scheduler of training units.

Method [Jaderberg2017] (full description and reasons: docs/engines/pbt.md). A population of
``P`` members trains in parallel; each member is a set of weights and hyperparameters ``h``.
Training is cut into segments of ``interval`` steps. After each segment a member is ranked by
its last score: a member in the bottom quantile *exploits*, copying the weights (checkpoint) of
a member drawn uniformly from the top quantile, and *explores*, perturbing the copied ``h``;
other members continue from their own weights with their own ``h``. With ``N`` ranked members
each quantile holds ``n = min(ceil(q N), floor(N / 2))`` members (Ray Tune's rule). Explore, per
hyperparameter (Ray Tune's): with probability ``resample_probability`` draw it afresh from its
prior (uniform in the study's encoding); otherwise multiply a number by ``perturb_down`` or
``perturb_up`` (0.8 / 1.2, each with probability 1/2), clipped to its bounds, and move a
categorical to an adjacent choice.

Asynchronous (default): a member is ranked and given its next segment as soon as its own
segment is told. Synchronous (``synchronous = true``, the paper's appendix A.1): the whole
population finishes a generation before anyone is ranked; meanwhile ask answers no unit and a
retry hint.

Over the ask/tell API (engines/base.py, schedulers; documents in engines/units.py): every trial
is one unit, a member training one segment, from the exact checkpoint of one trial (never "the
member's latest"). The engine rebuilds the population from the units on every ask; the state
holds the initial design, the synchronous generation's plan and the checkpoints still needed.

Our design, where the paper and Ray Tune are silent or differ:

- Asynchronous ranking at the member's own step: each other member scores by its last completed
  segment ending at or before it (Ray compares the latest scores, taken at different steps).
- Initial hyperparameters: the first ``P`` points of a scrambled Sobol sequence.
- A stepped or integer hyperparameter whose perturbed value rounds back to its level moves one
  level in the factor's direction.
- A member whose unit failed exploits like a bottom member (with nobody to copy it starts fresh
  with new hyperparameters); one whose last ``MAX_FAILURES_IN_A_ROW`` units failed is dropped.
- The default interval is 5 % of ``t_max``.

References:
    [Jaderberg2017] M. Jaderberg et al. Population Based Training of Neural Networks.
        arXiv:1711.09846, 2017.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from engines.base import JSON, History, Problem, Proposal, Unit, UnitScheduler, best_unit
from engines.limits import WorkLimits
from engines.options import check_int_options, check_option_ranges, int_option
from engines.quasirandom import SobolStream
from engines.space import (
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    Param,
    ParamValue,
    SearchSpace,
)
from engines.units import checkpoint_starts, not_handed_out, unit_document, unit_proposal

#: A member whose last units all failed this many times is dropped from the population.
MAX_FAILURES_IN_A_ROW = 3


@dataclass(frozen=True)
class Member:
    """A member as the units say it is now."""

    index: int
    units: list[Unit]

    @property
    def latest(self) -> Unit | None:
        return self.units[-1] if self.units else None

    @property
    def last_completed(self) -> Unit | None:
        done = [u for u in self.units if u.state == "completed" and u.checkpoint is not None]
        return done[-1] if done else None

    @property
    def busy(self) -> bool:
        return self.latest is not None and self.latest.state == "pending"

    @property
    def failed(self) -> bool:
        return self.latest is not None and self.latest.state == "failed"

    @property
    def dropped(self) -> bool:
        tail = self.units[-MAX_FAILURES_IN_A_ROW:]
        return len(tail) == MAX_FAILURES_IN_A_ROW and all(u.state == "failed" for u in tail)

    @property
    def step(self) -> int:
        """The step its weights are at: the end of its last completed unit."""
        last = self.last_completed
        return int(last.spec["to_step"]) if last is not None else 0


def members_of(units: tuple[Unit, ...], population_size: int) -> list[Member]:
    """The population rebuilt from the units (a unit's ``member`` says whose it is)."""
    by_member: list[list[Unit]] = [[] for _ in range(population_size)]
    for u in sorted(units, key=lambda u: u.number):
        m = int(u.spec["member"])
        if 0 <= m < population_size:
            by_member[m].append(u)
    return [Member(i, us) for i, us in enumerate(by_member)]


def quantiles(
    members: list[Member],
    quantile: float,
    t_max: int,
    at_step: int | None = None,
    deciding: int | None = None,
) -> tuple[list[Member], list[Member]]:
    """``(top, bottom)`` among the members still training (a completed unit before ``t_max``,
    latest unit not failed), ranked by score (lower ``y`` is better); among equal scores the
    member ``deciding`` ranks last (copying an equal member and exploring costs nothing and keeps
    the population diverse), then by member index.

    A member's score is that of its last completed unit ending at or before ``at_step`` (all of
    them when ``None``), so that members are compared at the same training step where they can
    be. Finished members are not ranked (as in Ray Tune): nobody copies weights that can train
    no further."""

    def score(m: Member) -> float | None:
        done = [
            u
            for u in m.units
            if u.state == "completed"
            and u.checkpoint is not None
            and (at_step is None or int(u.spec["to_step"]) <= at_step)
        ]
        return done[-1].y if done else None

    scored = [
        (y, m.index == deciding, m.index, m)
        for m in members
        if m.last_completed is not None
        and not m.failed
        and int(m.last_completed.spec["to_step"]) < t_max
        and (y := score(m)) is not None
    ]
    ranked = [m for *_, m in sorted(scored, key=lambda t: t[:3])]
    n = min(math.ceil(quantile * len(ranked)), len(ranked) // 2)
    return ranked[:n], ranked[len(ranked) - n :] if n else []


def explore(
    space: SearchSpace,
    x: np.ndarray,
    rng: np.random.Generator,
    resample_probability: float,
    factors: tuple[float, float],
) -> np.ndarray:
    """PBT's explore of the hyperparameters ``x`` (see the module docstring); returns a point."""
    values = space.decode(x)
    fresh = space.decode(rng.random(space.d))
    for p in space.free:
        if rng.random() < resample_probability:
            values[p.name] = fresh[p.name]
            continue
        up = bool(rng.random() < 0.5)
        values[p.name] = _perturbed(p, values[p.name], factors[1] if up else factors[0], up)
    return space.encode(values)


def _perturbed(p: Param, v: ParamValue, factor: float, up: bool) -> ParamValue:
    if isinstance(p, CategoricalParam):
        index = next(i for i, c in enumerate(p.choices) if c == v and type(c) is type(v))
        return p.choices[min(max(index + (1 if up else -1), 0), len(p.choices) - 1)]
    if isinstance(p, FloatParam) and p.step is None:
        return min(max(float(v) * factor, p.low), p.high)
    if isinstance(p, FloatParam | IntParam):
        step = 1 if isinstance(p, IntParam) else p.step
        assert step is not None
        level = round((float(v) - p.low) / step)
        new = round((float(v) * factor - p.low) / step)
        if new == level:
            new = level + (1 if up else -1)
        top = math.floor((p.high - p.low) / step + 1e-9)
        new = min(max(new, 0), top)
        if isinstance(p, IntParam):
            return int(p.low + new)
        return min(round(p.low + new * step, 12), p.high)
    assert not isinstance(p, FixedParam)
    raise TypeError(f"cannot perturb {p!r}")


@dataclass
class PBTEngine(UnitScheduler):
    """PBT over ask/tell; see the module docstring. ``t_max`` (training steps per member) is
    required."""

    name: ClassVar[str] = "pbt"
    limits: ClassVar[WorkLimits] = WorkLimits(max_dimension=100, max_count=1000, max_points=100_000)

    t_max: int | None = int_option(None, 1, 2**40)
    population_size: int = int_option(8, 2, 1000)
    #: Steps per unit; default 5 % of ``t_max`` (at least 1).
    interval: int | None = None
    quantile: float = 0.25
    resample_probability: float = 0.25
    perturb_down: float = 0.8
    perturb_up: float = 1.2
    synchronous: bool = False
    #: The retry hint while no member is ready (seconds).
    poll_seconds: float = 2.0
    _factors: tuple[float, float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.t_max is None:
            raise ValueError("option t_max (training steps per member) is required")
        check_int_options(self)
        check_option_ranges([("interval", self.interval, 1, self.t_max, True)])
        if not 0.0 < self.quantile <= 0.5:
            raise ValueError(f"quantile must be in (0, 0.5], got {self.quantile}")
        if not 0.0 <= self.resample_probability <= 1.0:
            raise ValueError(
                f"resample_probability must be in [0, 1], got {self.resample_probability}"
            )
        if not 0.0 < self.perturb_down <= 1.0 <= self.perturb_up:
            raise ValueError("perturb_down must be in (0, 1] and perturb_up >= 1")
        if not 0.0 < self.poll_seconds <= 3600.0:
            raise ValueError(f"poll_seconds must be in (0, 3600], got {self.poll_seconds}")
        if self.interval is None:
            self.interval = max(1, round(0.05 * self.t_max))
        self._factors = (self.perturb_down, self.perturb_up)

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        initial = _initial_design(state, problem.d, self.population_size, rng)
        members = members_of(history.units, self.population_size)
        if self.synchronous:
            docs, waiting, plan = self._synchronous(problem, history, members, state, initial, rng)
        else:
            docs, waiting = self._asynchronous(problem, members, initial, count, rng)
            plan = []
        docs = docs[:count]
        new_state = {
            "initial": initial.tolist(),
            "plan": plan,
            # Any member's last checkpoint may still be continued or copied (synchronous too: a
            # member whose unit fails with nobody to copy continues from it).
            "pinned": _pinned(members, plan + docs, history.units),
        }
        if self.synchronous:
            new_state["generation"] = _generation_of(plan, state)
        retry_after = self.poll_seconds if waiting and len(docs) < count else None
        return unit_proposal(docs, problem.d, new_state, retry_after)

    # --- the two modes -----------------------------------------------------------------------

    def _asynchronous(
        self,
        problem: Problem,
        members: list[Member],
        initial: np.ndarray,
        count: int,
        rng: np.random.Generator,
    ) -> tuple[list[JSON], bool]:
        """Units for the members that are ready now, least trained first; and whether some
        member is still training."""
        ready = sorted(
            (m for m in members if not m.busy and not self._finished(m)),
            key=lambda m: (m.step, m.index),
        )
        docs = []
        for m in ready[:count]:
            # A member with no completed unit (its first one failed) is ranked against the
            # others' latest scores: there is nothing at its own step to compare with.
            at_step = m.step if m.last_completed is not None else None
            top, bottom = quantiles(
                members, self.quantile, self.t_max or 0, at_step=at_step, deciding=m.index
            )
            doc = self._next_unit(problem, m, top, bottom, initial, rng, len(m.units))
            if doc is not None:
                docs.append(doc)
        return docs, any(m.busy for m in members)

    def _synchronous(
        self,
        problem: Problem,
        history: History,
        members: list[Member],
        state: JSON,
        initial: np.ndarray,
        rng: np.random.Generator,
    ) -> tuple[list[JSON], bool, list[JSON]]:
        """The planned units of the current generation not yet handed out; a new plan when the
        generation is complete. Returns (units, whether a unit is still training, plan)."""
        plan = state.get("plan") if isinstance(state.get("plan"), list) else None
        if not plan:
            plan = [
                d
                for m in members
                if (d := self._next_unit(problem, m, [], [], initial, rng, generation=0))
            ]
        todo = not_handed_out(plan, history.units)
        if todo:
            return todo, False, plan
        if any(m.busy for m in members):
            return [], True, plan
        generation = int(plan[0]["generation"]) + 1 if plan else 0
        top, bottom = quantiles(members, self.quantile, self.t_max or 0)
        nxt = [
            d
            for m in members
            if (d := self._next_unit(problem, m, top, bottom, initial, rng, generation))
        ]
        return (nxt, False, nxt) if nxt else ([], False, plan)

    # --- one member's next unit --------------------------------------------------------------

    def _finished(self, m: Member) -> bool:
        """Member ``m`` trained to ``t_max`` (or was dropped): it gets no more units."""
        last = m.last_completed
        done = last is not None and not m.failed and int(last.spec["to_step"]) >= (self.t_max or 0)
        return done or m.dropped

    def _next_unit(
        self,
        problem: Problem,
        m: Member,
        top: list[Member],
        bottom: list[Member],
        initial: np.ndarray,
        rng: np.random.Generator,
        generation: int,
    ) -> JSON | None:
        seed = int(rng.integers(2**31))
        if m.latest is None:
            return self._doc(m.index, generation, None, "initial", seed, initial[m.index])
        if self._finished(m):
            return None
        donors = [t for t in top if t.index != m.index]
        if (m.failed or any(b.index == m.index for b in bottom)) and donors:
            source = donors[int(rng.integers(len(donors)))].last_completed
            assert source is not None
            x = explore(problem.space, source.x, rng, self.resample_probability, self._factors)
            return self._doc(m.index, generation, source, "exploit", seed, x)
        last = m.last_completed
        if last is None:
            # Its first unit failed and nobody can be copied: start afresh with new values.
            return self._doc(m.index, generation, None, "initial", seed, rng.random(problem.d))
        return self._doc(m.index, generation, last, "continue", seed, last.x)

    def _doc(
        self,
        member: int,
        generation: int,
        start: Unit | None,
        reason: str,
        seed: int,
        x: np.ndarray,
    ) -> JSON:
        assert self.t_max is not None and self.interval is not None
        from_step = 0 if start is None else int(start.spec["to_step"])
        to_step = min(from_step + self.interval, self.t_max)
        return unit_document(member, generation, from_step, to_step, start, reason, seed, x)


def _initial_design(
    state: JSON, d: int, population_size: int, rng: np.random.Generator
) -> np.ndarray:
    """The first ``P`` points of a scrambled Sobol sequence, kept in the state."""
    stored = state.get("initial")
    if isinstance(stored, list):
        X = np.asarray(stored, dtype=np.float64)
        if X.shape == (population_size, d):
            return X
    return SobolStream.resume(d, {}, rng).draw(population_size)


def _generation_of(plan: list[JSON], state: JSON) -> int:
    return int(plan[0]["generation"]) if plan else int(state.get("generation", 0))


def _pinned(members: list[Member], docs: list[JSON], units: tuple[Unit, ...]) -> list[int]:
    """Trials whose checkpoints may still be loaded: each member's last completed unit, the
    starts of planned units, and the best unit."""
    pinned = {m.last_completed.number for m in members if m.last_completed is not None}
    pinned |= checkpoint_starts(docs)
    best = best_unit(units)
    if best is not None:
        pinned.add(best.number)
    return sorted(pinned)
