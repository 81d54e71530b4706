"""Benchmark of the ``turbo-enn`` engine (issue 3): proposal cost, quality, and the service.

One run, three parts, then markdown tables, the wall time and ONE final JSON line.

1. Proposal time (fit + acquisition). Data: X uniform in [0,1]^d, y = Ackley on [-5,10]^d
   (``_ennbo_run.timing_data``, the same arrays in every process). N in {500, 1,000, 2,000,
   4,000, 10,000, 50,000}, d in {20, 100}, q in {4, 50}.

   - turbo-enn, both modes (``noisy=false``: non-dominated sorting, no fit, the default;
     ``noisy=true``: fitted ENN, lower confidence bound), through the engine contract only:
     the median of 3 calls of ``engine.suggest(problem, history, q, {}, rng)``. A fresh state
     with N completed points makes the ask a trust-region proposal over all N points (L = 0.8
     around the best), i.e. the engine rebuilds everything from the history, as it does on
     every ask of a study. One untimed call per mode first (imports, caches).
   - GP-TuRBO (``bench/gp_turbo.py``: TuRBO-1 exactly as in the BoTorch tutorial, exact
     ``SingleTaskGP`` fitted by ``fit_gpytorch_mll``, RAASP candidates ``min(5000, max(2000,
     200 d))``, Thompson sampling with ``MaxPosteriorSampling(replacement=False)``) at N in
     {500, 1,000, 2,000, 4,000}, d in {20, 100}, q = 4: ONE cold proposal (fit + TS) per
     config, each in its own process (torch 2 threads) killed after ``--gp-cap`` seconds
     (240 s): such a config is reported as "> cap" (the speedup is then a lower bound).
   - ennbo 0.3.3 (the TuRBO-ENN authors' PyPI package; Rust path, explicit k = 10,
     ``num_fit_samples=10, num_fit_candidates=30``, candidates ``min(5000, 100 d)``) at every
     N/d/q of the grid, PARETO and UCB acquisition, in its own process (``_ennbo_run.py``;
     ennbo pins BLAS/OpenMP to 1 thread and would leave this process's torch single-threaded):
     a cold ``tell`` of the N points, then the median of 3 steady-state cycles ``tell(1 new
     point) + ask(q)`` (benchmarks.md section 3.1). Note the asymmetry: ennbo's proposal is
     incremental (its index and fit persist between asks); turbo-enn's is from scratch.

2. Quality: Ackley-20 and Rosenbrock-20, both on [-5,10]^20 (f* = 0), minimized, q = 4,
   2,000 evaluations, seeds 0-4: best value found, median (min, max) over seeds, for
   turbo-enn in both modes (engine defaults: 2 d initial Sobol points per trust region),
   an ablation of the default mode with ``restart_keeps_data=true`` (ennbo's restart rule),
   Sobol (scipy scrambled, 2,000 points) and ennbo (PARETO, ``num_init = 2 d``, in its
   subprocess). GP-TuRBO runs 1,000 evaluations with seeds 0-2 (``n_init = 2 d``) on Ackley-20
   (``--gp-problems ackley,rosenbrock`` adds Rosenbrock-20, about 30 minutes more), with one
   labelled deviation from the tutorial to keep it affordable: each GP fit starts from the
   previous fit's hyperparameters within a trust-region run (``warm_start``). Even so a run
   costs ~10 minutes here: the exact Thompson sample over 4,000 candidates is a 4,000 x 4,000
   Cholesky (~2 s) per ask. A run still going after ``--gp-run-cap`` (900 s) stops and is shown
   as capped, with its evaluation count.
   The table also gives each method's best after 200/500/1,000 evaluations, so turbo-enn and
   GP-TuRBO compare at 1,000, and the wall time per run (objective evaluations included;
   they cost microseconds) and the proposal time per run.

3. Service: a real uvicorn (one process, ``python -m uvicorn service.main:app``) on a fresh
   SQLite file in a temp dir, a study with d = 20 float parameters on [-5,10] (and d = 100)
   on engine ``turbo-enn`` (defaults), filled with 50,000 completed trials (Ackley values) by
   inserting the rows directly with the service's own SQLAlchemy tables (``service.db.models``),
   as ``tell`` would leave them, then checked through the API. Timed with httpx from this
   process: the first ``ask(q=4)`` (cold: config, history load, engine), then 5 rounds of
   (tell the 4 trials, ``ask(4)``) whose median is the warm ask, ``service_ask_s_n50000``.
   Beside it the raw engine on the same arrays and q, the same sequence (``{}`` state, then
   the state it returned, 4 new points told each round). Ratio = service / raw (warm).

Targets (printed with MET/MISSED and in the JSON): GP-TuRBO / turbo-enn >= 100x at N = 2,000,
d = 20, q = 4; turbo-enn <= 0.05 s at N <= 2,000 (every d and q of the grid, default mode);
<= 0.5 s at N = 50,000, d = 100, q = 50; service within 1.5x of the raw engine; Ackley-20
median best <= 0.5 after 2,000 evaluations; no slower than ennbo (at N = 50,000, d = 100,
q = 50; also counted over the whole grid) and no worse (median best, both problems).

Threads: ``torch.set_num_threads(2)`` here (the machine has 2 cores); the GP-TuRBO timing
processes use 2 threads too; ennbo keeps its own 1-thread setting (more threads made it
slower on this machine, benchmarks.md section 1.4). Everything runs one at a time.

    .venv/bin/python -m bench.turbo_enn             # full: about 50-60 min on an idle machine
    .venv/bin/python -m bench.turbo_enn --quick     # N in {1,000, 2,000, 50,000}; 1 seed,
                                                    # 200 evaluations (GP-TuRBO 80), GP N
                                                    # {250, 500} at d = 20: < 5 min
    .venv/bin/python -m bench.turbo_enn --parts timing,service   # a subset
    .venv/bin/python -m bench.turbo_enn --plan                   # print the plan, exit

ennbo: ``.venv/bin/pip install --no-deps ennbo==0.3.3`` (the ``bench`` extra; never its
``with-deps`` extra). Without it the ennbo columns are empty. Progress goes to stderr; the
tables and the final JSON line to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch  # before anything else that could touch threads

from bench._ennbo_run import HIGH, LOW, objective, timing_data
from bench.gp_turbo import FIT_FAILURES, GPTurbo, n_candidates
from bench.version import ROOT, code_version
from engines.base import History, Problem
from engines.registry import make_engine
from engines.space import FloatParam, SearchSpace

BENCH = ROOT / "bench"

#: The files whose changes make the reported code version "+dirty".
CODE_PATHS = ("engines", "service")

ENGINE = "turbo-enn"
#: turbo-enn modes: label -> engine options.
MODES: dict[str, dict[str, Any]] = {"nds": {"noisy": False}, "noisy": {"noisy": True}}
MODE_LABELS = {"nds": "turbo-enn noisy=false", "noisy": "turbo-enn noisy=true"}
#: Quality only: the default mode with the ennbo package's restart (the region keeps its data
#: and centre), to show how much of a quality gap to ennbo the restart rule explains.
ABLATIONS: dict[str, dict[str, Any]] = {
    "nds-keep": {"noisy": False, "restart_keeps_data": True},
}
MODE_LABELS["nds-keep"] = "turbo-enn restart keeps data (ablation)"
DIMS = [20, 100]
QS = [4, 50]
FULL_N = [500, 1000, 2000, 4000, 10_000, 50_000]
QUICK_N = [1000, 2000, 50_000]
REPS = 3
GP_Q = 4
FULL_GP_N = [500, 1000, 2000, 4000]
QUICK_GP_N = [250, 500]
QUICK_GP_DIMS = [20]
GP_CAP = 240.0
#: Wall-time cap of one GP-TuRBO quality run (it then stops early and says so).
GP_RUN_CAP = 900.0
QUALITY_D = 20
QUALITY_Q = 4
PROBLEMS = ["ackley", "rosenbrock"]
SERVICE_N = 50_000
SERVICE_Q = 4
SERVICE_ROUNDS = 5
CHECKPOINTS = [200, 500, 1000, 2000]

# Target thresholds.
GP_SPEEDUP_MIN = 100.0
SMALL_N_MAX_S = 0.05
BIG_N_MAX_S = 0.5
SERVICE_RATIO_MAX = 1.5
ACKLEY_BEST_MAX = 0.5

# Plan estimates (seconds, this machine when idle; benchmarks.md section 3 and bench pieces).
GP_ESTIMATE = {
    20: {250: 2.5, 500: 4.0, 1000: 8.5, 2000: 40.0},  # + TS over 4,000 candidates
    100: {250: 25.0, 500: 30.4, 1000: 34.6, 2000: 82.6},
}
PROCESS_START_S = 5.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4f}" if v < 1 else f"{v:.2f}"


def cfg_key(d: int, n: int, q: int) -> str:
    return f"d{d}_n{n}_q{q}"


def make_problem(d: int) -> Problem:
    return Problem(SearchSpace([FloatParam(f"x{i}", LOW, HIGH) for i in range(d)]))


def history_of(X: np.ndarray, y: np.ndarray) -> History:
    n, d = X.shape
    return History(X, y.reshape(n, 1), np.zeros((n, 0)), np.zeros((0, d)))


# --- settings -----------------------------------------------------------------------------


@dataclass
class Settings:
    quick: bool
    parts: set[str]
    enn_n: list[int]
    gp_n: list[int]
    gp_dims: list[int]
    gp_cap: float
    budget: int
    seeds: list[int]
    gp_budget: int
    gp_seeds: list[int]
    gp_problems: list[str]
    service_dims: list[int]
    service_n: int
    gp_run_cap: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        quick = bool(args.quick)
        seeds = args.seeds if args.seeds is not None else (1 if quick else 5)
        gp_seeds = args.gp_seeds if args.gp_seeds is not None else (1 if quick else 3)
        return cls(
            quick=quick,
            parts=set(args.parts.split(",")),
            enn_n=QUICK_N if quick else FULL_N,
            gp_n=QUICK_GP_N if quick else FULL_GP_N,
            gp_dims=QUICK_GP_DIMS if quick else DIMS,
            gp_cap=args.gp_cap if args.gp_cap is not None else (120.0 if quick else GP_CAP),
            budget=args.budget or (200 if quick else 2000),
            seeds=list(range(seeds)),
            gp_budget=args.gp_budget or (80 if quick else 1000),
            gp_seeds=list(range(gp_seeds)),
            gp_problems=args.gp_problems.split(",") if args.gp_problems else ["ackley"],
            service_dims=[20] if quick else DIMS,
            service_n=args.service_n or SERVICE_N,
            gp_run_cap=args.gp_run_cap or (300.0 if quick else GP_RUN_CAP),
        )


def enn_call_estimate(n: int, d: int) -> float:
    """Seconds per turbo-enn proposal, fitted on pieces of this bench (idle machine)."""
    return 0.01 + 0.001 * d + 1.2e-7 * n * d


def plan_estimate(s: Settings) -> dict[str, float]:
    est: dict[str, float] = {}
    if "timing" in s.parts:
        calls = sum(enn_call_estimate(n, d) for n in s.enn_n for d in DIMS) * len(QS)
        est["timing turbo-enn"] = calls * (REPS * 2.2) + 5
        ennbo = sum(0.01 + 1.8e-7 * n * d for n in s.enn_n for d in DIMS) * len(QS)
        est["timing ennbo"] = ennbo * (REPS + 1.5) * 2 + PROCESS_START_S
        gp = 0.0
        for d in s.gp_dims:
            for n in s.gp_n:
                gp += min(GP_ESTIMATE.get(d, {}).get(n, s.gp_cap), s.gp_cap) + PROCESS_START_S
        est["timing GP-TuRBO"] = gp
    if "quality" in s.parts:
        asks = s.budget / QUALITY_Q
        per_run = asks * enn_call_estimate(s.budget // 2, QUALITY_D) * 1.1
        modes = len(MODES) + len(ABLATIONS)
        est["quality turbo-enn"] = per_run * modes * len(PROBLEMS) * len(s.seeds)
        est["quality Sobol + ennbo"] = len(PROBLEMS) * len(s.seeds) * 1.0 + PROCESS_START_S
        # GP-TuRBO, warm-started fits, d = 20: Thompson sampling over 4,000 candidates costs
        # about 2 s per ask (a 4,000 x 4,000 Cholesky), the fit 0.1-2 s: ~2.5 s per ask.
        gp_asks = max(0, s.gp_budget - 2 * QUALITY_D) / QUALITY_Q
        est["quality GP-TuRBO"] = gp_asks * 2.5 * len(s.gp_problems) * len(s.gp_seeds)
    if "service" in s.parts:
        est["service"] = sum(30 + 0.3 * d for d in s.service_dims)
    return est


# --- part 1: proposal time ----------------------------------------------------------------


def time_turbo_enn(s: Settings) -> dict[str, dict[str, Any]]:
    """mode -> config key -> {"median_s", "all_s"}."""
    engines = {mode: make_engine(ENGINE, opts) for mode, opts in MODES.items()}
    X, y = timing_data(1000, 20)
    for eng in engines.values():  # warm-up: imports and caches
        eng.suggest(make_problem(20), history_of(X, y), 4, {}, np.random.default_rng(0))
    out: dict[str, dict[str, Any]] = {mode: {} for mode in MODES}
    for d in DIMS:
        problem = make_problem(d)
        for n in s.enn_n:
            X, y = timing_data(n, d)
            history = history_of(X, y)
            for q in QS:
                for mode, eng in engines.items():
                    times = []
                    for r in range(REPS):
                        rng = np.random.default_rng([r, n, d, q])
                        t0 = time.perf_counter()
                        proposal = eng.suggest(problem, history, q, {}, rng)
                        times.append(time.perf_counter() - t0)
                        if proposal.X.shape != (q, d):
                            raise RuntimeError(f"{ENGINE} returned {proposal.X.shape}")
                    out[mode][cfg_key(d, n, q)] = {
                        "median_s": statistics.median(times),
                        "all_s": times,
                    }
                    log(
                        f"  {MODE_LABELS[mode]} d={d} N={n} q={q}: {statistics.median(times):.4f} s"
                    )
    return out


def run_ennbo(request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """Run ``_ennbo_run.py`` on ``request``; None (with a note) when ennbo is unavailable."""
    try:
        done = subprocess.run(
            [sys.executable, str(BENCH / "_ennbo_run.py")],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        log(f"  ennbo: no answer within {timeout:.0f} s")
        return None
    if done.returncode != 0:
        log(f"  ennbo failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return None
    for line in done.stderr.splitlines():
        log(line)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def time_ennbo(s: Settings) -> dict[str, dict[str, Any]]:
    """acq -> config key -> the ennbo result."""
    configs = [
        {"n": n, "d": d, "q": q, "acq": acq}
        for d in DIMS
        for n in s.enn_n
        for q in QS
        for acq in ("pareto", "ucb")
    ]
    res = run_ennbo({"mode": "timing", "configs": configs, "reps": REPS, "seed": 0}, 1800)
    out: dict[str, dict[str, Any]] = {"pareto": {}, "ucb": {}}
    for r in (res or {}).get("results", []):
        out[r["acq"]][cfg_key(r["d"], r["n"], r["q"])] = r
    return out


def time_gp_turbo(s: Settings) -> dict[str, dict[str, Any]]:
    """config key -> {"proposal_s", "fit_s", "ts_s"} or {"capped": True}."""
    out: dict[str, dict[str, Any]] = {}
    for d in s.gp_dims:
        for n in s.gp_n:
            argv = [sys.executable, "-m", "bench.gp_turbo", "--n", str(n), "--d", str(d)]
            argv += ["--q", str(GP_Q), "--threads", "2"]
            t0 = time.perf_counter()
            try:
                done = subprocess.run(
                    argv, capture_output=True, text=True, timeout=s.gp_cap, cwd=ROOT
                )
            except subprocess.TimeoutExpired:
                out[cfg_key(d, n, GP_Q)] = {"capped": True, "cap_s": s.gp_cap}
                log(f"  GP-TuRBO d={d} N={n}: > {s.gp_cap:.0f} s (stopped)")
                continue
            if done.returncode != 0:
                raise RuntimeError(f"gp_turbo.py failed:\n{done.stderr[-3000:]}")
            r = json.loads(done.stdout.strip().splitlines()[-1])
            r["process_s"] = time.perf_counter() - t0
            out[cfg_key(d, n, GP_Q)] = r
            log(
                f"  GP-TuRBO d={d} N={n}: {r['proposal_s']:.2f} s "
                f"(fit {r['fit_s']:.2f}, TS {r['ts_s']:.2f})"
            )
    return out


# --- part 2: quality ----------------------------------------------------------------------


@dataclass
class RunResult:
    method: str
    problem: str
    seed: int
    values: np.ndarray  # every evaluated value, in order
    wall_s: float
    propose_s: float

    @property
    def best(self) -> float:
        return float(np.min(self.values))

    def best_at(self, evals: int) -> float | None:
        if len(self.values) < evals:
            return None
        return float(np.min(self.values[:evals]))


def run_turbo_enn(mode: str, problem_name: str, budget: int, seed: int) -> RunResult:
    d, q = QUALITY_D, QUALITY_Q
    engine = make_engine(ENGINE, {**MODES, **ABLATIONS}[mode])
    problem = make_problem(d)
    rng = np.random.default_rng(seed)
    X = np.zeros((budget, d))
    Y = np.zeros((budget, 1))
    C = np.zeros((budget, 0))
    pending = np.zeros((0, d))
    state: dict[str, Any] = {}
    n = 0
    propose = 0.0
    t0 = time.perf_counter()
    while n < budget:
        count = min(q, budget - n)
        t1 = time.perf_counter()
        proposal = engine.suggest(problem, History(X[:n], Y[:n], C[:n], pending), count, state, rng)
        propose += time.perf_counter() - t1
        X[n : n + count] = proposal.X
        Y[n : n + count, 0] = objective(problem_name, proposal.X)
        state = proposal.state
        n += count
    return RunResult(
        MODE_LABELS[mode], problem_name, seed, Y[:, 0].copy(), time.perf_counter() - t0, propose
    )


def run_sobol(problem_name: str, budget: int, seed: int) -> RunResult:
    from scipy.stats import qmc

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # balance warning for a non-power-of-two count
        U = qmc.Sobol(QUALITY_D, scramble=True, seed=seed).random(budget)
    t1 = time.perf_counter()
    values = objective(problem_name, U)
    return RunResult("Sobol", problem_name, seed, values, time.perf_counter() - t0, t1 - t0)


def run_gp_turbo(problem_name: str, budget: int, seed: int, cap_s: float) -> RunResult:
    """One GP-TuRBO run; stopped early (fewer values) after ``cap_s`` seconds."""
    opt = GPTurbo(d=QUALITY_D, q=QUALITY_Q, seed=seed, warm_start=True)
    values: list[float] = []
    propose = 0.0
    t0 = time.perf_counter()
    while len(values) < budget:
        if time.perf_counter() - t0 > cap_s:
            log(f"    GP-TuRBO {problem_name} seed {seed}: stopped at {len(values)} evaluations")
            break
        t1 = time.perf_counter()
        X = opt.ask()[: budget - len(values)]
        propose += time.perf_counter() - t1
        y = objective(problem_name, X)
        opt.tell(X, y)
        values.extend(float(v) for v in y)
    wall = time.perf_counter() - t0
    log(
        f"    GP-TuRBO {problem_name} seed {seed}: best {min(values):.4g}, restarts "
        f"{opt.restarts}, failed fits so far {FIT_FAILURES[0]}, {wall:.0f} s"
    )
    return RunResult(
        "GP-TuRBO (warm-started fits)", problem_name, seed, np.array(values), wall, propose
    )


def run_ennbo_quality(s: Settings) -> list[RunResult]:
    runs = [
        {
            "problem": p,
            "d": QUALITY_D,
            "budget": s.budget,
            "q": QUALITY_Q,
            "seed": seed,
            "acq": "pareto",
            "num_init": 2 * QUALITY_D,
        }
        for p in PROBLEMS
        for seed in s.seeds
    ]
    res = run_ennbo({"mode": "optimize", "runs": runs}, 3600)
    out = []
    for spec, r in zip(runs, (res or {}).get("results", []), strict=False):
        out.append(
            RunResult(
                "ennbo 0.3.3 PARETO",
                str(spec["problem"]),
                int(spec["seed"]),
                np.array(r["values"]),
                r["wall_s"],
                r["propose_s"],
            )
        )
    return out


def quality(s: Settings) -> list[RunResult]:
    results: list[RunResult] = []
    for problem_name in PROBLEMS:
        for seed in s.seeds:
            for mode in [*MODES, *ABLATIONS]:
                r = run_turbo_enn(mode, problem_name, s.budget, seed)
                log(f"    {r.method} {problem_name} {seed=}: best {r.best:.4g}, {r.wall_s:.1f} s")
                results.append(r)
            results.append(run_sobol(problem_name, s.budget, seed))
    log("  ennbo runs ...")
    results += run_ennbo_quality(s)
    for problem_name in s.gp_problems:
        for seed in s.gp_seeds:
            results.append(run_gp_turbo(problem_name, s.gp_budget, seed, s.gp_run_cap))
    return results


def summarize_quality(results: list[RunResult]) -> dict[str, dict[str, dict[str, Any]]]:
    """problem -> method -> summary."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in results:
        out.setdefault(r.problem, {}).setdefault(r.method, {"runs": []})["runs"].append(r)
    for methods in out.values():
        for summary in methods.values():
            runs: list[RunResult] = summary.pop("runs")
            bests = [r.best for r in runs]
            summary.update(
                evals=min(len(r.values) for r in runs),
                evals_max=max(len(r.values) for r in runs),
                seeds=[r.seed for r in runs],
                median_best=statistics.median(bests),
                min_best=min(bests),
                max_best=max(bests),
                per_seed=bests,
                wall_s_median=statistics.median(r.wall_s for r in runs),
                propose_s_median=statistics.median(r.propose_s for r in runs),
            )
            for c in CHECKPOINTS:
                at = [r.best_at(c) for r in runs]
                vals = [v for v in at if v is not None]
                summary[f"median_best_at_{c}"] = statistics.median(vals) if vals else None
    return out


# --- part 3: service ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def uvicorn_server(tmp: Path, db_url: str) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKTELL_")}
    env.update(PYTHONUNBUFFERED="1", ASKTELL_DATABASE_URL=db_url)
    argv = [sys.executable, "-m", "uvicorn", "service.main:app", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--log-level", "warning"]
    log_path = tmp / f"server-{port}.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{log_path.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not healthy after 60 s:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def fill_study(db_url: str, study_id: int, U: np.ndarray, y: np.ndarray) -> None:
    """Insert ``len(U)`` completed trials as ``n`` tells would leave them, in number order:
    each tell bumps the study's revision and (since migration 0003) stores the new revision in
    the trial's ``completed_seq``, the history order of ``service.history``."""
    from sqlalchemy import create_engine, select, update

    from service.db.models import Study, Trial

    trials_t, studies_t = Trial.__table__, Study.__table__
    has_seq = "completed_seq" in trials_t.c
    n, d = U.shape
    names = [f"x{i}" for i in range(d)]
    Z = LOW + (HIGH - LOW) * U
    now = datetime.now(UTC)
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            revision = int(
                conn.execute(
                    select(studies_t.c.revision).where(studies_t.c.id == study_id)
                ).scalar_one()
            )
            for start in range(0, n, 5000):
                rows = []
                for i in range(start, min(n, start + 5000)):
                    row = {
                        "study_id": study_id,
                        "number": i,
                        "state": "completed",
                        "params": dict(zip(names, Z[i].tolist(), strict=True)),
                        "x": np.ascontiguousarray(U[i], dtype=np.float64).tobytes(),
                        "values": {"value": float(y[i])},
                        "constraints": None,
                        "feasible": True,
                        "reason": None,
                        "worker_id": None,
                        "lease_expires_at": None,
                        "retries": 0,
                        "details": {},
                        "metadata": {},
                        "created_at": now,
                        "started_at": now,
                        "completed_at": now,
                    }
                    if has_seq:
                        row["completed_seq"] = revision + 1 + i
                    rows.append(row)
                conn.execute(trials_t.insert(), rows)
            conn.execute(
                update(studies_t)
                .where(studies_t.c.id == study_id)
                .values(next_trial_number=n, revision=revision + n, updated_at=now)
            )
    finally:
        engine.dispose()


def service_one(tmp: Path, d: int, n: int) -> dict[str, Any]:
    db_url = f"sqlite:///{tmp / f'asktell-d{d}.db'}"
    U, y = timing_data(n, d, seed=7)
    out: dict[str, Any] = {"d": d, "n": n, "q": SERVICE_Q}
    with uvicorn_server(tmp, db_url) as base, httpx.Client(base_url=base, timeout=600) as http:
        params = [{"type": "float", "name": f"x{i}", "low": LOW, "high": HIGH} for i in range(d)]
        body = {
            "name": f"bench-turbo-enn-d{d}",
            "parameters": params,
            "engine": {"name": ENGINE, "options": {}},
            "seed": 0,
        }
        r = http.post("/v1/studies", json=body)
        r.raise_for_status()
        study_id = int(r.json()["id"])
        t0 = time.perf_counter()
        fill_study(db_url, study_id, U, y)
        out["fill_s"] = time.perf_counter() - t0
        counts = http.get(f"/v1/studies/{study_id}").raise_for_status().json()["trial_counts"]
        if counts.get("completed") != n:
            raise RuntimeError(f"the service sees {counts}, expected {n} completed")

        def ask() -> tuple[float, list[dict[str, Any]]]:
            t = time.perf_counter()
            resp = http.post(
                f"/v1/studies/{study_id}/ask", json={"count": SERVICE_Q, "worker_id": "bench"}
            )
            elapsed = time.perf_counter() - t
            resp.raise_for_status()
            trials = resp.json()["trials"]
            if len(trials) != SERVICE_Q:
                raise RuntimeError(f"ask returned {len(trials)} trials")
            return elapsed, trials

        def tell(trials: list[dict[str, Any]]) -> None:
            for t in trials:
                z = np.array([[t["params"][f"x{i}"] for i in range(d)]])
                value = float(objective("ackley", (z - LOW) / (HIGH - LOW))[0])
                http.post(
                    f"/v1/studies/{study_id}/trials/{t['number']}/tell",
                    json={"values": {"value": value}},
                ).raise_for_status()

        cold, trials = ask()
        warm = []
        sources = {str(t.get("details", {}).get("source")) for t in trials}
        for _ in range(SERVICE_ROUNDS):
            tell(trials)
            elapsed, trials = ask()
            warm.append(elapsed)
            sources |= {str(t.get("details", {}).get("source")) for t in trials}
    out.update(service_cold_s=cold, service_warm_s=statistics.median(warm), service_all_s=warm)
    out["sources"] = sorted(sources)

    # The raw engine, same data, same q, same sequence.
    engine = make_engine(ENGINE, {})
    problem = make_problem(d)
    rng = np.random.default_rng(0)
    X, Y = U, y
    t0 = time.perf_counter()
    proposal = engine.suggest(problem, history_of(X, Y), SERVICE_Q, {}, rng)
    raw_cold = time.perf_counter() - t0
    raw_warm = []
    for _ in range(SERVICE_ROUNDS):
        X = np.vstack([X, proposal.X])
        Y = np.concatenate([Y, objective("ackley", proposal.X)])
        t0 = time.perf_counter()
        proposal = engine.suggest(problem, history_of(X, Y), SERVICE_Q, proposal.state, rng)
        raw_warm.append(time.perf_counter() - t0)
    out.update(raw_cold_s=raw_cold, raw_warm_s=statistics.median(raw_warm), raw_all_s=raw_warm)
    out["ratio_warm"] = out["service_warm_s"] / out["raw_warm_s"]
    out["ratio_cold"] = out["service_cold_s"] / out["raw_cold_s"]
    return out


def service(s: Settings) -> dict[int, dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="asktell-bench-enn-"))
    try:
        out = {}
        for d in s.service_dims:
            out[d] = service_one(tmp, d, s.service_n)
            r = out[d]
            log(
                f"  service d={d} N={s.service_n}: fill {r['fill_s']:.1f} s, cold ask "
                f"{r['service_cold_s']:.3f} s, warm {r['service_warm_s']:.3f} s; raw "
                f"{r['raw_cold_s']:.3f} / {r['raw_warm_s']:.3f} s"
            )
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- report -------------------------------------------------------------------------------


def check(value: float | None, target: float, below: bool = True) -> dict[str, Any]:
    met = None if value is None else (value <= target if below else value >= target)
    return {"value": value, "target": f"{'<=' if below else '>='} {target:g}", "met": met}


def print_timing(
    s: Settings,
    enn: dict[str, dict[str, Any]],
    ennbo: dict[str, dict[str, Any]],
    gp: dict[str, dict[str, Any]],
) -> None:
    print("\n## 1. Proposal time (fit + acquisition), seconds")
    print(
        "turbo-enn: median of 3 cold `suggest` calls; ennbo: median of 3 steady tell(1)+ask(q) "
        "after a cold tell of N; GP-TuRBO: one cold fit + Thompson sampling (q = 4 only)."
    )
    ns = sorted({*s.enn_n, *(s.gp_n if gp else [])})
    for q in QS:
        print(f"\n### q = {q}\n")
        head = "| d | N | turbo-enn noisy=false | turbo-enn noisy=true | ennbo PARETO | ennbo UCB "
        head += "| ennbo cold tell | GP-TuRBO | GP / turbo-enn | ennbo / turbo-enn |"
        print(head)
        print("|" + "---:|" * 10)
        for d in DIMS:
            for n in ns:
                k = cfg_key(d, n, q)
                ours = enn["nds"].get(k, {}).get("median_s") if enn else None
                noisy = enn["noisy"].get(k, {}).get("median_s") if enn else None
                pareto = ennbo.get("pareto", {}).get(k, {})
                ucb = ennbo.get("ucb", {}).get(k, {})
                g = gp.get(k)
                if ours is None and g is None and not pareto:
                    continue
                if g is None:
                    gp_txt, ratio = "-", "-"
                elif g.get("capped"):
                    gp_txt = f"> {g['cap_s']:.0f}"
                    ratio = f"> {g['cap_s'] / ours:.0f}" if ours else "-"
                else:
                    gp_txt = fmt_s(g["proposal_s"])
                    ratio = f"{g['proposal_s'] / ours:.0f}" if ours else "-"
                vs_ennbo = (
                    f"{pareto['proposal_s'] / ours:.2f}"
                    if ours and pareto.get("proposal_s")
                    else "-"
                )
                print(
                    f"| {d} | {n:,} | {fmt_s(ours)} | {fmt_s(noisy)} | "
                    f"{fmt_s(pareto.get('proposal_s'))} | {fmt_s(ucb.get('proposal_s'))} | "
                    f"{fmt_s(pareto.get('cold_tell_s'))} | {gp_txt} | {ratio} | {vs_ennbo} |"
                )
    if gp:
        print(
            "\nGP-TuRBO split (s): "
            + "; ".join(
                f"{k}: fit {v['fit_s']:.2f} + TS {v['ts_s']:.2f}"
                for k, v in gp.items()
                if not v.get("capped")
            )
        )


def print_quality(s: Settings, q: dict[str, dict[str, dict[str, Any]]]) -> None:
    print(f"\n## 2. Quality, d = {QUALITY_D}, q = {QUALITY_Q}, best value found (f* = 0)\n")
    print(
        "| problem | method | evals | seeds | median best | min | max | @200 | @500 | @1000 "
        "| wall s/run | propose s/run |"
    )
    print("|---|---|" + "---:|" * 10)
    for problem, methods in q.items():
        for method, m in methods.items():
            at = [fmt_best(m.get(f"median_best_at_{c}")) for c in (200, 500, 1000)]
            print(
                f"| {problem}-{QUALITY_D} | {method} | {evals_txt(m)} | {len(m['seeds'])} | "
                f"{fmt_best(m['median_best'])} | {fmt_best(m['min_best'])} | "
                f"{fmt_best(m['max_best'])} | {' | '.join(at)} | {m['wall_s_median']:.1f} | "
                f"{m['propose_s_median']:.1f} |"
            )
    print(
        "(@E = median over seeds of the best after E evaluations; GP-TuRBO fits are warm-started)"
    )


def evals_txt(m: dict[str, Any]) -> str:
    if m["evals"] == m["evals_max"]:
        return str(m["evals"])
    return f"{m['evals']}-{m['evals_max']} (capped)"


def fmt_best(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def print_service(svc: dict[int, dict[str, Any]]) -> None:
    print(f"\n## 3. Service: ask(q = {SERVICE_Q}) on a study with N completed trials, seconds\n")
    print(
        "| d | N | fill s | service first ask | service warm (median of 5) | raw first "
        "| raw warm | warm ratio | first ratio |"
    )
    print("|" + "---:|" * 9)
    for d, r in svc.items():
        print(
            f"| {d} | {r['n']:,} | {r['fill_s']:.1f} | {fmt_s(r['service_cold_s'])} | "
            f"{fmt_s(r['service_warm_s'])} | {fmt_s(r['raw_cold_s'])} | {fmt_s(r['raw_warm_s'])} "
            f"| {r['ratio_warm']:.2f} | {r['ratio_cold']:.2f} |"
        )
    print("(first = cold: the study's config, the history and the engine load in the server)")


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced grids, 1 seed: < 5 min")
    parser.add_argument(
        "--parts", default="timing,quality,service", help="comma list of timing,quality,service"
    )
    parser.add_argument("--seeds", type=int, help="quality seeds (default 5, quick 1)")
    parser.add_argument("--budget", type=int, help="quality evaluations (default 2000)")
    parser.add_argument("--gp-seeds", type=int, help="GP-TuRBO quality seeds (default 3)")
    parser.add_argument("--gp-budget", type=int, help="GP-TuRBO evaluations (default 1000)")
    parser.add_argument(
        "--gp-problems", help="GP-TuRBO quality problems (default ackley; +rosenbrock: +30 min)"
    )
    parser.add_argument("--gp-cap", type=float, help="seconds per GP timing (default 240)")
    parser.add_argument(
        "--gp-run-cap", type=float, help="seconds per GP-TuRBO quality run (default 900)"
    )
    parser.add_argument("--service-n", type=int, help="service study size (default 50000)")
    parser.add_argument("--plan", action="store_true", help="print the plan and exit")
    args = parser.parse_args(argv)
    s = Settings.from_args(args)
    torch.set_num_threads(2)  # the benchmark machine has 2 cores
    signal.signal(signal.SIGTERM, _interrupt)
    wall0 = time.perf_counter()
    version = code_version(*CODE_PATHS)

    est = plan_estimate(s)
    print(
        f"# bench/turbo_enn.py ({'quick' if s.quick else 'full'}), asktell {version}; "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, torch threads "
        f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        "plan (estimated seconds on an idle machine): "
        + ", ".join(f"{k} {v:.0f}" for k, v in est.items())
        + f"; total about {sum(est.values()) / 60:.0f} min"
    )
    print(
        f"grid: turbo-enn/ennbo N {s.enn_n}, d {DIMS}, q {QS}; GP-TuRBO N {s.gp_n}, d "
        f"{s.gp_dims}, q {GP_Q}, cap {s.gp_cap:.0f} s, {n_candidates(20)}/{n_candidates(100)} "
        f"candidates; quality {s.budget} evals x {len(s.seeds)} seeds, GP-TuRBO {s.gp_budget} "
        f"x {len(s.gp_seeds)} on {s.gp_problems}; service N {s.service_n}, d {s.service_dims}",
        flush=True,
    )
    if args.plan:
        return 0

    enn: dict[str, dict[str, Any]] = {}
    ennbo: dict[str, dict[str, Any]] = {}
    gp: dict[str, dict[str, Any]] = {}
    qual: dict[str, dict[str, dict[str, Any]]] = {}
    svc: dict[int, dict[str, Any]] = {}
    part_s: dict[str, float] = {}
    try:
        if "timing" in s.parts:
            t0 = time.perf_counter()
            log("part 1: turbo-enn proposal time ...")
            enn = time_turbo_enn(s)
            part_s["timing turbo-enn"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            log("part 1: ennbo 0.3.3 (subprocess) ...")
            ennbo = time_ennbo(s)
            part_s["timing ennbo"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            log("part 1: GP-TuRBO (one process per config) ...")
            gp = time_gp_turbo(s)
            part_s["timing GP-TuRBO"] = time.perf_counter() - t0
        if "quality" in s.parts:
            t0 = time.perf_counter()
            log("part 2: quality ...")
            qual = summarize_quality(quality(s))
            part_s["quality"] = time.perf_counter() - t0
        if "service" in s.parts:
            t0 = time.perf_counter()
            log("part 3: service ...")
            svc = service(s)
            part_s["service"] = time.perf_counter() - t0
    except KeyboardInterrupt:
        log("interrupted")
        return 130

    # --- headline figures and targets ---
    def ours(d: int, n: int, q: int, mode: str = "nds") -> float | None:
        return enn.get(mode, {}).get(cfg_key(d, n, q), {}).get("median_s")

    def ennbo_s(d: int, n: int, q: int, acq: str = "pareto") -> float | None:
        return ennbo.get(acq, {}).get(cfg_key(d, n, q), {}).get("proposal_s")

    g2000 = gp.get(cfg_key(20, 2000, GP_Q))
    e2000 = ours(20, 2000, GP_Q)
    speedup = speedup_lb = None
    if g2000 and e2000:
        if g2000.get("capped"):
            speedup, speedup_lb = g2000["cap_s"] / e2000, True
        else:
            speedup, speedup_lb = g2000["proposal_s"] / e2000, False
    small = {
        k: v["median_s"]
        for k, v in enn.get("nds", {}).items()
        if int(k.split("_n")[1].split("_")[0]) <= 2000
    }
    small_noisy = {
        k: v["median_s"]
        for k, v in enn.get("noisy", {}).items()
        if int(k.split("_n")[1].split("_")[0]) <= 2000
    }
    worst_small = max(small.values()) if small else None
    big = ours(100, 50_000, 50)
    svc20 = svc.get(20)
    svc_50k = svc20 is not None and s.service_n == SERVICE_N

    def qmed(problem: str, method: str, key: str = "median_best") -> float | None:
        return qual.get(problem, {}).get(method, {}).get(key)

    gp_method = "GP-TuRBO (warm-started fits)"
    ackley = qmed("ackley", MODE_LABELS["nds"])
    ennbo_ack = qmed("ackley", "ennbo 0.3.3 PARETO")
    ours_ros = qmed("rosenbrock", MODE_LABELS["nds"])
    ennbo_ros = qmed("rosenbrock", "ennbo 0.3.3 PARETO")
    vs_ennbo = {
        k: round(v["median_s"] / ennbo["pareto"][k]["proposal_s"], 3)
        for k, v in enn.get("nds", {}).items()
        if k in ennbo.get("pareto", {})
    }
    ennbo_big = ennbo_s(100, 50_000, 50)
    targets = {
        "speedup_vs_gp_n2000_d20": check(speedup, GP_SPEEDUP_MIN, below=False),
        "proposal_n_le_2000": check(worst_small, SMALL_N_MAX_S),
        "proposal_n50000_d100_q50": check(big, BIG_N_MAX_S),
        "service_vs_raw": check(svc20["ratio_warm"] if svc20 else None, SERVICE_RATIO_MAX),
        "ackley20_median_best": check(ackley, ACKLEY_BEST_MAX),
        "no_slower_than_ennbo_n50000_d100_q50": check(
            big / ennbo_big if big and ennbo_big else None, 1.0
        ),
        "no_slower_than_ennbo_all_configs": check(
            max(vs_ennbo.values()) if vs_ennbo else None, 1.0
        ),
        "no_worse_than_ennbo_ackley20": check(
            ackley - ennbo_ack if ackley is not None and ennbo_ack is not None else None, 0.0
        ),
        "no_worse_than_ennbo_rosenbrock20": check(
            ours_ros - ennbo_ros if ours_ros is not None and ennbo_ros is not None else None, 0.0
        ),
    }

    if enn or gp or ennbo:
        print_timing(s, enn, ennbo, gp)
    if qual:
        print_quality(s, qual)
    if svc:
        print_service(svc)
    print("\n## Targets\n")
    print("| target | value | goal | result |\n|---|---:|---:|---|")
    for name, t in targets.items():
        v = "n/a" if t["value"] is None else f"{t['value']:.4g}"
        res = {True: "MET", False: "MISSED", None: "not measured"}[t["met"]]
        print(f"| {name} | {v} | {t['target']} | {res} |")
    print(
        "(no_slower: turbo-enn / ennbo PARETO time ratio; no_worse: turbo-enn median best minus "
        "ennbo's; proposal_n_le_2000: the slowest default-mode config with N <= 2,000)"
    )
    if speedup_lb:
        print("(GP-TuRBO hit the cap at N = 2,000, d = 20: the speedup is a lower bound)")
    if s.quick:
        print("(--quick: reduced grids and budgets; the targets are indicative only)")
    wall = time.perf_counter() - wall0
    print(
        f"\nwall time {wall:.1f} s ({wall / 60:.1f} min); parts: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in part_s.items())
        + f"; load average at the end {os.getloadavg()[0]:.2f}"
    )

    r4 = lambda v: None if v is None else round(float(v), 4)  # noqa: E731
    out: dict[str, Any] = {
        "bench": "turbo_enn",
        "quick": s.quick,
        "code_version": version,
        "enn_vs_gp_speedup_n2000_d20": None if speedup is None else round(speedup, 1),
        "enn_vs_gp_speedup_is_lower_bound": speedup_lb,
        "enn_proposal_s_n2000_d20_q4": r4(e2000),
        "gp_turbo_proposal_s_n2000_d20_q4": r4(g2000.get("proposal_s")) if g2000 else None,
        "enn_proposal_s_n50000_d100_q50": r4(big),
        "enn_noisy_proposal_s_n50000_d100_q50": r4(ours(100, 50_000, 50, "noisy")),
        "ennbo_proposal_s_n50000_d100_q50": r4(ennbo_big),
        "ennbo_ucb_proposal_s_n50000_d100_q50": r4(ennbo_s(100, 50_000, 50, "ucb")),
        "enn_max_proposal_s_n_le_2000": r4(worst_small),
        "enn_noisy_max_proposal_s_n_le_2000": r4(
            max(small_noisy.values()) if small_noisy else None
        ),
        "enn_max_proposal_s_n_le_2000_d20": r4(
            max((v for k, v in small.items() if k.startswith("d20_")), default=None)
        ),
        "service_ask_s_n50000": r4(svc20["service_warm_s"]) if svc_50k else None,
        "service_ask_s": r4(svc20["service_warm_s"]) if svc20 else None,
        "service_first_ask_s": r4(svc20["service_cold_s"]) if svc20 else None,
        "raw_suggest_s": r4(svc20["raw_warm_s"]) if svc20 else None,
        "raw_first_suggest_s": r4(svc20["raw_cold_s"]) if svc20 else None,
        "service_vs_raw_ratio": r4(svc20["ratio_warm"]) if svc20 else None,
        "service_n": s.service_n,
        "service_d100_ask_s": r4(svc[100]["service_warm_s"]) if 100 in svc else None,
        "service_d100_vs_raw_ratio": r4(svc[100]["ratio_warm"]) if 100 in svc else None,
        "ackley20_median_best": r4(ackley),
        "ackley20_noisy_median_best": r4(qmed("ackley", MODE_LABELS["noisy"])),
        "rosenbrock20_median_best": r4(ours_ros),
        "rosenbrock20_noisy_median_best": r4(qmed("rosenbrock", MODE_LABELS["noisy"])),
        "ackley20_keepdata_median_best": r4(qmed("ackley", MODE_LABELS["nds-keep"])),
        "rosenbrock20_keepdata_median_best": r4(qmed("rosenbrock", MODE_LABELS["nds-keep"])),
        "ennbo_ackley20_median_best": r4(ennbo_ack),
        "ennbo_rosenbrock20_median_best": r4(ennbo_ros),
        "sobol_ackley20_median_best": r4(qmed("ackley", "Sobol")),
        "sobol_rosenbrock20_median_best": r4(qmed("rosenbrock", "Sobol")),
        # Only when every run reached 1,000 evaluations (not stopped by --gp-run-cap).
        "gp_turbo_ackley20_median_best_1000": (
            r4(qmed("ackley", gp_method)) if qmed("ackley", gp_method, "evals") == 1000 else None
        ),
        "gp_turbo_rosenbrock20_median_best_1000": (
            r4(qmed("rosenbrock", gp_method))
            if qmed("rosenbrock", gp_method, "evals") == 1000
            else None
        ),
        "gp_turbo_evals_min": qmed("ackley", gp_method, "evals"),
        "gp_turbo_evals": s.gp_budget,
        "gp_turbo_ackley20_median_best": r4(qmed("ackley", gp_method)),
        "gp_turbo_rosenbrock20_median_best": r4(qmed("rosenbrock", gp_method)),
        "ackley20_median_best_at_1000": r4(
            qmed("ackley", MODE_LABELS["nds"], "median_best_at_1000")
        ),
        "rosenbrock20_median_best_at_1000": r4(
            qmed("rosenbrock", MODE_LABELS["nds"], "median_best_at_1000")
        ),
        "ennbo_ackley20_median_best_at_1000": r4(
            qmed("ackley", "ennbo 0.3.3 PARETO", "median_best_at_1000")
        ),
        "proposal_s": {
            **{
                f"turbo-enn-{m}": {k: r4(v["median_s"]) for k, v in enn.get(m, {}).items()}
                for m in MODES
            },
            **{
                f"ennbo-{a}": {k: r4(v["proposal_s"]) for k, v in ennbo.get(a, {}).items()}
                for a in ("pareto", "ucb")
            },
            "gp-turbo": {
                k: (f"> {v['cap_s']:.0f}" if v.get("capped") else r4(v["proposal_s"]))
                for k, v in gp.items()
            },
        },
        "enn_vs_ennbo_time_ratio": vs_ennbo,
        "quality": {
            p: {
                m: {
                    k: (r4(v) if isinstance(v, float) else v)
                    for k, v in summary.items()
                    if k not in ("per_seed",)
                }
                | {"per_seed": [r4(v) for v in summary["per_seed"]]}
                for m, summary in methods.items()
            }
            for p, methods in qual.items()
        },
        "service": {
            str(d): {k: (r4(v) if isinstance(v, float) else v) for k, v in r.items()}
            for d, r in svc.items()
        },
        "config": {
            "enn_n": s.enn_n,
            "dims": DIMS,
            "qs": QS,
            "reps": REPS,
            "gp_n": s.gp_n,
            "gp_dims": s.gp_dims,
            "gp_cap_s": s.gp_cap,
            "gp_quality_warm_start": True,
            "gp_run_cap_s": s.gp_run_cap,
            "budget": s.budget,
            "seeds": s.seeds,
            "gp_budget": s.gp_budget,
            "gp_seeds": s.gp_seeds,
            "gp_problems": s.gp_problems,
            "service_dims": s.service_dims,
            "torch_threads": torch.get_num_threads(),
        },
        "gp_turbo_failed_fits": FIT_FAILURES[0],
        "plan_estimate_s": {k: round(v) for k, v in est.items()},
        "part_s": {k: round(v, 1) for k, v in part_s.items()},
    }
    for name, t in targets.items():
        out[f"target_{name}"] = r4(t["value"])
        out[f"target_{name}_met"] = t["met"]
    out["wall_s"] = round(wall, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
