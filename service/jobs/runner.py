"""The job runner: a thread per server process (``ASKTELL_RUN_JOBS``, started in the app's
lifespan like the lease reaper) that runs jobs.

A thread of its own renews the leases of the jobs it runs (``ASKTELL_JOB_LEASE_SECONDS``).
Every ``TICK_SECONDS``, and at once when one of its local workers ends (a job's end is
noticed without waiting for the next pass) or a job is created or cancelled through this
process (``Store.jobs_changed``), it tends them (restarts a crashed worker a
bounded number of times, stops the workers of a cancelled job, finalizes a job whose workers
found no more work), deletes their releasable checkpoints every ``GC_SECONDS``, and claims one
more job: a queued one, or a running one whose lease expired (its process died; ``takeovers``
counts these). A claim is one atomic UPDATE conditioned on the lease being free, so on several
replicas exactly one process gets a job.

Workers are processes (``service.jobs.worker``) talking to the API at ``ASKTELL_SELF_URL``.
On shutdown the runner stops its workers and lets its leases lapse at once, without ending the
jobs: the next process (this one restarted, or another replica) takes them over; the units the
stopped workers held are re-served (their leases are expired at the takeover) from the same
start, so no completed unit is lost and none is trained from another start.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.engine import Connection

from client.key_models import ApiKeyCreated
from client.models import JobCreate, TellRequest
from engines.registry import engine_class
from service import api_keys, trials
from service.errors import ApiError
from service.jobs import gc, keys, results, spec
from service.jobs.executors import LocalWorker, RayWorker, WorkerProcess
from service.jobs.jobs import jobs_t
from service.jobs.worker import EXIT_DONE, EXIT_STOPPED
from service.settings import Settings
from service.store import Store, studies_t, trials_t, utcnow

log = logging.getLogger("asktell.jobs")

TICK_SECONDS = 1.0
GC_SECONDS = 3.0
#: Worker crashes a job survives (each crashed worker is started again); one more fails it.
MAX_RESTARTS = 3
#: Seconds a worker gets to exit after SIGTERM before SIGKILL.
TERM_SECONDS = 3.0
#: Passes in a row that may fail tending a job (a transient database error) before it fails.
MAX_TEND_ERRORS = 3
#: The workers' logs, under the artifact store's root (beside the data they concern, and not
#: left in /tmp by a killed server), deleted when the job ends: a failed job's error quotes its
#: worker's last lines.
LOG_FOLDER = ".worker-logs"


@dataclass
class RunningJob:
    """A job this process holds the lease of, and its worker processes by slot."""

    id: int
    tenant_id: int
    study_id: int
    config: JobCreate
    procs: list[WorkerProcess | None] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    restarts: int = 0
    deleted: set[str] = field(default_factory=set)
    last_gc: float = 0.0
    tend_errors: int = 0
    #: The write key of the job's tenant its workers use when the server needs keys, made by
    #: this process for this job (``_worker_key``), revoked when it stops the job's workers.
    api_key: ApiKeyCreated | None = None


class JobRunner:
    def __init__(self, store: Store, artifacts: Callable[[], Any], settings: Settings) -> None:
        self.store, self.settings = store, settings
        self._artifacts = artifacts
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.jobs: dict[int, RunningJob] = {}
        self._stop = threading.Event()
        #: Set to start the next pass now: a local worker ended, or the runner stops.
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="asktell-jobs", daemon=True)
        #: Leases are renewed on their own thread, so that a slow pass (finalizing a job) never
        #: lets them lapse.
        self._renewer = threading.Thread(
            target=self._renew_loop, name="asktell-job-leases", daemon=True
        )
        self._lost: set[int] = set()
        self._lock = threading.Lock()

    @property
    def artifacts(self) -> Any:
        """The artifact store (``app.state.artifacts``, set up in the lifespan)."""
        return self._artifacts()

    def start(self) -> None:
        self._thread.start()
        self._renewer.start()
        self.store.jobs_changed = self._wake.set

    def stop(self) -> None:
        """Stop the workers and let this process's leases lapse; the jobs stay running."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)
        self._renewer.join(timeout=30)
        for job in list(self.jobs.values()):
            self._stop_workers(job)
        try:
            self.store.db.write(self._release)
        except Exception:
            log.exception("could not release the job leases")
        self.jobs.clear()

    def _release(self, conn: Connection) -> None:
        conn.execute(
            update(jobs_t)
            .where(jobs_t.c.lease_owner == self.owner, jobs_t.c.state == "running")
            .values(lease_expires_at=utcnow())
        )

    def _loop(self) -> None:
        while True:
            self._wake.wait(TICK_SECONDS)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.tick()
            except Exception:  # keep running jobs after a transient failure; it is logged
                log.exception("job runner pass failed")

    def _renew_loop(self) -> None:
        interval = max(0.2, self.settings.job_lease_seconds / 4)
        while not self._stop.wait(interval):
            try:
                self._renew()
            except Exception:
                log.exception("renewing the job leases failed")

    def tick(self) -> None:
        with self._lock:
            lost, self._lost = self._lost, set()
        for job_id in lost & set(self.jobs):
            log.warning("job %d: lease taken by another process; stopping its workers", job_id)
            self._stop_workers(self.jobs.pop(job_id))
        for job in list(self.jobs.values()):
            if self._stop.is_set():
                return
            self._tend_or_fail(job)
        if not self._stop.is_set():
            self._claim()

    def _tend_or_fail(self, job: RunningJob) -> None:
        """Tend the job; a job that cannot be tended several passes in a row (its workers
        cannot start, its study is gone) fails with the error instead of staying running."""
        try:
            self._tend(job)
            job.tend_errors = 0
        except Exception as exc:
            job.tend_errors += 1
            log.exception("job %d: tending failed (%d in a row)", job.id, job.tend_errors)
            if job.tend_errors >= MAX_TEND_ERRORS and job.id in self.jobs:
                self._stop_workers(job)
                self._end(job, "failed", error=f"the job runner failed: {exc!r}")

    # --- leases ---------------------------------------------------------------------------

    def _lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.settings.job_lease_seconds)

    def _renew(self) -> None:
        """Extend the leases held; a job whose lease another process took is marked lost (the
        runner's pass stops its workers)."""
        ids = list(self.jobs)
        if not ids:
            return

        def fn(conn: Connection) -> set[int]:
            now = utcnow()
            conn.execute(
                update(jobs_t)
                .where(jobs_t.c.lease_owner == self.owner, jobs_t.c.state == "running")
                .values(lease_expires_at=self._lease_until(now))
            )
            held = conn.execute(
                select(jobs_t.c.id).where(jobs_t.c.lease_owner == self.owner, jobs_t.c.id.in_(ids))
            ).scalars()
            return set(held)

        held = self.store.db.write(fn)
        with self._lock:
            self._lost |= set(ids) - held

    def _claim(self) -> None:
        """Take one queued job, or one whose runner stopped renewing its lease."""
        found = self.store.db.read(lambda c: _claimable(c, utcnow()))
        if not [c for c in found if c.id not in self.jobs]:
            return  # a read first: most passes find nothing, and take no write lock
        job = self.store.db.write(self._claim_one)
        if job is None:
            return
        config = JobCreate.model_validate(job.config)
        running = RunningJob(job.id, job.tenant_id, job.study_id, config)
        self.jobs[job.id] = running
        log.info("job %d: claimed by %s", job.id, self.owner)
        self._publish_split(job)
        try:
            self._start_workers(running)
        except Exception as exc:
            log.exception("job %d: its workers could not start", job.id)
            self._stop_workers(running)
            self._end(running, "failed", error=f"the job's workers could not start: {exc!r}")

    def _publish_split(self, job: Any) -> None:
        """Store the job's split for its workers (``keys.split_key``): a worker that reads it
        neither imports scikit-learn nor parses and encodes the dataset, a second or more of
        its start. Without it (this failed: logged) each worker computes the split itself."""
        try:
            split = self.store.db.read(lambda c: results.load_split(c, job))
            keys.write(self.artifacts, job.tenant_id, keys.split_key(job.id), split.to_bytes())
        except Exception:
            log.exception("job %d: publishing its split failed; its workers compute it", job.id)

    def _claim_one(self, conn: Connection) -> Any:
        now = utcnow()
        free = or_(jobs_t.c.lease_owner.is_(None), jobs_t.c.lease_expires_at < now)
        candidates = _claimable(conn, now)
        for c in candidates:
            if c.id in self.jobs:
                continue  # ours, its lease renewed late: not a takeover
            takeover = 1 if c.state == "running" else 0
            claimed = conn.execute(
                update(jobs_t)
                .where(jobs_t.c.id == c.id, jobs_t.c.state == c.state, free)
                .values(
                    state="running",
                    lease_owner=self.owner,
                    lease_expires_at=self._lease_until(now),
                    takeovers=jobs_t.c.takeovers + takeover,
                    started_at=jobs_t.c.started_at if takeover else now,
                    updated_at=now,
                )
            )
            if claimed.rowcount != 1:
                continue
            if takeover:
                log.warning("job %d: taken over from %s", c.id, c.lease_owner)
            return conn.execute(select(jobs_t).where(jobs_t.c.id == c.id)).one()
        return None

    # --- workers --------------------------------------------------------------------------

    def _worker_count(self, config: JobCreate) -> int:
        n = config.parallelism or self.settings.job_workers or os.cpu_count() or 1
        cap = spec.population(config) if spec.is_scheduler(config) else config.budget.trials
        return max(1, min(n, cap or n))

    def _start_workers(self, job: RunningJob) -> None:
        if engine_class(job.config.engine_spec().name).uses_observations:
            # The engine computes in the engine processes: they start while the workers start
            # (seconds of imports), instead of at the first ask, which would wait for them.
            self.store.engine_pool.start()
        n = self._worker_count(job.config)
        job.procs = [None] * n
        folder = Path(self.artifacts.root) / LOG_FOLDER
        job.logs = [folder / f"job-{job.id}-{self.owner}-w{slot}.log" for slot in range(n)]
        for slot in range(n):
            self._spawn(job, slot)

    def _worker_id(self, slot: int) -> str:
        return f"{self.owner}/w{slot}"

    def _spawn(self, job: RunningJob, slot: int) -> None:
        worker_id = self._worker_id(slot)
        argv = [
            "--url",
            self.settings.self_url,
            "--job",
            str(job.id),
            "--worker-id",
            worker_id,
        ]
        key_env = self._worker_key(job)
        if (job.config.executor or self.settings.executor) == "ray":
            job.procs[slot] = RayWorker(
                self.settings, worker_id, argv, key_env, job.config.resources
            )
            return
        local = LocalWorker(argv, {**os.environ, **key_env}, job.logs[slot], self._wake.set)
        job.procs[slot] = local
        log.info("job %d: worker %d started, pid %s", job.id, slot, local.pid)

    def _worker_key(self, job: RunningJob) -> dict[str, str]:
        """The environment that gives the job's workers a key (``ASKTELL_API_KEY``): none when
        the server needs no key."""
        if not self.settings.auth_required:
            return {}
        if job.api_key is None:
            name = f"job {job.id} workers ({self.owner})"
            job.api_key = api_keys.create_key(self.store.db, job.tenant_id, name, "write")
        return {"ASKTELL_API_KEY": job.api_key.key}

    def _stop_workers(self, job: RunningJob) -> None:
        procs = [p for p in job.procs if p is not None and p.poll() is None]
        for p in procs:
            p.terminate()
        deadline = time.monotonic() + TERM_SECONDS
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=TERM_SECONDS)
        # Every caller is done with the job's workers here; a later runner makes its own key.
        self._revoke_worker_key(job)

    def _revoke_worker_key(self, job: RunningJob) -> None:
        if job.api_key is not None:
            api_keys.revoke_key(self.store.db, job.api_key.id)
            job.api_key = None

    # --- a job's life ---------------------------------------------------------------------

    def _tend(self, job: RunningJob) -> None:
        row = self.store.db.read(
            lambda c: c.execute(select(jobs_t).where(jobs_t.c.id == job.id)).one()
        )
        if row.state != "running" or row.lease_owner != self.owner:
            self._stop_workers(self.jobs.pop(job.id))
            return
        if row.cancel_requested:
            self._stop_workers(job)
            self._end(job, "cancelled")
            return
        self._expire_foreign_units(job)
        crashed = [
            (slot, p)
            for slot, p in enumerate(job.procs)
            if p is not None and p.poll() not in (None, EXIT_DONE, EXIT_STOPPED)
        ]
        for slot, p in crashed:
            if job.restarts >= MAX_RESTARTS:
                self._stop_workers(job)
                error = f"worker {slot} exited with code {p.poll()}:\n{p.tail()}"
                self._end(job, "failed", error=error)
                return
            job.restarts += 1
            log.warning("job %d: worker %d exited with %s; restarting", job.id, slot, p.poll())
            self._expire_units_of(job, self._worker_id(slot))
            self._spawn(job, slot)
        if time.monotonic() - job.last_gc > GC_SECONDS:
            job.last_gc = time.monotonic()
            gc.collect(self.store, self.artifacts, job.tenant_id, job.id, row, job.deleted)
        if all(p is not None and p.poll() is not None for p in job.procs):
            self._finalize(job, row)

    def _running_units(self, job: RunningJob, column: Any, *where: Any) -> list[Any]:
        """``column`` of the job's running units that match ``where``."""
        query = select(column).where(
            trials_t.c.study_id == job.study_id, trials_t.c.state == "running", *where
        )
        return self.store.db.read(lambda c: list(c.execute(query).scalars()))

    def _serve_again(self, ids: list[int]) -> None:
        """Let these running units' leases lapse now: the next ask re-serves each (same unit,
        same start)."""
        lapse = (
            update(trials_t)
            .where(trials_t.c.id.in_(ids), trials_t.c.state == "running")
            .values(lease_expires_at=utcnow())
        )
        if ids:
            self.store.db.write(lambda c: c.execute(lapse))

    def _expire_foreign_units(self, job: RunningJob) -> None:
        """Units held by workers of an earlier runner of the job (dead, or about to be stopped)
        are served again at the next ask. Done on every pass: such a worker may still send a
        heartbeat that takes a unit back before it is stopped."""
        mine = f"{self.owner}/"
        foreign = ~trials_t.c.worker_id.startswith(mine, autoescape=True)
        self._serve_again(self._running_units(job, trials_t.c.id, foreign))

    def _expire_units_of(self, job: RunningJob, worker_id: str) -> None:
        """The units a dead worker held are served again at the next ask (same start), not
        after their leases lapse."""
        held = self._running_units(job, trials_t.c.id, trials_t.c.worker_id == worker_id)
        self._serve_again(held)

    def _finalize(self, job: RunningJob, row: Any) -> None:
        try:
            result = results.finalize(self.store, self.artifacts, row)
        except Exception as exc:
            log.exception("job %d: finalizing failed", job.id)
            self._end(job, "failed", error=f"finalizing the job failed: {exc!r}")
            return
        gc.collect(self.store, self.artifacts, job.tenant_id, job.id, row, job.deleted)
        self._end(job, "succeeded", result=result.model_dump(mode="json"))

    def _end(
        self, job: RunningJob, state: str, error: str | None = None, result: Any = None
    ) -> None:
        # Before the job shows as ended: its workers (done, or stopped) need the key no more,
        # and the units they held are failed (a reader who sees the job ended sees no unit
        # still running).
        self._revoke_worker_key(job)
        if state != "succeeded":
            try:
                # Paused first: an ask a stopped worker sent just before it stopped can still
                # be committing, and would hand out a unit after the running ones were failed.
                self._pause_study(job)
                self._fail_running_units(job, f"the job was {state}")
            except Exception:  # the job must still end; the units' leases lapse anyway
                log.exception("job %d: pausing its study or failing its units failed", job.id)

        def fn(conn: Connection) -> None:
            now = utcnow()
            conn.execute(
                update(jobs_t)
                .where(
                    jobs_t.c.id == job.id,
                    jobs_t.c.lease_owner == self.owner,
                    jobs_t.c.state == "running",
                )
                .values(
                    state=state,
                    error=error,
                    result=result,
                    finished_at=now,
                    lease_expires_at=None,
                    updated_at=now,
                )
            )

        self.store.db.write(fn)
        self.jobs.pop(job.id, None)
        log.info("job %d: %s", job.id, state)
        for path in (Path(self.artifacts.root) / LOG_FOLDER).glob(f"job-{job.id}-*.log"):
            path.unlink(missing_ok=True)  # also those of the job's earlier runners

    def _pause_study(self, job: RunningJob) -> None:
        """No more units from the job's study (resuming it by hand continues it)."""
        pause = (
            update(studies_t)
            .where(studies_t.c.id == job.study_id, studies_t.c.state == "active")
            .values(state="paused", revision=studies_t.c.revision + 1, updated_at=utcnow())
        )
        self.store.db.write(lambda c: c.execute(pause))

    def _fail_running_units(self, job: RunningJob, reason: str) -> None:
        """The units the stopped workers held end failed now, instead of showing as running
        until their leases lapse."""
        running = self._running_units(job, trials_t.c.number)
        failed = TellRequest(state="failed", reason=reason)
        for number in running:
            try:
                trials.tell(self.store, job.tenant_id, job.study_id, number, failed, None)
            except ApiError:  # told or failed in the meantime
                continue


def _claimable(conn: Connection, now: datetime) -> list[Any]:
    """Jobs no live process runs: queued, or running with a lapsed lease (a few, by id)."""
    return list(
        conn.execute(
            select(jobs_t.c.id, jobs_t.c.state, jobs_t.c.lease_owner)
            .where(
                or_(
                    jobs_t.c.state == "queued",
                    (jobs_t.c.state == "running") & (jobs_t.c.lease_expires_at < now),
                ),
                jobs_t.c.cancel_requested.is_(False),
            )
            .order_by(jobs_t.c.id)
            .limit(5)
        ).all()
    )
