"""Benchmark of the A-MWGraD particle dynamics (issue 8), part 1: the multi-target toy.

One run, then markdown tables, the wall time and ONE final JSON line.

Part 1 (this script): the reference multi-target toy of MWGraD's code: four
2-D Gaussian-mixture targets, each with three components of covariance 0.5 I and weights 0.2,
0.7 and 0.1: its own corner (+-4, +-4), then the modes (-2, 0) and (2, 0) shared by all targets,
each jittered by 0.3 N(0, I) per target (our reading of the weights' order; the jitter is drawn
once, with seed 0, so every seed samples the same targets). 50 particles start from 5 N(0, I)
clamped to [-10, 10] (the seed's own draw). MWGraD and A-MWGraD (convex schedule, adaptive
restart), each with the SVGD and the blob kernel (median bandwidth), at step sizes 1e-3, 3e-3
and 1e-2, ``N = 1500`` iterations, 5 seeds. GradNorm = (1/m) sum_i |sum_k w_k Delta_k(x_i)|^2.

Figure: for each kernel and step size, MWGraD's final GradNorm (median over seeds) is the
target, and the ratio is the iterations A-MWGraD needs to first reach it (median over seeds)
divided by N. ``amwgrad_iters_ratio`` per kernel is taken at the best common step size: the one
where MWGraD's final GradNorm is lowest for that kernel. Target: a ratio <= 0.5 for both kernels.

Part 2: the ``mwgd`` study engine (defaults) with the pom bench's protocol, run by
``bench/pom.py --problems branincurrin,dtlz2 --methods mwgd,pom,qlognehvi,sobol`` in a
subprocess (2 worker processes, one torch thread each; its progress on stderr, its tables
below): BraninCurrin (d = 2) and DTLZ2 (d = 6, 2 objectives), an initial Sobol design of
2 (d + 1) points shared by all methods, 20 batches of q = 4, 5 seeds; median final hypervolume
share, EMD against the dense reference Pareto set and seconds per batch (bench/pom.py's
docstring defines them). Target: mwgd's median HV share within 5 % of qLogNEHVI's (ratio >=
0.95) on both problems. Part 2 gets the time left of an 85-minute budget (its deadline guard).

    .venv/bin/python -m bench.mwgd            # full: part 1 (~3 min), part 2 (~30 min)
    .venv/bin/python -m bench.mwgd --quick    # part 1: 1 seed, 300 iterations; part 2: 1 seed,
                                              # 4 batches: under 5 min
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from typing import Any

import numpy as np

from bench.harness import Bench, markdown_table
from bench.version import ROOT
from engines.wasserstein_particles import run

#: The files whose changes make the reported code version "+dirty".
CODE_PATHS = ("engines", "bench/mwgd.py", "bench/pom.py")

STEPS = (1e-3, 3e-3, 1e-2)
KERNELS = ("svgd", "blob")
ITERATIONS = 1500
SEEDS = 5
BUDGET_MIN = 85.0
PART2_PROBLEMS = ["branincurrin", "dtlz2"]
PART2_METHODS = ["mwgd", "pom", "qlognehvi", "sobol"]
#: mwgd's HV share must be at least this share of qLogNEHVI's.
HV_RATIO_MIN = 0.95
PARTICLES = 50
COVARIANCE = 0.5
WEIGHTS = np.array([0.2, 0.7, 0.1])
CORNERS = np.array([[4.0, 4.0], [-4.0, 4.0], [-4.0, -4.0], [4.0, -4.0]])
SHARED = np.array([[-2.0, 0.0], [2.0, 0.0]])


def mixture_means() -> np.ndarray:
    """``(4, 3, 2)``: per target its corner and the two jittered shared modes."""
    rng = np.random.default_rng(0)
    return np.stack(
        [np.vstack([corner, SHARED + 0.3 * rng.standard_normal((2, 2))]) for corner in CORNERS]
    )


MEANS = mixture_means()


def grad_f(X: np.ndarray) -> np.ndarray:
    """``(4, m, 2)``: the gradients of ``f_k = -log pi_k`` at ``X: (m, 2)``."""
    diff = X[None, :, None, :] - MEANS[:, None, :, :]  # (K, m, C, 2)
    log_r = np.log(WEIGHTS)[None, None, :] - np.sum(diff**2, axis=-1) / (2 * COVARIANCE)
    log_r -= log_r.max(axis=-1, keepdims=True)
    r = np.exp(log_r)
    r /= r.sum(axis=-1, keepdims=True)
    return np.einsum("kmc,kmcd->kmd", r, diff) / COVARIANCE


def one_run(seed: int, accelerated: bool, kernel: str, eta: float, n: int) -> list[float]:
    X0 = np.clip(5.0 * np.random.default_rng([seed, 1]).standard_normal((PARTICLES, 2)), -10, 10)
    _, infos = run(X0, grad_f, n, eta, accelerated=accelerated, kernel=kernel)
    return [info.grad_norm for info in infos]


def part1(quick: bool) -> dict[str, Any]:
    """The multi-target toy: the table, and the figures for the JSON line."""
    seeds = 1 if quick else SEEDS
    n = 300 if quick else ITERATIONS
    print(f"## Part 1: the multi-target toy ({PARTICLES} particles, {n} iterations, {seeds} seeds)")
    rows: dict[tuple[str, float], dict[str, Any]] = {}
    for kernel in KERNELS:
        for eta in STEPS:
            plain = [one_run(s, False, kernel, eta, n) for s in range(seeds)]
            fast = [one_run(s, True, kernel, eta, n) for s in range(seeds)]
            target = statistics.median(curve[-1] for curve in plain)
            reach = [
                next((i + 1 for i, g in enumerate(curve) if g <= target), math.inf)
                for curve in fast
            ]
            rows[(kernel, eta)] = {
                "mwgrad_final": target,
                "amwgrad_final": statistics.median(curve[-1] for curve in fast),
                "amwgrad_iters": statistics.median(reach),
                "ratio": statistics.median(reach) / n,
                "mwgrad_at": {
                    k: statistics.median(curve[k - 1] for curve in plain)
                    for k in (n // 10, n // 2, n)
                },
                "amwgrad_at": {
                    k: statistics.median(curve[k - 1] for curve in fast)
                    for k in (n // 10, n // 2, n)
                },
            }
    print()
    markdown_table(
        [
            "kernel",
            "step",
            "MWGraD GradNorm at n/10, n/2, n",
            "A-MWGraD GradNorm at n/10, n/2, n",
            "A-MWGraD iterations to MWGraD's final",
            "ratio",
        ],
        (
            [
                kernel,
                f"{eta:g}",
                ", ".join(f"{v:.3g}" for v in r["mwgrad_at"].values()),
                ", ".join(f"{v:.3g}" for v in r["amwgrad_at"].values()),
                f"{r['amwgrad_iters']:.0f}",
                f"{r['ratio']:.3f}",
            ]
            for (kernel, eta), r in rows.items()
        ),
    )
    best: dict[str, float] = {}
    ratio: dict[str, float] = {}
    for kernel in KERNELS:
        eta = min(STEPS, key=lambda e: rows[(kernel, e)]["mwgrad_final"])
        best[kernel], ratio[kernel] = eta, rows[(kernel, eta)]["ratio"]
    print()
    for kernel in KERNELS:
        print(
            f"{kernel}: best common step {best[kernel]:g}, A-MWGraD needs "
            f"{ratio[kernel]:.3f} of MWGraD's iterations: "
            f"{'MET' if ratio[kernel] <= 0.5 else 'MISSED'} (target <= 0.5)"
        )
    return {
        "iterations": n,
        "seeds": seeds,
        "amwgrad_iters_ratio": ratio,
        "best_step": best,
        "amwgrad_target_met": all(v <= 0.5 for v in ratio.values()),
    }


def part2(quick: bool, budget_min: float) -> dict[str, Any]:
    """The study engine beside pom, qLogNEHVI and Sobol, by bench/pom.py in a subprocess."""
    print("\n## Part 2: the mwgd study engine (bench/pom.py protocol)", flush=True)
    cmd = [
        sys.executable,
        "-m",
        "bench.pom",
        "--problems",
        ",".join(PART2_PROBLEMS),
        "--methods",
        ",".join(PART2_METHODS),
        "--budget-min",
        f"{budget_min:.1f}",
    ]
    if quick:
        cmd.append("--quick")
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False, cwd=ROOT)
    lines = done.stdout.rstrip("\n").split("\n")
    print("\n".join(line for line in lines if not line.startswith("{")))
    found = [json.loads(line) for line in lines if line.startswith("{")]
    if done.returncode != 0 or not found:
        print(f"(part 2 failed: bench/pom.py exited {done.returncode})")
        return {"part2_failed": True}
    problems = found[-1]["problems"]

    def per_problem(key: str) -> dict[str, float | None]:
        return {p: problems.get(p, {}).get(key) for p in PART2_PROBLEMS}

    hv = {m: per_problem(f"{m}_hv_share") for m in PART2_METHODS}
    ratio = {
        p: None
        if None in (hv["mwgd"][p], hv["qlognehvi"][p])
        else hv["mwgd"][p] / hv["qlognehvi"][p]
        for p in PART2_PROBLEMS
    }
    met = all(r is not None and r >= HV_RATIO_MIN for r in ratio.values())
    print(
        "\n| problem | HV share mwgd / qLogNEHVI | ratio | EMD mwgd / qLogNEHVI "
        "| s per batch mwgd / qLogNEHVI |"
    )
    print("|---|---|---:|---|---|")
    emd = {m: per_problem(f"{m}_emd") for m in ("mwgd", "qlognehvi", "pom", "sobol")}
    secs = {m: per_problem(f"{m}_s_per_batch") for m in ("mwgd", "qlognehvi", "pom")}
    for p in PART2_PROBLEMS:
        r = ratio[p]
        print(
            f"| {p} | {hv['mwgd'][p]} / {hv['qlognehvi'][p]} | "
            f"{'-' if r is None else f'{r:.4f}'} | {emd['mwgd'][p]} / {emd['qlognehvi'][p]} | "
            f"{secs['mwgd'][p]} / {secs['qlognehvi'][p]} |"
        )
    print(
        f"\nmwgd HV share within 5 % of qLogNEHVI's on both problems (ratio >= {HV_RATIO_MIN}): "
        f"{'MET' if met else 'MISSED'}"
    )
    return {
        "mwgd_hv_share": hv["mwgd"],
        "qlognehvi_hv_share": hv["qlognehvi"],
        "pom_hv_share": hv["pom"],
        "sobol_hv_share": hv["sobol"],
        "mwgd_hv_ratio_vs_qlognehvi": ratio,
        "mwgd_hv_target_met": met,
        "mwgd_emd": emd["mwgd"],
        "qlognehvi_emd": emd["qlognehvi"],
        "pom_emd": emd["pom"],
        "sobol_emd": emd["sobol"],
        "mwgd_s_per_batch": secs["mwgd"],
        "qlognehvi_s_per_batch": secs["qlognehvi"],
        "pom_s_per_batch": secs["pom"],
        "part2_seeds": found[-1]["config"]["seeds"],
        "part2_stopped_early": found[-1]["stopped_early"],
        "part2_interrupted": found[-1]["interrupted"],
        "part2_wall_s": found[-1]["wall_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced: under 5 minutes")
    parser.add_argument("--part", choices=["1", "2"], help="run one part only")
    args = parser.parse_args(argv)
    bench = Bench("mwgd", bool(args.quick), CODE_PATHS)
    bench.header()
    out: dict[str, Any] = {"bench": "mwgd", "quick": bool(args.quick)}
    if args.part != "2":
        out |= part1(args.quick)
    if args.part != "1":
        left = BUDGET_MIN - bench.elapsed_s() / 60
        out |= part2(args.quick, 5.0 if args.quick else left)
    out["code_version"] = bench.version
    bench.report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
