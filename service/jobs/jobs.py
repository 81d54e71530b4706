"""Tuning jobs: create (with the job's study, in one transaction), read with progress, list,
cancel. The runner (``service.jobs.runner``) runs them; workers (``service.jobs.worker``)
train their units.

A job's states: ``queued`` (no runner yet), ``running`` (a server process holds its lease
and runs its workers), then ``succeeded``, ``failed`` or ``cancelled``.
"""

from __future__ import annotations

import os
import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection, Row

from client.models import (
    JOB_ENDED,
    JOB_ENGINES,
    JobCreate,
    JobPublic,
    JobsPage,
)
from engines.optim import registry
from service.db.models import Dataset, Job
from service.errors import ApiError, ProblemCode
from service.idempotency import IdemKey
from service.jobs import spec
from service.jobs.executors import RAY_EXTRA, ray_installed
from service.settings import Settings
from service.store import Answer, Store, studies_t, trials_t, utcnow
from service.studies import find_live, insert_study, validate_config

jobs_t = Job.__table__
datasets_t = Dataset.__table__


def _check_names(config: JobCreate) -> list[dict[str, Any]]:
    """The workload's parameters, after checking the engine, optimizers (and their fixed
    options) and workload names.

    Raises:
        ApiError: 422 ``invalid_job``, ``unknown_optimizer`` or ``unknown_workload``.
    """
    from service.jobs.workloads import UnknownWorkload, load_workload

    engine = config.engine_spec().name
    if engine not in JOB_ENGINES:
        raise ApiError(
            ProblemCode.INVALID_JOB,
            f"engine {engine!r} cannot run a job; use one of {', '.join(JOB_ENGINES)}",
        )
    known = registry.optimizer_names()
    names = config.optimizers()
    for name in names:
        if name not in known:
            raise ApiError(
                ProblemCode.UNKNOWN_OPTIMIZER,
                f"no optimizer {name!r}; the registry has {', '.join(known)}",
            )
    if len(set(names)) != len(names):
        raise ApiError(ProblemCode.INVALID_JOB, "an optimizer is named twice")
    _check_optimizer_options(config)
    workload = config.workload_spec()
    try:
        return list(load_workload(workload.name).parameters(dict(workload.options)))
    except UnknownWorkload as exc:
        raise ApiError(
            ProblemCode.UNKNOWN_WORKLOAD,
            f"no workload {workload.name!r}: neither built in nor an installed "
            "'asktell.workloads' entry point",
        ) from exc
    except Exception as exc:  # the workload's own check of its options
        raise ApiError(ProblemCode.INVALID_JOB, f"workload options: {exc}") from exc


def _check_optimizer_options(config: JobCreate) -> None:
    """Each key of ``optimizer_options`` is one of the job's optimizers, and that optimizer
    builds with the options (names and values checked by the optimizer itself).

    Raises:
        ApiError: 422 ``invalid_job``.
    """
    from torch import nn

    names = config.optimizers()
    for name, options in config.optimizer_options.items():
        if name not in names:
            raise ApiError(
                ProblemCode.INVALID_JOB,
                f"optimizer_options names {name!r}, which is not an optimizer of the job "
                f"({', '.join(names)})",
            )
        try:
            model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
            # As a unit uses them: at the build, then again after a checkpoint's restore.
            registry.set_hparams(registry.build(name, model, **options), name, options)
        except Exception as exc:  # whatever the constructor raises on the values given
            raise ApiError(
                ProblemCode.INVALID_JOB, f"optimizer_options of {name!r}: {exc}"
            ) from exc


def resolve_dataset(conn: Connection, tenant_id: int, dataset: str | int) -> int | None:
    """The uploaded dataset's id, or None for a bundled one.

    Raises:
        ApiError: 404 ``dataset_not_found``.
    """
    from service.datasets import dataset_in

    return dataset_in(conn, tenant_id, str(dataset)).id


def filled(config: JobCreate, settings: Settings) -> JobCreate:
    """The config as stored: seed, parallelism, executor and the scheduler's population filled
    in."""
    budget = config.budget
    if spec.is_scheduler(config) and budget.population is None:
        budget = budget.model_copy(update={"population": spec.population(config)})
    workers = config.parallelism or settings.job_workers or os.cpu_count() or 1
    seed = config.seed if config.seed is not None else secrets.randbits(31)
    executor = config.executor or settings.executor
    update = {"budget": budget, "parallelism": workers, "seed": seed, "executor": executor}
    return config.model_copy(update=update)


def create_job(
    store: Store, tenant_id: int, body: JobCreate, settings: Settings, idem: IdemKey | None
) -> Answer:
    """Create a queued job and its study (``job-<name>``, metadata ``{"job_id": id}``).

    Raises:
        ApiError: 422 (``invalid_job``, ``unknown_optimizer``, ``unknown_workload``,
            ``executor_unavailable``, the study's config codes), 404 ``dataset_not_found``,
            409 ``job_exists``.
    """
    config = filled(body, settings)
    if config.executor == "ray" and not ray_installed():
        raise ApiError(
            ProblemCode.EXECUTOR_UNAVAILABLE,
            f"the executor 'ray' needs Ray on the server: install the extra {RAY_EXTRA!r} "
            "(pip install 'asktell[ray]'), or submit the job with executor 'local'",
        )
    workload_params = _check_names(config)
    try:
        study_body = spec.study_create(config, workload_params, int(config.seed or 0))
    except ValueError as exc:
        raise ApiError(ProblemCode.INVALID_JOB, str(exc)) from exc
    validate_config(study_body)

    def fn(conn: Connection) -> tuple[int, JobPublic]:
        dataset_id = resolve_dataset(conn, tenant_id, config.dataset)
        _check_free(conn, tenant_id, config.name, study_body.name)
        study_id = insert_study(conn, tenant_id, study_body)
        now = utcnow()
        job_id = conn.execute(
            insert(jobs_t)
            .values(
                tenant_id=tenant_id,
                name=config.name,
                config=config.model_dump(mode="json"),
                study_id=study_id,
                dataset_id=dataset_id,
                state="queued",
                cancel_requested=False,
                takeovers=0,
                created_at=now,
                updated_at=now,
            )
            .returning(jobs_t.c.id)
        ).scalar_one()
        conn.execute(
            update(studies_t).where(studies_t.c.id == study_id).values(metadata={"job_id": job_id})
        )
        return 201, job_public(conn, find_job(conn, tenant_id, job_id))

    answer = store.write(tenant_id, idem, fn)
    store.jobs_changed()
    return answer


def _check_free(conn: Connection, tenant_id: int, name: str, study_name: str) -> None:
    taken = conn.execute(
        select(jobs_t.c.id).where(jobs_t.c.tenant_id == tenant_id, jobs_t.c.name == name)
    ).scalar()
    if taken is not None:
        raise ApiError(ProblemCode.JOB_EXISTS, f"a job named {name!r} exists", job_id=taken)
    study = find_live(conn, tenant_id, study_name)
    if study is not None:
        raise ApiError(
            ProblemCode.JOB_EXISTS,
            f"the study {study_name!r} a job named {name!r} would create exists; "
            "delete it or choose another name",
            study_id=study.id,
        )


def find_job(conn: Connection, tenant_id: int, job_id: int) -> Row:
    """Raises: ApiError 404 ``job_not_found``."""
    row = conn.execute(
        select(jobs_t).where(jobs_t.c.id == job_id, jobs_t.c.tenant_id == tenant_id)
    ).first()
    if row is None:
        raise ApiError(ProblemCode.JOB_NOT_FOUND, f"job {job_id} does not exist")
    return row


def progress(conn: Connection, job: Row) -> dict[str, Any]:
    """Units and steps done, the best score so far (from the job's study's trials), summed by
    the database: a job's progress is read at every poll of it, and parsing every trial's
    JSON here made each poll cost more as the job went on."""
    config = JobCreate.model_validate(job.config)
    unit = trials_t.c.unit
    done = conn.execute(
        select(
            func.count(),
            func.max(trials_t.c["values"][spec.OBJECTIVE].as_float()),
            func.sum(trials_t.c.metadata["train_seconds"].as_float()),
            func.sum(unit["to_step"].as_integer() - unit["from_step"].as_integer()),
        ).where(trials_t.c.study_id == job.study_id, trials_t.c.state == "completed")
    ).one()
    units, best, trained, unit_steps = done
    steps = int(unit_steps or 0) if spec.is_scheduler(config) else units * config.budget.steps
    return {
        "units_done": units,
        "steps_done": steps,
        "steps_budget": spec.steps_budget(config),
        "best_score": None if best is None else float(best),
        "train_seconds": float(trained or 0.0),
    }


def _times(job: Row, done: dict[str, Any], now: datetime) -> dict[str, Any]:
    if job.started_at is None:
        return {"elapsed_seconds": None, "remaining_seconds": None}
    elapsed = ((job.finished_at or now) - job.started_at).total_seconds()
    remaining = None
    if job.state == "running" and done["steps_done"] > 0:
        left = max(0, done["steps_budget"] - done["steps_done"])
        remaining = elapsed * left / done["steps_done"]
    elif job.state in JOB_ENDED:
        remaining = 0.0
    return {"elapsed_seconds": elapsed, "remaining_seconds": remaining}


def job_public(conn: Connection, job: Row) -> JobPublic:
    done = progress(conn, job)
    return JobPublic.model_validate(
        {
            **{k: v for k, v in job._mapping.items() if k in JobPublic.model_fields},
            "runner": job.lease_owner,
            **done,
            **_times(job, done, utcnow()),
        }
    )


def get_job(store: Store, tenant_id: int, job_id: int) -> JobPublic:
    return store.db.read(lambda conn: job_public(conn, find_job(conn, tenant_id, job_id)))


def list_jobs(store: Store, tenant_id: int, cursor: int | None, limit: int) -> JobsPage:
    """Jobs in id order, ``limit`` after the id ``cursor``."""

    def fn(conn: Connection) -> JobsPage:
        query = select(jobs_t).where(jobs_t.c.tenant_id == tenant_id)
        if cursor is not None:
            query = query.where(jobs_t.c.id > cursor)
        rows = conn.execute(query.order_by(jobs_t.c.id).limit(limit + 1)).all()
        data = [job_public(conn, r) for r in rows[:limit]]
        more = len(rows) > limit
        return JobsPage(data=data, next_cursor=str(data[-1].id) if more else None)

    return store.db.read(fn)


def cancel_job(store: Store, tenant_id: int, job_id: int, idem: IdemKey | None) -> Answer:
    """Ask the job's runner to stop its workers; a queued job is cancelled at once.

    Raises:
        ApiError: 404 ``job_not_found``; 409 ``job_finished`` when the job has ended.
    """

    def fn(conn: Connection) -> tuple[int, JobPublic]:
        job = find_job(conn, tenant_id, job_id)
        if job.state in JOB_ENDED:
            raise ApiError(
                ProblemCode.JOB_FINISHED, f"job {job_id} is {job.state}", state=job.state
            )
        now = utcnow()
        change: dict[str, Any] = {"cancel_requested": True, "updated_at": now}
        if job.state == "queued":
            change.update(state="cancelled", finished_at=now)
        conn.execute(
            update(jobs_t)
            .where(jobs_t.c.id == job_id, jobs_t.c.state.not_in(JOB_ENDED))
            .values(**change)
        )
        return 200, job_public(conn, find_job(conn, tenant_id, job_id))

    answer = store.write(tenant_id, idem, fn)
    store.jobs_changed()
    return answer
