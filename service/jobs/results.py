"""What a job produces when its study is done: the best member's schedule (or best run), its
test-split score, the model artifact; and the model's reads: ``GET /v1/jobs/{id}/model`` and
``POST /v1/jobs/{id}/predict``.

The model artifact (``jobs/{id}/model.pt``) is ``torch.save`` of a dict: ``format``,
``workload`` (name), ``options``, ``checkpoint`` (the workload's checkpoint bytes),
``preprocessor`` (``Preprocessor.to_json()``), ``task``, ``test_score``, ``job_id``.
"""

from __future__ import annotations

import io
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection, Row

from client.models import (
    JobCreate,
    JobResult,
    JobSegment,
    PredictRequest,
    PredictResponse,
    Unit,
)
from service import studies, units
from service.errors import ApiError, ProblemCode
from service.jobs import keys, spec
from service.jobs.jobs import datasets_t, find_job
from service.lru import LruCache
from service.store import Store, trials_t

MODEL_FORMAT = "asktell.model/v1"


def load_split(conn: Connection, job: Row) -> Any:
    """The job's ``Split``, from the bundled dataset or the uploaded CSV, with its seed."""
    from service.jobs import data

    config = JobCreate.model_validate(job.config)
    seed = int(config.seed or 0)
    if job.dataset_id is None:
        return data.builtin_split(str(config.dataset), seed)
    row = conn.execute(select(datasets_t).where(datasets_t.c.id == job.dataset_id)).one()
    return data.csv_split(bytes(row.content), row.target, row.task, seed)


def published_split(store: Store, artifacts: Any, job: Row) -> Any:
    """The job's ``Split`` as its runner published it for the workers (``keys.split_key``),
    else (its publishing failed) computed again (``load_split``)."""
    from service.jobs import data

    try:
        return data.Split.from_bytes(keys.read(artifacts, job.tenant_id, keys.split_key(job.id)))
    except ApiError:  # artifact_not_found
        return store.db.read(lambda c: load_split(c, job))


def _unit_segments(conn: Connection, study_id: int, chain: list[Any]) -> list[JobSegment]:
    numbers = [s.trial for s in chain]
    docs = {
        number: Unit.model_validate(doc)
        for number, doc in conn.execute(
            select(trials_t.c.number, trials_t.c.unit).where(
                trials_t.c.study_id == study_id, trials_t.c.number.in_(numbers)
            )
        ).all()
    }
    return [
        JobSegment(
            trial=s.trial,
            member=s.member,
            from_step=s.from_step,
            to_step=s.to_step,
            reason=s.reason,
            params=s.params,
            score=(s.values or {}).get(spec.OBJECTIVE),
            seed=docs[s.trial].seed,
            transform=docs[s.trial].transform.model_dump(mode="json"),
            start_trial=docs[s.trial].start.trial,
        )
        for s in chain
    ]


def best_of(store: Store, job: Row) -> tuple[list[JobSegment], str]:
    """The best model's schedule and its checkpoint's key.

    Raises:
        ApiError: when the study has no completed unit or run (the job then fails).
    """
    config = JobCreate.model_validate(job.config)
    if spec.is_scheduler(config):
        lineage = units.best_schedule(store, job.tenant_id, job.study_id)
        segments = store.db.read(lambda c: _unit_segments(c, job.study_id, lineage.segments))
        checkpoint = lineage.segments[-1].checkpoint
    else:
        best = studies.best(store, job.tenant_id, job.study_id)
        if not best.trials:
            raise ApiError(ProblemCode.NO_COMPLETED_UNIT, "no training run completed")
        trial = best.trials[0]
        segment = JobSegment(
            trial=trial.number,
            from_step=0,
            to_step=config.budget.steps,
            reason="run",
            params=trial.params,
            score=(trial.values or {}).get(spec.OBJECTIVE),
            seed=spec.run_seed(config, trial.number),
        )
        segments, checkpoint = [segment], trial.metadata.get("checkpoint")
    if not checkpoint:
        raise ApiError(ProblemCode.NO_COMPLETED_UNIT, "the best trial saved no checkpoint")
    return segments, str(checkpoint)


def finalize(store: Store, artifacts: Any, job: Row) -> JobResult:
    """Score the best checkpoint on the test split and save the model artifact."""
    import torch

    from service.jobs import data
    from service.jobs.workloads import load_workload

    config = JobCreate.model_validate(job.config)
    segments, checkpoint_key = best_of(store, job)
    checkpoint = keys.read(artifacts, job.tenant_id, checkpoint_key)
    split = published_split(store, artifacts, job)
    workload = config.workload_spec()
    trained = load_workload(workload.name)
    test_score: float | None = None  # a workload that only trains has none
    if trained.predicts:
        outputs = trained.predict(checkpoint, split.X_test)
        test_score = float(data.score(split.task, split.y_test, outputs))
    document = {
        "format": MODEL_FORMAT,
        "job_id": job.id,
        "workload": workload.name,
        "options": dict(workload.options),
        "checkpoint": checkpoint,
        "preprocessor": split.preprocessor.to_json(),
        "task": split.task,
        "test_score": test_score,
    }
    buffer = io.BytesIO()
    torch.save(document, buffer)
    key = keys.model_key(job.id)
    keys.write(artifacts, job.tenant_id, key, buffer.getvalue())
    return JobResult(
        best_trial=segments[-1].trial,
        val_score=float(segments[-1].score or 0.0),
        test_score=test_score,
        metric="accuracy" if split.task == "classification" else "r2",
        schedule=segments,
        model_artifact=key,
    )


def _succeeded(store: Store, tenant_id: int, job_id: int) -> Row:
    """Raises: ApiError 404 ``job_not_found``, 409 ``job_not_succeeded``."""
    job = store.db.read(lambda c: find_job(c, tenant_id, job_id))
    if job.state != "succeeded" or not job.result:
        raise ApiError(
            ProblemCode.JOB_NOT_SUCCEEDED,
            f"job {job_id} is {job.state}; its model exists once it has succeeded",
            state=job.state,
        )
    return job


def model_bytes(store: Store, artifacts: Any, tenant_id: int, job_id: int) -> bytes:
    job = _succeeded(store, tenant_id, job_id)
    return keys.read(artifacts, tenant_id, job.result["model_artifact"])


#: Loaded models by (tenant, job): a job's model never changes once it has succeeded.
_models = LruCache(8)


def _model(store: Store, artifacts: Any, tenant_id: int, job_id: int) -> tuple[Any, Any, Any]:
    def load() -> tuple[Any, Any, Any]:
        import torch

        from service.jobs.data import Preprocessor
        from service.jobs.workloads import load_workload

        raw = model_bytes(store, artifacts, tenant_id, job_id)
        document = torch.load(io.BytesIO(raw))
        return (
            load_workload(document["workload"]),
            document["checkpoint"],
            Preprocessor.from_json(document["preprocessor"]),
        )

    _succeeded(store, tenant_id, job_id)
    return _models.get((tenant_id, job_id), load)


def predict(
    store: Store, artifacts: Any, tenant_id: int, job_id: int, req: PredictRequest
) -> PredictResponse:
    """Predictions of the job's model for feature rows.

    Raises:
        ApiError: 409 ``job_not_succeeded``; 422 ``invalid_predict_rows`` naming the bad cell.
    """
    workload, checkpoint, preprocessor = _model(store, artifacts, tenant_id, job_id)
    try:
        X = preprocessor.transform_rows([dict(r) for r in req.rows])
    except ValueError as exc:
        raise ApiError(ProblemCode.INVALID_PREDICT_ROWS, str(exc)) from exc
    if not workload.predicts:
        raise ApiError(
            ProblemCode.INVALID_JOB, f"the job's workload {workload.name!r} has no predict()"
        )
    outputs = workload.predict(checkpoint, X)
    return PredictResponse(predictions=list(preprocessor.decode(outputs)))
