"""Tuning jobs on a real server (``asktell serve``, two uvicorn processes, so two job runners
compete for every job): a whole ipbt job on digits with the mlp workload and OLion, its exact
lineage and a retrain from its schedule; cancel; kill -9 of the server and a restart that
finishes the job; two replicas on PostgreSQL; the checkpoint garbage collection."""

from __future__ import annotations

import io
import itertools
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from client import Client, Job
from client.models import JobPublic, TrialPublic
from service.jobs import keys, spec
from service.jobs.runner import LOG_FOLDER
from tests.integration.conftest import Server

# Tests that start job workers or Ray tasks, or find them in /proc: `make test` runs them one
# after another (one xdist group), so that no test counts or kills another test's workers.
pytestmark = [pytest.mark.integration, pytest.mark.job_processes]

#: A job's lease in these tests: a dead runner's job is taken over within about this.
LEASE = "5"


def job_fields(name: str, steps: int = 120, **more: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "name": name,
        "dataset": "digits",
        "workload": {"name": "mlp", "options": {"hidden": [16]}},
        "optimizer": "olion",
        "engine": {"name": "ipbt", "options": {"initial_step_share": 0.25}},
        "budget": {"steps": steps, "population": 4},
        "parallelism": 2,
        "seed": 7,
    }
    fields.update(more)
    return fields


def start_jobs_server(
    start_server: Callable[..., Server], database_url: str, artifacts: Path
) -> Server:
    return start_server(
        database_url,
        cli=True,
        ASKTELL_JOB_LEASE_SECONDS=LEASE,
        ASKTELL_ARTIFACTS_DIR=str(artifacts),
    )


def wait_until(what: str, check: Callable[[], Any], server: Server, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s: {what}\n" + server.log_tail())
        time.sleep(0.1)


def units(client: Client, job: JobPublic) -> list[TrialPublic]:
    return list(client.get_study(job.study_id).trials(page_size=1000))


def assert_exact_lineage(client: Client, job: JobPublic) -> None:
    """Every unit that loaded a checkpoint loaded the final one of a completed unit, under the
    key that unit saved; every completed unit saved exactly one checkpoint, its own key."""
    study = client.get_study(job.study_id)
    trials = {t.number: t for t in units(client, job)}
    for t in trials.values():
        assert t.unit is not None
        if t.state == "completed":
            saved = [m.checkpoint for m in study.measurements(t.number) if m.checkpoint]
            assert saved == [keys.checkpoint_key(job.id, t.number)], (t.number, saved)
            assert t.metadata["checkpoint"] == saved[0]
        start = t.unit.start
        if start.kind == "checkpoint" and t.state in ("completed", "running"):
            assert start.trial is not None and trials[start.trial].state == "completed"
            assert start.checkpoint == keys.checkpoint_key(job.id, start.trial)
            assert trials[start.trial].unit.to_step == t.unit.from_step  # type: ignore[union-attr]
    for number in (t.number for t in trials.values() if t.state == "completed"):
        chain = study.lineage(number).segments
        assert chain[0].from_step == 0 and chain[-1].trial == number
        for before, after in itertools.pairwise(chain):
            assert trials[after.trial].unit.start.trial == before.trial  # type: ignore[union-attr]


def retrain(info: JobPublic) -> tuple[float, float, bytes]:
    """Replay the best model's schedule locally: (validation score, test score, checkpoint)."""
    import torch

    from service.jobs import data
    from service.jobs.workloads import UnitInput, load_workload

    torch.set_num_threads(1)
    config, result = info.config, info.result
    assert result is not None
    split = data.builtin_split(str(config.dataset), int(config.seed or 0))
    workload = load_workload(config.workload_spec().name)
    checkpoint: bytes | None = None
    score = float("nan")
    for segment in result.schedule:
        optimizer, hparams = spec.unit_hparams(config, dict(segment.params))
        out = workload.train(
            UnitInput(
                data=split,
                hparams=hparams,
                optimizer=optimizer,
                options=dict(config.workload_spec().options),
                start=checkpoint,
                transform=segment.transform,
                steps=segment.to_step - segment.from_step,
                seed=int(segment.seed or 0),
                report=None,
            )
        )
        checkpoint, score = out.checkpoint, out.score
    assert checkpoint is not None
    test = data.score(split.task, split.y_test, workload.predict(checkpoint, split.X_test))
    return score, float(test), checkpoint


def worker_pids(job_id: int, server: Server) -> list[int]:
    """The live worker processes of job ``job_id`` started by ``server``: the pids its runner
    logged (forked workers show their fork server's command line, not their own), still
    running in the server's process group."""
    assert server.proc is not None
    found = []
    for pid in map(int, re.findall(rf"job {job_id}: worker \d+ started, pid (\d+)", server.log())):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            group = os.getpgid(pid)
        except (OSError, IndexError):
            continue
        if state != "Z" and group == server.proc.pid:
            found.append(pid)
    return found


def kill_server(server: Server) -> None:
    """kill -9 of the server's whole process group: uvicorn, its workers, the job workers."""
    assert server.proc is not None
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)


def feature_rows(preprocessor: Any, X: Any) -> list[dict[str, Any]]:
    names = [c.name for c in preprocessor.columns]
    return [dict(zip(names, (float(v) for v in row), strict=True)) for row in X]


# --- 1. a whole job ------------------------------------------------------------------------


def test_ipbt_job_end_to_end(start_server, tmp_path: Path) -> None:
    import torch

    from service.jobs.data import Preprocessor, builtin_split
    from service.jobs.workloads import load_workload

    artifacts = tmp_path / "artifacts"
    server = start_jobs_server(start_server, f"sqlite:///{tmp_path / 'jobs.db'}", artifacts)
    with Client(server.url) as client:
        job = client.submit_job(**job_fields("digits-olion"))
        assert isinstance(job, Job) and job.info.state == "queued"
        wait_until("two workers", lambda: len(worker_pids(job.id, server)) == 2, server, 30)
        info = job.wait(progress=False, timeout=150)
        assert info.state == "succeeded", (info.error, server.log_tail())
        assert info.steps_done >= info.steps_budget == 480 and info.remaining_seconds == 0
        assert info.runner and info.takeovers == 0 and info.result is not None
        assert info.elapsed_seconds is not None
        assert 0 < info.train_seconds < 2 * info.elapsed_seconds
        result = info.result
        trials = units(client, info)
        assert all(t.metadata["worker"].startswith(info.runner) for t in trials)
        assert info.units_done == sum(t.state == "completed" for t in trials)
        assert info.best_score == max(t.values["score"] for t in trials if t.values)
        assert_exact_lineage(client, info)

        # The result: the best unit's schedule, and a retrain from it gives the same model.
        study = client.get_study(info.study_id)
        best = study.best_schedule()
        assert [s.trial for s in result.schedule] == [s.trial for s in best.segments]
        assert result.val_score == best.segments[-1].values["score"] == info.best_score
        val, test, checkpoint = retrain(info)
        assert (val, test) == (result.val_score, result.test_score)
        assert 0.3 < result.test_score <= 1.0

        # The model file loads with torch and predicts what the server predicts.
        path = job.download_model(tmp_path / "model.pt")
        document = torch.load(path)
        assert document["workload"] == "mlp" and document["checkpoint"] == checkpoint
        preprocessor = Preprocessor.from_json(document["preprocessor"])
        split = builtin_split("digits", 7)
        rows = feature_rows(preprocessor, _raw_digits()[:5])
        local = preprocessor.decode(
            load_workload("mlp").predict(checkpoint, preprocessor.transform_rows(rows))
        )
        assert job.predict(rows) == local and len(local) == 5
        assert split.n_outputs == 10

        # The events: every unit told, then the final state.
        events = list(job.events(last_event_id="0.queued"))
        told = [e for e in events if e.event == "unit_told"]
        assert len([e for e in told if e.data.trial_state == "completed"]) == info.units_done
        assert events[-1].event == "job_state" and events[-1].data.state == "succeeded"

        # The garbage collection: only the checkpoints a unit may still load are on disk.
        split_now = study.checkpoints()
        on_disk = {p.name for p in artifacts.rglob("*.pt")}
        pinned = {Path(r.checkpoint).name for r in split_now.pinned}
        assert on_disk == pinned | {"model.pt"}
        assert len(on_disk) <= 2 * 4 + 1 < len(trials)


def _raw_digits() -> Any:
    from sklearn.datasets import load_digits

    return load_digits().data


# --- 2. cancel -----------------------------------------------------------------------------


def long_job_training(client: Client, server: Server, name: str) -> Job:
    """A job far from its end, once both its workers run and one unit is told."""
    engine = {"name": "ipbt", "options": {"initial_step_share": 0.001}}
    job = client.submit_job(**job_fields(name, steps=200_000, engine=engine))
    wait_until("two workers", lambda: len(worker_pids(job.id, server)) == 2, server, 60)
    wait_until("a unit told", lambda: job.refresh().units_done >= 1, server, 60)
    return job


def test_cancel_stops_the_workers_within_seconds(start_server, tmp_path: Path) -> None:
    server = start_jobs_server(start_server, f"sqlite:///{tmp_path / 'jobs.db'}", tmp_path / "a")
    with Client(server.url) as client:
        job = long_job_training(client, server, "long")
        started = time.monotonic()
        assert job.cancel().cancel_requested
        info = wait_until(
            "cancelled", lambda: job.refresh().state == "cancelled" and job.info, server, 15
        )
        wait_until("the workers gone", lambda: not worker_pids(job.id, server), server, 10)
        assert time.monotonic() - started < 10
        assert info.finished_at is not None and info.result is None
        # The unit a stopped worker held ends failed, not running until its lease lapses.
        study = client.get_study(info.study_id)
        assert study.info.state == "paused"  # no late ask of a stopped worker gets a unit
        assert not list(study.trials(states=["running"]))
        failed = list(study.trials(states=["failed"]))
        assert all(t.reason == "the job was cancelled" for t in failed)
        assert not list((tmp_path / "a" / LOG_FOLDER).glob(f"job-{job.id}-*"))
        with pytest.raises(Exception) as excinfo:
            job.cancel()
        assert getattr(excinfo.value, "code", None) == "job_finished"


# --- 3. kill -9 and restart ----------------------------------------------------------------


def test_a_restarted_server_finishes_the_job(start_server, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'jobs.db'}"
    artifacts = tmp_path / "artifacts"
    first = start_jobs_server(start_server, database, artifacts)
    with Client(first.url) as client:
        job = client.submit_job(**job_fields("survivor", steps=800))
        wait_until("4 units told", lambda: job.refresh().units_done >= 4, first, 90)
        kill_server(first)
        wait_until("no workers", lambda: not worker_pids(job.id, first), first, 10)
    done_before = _completed_from_db(tmp_path / "jobs.db", job.info.study_id)
    assert len(done_before) >= 4
    second = start_jobs_server(start_server, database, artifacts)
    with Client(second.url) as client:
        info = client.job(job.id).wait(progress=False, timeout=150)
        assert info.state == "succeeded", (info.error, second.log_tail())
        assert info.takeovers >= 1 and info.runner != job.info.runner
        after = {t.number: t for t in units(client, info)}
        for number, values in done_before.items():
            assert after[number].state == "completed" and after[number].values == values
        assert_exact_lineage(client, info)


def test_the_workers_end_with_the_process_running_the_job(start_server, tmp_path: Path) -> None:
    """kill -9 of the job's server process alone (not its process group): its workers, forked
    from its fork server (a process that outlives it), stop within seconds, and no orphan
    keeps training."""
    server = start_jobs_server(start_server, f"sqlite:///{tmp_path / 'jobs.db'}", tmp_path / "a")
    with Client(server.url) as client:
        job = long_job_training(client, server, "orphans")
        assert job.info.runner is not None
        os.kill(int(job.info.runner.split(":")[1]), signal.SIGKILL)
        wait_until("the workers gone", lambda: not worker_pids(job.id, server), server, 10)
    kill_server(server)


def _completed_from_db(path: Path, study_id: int) -> dict[int, dict[str, float]]:
    import json
    import sqlite3

    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT number, \"values\" FROM trials WHERE study_id = ? AND state = 'completed'",
            (study_id,),
        ).fetchall()
    return {n: json.loads(v) for n, v in rows}


# --- 4. two replicas on PostgreSQL ---------------------------------------------------------


def test_two_replicas_one_runs_the_job_the_other_takes_over(
    start_server, pg_url: str, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    a = start_jobs_server(start_server, pg_url, artifacts)
    b = start_jobs_server(start_server, pg_url, artifacts)
    with Client(a.url) as client:
        job = client.submit_job(**job_fields("replicated", steps=800))
        wait_until("2 units told", lambda: job.refresh().units_done >= 2, a, 90)
        owner = job.info.runner
        assert owner is not None
        owner_pid = int(owner.split(":")[1])
        holder, other = (a, b) if owner_pid in a.worker_pids() else (b, a)
        assert owner_pid in holder.worker_pids()
        # Exactly one process runs it: every unit so far was trained by its workers.
        workers = {t.metadata.get("worker", "") for t in units(client, job.info) if t.metadata}
        workers |= {t.worker_id or "" for t in units(client, job.info) if t.state == "running"}
        assert workers and all(w.startswith(owner + "/") for w in workers - {""})
        assert len(worker_pids(job.id, holder)) == 2 and not worker_pids(job.id, other)
        kill_server(holder)
    with Client(other.url) as client:
        info = client.job(job.id).wait(progress=False, timeout=150)
        assert info.state == "succeeded", (info.error, other.log_tail())
        assert info.takeovers >= 1
        assert info.runner is not None and int(info.runner.split(":")[1]) in other.worker_pids()
        assert_exact_lineage(client, info)


def test_model_bytes_are_the_artifact(start_server, tmp_path: Path) -> None:
    """A small random-engine job: full runs, the best one's checkpoint in the model."""
    import torch

    artifacts = tmp_path / "artifacts"
    server = start_jobs_server(start_server, f"sqlite:///{tmp_path / 'jobs.db'}", artifacts)
    with Client(server.url) as client:
        fields = job_fields("runs", engine="random", budget={"steps": 40, "trials": 4})
        job = client.submit_job(**fields)
        info = job.wait(progress=False, timeout=120)
        assert info.state == "succeeded", (info.error, server.log_tail())
        assert info.units_done == 4 and info.steps_done == info.steps_budget == 160
        result = info.result
        assert result is not None and len(result.schedule) == 1
        best = client.get_study(info.study_id).best().trials[0]
        assert result.best_trial == best.number and result.val_score == best.values["score"]
        document = torch.load(io.BytesIO(job.model_bytes()))
        assert document["test_score"] == result.test_score
        # Only the best run's checkpoint is kept.
        names = {p.name for p in artifacts.rglob("*.pt")}
        assert names == {f"trial-{best.number}.pt", "model.pt"}


# --- 5. a user workload installed as an entry point ----------------------------------------


def test_a_user_workload_entry_point_runs_as_a_job(start_server, tmp_path: Path) -> None:
    from tests.integration.conftest import REPO
    from tests.jobs.workload_pkg import install

    site = tmp_path / "site"
    install(site)
    server = start_server(
        f"sqlite:///{tmp_path / 'jobs.db'}",
        cli=True,
        ASKTELL_JOB_LEASE_SECONDS=LEASE,
        ASKTELL_ARTIFACTS_DIR=str(tmp_path / "artifacts"),
        PYTHONPATH=os.pathsep.join([str(site), str(REPO)]),
    )
    with Client(server.url) as client:
        linear = client.submit_job(
            **job_fields(
                "linear",
                steps=40,
                # Its score from a child process: a worker may have children.
                workload={"name": "linear", "options": {"tune_l2": True, "score_in_child": True}},
                optimizer="sgd",
            )
        )
        study = client.get_study(linear.info.study_id)
        assert "l2" in {p.name for p in study.info.parameters}
        plain = client.submit_job(
            **job_fields(
                "train-only",
                workload="train-only",
                optimizer="sgd",
                engine="random",
                budget={"steps": 20, "trials": 2},
            )
        )
        info = linear.wait(progress=False, timeout=150)
        assert info.state == "succeeded", (info.error, server.log_tail())
        assert info.result is not None and info.result.test_score is not None
        assert all("l2" in t.params for t in units(client, info))
        assert_exact_lineage(client, info)
        rows = feature_rows(_preprocessor(linear), _raw_digits()[:3])
        assert len(linear.predict(rows)) == 3
        # A workload with only a train function: trained, but no test score nor predictions.
        done = plain.wait(progress=False, timeout=150)
        assert done.state == "succeeded", (done.error, server.log_tail())
        assert done.result is not None and done.result.test_score is None
        with pytest.raises(Exception) as excinfo:
            plain.predict(rows)
        assert getattr(excinfo.value, "code", None) == "invalid_job"


def _preprocessor(job: Job) -> Any:
    import torch

    from service.jobs.data import Preprocessor

    return Preprocessor.from_json(torch.load(io.BytesIO(job.model_bytes()))["preprocessor"])
