"""How much work one ask may ask of an engine: its caps, and their checks.

Every engine states ``limits: ClassVar[WorkLimits]``: the largest dimension it takes (checked
when a study is created) and, per ask, the largest ``count`` and ``count x d`` (checked before
the engine runs). With its options inside their ranges (``engines.options``) and a history of
up to ``observations`` completed trials, one ask at the caps stays within the stated bound:
**about 30 s and 1 GB on one core** (the server runs each ask's torch on one thread), except
``gp`` with several objectives and a constraint, measured over it (the table; the README says
where its time goes).

Worst cases measured with ``python -m bench.engine_caps`` (CPU seconds of one ask, peak RSS with
the imports; d, count, n completed trials, m objectives, k constraints; the README has the
options of each row; the rows measured on 2026-12-06 on a slower machine than the others:
``gp``'s row, over the bound, and ``pom``'s):

==========  ====  =====  =====  ===  ===  =====  =======
engine      d     count  n      m    k    CPU s  RSS MB
==========  ====  =====  =====  ===  ===  =====  =======
random      1000  1000   0      1    0    0.06   325
gp          25    10     300    2    1    47.4   1075
turbo-enn   1000  100    5000   1    0    2.6    882
pom         25    20     300    3    0    9.0    646
mwgd        20    32     300    2    1    16.5   522
lcbo        200   10     2000   1    2    10.6   848
==========  ====  =====  =====  ===  ===  =====  =======

The model-based engines' time also grows with the completed trials ``n``: ``gp``, ``pom`` and
``mwgd`` fit exact GPs, ``O(n^3)``; the bound holds up to ``observations`` (``auto`` leaves
``gp`` at ``switch_at``); ``turbo-enn`` is ``O(n)`` and ``lcbo`` fits on the nearest points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engines.errors import EngineWorkTooLarge

if TYPE_CHECKING:
    from engines.base import Problem


@dataclass(frozen=True)
class WorkLimits:
    """Caps on one ask of an engine.

    Attributes:
        max_dimension: the most free parameters (``Problem.d``) a study of the engine may have.
        max_count: the most points one ask may ask for.
        max_points: the most ``count x d`` of one ask (coordinates the engine optimizes).
        observations: the completed trials up to which the bound was measured (``None``: the
            engine's cost does not grow with them past a constant).
    """

    max_dimension: int
    max_count: int
    max_points: int
    observations: int | None = None


def check_problem(engine: Any, problem: Problem) -> None:
    """Check a study's problem against the engine's caps, when the study is created.

    Raises:
        EngineWorkTooLarge: the dimension is above the engine's ``max_dimension``.
    """
    limits = engine_limits(engine, problem)
    if problem.d > limits.max_dimension:
        raise EngineWorkTooLarge(
            f"engine {engine.name!r} takes at most {limits.max_dimension} free parameters, the "
            f"study has {problem.d}: use fewer parameters or another engine (random and "
            "turbo-enn take up to 1000)"
        )


def check_ask(engine: Any, problem: Problem, count: int) -> None:
    """Check one ask against the engine's caps, before the engine runs.

    Raises:
        EngineWorkTooLarge: the dimension, ``count`` or ``count x d`` is above the caps.
    """
    check_problem(engine, problem)
    limits = engine_limits(engine, problem)
    cap = max_count(limits, problem.d)
    if count > cap:
        raise EngineWorkTooLarge(
            f"engine {engine.name!r} hands out at most {cap} trials per ask with {problem.d} "
            f"free parameters (count <= {limits.max_count} and count x d <= "
            f"{limits.max_points}), asked for {count}: lower count"
        )


def max_count(limits: WorkLimits, d: int) -> int:
    """The largest ``count`` one ask may have on a problem of dimension ``d``."""
    return max(1, min(limits.max_count, limits.max_points // max(d, 1)))


def engine_limits(engine: Any, problem: Problem) -> WorkLimits:
    """The caps of ``engine`` on ``problem``: its ``limits``, or what its ``limits_for`` says
    (``auto``, whose delegate depends on the problem)."""
    limits_for = getattr(engine, "limits_for", None)
    return limits_for(problem) if limits_for is not None else engine.limits
