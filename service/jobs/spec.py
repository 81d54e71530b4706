"""A job's study, derived from its ``JobCreate``: the search space (the optimizers' tuned
hyperparameters and the workload's), the engine with its budget, and the way back from a
trial's parameters to the optimizer and hyperparameters a unit trains with. The server (at
creation) and the workers share it."""

from __future__ import annotations

from typing import Any

from client.models import JOB_SCHEDULERS, JobCreate, StudyCreate
from engines.optim import registry

#: The objective of every job's study: the workload's validation score.
OBJECTIVE = "score"
#: The parameter that chooses the optimizer when a job names several.
OPTIMIZER_PARAM = "optimizer"
#: Seconds a unit's lease holds without a heartbeat (workers send one every third of it).
UNIT_LEASE_SECONDS = 60.0


def is_scheduler(config: JobCreate) -> bool:
    return config.engine_spec().name in JOB_SCHEDULERS


def search_space(config: JobCreate, workload_params: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The study's parameters. With several optimizers, ``optimizer`` is categorical and each
    optimizer's hyperparameters are named ``<optimizer>.<name>``.

    Raises:
        ValueError: a workload parameter named like an optimizer's.
    """
    optimizers = config.optimizers()
    if len(optimizers) == 1:
        space = tuned_space(config, optimizers[0])
    else:
        space = [{"type": "categorical", "name": OPTIMIZER_PARAM, "choices": optimizers}]
        for name in optimizers:
            space += [{**p, "name": f"{name}.{p['name']}"} for p in tuned_space(config, name)]
    fixed = {name for options in config.optimizer_options.values() for name in options}
    taken = {p["name"] for p in space} | fixed
    for p in workload_params:
        if p.get("name") in taken:
            raise ValueError(
                f"the workload's parameter {p.get('name')!r} has the name of an optimizer's "
                "hyperparameter"
            )
    return space + [dict(p) for p in workload_params]


def tuned_space(config: JobCreate, optimizer: str) -> list[dict[str, Any]]:
    """The registry's search space of ``optimizer`` without the names the job fixes."""
    fixed = config.optimizer_options.get(optimizer, {})
    return [dict(p) for p in registry.search_space(optimizer) if p["name"] not in fixed]


def unit_hparams(config: JobCreate, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A trial's optimizer and hyperparameters (the job's fixed ones for that optimizer, then
    the chosen optimizer's tuned ones, unprefixed, and the workload's)."""
    optimizers = config.optimizers()
    if len(optimizers) == 1:
        chosen, tuned = optimizers[0], dict(params)
    else:
        chosen = str(params[OPTIMIZER_PARAM])
        prefixes = tuple(f"{name}." for name in optimizers)
        tuned = {
            k: v for k, v in params.items() if k != OPTIMIZER_PARAM and not k.startswith(prefixes)
        }
        own = f"{chosen}."
        tuned.update({k[len(own) :]: v for k, v in params.items() if k.startswith(own)})
    return chosen, {**config.optimizer_options.get(chosen, {}), **tuned}


def population(config: JobCreate) -> int:
    return config.budget.population or 8


def steps_budget(config: JobCreate) -> int:
    if is_scheduler(config):
        return config.budget.steps * population(config)
    return config.budget.steps * (config.budget.trials or 0)


def study_create(
    config: JobCreate, workload_params: list[dict[str, Any]], seed: int
) -> StudyCreate:
    """The job's study (``job-<name>``); its metadata gets the job's id once the job exists.

    Raises:
        ValueError: the search space clashes (``search_space``), or a single-objective engine
            without ``budget.trials``.
    """
    engine = config.engine_spec()
    options = dict(engine.options)
    max_trials = None
    if is_scheduler(config):
        options.update(t_max=config.budget.steps, population_size=population(config))
    elif config.budget.trials is None:
        raise ValueError(f"engine {engine.name!r} needs budget.trials (full training runs)")
    else:
        max_trials = config.budget.trials
    return StudyCreate.model_validate(
        {
            "name": f"job-{config.name}",
            "parameters": search_space(config, workload_params),
            "objectives": [{"name": OBJECTIVE, "goal": "maximize"}],
            "engine": {"name": engine.name, "options": options},
            "lease_seconds": UNIT_LEASE_SECONDS,
            "seed": seed,
            "max_trials": max_trials,
        }
    )


def run_seed(config: JobCreate, number: int) -> int:
    """The seed of full run ``number`` (single-objective engines): its fresh weights and batch
    order."""
    return (int(config.seed or 0) * 1_000_003 + number) % 2**31
