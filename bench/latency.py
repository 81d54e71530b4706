"""Ask latency that does not depend on the engine (issue 20): part 1, the suggestion pool;
part 2, isolation by the engine processes. Each part runs its own ``asktell serve`` (SQLite, one
uvicorn worker).

Part 1, the pool: ``gp`` on Hartmann-6 (d = 6, minimize, optimum -3.32237) and ``pom`` on
BraninCurrin (d = 2, two objectives, reference point (18, 6), maximum hypervolume 59.3601),
each (problem, seed) on new studies. Four worker threads ask for one trial, evaluate it for
0.5 s (a sleep, then the function), and tell it, until 60 evaluations were asked; 5 seeds.
Each (problem, seed) runs twice: with the pool (``max_staleness`` default, one batch's worth)
and without (``max_staleness`` 0: every ask runs the engine, the behaviour before the pool),
``--modes`` choosing; each run starts 5 s after the previous one ended, so that the refills
its last tells asked for have ended (they would hold the engine process the new study's
first asks need).
Reported per problem and mode:

- p50 and p99 of the ask latency seen by the workers (HTTP round trip included, all seeds
  pooled; the server imports each engine on an untimed warm-up study first), and the share of
  trials served from the pool (``details.pool``);
- final quality, median over seeds with its range: ``-best`` value for Hartmann-6, the
  hypervolume share of all evaluated points for BraninCurrin (higher is better for both);
  ``pool_quality_ratio_{engine}`` = median quality with the pool / median quality without.

Targets: p99 ask at most 50 ms with the pool; quality with the pool no worse than without
beyond the seeds' spread. ``--quick``: 1 seed x 16 evaluations.

Part 2, isolation: while a ``gp`` study with 2,000 completed trials on 20 parameters keeps the
server's engine pool busy (a client asks and tells on it without pause), one client runs
ask+tell pairs on a second, ``random``-engine study of the same server. Target: the p99 of
those pairs under 25 ms. ``--quick``: 300 trials on 10 parameters and fewer pairs.

    .venv/bin/python -m bench.latency                 # both parts
    .venv/bin/python -m bench.latency --quick         # both, small
    .venv/bin/python -m bench.latency --part 1 --engines gp   # the pool, Hartmann-6 only

Prints the header, the tables, the wall time and one JSON line (keys ``pool_ask_p99_ms_gp``,
``inline_ask_p99_ms_gp``, ``pool_quality_ratio_gp``, the same for ``pom``, and
``isolation_ask_p99_ms``).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from bench.harness import Bench, fmt, log, markdown_table, print_target_table, round4
from bench.service_throughput import Resources, server
from client import Client
from engines.metrics import hypervolume

TARGET_P99_MS = 25.0

CODE_PATHS = ("service", "engines", "bench/latency.py")

# --- part 1: the suggestion pool ------------------------------------------------------------

WORKERS = 4
EVAL_SECONDS = 0.5
EVALUATIONS = 60
SEEDS = 5
QUICK_EVALUATIONS = 16
QUICK_SEEDS = 1
MODES = ("pool", "inline")
#: Seconds between two runs of part 1: longer than a refill of either engine here.
SETTLE_SECONDS = 5.0
#: Figures of the problems (BoTorch's ``Hartmann(dim=6).optimal_value``,
#: ``BraninCurrin.ref_point`` and ``_max_hv``).
HARTMANN_OPTIMUM = -3.32237
BRANIN_CURRIN_REF = np.array([18.0, 6.0])
BRANIN_CURRIN_MAX_HV = 59.36011874867746


@dataclass(frozen=True)
class LatencyProblem:
    """A test function on the unit cube, the engine that optimizes it, and its quality."""

    key: str
    engine: str
    d: int
    objectives: tuple[dict[str, Any], ...]

    def evaluate(self, x: np.ndarray) -> dict[str, float]:
        import torch
        from botorch.test_functions import Hartmann
        from botorch.test_functions.multi_objective import BraninCurrin

        X = torch.tensor(x[None, :], dtype=torch.float64)
        if self.key == "hartmann6":
            return {"value": float(Hartmann(dim=6)(X)[0])}
        f = BraninCurrin()(X)[0]
        return {"branin": float(f[0]), "currin": float(f[1])}

    def quality(self, Y: np.ndarray) -> float:
        """Higher is better: ``-best`` (one objective), or the hypervolume share."""
        if self.key == "hartmann6":
            return float(-Y[:, 0].min())
        return hypervolume(Y, BRANIN_CURRIN_REF) / BRANIN_CURRIN_MAX_HV


PROBLEMS = (
    LatencyProblem("hartmann6", "gp", 6, ({"name": "value"},)),
    LatencyProblem(
        "branincurrin",
        "pom",
        2,
        (
            {"name": "branin", "reference": float(BRANIN_CURRIN_REF[0])},
            {"name": "currin", "reference": float(BRANIN_CURRIN_REF[1])},
        ),
    ),
)


@dataclass
class LatencyRun:
    """One (problem, mode, seed) run: ask latencies (seconds), pooled asks, final quality."""

    problem: str
    mode: str
    seed: int
    ask: list[float] = field(default_factory=list)
    pooled: int = 0
    quality: float = float("nan")
    seconds: float = 0.0


def pool_run(
    base: str, problem: LatencyProblem, mode: str, seed: int, evaluations: int
) -> LatencyRun:
    """``evaluations`` trials of a new study, asked one at a time by ``WORKERS`` threads that
    each evaluate for ``EVAL_SECONDS`` and tell."""
    run = LatencyRun(problem.key, mode, seed)
    params = [{"type": "float", "name": f"x{i}", "low": 0.0, "high": 1.0} for i in range(problem.d)]
    fields: dict[str, Any] = {"seed": seed} | ({"max_staleness": 0} if mode == "inline" else {})
    with Client(base, timeout=300) as setup:
        study_id = setup.create_study(
            f"latency-{problem.key}-{mode}-{seed}-{uuid.uuid4().hex[:6]}",
            params,
            objectives=list(problem.objectives),
            engine=problem.engine,
            **fields,
        ).id
    lock = threading.Lock()
    left = [evaluations]
    told: list[list[float]] = []
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            with Client(base, timeout=300) as c:
                study = c.get_study(study_id)
                while True:
                    with lock:
                        if left[0] == 0 or errors:
                            return
                        left[0] -= 1
                    t0 = time.perf_counter()
                    (trial,) = study.ask(1, worker_id=f"w{index}")
                    latency = time.perf_counter() - t0
                    time.sleep(EVAL_SECONDS)
                    x = np.array([trial.params[f"x{i}"] for i in range(problem.d)])
                    values = problem.evaluate(x)
                    study.tell(trial.number, values)
                    with lock:
                        run.ask.append(latency)
                        run.pooled += "pool" in trial.details
                        told.append([values[o["name"]] for o in problem.objectives])
        except BaseException as exc:
            errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(WORKERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    run.seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    run.quality = problem.quality(np.array(told))
    return run


def warm_up(base: str, problem: LatencyProblem) -> None:
    """One untimed ask and tell on a study of its own: the server imports the engine (torch,
    BoTorch) once, before any timed ask."""
    params = [{"type": "float", "name": f"x{i}", "low": 0.0, "high": 1.0} for i in range(problem.d)]
    with Client(base, timeout=300) as c:
        study = c.create_study(
            f"warm-up-{problem.key}-{uuid.uuid4().hex[:6]}",
            params,
            objectives=list(problem.objectives),
            engine=problem.engine,
        )
        (trial,) = study.ask(1)
        x = np.array([trial.params[f"x{i}"] for i in range(problem.d)])
        study.tell(trial.number, problem.evaluate(x))


def pool_runs(
    base: str,
    seeds: int,
    evaluations: int,
    problems: tuple[LatencyProblem, ...] = PROBLEMS,
    modes: tuple[str, ...] = MODES,
) -> list[LatencyRun]:
    """Every (problem, seed) in each mode (with the pool and without), one run at a time."""
    runs = []
    for problem in problems:
        warm_up(base, problem)
        for seed in range(seeds):
            for mode in modes:
                # The previous run's last refills end first: its study's background work
                # would delay this study's first asks, which the engine processes serve too.
                time.sleep(SETTLE_SECONDS)
                run = pool_run(base, problem, mode, seed, evaluations)
                log(
                    f"{problem.key} {mode} seed {seed}: {run.seconds:.1f} s, ask p99 "
                    f"{np.percentile(run.ask, 99) * 1000:.0f} ms, pooled {run.pooled}, "
                    f"quality {run.quality:.4f}"
                )
                runs.append(run)
    return runs


def pool_summary(
    runs: list[LatencyRun], problems: tuple[LatencyProblem, ...] = PROBLEMS
) -> dict[str, Any]:
    """The JSON figures of part 1, per engine: ask p50/p99 (ms) and pooled share per mode,
    median quality with its range, and the quality ratio."""
    out: dict[str, Any] = {}
    for problem in problems:
        e = problem.engine
        medians = {}
        for mode in MODES:
            mine = [r for r in runs if r.problem == problem.key and r.mode == mode]
            if not mine:
                continue
            ask_ms = np.array([a for r in mine for a in r.ask]) * 1000.0
            quality = [r.quality for r in mine]
            medians[mode] = float(np.median(quality))
            out[f"{mode}_ask_p50_ms_{e}"] = round(float(np.percentile(ask_ms, 50)), 2)
            out[f"{mode}_ask_p99_ms_{e}"] = round(float(np.percentile(ask_ms, 99)), 2)
            out[f"{mode}_pooled_share_{e}"] = round4(
                sum(r.pooled for r in mine) / sum(len(r.ask) for r in mine)
            )
            out[f"{mode}_quality_median_{e}"] = round4(medians[mode])
            out[f"{mode}_quality_range_{e}"] = [round4(min(quality)), round4(max(quality))]
        if len(medians) == len(MODES) and medians["inline"]:
            out[f"pool_quality_ratio_{e}"] = round4(medians["pool"] / medians["inline"])
        p99 = out.get(f"pool_ask_p99_ms_{e}")
        out[f"target_pool_ask_p99_{e}_met"] = None if p99 is None else p99 <= 50.0
    return out


def print_pool_table(
    summary: dict[str, Any], problems: tuple[LatencyProblem, ...] = PROBLEMS
) -> None:
    print(
        f"{'engine':8} {'mode':7} {'ask p50 ms':>10} {'ask p99 ms':>10} {'pooled':>7} "
        f"{'quality median':>15} {'range':>18}"
    )
    for problem in problems:
        e = problem.engine
        for mode in MODES:
            if f"{mode}_ask_p50_ms_{e}" not in summary:
                continue
            low, high = summary[f"{mode}_quality_range_{e}"]
            print(
                f"{e:8} {mode:7} {fmt(summary[f'{mode}_ask_p50_ms_{e}']):>10} "
                f"{fmt(summary[f'{mode}_ask_p99_ms_{e}']):>10} "
                f"{fmt(summary[f'{mode}_pooled_share_{e}'], 2):>7} "
                f"{fmt(summary[f'{mode}_quality_median_{e}']):>15} "
                f"{'[' + fmt(low) + ', ' + fmt(high) + ']':>18}"
            )
        print(f"{e}: quality ratio pool / inline {fmt(summary.get(f'pool_quality_ratio_{e}'))}")


def pool_part(res: Resources, bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Part 1 on a server of its own: the runs, their table, their JSON figures."""
    seeds = args.seeds or (QUICK_SEEDS if args.quick else SEEDS)
    evaluations = args.evaluations or (QUICK_EVALUATIONS if args.quick else EVALUATIONS)
    problems = tuple(p for p in PROBLEMS if p.engine in args.engines.split(","))
    bench.progress(
        f"part 1: {', '.join(p.engine for p in problems)}; {WORKERS} workers, {EVAL_SECONDS} s "
        f"per evaluation, {evaluations} evaluations, {seeds} seed(s)"
    )
    with server(res, f"sqlite:///{res.tmp / 'pool.db'}", "pool", 1) as base:
        runs = pool_runs(base, seeds, evaluations, problems, tuple(args.modes.split(",")))
    summary = pool_summary(runs, problems)
    print_pool_table(summary, problems)
    print()
    targets = [
        (
            f"pool_ask_p99_ms_{p.engine}",
            summary.get(f"pool_ask_p99_ms_{p.engine}"),
            "<= 50",
            summary.get(f"target_pool_ask_p99_{p.engine}_met"),
        )
        for p in problems
    ]
    print_target_table(targets)
    return {"seeds": seeds, "evaluations": evaluations, **summary}


# --- part 2: isolation ----------------------------------------------------------------------


def _gp_study(http: httpx.Client, trials: int, dims: int) -> int:
    """A gp study with ``trials`` completed trials (enqueued and told: no engine runs)."""
    params = [{"name": f"x{i}", "type": "float", "low": 0, "high": 1} for i in range(dims)]
    body = {"name": "busy-gp", "parameters": params, "engine": {"name": "gp"}, "seed": 1}
    sid = int(http.post("/v1/studies", json=body).json()["id"])
    rng = random.Random(0)
    for _ in range(trials):
        point = {p["name"]: rng.random() for p in params}
        number = http.post(f"/v1/studies/{sid}/trials", json={"params": point}).json()["number"]
        http.post(
            f"/v1/studies/{sid}/trials/{number}/tell", json={"values": {"value": rng.random()}}
        )
    return sid


def _keep_busy(
    base: str, sid: int, stop: threading.Event, done: list[float], asking: list[float]
) -> None:
    """Ask and tell on the gp study until ``stop`` (or the server stops); record each ask's
    seconds in ``done``, and when the ask in flight started in ``asking``."""
    with httpx.Client(base_url=base, timeout=600) as http, contextlib.suppress(httpx.HTTPError):
        while not stop.is_set():
            start = time.perf_counter()
            asking[:] = [start]
            answer = http.post(f"/v1/studies/{sid}/ask", json={"count": 1})
            asking.clear()
            done.append(time.perf_counter() - start)
            for trial in answer.json().get("trials", []):
                http.post(
                    f"/v1/studies/{sid}/trials/{trial['number']}/tell",
                    json={"values": {"value": random.random()}},
                )


def _pairs(http: httpx.Client, sid: int, count: int) -> list[float]:
    """Seconds of ``count`` ask+tell pairs on the random study."""
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        trial = http.post(f"/v1/studies/{sid}/ask", json={"count": 1}).json()["trials"][0]
        told = http.post(
            f"/v1/studies/{sid}/trials/{trial['number']}/tell", json={"values": {"value": 1.0}}
        )
        assert told.status_code == 200, told.text
        seconds.append(time.perf_counter() - start)
    return seconds


def isolation_part(res: Resources, bench: Bench, quick: bool) -> dict[str, Any]:
    """Part 2 on a server of its own: the pairs, their table, their JSON figures."""
    trials, dims, pairs = (300, 10, 300) if quick else (2000, 20, 2000)
    bench.progress(f"part 2: gp study {trials} trials x {dims} parameters, {pairs} pairs")
    url = f"sqlite:///{res.tmp / 'isolation.db'}"
    with (
        server(res, url, "isolation", 1) as base,
        httpx.Client(base_url=base, timeout=600) as http,
    ):
        bench.progress(f"telling {trials} trials to the gp study")
        gp = _gp_study(http, trials, dims)
        body = {
            "name": "random",
            "parameters": [{"name": "x", "type": "float", "low": 0, "high": 1}],
        }
        other = int(http.post("/v1/studies", json=body).json()["id"])
        _pairs(http, other, 20)  # warm-up
        stop, gp_asks, asking = threading.Event(), list[float](), list[float]()
        busy = threading.Thread(
            target=_keep_busy, args=(base, gp, stop, gp_asks, asking), daemon=True
        )
        busy.start()
        time.sleep(1.0)  # the gp ask is in the engine pool
        bench.progress(f"{pairs} ask+tell pairs on the random study")
        pairs_started = time.perf_counter()
        seconds = _pairs(http, other, pairs)
        # Whether a gp ask was in flight through all the pairs (it started before them).
        in_flight = [time.perf_counter() - t for t in asking if t < pairs_started]
        stop.set()  # the gp ask in flight ends with the server
    ms = np.array(seconds) * 1000
    p50, p99 = float(np.percentile(ms, 50)), float(np.percentile(ms, 99))
    gp_mean = float(np.mean(gp_asks)) if gp_asks else None
    markdown_table(
        ["study", "requests", "p50 ms", "p99 ms", "max ms"],
        [
            ["random (ask+tell pairs)", pairs, f"{p50:.2f}", f"{p99:.2f}", f"{ms.max():.2f}"],
            ["gp (asks done, concurrent)", len(gp_asks), "-", "-", f"mean {gp_mean or 0:.1f} s"],
            ["gp (ask in flight at the end)", len(in_flight), "-", "-", f"{sum(in_flight):.1f} s"],
        ],
        "lrrrr",
    )
    print()
    print_target_table([("isolation_ask_p99_ms", p99, f"< {TARGET_P99_MS:g}", p99 < TARGET_P99_MS)])
    return {
        "isolation_ask_p99_ms": round(p99, 2),
        "isolation_ask_p50_ms": round(p50, 2),
        "isolation_gp_asks": len(gp_asks),
        "isolation_gp_ask_mean_s": None if gp_mean is None else round(gp_mean, 2),
        # Seconds the gp ask in flight at the end had run (0: none through all the pairs).
        "isolation_gp_ask_in_flight_s": round(sum(in_flight), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts")
    parser.add_argument("--part", choices=("1", "2", "all"), default="all")
    parser.add_argument("--seeds", type=int, help=f"part 1: seeds (default {SEEDS})")
    parser.add_argument("--evaluations", type=int, help=f"part 1: per run ({EVALUATIONS})")
    parser.add_argument("--engines", default="gp,pom", help="part 1: of gp, pom (default both)")
    parser.add_argument(
        "--modes", default="pool,inline", help="part 1: of pool, inline (default both)"
    )
    args = parser.parse_args(argv)
    bench = Bench("latency", args.quick, CODE_PATHS)
    bench.header(f"part {args.part}")
    res = Resources()
    out: dict[str, Any] = {}
    part_s: dict[str, float] = {}
    try:
        if args.part in ("1", "all"):
            start = time.perf_counter()
            out.update(pool_part(res, bench, args))
            part_s["pool"] = time.perf_counter() - start
        if args.part in ("2", "all"):
            start = time.perf_counter()
            out.update(isolation_part(res, bench, args.quick))
            part_s["isolation"] = time.perf_counter() - start
    finally:
        res.close()
    bench.report(out, part_s)
    log("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
