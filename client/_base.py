"""What the sync and async clients share, without I/O: a call and its decoding, the retry
policy, an objective's result split into values, and the budget of ``optimize``."""

from __future__ import annotations

import math
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from client.errors import TransportError, error_for

T_co = TypeVar("T_co", covariant=True)

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 5
RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass
class Call(Generic[T_co]):
    """One API call: built once, sent (and retried) by a client, decoded into ``T_co``.

    POSTs carry an ``Idempotency-Key`` made when the call is built, so a retry after a lost
    answer returns the stored response instead of acting twice.
    """

    method: str
    path: str
    decode: Callable[[httpx.Response], T_co]
    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: A raw body (instead of ``json``), its Content-Type in ``headers``.
    content: bytes | None = None

    def __post_init__(self) -> None:
        if self.method == "POST":
            self.headers.setdefault("Idempotency-Key", uuid.uuid4().hex)

    def answer(self, outcome: httpx.Response | httpx.TransportError) -> T_co:
        """The result of the last attempt: decoded, or raised as the client's error."""
        if isinstance(outcome, httpx.TransportError):
            raise TransportError(f"{self.method} {self.path}: {outcome!r}") from outcome
        raise_for_problem(outcome)
        return self.decode(outcome)


def body(model: BaseModel) -> Any:
    return model.model_dump(mode="json", exclude_unset=True)


def decoder(model: Any) -> Callable[[httpx.Response], Any]:
    adapter = TypeAdapter(model)
    return lambda response: adapter.validate_json(response.content)


def no_content(response: httpx.Response) -> None:
    return None


def text(response: httpx.Response) -> str:
    return response.text


def raise_for_problem(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        payload = response.json()
    except ValueError:
        payload = {"detail": response.text}
    if not isinstance(payload, dict):
        payload = {"detail": payload}
    raise error_for(response.status_code, payload)


def retry_delay(
    attempt: int, retries: int, outcome: httpx.Response | httpx.TransportError
) -> float | None:
    """Seconds to wait before sending again after attempt ``attempt`` (0-based) of ``retries + 1``
    ended with ``outcome``, or ``None`` to stop there. Connection errors and RETRY_STATUSES are
    retried: after Retry-After when the server sent one, otherwise after exponential backoff with
    full jitter, capped at 10 s."""
    if attempt >= retries:
        return None
    if isinstance(outcome, httpx.TransportError):
        return _backoff(attempt)
    if outcome.status_code not in RETRY_STATUSES:
        return None
    after = outcome.headers.get("Retry-After")
    if after is not None:
        try:
            return min(float(after), 60.0)
        except ValueError:
            pass
    return _backoff(attempt)


def _backoff(attempt: int) -> float:
    return random.uniform(0, min(10.0, 0.1 * 2**attempt))


def split_results(
    result: float | Mapping[str, float] | Sequence[float],
    objectives: Sequence[str],
    constraints: Sequence[str],
) -> tuple[dict[str, float], dict[str, float], str | None]:
    """Turn what an objective function returned into (values, constraints) by name, and a
    reason to tell the trial as failed instead (NaN or infinite numbers), or ``None``.

    A number fits a single-objective study; a sequence gives the objectives in order; a mapping
    names objectives and constraint metrics together.

    Raises:
        ValueError: the result does not fit the study (unknown names, wrong length).
    """
    if isinstance(result, Mapping):
        values = {k: float(v) for k, v in result.items() if k in objectives}
        cons = {k: float(v) for k, v in result.items() if k in constraints}
        extra = set(result) - set(values) - set(cons)
        if extra:
            raise ValueError(f"the objective returned unknown metric(s) {sorted(extra)}")
    elif isinstance(result, Sequence):
        values_list = [float(v) for v in result]
        if len(values_list) != len(objectives):
            raise ValueError(f"expected {len(objectives)} values, got {len(values_list)}")
        values, cons = dict(zip(objectives, values_list, strict=True)), {}
    else:  # a number, numpy scalars included
        if len(objectives) != 1:
            raise ValueError(f"the study has {len(objectives)} objectives; return a dict or list")
        values, cons = {objectives[0]: float(result)}, {}
    bad = sorted(k for k, v in {**values, **cons}.items() if not math.isfinite(v))
    problem = f"the objective returned NaN or infinity for {bad}" if bad else None
    return values, cons, problem


def worker_name(index: int) -> str:
    """A worker id unique across threads, processes and machines (re-delivery is by id)."""
    return f"optimize-{uuid.uuid4().hex[:16]}-{index}"


class Budget:
    """Hands out trial slots to workers and shows progress on stderr: the trials told, the best
    value so far (one objective), the elapsed time and the rate. On a terminal a bar is redrawn
    in place; otherwise (a log file, a pipe) a plain line is printed every 10% of the trials
    and at least every ``LINE_EVERY_S`` seconds, so logs get no carriage-return frames."""

    LINE_EVERY_S = 30.0

    def __init__(
        self,
        total: int,
        progress: bool,
        goal: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``goal`` is the single objective's ``minimize`` or ``maximize`` (``None`` for
        several objectives: no best value is shown)."""
        self.total, self.progress, self.goal, self.clock = total, progress, goal, clock
        self.started = self.finished = self.failed = 0
        self.best: float | None = None
        self._out = sys.stderr
        self._tty = progress and self._out.isatty()
        self._start = self._last_line = clock()
        self._lines_shown = 0  # finished count at the last plain line
        self._lock = threading.Lock()

    def release(self) -> None:
        """Give back a slot that was taken but not used."""
        with self._lock:
            self.started -= 1

    def take(self) -> bool:
        with self._lock:
            if self.started >= self.total:
                return False
            self.started += 1
            return True

    def done(self, ok: bool, value: float | None = None) -> None:
        """Count a finished trial; ``value`` is its objective value when it is completed and
        feasible in a single-objective study."""
        with self._lock:
            self.finished += 1
            self.failed += not ok
            if value is not None and (self.best is None or self._better(value, self.best)):
                self.best = value
            self._show()

    def _better(self, value: float, than: float) -> bool:
        return value > than if self.goal == "maximize" else value < than

    def status(self) -> str:
        """The numbers after the bar: trials, best so far, elapsed time, rate, failures."""
        elapsed = self.clock() - self._start
        parts = [f"{self.finished}/{self.total} trials"]
        if self.goal is not None:
            parts.append(f"best {self.best:.6g}" if self.best is not None else "best -")
        parts.append(f"{_duration(elapsed)} elapsed")
        parts.append(f"{self.finished / elapsed:.2f} trials/s" if elapsed > 0 else "- trials/s")
        if self.failed:
            parts.append(f"{self.failed} failed")
        return "  ".join(parts)

    def _show(self) -> None:
        if not self.progress:
            return
        if self._tty:
            width = 30
            filled = int(width * self.finished / max(self.total, 1))
            bar = "#" * filled + "-" * (width - filled)
            self._out.write(f"\r[{bar}] {self.status()}")
            self._out.flush()
            return
        new_tenth = self._tenth(self.finished) > self._tenth(self._lines_shown)
        if new_tenth or self.clock() - self._last_line >= self.LINE_EVERY_S:
            self._line()

    def _tenth(self, count: int) -> int:
        return count * 10 // max(self.total, 1)

    def _line(self) -> None:
        self._out.write(self.status() + "\n")
        self._out.flush()
        self._lines_shown, self._last_line = self.finished, self.clock()

    def finish(self) -> None:
        """End the progress output: the bar's line on a terminal, else the last count if the
        run stopped between two plain lines."""
        if not self.progress:
            return
        if self._tty:
            self._out.write("\n")
        elif self._lines_shown != self.finished:
            self._line()


def _duration(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
