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
import math
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bench.harness import (
    Bench,
    Grid,
    Job,
    fmt,
    log,
    markdown_table,
    print_notes,
    print_target_table,
    round4,
    unit_problem,
)
from bench.lcbo_peers import (
    PROBLEMS,
    SPECS,
    Evaluator,
    LcboPeer,
    Q,
    initial_design,
    make_method,
    run_notes,
)
from engines.base import History
from engines.registry import make_engine

#: The files whose changes make the reported code version "+dirty".
CODE_PATHS = ("engines", "bench/lcbo.py", "bench/scbo.py")

METHODS = ["lcbo", "scbo", "tpe", "sobol"]
LABELS = {"lcbo": "LCBO (engine)", "scbo": "SCBO", "tpe": "TPE (Optuna)", "sobol": "Sobol"}
BUDGET_MIN = 88.0
QUICK_BUDGET_MIN = 5.0
ASK_TARGET_S = 2.0
WINS_NEEDED = 4  # of 6 problems; ceil(2/3 of them) with fewer
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


def worker_setup() -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")


def run_one(job: Job, budgets: dict[str, int]) -> dict[str, Any]:
    """One (problem, method, seed) run in a worker process, to its problem's budget; its
    metrics."""
    spec, budget = SPECS[job.problem], budgets[job.problem]
    f_of = Evaluator(spec)
    t_run = time.perf_counter()
    U0, sobol = initial_design(spec, job.seed)
    f0, C0 = f_of(U0)
    X, f, C = U0.copy(), f0.copy(), C0.copy()
    method = make_method(job.method, spec, job.seed, sobol)
    method.start(U0, f0[:, None], C0)
    ask_s = []
    while len(X) < budget:
        t0 = time.perf_counter()
        n = min(Q, budget - len(X))
        # A batch of Q points, or n < Q for the last batch of a budget (the model-based
        # methods propose Q and the rest is dropped; TPE asks only n trials).
        U = method.propose(History(X, f[:, None], C, np.zeros((0, spec.d))), n)[:n]
        ask_s.append(time.perf_counter() - t0)
        if U.shape[1:] != (spec.d,) or not np.all(np.isfinite(U)):
            raise RuntimeError(f"{job.method} proposed {U.shape}")
        f_new, C_new = f_of(np.clip(U, 0.0, 1.0))
        method.tell(U, f_new[:, None], C_new)
        X, f, C = np.vstack([X, U]), np.concatenate([f, f_new]), np.vstack([C, C_new])
    feasible = np.all(C <= 0, axis=1)
    return {
        "problem": job.problem,
        "method": job.method,
        "seed": job.seed,
        "n": len(X),
        "best": float(f[feasible].min()) if feasible.any() else None,
        "first_feasible": int(np.argmax(feasible)) + 1 if feasible.any() else None,
        "ask_s": statistics.fmean(ask_s) if ask_s else None,
        "run_s": time.perf_counter() - t_run,
        "kkt_residual": method.state.get("kkt_residual") if isinstance(method, LcboPeer) else None,
        "notes": run_notes(method),
    }


def time_ask_d100(threads: int = 2) -> dict[str, float]:
    """LCBO asks at d = 100 with 1,000 observations (module docstring), in seconds."""
    torch.set_num_threads(threads)
    spec = SPECS["ackley100"]
    rng = np.random.default_rng(0)
    X = rng.random((1000, spec.d))
    f, C = Evaluator(spec)(X)
    problem = unit_problem(spec.d, 2)
    engine = make_engine("lcbo")
    history = History(X, f[:, None], C, np.zeros((0, spec.d)))
    times, state = [], {}
    for i in range(4):
        t0 = time.perf_counter()
        state = engine.suggest(problem, history, Q, state, np.random.default_rng(i)).state
        times.append(time.perf_counter() - t0)
    return {"cold": times[0], "warm": statistics.median(times[1:])}


# --- the plan and the grid ------------------------------------------------------------------


@dataclass
class Plan:
    """The problems, methods, budgets and seeds of this run, and the jobs in their order."""

    quick: bool
    problems: list[str]
    methods: list[str]
    budgets: dict[str, int]
    seeds: dict[str, int]
    budget_min: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Plan:
        problems = args.problems.split(",") if args.problems else PROBLEMS
        chosen = args.methods.split(",") if args.methods else METHODS
        if unknown := [p for p in problems if p not in SPECS]:
            raise SystemExit(f"unknown problem(s) {unknown}; choose from {PROBLEMS}")
        quick = bool(args.quick)
        return cls(
            quick=quick,
            problems=problems,
            methods=[m for m in METHODS if m in chosen],
            budgets={
                p: SPECS[p].n_init + Q * QUICK_ASKS if quick else SPECS[p].budget for p in problems
            },
            seeds={p: args.seeds or (1 if quick else SPECS[p].seeds) for p in problems},
            budget_min=args.budget_min or (QUICK_BUDGET_MIN if quick else BUDGET_MIN),
        )

    def estimate(self, p: str, m: str) -> float:
        return EST_S_PER_ASK[m][p] * math.ceil((self.budgets[p] - SPECS[p].n_init) / Q) + 1.0

    def jobs(self) -> list[Job]:
        """TPE and Sobol first (seconds each: the guard must never drop them), then the
        longest first, so the two workers finish together."""
        jobs = [
            Job(p, m, s) for p in self.problems for m in self.methods for s in range(self.seeds[p])
        ]
        return sorted(
            jobs,
            key=lambda j: (j.method not in ("tpe", "sobol"), -self.estimate(j.problem, j.method)),
        )

    def print(self, workers: int) -> None:
        total_est = sum(self.estimate(j.problem, j.method) for j in self.jobs())
        print("plan (estimated seconds of one worker, beside the other):")
        for p in self.problems:
            parts = ", ".join(
                f"{m} {self.estimate(p, m) * self.seeds[p]:.0f}" for m in self.methods
            )
            print(f"  {p} ({self.budgets[p]} evaluations, {self.seeds[p]} seeds): {parts}")
        print(
            f"  total about {total_est / 60:.0f} worker-min, {total_est / 60 / workers:.0f} min "
            f"on {workers} workers; deadline guard at {self.budget_min:g} min",
            flush=True,
        )


def run_all(plan: Plan, bench: Bench) -> tuple[list[dict[str, Any]], dict[str, float], Grid]:
    """The d = 100 ask timing, then every run; the runs, the timing and the grid."""
    done: list[dict[str, Any]] = []
    timing: dict[str, float] = {}

    def record(job: Job, r: dict[str, Any]) -> None:
        done.append(r)
        bench.progress(
            f"  {r['problem']} {r['method']} seed {r['seed']}: best {fmt(r['best'])}, first "
            f"feasible {r['first_feasible']}, {fmt(r['ask_s'], 3)} s/ask, {r['run_s']:.0f} s"
        )

    with Grid(bench, plan.budget_min, initializer=worker_setup) as grid:
        if "lcbo" in plan.methods:
            log("timing an LCBO ask at d = 100 with 1,000 observations ...")
            timing = time_ask_d100()
            log(f"  cold {timing['cold']:.2f} s, warm {timing['warm']:.2f} s")
        grid.run(
            run_one,
            plan.jobs(),
            record,
            plan.budgets,
            need_s=lambda j: plan.estimate(j.problem, j.method),
        )
    return done, timing, grid


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
    plan = Plan.from_args(args)
    bench = Bench("lcbo", plan.quick, CODE_PATHS)
    bench.header("2 workers x 1 torch thread")
    plan.print(2)
    if args.plan:
        return 0
    done, timing, grid = run_all(plan, bench)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for p in plan.problems:
        for m in plan.methods:
            runs = sorted(
                (r for r in done if r["problem"] == p and r["method"] == m),
                key=lambda r: r["seed"],
            )
            if runs:
                results.setdefault(p, {})[m] = summarize(runs)
    print_results(plan, results)
    targets = lcbo_targets(plan, results, done, timing)
    print_targets(targets, timing, grid)
    out = json_line(plan, results, targets, timing, grid, bench.version)
    bench.report(out)
    return 130 if grid.interrupted else 0


def print_results(plan: Plan, results: dict[str, dict[str, dict[str, Any]]]) -> None:
    print("\n## Results: median over seeds (min - max)\n")
    header = ["problem", "best known", "method", "seeds", "best feasible", "feasible seeds"]
    header += ["evals to first feasible", "s / ask"]
    rows = [
        [
            SPECS[p].label,
            fmt(SPECS[p].best_known),
            LABELS[m],
            r["seeds"],
            f"{fmt(r['best'])} ({fmt(r['best_min'], 3)} - {fmt(r['best_max'], 3)})",
            f"{r['feasible_share']:.0%}",
            fmt(r["first_feasible"], 3),
            fmt(r["ask_s"], 3),
        ]
        for p in plan.problems
        for m in plan.methods
        if (r := results.get(p, {}).get(m)) is not None
    ]
    markdown_table(header, rows, "lrlrrrrr")
    print(
        "(budgets: "
        + ", ".join(f"{p} {plan.budgets[p]}" for p in plan.problems)
        + f" evaluations, q = {Q}, shared Sobol design of min(max(10, d), 100) points)"
    )
    print_notes(
        "Notes (any seed)",
        results,
        plan.problems,
        plan.methods,
        lambda p, m: f"{SPECS[p].label} {LABELS[m]}",
    )


@dataclass
class Targets:
    compared: list[str]
    wins: list[str]
    missing_feasible: list[str]
    #: name -> (value, goal, met)
    rows: dict[str, tuple[Any, str, bool]]
    best: dict[str, tuple[float | None, float | None]]


def lcbo_targets(
    plan: Plan,
    results: dict[str, dict[str, dict[str, Any]]],
    done: list[dict[str, Any]],
    timing: dict[str, float],
) -> Targets:
    def get(p: str, m: str, k: str) -> Any:
        return results.get(p, {}).get(m, {}).get(k)

    compared = [p for p in plan.problems if get(p, "lcbo", "seeds") and get(p, "scbo", "seeds")]
    wins = [p for p in compared if better(get(p, "lcbo", "best"), get(p, "scbo", "best"))]
    need = min(WINS_NEEDED, math.ceil(2 * len(compared) / 3))
    missing_feasible = []
    for r in done:
        if r["method"] == "scbo" and r["best"] is not None:
            mine = [x for x in done if x["method"] == "lcbo" and x["problem"] == r["problem"]]
            mine = [x for x in mine if x["seed"] == r["seed"]]
            if mine and mine[0]["best"] is None:
                missing_feasible.append(f"{r['problem']} seed {r['seed']}")
    rows = {
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
    best = {p: (get(p, "lcbo", "best"), get(p, "scbo", "best")) for p in compared}
    return Targets(compared, wins, missing_feasible, rows, best)


def print_targets(t: Targets, timing: dict[str, float], grid: Grid) -> None:
    print("\n## Targets\n")
    markdown_table(
        ["problem", "LCBO median best", "SCBO median best", "LCBO better"],
        (
            [SPECS[p].label, fmt(t.best[p][0]), fmt(t.best[p][1]), "yes" if p in t.wins else "no"]
            for p in t.compared
        ),
        "lrrl",
    )
    print()
    print_target_table((name, value, goal, met) for name, (value, goal, met) in t.rows.items())
    if timing:
        print(f"(the cold d = 100 ask, no state: {timing['cold']:.2f} s)")
    if t.missing_feasible:
        print(f"(LCBO infeasible where SCBO is feasible: {', '.join(t.missing_feasible)})")
    if grid.skipped:
        print(f"(left out by the deadline guard: {', '.join(grid.skipped)})")
    if grid.interrupted:
        print("(INTERRUPTED: partial results)")


def json_line(
    plan: Plan,
    results: dict[str, dict[str, dict[str, Any]]],
    t: Targets,
    timing: dict[str, float],
    grid: Grid,
    version: str,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "bench": "lcbo",
        "quick": plan.budgets != {p: SPECS[p].budget for p in plan.problems},
        "interrupted": grid.interrupted,
        "code_version": version,
        "lcbo_wins_vs_scbo": t.wins,
        "problems_compared": t.compared,
        "lcbo_infeasible_where_scbo_feasible": t.missing_feasible,
        "lcbo_ask_s_d100": round4(timing.get("warm")),
        "lcbo_ask_s_d100_cold": round4(timing.get("cold")),
    }
    for name, (value, goal, met) in t.rows.items():
        out[f"target_{name}"] = round4(value)
        out[f"target_{name}_goal"] = goal
        out[f"target_{name}_met"] = met
    out["problems"] = {
        p: {
            "d": SPECS[p].d,
            "constraints": SPECS[p].k,
            "budget": plan.budgets[p],
            "best_known": SPECS[p].best_known,
            **{
                f"{m}_{k}": (round4(v) if not isinstance(v, dict | list) else v)
                for m, r in methods_r.items()
                for k, v in r.items()
            },
        }
        for p, methods_r in results.items()
    }
    out["skipped"] = grid.skipped
    out["config"] = {"q": Q, "workers": grid.workers, "torch_threads_per_worker": 1}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
