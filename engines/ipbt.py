"""The ``ipbt`` engine: Iterated Population Based Training, a scheduler of training units.

Method [Chebykin2026], defaults as in the authors' code (full description and reasons:
docs/engines/ipbt.md). A synchronous PBT runs with a short step ``t_step`` (1 % of ``t_max``)
until its progress stagnates, then restarts with the step doubled:

- Iteration start (t = 0 and every restart): ``2 P`` candidates train one step, each scored
  before training (``R_before``); the best ``P`` become the population.
- Outer step: every member trains ``t_step`` steps; the bottom ``round(q P)`` copy the checkpoint
  of a random top member and take the hyperparameters ``h`` minimizing ``LCB = mu - 3 sigma`` of
  a time-varying GP (PB2 [Parker-Holder2020], engines/time_varying_gp.py) on the iteration's
  rows ``(h, R_before, t) -> (y - R_before) / (to - from)``, at the parent's ``R_before`` and the
  next time, in a trust region around the parent's ``h`` (side ``L`` from 0.4 in [0.15, 1],
  x1.5 after 3 successes, /1.5 after 10 failures).
- Stagnation: ``s`` = the best score after each outer step. "Too slow" (15 points or more, less
  than one standard deviation gained over the last 14) fails at once; otherwise a step fails
  unless a GP smoothing of ``s`` ends lower than the step before. ``patience`` failed steps in a
  row restart, if ``t + t_step + 2 (2 t_step) <= t_max`` (``t``: steps spent per member).
- Restart: ``t_step`` doubles; the ``2 P`` candidates start from top checkpoints shrunk and
  perturbed, ``theta <- 0.2 theta + 0.1 theta_fresh`` (half, at random, fully fresh), half with
  uniform ``h`` and half from a meta-level time-varying GP over the iterations' initial members.
- Budget: ``P t_max`` member-steps; the last step is cut to what is left.

Over the ask/tell API (engines/base.py, schedulers): units as in ``pbt``, always synchronous.
The state keeps the plan, the population's slots, the iteration, ``t_step``, the budget spent,
the stagnation and trust-region counters and the iterations' initial members; the GPs are
refit from the units on each generation. A generation's random draws come from a generator
seeded by the state's seed (drawn at the first ask) and the generation's number, not from the
ask's generator: the asks that find a generation still training vary with timing, and a seeded
study must plan the same generations whatever they were. Each generation's fits start from the
previous generation's hyperparameters (engines/time_varying_gp.py says why and what it costs).

Our simplifications (the authors' code differs): the LCB is minimized over 1,024 random points
of the trust region, not by Adam; categorical and integer hyperparameters enter the GP through
their cell in the unit cube, not an overlap kernel; the stagnation smoother is an exact GP;
GP time counts outer steps (iterations for the meta-GP); a failed unit scores worst.

References:
    [Chebykin2026] A. Chebykin, T. Alderliesten, P. A. N. Bosman. Iterated Population Based
        Training with Task-Agnostic Restarts. ICML 2026 (arXiv:2511.09190).
    [Parker-Holder2020] J. Parker-Holder, V. Nguyen, S. Roberts. Provably Efficient Online
        Hyperparameter Optimization with Population-Based Bandits. NeurIPS 2020.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from engines.base import JSON, History, Problem, Proposal, Unit, UnitScheduler
from engines.limits import WorkLimits
from engines.options import check_int_options, int_option
from engines.quasirandom import SobolStream
from engines.time_varying_gp import (
    copula,
    fit_time_varying_gp,
    hyperparameters,
    lcb_in_trust_region,
    smoothed_improvement,
    too_slow,
)
from engines.units import (
    best_descendant_score,
    checkpoint_starts,
    not_handed_out,
    told_generation,
    unit_document,
    unit_proposal,
)

#: GP rows kept per fit (the most recent), as in the authors' code.
MAX_ROWS = 100
TR_INIT, TR_MIN, TR_MAX = 0.4, 0.15, 1.0
TR_FACTOR, TR_SUCCESSES, TR_FAILURES = 1.5, 3, 10
SHRINK, PERTURB = 0.2, 0.1


@dataclass
class IPBTEngine(UnitScheduler):
    """IPBT over ask/tell; see the module docstring. ``t_max`` (training steps per member)
    is required."""

    name: ClassVar[str] = "ipbt"
    limits: ClassVar[WorkLimits] = WorkLimits(max_dimension=100, max_count=1000, max_points=100_000)

    t_max: int | None = int_option(None, 2, 2**40)
    population_size: int = int_option(8, 2, 1000)
    #: The first step, as a share of ``t_max``; doubled at each restart.
    initial_step_share: float = 0.01
    quantile: float = 0.25
    patience: int = int_option(3, 1, 1000)
    #: Share of the restart candidates with fully fresh weights, and with random
    #: hyperparameters (the others come from the meta-GP).
    random_weights_share: float = 0.5
    random_hyperparameters_share: float = 0.5
    poll_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.t_max is None:
            raise ValueError("option t_max (training steps per member) is required")
        check_int_options(self)
        for name in ("initial_step_share", "random_weights_share", "random_hyperparameters_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.initial_step_share == 0.0:
            raise ValueError("initial_step_share must be > 0")
        if not 0.0 < self.quantile <= 0.5:
            raise ValueError(f"quantile must be in (0, 0.5], got {self.quantile}")
        if not 0.0 < self.poll_seconds <= 3600.0:
            raise ValueError(f"poll_seconds must be in (0, 3600], got {self.poll_seconds}")

    @property
    def n_quantile(self) -> int:
        """Members in the top (and in the bottom) quantile; the two never overlap."""
        return min(max(1, round(self.quantile * self.population_size)), self.population_size // 2)

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        assert self.t_max is not None
        s = _State.load(state, self.t_max, self.initial_step_share)
        units = {u.number: u for u in history.units}
        if not s.plan and not s.finished:
            s.seed = int(rng.integers(2**63))
            s.plan = self._initial_generation(problem, s, rng)
        todo = not_handed_out(s.plan, history.units)
        waiting = False
        if not todo and not s.finished:
            generation = told_generation(history.units, s.generation, len(s.plan))
            if generation is None:
                waiting = True
            else:
                # From the state, not from ``rng``: how many asks found the generation still
                # training depends on timing, and a seeded job must plan the same generations.
                generation_rng = np.random.default_rng([s.seed, s.generation])
                self._close_generation(problem, s, generation, units, generation_rng)
                todo = [] if s.finished else list(s.plan)
        docs = todo[:count]
        s.pinned = _pinned(s, units)
        retry_after = self.poll_seconds if waiting and len(docs) < count else None
        return unit_proposal(docs, problem.d, s.dump(), retry_after)

    def light_call(self, history: History, state: JSON) -> bool:
        """Light unless the ask closes a generation (the GP fits, a restart's candidates)."""
        assert self.t_max is not None
        s = _State.load(state, self.t_max, self.initial_step_share)
        told = told_generation(history.units, s.generation, len(s.plan))
        return s.finished or not s.plan or told is None

    # --- generations -------------------------------------------------------------------------

    def _initial_generation(
        self, problem: Problem, s: _State, rng: np.random.Generator
    ) -> list[JSON]:
        n = 2 * self.population_size
        X = SobolStream.resume(problem.d, {}, rng).draw(n)
        length = s.step_length(n, self.population_size)
        return [_doc(i, 0, length, None, "initial", rng, X[i], eval_before=True) for i in range(n)]

    def _close_generation(
        self,
        problem: Problem,
        s: _State,
        generation: list[Unit],
        units: dict[int, Unit],
        rng: np.random.Generator,
    ) -> None:
        """Every unit of the current generation is told: select, record, then plan the next
        generation (an outer step, or a restart), or finish."""
        P = self.population_size
        s.spent += sum(int(u.spec["to_step"]) - int(u.spec["from_step"]) for u in generation)
        by_score = sorted(generation, key=_rank_key)
        if len(generation) > P:  # an iteration's 2P candidates: keep the best P
            kept = by_score[:P]
            s.slots = [u.number for u in kept] + [kept[0].number] * (P - len(kept))
            s.iterations.append({"n": s.iteration, "trials": list(s.slots)})
        else:
            s.slots = [u.number for u in sorted(generation, key=lambda u: int(u.spec["member"]))]
        population = [units[n] for n in s.slots]
        best = min(population, key=_rank_key)
        if best.y is not None:
            s.best.append(best.y)
            s.best_of_iteration = _better(s.best_of_iteration, best, units)
        if len(generation) <= P:  # the trust region counts outer steps only
            self._update_trust_region(s, best)
        self._update_stagnation(s)
        length = s.step_length(P, P)
        if length < 1:
            s.finished, s.plan = True, []
            return
        if s.n_fail >= self.patience and self._restart_fits(s):
            s.plan = self._restart(problem, s, units, rng)
        else:
            s.plan = self._outer_step(problem, s, length, population, units, rng)
        s.generation += 1
        for d in s.plan:
            d["generation"] = s.generation

    def _outer_step(
        self,
        problem: Problem,
        s: _State,
        length: int,
        population: list[Unit],
        units: dict[int, Unit],
        rng: np.random.Generator,
    ) -> list[JSON]:
        """Continue the top and middle members; the bottom ones copy a top member and take
        hyperparameters from the time-varying GP."""
        q = self.n_quantile
        order = sorted(range(len(population)), key=lambda i: _rank_key(population[i]))
        top = [i for i in order[:q] if population[i].state == "completed"]
        failed = {i for i, u in enumerate(population) if u.state != "completed"}
        bottom = sorted(set(order[-q:]) | failed) if top else []
        parents = {i: population[top[int(rng.integers(len(top)))]] for i in bottom}
        explored, source = self._explore(problem, s, parents, units, rng)
        docs = []
        start: Unit | None
        extra: JSON
        for i, unit in enumerate(population):
            if i in parents:
                start, reason, x, extra = parents[i], "exploit", explored[i], {"source": source}
            elif i in failed:  # nobody to copy (every member failed): start afresh
                x = rng.random(problem.d)
                start, reason, extra = None, "initial", {"eval_before": True}
            else:
                start, reason, x, extra = unit, "continue", unit.x, {}
            docs.append(_doc(i, s.iteration, length, start, reason, rng, x, **extra))
        return docs

    def _explore(
        self,
        problem: Problem,
        s: _State,
        parents: dict[int, Unit],
        units: dict[int, Unit],
        rng: np.random.Generator,
    ) -> tuple[dict[int, np.ndarray], str]:
        """New hyperparameters for the members in ``parents`` (member -> parent unit), and
        where they come from (``bo``, or ``random`` before the iteration has GP rows)."""
        if not parents:
            return {}, "bo"
        rows = _improvement_rows(s.iteration, units, s.t_step)
        if rows is None:
            return {i: rng.random(problem.d) for i in parents}, "random"
        X, y, r_range = rows
        model = fit_time_varying_gp(X, copula(y), s.explore_gp)
        s.explore_gp = hyperparameters(model)
        out: dict[int, np.ndarray] = {}
        t_next = (max(int(p.spec["to_step"]) for p in parents.values()) + s.t_step) / s.t_step
        for i, parent in parents.items():
            assert parent.y is not None
            r = (parent.y - r_range[0]) / (r_range[1] - r_range[0] or 1.0)
            (out[i],) = lcb_in_trust_region(
                model, parent.x, np.array([r, t_next]), s.tr_length, 1, rng
            )
        return out, "bo"

    def _restart(
        self, problem: Problem, s: _State, units: dict[int, Unit], rng: np.random.Generator
    ) -> list[JSON]:
        """A new iteration: the step doubles; 2P candidates from shrunk-and-perturbed top
        checkpoints (some fresh), half random and half meta-GP hyperparameters."""
        meta = self._meta_proposals(problem, s, units, rng)
        s.iteration += 1
        s.t_step *= 2
        s.n_fail, s.best = 0, []
        s.tr_length, s.tr_successes, s.tr_failures = TR_INIT, 0, 0
        if s.best_of_iteration is not None:
            s.pinned_bests.append(s.best_of_iteration)
        s.best_of_iteration = None
        n = 2 * self.population_size
        n_random = round(self.random_hyperparameters_share * n)
        X = np.vstack([rng.random((n_random, problem.d)), meta[: n - n_random]])
        if len(X) < n:
            X = np.vstack([X, rng.random((n - len(X), problem.d))])
        completed = [units[n] for n in s.slots if units[n].state == "completed"]
        top = sorted(completed, key=_rank_key)[: self.n_quantile]
        fresh = set(rng.permutation(n)[: round(self.random_weights_share * n)].tolist())
        length = s.step_length(n, self.population_size)
        docs = []
        for i in range(n):
            parent = top[int(rng.integers(len(top)))] if top else None
            extra: JSON = {}  # without a parent: nothing to reuse, fresh weights from step 0
            if parent is not None:
                shrink, perturb = (0.0, 1.0) if i in fresh else (SHRINK, PERTURB)
                transform = {"kind": "shrink_perturb", "shrink": shrink, "perturb": perturb}
                transform["seed"] = int(rng.integers(2**31))
                source = "meta_bo" if n_random <= i < n_random + len(meta) else "random"
                extra = {"transform": transform, "source": source}
            docs.append(_doc(i, s.iteration, length, parent, "restart", rng, X[i], True, **extra))
        return docs

    def _meta_proposals(
        self, problem: Problem, s: _State, units: dict[int, Unit], rng: np.random.Generator
    ) -> np.ndarray:
        """Hyperparameters for the next iteration from the meta-level time-varying GP over the
        iterations' initial members (``(P, d)``, or ``(0, d)`` without data)."""
        rows_X, rows_y, lineages = [], [], []
        for record in s.iterations:
            for number in record["trials"]:
                root = units.get(number)
                if root is None or root.y is None:
                    continue
                best = best_descendant_score(root, units)
                rows_X += [np.append(root.x, record["n"]), np.append(root.x, record["n"] + 1)]
                rows_y += [root.y, best]
                lineages.append((record["n"], best, root))
        if len(rows_y) < 4:
            return np.zeros((0, problem.d))
        model = fit_time_varying_gp(np.array(rows_X), copula(np.array(rows_y)))
        last = max(n for n, _, _ in lineages)
        center = min((t for t in lineages if t[0] == last), key=lambda t: t[1])[2].x
        return lcb_in_trust_region(
            model, center, np.array([s.iteration + 1.0]), TR_INIT, self.population_size, rng
        )

    # --- bookkeeping ---------------------------------------------------------------------------

    def _update_trust_region(self, s: _State, best: Unit) -> None:
        if best.spec.get("source") == "bo":
            s.tr_successes, s.tr_failures = s.tr_successes + 1, 0
        else:
            s.tr_successes, s.tr_failures = 0, s.tr_failures + 1
        if s.tr_successes >= TR_SUCCESSES:
            s.tr_length, s.tr_successes = min(TR_MAX, s.tr_length * TR_FACTOR), 0
        if s.tr_failures >= TR_FAILURES:
            s.tr_length, s.tr_failures = max(TR_MIN, s.tr_length / TR_FACTOR), 0

    def _update_stagnation(self, s: _State) -> None:
        if len(s.best) < 2:
            return
        if too_slow(s.best):
            s.n_fail = self.patience
        else:
            improved, s.smoother_gp = smoothed_improvement(s.best, s.smoother_gp)
            s.n_fail = 0 if improved else s.n_fail + 1

    def _restart_fits(self, s: _State) -> bool:
        """A restart must leave room for its 2P step and one population step of the doubled
        size (the authors' guard: ``t + t_step + 2 (2 t_step) <= t_max``)."""
        assert self.t_max is not None
        t = s.spent / self.population_size
        return t + s.t_step + 2 * (2 * s.t_step) <= self.t_max


def _rank_key(u: Unit) -> tuple[float, int]:
    """Completed units by score, failed ones last."""
    return (u.y if u.state == "completed" and u.y is not None else math.inf, u.number)


def _better(current: int | None, candidate: Unit, units: dict[int, Unit]) -> int:
    if current is None or current not in units:
        return candidate.number
    return min(current, candidate.number, key=lambda n: _rank_key(units[n]))


def _improvement_rows(
    iteration: int, units: dict[int, Unit], t_step: int
) -> tuple[np.ndarray, np.ndarray, tuple[float, float]] | None:
    """The GP rows of the iteration: ``X = [h, R_before (min-max scaled), t / t_step]`` and the
    improvement per step; ``None`` with fewer than 3 rows."""
    rows = []
    for u in units.values():
        if u.state != "completed" or u.y is None or u.spec.get("iteration", 0) != iteration:
            continue
        before = u.y_before
        start = u.spec["start"]
        unchanged = u.spec.get("transform", {}).get("kind", "none") == "none"
        if before is None and start["kind"] == "checkpoint" and unchanged:
            parent = units.get(start["trial"])
            before = parent.y if parent is not None else None
        if before is None:
            continue
        steps = int(u.spec["to_step"]) - int(u.spec["from_step"])
        rows.append(
            (u.number, u.x, before, int(u.spec["to_step"]) / t_step, (u.y - before) / steps)
        )
    if len(rows) < 3:
        return None
    rows = sorted(rows, key=lambda r: r[0])[-MAX_ROWS:]
    r = np.array([row[2] for row in rows])
    r_range = (float(r.min()), float(r.max()))
    scaled = (r - r_range[0]) / (r_range[1] - r_range[0] or 1.0)
    X = np.array(
        [np.concatenate([row[1], [s, row[3]]]) for row, s in zip(rows, scaled, strict=True)]
    )
    return X, np.array([row[4] for row in rows]), r_range


def _doc(
    member: int,
    iteration: int,
    length: int,
    start: Unit | None,
    reason: str,
    rng: np.random.Generator,
    x: np.ndarray,
    eval_before: bool = False,
    **extra: object,
) -> JSON:
    """A unit of ``iteration`` training ``length`` steps from ``start`` (fresh: from step 0);
    its generation is set when the plan is complete."""
    from_step = 0 if start is None else int(start.spec["to_step"])
    seed = int(rng.integers(2**31))
    x = np.clip(x, 0.0, 1.0)
    extra = {"iteration": iteration, "eval_before": eval_before, **extra}
    return unit_document(member, 0, from_step, from_step + length, start, reason, seed, x, **extra)


def _pinned(s: _State, units: dict[int, Unit]) -> list[int]:
    """The checkpoints a unit of the plan loads, the population's, and the best of every
    iteration."""
    pinned = checkpoint_starts(s.plan)
    pinned |= {n for n in s.slots if n in units and units[n].checkpoint is not None}
    pinned |= set(s.pinned_bests)
    if s.best_of_iteration is not None:
        pinned.add(s.best_of_iteration)
    return sorted(pinned)


@dataclass
class _State:
    """The engine state as fields; ``load`` starts afresh from anything unusable."""

    plan: list[JSON]
    generation: int
    iteration: int
    t_step: int
    spent: int
    t_max: int
    slots: list[int]
    best: list[float]
    n_fail: int
    tr_length: float
    tr_successes: int
    tr_failures: int
    iterations: list[JSON]
    best_of_iteration: int | None
    pinned_bests: list[int]
    finished: bool
    pinned: list[int]
    #: Drawn at the first ask; seeds each generation's plan.
    seed: int
    #: The last fits' hyperparameters (the explore GP's, the stagnation smoother's), from
    #: which the next fits start.
    explore_gp: JSON | None
    smoother_gp: JSON | None

    @classmethod
    def load(cls, state: JSON, t_max: int, initial_step_share: float) -> _State:
        fresh = cls(
            plan=[],
            generation=0,
            iteration=0,
            t_step=max(1, round(initial_step_share * t_max)),
            spent=0,
            t_max=t_max,
            slots=[],
            best=[],
            n_fail=0,
            tr_length=TR_INIT,
            tr_successes=0,
            tr_failures=0,
            iterations=[],
            best_of_iteration=None,
            pinned_bests=[],
            finished=False,
            pinned=[],
            seed=0,
            explore_gp=None,
            smoother_gp=None,
        )
        if state.get("version") != 1:
            return fresh
        state = copy.deepcopy(state)  # the engine never changes the state it was given
        fields = {k: state[k] for k in fresh.__dict__ if k in state and k != "t_max"}
        for k, v in fields.items():
            setattr(fresh, k, v)
        return fresh

    def dump(self) -> JSON:
        out: JSON = {k: v for k, v in self.__dict__.items() if k != "t_max"}
        out["version"] = 1
        return out

    def step_length(self, n_units: int, population_size: int) -> int:
        """The next step for ``n_units`` units: ``t_step``, cut to the budget left
        (``population_size t_max`` member-steps)."""
        left = population_size * self.t_max - self.spent
        return min(self.t_step, left // n_units)
