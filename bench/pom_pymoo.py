"""Issue 22, the ``pom`` and ``mwgd`` engines against what a user would pick instead, on pymoo's
multi-objective problems: BoTorch's qLogNEHVI (as in ``bench/pom.py``), Optuna 5's
``NSGAIISampler``, ``TPESampler`` and ``GPSampler`` (qLogEHVI), each at its defaults.

Problems (pymoo 0.6, ``pymoo.problems.get_problem``; their boxes are the unit cube): the tuning
half, where defaults may be chosen (close to the problems ``pom``'s and ``mwgd``'s defaults
were chosen on, BoTorch's DTLZ2 with two objectives and ZDT3): ZDT1 (d = 6, convex front) and
DTLZ2 with three objectives (d = 7). The held-out half, never used to choose anything: ZDT2
(d = 6, non-convex front), ZDT6 (d = 6, non-convex, points spread unevenly along it), DTLZ7
with two objectives (d = 6, front in two disconnected parts) and with three (d = 7, four
parts).

True Pareto sets and fronts: each problem's set is its position variables free and the others
at the value that minimizes its distance function ``g`` (ZDT and DTLZ7: 0; DTLZ2: 0.5); a grid
over the position variables (2,000 points, 60 x 60 with two), evaluated, keeping the
non-dominated points, gives the set and the front (for ZDT and DTLZ7 pymoo's own fronts are
this construction). Reference point of the hypervolume: the front's nadir plus a tenth of its
range (ideal to nadir) in every objective.

Protocol (``bench/pom.py``'s): per seed an initial scrambled Sobol design of 2 (d + 1) points,
the same for every method (the Optuna samplers have it enqueued as their first trials), then
12 batches of q = 4, every point evaluated before the next batch. ``pom`` and ``mwgd`` run
through the engine contract at their defaults with the reference point as the problem's.

Figures per (problem, method), medians over 5 seeds with their range (``bench/pom.py``'s
definitions): ``hv_share``, the hypervolume of all evaluated points over the front's; ``emd``,
the mean distance from points spread over the true Pareto set to the nearest observed
non-dominated point, over sqrt(d); the seconds of a batch's proposal. Targets (issue 22), on
the held-out half: ``pom``'s hypervolume at least qLogNEHVI's and its EMD at most 0.8x
qLogNEHVI's on most problems, its seconds per batch at most 2x qLogNEHVI's; ``mwgd``'s
hypervolume within 5 % of qLogNEHVI's (a ratio >= 0.95) on most problems.

    .venv/bin/pip install pymoo==0.6.1.5      # the problems (in the bench extra)
    .venv/bin/python -m bench.pom_pymoo       # full: 6 problems x 6 methods x 5 seeds
    .venv/bin/python -m bench.pom_pymoo --quick   # ZDT2, 1 seed, 3 batches
    .venv/bin/python -m bench.pom_pymoo --problems zdt2,dtlz7m2 --methods pom,qlognehvi
    .venv/bin/python -m bench.pom_pymoo --problems zdt1,dtlz2m3 --methods mwgd \
        --mwgd-options '{"temperature": 0.05}'    # an mwgd setting on the tuning half

Each run is one process of a 2-worker grid, one torch thread each. Progress goes to stderr; the
tables and the final JSON line to stdout.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.harness import (
    Bench,
    Grid,
    Job,
    fmt,
    markdown_table,
    print_target_table,
    round4,
)
from bench.pom_peers import Q, initial_design, make_method, worker_setup
from bench.pom_reference import normalize_front, spread
from engines.base import History
from engines.metrics import emd, hypervolume, igd, non_dominated

METHODS = ("pom", "mwgd", "qlognehvi", "nsga2", "tpe", "optuna-gp")
BATCHES = 12
SEEDS = 5
#: Points of the true Pareto set and front the metrics compare with.
REFERENCE_POINTS = 2000
CODE_PATHS = ("engines", "bench/pom_pymoo.py", "bench/pom_peers.py")


@dataclass(frozen=True)
class Spec:
    """A pymoo problem: ``free`` position variables, the rest at ``rest`` on its Pareto set."""

    key: str
    label: str
    name: str
    d: int
    m: int
    free: int
    rest: float

    def problem(self) -> Any:
        from pymoo.problems import get_problem

        if self.name.startswith("zdt"):
            return get_problem(self.name, n_var=self.d)
        return get_problem(self.name, n_var=self.d, n_obj=self.m)


TUNING = {
    s.key: s
    for s in [
        Spec("zdt1", "ZDT1 (d 6, m 2)", "zdt1", 6, 2, 1, 0.0),
        Spec("dtlz2m3", "DTLZ2 (d 7, m 3)", "dtlz2", 7, 3, 2, 0.5),
    ]
}
HELD_OUT = {
    s.key: s
    for s in [
        Spec("zdt2", "ZDT2 (d 6, m 2)", "zdt2", 6, 2, 1, 0.0),
        Spec("zdt6", "ZDT6 (d 6, m 2)", "zdt6", 6, 2, 1, 0.0),
        Spec("dtlz7m2", "DTLZ7 (d 6, m 2)", "dtlz7", 6, 2, 1, 0.0),
        Spec("dtlz7m3", "DTLZ7 (d 7, m 3)", "dtlz7", 7, 3, 2, 0.0),
    ]
}
SPECS = {**TUNING, **HELD_OUT}


class Evaluator:
    """The problem on the unit cube (minimized), its true Pareto set and front, its reference
    point and the front's hypervolume (``max_hv``)."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.problem = spec.problem()
        self.low = np.asarray(self.problem.xl, dtype=np.float64)
        self.high = np.asarray(self.problem.xu, dtype=np.float64)
        side = REFERENCE_POINTS if spec.free == 1 else 60
        axes = np.meshgrid(*[np.linspace(0.0, 1.0, side)] * spec.free, indexing="ij")
        U = np.full((side**spec.free, spec.d), spec.rest)
        U[:, : spec.free] = np.stack([a.ravel() for a in axes], axis=1)
        Y = self(U)
        keep = non_dominated(Y)
        U, Y = U[keep], Y[keep]
        ideal, nadir = Y.min(axis=0), Y.max(axis=0)
        self.ref_point = nadir + 0.1 * (nadir - ideal)
        self.max_hv = hypervolume(Y, self.ref_point)
        self.pareto_set = U[spread(U, REFERENCE_POINTS)]
        self.front = Y[spread(normalize_front(Y, Y), REFERENCE_POINTS)]

    def __call__(self, U: np.ndarray) -> np.ndarray:
        X = self.low + (self.high - self.low) * np.asarray(U, dtype=np.float64)
        return np.asarray(self.problem.evaluate(X, return_values_of=["F"]), dtype=np.float64)


@functools.cache
def evaluator(key: str) -> Evaluator:
    """The problem ``key``'s evaluator, built once per worker process: its true Pareto set and
    front take seconds (DTLZ2 with three objectives about 6 s) and are the same in every run."""
    return Evaluator(SPECS[key])


def run_one(job: Job, batches: int, mwgd_options: dict[str, Any]) -> dict[str, Any]:
    """One (problem, method, seed) run: its final metrics and seconds per batch."""
    spec = SPECS[job.problem]
    f = evaluator(job.problem)
    U = initial_design(spec, job.seed)
    Y = f(U)
    engines: dict[str, tuple[str, dict[str, Any]]] = {
        "pom": ("pom", {}),
        "mwgd": ("mwgd", mwgd_options),
    }
    method = make_method(job.method, spec, f, job.seed, engines)
    method.start(U, Y, np.zeros((len(U), 0)))
    seconds = []
    for _ in range(batches):
        start = time.perf_counter()
        history = History(U, Y, np.zeros((len(U), 0)), np.zeros((0, spec.d)))
        U_new = np.clip(method.propose(history, Q), 0.0, 1.0)
        seconds.append(time.perf_counter() - start)
        Y_new = f(U_new)
        method.tell(U_new, Y_new, np.zeros((len(U_new), 0)))
        U, Y = np.vstack([U, U_new]), np.vstack([Y, Y_new])
    nd = non_dominated(Y)
    return {
        "hv_share": hypervolume(Y, f.ref_point) / f.max_hv,
        "emd": emd(U[nd], f.pareto_set),
        "igd": igd(normalize_front(Y[nd], f.front), normalize_front(f.front, f.front)),
        "s_per_batch": statistics.fmean(seconds),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and range over seeds of every figure."""
    out: dict[str, Any] = {"seeds": len(runs)}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = statistics.median(values)
        out[f"{key}_range"] = (min(values), max(values))
    return out


def print_half(title: str, keys: list[str], results: dict[str, dict[str, Any]]) -> None:
    print(f"\n## {title}: median [range over seeds]\n")
    for figure, digits in (("hv_share", 4), ("emd", 3), ("igd", 3), ("s_per_batch", 3)):
        print(f"\n### {figure}\n")
        rows = []
        for key in keys:
            row: list[object] = [SPECS[key].label]
            for m in METHODS:
                r = results[key].get(m)
                if r is None:
                    row.append("-")
                    continue
                low, high = r[f"{figure}_range"]
                row.append(f"{fmt(r[figure], digits)} [{fmt(low, 3)}, {fmt(high, 3)}]")
            rows.append(row)
        markdown_table(["problem", *METHODS], rows)


def count(
    keys: list[str], results: dict[str, dict[str, Any]], method: str, holds: Any
) -> tuple[int, int]:
    """Problems where ``holds(ours, qlognehvi's)`` for ``method``, of those where both ran."""
    both = [k for k in keys if method in results[k] and "qlognehvi" in results[k]]
    return sum(bool(holds(results[k][method], results[k]["qlognehvi"])) for k in both), len(both)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="ZDT2, 1 seed, 3 batches")
    parser.add_argument("--problems", help=f"comma list of {','.join(SPECS)}")
    parser.add_argument("--methods", help=f"comma list of {','.join(METHODS)}")
    parser.add_argument("--seeds", type=int, help=f"seeds per problem (default {SEEDS})")
    parser.add_argument("--mwgd-options", default="{}", help="mwgd's engine options, as JSON")
    args = parser.parse_args(argv)
    mwgd_options = json.loads(args.mwgd_options)
    keys = args.problems.split(",") if args.problems else ["zdt2"] if args.quick else list(SPECS)
    if unknown := [k for k in keys if k not in SPECS]:
        raise SystemExit(f"unknown problem(s) {unknown}; choose from {list(SPECS)}")
    methods = args.methods.split(",") if args.methods else list(METHODS)
    seeds = args.seeds or (1 if args.quick else SEEDS)
    batches = 3 if args.quick else BATCHES
    bench = Bench("pom_pymoo", args.quick, CODE_PATHS)
    bench.header(f"{seeds} seeds, {batches} batches of q = {Q}, mwgd options {mwgd_options}")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def on_run(job: Job, result: dict[str, Any]) -> None:
        runs.setdefault((job.problem, job.method), []).append(result)
        bench.progress(
            f"{job.label()}: hv share {result['hv_share']:.4f}, emd {result['emd']:.3f}, "
            f"{result['s_per_batch']:.2f} s/batch"
        )

    # qLogNEHVI's runs are the longest, then the engines' and GPSampler's.
    slow_first = ("qlognehvi", "pom", "mwgd", "optuna-gp", "tpe", "nsga2")
    jobs = sorted(
        (Job(k, m, seed) for seed in range(seeds) for k in keys for m in methods),
        key=lambda j: (j.seed, slow_first.index(j.method)),
    )
    with Grid(bench, initializer=worker_setup) as grid:
        grid.run(run_one, jobs, on_run, batches, mwgd_options)
    results = {k: {m: summarize(runs[(k, m)]) for m in METHODS if runs.get((k, m))} for k in keys}
    tuning = [k for k in keys if k in TUNING]
    held_out = [k for k in keys if k in HELD_OUT]
    if tuning:
        print_half("Tuning half", tuning, results)
    print_half("Held-out half", held_out, results)
    hv_won, n = count(held_out, results, "pom", lambda a, b: a["hv_share"] >= b["hv_share"])
    emd_won, _ = count(held_out, results, "pom", lambda a, b: a["emd"] <= 0.8 * b["emd"])
    mwgd_won, n_mwgd = count(
        held_out, results, "mwgd", lambda a, b: a["hv_share"] >= 0.95 * b["hv_share"]
    )
    time_ratios = [
        results[k]["pom"]["s_per_batch"] / results[k]["qlognehvi"]["s_per_batch"]
        for k in held_out
        if "pom" in results[k] and "qlognehvi" in results[k]
    ]
    worst_time = max(time_ratios, default=None)
    print()
    print_target_table(
        [
            (
                "held-out: pom HV share >= qLogNEHVI's",
                float(hv_won),
                f"> {n / 2:g} of {n}",
                hv_won > n / 2 if n else None,
            ),
            (
                "held-out: pom EMD <= 0.8x qLogNEHVI's",
                float(emd_won),
                f"> {n / 2:g} of {n}",
                emd_won > n / 2 if n else None,
            ),
            (
                "held-out: worst pom / qLogNEHVI s per batch",
                worst_time,
                "<= 2",
                None if worst_time is None else worst_time <= 2,
            ),
            (
                "held-out: mwgd HV share >= 0.95x qLogNEHVI's",
                float(mwgd_won),
                f"> {n_mwgd / 2:g} of {n_mwgd}",
                mwgd_won > n_mwgd / 2 if n_mwgd else None,
            ),
        ]
    )
    bench.report(
        {
            "bench": "pom_pymoo",
            "version": bench.version,
            "quick": args.quick,
            "pom_held_out_hv_wins_vs_qlognehvi": hv_won,
            "pom_held_out_emd_wins_vs_qlognehvi": emd_won,
            "pom_held_out_problems": n,
            "pom_worst_time_ratio_vs_qlognehvi": round4(worst_time),
            "mwgd_held_out_hv_within_5pct_of_qlognehvi": mwgd_won,
            **{
                figure: {k: {m: round4(r[figure]) for m, r in results[k].items()} for k in keys}
                for figure in ("hv_share", "emd", "igd", "s_per_batch")
            },
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
