"""The client's jobs, sync and async, against a real server in a thread that runs them."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi import FastAPI

from client import AsyncClient, AsyncJob, Client, Job
from client._jobs import progress_line
from client.errors import Conflict, InvalidPredictRows, JobNotSucceeded, UnknownOptimizer
from service.jobs import data, keys, runner
from service.jobs.runner import LOG_FOLDER
from service.jobs.worker import fetch_split
from tests.jobs.conftest import job_body, serve

# Tests that start job workers or Ray tasks, or find them in /proc: `make test` runs them one
# after another (one xdist group), so that no test counts or kills another test's workers.
pytestmark = pytest.mark.job_processes


def runs(name: str) -> dict[str, object]:
    return job_body(
        name,
        engine="random",
        budget={"steps": 20, "trials": 3},
        parallelism=1,
        workload={"name": "mlp", "options": {"hidden": [8]}},
    )


def test_sync_job_lifecycle(url, tmp_path: Path):
    with Client(url) as client:
        with pytest.raises(UnknownOptimizer):
            client.submit_job(**{**runs("bad"), "optimizer": "adamx"})
        job = client.submit_job(**runs("sync"))
        assert isinstance(job, Job) and repr(job) == "Job(id=1, name='sync')"
        with pytest.raises(JobNotSucceeded):
            job.download_model(tmp_path / "early.pt")
        info = job.wait(progress=False, timeout=90)
        assert info.state == "succeeded" and info.units_done == 3
        assert job.best() == info.result and info.result is not None
        assert [j.id for j in client.jobs()] == [1] and client.job(1).info.name == "sync"
        assert job.download_model(tmp_path / "m.pt").read_bytes() == job.model_bytes()
        kinds = [e.event for e in job.events(last_event_id="0.queued")]
        assert kinds.count("unit_told") == 3 and kinds[-1] == "job_state"


def test_async_job_lifecycle(url):
    async def main() -> None:
        async with AsyncClient(url) as client:
            job = await client.submit_job(**runs("async"))
            assert isinstance(job, AsyncJob)
            info = await job.wait(progress=False, timeout=90)
            assert info.state == "succeeded"
            events = [e async for e in job.events()]
            assert [e.event for e in events] == ["job_state"]
            assert events[0].data.state == "succeeded"
            assert [j.name async for j in client.jobs()] == ["async"]

    asyncio.run(main())


def _wait_claimed(client: Client, job_id: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while client.job(job_id).info.state == "queued":
        assert time.monotonic() < deadline, "the job was not claimed"
        time.sleep(0.05)


def test_the_runner_notices_a_job_end_when_its_workers_exit(url, monkeypatch):
    with Client(url) as client:
        job = client.submit_job(**runs("noticed"))
        _wait_claimed(client, job.id, 30)
        # From here the runner's passes are a minute apart: only its workers' exits wake it.
        monkeypatch.setattr(runner, "TICK_SECONDS", 60.0)
        info = job.wait(progress=False, timeout=45)
        assert info.state == "succeeded" and info.units_done == 3


def test_a_job_created_is_claimed_at_once_not_at_the_runners_next_pass(url, monkeypatch):
    monkeypatch.setattr(runner, "TICK_SECONDS", 60.0)
    time.sleep(1.5)  # the pass under way ends; the next ones are a minute apart
    with Client(url) as client:
        job = client.submit_job(**runs("at-once"))
        _wait_claimed(client, job.id, 10)


def test_a_model_based_job_starts_the_engine_processes_with_its_workers(sqlite_url, tmp_path):
    apps: list[FastAPI] = []
    fields = {"database_url": sqlite_url, "artifacts_dir": str(tmp_path / "artifacts")}
    with contextlib.contextmanager(serve)(fields, apps) as url, Client(url) as client:
        pool = apps[0].state.store.engine_pool
        assert pool.pids() == []
        job = client.submit_job(**job_body("warm"))  # ipbt: its engine computes in them
        # Its study gone, its workers die at start: no ask starts the engine processes.
        client.get_study(job.info.study_id).delete()
        deadline = time.monotonic() + 30
        while not pool.pids():
            assert time.monotonic() < deadline, "the engine processes did not start"
            time.sleep(0.05)


def test_a_jobs_runner_publishes_its_split_and_workers_read_it(url, idle_url):
    with Client(url) as client:
        job = client.submit_job(**runs("published"))
        info = job.wait(progress=False, timeout=90)
        published = data.Split.from_bytes(client.get_artifact(keys.split_key(job.id)))
        expected = data.builtin_split("digits", 0)
        assert info.state == "succeeded"
        assert np.array_equal(published.X_val, expected.X_val)
        assert published.preprocessor == expected.preprocessor
    with Client(idle_url) as client:
        queued = client.submit_job(**runs("queued")).info  # no runner: nothing published
        assert fetch_split(client, queued).n_features == 64  # digits, computed by the worker
        iris = data.builtin_split("iris", 0)
        client.put_artifact(keys.split_key(queued.id), iris.to_bytes())
        assert fetch_split(client, queued).n_features == 4  # what was published


def test_progress_line(idle_url):
    with Client(idle_url) as client:
        info = client.submit_job(**job_body("bar")).info
    line = progress_line(info.model_copy(update={"steps_done": 200, "best_score": 0.5}))
    assert line.startswith("job bar [" + "#" * 15 + "." * 15 + "]  50%")
    assert "best 0.5000" in line and line.endswith("queued")


def test_a_worker_that_keeps_crashing_fails_the_job_with_its_error(url):
    with Client(url) as client:
        job = client.submit_job(**runs("doomed"))
        # Its study gone, every worker dies at start: restarted 3 times, then the job fails.
        client.get_study(job.info.study_id).delete()
        info = job.wait(progress=False, timeout=120)
        assert info.state == "failed" and info.finished_at is not None
        assert info.error is not None and "exited with code 1" in info.error
        assert "does not exist" in info.error  # the end of the worker's log
        assert info.result is None


def test_a_job_whose_workers_cannot_start_fails_instead_of_staying_running(
    sqlite_url: str, tmp_path: Path
):
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / LOG_FOLDER).write_text("a file where the workers' log folder goes")
    settings = {"database_url": sqlite_url, "artifacts_dir": str(artifacts)}
    for url in serve(settings):
        with Client(url) as client:
            info = client.submit_job(**runs("no-logs")).wait(progress=False, timeout=60)
        assert info.state == "failed"
        assert info.error is not None and "could not start" in info.error


def test_a_jobs_optimizer_options_reach_the_optimizer(url, tmp_path: Path):
    """The best checkpoint's optimizer state has the fixed option in its param groups."""
    fields = {**runs("fixed"), "optimizer": "lion+"}
    fields["optimizer_options"] = {"lion+": {"norm_scope": "element"}}
    fields["budget"] = {"steps": 20, "trials": 1}
    with Client(url) as client:
        job = client.submit_job(**fields)
        info = job.wait(progress=False, timeout=90)
        assert info.state == "succeeded", info.error
        model = torch.load(job.download_model(tmp_path / "m.pt"), weights_only=False)
    saved = torch.load(io.BytesIO(model["checkpoint"]), weights_only=False)
    groups = saved["optimizer_state"]["param_groups"]
    assert saved["optimizer"] == "lion+" and {g["norm_scope"] for g in groups} == {"element"}


def test_a_job_on_an_uploaded_regression_csv(url):
    """The workers fetch the CSV from the server; predictions come in the target's units."""
    rng = np.random.default_rng(0)
    lines = ["size,color,price"]
    for _ in range(200):
        size, color = rng.uniform(0, 10), rng.choice(["red", "blue"])
        lines.append(f"{size:.3f},{color},{100 + 20 * size + (50 if color == 'red' else 0):.2f}")
    with Client(url) as client:
        dataset = client.upload_dataset("prices", "\n".join(lines) + "\n", "price", "regression")
        fields = {**runs("prices"), "dataset": "prices", "optimizer": "adamw"}
        fields["budget"] = {"steps": 300, "trials": 2}
        job = client.submit_job(**fields)
        assert job.info.dataset_id == dataset.id
        with pytest.raises(Conflict):  # in use by a queued or running job
            client.delete_dataset("prices")
        info = job.wait(progress=False, timeout=120)
        assert info.state == "succeeded", info.error
        assert info.result is not None and info.result.metric == "r2"
        (low, high) = job.predict([{"size": 1.0, "color": "blue"}, {"size": 9.0, "color": "red"}])
        assert isinstance(low, float) and 50 < low < high < 400
        with pytest.raises(InvalidPredictRows):
            job.predict([{"size": "big", "color": "blue"}])


def test_a_worker_reuses_the_checkpoints_it_holds_instead_of_downloading_them(idle_url):
    """A worker trains a whole small ipbt job in this process (the server runs no jobs): the
    units that start from a checkpoint it told or downloaded read it from memory; one it does
    not hold is downloaded."""
    import torch

    from service.jobs.worker import EXIT_DONE, JobWorker

    torch.set_num_threads(1)
    engine = {"name": "ipbt", "options": {"initial_step_share": 0.25}}
    body = job_body("cached", engine=engine, budget={"steps": 40, "population": 2})
    body["workload"] = {"name": "mlp", "options": {"hidden": [8]}}
    with Client(idle_url) as client:
        info = client.submit_job(**body).info
        worker = JobWorker(client, info.id, "w0")
        downloads: list[str] = []
        download = client.get_artifact

        def counted(key: str) -> bytes:
            downloads.append(key)
            return download(key)

        client.get_artifact = counted  # type: ignore[method-assign]
        assert worker.run() == EXIT_DONE
        units = [t for t in client.get_study(info.study_id).trials() if t.unit is not None]
        starts = [t.unit.start.checkpoint for t in units if t.unit.start.kind == "checkpoint"]
        assert all(t.state == "completed" for t in units) and len(starts) >= 4
        assert not [key for key in downloads if key.startswith(f"jobs/{info.id}/trial-")]
        # A checkpoint the worker does not hold (another worker's) is downloaded, once.
        worker.checkpoints = type(worker.checkpoints)(4, 2**20)
        unit = next(t for t in units if t.unit is not None and t.unit.start.kind == "checkpoint")
        key = unit.unit.start.checkpoint if unit.unit is not None else None
        assert worker.unit_input(unit).start == download(key)
        assert worker.unit_input(unit).start == download(key)
        assert downloads == [key]
