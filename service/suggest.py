"""The engine call of an ask: in the server's engine processes within the ask's time budget,
or in the ask's thread; the quasi-random fallback of an abandoned call (see ``service.ask``)."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

import numpy as np
from sqlalchemy.engine import Row

from engines.base import History, Proposal
from engines.errors import EngineError
from engines.quasirandom import SobolStream, sobol_points
from service.engine_pool import EngineAbandoned, EngineCall, EnginePool, run_call
from service.errors import engine_error, unavailable
from service.observability import ENGINE_FALLBACKS, ENGINE_SECONDS
from service.problem import ParsedStudy


def suggest(
    parsed: ParsedStudy,
    study: Row,
    history: History | None,
    need: int,
    pool: EnginePool | None = None,
    budget: float = math.inf,
    ahead: bool = False,
) -> Proposal:
    """The engine's proposal for ``need`` points: in ``pool`` within ``budget`` seconds, or,
    without a pool, in this thread; ``ahead``: for the suggestion pool (``suggest_ahead``).

    A call the engine says is light (``Engine.light_call``; ``ipbt`` handing out planned units
    or saying to wait) runs in this thread too: sending it to an engine process
    cost more than the call (pickling every unit of the study, the round trip: a unit's
    tell-and-ask took 10-13 ms through an engine process, 7.7-8.5 ms here, on a 384-unit
    study)."""
    assert history is not None
    call = EngineCall(
        parsed.engine,
        parsed.problem,
        history,
        need,
        study.engine_state,
        (study.seed, study.ask_count),
        ahead,
    )
    light = parsed.engine.light_call(history, study.engine_state)
    start = time.perf_counter()
    try:
        proposal, seconds = run_call(call) if pool is None or light else pool.call(call, budget)
    except EngineError as exc:
        raise engine_error(exc) from exc
    except EngineAbandoned as exc:
        return fallback(parsed, call, exc.reason, budget, time.perf_counter() - start)
    ENGINE_SECONDS.labels(parsed.engine.name).observe(seconds)
    if parsed.engine.schedules_units and len(proposal.units) != len(proposal.X):
        raise RuntimeError(f"engine {parsed.engine.name} returned points without unit documents")
    rows = len(proposal.X) if parsed.engine.schedules_units and len(proposal.X) <= need else need
    if proposal.X.shape != (rows, parsed.problem.d):
        raise RuntimeError(
            f"engine {parsed.engine.name} returned {proposal.X.shape}, "
            f"expected {(need, parsed.problem.d)}"
        )
    # The engine's wall time of this ask, on every trial it proposed ("time per ask").
    details = [{**detail, "ask_seconds": seconds} for detail in details_of(proposal, rows)]
    return replace(proposal, details=details)


def fallback(
    parsed: ParsedStudy, call: EngineCall, reason: str, budget: float, seconds: float
) -> Proposal:
    """The answer of an abandoned engine call: Sobol points that avoid the pending and failed
    points, as the random engine's do, and the engine state unchanged.

    Raises: ApiError 503 for a scheduler, whose trials are units of its population."""
    name = parsed.engine.name
    ENGINE_SECONDS.labels(name).observe(seconds)
    ENGINE_FALLBACKS.labels(name, reason).inc()
    what = (
        f"did not answer within the ask time budget of {budget:g} s"
        if reason == "time_budget"
        else "lost its engine process"
    )
    if parsed.engine.schedules_units:
        raise unavailable(f"the {name} scheduler {what}; retry", retry_after=max(1.0, budget))
    history = call.history
    stream = SobolStream(
        parsed.problem.d, int(np.random.default_rng(list(call.seed)).integers(2**31))
    )
    avoid = np.vstack([history.X_pending, history.X_failed])
    X = sobol_points(parsed.problem, avoid, call.count, stream)
    detail = {
        "source": "sobol",
        "fallback": reason,
        "time_budget_seconds": budget,
        "ask_seconds": round(seconds, 6),
    }
    return Proposal(X=X, state=call.state, details=[dict(detail) for _ in range(call.count)])


def details_of(proposal: Proposal, need: int) -> list[dict[str, Any]]:
    details = list(proposal.details[:need])
    return details + [{} for _ in range(need - len(details))]
