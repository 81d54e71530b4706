"""Tuning jobs on the Ray executor (issue 19), against a real server that starts a local Ray
instance with its first Ray job: a job end to end beside the same job on the local executor, a
Ray worker killed mid-unit. (The 422 of a server without Ray: tests/jobs/test_job_api.py.)"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from client import Client
from client.models import JobPublic
from service.jobs.executors import RAY_TASK_PREFIX
from tests.integration.test_jobs import (
    LEASE,
    assert_exact_lineage,
    job_fields,
    units,
    wait_until,
)

# Tests that start job workers or Ray tasks, or find them in /proc: `make test` runs them one
# after another (one xdist group), so that no test counts or kills another test's workers.
pytestmark = [pytest.mark.integration, pytest.mark.job_processes]


def ray_job_workers() -> dict[str, int]:
    """The Ray worker processes running a job worker's task, by worker id (Ray titles each
    ``ray::asktell worker <worker id>``)."""
    found = {}
    prefix = b"ray::" + RAY_TASK_PREFIX.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(prefix):
            found[title.removeprefix(prefix).decode()] = int(entry.name)
    return found


def lineage_shape(client: Client, info: JobPublic) -> list[tuple[object, ...]]:
    """Each completed unit's place in the schedule, in trial order."""
    return [
        (t.unit.generation, t.unit.member, t.unit.from_step, t.unit.to_step, t.unit.reason)
        for t in units(client, info)
        if t.state == "completed" and t.unit is not None
    ]


def start_ray_server(start_server, tmp_path: Path):
    return start_server(
        f"sqlite:///{tmp_path / 'jobs.db'}",
        cli=True,
        ASKTELL_JOB_LEASE_SECONDS=LEASE,
        ASKTELL_ARTIFACTS_DIR=str(tmp_path / "artifacts"),
        ASKTELL_EXECUTOR="ray",
    )


def test_a_job_on_ray_matches_the_same_job_on_the_local_executor(start_server, tmp_path):
    server = start_ray_server(start_server, tmp_path)
    with Client(server.url) as client:
        # Both Ray workers must train units (CI once saw one do them all): each asks half a CPU,
        # so that both run even on a cluster that counts one CPU, and the units are long enough
        # (600 steps, about 0.4 s here) to outlast one worker starting a second after the other.
        on_ray = client.submit_job(  # the server's default executor
            **job_fields("on-ray", steps=2400, resources={"num_cpus": 0.5})
        )
        assert on_ray.info.config.executor == "ray"
        ray_info = on_ray.wait(progress=False, timeout=300)
        assert ray_info.state == "succeeded", (ray_info.error, server.log_tail())
        local = client.submit_job(**job_fields("on-local", steps=2400, executor="local"))
        local_info = local.wait(progress=False, timeout=300)
        assert local_info.state == "succeeded", (local_info.error, server.log_tail())
        assert_exact_lineage(client, ray_info)
        # Seeded alike: the same schedule, and the same best score up to noise.
        assert lineage_shape(client, ray_info) == lineage_shape(client, local_info)
        assert ray_info.result is not None and local_info.result is not None
        assert abs(ray_info.result.val_score - local_info.result.val_score) <= 0.05
        workers = {t.worker_id for t in units(client, ray_info)}
        assert len(workers) == 2


def test_a_killed_ray_worker_costs_only_its_unit(start_server, tmp_path):
    server = start_ray_server(start_server, tmp_path)
    with Client(server.url) as client:
        # Units of 500 steps: a worker holds one most of the time, and the job outlasts the
        # search for a worker holding one (with units of 20 steps the job once ended first).
        job = client.submit_job(**job_fields("killed", steps=2000))
        study = client.get_study(job.info.study_id)
        wait_until("a unit told", lambda: job.refresh().units_done >= 2, server, 120)
        # Stop a worker's process, and kill it once it is seen holding a unit (between units
        # it holds none).
        held: list[int] = []
        for _ in range(50):
            workers = wait_until("Ray job workers", ray_job_workers, server, 60)
            victim, pid = sorted(workers.items())[0]
            os.kill(pid, signal.SIGSTOP)
            # A tell it sent just before it stopped is still being answered: let it land, or
            # its unit would look held and then complete without being served again.
            time.sleep(0.5)
            held = [t.number for t in study.trials(states=["running"]) if t.worker_id == victim]
            if held:
                break
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
        assert held, "the worker never held a unit"
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        info = job.wait(progress=False, timeout=300)
        assert info.state == "succeeded", (info.error, server.log_tail())
        assert_exact_lineage(client, info)
        trials = {t.number: t for t in units(client, info)}
        # The killed worker's unit was served again (not trained from another start) and
        # completed; the job did not wait for its lease to lapse.
        assert all(trials[number].retries >= 1 for number in held)
        assert all(t.state == "completed" for t in trials.values())
        assert info.finished_at is not None
        assert time.monotonic() - killed_at < 300
