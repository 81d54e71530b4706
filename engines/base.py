"""The engine contract: what every engine receives and must return.

An engine is a pure function of (problem, history, state, rng)::

    proposal = engine.suggest(problem, history, count, state, rng)

Rules every engine follows (``tests/engines/test_contract.py`` checks them for every name in
``engines.registry``):

- It returns exactly ``count`` points, ``proposal.X: (count, d)`` float64 in ``[0, 1]``.
  Points are decoded by ``problem.space``; an engine that wants distinct trials compares points
  after ``problem.space.snap``.
- ``history.X_pending`` holds points asked and not yet told. An engine treats them as already
  chosen (fantasies, ``X_pending`` in BoTorch, or at least no exact duplicates).
  ``history.X_failed`` holds points told failed or infeasible; an engine does not propose them
  again.
- ``state`` is the JSON document the engine returned last time (``{}`` on the first ask). The
  engine never changes it in place; it returns a new JSON-serializable dict in
  ``proposal.state``, which may share unchanged nested values with ``state`` (copying a large
  one costs time), so neither the engine nor its caller changes either in place. If the state
  cannot be used (an older layout), the engine rebuilds what it needs from the history: lost
  state costs time, never a study.
- No I/O, no wall clock, no global random state: all randomness comes from ``rng``, so the same
  inputs and seed give the same proposal in any process.
- Options are fixed when the engine is built (``engines.registry.make_engine``), and an unknown
  or ill-typed option raises ``EngineOptionsError`` there, so bad studies fail at creation.

Schedulers (``schedules_units = True``: ``pbt``, ``ipbt``) hand out units of training rather than
points: every trial is one member of a population training one segment. For them:

- ``history.units`` holds every unit handed out so far (pending, completed or failed) with its
  unit document, score and the checkpoint its worker saved; the engine rebuilds its population
  from it on every ask.
- A proposal may hold fewer than ``count`` points (none while a synchronous generation is still
  training, with ``retry_after``; none and no ``retry_after`` when the schedule is finished).
  ``proposal.units`` gives, per point, the unit document stored on the trial (where to start,
  the step range; see ``client.models.Unit``).
- The state lists under ``"pinned"`` the trial numbers whose checkpoints a future unit may still
  start from, so that the service can say which checkpoints may be deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import numpy as np

from engines.limits import WorkLimits
from engines.space import SearchSpace

JSON = dict[str, Any]


@dataclass(frozen=True)
class Problem:
    """What is optimized.

    Attributes:
        space: the search space; ``space.d`` is the dimension of the unit cube.
        n_objectives: ``m``; every objective is turned into minimization in ``History.Y``.
        n_constraints: ``k``; a trial is feasible when each of its ``C`` values is <= 0.
        reference_point: ``(m,)`` hypervolume reference in the minimization orientation
            (a point is counted when it is below it in every objective), or ``None``.
    """

    space: SearchSpace
    n_objectives: int = 1
    n_constraints: int = 0
    reference_point: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.n_objectives < 1:
            raise ValueError("a problem needs at least one objective")
        if self.reference_point is not None and self.reference_point.shape != (self.n_objectives,):
            raise ValueError(
                f"reference_point has shape {self.reference_point.shape}, "
                f"expected ({self.n_objectives},)"
            )

    @property
    def d(self) -> int:
        return self.space.d


@dataclass(frozen=True)
class Unit:
    """One unit of a scheduler's study: a trial that trains one member for one segment.

    Attributes:
        number: the trial number.
        x: ``(d,)`` the hyperparameters in the unit cube.
        spec: the unit document the engine gave when it proposed the unit (``Proposal.units``).
        state: ``pending`` (asked, not told), ``completed`` or ``failed``.
        y: the first objective, as minimization, when completed.
        y_before: the first objective reported at the unit's ``from_step`` (the score of the
            starting weights before training, where the unit asked for it), as minimization.
        checkpoint: the reference of the checkpoint the worker saved at the end of the unit.
    """

    number: int
    x: np.ndarray
    spec: JSON
    state: Literal["pending", "completed", "failed"]
    y: float | None = None
    y_before: float | None = None
    checkpoint: str | None = None


def best_unit(units: tuple[Unit, ...]) -> Unit | None:
    """The completed unit with the best (lowest) ``y``; the earliest among equals."""
    done = [u for u in units if u.state == "completed" and u.y is not None]
    return min(done, key=lambda u: (u.y, u.number)) if done else None


@dataclass(frozen=True)
class History:
    """The observations of a study, as arrays.

    Rows are in the order the trials completed, oldest first; engines such as turbo-enn use the
    row index as a position in time.

    Attributes:
        X: ``(n, d)`` float64 in [0, 1], the completed trials.
        Y: ``(n, m)`` float64, their objective values, every objective as minimization.
        C: ``(n, k)`` float64, constraint values, feasible when ``<= 0``.
        X_pending: ``(p, d)`` float64 in [0, 1], asked and not yet told.
        X_failed: ``(r, d)`` float64 in [0, 1], told failed or infeasible: no values, but an
            engine should not propose them again (the service fills it for engines that read
            observations; ``None`` means none).
        units: for schedulers only, every unit handed out so far, in trial-number order.
    """

    X: np.ndarray
    Y: np.ndarray
    C: np.ndarray
    X_pending: np.ndarray
    X_failed: np.ndarray = None  # type: ignore[assignment]
    units: tuple[Unit, ...] = ()

    def __post_init__(self) -> None:
        n, d = self.X.shape
        if self.Y.ndim != 2 or self.Y.shape[0] != n:
            raise ValueError(f"Y has shape {self.Y.shape}, expected ({n}, m)")
        if self.C.ndim != 2 or self.C.shape[0] != n:
            raise ValueError(f"C has shape {self.C.shape}, expected ({n}, k)")
        if self.X_pending.ndim != 2 or self.X_pending.shape[1] != d:
            raise ValueError(f"X_pending has shape {self.X_pending.shape}, expected (p, {d})")
        if self.X_failed is None:
            object.__setattr__(self, "X_failed", np.zeros((0, d)))
        elif self.X_failed.ndim != 2 or self.X_failed.shape[1] != d:
            raise ValueError(f"X_failed has shape {self.X_failed.shape}, expected (r, {d})")

    @classmethod
    def empty(cls, problem: Problem) -> History:
        d, m, k = problem.d, problem.n_objectives, problem.n_constraints
        return cls(np.zeros((0, d)), np.zeros((0, m)), np.zeros((0, k)), np.zeros((0, d)))

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    def feasible(self) -> np.ndarray:
        """``(n,)`` bool: the trials whose constraint values are all <= 0."""
        return np.all(self.C <= 0.0, axis=1)


@dataclass(frozen=True)
class Proposal:
    """What an engine returns.

    Attributes:
        X: ``(count, d)`` float64 in [0, 1], the suggested points.
        state: the engine's new JSON state.
        details: one JSON dict per point (for example the source of the point), stored on the
            trial for the user to see; empty dicts when there is nothing to say.
        units: schedulers only: one unit document per point.
        retry_after: schedulers only: when fewer than ``count`` points came back because units
            are still training, the seconds after which asking again may give more.
    """

    X: np.ndarray
    state: JSON
    details: list[JSON] = field(default_factory=list)
    units: list[JSON] = field(default_factory=list)
    retry_after: float | None = None


class Engine(Protocol):
    """An engine; see the module docstring for the contract."""

    name: ClassVar[str]
    #: Whether ``suggest`` reads completed observations. Engines that do not (``random``) let
    #: the service skip loading them; ``X_pending`` is always given.
    uses_observations: ClassVar[bool]
    #: The most objectives the engine handles (``None``: any number). A study with more is
    #: refused at creation; ``suggest`` raises ``EngineUnsupported`` for it.
    max_objectives: ClassVar[int | None]
    #: Whether the engine is a scheduler of training units (see the module docstring).
    schedules_units: ClassVar[bool]
    #: The caps on one ask (``engines.limits``): checked at creation and before every ask.
    limits: ClassVar[WorkLimits]

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal: ...

    def light_call(self, history: History, state: JSON) -> bool:
        """Whether ``suggest`` on this history and state is bookkeeping only (a Sobol draw,
        handing out a scheduler's planned units, saying to wait): milliseconds and no model,
        so that the service may run it in the ask's thread instead of sending the history to
        an engine process. A pure prediction, never wrong in the other direction: False
        unless known light."""
        ...


class ModelBasedEngine:
    """The class attributes an engine that models the observations shares (``gp``, ``pom``,
    ``mwgd``, ``lcbo``, ``turbo-enn``); each sets its ``name``, and ``max_objectives`` when it
    handles fewer than any number."""

    uses_observations: ClassVar[bool] = True
    max_objectives: ClassVar[int | None] = None
    schedules_units: ClassVar[bool] = False

    def suggest_ahead(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        """Points for the service's suggestion pool: computed now, served later, one per ask,
        while more trials finish. By default the batch ``suggest`` gives; an engine may compute
        them more cheaply per point (``gp``)."""
        suggest = self.suggest  # type: ignore[attr-defined]  # each engine defines it
        proposal: Proposal = suggest(problem, history, count, state, rng)
        return proposal

    def light_call(self, history: History, state: JSON) -> bool:
        """See ``Engine.light_call``: not known light by default."""
        return False


class UnitScheduler:
    """The class attributes the schedulers of training units share (``pbt``, ``ipbt``); each
    sets its ``name``."""

    uses_observations: ClassVar[bool] = True
    max_objectives: ClassVar[int | None] = 1
    schedules_units: ClassVar[bool] = True

    def light_call(self, history: History, state: JSON) -> bool:
        """See ``Engine.light_call``: not known light by default."""
        return False
