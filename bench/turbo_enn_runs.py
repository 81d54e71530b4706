"""The turbo_enn bench's proposal timings (part 1) and quality runs (part 2): turbo-enn
through the engine contract, GP-TuRBO (``bench/gp_turbo.py``), Sobol and the ennbo package in
its own process (``bench/_ennbo_run.py``). ``bench/turbo_enn.py`` describes each."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bench._ennbo_run import HIGH, LOW, objective, timing_data
from bench.gp_turbo import FIT_FAILURES, GPTurbo
from bench.harness import EngineMethod, history_of, log
from bench.version import ROOT
from engines.base import History, Problem
from engines.registry import make_engine
from engines.space import FloatParam, SearchSpace

if TYPE_CHECKING:
    from bench.turbo_enn import Settings

ENGINE = "turbo-enn"
#: turbo-enn modes: label -> engine options.
MODES: dict[str, dict[str, Any]] = {"nds": {"noisy": False}, "noisy": {"noisy": True}}
MODE_LABELS = {"nds": "turbo-enn noisy=false", "noisy": "turbo-enn noisy=true"}
#: Quality only: TuRBO's box region (the default before the CMA region), and the box with the
#: ennbo package's restart (the region keeps its data and centre).
ABLATIONS: dict[str, dict[str, Any]] = {
    "box": {"noisy": False, "trust_region": "box"},
    "box-keep": {"noisy": False, "trust_region": "box", "restart_keeps_data": True},
}
MODE_LABELS["box"] = "turbo-enn box region (ablation)"
MODE_LABELS["box-keep"] = "turbo-enn box, restart keeps data (ablation)"
DIMS = [20, 100]
QS = [4, 50]
REPS = 3
GP_Q = 4
QUALITY_D = 20
QUALITY_Q = 4
PROBLEMS = ["ackley", "rosenbrock"]
CHECKPOINTS = [200, 500, 1000, 2000]
ENNBO_LABEL = "ennbo 0.3.3 PARETO"
GP_LABEL = "GP-TuRBO (warm-started fits)"


def cfg_key(d: int, n: int, q: int) -> str:
    return f"d{d}_n{n}_q{q}"


def make_problem(d: int) -> Problem:
    return Problem(SearchSpace([FloatParam(f"x{i}", LOW, HIGH) for i in range(d)]))


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
            [sys.executable, "-m", "bench._ennbo_run"],
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
    engine = EngineMethod(
        ENGINE, {**MODES, **ABLATIONS}[mode], make_problem(d), np.random.default_rng(seed)
    )
    X = np.zeros((budget, d))
    Y = np.zeros((budget, 1))
    C = np.zeros((budget, 0))
    pending = np.zeros((0, d))
    n = 0
    propose = 0.0
    t0 = time.perf_counter()
    while n < budget:
        count = min(q, budget - n)
        t1 = time.perf_counter()
        proposal = engine.suggest(History(X[:n], Y[:n], C[:n], pending), count)
        propose += time.perf_counter() - t1
        X[n : n + count] = proposal.X
        Y[n : n + count, 0] = objective(problem_name, proposal.X)
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
    return RunResult(GP_LABEL, problem_name, seed, np.array(values), wall, propose)


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
                ENNBO_LABEL,
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
