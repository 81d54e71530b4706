"""Requests per second per API key (per client address when auth is off): a token bucket per
caller, in this process's memory. Each server process (each uvicorn worker, each replica)
counts on its own, so the limit across a deployment is the limit times the processes."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class RateLimiter:
    """Token buckets of ``burst`` tokens refilled at ``rate`` per second, one per caller."""

    #: Buckets kept; past it, the full ones (callers idle long enough) are forgotten.
    MAX_BUCKETS = 10_000

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate, self.burst, self.clock = rate, max(1, burst), clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, caller: str) -> float | None:
        """Take a token of ``caller``'s bucket: None when there was one, else the seconds until
        there is."""
        now = self.clock()
        with self._lock:
            tokens, then = self._buckets.get(caller, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            if tokens >= 1.0:
                if caller not in self._buckets and len(self._buckets) >= self.MAX_BUCKETS:
                    self._forget_full(now)
                self._buckets[caller] = (tokens - 1.0, now)
                return None
            self._buckets[caller] = (tokens, now)
            return (1.0 - tokens) / self.rate

    def _forget_full(self, now: float) -> None:
        full = [
            caller
            for caller, (tokens, then) in self._buckets.items()
            if tokens + (now - then) * self.rate >= self.burst
        ]
        for caller in full:
            del self._buckets[caller]
        if len(self._buckets) >= self.MAX_BUCKETS:
            # Every bucket is in use: forgetting one lets its caller start again full, which
            # is better than an unbounded table.
            self._buckets.clear()


def retry_after(seconds: float) -> str:
    """The Retry-After value (whole seconds, at least 1) of a wait of ``seconds``."""
    return str(max(1, math.ceil(seconds)))
