"""Part 1's peer in bench/jobs.py: Ray Tune's PopulationBasedTraining on the same problem as an
asktell job.

The member's step function is the ``mlp`` workload's own ``train`` (``service/jobs/mlp.py``),
so the model, the data split (``builtin_split(dataset, seed)``, the job's), the optimizer (the
registry's, ``set_hparams`` after the restore) and the steps are the job's. A Ray Tune function
trainable trains ``interval`` steps per training iteration from its last checkpoint (the mlp
checkpoint bytes in a Ray checkpoint directory) and reports the validation score with the new
checkpoint; PBT's exploit restarts a member from a better member's checkpoint with a mutated
config, which ``train`` applies after loading the optimizer state, as a job's unit does.

PBT: Ray's defaults (asynchronous, quantile 0.25, resample probability 0.25, factors 1.2 /
0.8), ``time_attr`` the training iteration with a perturbation every iteration, the mutations
over the registry's search space of the optimizer (log-uniform for its log parameters), each
mutated value clipped to its range (Ray multiplies without bounds; a momentum of 1.1 would not
train). The population's initial configurations come from the same distributions, drawn by
Tune's variant generator with the run's seed.

Result: the checkpoint with the best validation score of any member at any iteration (every
checkpoint is kept), its test score; the wall time of ``Tuner.fit`` (``ray.init`` timed apart).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Ray sends no usage statistics (the machine has no network but the package registries).
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
#: Tune's own SIGINT handler stays installed after ``fit`` and swallows Ctrl-C: keep Python's.
os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
CHECKPOINT_FILE = "mlp.pt"


@dataclass(frozen=True)
class RaySetup:
    """What every member shares: the problem and the schedule."""

    dataset: str
    seed: int
    optimizer: str
    options: dict[str, Any]
    t_max: int
    interval: int


_SPLITS: dict[tuple[str, int], Any] = {}


def _split(dataset: str, seed: int) -> Any:
    from service.jobs.data import builtin_split

    key = (dataset, seed)
    if key not in _SPLITS:
        _SPLITS[key] = builtin_split(dataset, seed)
    return _SPLITS[key]


def _read_checkpoint(checkpoint: Any) -> tuple[bytes | None, int]:
    """The mlp checkpoint's bytes and the member's steps so far (``None, 0``: a fresh start)."""
    if checkpoint is None:
        return None, 0
    with checkpoint.as_directory() as folder:
        data = (Path(folder) / CHECKPOINT_FILE).read_bytes()
        steps = int(json.loads((Path(folder) / "steps.json").read_text())["steps"])
    return data, steps


def train_member(config: dict[str, Any], setup: RaySetup) -> None:
    """The function trainable: ``interval`` steps of the mlp workload per iteration to
    ``t_max``, each iteration reported with its checkpoint."""
    import torch
    from ray import tune

    from service.jobs.mlp import MLPWorkload
    from service.jobs.workloads import UnitInput

    torch.set_num_threads(1)
    split = _split(setup.dataset, setup.seed)
    member = zlib.crc32(tune.get_context().get_trial_id().encode())
    start, steps = _read_checkpoint(tune.get_checkpoint())
    workload = MLPWorkload()
    while steps < setup.t_max:
        n = min(setup.interval, setup.t_max - steps)
        unit = UnitInput(
            data=split,
            hparams=dict(config),
            optimizer=setup.optimizer,
            options=dict(setup.options),
            start=start,
            transform={"kind": "none"},
            steps=n,
            seed=zlib.crc32(f"{setup.seed}-{member}-{steps}".encode()) & 0x7FFFFFFF,
            report=None,
        )
        out = workload.train(unit)
        steps, start = steps + n, out.checkpoint
        with tempfile.TemporaryDirectory(prefix="bench-ray-ckpt-") as folder:
            (Path(folder) / CHECKPOINT_FILE).write_bytes(out.checkpoint)
            (Path(folder) / "steps.json").write_text(json.dumps({"steps": steps}))
            metrics = {"score": out.score, "steps": steps, "train_seconds": out.train_seconds}
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


def _domain(p: dict[str, Any]) -> Any:
    from ray import tune

    low, high = p["low"], p["high"]
    if p["type"] == "int":
        return tune.lograndint(low, high + 1) if p.get("log") else tune.randint(low, high + 1)
    return tune.loguniform(low, high) if p.get("log") else tune.uniform(low, high)


def search_space(optimizer: str) -> tuple[dict[str, Any], dict[str, tuple[float, float]]]:
    """The registry's search space of ``optimizer`` as Tune domains, and each one's bounds."""
    from engines.optim import registry

    params = [p for p in registry.search_space(optimizer) if p["type"] in ("float", "int")]
    domains = {p["name"]: _domain(p) for p in params}
    return domains, {p["name"]: (p["low"], p["high"]) for p in params}


def _clipper(bounds: dict[str, tuple[float, float]]) -> Any:
    def clip(config: dict[str, Any]) -> dict[str, Any]:
        for name, (low, high) in bounds.items():
            if name in config:
                value = min(max(config[name], low), high)
                config[name] = type(config[name])(value)
        return config

    return clip


def best_checkpoint(results: Any) -> tuple[float, bytes, int]:
    """The best validation score of any member at any iteration, its checkpoint's bytes and
    the number of reports seen."""
    best: tuple[float, Any] | None = None
    reports = 0
    for result in results:
        for checkpoint, metrics in result.best_checkpoints:
            reports += 1
            if best is None or metrics["score"] > best[0]:
                best = (float(metrics["score"]), checkpoint)
    if best is None:
        raise RuntimeError("Ray Tune reported no checkpoint")
    data, _ = _read_checkpoint(best[1])
    assert data is not None
    return best[0], data, reports


def _tuner(setup: RaySetup, population: int, storage: str) -> Any:
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining
    from ray.tune.search.basic_variant import BasicVariantGenerator

    domains, bounds = search_space(setup.optimizer)
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=1,
        hyperparam_mutations=domains,
        custom_explore_fn=_clipper(bounds),
    )
    trainable = tune.with_resources(tune.with_parameters(train_member, setup=setup), {"cpu": 1})
    return tune.Tuner(
        trainable,
        param_space=domains,
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=pbt,
            num_samples=population,
            reuse_actors=True,  # Ray's advice for PBT: no new process per exploit
            search_alg=BasicVariantGenerator(random_state=setup.seed),
        ),
        run_config=tune.RunConfig(
            name=f"pbt-{setup.dataset}-{setup.seed}",
            storage_path=storage,
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=None, checkpoint_score_attribute="score", checkpoint_score_order="max"
            ),
            verbose=0,
        ),
    )


def run_raytune_pbt(setup: RaySetup, population: int, workers: int) -> dict[str, Any]:
    """One Ray Tune PBT run in a fresh local Ray instance of ``workers`` CPUs; its figures."""
    import ray

    from service.jobs.data import score
    from service.jobs.mlp import MLPWorkload

    random.seed(setup.seed)  # PBT's explore draws use the random module
    on_sigterm = signal.getsignal(signal.SIGTERM)  # ray.init installs its own
    t0 = time.perf_counter()
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    init_s = time.perf_counter() - t0
    try:
        with tempfile.TemporaryDirectory(prefix="bench-raytune-") as storage:
            t1 = time.perf_counter()
            with contextlib.redirect_stdout(sys.stderr):  # Tune's boxes: progress, not results
                results = _tuner(setup, population, storage).fit()
            fit_s = time.perf_counter() - t1
            errors = [str(r.error) for r in results if r.error is not None]
            if errors:
                raise RuntimeError(f"Ray Tune trials failed: {errors[:2]}")
            val, data, reports = best_checkpoint(results)
            train_s = sum(
                float(m.get("train_seconds", 0.0))
                for r in results
                for m in (
                    [] if r.metrics_dataframe is None else r.metrics_dataframe.to_dict("records")
                )
            )
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, on_sigterm)
    split = _split(setup.dataset, setup.seed)
    test = score(split.task, split.y_test, MLPWorkload().predict(data, split.X_test))
    return {
        "val_score": val,
        "test_score": test,
        "wall_s": fit_s,
        "init_s": init_s,
        "reports": reports,
        "train_s": train_s,
    }
