"""Benchmark of the ``lcbo`` engine (issue 5): constrained BO in up to 100 dimensions.

One run, then markdown tables, the wall time and ONE final JSON line.

Problems (minimize ``f`` subject to ``c_j <= 0``; the unit cube mapped to each problem's box):

- ``ackley10``, ``ackley50``, ``ackley100``: Ackley on ``[-5, 10]^d`` with SCBO's constraints
  ``c_1 = sum_i x_i`` and ``c_2 = ||x||_2 - 5`` (f* = 0 at the origin).
- ``keane30``: BoTorch's ``KeaneBumpFunction(dim=30)`` on ``[0, 10]^30`` (2 constraints;
  best known about -0.818).
- ``speedreducer``: BoTorch's ``SpeedReducer`` (7-D, 11 constraints; best known 2996.35).
- ``pressurevessel``: BoTorch's ``PressureVessel`` (4-D, 4 constraints; best known 6059.95).

BoTorch's constrained problems return slack (>= 0 feasible); here ``c = -slack``.

Protocol. Budgets: 200 evaluations for d <= 10 (seeds 0-4), 500 for d >= 30 (seeds 0-2),
q = 4. Every method starts from the SAME scrambled Sobol design of ``n_init = min(max(10, d),
100)`` points per (problem, seed) (the tutorial's 10 at d = 10), then asks batches of 4, every
point evaluated before the next batch. Methods:

- ``lcbo``: our engine through the engine contract only (``engines.registry.make_engine``,
  ``engine.suggest(problem, history, 4, state, rng)`` with the state it returned last time),
  defaults except ``n_initial = n_init`` (the design of a restart).
- ``scbo``: ``bench/scbo.py``, SCBO as the BoTorch tutorial builds it (one GP per output,
  RAASP candidates in the trust region, ``ConstrainedMaxPosteriorSampling``), with one
  labelled deviation: each fit starts from the previous fit's hyperparameters (time).
- ``tpe``: Optuna's ``TPESampler(constraints_func=..., n_startup_trials=n_init, seed)``,
  otherwise defaults; the shared design is enqueued as its startup trials; asked 4 at a time.
- ``sobol``: the continuation of the design's scrambled Sobol sequence.

Metrics per run: the best feasible ``f`` (none when no point is feasible), the evaluations to
the first feasible point (design included), and the wall time per ask of the method's
proposal (evaluations excluded; mean over the model-based asks). Per problem and method: the
median best feasible over seeds (a seed without a feasible point counts as worst), min and
max, the share of seeds feasible, and the median evaluations to the first feasible point.

Targets (MET/MISSED, in the tables and the JSON): LCBO's median best feasible better than
SCBO's on at least 4 of the 6 problems (``lcbo_wins_vs_scbo``); LCBO feasible on every seed
on which SCBO is (``lcbo_feasible_where_scbo_is``); an LCBO ask at d = 100 with 1,000
observations in at most 2 s (``lcbo_ask_s_d100``). The last is timed directly, before the
runs, on Ackley-100 with its constraints at 1,000 uniform points, torch with 2 threads: the
median of 3 asks (q = 4) that each start from the state the previous one returned, as in a
running study (``lcbo_ask_s_d100``), and the first ask without state, which fits its GPs from
scratch (``lcbo_ask_s_d100_cold``).

Time. The runs go to 2 worker processes with 1 torch thread each (the machine has 2 cores):
those under a minute (TPE, Sobol) first, then the longest first. Estimates come from a full
run on this machine (``EST_S_PER_ASK``); ``--plan``
prints the plan. Deadline guard (``--budget-min``, default 88): a run whose estimate would end
past the budget is not started; the output names what was left out. Run it on an otherwise
idle machine: every method's time per ask is measured beside one other run.

    .venv/bin/python -m bench.lcbo            # full: 6 problems x 3-5 seeds x 4 methods
    .venv/bin/python -m bench.lcbo --quick    # 1 seed, short budgets: < 5 min
    .venv/bin/python -m bench.lcbo --plan     # print the plan (estimated seconds), exit
    .venv/bin/python -m bench.lcbo --problems ackley10,speedreducer --methods lcbo,scbo

Progress goes to stderr; the tables and the final JSON line to stdout. An interrupted run
(Ctrl-C, SIGTERM) still prints what it finished, with ``"interrupted": true``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import numpy as np
import torch
from scipy.stats import qmc

from bench.version import code_version
from engines.base import History, Problem
from engines.registry import make_engine
from engines.space import FloatParam, SearchSpace

#: The files whose changes make the reported code version "+dirty".
CODE_PATHS = ("engines", "bench/lcbo.py", "bench/scbo.py")

Q = 4
METHODS = ["lcbo", "scbo", "tpe", "sobol"]
LABELS = {"lcbo": "LCBO (engine)", "scbo": "SCBO", "tpe": "TPE (Optuna)", "sobol": "Sobol"}
BUDGET_MIN = 88.0
QUICK_BUDGET_MIN = 5.0
WORKERS = 2
ASK_TARGET_S = 2.0
WINS_NEEDED = 4  # of 6 problems; ceil(2/3 of them) with fewer


@dataclass(frozen=True)
class Spec:
    key: str
    label: str
    d: int
    k: int
    budget: int
    seeds: int
    best_known: float

    @property
    def n_init(self) -> int:
        return min(max(10, self.d), 100)


SPECS = {
    s.key: s
    for s in [
        Spec("ackley10", "Ackley-10 (SCBO constraints)", 10, 2, 200, 5, 0.0),
        Spec("ackley50", "Ackley-50 (SCBO constraints)", 50, 2, 500, 3, 0.0),
        Spec("ackley100", "Ackley-100 (SCBO constraints)", 100, 2, 500, 3, 0.0),
        Spec("keane30", "KeaneBump-30", 30, 2, 500, 3, -0.818056),
        Spec("speedreducer", "SpeedReducer (7D, 11 c)", 7, 11, 200, 5, 2996.3482),
        Spec("pressurevessel", "PressureVessel (4D, 4 c)", 4, 4, 200, 5, 6059.946341),
    ]
}
PROBLEMS = list(SPECS)
#: ``--quick``: 1 seed, budgets cut to n_init + QUICK_ASKS batches.
QUICK_ASKS = 8

#: Plan estimates, seconds per ask (proposal only) on this machine, one thread, beside one
#: other run, at the mean history size of a full run: measured in the run of commit f85efcd
#: (LCBO Ackley-10 and PressureVessel, not measured there, scaled by their number of GPs).
EST_S_PER_ASK: dict[str, dict[str, float]] = {
    "lcbo": {
        "ackley10": 1.4,
        "ackley50": 2.5,
        "ackley100": 3.0,
        "keane30": 3.2,
        "speedreducer": 5.3,
        "pressurevessel": 2.3,
    },
    "scbo": {
        "ackley10": 1.5,
        "ackley50": 2.6,
        "ackley100": 3.9,
        "keane30": 2.0,
        "speedreducer": 2.6,
        "pressurevessel": 1.2,
    },
    "tpe": {k: 0.05 for k in PROBLEMS},
    "sobol": {k: 0.001 for k in PROBLEMS},
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def seed_int(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


# --- problems -------------------------------------------------------------------------------


class Evaluator:
    """``f(U) -> (f: (n,), C: (n, k))`` for ``U: (n, d)`` in the unit cube."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        if spec.key.startswith("ackley"):
            self.low, self.high = np.full(spec.d, -5.0), np.full(spec.d, 10.0)
            self.fn: Any = None
            return
        from botorch.test_functions.synthetic import (
            KeaneBumpFunction,
            PressureVessel,
            SpeedReducer,
        )

        self.fn = {
            "keane30": lambda: KeaneBumpFunction(dim=30),
            "speedreducer": SpeedReducer,
            "pressurevessel": PressureVessel,
        }[spec.key]()
        self.low, self.high = (b.numpy() for b in self.fn.bounds)

    def __call__(self, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = self.low + (self.high - self.low) * np.asarray(U, dtype=np.float64)
        if self.fn is None:
            f = (
                -20.0 * np.exp(-0.2 * np.sqrt((X**2).mean(axis=1)))
                - np.exp(np.cos(2.0 * math.pi * X).mean(axis=1))
                + 20.0
                + math.e
            )
            return f, np.column_stack([X.sum(axis=1), np.linalg.norm(X, axis=1) - 5.0])
        with torch.no_grad():
            tX = torch.as_tensor(X)
            return self.fn.evaluate_true(tX).numpy(), -self.fn.evaluate_slack_true(tX).numpy()


def initial_design(spec: Spec, seed: int) -> tuple[np.ndarray, qmc.Sobol]:
    """The shared design ``(n_init, d)`` and its Sobol sequence (for the ``sobol`` method)."""
    sobol = qmc.Sobol(spec.d, scramble=True, seed=seed_int(seed, PROBLEMS.index(spec.key)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n not a power of 2
        return sobol.random(spec.n_init), sobol


# --- one run --------------------------------------------------------------------------------


class Proposer:
    """``propose(X, f, C) -> U: (q, d)`` and ``tell(U, f, C)`` for one method."""

    def __init__(self, method: str, spec: Spec, seed: int, sobol: qmc.Sobol) -> None:
        self.method, self.spec = method, spec
        self.notes: dict[str, int] = {}
        d, k = spec.d, spec.k
        if method == "lcbo":
            space = SearchSpace([FloatParam(f"x{i}", 0.0, 1.0) for i in range(d)])
            self.problem = Problem(space, n_constraints=k)
            self.engine = make_engine("lcbo", {"n_initial": spec.n_init})
            self.state: dict[str, Any] = {}
            self.rng = np.random.default_rng(seed_int(seed, PROBLEMS.index(spec.key), 1))
        elif method == "scbo":
            from bench.scbo import SCBO

            self.scbo = SCBO(d, Q, k, seed=seed_int(seed, PROBLEMS.index(spec.key), 2) % 2**31)
            self.scbo.n_init = spec.n_init
        elif method == "tpe":
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            sampler = optuna.samplers.TPESampler(
                n_startup_trials=spec.n_init,
                constraints_func=lambda t: t.user_attrs["constraints"],
                seed=seed_int(seed, PROBLEMS.index(spec.key), 3) % 2**31,
            )
            self.study = optuna.create_study(direction="minimize", sampler=sampler)
            self.names = [f"x{i}" for i in range(d)]
        self.sobol = sobol

    def start(self, U0: np.ndarray, f0: np.ndarray, C0: np.ndarray) -> None:
        if self.method == "scbo":
            self.scbo.start(U0, f0, C0)
        elif self.method == "tpe":
            for u in U0:
                self.study.enqueue_trial(dict(zip(self.names, map(float, u), strict=True)))
            self.trials = [self.study.ask() for _ in U0]
            U = np.array([[t.suggest_float(n, 0.0, 1.0) for n in self.names] for t in self.trials])
            if not np.allclose(U, U0):
                raise RuntimeError("TPE did not take the enqueued design")
            self.tell(U0, f0, C0)

    def propose(self, X: np.ndarray, f: np.ndarray, C: np.ndarray, n: int) -> np.ndarray:
        """A batch of ``Q`` points, or ``n < Q`` for the last batch of a budget (the model-based
        methods propose ``Q`` and the rest is dropped; TPE asks only ``n`` trials)."""
        if self.method == "lcbo":
            history = History(X, f[:, None], C, np.zeros((0, self.spec.d)))
            proposal = self.engine.suggest(self.problem, history, Q, self.state, self.rng)
            self.state = proposal.state
            for det in proposal.details:
                if "fallback" in det or "replaced" in det:
                    key = str(det.get("fallback", det.get("replaced")))[:60]
                    self.notes[key] = self.notes.get(key, 0) + 1
            return np.asarray(proposal.X, dtype=np.float64)
        if self.method == "scbo":
            return self.scbo.ask()
        if self.method == "tpe":
            self.trials = [self.study.ask() for _ in range(n)]
            return np.array(
                [[t.suggest_float(n, 0.0, 1.0) for n in self.names] for t in self.trials]
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.sobol.random(Q)

    def tell(self, U: np.ndarray, f: np.ndarray, C: np.ndarray) -> None:
        if self.method == "scbo":
            self.scbo.tell(U, f, C)
        elif self.method == "tpe":
            for t, value, c in zip(self.trials, f, C, strict=True):
                t.set_user_attr("constraints", [float(v) for v in c])
                self.study.tell(t, float(value))


def run_one(key: str, method: str, seed: int, budget: int) -> dict[str, Any]:
    """One (problem, method, seed) run in a worker process; its metrics."""
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    spec = SPECS[key]
    f_of = Evaluator(spec)
    t_run = time.perf_counter()
    U0, sobol = initial_design(spec, seed)
    f0, C0 = f_of(U0)
    X, f, C = U0.copy(), f0.copy(), C0.copy()
    proposer = Proposer(method, spec, seed, sobol)
    proposer.start(U0, f0, C0)
    ask_s = []
    while len(X) < budget:
        t0 = time.perf_counter()
        n = min(Q, budget - len(X))
        U = proposer.propose(X, f, C, n)[:n]
        ask_s.append(time.perf_counter() - t0)
        if U.shape[1:] != (spec.d,) or not np.all(np.isfinite(U)):
            raise RuntimeError(f"{method} proposed {U.shape}")
        f_new, C_new = f_of(np.clip(U, 0.0, 1.0))
        proposer.tell(U, f_new, C_new)
        X, f, C = np.vstack([X, U]), np.concatenate([f, f_new]), np.vstack([C, C_new])
    feasible = np.all(C <= 0, axis=1)
    notes = [f"{k}: {v}" for k, v in proposer.notes.items()]
    if method == "scbo" and proposer.scbo.restarts:
        notes.append(f"restarts: {proposer.scbo.restarts}")
    if method == "lcbo" and proposer.state.get("generation"):
        notes.append(f"restarts: {proposer.state['generation']}")
    return {
        "problem": key,
        "method": method,
        "seed": seed,
        "n": len(X),
        "best": float(f[feasible].min()) if feasible.any() else None,
        "first_feasible": int(np.argmax(feasible)) + 1 if feasible.any() else None,
        "ask_s": statistics.fmean(ask_s) if ask_s else None,
        "run_s": time.perf_counter() - t_run,
        "kkt_residual": proposer.state.get("kkt_residual") if method == "lcbo" else None,
        "notes": notes,
    }


def time_ask_d100(threads: int = 2) -> dict[str, float]:
    """LCBO asks at d = 100 with 1,000 observations (module docstring), in seconds."""
    torch.set_num_threads(threads)
    spec = SPECS["ackley100"]
    rng = np.random.default_rng(0)
    X = rng.random((1000, spec.d))
    f, C = Evaluator(spec)(X)
    problem = Problem(SearchSpace([FloatParam(f"x{i}", 0, 1) for i in range(spec.d)]), 1, 2)
    engine = make_engine("lcbo")
    history = History(X, f[:, None], C, np.zeros((0, spec.d)))
    times, state = [], {}
    for i in range(4):
        t0 = time.perf_counter()
        state = engine.suggest(problem, history, Q, state, np.random.default_rng(i)).state
        times.append(time.perf_counter() - t0)
    return {"cold": times[0], "warm": statistics.median(times[1:])}


# --- summary and output ---------------------------------------------------------------------


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    bests = [r["best"] if r["best"] is not None else math.inf for r in runs]
    firsts = [r["first_feasible"] or math.inf for r in runs]
    med = statistics.median(bests)
    first = statistics.median(firsts)
    asks = [r["ask_s"] for r in runs if r["ask_s"] is not None]
    return {
        "seeds": len(runs),
        "best": med if math.isfinite(med) else None,
        "best_min": min(bests) if math.isfinite(min(bests)) else None,
        "best_max": max(bests) if math.isfinite(max(bests)) else None,
        "best_per_seed": {r["seed"]: r["best"] for r in runs},
        "feasible_share": sum(r["best"] is not None for r in runs) / len(runs),
        "first_feasible": first if math.isfinite(first) else None,
        "first_feasible_per_seed": {r["seed"]: r["first_feasible"] for r in runs},
        "ask_s": statistics.median(asks) if asks else None,
        "notes": sorted({n for r in runs for n in r["notes"]}),
    }


def fmt(v: float | None, digits: int = 4) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


def better(a: float | None, b: float | None) -> bool:
    """Median best ``a`` strictly better than ``b`` (``None``: no feasible median)."""
    return a is not None and (b is None or a < b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, short budgets: < 5 min")
    parser.add_argument("--plan", action="store_true", help="print the plan and exit")
    parser.add_argument("--problems", help=f"comma list of {','.join(PROBLEMS)}")
    parser.add_argument("--methods", help=f"comma list of {','.join(METHODS)}")
    parser.add_argument("--seeds", type=int, help="seeds per problem (default 5 or 3; quick 1)")
    parser.add_argument("--budget-min", type=float, help=f"deadline guard (default {BUDGET_MIN})")
    args = parser.parse_args(argv)
    problems = args.problems.split(",") if args.problems else PROBLEMS
    methods = [m for m in METHODS if m in (args.methods.split(",") if args.methods else METHODS)]
    if unknown := [p for p in problems if p not in SPECS]:
        raise SystemExit(f"unknown problem(s) {unknown}; choose from {PROBLEMS}")
    budget_min = args.budget_min or (QUICK_BUDGET_MIN if args.quick else BUDGET_MIN)
    budgets = {
        p: SPECS[p].n_init + Q * QUICK_ASKS if args.quick else SPECS[p].budget for p in problems
    }
    seeds = {p: args.seeds or (1 if args.quick else SPECS[p].seeds) for p in problems}
    jobs = [(p, m, s) for p in problems for m in methods for s in range(seeds[p])]

    def estimate(p: str, m: str) -> float:
        return EST_S_PER_ASK[m][p] * math.ceil((budgets[p] - SPECS[p].n_init) / Q) + 1.0

    # TPE and Sobol first (seconds each: the guard must never drop them), then the longest
    # first, so the two workers finish together.
    jobs.sort(key=lambda j: (j[1] not in ("tpe", "sobol"), -estimate(j[0], j[1])))
    signal.signal(signal.SIGTERM, _interrupt)
    wall0 = time.perf_counter()
    version = code_version(*CODE_PATHS)
    total_est = sum(estimate(p, m) for p, m, _ in jobs)
    print(
        f"# bench/lcbo.py ({'quick' if args.quick else 'full'}), asktell {version}; Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, {WORKERS} workers x 1 torch thread, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print("plan (estimated seconds of one worker, beside the other):")
    for p in problems:
        parts = ", ".join(f"{m} {estimate(p, m) * seeds[p]:.0f}" for m in methods)
        print(f"  {p} ({budgets[p]} evaluations, {seeds[p]} seeds): {parts}")
    print(
        f"  total about {total_est / 60:.0f} worker-min, {total_est / 60 / WORKERS:.0f} min "
        f"on {WORKERS} workers; deadline guard at {budget_min:g} min",
        flush=True,
    )
    if args.plan:
        return 0

    timing: dict[str, float] = {}
    done: list[dict[str, Any]] = []
    skipped: list[str] = []
    interrupted = False
    deadline = wall0 + 60.0 * budget_min
    try:
        if "lcbo" in methods:
            log("timing an LCBO ask at d = 100 with 1,000 observations ...")
            timing = time_ask_d100()
            log(f"  cold {timing['cold']:.2f} s, warm {timing['warm']:.2f} s")
        with ProcessPoolExecutor(WORKERS, mp_context=get_context("spawn")) as pool:
            running: dict[Future[dict[str, Any]], tuple[str, str, int]] = {}
            queue = list(jobs)
            while queue or running:
                while queue and len(running) < WORKERS:
                    p, m, s = queue.pop(0)
                    if time.perf_counter() + estimate(p, m) > deadline:
                        skipped.append(f"{p} {m} seed {s}")
                        continue
                    running[pool.submit(run_one, p, m, s, budgets[p])] = (p, m, s)
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    running.pop(fut)
                    r = fut.result()
                    done.append(r)
                    log(
                        f"  {r['problem']} {r['method']} seed {r['seed']}: best {fmt(r['best'])},"
                        f" first feasible {r['first_feasible']}, {fmt(r['ask_s'], 3)} s/ask "
                        f"({r['run_s']:.0f} s; wall {(time.perf_counter() - wall0) / 60:.1f} min)"
                    )
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: reporting the runs that finished")

    results: dict[str, dict[str, dict[str, Any]]] = {}
    for p in problems:
        for m in methods:
            runs = sorted(
                (r for r in done if r["problem"] == p and r["method"] == m),
                key=lambda r: r["seed"],
            )
            if runs:
                results.setdefault(p, {})[m] = summarize(runs)
    return report(
        problems, methods, budgets, results, done, timing, skipped, interrupted, version, wall0
    )


def report(
    problems: list[str],
    methods: list[str],
    budgets: dict[str, int],
    results: dict[str, dict[str, dict[str, Any]]],
    done: list[dict[str, Any]],
    timing: dict[str, float],
    skipped: list[str],
    interrupted: bool,
    version: str,
    wall0: float,
) -> int:
    print("\n## Results: median over seeds (min - max)\n")
    print(
        "| problem | best known | method | seeds | best feasible | feasible seeds "
        "| evals to first feasible | s / ask |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for p in problems:
        for m in methods:
            r = results.get(p, {}).get(m)
            if r is None:
                continue
            print(
                f"| {SPECS[p].label} | {fmt(SPECS[p].best_known)} | {LABELS[m]} | {r['seeds']} | "
                f"{fmt(r['best'])} ({fmt(r['best_min'], 3)} - {fmt(r['best_max'], 3)}) | "
                f"{r['feasible_share']:.0%} | {fmt(r['first_feasible'], 3)} | "
                f"{fmt(r['ask_s'], 3)} |"
            )
    print(
        "(budgets: "
        + ", ".join(f"{p} {budgets[p]}" for p in problems)
        + f" evaluations, q = {Q}, shared Sobol design of min(max(10, d), 100) points)"
    )
    notes = [
        f"- {SPECS[p].label} {LABELS[m]}: {note}"
        for p in problems
        for m in methods
        for note in results.get(p, {}).get(m, {}).get("notes", [])
    ]
    if notes:
        print("\nNotes (any seed):\n" + "\n".join(notes))

    def get(p: str, m: str, k: str) -> Any:
        return results.get(p, {}).get(m, {}).get(k)

    compared = [p for p in problems if get(p, "lcbo", "seeds") and get(p, "scbo", "seeds")]
    wins = [p for p in compared if better(get(p, "lcbo", "best"), get(p, "scbo", "best"))]
    need = min(WINS_NEEDED, math.ceil(2 * len(compared) / 3))
    missing_feasible = []
    for r in done:
        if r["method"] == "scbo" and r["best"] is not None:
            mine = [x for x in done if x["method"] == "lcbo" and x["problem"] == r["problem"]]
            mine = [x for x in mine if x["seed"] == r["seed"]]
            if mine and mine[0]["best"] is None:
                missing_feasible.append(f"{r['problem']} seed {r['seed']}")
    targets = {
        "lcbo_wins_vs_scbo": (len(wins), f">= {need} of {len(compared)}", len(wins) >= need),
        "lcbo_feasible_where_scbo_is": (
            len(missing_feasible),
            "0 seeds missed",
            not missing_feasible,
        ),
        "lcbo_ask_s_d100": (
            timing.get("warm"),
            f"<= {ASK_TARGET_S} s",
            timing.get("warm") is not None and timing["warm"] <= ASK_TARGET_S,
        ),
    }
    print("\n## Targets\n\n| problem | LCBO median best | SCBO median best | LCBO better |")
    print("|---|---:|---:|---|")
    for p in compared:
        print(
            f"| {SPECS[p].label} | {fmt(get(p, 'lcbo', 'best'))} | {fmt(get(p, 'scbo', 'best'))}"
            f" | {'yes' if p in wins else 'no'} |"
        )
    print("\n| target | value | goal | result |\n|---|---:|---|---|")
    for name, (value, goal, met) in targets.items():
        shown = "n/a" if value is None else f"{value:.4g}"
        print(f"| {name} | {shown} | {goal} | {'MET' if met else 'MISSED'} |")
    if timing:
        print(f"(the cold d = 100 ask, no state: {timing['cold']:.2f} s)")
    if missing_feasible:
        print(f"(LCBO infeasible where SCBO is feasible: {', '.join(missing_feasible)})")
    if skipped:
        print(f"(left out by the deadline guard: {', '.join(skipped)})")
    if interrupted:
        print("(INTERRUPTED: partial results)")
    wall = time.perf_counter() - wall0
    print(f"\nwall time {wall:.1f} s ({wall / 60:.1f} min); load average {os.getloadavg()[0]:.2f}")

    r4: Callable[[Any], Any] = lambda v: (  # noqa: E731
        None if v is None or (isinstance(v, float) and not math.isfinite(v)) else round(v, 4)
    )
    out: dict[str, Any] = {
        "bench": "lcbo",
        "quick": budgets != {p: SPECS[p].budget for p in problems},
        "interrupted": interrupted,
        "code_version": version,
        "lcbo_wins_vs_scbo": wins,
        "problems_compared": compared,
        "lcbo_infeasible_where_scbo_feasible": missing_feasible,
        "lcbo_ask_s_d100": r4(timing.get("warm")),
        "lcbo_ask_s_d100_cold": r4(timing.get("cold")),
    }
    for name, (value, goal, met) in targets.items():
        out[f"target_{name}"] = r4(value)
        out[f"target_{name}_goal"] = goal
        out[f"target_{name}_met"] = met
    out["problems"] = {
        p: {
            "d": SPECS[p].d,
            "constraints": SPECS[p].k,
            "budget": budgets[p],
            "best_known": SPECS[p].best_known,
            **{
                f"{m}_{k}": (r4(v) if not isinstance(v, dict | list) else v)
                for m, r in methods_r.items()
                for k, v in r.items()
            },
        }
        for p, methods_r in results.items()
    }
    out["skipped"] = skipped
    out["config"] = {"q": Q, "workers": WORKERS, "torch_threads_per_worker": 1}
    out["wall_s"] = round(wall, 1)
    print(json.dumps(out))
    return 130 if interrupted else 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
