"""The ``auto`` engine: picks an engine from the study's shape and switches as the study grows.

At every ask it looks at the problem (objectives ``m``, outcome constraints ``k``, dimension
``d``, parameter kinds), the completed trials so far ``n`` and its options, takes the first
rule of the table below that matches, and delegates the ask to that engine's ``suggest``.

Rules, first match wins (``switch_at`` defaults to 300, ``expected_trials`` to unknown):

===  ============================================  ============  ================================
#    when                                          engine        why (docs/engines, README table)
===  ============================================  ============  ================================
1    no free parameter (``d = 0``)                 random        nothing to model
2    ``expected_trials <= 2 d + 1``                random        every model-based engine would
                                                                 spend the whole budget on its
                                                                 Sobol initial design (gp 2d+1,
                                                                 pom 2(d+1), turbo-enn 2d, lcbo
                                                                 >= 10): same points, no fits
3    ``m >= 2`` and a categorical parameter        gp            qLogNEHVI on a GP with a
                                                                 Hamming kernel; pom and mwgd
                                                                 treat choices as ordinal
4    ``m >= 2``                                    pom           2 to 4 objectives, the Pareto
                                                                 set spread; bench.pom: HV within
                                                                 0.2-3 % of qLogNEHVI at 0.17-0.36x
                                                                 its time. No switch: every
                                                                 several-objective engine is an
                                                                 exact GP
5    ``k >= 1``, no categorical, and ``d >= 10``   lcbo          local constrained BO, built for
     or ``n >= switch_at``                                       10-100 parameters and hundreds to
                                                                 thousands of trials; its GPs see
                                                                 the max(100, 2d) nearest trials,
                                                                 so an ask costs the same at any
                                                                 n; bench.lcbo: beats SCBO on 4 of
                                                                 6 problems
6    ``n < switch_at``                             gp            exact GP BO is the most sample-
                                                                 efficient here while small; it
                                                                 models each constraint and has
                                                                 a categorical kernel
7    otherwise                                     turbo-enn     ENN is O(n): 0.001 s per ask at
                                                                 n = 2,000, d = 20 where a GP
                                                                 takes 24 s (bench.turbo_enn); the
                                                                 exact GP's cost grows as n^3.
                                                                 ``noisy`` is passed on
===  ============================================  ============  ================================

A constrained study with a categorical parameter never takes rule 5 (LCBO's gradient steps
mean nothing on unordered choices): it goes from ``gp`` to ``turbo-enn``, whose outcome
constraints pick its incumbent. ``mwgd`` (``pom``'s alternative, when picked by hand) and the
schedulers ``pbt`` and ``ipbt`` are never chosen.

``n`` only grows, so a study moves at most once: from ``gp`` to ``turbo-enn`` (rule 6 to 7) or
from ``gp`` to ``lcbo`` (rule 6 to 5) when ``n`` reaches ``switch_at``. The delegate that takes
over reads the whole history (the history argument); its own state starts empty, and both
``turbo-enn`` and ``lcbo`` then count every earlier trial toward their initial design (2 d and
min(max(10, d), 100) points, fewer than the default ``switch_at`` up to d = 150) and centre
their first region on the best trial so far, so no Sobol points are spent again.

State: ``{"version", "engine", "rule", "reason", "switches": [{"at", "from", "to"}],
"engines": {name: that engine's own state}}``: each delegate's state is kept under its name, so
a switch loses nothing. An unusable state is rebuilt empty (a lost state costs time, never a
study). Each trial's details are the delegate's, plus ``"auto": {"engine", "rule", "reason"}``.

Options: ``expected_trials`` (the budget, ``None`` when unknown; only rule 2 reads it),
``noisy`` (passed to ``turbo-enn``; ``gp``, ``pom`` and ``lcbo`` infer the noise) and
``switch_at`` (completed trials at which a one-objective study leaves ``gp``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from engines.base import JSON, History, ModelBasedEngine, Problem, Proposal
from engines.limits import WorkLimits
from engines.options import check_int_options, int_option
from engines.registry import engine_class, make_engine

_STATE_VERSION = 1


@dataclass(frozen=True)
class Choice:
    """The engine a rule picked: its registry ``name``, the ``rule`` id and the ``reason``."""

    name: str
    rule: str
    reason: str


@dataclass
class AutoEngine(ModelBasedEngine):
    """Picks and delegates to an engine; see the module docstring for the rules.

    Options:
        expected_trials: the study's budget in trials, ``None`` when unknown.
        noisy: whether evaluations are noisy (``turbo-enn``'s ``noisy``).
        switch_at: completed trials from which a one-objective study leaves ``gp``.
    """

    name: ClassVar[str] = "auto"

    expected_trials: int | None = int_option(None, 1, 10_000_000)
    noisy: bool = False
    switch_at: int = int_option(300, 1, 500)

    def __post_init__(self) -> None:
        check_int_options(self)

    def limits_for(self, problem: Problem) -> WorkLimits:
        """The tightest caps of the engines this study may delegate to: the one it starts
        with and the one it switches to at ``switch_at`` (``engines.limits``)."""
        names = [self.choose(problem, n).name for n in (0, self.switch_at)]
        caps = [engine_class(name).limits for name in names]
        return WorkLimits(
            max_dimension=min(c.max_dimension for c in caps),
            max_count=min(c.max_count for c in caps),
            max_points=min(c.max_points for c in caps),
            observations=self.switch_at if names[0] == "gp" else None,
        )

    def choose(self, problem: Problem, n: int) -> Choice:
        """The engine for ``problem`` with ``n`` completed trials: the first matching rule."""
        d, m, k = problem.d, problem.n_objectives, problem.n_constraints
        categorical = any(dim.kind == "categorical" for dim in problem.space.dimensions)
        if d == 0:
            return Choice("random", "no-parameters", "no free parameter: nothing to model")
        if self.expected_trials is not None and self.expected_trials <= 2 * d + 1:
            return Choice(
                "random",
                "tiny-budget",
                f"expected_trials {self.expected_trials} <= 2d+1 = {2 * d + 1}: a model-based "
                "engine would spend the whole budget on its Sobol initial design",
            )
        if m >= 2 and categorical:
            return Choice(
                "gp",
                "objectives-categorical",
                f"{m} objectives and a categorical parameter: qLogNEHVI with a categorical kernel",
            )
        if m >= 2:
            return Choice("pom", "objectives", f"{m} objectives: a spread Pareto set (POM)")
        small = n < self.switch_at
        if k and not categorical and (d >= 10 or not small):
            why = f"d = {d} >= 10" if d >= 10 else f"{n} trials >= switch_at {self.switch_at}"
            return Choice(
                "lcbo",
                "constraints-large",
                f"{k} outcome constraint(s) and {why}: local "
                "constrained BO, cost flat in the number of trials",
            )
        if small:
            what = f"{k} outcome constraint(s), " if k else ""
            return Choice(
                "gp", "small", f"{what}{n} trials < switch_at {self.switch_at}: exact GP BO"
            )
        return Choice(
            "turbo-enn",
            "large",
            f"{n} trials >= switch_at {self.switch_at}: TuRBO-ENN, O(n) per ask",
        )

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        return self._delegate(problem, history, count, state, rng, ahead=False)

    def suggest_ahead(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        """Points for the suggestion pool: the chosen engine's ``suggest_ahead``."""
        return self._delegate(problem, history, count, state, rng, ahead=True)

    def _delegate(
        self,
        problem: Problem,
        history: History,
        count: int,
        state: JSON,
        rng: np.random.Generator,
        ahead: bool,
    ) -> Proposal:
        st = _parse(state)
        choice = self.choose(problem, history.n)
        switches = list(st["switches"])
        if st["engine"] is not None and st["engine"] != choice.name:
            switches.append({"at": history.n, "from": st["engine"], "to": choice.name})
        engines: dict[str, Any] = dict(st["engines"])
        delegate = make_engine(choice.name, self._options(choice.name))
        ask = delegate.suggest
        if ahead and isinstance(delegate, ModelBasedEngine):  # ``random`` has no model
            ask = delegate.suggest_ahead
        proposal = ask(problem, history, count, engines.get(choice.name, {}), rng)
        engines[choice.name] = proposal.state
        mark = {"engine": choice.name, "rule": choice.rule, "reason": choice.reason}
        details = list(proposal.details) or [{} for _ in range(len(proposal.X))]
        new_state = {
            "version": _STATE_VERSION,
            "engine": choice.name,
            "rule": choice.rule,
            "reason": choice.reason,
            "switches": switches,
            "engines": engines,
        }
        return Proposal(
            X=proposal.X,
            state=new_state,
            details=[{**detail, "auto": dict(mark)} for detail in details],
        )

    def _options(self, name: str) -> dict[str, Any]:
        """The delegate's options: its defaults, with ``noisy`` for ``turbo-enn``."""
        return {"noisy": self.noisy} if name == "turbo-enn" else {}


def _parse(state: JSON) -> dict[str, Any]:
    """The auto state's fields, or an empty state when ``state`` is not a valid one."""
    empty: dict[str, Any] = {"engine": None, "switches": [], "engines": {}}
    if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
        return empty
    engine, switches, engines = state.get("engine"), state.get("switches"), state.get("engines")
    if not (isinstance(engine, str) and isinstance(switches, list) and isinstance(engines, dict)):
        return empty
    if not all(isinstance(s, dict) for s in engines.values()):
        return empty
    return {"engine": engine, "switches": switches, "engines": engines}
