"""One benchmark client's pairs for ``bench.service_throughput``: tell-and-ask, or ask then
tell."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def objective(params: dict[str, Any]) -> float:
    return float(sum((float(v) - 0.5) ** 2 for v in params.values()))


def work(
    study: Any,
    take: Callable[[], bool],
    tell_ask: bool,
    ask_lat: list[float],
    tell_lat: list[float],
    stop: Callable[[], bool],
) -> None:
    """One client's pairs, each slot from ``take``: a plain ask when no trial came with the last
    tell, then the tell (asking for the next trial when ``tell_ask`` and a slot is left).
    ``ask_lat`` gets the plain asks' latencies, ``tell_lat`` the tells' (tell-and-ask's)."""
    pending = None
    while not stop() and (pending is not None or take()):
        if pending is None:
            t0 = time.perf_counter()
            (pending,) = study.ask(1)
            ask_lat.append(time.perf_counter() - t0)
        value = objective(pending.params)
        t1 = time.perf_counter()
        if tell_ask and take():
            told = study.tell_and_ask(pending.number, value)
            if told.next is None or len(told.next.trials) != 1:
                raise RuntimeError(f"tell-and-ask handed out no trial: {told.next}")
            pending = told.next.trials[0]
        else:
            study.tell(pending.number, value)
            pending = None
        tell_lat.append(time.perf_counter() - t1)
