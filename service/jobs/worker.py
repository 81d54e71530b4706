"""A job's worker process: ``python -m service.jobs.worker --url URL --job ID --worker-id W``.

It talks to the server over HTTP only (``client.Client``), so the same worker runs on another
machine. It reads the job, builds its data split (a bundled dataset, or the uploaded CSV from
``GET /v1/datasets/{id}/csv``) with the job's seed, loads the workload, then loops: ask for a
unit (``pbt``/``ipbt``) or a full run (other engines), download its start checkpoint (unless it
holds it: ``CHECKPOINT_CACHE_BYTES``), train,
upload the new checkpoint (``jobs/{job}/trial-{n}.pt``), tell the score with that key as the
checkpoint and ask for the next unit in the same request (tell-and-ask). Heartbeats keep the
unit's lease while it trains. Between units it checks the job: a cancel (or the job's end)
stops it. The told trial's metadata records where the time went: ``train_seconds`` (the
workload's training and evaluation), ``load_seconds`` (start checkpoint download),
``save_seconds`` (upload), ``unit_seconds`` (all three) and ``ask_seconds`` (an ask of its own,
or about 0 for a unit that came with the previous tell).

Exit codes: 0 when the study has no more work, 3 when the job was cancelled or ended, 1 on an
error (the runner restarts the worker a bounded number of times).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from typing import Any

from client import Client
from client._loops import evaluate
from client._operations import Lease, Op, Sleep, ask_units, fail, tell_and_ask
from client.errors import (
    ArtifactNotFound,
    MaxTrialsReached,
    StudyNotActive,
    TrialFinished,
    TrialReassigned,
)
from client.models import JOB_ENDED, AskResponse, JobPublic, TrialPublic
from service.jobs import keys, spec
from service.lru import LruCache

log = logging.getLogger("asktell.worker")

EXIT_DONE, EXIT_ERROR, EXIT_STOPPED = 0, 1, 3
#: Waits between asks while a generation is still training elsewhere: from the first, doubled
#: up to the last. Short at first, since a generation usually ends within a unit's time (an ask
#: that finds it training costs the server a few milliseconds); every worker idles meanwhile.
MIN_POLL_SECONDS, MAX_POLL_SECONDS = 0.02, 0.5
#: Seconds between two reads of the job (is it cancelled?); the runner also stops the workers
#: of a cancelled job itself, so this only saves a unit's work.
CHECK_SECONDS = 2.0
#: Checkpoints a worker keeps in memory, those it told and those it downloaded, so that a unit
#: starting from one skips the download: in a job of two workers about half the units continue
#: a member the same worker trained last. A told checkpoint's key is written again only by a
#: worker that lost the unit's lease while training it: the same unit, from the same start and
#: seed, so the same bytes for a deterministic workload.
CHECKPOINT_CACHE_BYTES = 256 * 2**20
CHECKPOINT_CACHE_ENTRIES = 64


def fetch_split(client: Client, info: JobPublic) -> Any:
    """The job's ``Split``: as its runner published it (``keys.split_key``), else computed here
    from the bundled dataset or the uploaded CSV fetched from the server."""
    from service.jobs import data

    try:
        return data.Split.from_bytes(client.get_artifact(keys.split_key(info.id)))
    except ArtifactNotFound:
        pass
    seed = int(info.config.seed or 0)
    if info.dataset_id is None:
        return data.builtin_split(str(info.config.dataset), seed)
    meta = client.dataset(info.dataset_id)
    csv = client.dataset_csv(info.dataset_id)
    return data.csv_split(csv, meta.target, meta.task, seed)


class JobWorker:
    """One worker of one job."""

    def __init__(self, client: Client, job_id: int, worker_id: str) -> None:
        from service.jobs.workloads import load_workload

        self.client, self.worker_id = client, worker_id
        self.job = client.job(job_id)
        self.config = self.job.info.config
        self.study = client.get_study(self.job.info.study_id)
        self.split = fetch_split(client, self.job.info)
        self.workload = load_workload(self.config.workload_spec().name)
        self.scheduler = spec.is_scheduler(self.config)
        self.checked = time.monotonic()
        #: The answer to the last ask (one made with a tell), not yet acted on.
        self.answer: AskResponse | None = None
        self.poll = MIN_POLL_SECONDS
        self.checkpoints = LruCache(CHECKPOINT_CACHE_ENTRIES, CHECKPOINT_CACHE_BYTES)
        #: The key and bytes of the checkpoint uploaded for the unit being told.
        self.uploaded: tuple[str, bytes] | None = None

    def run(self) -> int:
        while True:
            if self.should_stop():
                return EXIT_STOPPED
            try:
                more = self.client._run(self.step())
            except (MaxTrialsReached, StudyNotActive):
                more = False
            except (TrialFinished, TrialReassigned) as exc:  # another worker got the unit
                log.warning("unit given up: %s", exc)
                self.answer, more = None, True
            if not more:
                return EXIT_DONE

    def should_stop(self) -> bool:
        """The job was cancelled or ended."""
        if time.monotonic() - self.checked < CHECK_SECONDS:
            return False
        self.checked = time.monotonic()
        info = self.job.refresh()
        return info.cancel_requested or info.state in JOB_ENDED

    def step(self) -> Op[bool]:
        """Take one unit or run (from the last tell's answer, else by asking), train it, tell
        it and ask for the next in the same request; False when there is no more work."""
        started = time.monotonic()
        lease = spec.UNIT_LEASE_SECONDS
        answer, self.answer = self.answer, None
        if answer is None:
            answer = yield from ask_units(
                self.study, 1, worker_id=self.worker_id, lease_seconds=lease
            )
        asked = time.monotonic() - started
        if answer.finished:
            return False
        if not answer.trials:
            yield Sleep(min(answer.retry_after or self.poll, self.poll))
            self.poll = min(2 * self.poll, MAX_POLL_SECONDS)
            return True
        self.poll = MIN_POLL_SECONDS
        (trial,) = answer.trials
        held = Lease(self.study.id, trial.number, lease, self.worker_id)
        score, key, timing = yield from evaluate(self.study, self.train, trial, held)
        if not math.isfinite(score):
            yield from fail(self.study, trial.number, reason=f"the score is {score}")
            return True
        metadata = {**timing, "ask_seconds": asked, "checkpoint": key, "worker": self.worker_id}
        told = yield from tell_and_ask(
            self.study,
            trial.number,
            {spec.OBJECTIVE: score},
            metadata=metadata,
            checkpoint=key,
            worker_id=self.worker_id,
            lease_seconds=lease,
        )
        if self.uploaded is not None and self.uploaded[0] == key:
            self.checkpoints.put(*self.uploaded)
        self.uploaded = None
        # With a problem (the study ended, the engine failed), a plain ask next answers it.
        if told.next is not None and told.next.problem is None:
            self.answer = told.next
        return True

    def unit_input(self, trial: TrialPublic) -> Any:
        from service.jobs.workloads import UnitInput

        optimizer, hparams = spec.unit_hparams(self.config, dict(trial.params))
        unit, start, report = trial.unit, None, None
        if unit is None:  # a full run of a single-objective engine
            steps, seed = self.config.budget.steps, spec.run_seed(self.config, trial.number)
            transform: dict[str, Any] = {"kind": "none"}
        else:
            key = unit.start.checkpoint
            if unit.start.kind == "checkpoint" and key:
                start = self.checkpoints.get(key, lambda: self.client.get_artifact(key))
            steps, seed = unit.to_step - unit.from_step, unit.seed
            transform = unit.transform.model_dump(mode="json")
            if unit.eval_before:
                step, number = unit.from_step, trial.number

                def report(score: float) -> None:
                    self.study.report(number, step, {spec.OBJECTIVE: score})

        return UnitInput(
            data=self.split,
            hparams=hparams,
            optimizer=optimizer,
            options=dict(self.config.workload_spec().options),
            start=start,
            transform=transform,
            steps=steps,
            seed=seed,
            report=report,
        )

    def train(self, trial: TrialPublic) -> tuple[float, str, dict[str, float]]:
        """Train one unit or run: its score, its checkpoint's key, the time spent."""
        t0 = time.monotonic()
        unit = self.unit_input(trial)
        t1 = time.monotonic()
        out = self.workload.train(unit)
        t2 = time.monotonic()
        key = keys.checkpoint_key(self.job.id, trial.number)
        self.client.put_artifact(key, out.checkpoint)
        self.uploaded = (key, out.checkpoint)
        t3 = time.monotonic()
        timing = {
            "train_seconds": float(out.train_seconds),
            "load_seconds": t1 - t0,
            "save_seconds": t3 - t2,
            "unit_seconds": t3 - t0,
        }
        return float(out.score), key, timing


def main(argv: list[str] | None = None) -> int:
    """Run one worker; its exit code."""
    parser = argparse.ArgumentParser(prog="python -m service.jobs.worker")
    parser.add_argument("--url", required=True, help="the asktell server's URL")
    parser.add_argument("--job", type=int, required=True, help="the job's id")
    parser.add_argument("--worker-id", required=True, help="this worker's name in the study")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(1)
    with Client(args.url, timeout=120.0, retries=8) as client:
        return JobWorker(client, args.job, args.worker_id).run()


def exit_now(code: int) -> None:
    """End the process without Python's teardown: with torch imported it takes about half a
    second, which the job's end waits for, and a worker leaves nothing to clean up (its HTTP
    client is closed, its log flushed here). As multiprocessing's children end."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
