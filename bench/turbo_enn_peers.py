"""Issue 22, the ``turbo-enn`` engine against what a user would pick instead: Optuna 5's
``CmaEsSampler`` at its defaults and the TuRBO-ENN authors' ``ennbo`` package (0.3.3, in its
own process: ``bench/_ennbo_run.py``), on ten functions of COCO's ``bbob`` suite
(``bench/bbob.py``: instance 1, d = 20, the tuning half and the held-out half), 2,000
evaluations, 3 seeds. ``turbo-enn`` (at its defaults, through the engine contract) and
``ennbo`` are asked 4 points at a time, as in ``bench/turbo_enn.py``; CMA-ES one trial at a
time (it keeps its own generations). Optuna's TPE is left out: at 2,000 trials its ask takes
about 0.1 s, an hour of runs, and it trails the others on such budgets.

A fourth method, ``turbo-enn box``, is ``turbo-enn`` with ``trust_region: "box"`` (TuRBO's
box, the default before the CMA region): the region is decided on the tuning half by comparing
the two.

Figures per (function, method): the median over seeds of the regret ``best f - f_opt`` after
the evaluations, with the seeds' range, and the run's wall seconds. Targets (issue 22), on the
held-out half: ``turbo-enn``'s median regret at most CMA-ES's on most functions, and at most
ennbo's on every one.

    .venv/bin/python -m bench.turbo_enn_peers           # full: 10 functions x 3 methods x 3
    .venv/bin/python -m bench.turbo_enn_peers --quick   # 2 functions, 1 seed, 200 evaluations
    .venv/bin/python -m bench.turbo_enn_peers --functions 1,6,10,15,20   # the tuning half

Needs the ``bench`` extra (coco-experiment, cmaes, ennbo with ``--no-deps``). Each run is one
process of a 2-worker grid. Progress goes to stderr; the tables and the JSON line to stdout.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from bench.bbob import (
    HELD_OUT,
    TUNING,
    Objective,
    at_most,
    f_opt,
    print_regret_table,
    regret_summary,
)
from bench.harness import (
    Bench,
    EngineMethod,
    Grid,
    Job,
    history_of,
    print_target_table,
    round4,
    seed_int,
    unit_problem,
)
from bench.turbo_enn_runs import run_ennbo

D = 20
Q = 4
METHODS = ("turbo-enn", "optuna-cmaes", "ennbo", "turbo-enn box")
#: turbo-enn's options per method: its defaults (the CMA region at every d bbob has), and the
#: ablation with TuRBO's box region, to decide the region on the tuning half.
TURBO_ENN_OPTIONS: dict[str, dict[str, Any]] = {
    "turbo-enn": {},
    "turbo-enn box": {"trust_region": "box"},
}
CODE_PATHS = ("engines", "bench/turbo_enn_peers.py", "bench/bbob.py")


def run_turbo_enn(
    options: dict[str, Any], function: int, seed: int, budget: int, d: int
) -> list[float]:
    rng = np.random.default_rng(seed_int(seed, function))
    engine = EngineMethod("turbo-enn", options, unit_problem(d), rng)
    objective = Objective(function, d)
    X, y = np.zeros((0, d)), np.zeros(0)
    while len(y) < budget:
        count = min(Q, budget - len(y))
        U = engine.propose(history_of(X, y), count)[:count]
        X, y = np.vstack([X, U]), np.concatenate([y, objective(U)])
    return y.tolist()


def run_cmaes(function: int, seed: int, budget: int, d: int) -> list[float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.CmaEsSampler(seed=seed_int(seed, function) % 2**31)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    objective = Objective(function, d)
    names = [f"x{i}" for i in range(d)]
    values = []
    for _ in range(budget):
        trial = study.ask()
        u = np.array([[trial.suggest_float(n, 0.0, 1.0) for n in names]])
        value = float(objective(u)[0])
        study.tell(trial, value)
        values.append(value)
    return values


def run_one(job: Job, budget: int, d: int) -> dict[str, Any]:
    """One (function, method, seed) run: every value, and the wall seconds."""
    function, start = int(job.problem), time.perf_counter()
    if job.method in TURBO_ENN_OPTIONS:
        values = run_turbo_enn(TURBO_ENN_OPTIONS[job.method], function, job.seed, budget, d)
    elif job.method == "optuna-cmaes":
        values = run_cmaes(function, job.seed, budget, d)
    else:
        request = {
            "mode": "optimize",
            "runs": [
                {
                    "problem": f"bbob-f{function}",
                    "d": d,
                    "budget": budget,
                    "q": Q,
                    "seed": seed_int(job.seed, function) % 2**31,
                }
            ],
        }
        answer = run_ennbo(request, timeout=3600)
        if answer is None:
            return {"best": None, "wall_s": time.perf_counter() - start}
        values = answer["results"][0]["values"]
    return {"best": float(min(values)), "wall_s": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 functions, 1 seed, 200 evals")
    parser.add_argument("--methods", default=",".join(METHODS), help="a subset of the methods")
    parser.add_argument("--functions", help="comma list of bbob function numbers (default all)")
    parser.add_argument(
        "--dimension",
        type=int,
        default=D,
        choices=(2, 3, 5, 10, 20, 40),
        help=f"d, one COCO's bbob has (default {D})",
    )
    args = parser.parse_args(argv)
    d = args.dimension
    methods = [m for m in METHODS if m in args.methods.split(",")]
    functions, seeds, budget = ((1, 8), 1, 200) if args.quick else (TUNING + HELD_OUT, 3, 2000)
    if args.functions:
        functions = tuple(int(f) for f in args.functions.split(","))
    bench = Bench("turbo_enn_peers", args.quick, CODE_PATHS)
    bench.header(f"d = {d}, {budget} evaluations, {seeds} seeds, q = {Q}")
    optimum = {f: f_opt(f, d) for f in functions}
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}

    def on_run(job: Job, result: dict[str, Any]) -> None:
        runs.setdefault((int(job.problem), job.method), []).append(result)
        best = result["best"]
        shown = "failed" if best is None else f"regret {best - optimum[int(job.problem)]:.4g}"
        bench.progress(f"{job.label()}: {shown}, {result['wall_s']:.0f} s")

    jobs = [Job(str(f), m, seed) for f in functions for seed in range(seeds) for m in methods]
    with Grid(bench) as grid:
        grid.run(run_one, jobs, on_run, budget, d)
    results: dict[int, dict[str, Any]] = {
        f: {m: regret_summary(runs.get((f, m), []), optimum[f], "wall_s") for m in METHODS}
        for f in functions
    }
    tuning = [f for f in functions if f in TUNING]
    held_out = [f for f in functions if f in HELD_OUT]
    print_regret_table("Tuning half", tuning, METHODS, results, "mean wall s per run")
    print_regret_table("Held-out half", held_out, METHODS, results, "mean wall s per run")
    vs_cmaes, n_cmaes = at_most(held_out, results, "turbo-enn", "optuna-cmaes")
    vs_ennbo, n_ennbo = at_most(held_out, results, "turbo-enn", "ennbo")
    print()
    print_target_table(
        [
            (
                "held-out functions where turbo-enn <= CMA-ES",
                float(vs_cmaes),
                f"> {n_cmaes / 2:g} of {n_cmaes}",
                vs_cmaes > n_cmaes / 2 if n_cmaes else None,
            ),
            (
                "held-out functions where turbo-enn <= ennbo",
                float(vs_ennbo),
                f"= {n_ennbo}",
                vs_ennbo == n_ennbo if n_ennbo else None,
            ),
        ]
    )
    out: dict[str, Any] = {
        "bench": "turbo_enn_peers",
        "version": bench.version,
        "quick": args.quick,
        "dimension": d,
        "turbo_enn_held_out_at_most_cmaes": vs_cmaes,
        "turbo_enn_held_out_at_most_ennbo": vs_ennbo,
        "held_out_functions": len(held_out),
        "median_regret": {
            f"f{f}": {m: None if s is None else round4(s["regret"]) for m, s in results[f].items()}
            for f in functions
        },
    }
    bench.report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
