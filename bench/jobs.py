"""Benchmark of tuning jobs (issue 18): an asktell ``ipbt`` job against Ray Tune's
PopulationBasedTraining, the overhead of a job, and the optimizers of the registry as job
choices.

The asktell side is a real server: ``asktell serve`` (one uvicorn worker) on a fresh SQLite
file in a temporary folder, its artifacts beside it, running its jobs' worker processes itself;
jobs are submitted and awaited with ``client.submit_job`` / ``Job.wait``, one at a time.

1. The same tuning problem both ways, seeds 0-2: scikit-learn's digits (the job's seeded
   60/20/20 split), the ``mlp`` workload (one hidden layer of 128), the optimizer ``olion``
   with the registry's search space, population ``P = 8``, ``T = 2,000`` steps per member,
   2 concurrent workers. asktell: a job with the ``ipbt`` engine at its defaults (its first step
   is 1 % of ``T``, doubled at each restart). Ray Tune 2.60: ``PopulationBasedTraining`` at its
   defaults over the same search space, the member step being the ``mlp`` workload's own
   ``train`` (``bench/jobs_raytune.py``), with the perturbation interval fixed at 5 % of ``T``
   (``--interval-share``; the ``pbt`` engine's default interval, inside the 1-10 % range that
   ``bench/pbt.py`` found equivalent on this MLP; IPBT has no fixed interval). Each side's
   result is the checkpoint of its best validation score and that checkpoint's test accuracy.
   Wall time: the job's from submission to its end as the client sees it (worker start-up and
   the final test score and model included); Ray Tune's is ``Tuner.fit`` alone (``ray.init``,
   about 10 s, left out in Ray's favour and shown apart). Targets: the median test accuracy of
   the jobs at least Ray Tune's, the median wall time at most Ray Tune's.
2. Overhead of part 1's jobs: ``1 - train_seconds / (workers x elapsed_seconds)``, with
   ``train_seconds`` the job's (``JobPublic.train_seconds``: the workload's training and
   evaluation of every told unit, as the workers timed it) and ``elapsed_seconds`` the server's
   (from the job's start to its end). Everything else is overhead: asks, tells, checkpoint
   downloads and uploads, worker start-up, workers waiting for their generation, the final test
   score. The trials' metadata break part of it down (ask, checkpoint load and save). Target:
   median at most 5 %. Ray Tune's runs of part 1 get the same figure for comparison
   (``raytune_overhead_share``: its reports' training seconds against 2 x ``Tuner.fit``).
3. One job per optimizer of ``engines.optim.registry`` on digits (accuracy) and diabetes
   (regression, R^2), the ``ipbt`` engine with an equal budget for each (``P = 8``,
   ``T = 1,000``), seed 0: the test score of each job's best model. ``--quick`` runs three of
   them (olion, adamw, sgd) with ``P = 2``, ``T = 100`` and IPBT's first step at 10 % of ``T``
   (its default 1 % is one step there): a smoke test of the part, not a ranking.

4. Issue 19: part 1's job (2 workers) on the local executor and on a local Ray instance that
   the server starts (``executor: ray``; Ray's start-up is measured apart, in a first 4-unit
   job), seed by seed: the wall time ratio Ray / local (target at most 1.3) and the overhead
   per unit and worker in milliseconds (``ray_unit_overhead_ms``).
5. Issue 19: scale-out on Ray: one ``ipbt`` job (P = 8, T = 200, first step 10 %) of the
   ``sleep`` workload (bench/sleep_workload.py: each unit sleeps 1 s, 0.5 s with ``--quick``,
   whatever its steps; a quarter CPU per worker, so two cores do not cap it) on 1, 2 and 4 Ray
   workers, seed by seed (one job per worker count is noisy: a unit that ends late holds its
   generation back): the median over seeds of the wall time's fall from 1 to 2 workers must
   be at least 1.8x and from 1 to 4 at least 3.2x (``ray_speedup_2``, ``ray_speedup_4``;
   each seed's in ``..._by_seed``), which shows the server is not the bottleneck.

    .venv/bin/python -m bench.jobs              # full: 3 seeds, P = 8, T = 2000 (part 3: 1000)
    .venv/bin/python -m bench.jobs --quick      # 1 seed, P = 4, T = 400 (part 3: P = 2, T = 100)
    .venv/bin/python -m bench.jobs --parts 1,2  # a subset of the parts (2 needs 1's jobs)
    .venv/bin/python -m bench.jobs --parts 3 --optimizers olion,muon  # part 3 for some
    .venv/bin/python -m bench.jobs --parts 4,5  # Ray: against local, and scale-out

Needs the ``bench`` extra (Ray Tune). Progress goes to stderr; the tables and the final JSON
line to stdout.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import (
    Bench,
    interrupt_on_sigterm,
    markdown_table,
    print_target_table,
    round4,
)
from bench.job_runs import (
    DATASET,
    OPTIMIZER,
    OPTIONS,
    WORKERS,
    Config,
    asktell_server,
    med,
    run_job,
    span,
)
from bench.jobs_ray import part4, part5, report_part4, report_part5

#: The files whose changes make the reported code version "+dirty".
CODE_PATHS = (
    "engines",
    "service",
    "client",
    "bench/jobs.py",
    "bench/job_runs.py",
    "bench/jobs_ray.py",
    "bench/jobs_raytune.py",
    "bench/sleep_workload.py",
)

PART3_DATASETS = ("digits", "diabetes")
OVERHEAD_TARGET = 0.05
#: --quick's part 3: the job's optimizer, AdamW and SGD (the references).
QUICK_OPTIMIZERS = ("olion", "adamw", "sgd")


# --- the asktell side -----------------------------------------------------------------------


# --- the parts ------------------------------------------------------------------------------


def part1(client: Any, bench: Bench, cfg: Config) -> dict[str, list[dict[str, Any]]]:
    """The jobs and Ray Tune's PBT runs, seed by seed."""
    from bench.jobs_raytune import RaySetup, run_raytune_pbt

    interval = max(1, round(cfg.interval_share * cfg.t_max))
    runs: dict[str, list[dict[str, Any]]] = {"ipbt job": [], "Ray Tune PBT": []}
    for seed in range(cfg.seeds):
        budget = (cfg.population, cfg.t_max)
        r = run_job(client, f"p1-ipbt-{seed}", DATASET, OPTIMIZER, budget, seed)
        runs["ipbt job"].append(r)
        bench.progress(
            f"  ipbt job seed {seed}: test {r['test_score']:.4f}, {r['wall_s']:.0f} s, "
            f"overhead {r['overhead_share']:.1%}"
        )
        setup = RaySetup(DATASET, seed, OPTIMIZER, OPTIONS, cfg.t_max, interval)
        r = run_raytune_pbt(setup, cfg.population, WORKERS) | {"seed": seed}
        runs["Ray Tune PBT"].append(r)
        bench.progress(
            f"  Ray Tune PBT seed {seed}: test {r['test_score']:.4f}, {r['wall_s']:.0f} s "
            f"(+ ray.init {r['init_s']:.0f} s)"
        )
    return runs


def part3(client: Any, bench: Bench, cfg: Config) -> dict[str, dict[str, dict[str, Any]]]:
    """One job per (dataset, optimizer) with the same budget."""
    out: dict[str, dict[str, dict[str, Any]]] = {d: {} for d in PART3_DATASETS}
    budget = (cfg.part3_population, cfg.part3_t_max)
    for dataset in PART3_DATASETS:
        for opt in cfg.optimizers:
            name = f"p3-{dataset}-{opt}"
            try:
                r = run_job(client, name, dataset, opt, budget, 0, cfg.part3_engine_options)
            except RuntimeError as exc:  # one optimizer's failure is a row, not the end
                bench.progress(f"  {name}: {exc}")
                r = {"test_score": None, "val_score": None, "wall_s": None, "error": str(exc)}
            out[dataset][opt] = r
            if r["test_score"] is not None:
                bench.progress(f"  {name}: test {r['test_score']:.4f}, {r['wall_s']:.0f} s")
    return out


# --- the report -----------------------------------------------------------------------------


def report_part1(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    print("\n## Part 1: the same PBT problem as an asktell job and in Ray Tune\n")
    markdown_table(
        ["method", "test acc, median (min-max)", "val acc", "wall s", "units / reports"],
        (
            [
                m,
                span(rs, "test_score"),
                span(rs, "val_score"),
                span(rs, "wall_s", 0),
                span(rs, "units" if m == "ipbt job" else "reports", 0),
            ]
            for m, rs in runs.items()
        ),
    )
    print()
    markdown_table(
        ["method", "seed", "test acc", "val acc", "wall s", "train s"],
        (
            [
                m,
                r["seed"],
                f"{r['test_score']:.4f}",
                f"{r['val_score']:.4f}",
                f"{r['wall_s']:.1f}",
                f"{r['train_s']:.1f}",
            ]
            for m, rs in runs.items()
            for r in rs
        ),
    )
    job, ray = runs["ipbt job"], runs["Ray Tune PBT"]
    return {
        "ipbt_job_test_acc": round4(med(job, "test_score")),
        "raytune_pbt_test_acc": round4(med(ray, "test_score")),
        "ipbt_job_val_acc": round4(med(job, "val_score")),
        "raytune_pbt_val_acc": round4(med(ray, "val_score")),
        "job_wall_s": round4(med(job, "wall_s")),
        "raytune_wall_s": round4(med(ray, "wall_s")),
        "raytune_init_s": round4(med(ray, "init_s")),
        "ipbt_job_test_acc_by_seed": [round4(r["test_score"]) for r in job],
        "raytune_pbt_test_acc_by_seed": [round4(r["test_score"]) for r in ray],
    }


def report_part2(jobs: list[dict[str, Any]], ray: list[dict[str, Any]]) -> dict[str, Any]:
    print("\n## Part 2: a job's wall time not spent training (part 1's jobs)\n")
    ray_shares = [1.0 - r["train_s"] / (WORKERS * r["wall_s"]) for r in ray]
    rows = []
    for r in jobs:
        b, total = r["breakdown"], WORKERS * r["elapsed_s"]
        rows.append(
            [
                r["seed"],
                f"{r['elapsed_s']:.1f}",
                f"{r['train_s']:.1f}",
                f"{r['overhead_share']:.1%}",
                f"{b['ask_seconds'] / total:.1%}",
                f"{b['load_seconds'] / total:.1%}",
                f"{b['save_seconds'] / total:.1%}",
                f"{b.get('startup_seconds', 0.0) / r['elapsed_s']:.1%}",
                f"{b.get('winddown_seconds', 0.0) / r['elapsed_s']:.1%}",
                f"{b['generation_gap_seconds'] / r['elapsed_s']:.1%} of {b['generations']:.0f}",
                r["units"],
                f"{r['overhead_s_per_unit']:.3f}",
            ]
        )
    print(
        "Shares of the workers' time (2 x elapsed): overhead, and of it the asks and the "
        "checkpoint loads and saves; start-up (the job's start to its first unit), "
        "wind-down (last unit to the job's end) and the generation gaps (a generation's last "
        "unit told to the next one's first started: the engine closing the generation while "
        "every worker waits) are shares of the elapsed time.\n"
    )
    markdown_table(
        [
            "seed",
            "elapsed s",
            "train s (all workers)",
            "overhead",
            "of it: ask",
            "ckpt load",
            "ckpt save",
            "start-up",
            "wind-down",
            "generation gaps",
            "units",
            "overhead s per unit-worker",
        ],
        rows,
    )
    print(
        "\nRay Tune's runs, for comparison (the same definition, its wall time being "
        "``Tuner.fit``'s): overhead "
        + ", ".join(f"{share:.1%}" for share in ray_shares)
        + " (seeds in order)."
    )
    return {
        "job_overhead_share": round4(med(jobs, "overhead_share")),
        "raytune_overhead_share": round4(statistics.median(ray_shares)),
        "job_overhead_share_by_seed": [round4(r["overhead_share"]) for r in jobs],
        "job_overhead_s_per_unit": round4(med(jobs, "overhead_s_per_unit")),
        "job_units": med(jobs, "units"),
        "job_ask_share": round4(
            statistics.median(
                r["breakdown"]["ask_seconds"] / (WORKERS * r["elapsed_s"]) for r in jobs
            )
        ),
        "job_generation_gap_share": round4(
            statistics.median(
                r["breakdown"]["generation_gap_seconds"] / r["elapsed_s"] for r in jobs
            )
        ),
        "job_startup_share": round4(
            statistics.median(
                r["breakdown"].get("startup_seconds", 0.0) / r["elapsed_s"] for r in jobs
            )
        ),
    }


def report_part3(results: dict[str, dict[str, dict[str, Any]]], cfg: Config) -> dict[str, Any]:
    print(
        f"\n## Part 3: one ipbt job per optimizer (P = {cfg.part3_population}, "
        f"T = {cfg.part3_t_max}, seed 0): test score of the best model\n"
    )
    opts = list(next(iter(results.values())))
    rows = []
    for opt in opts:
        row: list[object] = [opt]
        for d in PART3_DATASETS:
            r = results[d][opt]
            row += [
                "failed" if r["test_score"] is None else f"{r['test_score']:.4f}",
                "-" if r["wall_s"] is None else f"{r['wall_s']:.0f}",
            ]
        rows.append(row)
    markdown_table(["optimizer", "digits test acc", "s", "diabetes test R^2", "s"], rows, "lrrrr")
    return {
        "optimizer_test_score": {
            d: {o: round4(r["test_score"]) for o, r in results[d].items()} for d in results
        },
        "optimizer_val_score": {
            d: {o: round4(r["val_score"]) for o, r in results[d].items()} for d in results
        },
    }


def targets(out: dict[str, Any]) -> None:
    job, ray = out.get("ipbt_job_test_acc"), out.get("raytune_pbt_test_acc")
    jw, rw = out.get("job_wall_s"), out.get("raytune_wall_s")
    share = out.get("job_overhead_share")
    ratio, s2, s4 = (
        out.get(k) for k in ("ray_vs_local_wall_ratio", "ray_speedup_2", "ray_speedup_4")
    )
    print("\n## Targets\n")
    print_target_table(
        [
            ("Ray / local wall time", ratio, "<= 1.3", None if ratio is None else ratio <= 1.3),
            ("Ray speed-up, 1 -> 2 workers", s2, ">= 1.8", None if s2 is None else s2 >= 1.8),
            ("Ray speed-up, 1 -> 4 workers", s4, ">= 3.2", None if s4 is None else s4 >= 3.2),
            (
                "ipbt job test acc - Ray Tune PBT's",
                None if job is None or ray is None else job - ray,
                ">= 0",
                None if job is None or ray is None else job >= ray,
            ),
            (
                "job wall s / Ray Tune's",
                None if jw is None or rw is None else jw / rw,
                "<= 1",
                None if jw is None or rw is None else jw <= rw,
            ),
            (
                "job overhead share",
                share,
                f"<= {OVERHEAD_TARGET}",
                None if share is None else share <= OVERHEAD_TARGET,
            ),
        ]
    )


def default_optimizers(quick: bool) -> tuple[str, ...]:
    """Every optimizer of the registry; --quick: three of them."""
    from engines.optim import registry

    return QUICK_OPTIMIZERS if quick else tuple(registry.optimizer_names())


def parse(argv: list[str] | None) -> tuple[Config, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, small budgets")
    parser.add_argument("--seeds", type=int)
    parser.add_argument("--parts", default="1,2,3,4,5", help="comma-separated subset of 1-5")
    parser.add_argument("--optimizers", help="part 3: comma-separated registry names")
    parser.add_argument(
        "--interval-share", type=float, default=0.05, help="Ray PBT's interval, share of T"
    )
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    parts = tuple(sorted({int(p) for p in args.parts.split(",")}))
    if 2 in parts and 1 not in parts:
        parser.error("part 2 measures part 1's jobs: --parts must include 1")
    cfg = Config(
        seeds=args.seeds or (1 if quick else 3),
        population=4 if quick else 8,
        t_max=400 if quick else 2000,
        interval_share=args.interval_share,
        part3_population=2 if quick else 8,
        part3_t_max=100 if quick else 1000,
        part3_engine_options={"initial_step_share": 0.1} if quick else {},
        optimizers=tuple(args.optimizers.split(","))
        if args.optimizers
        else default_optimizers(quick),
        parts=parts,
    )
    return cfg, quick


def main(argv: list[str] | None = None) -> int:
    from client import Client

    cfg, quick = parse(argv)
    interrupt_on_sigterm()
    bench = Bench("jobs", quick, CODE_PATHS)
    bench.header(
        f"{WORKERS} workers; P = {cfg.population}, T = {cfg.t_max}, seeds {cfg.seeds}, "
        f"Ray PBT interval {cfg.interval_share:.0%} of T; part 3 P = {cfg.part3_population}, "
        f"T = {cfg.part3_t_max}; parts {','.join(map(str, cfg.parts))}"
    )
    out: dict[str, Any] = {"bench": "jobs", "version": bench.version, "quick": quick}
    out |= {"population": cfg.population, "t_max": cfg.t_max, "seeds": cfg.seeds}
    part_s: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp,
        asktell_server(Path(tmp)) as base,
        Client(base, timeout=120.0) as client,
    ):
        if 1 in cfg.parts:
            t = time.perf_counter()
            runs = part1(client, bench, cfg)
            part_s["part 1"] = time.perf_counter() - t
            out |= report_part1(runs)
            if 2 in cfg.parts:
                out |= report_part2(runs["ipbt job"], runs["Ray Tune PBT"])
        if 3 in cfg.parts:
            t = time.perf_counter()
            results = part3(client, bench, cfg)
            part_s["part 3"] = time.perf_counter() - t
            out |= report_part3(results, cfg)
        if 4 in cfg.parts:
            t = time.perf_counter()
            out |= report_part4(part4(client, bench, cfg))
            part_s["part 4"] = time.perf_counter() - t
        if 5 in cfg.parts:
            t = time.perf_counter()
            out |= report_part5(part5(client, bench, cfg))
            part_s["part 5"] = time.perf_counter() - t
    targets(out)
    bench.report(out, part_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
