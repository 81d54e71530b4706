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

``--task noisy10`` (issue 22: a task that separates the methods, as digits does not): the same
MLP, search space and budget shape on a harder, schedule-sensitive problem with more validation
data: ``make_classification`` (20,000 rows, 64 features of which 20 informative and 10
redundant, 10 classes of 2 clusters each, class separation 1.0, 10 % of labels flipped; one
fixed dataset) split 60 / 20 / 20 (4,000 validation rows: one row is 0.025 points), and
``t_max = 4,000`` steps. With flipped labels and small batches, SGD at a constant learning
rate ends noisy, so a schedule that lowers it late should pay. The task was fixed before any
run on it, and so was the rule: it "separates" the methods when the best and worst median
validation accuracies among PBT's three intervals and random search differ by at least 1 point;
IPBT then must be within 0.5 points of PBT at its best interval and at least 1 point above
random search and above PBT at its worst interval (``separating_claim``).

Time: the 15 runs go to 2 worker processes (the machine has 2 cores), 1 torch thread each.

    .venv/bin/python -m bench.pbt            # full: 3 seeds x 5 methods, P = 8, t_max = 2000
    .venv/bin/python -m bench.pbt --quick    # 1 seed, P = 4, t_max = 400: < 5 min
    .venv/bin/python -m bench.pbt --task noisy10   # the separating task, t_max = 4,000

Progress goes to stderr; the tables and the final JSON line to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import TypeAdapter
from sklearn.datasets import make_classification

from bench.harness import Bench, EngineMethod, Grid, Job, markdown_table
from client.models import Parameter
from client.models import Unit as UnitDocument
from engines.base import History, Problem, Unit
from engines.space import SearchSpace
from examples.pbt_digits_worker import SEARCH_SPACE, Digits, DigitsTrainer
from service.problem import to_param

#: The files whose changes make the reported code version "+dirty".
CODE_PATHS = ("engines", "service", "client", "examples", "bench/pbt.py")

SEEDS = 3
POPULATION = 8
T_MAX = 2000
INTERVALS = {"pbt-1%": 0.01, "pbt-3%": 0.03, "pbt-10%": 0.10}
METHODS = ["ipbt", *INTERVALS, "random"]
#: Claim tolerance: IPBT's median validation accuracy at least the best PBT's minus this.
TOLERANCE = 0.005
#: ``--task noisy10``: its fixed dataset's seed, t_max, and the "clear margin" of its claim.
NOISY10_DATA_SEED = 20261206
NOISY10_T_MAX = 4000
MARGIN = 0.01


def load_task(task: str) -> Digits:
    """The task's fixed split, in the worker example's split type (64 features, 10 classes)."""
    if task == "digits":
        return Digits.load()
    X, y = make_classification(
        n_samples=20_000,
        n_features=64,
        n_informative=20,
        n_redundant=10,
        n_classes=10,
        n_clusters_per_class=2,
        class_sep=1.0,
        flip_y=0.1,
        random_state=NOISY10_DATA_SEED,
    )
    return Digits.from_arrays(X, y)


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


def train_units(
    method: str, seed: int, population: int, t_max: int, trainer: DigitsTrainer, prob: Problem
) -> tuple[list[Unit], float]:
    """Drive ``ipbt`` or ``pbt`` to the end of its schedule; the units and the engine seconds."""
    options: dict[str, Any] = {"t_max": t_max, "population_size": population}
    if method in INTERVALS:
        options["interval"] = max(1, round(INTERVALS[method] * t_max))
    engine = EngineMethod("ipbt" if method == "ipbt" else "pbt", options, prob)
    units: list[Unit] = []
    engine_s = 0.0
    for version in range(100_000):
        history = dataclasses.replace(History.empty(prob), units=tuple(units))
        a = time.perf_counter()
        proposal = engine.suggest(history, 2 * population, np.random.default_rng([seed, version]))
        engine_s += time.perf_counter() - a
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
    return units, engine_s


def run_scheduler(method: str, seed: int, population: int, t_max: int, task: str) -> dict[str, Any]:
    """One ``ipbt`` or ``pbt`` run; the run's figures."""
    prob = problem()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-pbt-") as folder:
        trainer = DigitsTrainer(Path(folder), load_task(task))
        units, engine_s = train_units(method, seed, population, t_max, trainer, prob)
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


def run_random(seed: int, population: int, t_max: int, task: str) -> dict[str, Any]:
    """``population`` uniform configurations, each trained ``t_max`` steps."""
    prob = problem()
    rng = np.random.default_rng([seed, 99])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-rs-") as folder:
        trainer = DigitsTrainer(Path(folder), load_task(task))
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


def run_one(job: Job, population: int, t_max: int) -> dict[str, Any]:
    if job.method == "random":
        return run_random(job.seed, population, t_max, job.problem)
    return run_scheduler(job.method, job.seed, population, t_max, job.problem)


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} ({min(values):.4f}-{max(values):.4f})"


def print_tables(by_method: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """The per-method and per-run tables; the medians of each method that ran."""
    medians: dict[str, dict[str, float]] = {}
    rows = []
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
        units = statistics.median(r["units"] for r in runs)
        restarts = statistics.median(r["restarts"] for r in runs)
        rows.append(
            [
                m,
                summary(val),
                summary(test),
                f"{medians[m]['run_s']:.0f}",
                f"{units:.0f}",
                f"{restarts:.0f}",
            ]
        )
    print()
    header = ["method", "val acc, median (min-max)", "test acc", "s per run", "units", "restarts"]
    markdown_table(header, rows)
    print()
    markdown_table(
        ["method", "seed", "val acc", "test acc", "s", "engine s", "units", "steps", "best params"],
        (
            [
                m,
                r["seed"],
                f"{r['val_acc']:.4f}",
                f"{r['test_acc']:.4f}",
                f"{r['run_s']:.0f}",
                f"{r['engine_s']:.1f}",
                r["units"],
                r["steps"],
                params_text(r["best_params"]),
            ]
            for m, runs in by_method.items()
            for r in runs
        ),
    )
    return medians


def params_text(params: dict[str, Any]) -> str:
    return ", ".join(
        f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in params.items()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, P = 4, t_max = 400")
    parser.add_argument("--seeds", type=int)
    # "%" doubled: argparse formats help strings with %.
    methods_help = f"comma-separated subset of {METHODS}".replace("%", "%%")
    parser.add_argument("--methods", help=methods_help)
    parser.add_argument("--task", choices=("digits", "noisy10"), default="digits")
    args = parser.parse_args(argv)
    population, t_max = (4, 400) if args.quick else (POPULATION, T_MAX)
    if args.task == "noisy10" and not args.quick:
        t_max = NOISY10_T_MAX
    seeds = args.seeds or (1 if args.quick else SEEDS)
    methods = [m for m in METHODS if m in (args.methods.split(",") if args.methods else METHODS)]
    bench = Bench("pbt", bool(args.quick), CODE_PATHS)
    bench.header(
        f"task {args.task}; 2 workers x 1 torch thread; P = {population}, t_max = {t_max}, "
        f"seeds {seeds}"
    )
    results: list[dict[str, Any]] = []

    def record(job: Job, r: dict[str, Any]) -> None:
        results.append(r)
        bench.progress(
            f"  {r['method']} seed {r['seed']}: val {r['val_acc']:.4f}, test "
            f"{r['test_acc']:.4f}, {r['units']} units, {r['run_s']:.0f} s"
        )

    with Grid(bench) as grid:
        jobs = [Job(args.task, m, s) for s in range(seeds) for m in methods]
        grid.run(run_one, jobs, record, population, t_max)
    by_method = {
        m: sorted((r for r in results if r["method"] == m), key=lambda r: r["seed"])
        for m in methods
    }
    medians = print_tables(by_method)
    out = {
        "bench": "pbt",
        "version": bench.version,
        "quick": bool(args.quick),
        "task": args.task,
        "population": population,
        "t_max": t_max,
        "seeds": seeds,
    }
    bench.report(out | claim(medians) | separating_claim(medians))
    return 130 if grid.interrupted else 0


def claim(medians: dict[str, dict[str, float]]) -> dict[str, Any]:
    """IPBT against PBT at its best interval: the line that says so and the JSON figures."""
    pbt = {m: medians[m]["val_acc"] for m in INTERVALS if m in medians}
    best_interval = max(pbt, key=lambda m: pbt[m]) if pbt else None
    held = (
        medians["ipbt"]["val_acc"] >= pbt[best_interval] - TOLERANCE
        if best_interval and "ipbt" in medians
        else None
    )
    print()
    if best_interval and "ipbt" in medians:
        print(
            f"IPBT median validation accuracy {medians['ipbt']['val_acc']:.4f} vs PBT at its best "
            f"interval ({best_interval}) {pbt[best_interval]:.4f}: claim "
            f"{'HELD' if held else 'NOT HELD'} (tolerance {TOLERANCE * 100:.1f} points)"
        )
    return {
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
        "claim_held": held,
        "s_per_run": {m: v["run_s"] for m, v in medians.items()},
    }


def separating_claim(medians: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The noisy10 rule of the module doc: does the task separate the baselines, and does IPBT
    match the best PBT interval and clear random search and the worst interval by MARGIN?"""
    baselines = {m: medians[m]["val_acc"] for m in [*INTERVALS, "random"] if m in medians}
    if "ipbt" not in medians or len(baselines) < len(INTERVALS) + 1:
        return {"separates": None, "separating_claim": None}
    separates = max(baselines.values()) - min(baselines.values()) >= MARGIN
    ipbt = medians["ipbt"]["val_acc"]
    pbt = {m: baselines[m] for m in INTERVALS}
    held = (
        ipbt >= max(pbt.values()) - TOLERANCE
        and ipbt >= baselines["random"] + MARGIN
        and ipbt >= min(pbt.values()) + MARGIN
    )
    print(
        f"Baselines spread {100 * (max(baselines.values()) - min(baselines.values())):.2f} "
        f"points: {'separates' if separates else 'does not separate'} (rule: >= 1 point); "
        f"IPBT matches the best interval and clears random and the worst by 1 point: {held}"
    )
    return {"separates": separates, "separating_claim": held if separates else None}


if __name__ == "__main__":
    raise SystemExit(main())
