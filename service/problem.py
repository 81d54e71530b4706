"""From a study's stored config to what engines see: the search space and the Problem.

A study's config never changes after creation, so the parsed form is cached per process,
keyed by database and study id; nothing depends on the cache for correctness.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from client.models import (
    CategoricalParameter,
    FixedParameter,
    FloatParameter,
    IntParameter,
    Parameter,
    StudyConfig,
)
from engines.base import Engine, Problem
from engines.errors import EngineUnsupported
from engines.registry import make_engine
from engines.space import CategoricalParam, FixedParam, FloatParam, IntParam, Param, SearchSpace


@dataclass(frozen=True)
class ParsedStudy:
    """A study's parsed config: the wire model, the engine-side problem and the engine."""

    config: StudyConfig
    problem: Problem
    engine: Engine
    #: ``(m,)`` +1 for objectives to minimize, -1 to maximize: ``Y = values * signs``.
    signs: np.ndarray
    objective_names: tuple[str, ...]
    constraint_names: tuple[str, ...]

    @property
    def space(self) -> SearchSpace:
        return self.problem.space

    def constraint_slack(self, constraints: dict[str, float]) -> list[float]:
        """Constraint values as ``C`` (feasible when <= 0), in declaration order."""
        out = []
        for c in self.config.constraints:
            v = constraints[c.name]
            out.append(v - c.threshold if c.op == "<=" else c.threshold - v)
        return out


def to_param(p: Parameter) -> Param:
    if isinstance(p, FloatParameter):
        return FloatParam(p.name, p.low, p.high, p.log, p.step)
    if isinstance(p, IntParameter):
        return IntParam(p.name, p.low, p.high, p.log)
    if isinstance(p, CategoricalParameter):
        return CategoricalParam(p.name, tuple(p.choices))
    assert isinstance(p, FixedParameter)
    return FixedParam(p.name, p.value)


def parse_study(config: StudyConfig) -> ParsedStudy:
    """Parse and validate a study config.

    Raises:
        SpaceError: the search space is invalid.
        EngineOptionsError: the engine name or its options are invalid.
        EngineUnsupported: the engine cannot optimize this many objectives.
        ValueError: objectives or constraints are inconsistent (duplicate names).
    """
    space = SearchSpace([to_param(p) for p in config.parameters])
    names = [o.name for o in config.objectives] + [c.name for c in config.constraints]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"objective and constraint names must be unique; repeated: {duplicated}")
    signs = np.array([1.0 if o.goal == "minimize" else -1.0 for o in config.objectives])
    references = [o.reference for o in config.objectives]
    reference_point = (
        np.array(references, dtype=np.float64) * signs
        if all(r is not None for r in references)
        else None
    )
    problem = Problem(
        space=space,
        n_objectives=len(config.objectives),
        n_constraints=len(config.constraints),
        reference_point=reference_point,
    )
    engine = make_engine(config.engine.name, config.engine.options)
    if engine.max_objectives is not None and problem.n_objectives > engine.max_objectives:
        raise EngineUnsupported(
            f"engine {engine.name!r} optimizes at most {engine.max_objectives} objective(s), "
            f"the study has {problem.n_objectives}"
        )
    return ParsedStudy(
        config=config,
        problem=problem,
        engine=engine,
        signs=signs,
        objective_names=tuple(o.name for o in config.objectives),
        constraint_names=tuple(c.name for c in config.constraints),
    )


#: Keys of a study's config column that are settings, which ``PATCH`` changes, rather than
#: part of its ``StudyConfig``.
SETTINGS = ("max_trials", "ask_time_budget", "max_staleness")


def definition(config: dict[str, Any]) -> dict[str, Any]:
    """A study's config column without its settings: its ``StudyConfig`` as JSON."""
    return {k: v for k, v in config.items() if k not in SETTINGS}


class ParsedStudyCache:
    """Parsed study configs by study id, for one database."""

    def __init__(self) -> None:
        self._by_id: dict[int, ParsedStudy] = {}
        self._lock = threading.Lock()

    def peek(self, study_id: int) -> ParsedStudy | None:
        return self._by_id.get(study_id)

    def get(self, study_id: int, load_config: Callable[[], dict[str, Any]]) -> ParsedStudy:
        parsed = self._by_id.get(study_id)
        if parsed is None:
            parsed = parse_study(StudyConfig.model_validate(definition(load_config())))
            with self._lock:
                self._by_id[study_id] = parsed
        return parsed
