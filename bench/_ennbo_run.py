"""Helper of ``bench/turbo_enn.py``: the test problems (NumPy only) and the ennbo 0.3.3 runs.

Imported by the bench for the problems; run as a subprocess for everything that touches ennbo
(the TuRBO-ENN authors' package, PyPI ``ennbo==0.3.3``, installed with ``--no-deps``). ennbo
sets ``OMP/OPENBLAS/MKL_NUM_THREADS=1`` and imports torch when it is imported, which would leave
the bench's torch single-threaded, so it only ever runs in its own process:
``python -m bench._ennbo_run < request.json > result.json``, from the repository's root. The
request is one JSON object:

- ``{"mode": "timing", "configs": [{"n", "d", "q", "acq"}...], "reps": 3, "seed": 0}``: per
  config, a fresh optimizer on [0,1]^d (Rust path: ENN with an explicit ``k=10``,
  ``num_fit_samples=10``, ``num_fit_candidates=30``, default candidates ``min(5000, 100 d)``)
  receives the N points of ``timing_data(n, d)`` in one ``tell`` (the "cold tell": index build
  and fit), then one untimed cycle and ``reps`` timed cycles of ``tell(1 new uniform point)`` +
  ``ask(q)`` (the steady state). The proposal time is the median of
  tell + ask over the timed cycles.
- ``{"mode": "optimize", "runs": [{"problem", "d", "budget", "q", "seed", "acq",
  "num_init"}...]}``: optimization runs; each returns every evaluated value, the wall time
  and the time spent in ask + tell.

The answer is one JSON object on stdout. ennbo maximizes: it is told ``-f``.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: Every problem's box, as in the BoTorch TuRBO tutorial: [-5, 10]^d.
LOW, HIGH = -5.0, 10.0


def to_box(U: np.ndarray) -> np.ndarray:
    """Unit cube to [LOW, HIGH]^d."""
    return LOW + (HIGH - LOW) * np.asarray(U, dtype=np.float64)


def ackley(Z: np.ndarray) -> np.ndarray:
    """Ackley (a=20, b=0.2, c=2 pi), as ``botorch.test_functions.Ackley``; minimum 0 at 0."""
    Z = np.atleast_2d(Z)
    a, b, c = 20.0, 0.2, 2.0 * math.pi
    part1 = -a * np.exp(-b * np.sqrt(np.mean(Z * Z, axis=1)))
    part2 = -np.exp(np.mean(np.cos(c * Z), axis=1))
    return part1 + part2 + a + math.e


def rosenbrock(Z: np.ndarray) -> np.ndarray:
    """Rosenbrock, as ``botorch.test_functions.Rosenbrock``; minimum 0 at (1, ..., 1)."""
    Z = np.atleast_2d(Z)
    return np.sum(100.0 * (Z[:, 1:] - Z[:, :-1] ** 2) ** 2 + (Z[:, :-1] - 1.0) ** 2, axis=1)


PROBLEMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "ackley": ackley,
    "rosenbrock": rosenbrock,
}


def objective(name: str, U: np.ndarray) -> np.ndarray:
    """Problem ``name`` (minimized) at unit-cube points ``U``: ``(n,)``; ``bbob-fN`` is COCO's
    bbob function N on its own domain (``bench/bbob.py``)."""
    if name.startswith("bbob-f"):
        return _bbob(int(name.removeprefix("bbob-f")), U.shape[1])(U)
    return PROBLEMS[name](to_box(U))


@functools.cache
def _bbob(function: int, d: int) -> Callable[[np.ndarray], np.ndarray]:
    from bench.bbob import Objective

    return Objective(function, d)


def timing_data(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The data of the timing part, identical in every process: X uniform in [0,1]^d, y = Ackley
    on [-5,10]^d (minimized)."""
    X = np.random.default_rng([seed, n, d]).random((n, d))
    return X, objective("ackley", X)


# --- ennbo --------------------------------------------------------------------------------


def make_optimizer(d: int, acq: str, seed: int, num_init: int | None = None) -> Any:
    """An ennbo TuRBO-ENN optimizer on [0,1]^d that takes the Rust path (explicit k)."""
    from enn import AcqType, create_optimizer, turbo_enn_config
    from enn.turbo.config.enn_fit_config import ENNFitConfig
    from enn.turbo.config.enn_surrogate_config import ENNSurrogateConfig
    from enn.turbo.rust_optimizer import RustOptimizer

    surrogate = ENNSurrogateConfig(
        k=10, fit=ENNFitConfig(num_fit_samples=10, num_fit_candidates=30)
    )
    config = turbo_enn_config(
        enn=surrogate,
        num_init=num_init,
        acq_type={"pareto": AcqType.PARETO, "ucb": AcqType.UCB}[acq],
    )
    bounds = np.array([[0.0, 1.0]] * d)
    opt = create_optimizer(bounds=bounds, config=config, rng=np.random.default_rng(seed))
    if not isinstance(opt, RustOptimizer):
        raise RuntimeError("ennbo took its pure-Python path; the Rust path needs an explicit k")
    return opt


def time_config(n: int, d: int, q: int, acq: str, reps: int, seed: int) -> dict[str, Any]:
    X, y = timing_data(n, d, seed)
    opt = make_optimizer(d, acq, seed)
    rng = np.random.default_rng([seed, n, d, q, 1])
    t0 = time.perf_counter()
    opt.tell(X, -y[:, None])
    cold_tell = time.perf_counter() - t0
    tells: list[float] = []
    asks: list[float] = []
    for i in range(reps + 1):
        x_new = rng.random((1, d))
        t0 = time.perf_counter()
        opt.tell(x_new, -objective("ackley", x_new)[:, None])
        t1 = time.perf_counter()
        arms = opt.ask(q)
        t2 = time.perf_counter()
        if arms.shape != (q, d):
            raise RuntimeError(f"ennbo ask({q}) returned {arms.shape}")
        if i:  # the first cycle is a warm-up
            tells.append(t1 - t0)
            asks.append(t2 - t1)
    progress = opt.init_progress
    return {
        "n": n,
        "d": d,
        "q": q,
        "acq": acq,
        "cold_tell_s": cold_tell,
        "tell_s": statistics.median(tells),
        "ask_s": statistics.median(asks),
        "proposal_s": statistics.median(t + a for t, a in zip(tells, asks, strict=True)),
        "proposal_all_s": [t + a for t, a in zip(tells, asks, strict=True)],
        "init_progress": list(progress) if progress is not None else None,
        "tr_length": opt.tr_length,
    }


def optimize(req: dict[str, Any]) -> dict[str, Any]:
    """One run; ``values`` are every evaluated value, in order."""
    d, q, budget, seed = int(req["d"]), int(req["q"]), int(req["budget"]), int(req["seed"])
    problem = str(req["problem"])
    opt = make_optimizer(d, str(req.get("acq", "pareto")), seed, req.get("num_init"))
    values: list[float] = []
    t0 = time.perf_counter()
    propose_s = 0.0
    while len(values) < budget:
        count = min(q, budget - len(values))
        t1 = time.perf_counter()
        X = opt.ask(count)
        propose_s += time.perf_counter() - t1
        y = objective(problem, np.clip(X, 0.0, 1.0))
        t1 = time.perf_counter()
        opt.tell(X, -y[:, None])
        propose_s += time.perf_counter() - t1
        values.extend(float(v) for v in y)
    return {"values": values, "wall_s": time.perf_counter() - t0, "propose_s": propose_s}


def main() -> int:
    req = json.load(sys.stdin)
    import enn  # noqa: F401  (first, so that its thread settings apply to this process)

    if req["mode"] == "timing":
        reps, seed = int(req.get("reps", 3)), int(req.get("seed", 0))
        out: dict[str, Any] = {"results": []}
        for c in req["configs"]:
            out["results"].append(
                time_config(int(c["n"]), int(c["d"]), int(c["q"]), str(c["acq"]), reps, seed)
            )
            print(
                f"  ennbo {c['acq']} n={c['n']} d={c['d']} q={c['q']}: "
                f"{out['results'][-1]['proposal_s']:.4f} s",
                file=sys.stderr,
                flush=True,
            )
    elif req["mode"] == "optimize":
        out = {"results": []}
        for run in req["runs"]:
            out["results"].append(optimize(run))
            best = min(out["results"][-1]["values"])
            print(
                f"    ennbo {run.get('acq', 'pareto')} {run['problem']} seed {run['seed']}: "
                f"best {best:.4g}, {out['results'][-1]['wall_s']:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    else:
        raise SystemExit(f"unknown mode {req['mode']!r}")
    import torch

    out["threads"] = {"torch": torch.get_num_threads(), "omp_env": _env("OMP_NUM_THREADS")}
    json.dump(out, sys.stdout)
    return 0


def _env(name: str) -> str | None:
    import os

    return os.environ.get(name)


if __name__ == "__main__":
    raise SystemExit(main())
