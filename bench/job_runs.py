"""What the parts of bench/jobs.py share: the asktell server they run against, one job
submitted and awaited with its figures, the runs' medians, and the parts' configuration."""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.servers import asktell_serve
from bench.version import ROOT

WORKERS = 2
DATASET = "digits"
OPTIMIZER = "olion"
OPTIONS: dict[str, Any] = {"hidden": [128]}

#: A job taking longer than this fails the bench (a stuck job must not hang it).
JOB_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Config:
    seeds: int
    population: int
    t_max: int
    interval_share: float
    part3_population: int
    part3_t_max: int
    #: Engine options of part 3's jobs ({} = ipbt's defaults).
    part3_engine_options: dict[str, Any]
    optimizers: tuple[str, ...]
    parts: tuple[int, ...]


@contextmanager
def asktell_server(tmp: Path) -> Iterator[str]:
    """``asktell serve`` (one uvicorn worker, running jobs) on a fresh SQLite file in ``tmp``,
    with the ``sleep`` workload installed (part 5) for its workers, local or on Ray."""
    from bench import sleep_workload

    sleep_workload.install(tmp / "site")
    inherited = filter(None, os.environ.get("PYTHONPATH", "").split(":"))
    with asktell_serve(
        tmp,
        ASKTELL_ARTIFACTS_DIR=str(tmp / "artifacts"),
        ASKTELL_JOB_WORKERS=str(WORKERS),
        PYTHONPATH=":".join([str(tmp / "site"), str(ROOT), *inherited]),
    ) as base:
        yield base


def run_job(
    client: Any,
    name: str,
    dataset: str,
    optimizer: str,
    budget: tuple[int, int],
    seed: int,
    engine_options: dict[str, Any] | None = None,
    workers: int = WORKERS,
    **fields: Any,
) -> dict[str, Any]:
    """One ``ipbt`` job (``budget``: population, steps per member; ``fields``: more of the
    job's fields, e.g. ``executor``), submitted and awaited; its figures."""
    population, t_max = budget
    t0 = time.perf_counter()
    job = client.submit_job(
        **{
            "name": name,
            "dataset": dataset,
            "workload": {"name": "mlp", "options": OPTIONS},
            "optimizer": optimizer,
            "engine": {"name": "ipbt", "options": engine_options or {}},
            "budget": {"steps": t_max, "population": population},
            "parallelism": workers,
            "seed": seed,
            **fields,
        }
    )
    info = job.wait(progress=False, poll_seconds=0.2, timeout=JOB_TIMEOUT_S)
    wall = time.perf_counter() - t0
    if info.state != "succeeded" or info.result is None:
        raise RuntimeError(f"job {name} ended {info.state}: {info.error}")
    elapsed = float(info.elapsed_seconds or wall)
    return {
        "name": name,
        "seed": seed,
        "val_score": info.result.val_score,
        "test_score": info.result.test_score,
        "wall_s": wall,
        "elapsed_s": elapsed,
        "train_s": info.train_seconds,
        "units": info.units_done,
        "steps": info.steps_done,
        "overhead_share": 1.0 - info.train_seconds / (workers * elapsed),
        "overhead_s_per_unit": (workers * elapsed - info.train_seconds) / max(1, info.units_done),
        "breakdown": time_breakdown(client, info),
    }


def time_breakdown(client: Any, info: Any) -> dict[str, float]:
    """Sums over the study's told units of what the workers recorded in their metadata; the
    job's start-up (its start to the first unit's, worker processes starting included) and
    wind-down (the last unit told to the job's end: test score, model); and the generation
    gaps (from the last unit of a generation told to the first unit of the next started:
    every worker waits while the engine closes the generation), in seconds."""
    keys = ("train_seconds", "load_seconds", "save_seconds", "unit_seconds", "ask_seconds")
    sums = dict.fromkeys(keys, 0.0)
    starts, ends = [], []
    generations: dict[int, list[Any]] = {}
    for trial in client.get_study(info.study_id).trials():
        meta = trial.metadata or {}
        for k in keys:
            sums[k] += float(meta.get(k, 0.0))
        starts.append(trial.started_at or trial.created_at)
        if trial.completed_at is not None:
            ends.append(trial.completed_at)
        if trial.unit is not None:
            generations.setdefault(trial.unit.generation, []).append(trial)
    if starts and ends and info.started_at and info.finished_at:
        sums["startup_seconds"] = (min(starts) - info.started_at).total_seconds()
        sums["winddown_seconds"] = (info.finished_at - max(ends)).total_seconds()
    order = sorted(generations)
    sums["generation_gap_seconds"] = sum(
        (
            min(t.started_at or t.created_at for t in generations[b])
            - max(t.completed_at for t in generations[a] if t.completed_at is not None)
        ).total_seconds()
        for a, b in itertools.pairwise(order)
        if any(t.completed_at is not None for t in generations[a])
    )
    sums["generations"] = float(len(order))
    return sums


def med(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def span(runs: list[dict[str, Any]], key: str, digits: int = 4) -> str:
    values = [r[key] for r in runs if r.get(key) is not None]
    if not values:
        return "-"
    m = statistics.median(values)
    return f"{m:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"
