"""What every benchmark script shares: progress logging, seeding, methods, the grid of runs
and the report.

A script is its problems, its peers (adapters that make SCBO, TPE, qLogNEHVI, ... methods) and
one ``Bench``: ``Bench.header`` prints the line that opens the output, ``Grid`` runs the
(problem, method, seed) jobs on a pool of worker processes under a deadline, and
``Bench.report`` prints the wall time and the ONE final JSON line. Progress goes to stderr; the
tables and the JSON line to stdout.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from types import TracebackType
from typing import Any

import numpy as np

from bench.version import code_version
from engines.base import History, Problem, Proposal
from engines.registry import make_engine
from engines.space import FloatParam, SearchSpace

#: Worker processes of a grid: the benchmark machine has 2 cores.
WORKERS = 2


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def seed_int(*parts: int) -> int:
    """One integer seed drawn from ``parts`` (problem index, seed, role, ...)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def round4(v: Any) -> Any:
    """A JSON figure: rounded to 4 places; ``None`` for a missing or non-finite one."""
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else round(v, 4)


def fmt(v: float | None, digits: int = 4) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


def one_torch_thread() -> None:
    """A worker's set-up: one torch thread each, so two workers share the two cores."""
    import torch

    torch.set_num_threads(1)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so a killed run still reports what it finished."""
    signal.signal(signal.SIGTERM, _interrupt)


# --- problems -------------------------------------------------------------------------------


def unit_problem(d: int, k: int = 0) -> Problem:
    """The engines' view of a problem: ``d`` floats on [0, 1], ``k`` constraints."""
    return Problem(SearchSpace([FloatParam(f"x{i}", 0.0, 1.0) for i in range(d)]), 1, k)


def history_of(X: np.ndarray, y: np.ndarray) -> History:
    """The history of one objective's values ``y: (n,)`` at ``X: (n, d)``, nothing pending."""
    n, d = X.shape
    return History(X, y.reshape(n, 1), np.zeros((n, 0)), np.zeros((0, d)))


# --- methods --------------------------------------------------------------------------------


class Method(ABC):
    """One method in one (problem, seed) run: it is shown the shared initial design
    (``start``), proposes points in the unit cube given everything evaluated so far
    (``propose``) and is told their values (``tell``)."""

    def start(self, U0: np.ndarray, Y0: np.ndarray, C0: np.ndarray) -> None:  # noqa: B027 (optional hook)
        """The initial design and its values; most methods see it in the history instead."""

    @abstractmethod
    def propose(self, history: History, count: int) -> np.ndarray:
        """``count`` points in the unit cube, ``(count, d)``."""

    def tell(self, U: np.ndarray, Y: np.ndarray, C: np.ndarray) -> None:  # noqa: B027 (optional hook)
        """The values of the last proposal; the engines read them from the history instead."""


class EngineMethod(Method):
    """An asktell engine (``engines.registry.make_engine``) through the engine contract only:
    ``suggest(problem, history, count, state, rng)`` with the state it returned last time.

    ``batch`` fixes the count asked (the caller drops what it does not need); ``note_keys``
    are the proposal details counted by reason in ``notes`` (e.g. ``fallback``)."""

    def __init__(
        self,
        engine: str,
        options: dict[str, Any],
        problem: Problem,
        rng: np.random.Generator | None = None,
        *,
        batch: int | None = None,
        note_keys: tuple[str, ...] = ("fallback",),
    ) -> None:
        self.name = engine
        self.engine = make_engine(engine, options)
        self.problem = problem
        self.rng = rng
        self.batch = batch
        self.note_keys = note_keys
        self.state: dict[str, Any] = {}
        self.notes: dict[str, int] = {}

    def suggest(
        self, history: History, count: int, rng: np.random.Generator | None = None
    ) -> Proposal:
        """One ``suggest`` with the state of the last one (``rng`` in place of the method's)."""
        chosen = rng if rng is not None else self.rng
        assert chosen is not None, "an EngineMethod needs an rng, its own or the call's"
        proposal = self.engine.suggest(self.problem, history, count, self.state, chosen)
        self.state = proposal.state
        for det in proposal.details:
            key = next((k for k in self.note_keys if k in det), None)
            if key is not None:
                reason = str(det[key])[:60]
                self.notes[reason] = self.notes.get(reason, 0) + 1
        return proposal

    def propose(self, history: History, count: int) -> np.ndarray:
        proposal = self.suggest(history, self.batch or count)
        return np.asarray(proposal.X, dtype=np.float64)


class OptunaPeer(Method):
    """An Optuna 5 sampler, ``GPSampler`` (``kind`` "gp") or ``TPESampler`` ("tpe"), at its
    defaults, seeded, minimizing one objective over ``d`` floats on [0, 1], asked ``count``
    trials at a time. Each constraint of a tell is set with ``trial.set_constraint`` (Optuna 5's
    way; its samplers read them when the study has any)."""

    def __init__(self, kind: str, d: int, seed: int) -> None:
        import warnings

        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        make = optuna.samplers.GPSampler if kind == "gp" else optuna.samplers.TPESampler
        self.study = optuna.create_study(direction="minimize", sampler=make(seed=seed))
        self.names = [f"x{i}" for i in range(d)]

    def propose(self, history: History, count: int) -> np.ndarray:
        self.trials = [self.study.ask() for _ in range(count)]
        return np.array([[t.suggest_float(n, 0.0, 1.0) for n in self.names] for t in self.trials])

    def tell(self, U: np.ndarray, Y: np.ndarray, C: np.ndarray) -> None:
        for trial, value, c in zip(self.trials, Y[:, 0], C, strict=True):
            for j, v in enumerate(c):
                trial.set_constraint(f"c{j}", float(v))
            self.study.tell(trial, float(value))


# --- the grid of runs -----------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One run of the grid; ``fn(job, *args)`` runs it in a worker process."""

    problem: str
    method: str
    seed: int

    def label(self) -> str:
        return f"{self.problem} {self.method} seed {self.seed}"


class Grid:
    """A pool of spawned worker processes running the jobs of one bench, with a deadline guard
    (a job whose expected seconds would end past the budget is not started, and is listed in
    ``skipped``) and SIGTERM / Ctrl-C handling: ``interrupted`` is set and the ``with`` block
    ends, so the script reports the runs that finished."""

    def __init__(
        self,
        bench: Bench,
        budget_min: float | None = None,
        *,
        workers: int = WORKERS,
        initializer: Callable[[], None] = one_torch_thread,
    ) -> None:
        self.bench = bench
        self.workers = workers
        self.initializer = initializer
        self.deadline = None if budget_min is None else bench.wall0 + 60.0 * budget_min
        self.skipped: list[str] = []
        self.interrupted = False

    def __enter__(self) -> Grid:
        interrupt_on_sigterm()
        self.pool = ProcessPoolExecutor(
            self.workers, mp_context=get_context("spawn"), initializer=self.initializer
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self.pool.shutdown(wait=True, cancel_futures=exc_type is not None)
        if exc_type is KeyboardInterrupt:
            self.interrupted = True
            log("interrupted: reporting the runs that finished")
            return True
        return False

    def fits(self, seconds: float) -> bool:
        """Whether ``seconds`` from now is still within the budget."""
        return self.deadline is None or time.perf_counter() + seconds <= self.deadline

    def run(
        self,
        fn: Callable[..., Any],
        jobs: Iterable[Job],
        on_result: Callable[[Job, Any], None],
        *args: Any,
        need_s: Callable[[Job], float] | None = None,
        skip_label: Callable[[Job], str] = Job.label,
    ) -> None:
        """``fn(job, *args)`` for every job, in order, ``workers`` at a time; ``on_result`` as
        each finishes. ``need_s(job)`` (at its start) is the seconds the guard expects."""
        queue = list(jobs)
        running: dict[Future[Any], Job] = {}
        while queue or running:
            while queue and len(running) < self.workers:
                job = queue.pop(0)
                if need_s is not None and not self.fits(need_s(job)):
                    self.skipped.append(skip_label(job))
                    continue
                running[self.pool.submit(fn, job, *args)] = job
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                on_result(running.pop(fut), fut.result())


# --- the run and its report -----------------------------------------------------------------


@dataclass
class Bench:
    """One run of a script: its name, mode, code version and wall clock."""

    name: str
    quick: bool
    code_paths: tuple[str, ...]
    wall0: float = field(default_factory=time.perf_counter)
    version: str = field(init=False)

    def __post_init__(self) -> None:
        self.version = code_version(*self.code_paths)

    def header(self, details: str = "") -> None:
        """The first line: script, mode, code version, machine, then ``details``."""
        print(
            f"# bench/{self.name}.py ({'quick' if self.quick else 'full'}), asktell "
            f"{self.version}; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
            f"{details + ', ' if details else ''}load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.wall0

    def progress(self, msg: str) -> None:
        log(f"{msg} (wall {self.elapsed_s() / 60:.1f} min)")

    def report(self, out: dict[str, Any], part_s: dict[str, float] | None = None) -> None:
        """The wall-time line (with the seconds of each part), then ``out`` with ``wall_s`` as
        the final JSON line."""
        wall = self.elapsed_s()
        parts = (
            "; parts: " + ", ".join(f"{k} {v:.0f} s" for k, v in part_s.items()) if part_s else ""
        )
        print(
            f"\nwall time {wall:.1f} s ({wall / 60:.1f} min){parts}; load average at the end "
            f"{os.getloadavg()[0]:.2f}"
        )
        out["wall_s"] = round(wall, 1)
        print(json.dumps(out))


def markdown_table(header: list[str], rows: Iterable[Iterable[object]], align: str = "") -> None:
    """A markdown table; ``align`` gives one of ``l``/``r`` per column (default left)."""
    print("| " + " | ".join(header) + " |")
    aligns = align.ljust(len(header), "l")
    print("|" + "|".join("---:" if a == "r" else "---" for a in aligns) + "|")
    for row in rows:
        print("| " + " | ".join(str(v) for v in row) + " |")


def print_target_table(rows: Iterable[tuple[str, float | None, str, bool | None]]) -> None:
    """The targets: name, value (``n/a`` when not measured), goal, MET / MISSED."""
    markdown_table(
        ["target", "value", "goal", "result"],
        (
            [
                name,
                "n/a" if value is None else f"{value:.4g}",
                goal,
                {True: "MET", False: "MISSED", None: "not measured"}[met],
            ]
            for name, value, goal, met in rows
        ),
        "lrrl",
    )


def print_notes(
    heading: str,
    results: dict[str, dict[str, dict[str, Any]]],
    problems: list[str],
    methods: list[str],
    label: Callable[[str, str], str],
) -> None:
    """The ``notes`` of every (problem, method) summary in ``results``, one line each."""
    notes = [
        f"- {label(p, m)}: {note}"
        for p in problems
        for m in methods
        for note in results.get(p, {}).get(m, {}).get("notes", [])
    ]
    if notes:
        print(f"\n{heading}:\n" + "\n".join(notes))
