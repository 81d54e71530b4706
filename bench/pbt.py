"""Benchmark of the ``ipbt`` and ``pbt`` engines (issue 7): does IPBT at its defaults match PBT
at its best interval, without tuning?

One run, then markdown tables, the wall time and ONE final JSON line.

Task: the worker example's model (``examples/pbt_digits_worker.py``, ``DigitsTrainer``): an MLP
64-128-10 on scikit-learn's digits (split 60 / 20 / 20, fixed), SGD with the hyperparameters
``lr`` (log, 1e-4..1), ``momentum`` (0..0.99), ``weight_decay`` (log, 1e-8..1e-2) and
``batch_size`` (int, log, 16..128); population ``P = 8``, ``t_max = 2,000`` SGD steps per member,
so every method has the same budget of ``P t_max`` = 16,000 steps. Methods:

- ``ipbt``: the engine at its defaults (first step 1 % of ``t_max``, doubled at each restart).
- ``pbt-1%``, ``pbt-3%``, ``pbt-10%``: the ``pbt`` engine (asynchronous, its default; quantile
  0.25, resample probability 0.25, factors 0.8 / 1.2) with the interval at 20, 60 and 200 steps.
- ``random``: ``P`` random configurations (uniform in the study's encoding: log-uniform for the
  log parameters), each trained ``t_max`` steps.

The schedulers run through the engine contract only (``engines.registry.make_engine``,
``suggest(problem, history, count, state, rng)``), with the units handed out each round trained
one after the other by one simulated worker per unit (a round: ask for every unit available,
train them, tell them all), checkpoints in a temporary folder. Seeds 0-2 seed the engines (and
so the initial hyperparameters, the explore draws and every unit's weight and batch seeds).

Metrics per run: the validation accuracy of the best unit of the run (the checkpoint the
study's ``best`` endpoint returns; for random search the best of its ``P`` final models), the
test accuracy of that checkpoint, the wall time, the number of units. Per method: the median
over seeds (min, max). The claim (IPBT matches or beats PBT at its best interval) is checked on
the medians of validation accuracy: ``claim_held`` is true when IPBT's median is at least the
best PBT interval's median minus 0.5 points (one digit image of the 360 validation images is
0.28 points).

Time: the 15 runs go to 2 worker processes (the machine has 2 cores), 1 torch thread each.

    .venv/bin/python -m bench.pbt            # full: 3 seeds x 5 methods, P = 8, t_max = 2000
    .venv/bin/python -m bench.pbt --quick    # 1 seed, P = 4, t_max = 400: < 5 min

Progress goes to stderr; the tables and the final JSON line to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import TypeAdapter

from bench.version import code_version
from client.models import Parameter
from client.models import Unit as UnitDocument
from engines.base import History, Problem, Unit
from engines.registry import make_engine
from engines.space import SearchSpace
from examples.pbt_digits_worker import SEARCH_SPACE, Digits, DigitsTrainer
from service.problem import to_param

#: The files whose changes make the reported code version "+dirty".
CODE_PATHS = ("engines", "service", "client", "examples", "bench/pbt.py")

WORKERS = 2
SEEDS = 3
POPULATION = 8
T_MAX = 2000
INTERVALS = {"pbt-1%": 0.01, "pbt-3%": 0.03, "pbt-10%": 0.10}
METHODS = ["ipbt", *INTERVALS, "random"]
#: Claim tolerance: IPBT's median validation accuracy at least the best PBT's minus this.
TOLERANCE = 0.005


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def problem() -> Problem:
    """The worker example's search space, parsed as the service parses a study's."""
    parameters = TypeAdapter(list[Parameter]).validate_python(SEARCH_SPACE)
    return Problem(SearchSpace([to_param(p) for p in parameters]))


@dataclasses.dataclass(frozen=True)
class BenchTrial:
    """What ``DigitsTrainer`` reads of a trial."""

    number: int
    params: dict[str, Any]
    unit: UnitDocument


def run_scheduler(method: str, seed: int, population: int, t_max: int) -> dict[str, Any]:
    """Drive ``ipbt`` or ``pbt`` to the end of its schedule; return the run's figures."""
    import torch

    torch.set_num_threads(1)
    options: dict[str, Any] = {"t_max": t_max, "population_size": population}
    if method in INTERVALS:
        options["interval"] = max(1, round(INTERVALS[method] * t_max))
    engine = make_engine("ipbt" if method == "ipbt" else "pbt", options)
    prob = problem()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-pbt-") as folder:
        trainer = DigitsTrainer(Path(folder), Digits.load())
        units: list[Unit] = []
        state: dict[str, Any] = {}
        engine_s = 0.0
        for version in range(100_000):
            history = dataclasses.replace(History.empty(prob), units=tuple(units))
            a = time.perf_counter()
            proposal = engine.suggest(
                prob, history, 2 * population, state, np.random.default_rng([seed, version])
            )
            engine_s += time.perf_counter() - a
            state = proposal.state
            if not len(proposal.X):
                if proposal.retry_after is None:
                    break
                raise RuntimeError("every unit was told, yet the engine asks to wait")
            for x, doc in zip(proposal.X, proposal.units, strict=True):
                number = len(units)
                befores: list[float] = []
                trial = BenchTrial(number, prob.space.decode(x), UnitDocument.model_validate(doc))
                acc, ref = trainer(
                    trial, lambda n, step, values, out=befores: out.append(values["accuracy"])
                )
                units.append(
                    Unit(
                        number=number,
                        x=x,
                        spec=doc,
                        state="completed",
                        y=-acc,
                        y_before=-befores[0] if befores else None,
                        checkpoint=ref,
                    )
                )
        best = min(units, key=lambda u: (u.y, u.number))
        assert best.y is not None and best.checkpoint is not None
        test = trainer.test_accuracy(best.checkpoint)
    steps = sum(u.spec["to_step"] - u.spec["from_step"] for u in units)
    return {
        "method": method,
        "seed": seed,
        "val_acc": -best.y,
        "test_acc": test,
        "run_s": time.perf_counter() - t0,
        "engine_s": engine_s,
        "units": len(units),
        "steps": steps,
        "restarts": sum(1 for u in units if u.spec["reason"] == "restart") // (2 * population),
        "best_params": prob.space.decode(best.x),
    }


def run_random(seed: int, population: int, t_max: int) -> dict[str, Any]:
    """``population`` uniform configurations, each trained ``t_max`` steps."""
    import torch

    torch.set_num_threads(1)
    prob = problem()
    rng = np.random.default_rng([seed, 99])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-rs-") as folder:
        trainer = DigitsTrainer(Path(folder), Digits.load())
        results = []
        for i in range(population):
            x = rng.random(prob.d)
            doc = {
                "member": i,
                "generation": 0,
                "from_step": 0,
                "to_step": t_max,
                "start": {"kind": "fresh"},
                "reason": "initial",
                "seed": int(rng.integers(2**31)),
            }
            trial = BenchTrial(i, prob.space.decode(x), UnitDocument.model_validate(doc))
            acc, ref = trainer(trial)
            results.append((acc, -i, ref, x))
        acc, _, ref, x = max(results)
        test = trainer.test_accuracy(ref)
    return {
        "method": "random",
        "seed": seed,
        "val_acc": acc,
        "test_acc": test,
        "run_s": time.perf_counter() - t0,
        "engine_s": 0.0,
        "units": population,
        "steps": population * t_max,
        "restarts": 0,
        "best_params": prob.space.decode(x),
    }


def run_one(method: str, seed: int, population: int, t_max: int) -> dict[str, Any]:
    if method == "random":
        return run_random(seed, population, t_max)
    return run_scheduler(method, seed, population, t_max)


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} ({min(values):.4f}-{max(values):.4f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, P = 4, t_max = 400")
    parser.add_argument("--seeds", type=int)
    parser.add_argument("--methods", help=f"comma-separated subset of {METHODS}")
    args = parser.parse_args(argv)
    population, t_max = (4, 400) if args.quick else (POPULATION, T_MAX)
    seeds = args.seeds or (1 if args.quick else SEEDS)
    methods = [m for m in METHODS if m in (args.methods.split(",") if args.methods else METHODS)]
    wall0 = time.perf_counter()
    version = code_version(*CODE_PATHS)
    print(
        f"# bench/pbt.py ({'quick' if args.quick else 'full'}), asktell {version}; Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, {WORKERS} workers x 1 torch thread, "
        f"load average {os.getloadavg()[0]:.2f}; P = {population}, t_max = {t_max}, "
        f"seeds {seeds}",
        flush=True,
    )
    jobs = [(m, s) for s in range(seeds) for m in methods]
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(WORKERS, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(run_one, m, s, population, t_max): (m, s) for m, s in jobs}
        for fut in as_completed(futures):
            r = fut.result()
            results.append(r)
            log(
                f"  {r['method']} seed {r['seed']}: val {r['val_acc']:.4f}, test "
                f"{r['test_acc']:.4f}, {r['units']} units, {r['run_s']:.0f} s "
                f"(wall {(time.perf_counter() - wall0) / 60:.1f} min)"
            )
    by_method = {
        m: sorted((r for r in results if r["method"] == m), key=lambda r: r["seed"])
        for m in methods
    }
    print()
    print("| method | val acc, median (min-max) | test acc | s per run | units | restarts |")
    print("| --- | --- | --- | --- | --- | --- |")
    medians: dict[str, dict[str, float]] = {}
    for m, runs in by_method.items():
        if not runs:
            continue
        val = [r["val_acc"] for r in runs]
        test = [r["test_acc"] for r in runs]
        medians[m] = {
            "val_acc": statistics.median(val),
            "test_acc": statistics.median(test),
            "run_s": statistics.median(r["run_s"] for r in runs),
        }
        print(
            f"| {m} | {summary(val)} | {summary(test)} | {medians[m]['run_s']:.0f} | "
            f"{statistics.median(r['units'] for r in runs):.0f} | "
            f"{statistics.median(r['restarts'] for r in runs):.0f} |"
        )
    print()
    print("| method | seed | val acc | test acc | s | engine s | units | steps | best params |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m, runs in by_method.items():
        for r in runs:
            params = ", ".join(
                f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in r["best_params"].items()
            )
            print(
                f"| {m} | {r['seed']} | {r['val_acc']:.4f} | {r['test_acc']:.4f} | "
                f"{r['run_s']:.0f} | {r['engine_s']:.1f} | {r['units']} | {r['steps']} | {params} |"
            )
    pbt = {m: medians[m]["val_acc"] for m in INTERVALS if m in medians}
    best_interval = max(pbt, key=lambda m: pbt[m]) if pbt else None
    claim = (
        medians["ipbt"]["val_acc"] >= pbt[best_interval] - TOLERANCE
        if best_interval and "ipbt" in medians
        else None
    )
    wall = time.perf_counter() - wall0
    print()
    if best_interval and "ipbt" in medians:
        print(
            f"IPBT median validation accuracy {medians['ipbt']['val_acc']:.4f} vs PBT at its best "
            f"interval ({best_interval}) {pbt[best_interval]:.4f}: claim "
            f"{'HELD' if claim else 'NOT HELD'} (tolerance {TOLERANCE * 100:.1f} points)"
        )
    print(f"wall time {wall / 60:.1f} min")
    print(
        json.dumps(
            {
                "bench": "pbt",
                "version": version,
                "quick": bool(args.quick),
                "population": population,
                "t_max": t_max,
                "seeds": seeds,
                "ipbt_val_acc": medians.get("ipbt", {}).get("val_acc"),
                "ipbt_test_acc": medians.get("ipbt", {}).get("test_acc"),
                "pbt_best_interval": best_interval,
                "pbt_best_interval_val_acc": pbt.get(best_interval) if best_interval else None,
                "pbt_best_interval_test_acc": (
                    medians[best_interval]["test_acc"] if best_interval else None
                ),
                "pbt_val_acc_by_interval": pbt,
                "random_search_val_acc": medians.get("random", {}).get("val_acc"),
                "random_search_test_acc": medians.get("random", {}).get("test_acc"),
                "claim_held": claim,
                "s_per_run": {m: v["run_s"] for m, v in medians.items()},
                "wall_s": round(wall, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
