"""Benchmark of the ``turbo-enn`` engine (issue 3): proposal cost, quality, and the service.

One run, three parts, then markdown tables, the wall time and ONE final JSON line.

1. Proposal time (fit + acquisition). Data: X uniform in [0,1]^d, y = Ackley on [-5,10]^d
   (``_ennbo_run.timing_data``, the same arrays in every process). N in {500, 1,000, 2,000,
   4,000, 10,000, 50,000}, d in {20, 100}, q in {4, 50}.

   - turbo-enn, both modes (``noisy=false``: non-dominated sorting, no fit, the default;
     ``noisy=true``: fitted ENN, lower confidence bound), through the engine contract only:
     the median of 3 calls of ``engine.suggest(problem, history, q, {}, rng)``. A fresh state
     with N completed points makes the ask a region proposal over all N points (at d = 20 the
     CMA region: ENN over all N points ranks ``10 q`` draws; at d = 100 the box, L = 0.8
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
     point) + ask(q)``. Note the asymmetry: ennbo's proposal is
     incremental (its index and fit persist between asks); turbo-enn's is from scratch.

2. Quality: Ackley-20 and Rosenbrock-20, both on [-5,10]^20 (f* = 0), minimized, q = 4,
   2,000 evaluations, seeds 0-4: best value found, median (min, max) over seeds, for
   turbo-enn in both modes (engine defaults: the CMA region at d = 20), two ablations with
   TuRBO's box region (``trust_region: "box"``, 2 d initial Sobol points per region), one with
   ``restart_keeps_data=true`` (ennbo's restart rule),
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
slower on this machine). Everything runs one at a time.

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
import time
from dataclasses import dataclass

import torch  # before anything else that could touch threads

from bench.gp_turbo import n_candidates
from bench.harness import Bench, interrupt_on_sigterm, log
from bench.turbo_enn_report import (
    Headline,
    Parts,
    json_line,
    print_quality,
    print_service,
    print_targets,
    print_timing,
)
from bench.turbo_enn_runs import (
    ABLATIONS,
    DIMS,
    GP_Q,
    MODES,
    PROBLEMS,
    QS,
    QUALITY_D,
    QUALITY_Q,
    REPS,
    quality,
    summarize_quality,
    time_ennbo,
    time_gp_turbo,
    time_turbo_enn,
)
from bench.turbo_enn_service import SERVICE_N, service

#: The files whose changes make the reported code version "+dirty".
CODE_PATHS = ("engines", "service")

FULL_N = [500, 1000, 2000, 4000, 10_000, 50_000]
QUICK_N = [1000, 2000, 50_000]
FULL_GP_N = [500, 1000, 2000, 4000]
QUICK_GP_N = [250, 500]
QUICK_GP_DIMS = [20]
GP_CAP = 240.0
#: Wall-time cap of one GP-TuRBO quality run (it then stops early and says so).
GP_RUN_CAP = 900.0

# Plan estimates (seconds, this machine when idle, measured on pieces of this bench).
GP_ESTIMATE = {
    20: {250: 2.5, 500: 4.0, 1000: 8.5, 2000: 40.0},  # + TS over 4,000 candidates
    100: {250: 25.0, 500: 30.4, 1000: 34.6, 2000: 82.6},
}
PROCESS_START_S = 5.0


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
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
    return parser.parse_args(argv)


def run_parts(s: Settings) -> tuple[Parts, dict[str, float]]:
    """The parts ``s`` asks for, one at a time; what they measured and their seconds."""
    p = Parts()
    part_s: dict[str, float] = {}

    if "timing" in s.parts:
        t0 = time.perf_counter()
        log("part 1: turbo-enn proposal time ...")
        p.enn = time_turbo_enn(s)
        part_s["timing turbo-enn"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        log("part 1: ennbo 0.3.3 (subprocess) ...")
        p.ennbo = time_ennbo(s)
        part_s["timing ennbo"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        log("part 1: GP-TuRBO (one process per config) ...")
        p.gp = time_gp_turbo(s)
        part_s["timing GP-TuRBO"] = time.perf_counter() - t0
    if "quality" in s.parts:
        t0 = time.perf_counter()
        log("part 2: quality ...")
        p.qual = summarize_quality(quality(s))
        part_s["quality"] = time.perf_counter() - t0
    if "service" in s.parts:
        t0 = time.perf_counter()
        log("part 3: service ...")
        p.svc = service(s)
        part_s["service"] = time.perf_counter() - t0
    return p, part_s


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    s = Settings.from_args(args)
    torch.set_num_threads(2)  # the benchmark machine has 2 cores
    interrupt_on_sigterm()
    bench = Bench("turbo_enn", s.quick, CODE_PATHS)
    est = plan_estimate(s)
    bench.header(f"torch threads {torch.get_num_threads()}")
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
    try:
        p, part_s = run_parts(s)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    h = Headline.of(s, p)
    if p.enn or p.gp or p.ennbo:
        print_timing(s, p.enn, p.ennbo, p.gp)
    if p.qual:
        print_quality(s, p.qual)
    if p.svc:
        print_service(p.svc)
    print_targets(s, h.targets(), h.speedup_lb)
    bench.report(json_line(s, p, h, bench.version, est, part_s), part_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
