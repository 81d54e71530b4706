"""The worst case of one ask per engine at its caps (issue 21): wall time and peak memory.

Each case runs in its own process (so peak RSS is the case's), with one torch thread as in the
server, on a synthetic history: ``n`` completed trials of a float-only space of dimension ``d``
(quadratic objectives, one linear constraint where ``k = 1``), then one ``suggest`` of ``count``
points. The caps and the bound they keep are ``engines.limits``; this script prints one
markdown row per case (wall and CPU seconds of the ask: on a shared machine the CPU time is
what an idle core would take) and ONE final JSON line.

    PYTHONPATH=. python -m bench.engine_caps            # every case
    PYTHONPATH=. python -m bench.engine_caps gp pom     # the cases of these engines
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from typing import Any

#: (engine, options, d, count, n observations, objectives, constraints): the caps' corners.
CASES: list[tuple[str, dict[str, Any], int, int, int, int, int]] = [
    ("random", {}, 1000, 1000, 0, 1, 0),
    ("gp", {"num_restarts": 16, "raw_samples": 1024}, 25, 10, 300, 2, 1),
    ("gp", {}, 25, 10, 500, 1, 0),
    ("turbo-enn", {"n_candidates": 10_000}, 1000, 100, 5000, 1, 0),
    (
        "turbo-enn",
        {
            "noisy": True,
            "n_candidates": 10_000,
            "k_neighbors": 100,
            "fit_candidates": 100,
            "fit_samples": 1000,
        },
        100,
        1000,
        5000,
        1,
        0,
    ),
    (
        "turbo-enn",
        {
            "noisy": True,
            "preselect": 1000,
            "k_neighbors": 100,
            "fit_candidates": 100,
            "fit_samples": 1000,
        },
        50,
        1000,
        5000,
        1,
        0,
    ),
    (
        "pom",
        {
            "n_samples": 128,
            "pool_size": 4096,
            "num_features": 1024,
            "refine_points": 256,
            "top_candidates": 1024,
        },
        25,
        20,
        300,
        3,
        0,
    ),
    ("mwgd", {"n_particles": 128, "steps": 200}, 20, 32, 300, 2, 1),
    ("lcbo", {"local_points": 500, "n_candidates": 5000, "num_restarts": 16}, 100, 20, 2000, 1, 1),
    ("lcbo", {"local_points": 500, "n_candidates": 5000, "num_restarts": 16}, 200, 10, 2000, 1, 2),
]


def run_case(
    engine: str, options: dict[str, Any], d: int, count: int, n: int, m: int, k: int
) -> dict[str, Any]:
    """One ask in this process; returns seconds and peak RSS (MB)."""
    import numpy as np
    import torch

    from engines.base import History, Problem
    from engines.registry import make_engine
    from engines.space import FloatParam, SearchSpace

    torch.set_num_threads(1)
    space = SearchSpace([FloatParam(f"x{i}", 0.0, 1.0) for i in range(d)])
    problem = Problem(space, n_objectives=m, n_constraints=k)
    rng = np.random.default_rng(0)
    X = rng.random((n, d))
    Y = np.stack([((X - 0.3 - 0.4 * j) ** 2).sum(axis=1) for j in range(m)], axis=1)
    C = X[:, :k] - 0.8
    history = History(X, Y, C, np.zeros((0, d)))
    eng = make_engine(engine, options)
    start, cpu_start = time.perf_counter(), time.process_time()
    eng.suggest(problem, history, count, {}, rng)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": round(rss_mb),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--case":
        print(json.dumps(run_case(*json.loads(sys.argv[2]))))
        return
    only = set(sys.argv[1:])
    rows = []
    print("| engine | options | d | count | n | m | k | wall s | CPU s | peak RSS MB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for case in CASES:
        if only and case[0] not in only:
            continue
        out = subprocess.run(
            [sys.executable, "-m", "bench.engine_caps", "--case", json.dumps(case)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        result = (
            json.loads(out.stdout.strip().splitlines()[-1])
            if out.returncode == 0
            else {"error": out.stderr.strip().splitlines()[-1:]}
        )
        engine, options, d, count, n, m, k = case
        rows.append(
            {
                "engine": engine,
                "options": options,
                "d": d,
                "count": count,
                "n": n,
                "m": m,
                "k": k,
                **result,
            }
        )
        print(
            f"| {engine} | {json.dumps(options)} | {d} | {count} | {n} | {m} | {k} | "
            f"{result.get('seconds')} | {result.get('cpu_seconds')} | "
            f"{result.get('peak_rss_mb')} |",
            flush=True,
        )
    print(json.dumps({"bench": "engine_caps", "rows": rows}))


if __name__ == "__main__":
    main()
