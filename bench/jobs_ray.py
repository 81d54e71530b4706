"""Parts 4 and 5 of bench/jobs.py (issue 19): the same job on the local executor and on Ray,
and Ray's scale-out on the ``sleep`` workload (bench/sleep_workload.py); the module docstring of
bench/jobs.py says what each measures."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.harness import Bench, markdown_table, round4
from bench.job_runs import DATASET, OPTIMIZER, Config, med, run_job, span


def part4(client: Any, bench: Bench, cfg: Config) -> dict[str, Any]:
    """Part 1's job on the local executor and on a local Ray instance, seed by seed; Ray's
    start-up (the server's ``ray.init``) apart, in a first small job."""
    t = time.perf_counter()
    run_job(client, "p4-ray-start", DATASET, OPTIMIZER, (2, 4), 0, executor="ray", **SLEEPY)
    ray_start = time.perf_counter() - t
    bench.progress(f"  Ray started by the server and a 4-unit job: {ray_start:.0f} s")
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "ray": []}
    for seed in range(cfg.seeds):
        for executor in ("local", "ray"):
            budget = (cfg.population, cfg.t_max)
            name = f"p4-{executor}-{seed}"
            r = run_job(client, name, DATASET, OPTIMIZER, budget, seed, executor=executor)
            runs[executor].append(r)
            bench.progress(
                f"  {executor} seed {seed}: test {r['test_score']:.4f}, {r['wall_s']:.0f} s, "
                f"{1000 * r['overhead_s_per_unit']:.0f} ms overhead per unit"
            )
    return {"runs": runs, "ray_start_s": ray_start}


#: Part 5's (and part 4's warm-up) job fields: the sleep workload, a quarter CPU per worker (two
#: cores must not cap four sleeping workers).
SLEEPY: dict[str, Any] = {
    "workload": {"name": "sleep", "options": {"unit_seconds": 0.1}},
    "resources": {"num_cpus": 0.25},
}


def part5(client: Any, bench: Bench, cfg: Config) -> dict[int, list[dict[str, Any]]]:
    """The same sleep-workload job on 1, 2 and 4 Ray workers, seed by seed (one job per
    worker count is noisy: a late unit holds a generation back)."""
    unit_s = 0.5 if cfg.population < 8 else 1.0
    fields = {**SLEEPY, "workload": {"name": "sleep", "options": {"unit_seconds": unit_s}}}
    budget = (8, 200)
    options = {"initial_step_share": 0.1}
    out: dict[int, list[dict[str, Any]]] = {1: [], 2: [], 4: []}
    for seed in range(cfg.seeds):
        for workers in out:
            r = run_job(
                client,
                f"p5-w{workers}-{seed}",
                DATASET,
                OPTIMIZER,
                budget,
                seed,
                options,
                workers,
                executor="ray",
                **fields,
            )
            r["unit_s"] = unit_s
            out[workers].append(r)
            bench.progress(
                f"  seed {seed}, {workers} Ray worker(s): {r['wall_s']:.1f} s, {r['units']} units"
            )
    return out


def report_part4(results: dict[str, Any]) -> dict[str, Any]:
    runs = results["runs"]
    print("\n## Part 4: part 1's job on the local executor and on Ray (2 workers each)\n")
    markdown_table(
        ["executor", "test acc", "wall s", "overhead", "overhead ms per unit-worker", "units"],
        (
            [
                executor,
                span(rs, "test_score"),
                span(rs, "wall_s", 1),
                span(rs, "overhead_share"),
                f"{1000 * med(rs, 'overhead_s_per_unit'):.0f}",
                span(rs, "units", 0),
            ]
            for executor, rs in runs.items()
        ),
    )
    print(
        f"\nRay's start-up in the server (first Ray job, 4 units): {results['ray_start_s']:.1f} s"
    )
    ratio = med(runs["ray"], "wall_s") / med(runs["local"], "wall_s")
    return {
        "ray_vs_local_wall_ratio": round4(ratio),
        "ray_unit_overhead_ms": round4(1000 * med(runs["ray"], "overhead_s_per_unit")),
        "local_unit_overhead_ms": round4(1000 * med(runs["local"], "overhead_s_per_unit")),
        "ray_test_acc": round4(med(runs["ray"], "test_score")),
        "local_test_acc": round4(med(runs["local"], "test_score")),
        "ray_start_s": round4(results["ray_start_s"]),
    }


def report_part5(results: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    unit_s = results[1][0]["unit_s"]
    seeds = len(results[1])
    print(
        f"\n## Part 5: scale-out on Ray: one ipbt job (P = 8) of a workload whose unit sleeps "
        f"{unit_s} s, on 1, 2 and 4 Ray workers, {seeds} seeds (speed-up of each seed against "
        f"its own 1-worker job; the targets apply to the median)\n"
    )
    speedups = {
        w: [one["wall_s"] / r["wall_s"] for one, r in zip(results[1], rs, strict=True)]
        for w, rs in results.items()
    }
    markdown_table(
        ["Ray workers", "wall s", "speed-up by seed", "median speed-up", "units", "overhead ms"],
        (
            [
                w,
                span(rs, "wall_s", 1),
                " / ".join(f"{x:.2f}" for x in speedups[w]),
                f"{statistics.median(speedups[w]):.2f}",
                span(rs, "units", 0),
                f"{1000 * med(rs, 'overhead_s_per_unit'):.0f}",
            ]
            for w, rs in results.items()
        ),
    )
    return {
        "ray_speedup_2": round4(statistics.median(speedups[2])),
        "ray_speedup_4": round4(statistics.median(speedups[4])),
        "ray_speedup_2_by_seed": [round4(x) for x in speedups[2]],
        "ray_speedup_4_by_seed": [round4(x) for x in speedups[4]],
        "ray_scaleout_wall_s": {
            str(w): [round4(r["wall_s"]) for r in rs] for w, rs in results.items()
        },
    }
