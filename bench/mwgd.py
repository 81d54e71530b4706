"""Benchmark of the A-MWGraD particle dynamics (issue 8), part 1: the multi-target toy.

One run, then markdown tables, the wall time and ONE final JSON line.

Part 1 (this script): the reference multi-target toy of MWGraD's code (research notes B1): four
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

Part 2 (the ``mwgd`` study engine against qLogNEHVI and Sobol with the pom bench's protocol) is
not implemented yet: its JSON keys are null.

    .venv/bin/python bench/mwgd.py            # full: 2 methods x 2 kernels x 3 steps x 5 seeds
    .venv/bin/python bench/mwgd.py --quick    # 1 seed, 300 iterations
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.wgd import run

STEPS = (1e-3, 3e-3, 1e-2)
KERNELS = ("svgd", "blob")
ITERATIONS = 1500
SEEDS = 5
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 300 iterations")
    args = parser.parse_args(argv)
    seeds = 1 if args.quick else SEEDS
    n = 300 if args.quick else ITERATIONS
    wall0 = time.perf_counter()
    print(
        f"# bench/mwgd.py part 1 ({'quick' if args.quick else 'full'}); Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}; {PARTICLES} particles, {n} iterations, {seeds} seeds"
    )
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
    print(
        "| kernel | step | MWGraD GradNorm at n/10, n/2, n | A-MWGraD GradNorm at n/10, n/2, n "
        "| A-MWGraD iterations to MWGraD's final | ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for (kernel, eta), r in rows.items():
        m_at = ", ".join(f"{v:.3g}" for v in r["mwgrad_at"].values())
        a_at = ", ".join(f"{v:.3g}" for v in r["amwgrad_at"].values())
        print(
            f"| {kernel} | {eta:g} | {m_at} | {a_at} | {r['amwgrad_iters']:.0f} | "
            f"{r['ratio']:.3f} |"
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
    wall = time.perf_counter() - wall0
    print(f"wall time {wall / 60:.1f} min")
    print(
        json.dumps(
            {
                "bench": "mwgd",
                "quick": bool(args.quick),
                "iterations": n,
                "seeds": seeds,
                "amwgrad_iters_ratio": ratio,
                "best_step": best,
                "target_met": all(v <= 0.5 for v in ratio.values()),
                "mwgd_hv_share": None,
                "qlognehvi_hv_share": None,
                "mwgd_emd": None,
                "wall_s": round(wall, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
