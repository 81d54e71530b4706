"""Garbage collection of a job's checkpoints, so that its disk use stays bounded: a scheduler's
releasable checkpoints (``service.units.checkpoints``: no unit will ever load them), and for a
single-objective engine every finished run's checkpoint but the best one's."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Row

from client.models import JobCreate
from service import units
from service.jobs import keys, spec
from service.store import Store, trials_t

log = logging.getLogger("asktell.jobs")


def releasable(store: Store, tenant_id: int, job_id: int, job: Row) -> list[str]:
    """The keys of the job's checkpoints that no unit will load and that are not the best."""
    config = JobCreate.model_validate(job.config)
    prefix = f"jobs/{job_id}/"
    if spec.is_scheduler(config):
        split = units.checkpoints(store, tenant_id, job.study_id)
        return [r.checkpoint for r in split.releasable if r.checkpoint.startswith(prefix)]
    rows = store.db.read(
        lambda c: c.execute(
            select(trials_t.c.number, trials_t.c.state, trials_t.c["values"]).where(
                trials_t.c.study_id == job.study_id,
                trials_t.c.state.in_(("completed", "failed", "infeasible")),
            )
        ).all()
    )
    scored = [r for r in rows if r.state == "completed" and r.values]
    best = max(scored, key=lambda r: r.values[spec.OBJECTIVE], default=None)
    return [
        keys.checkpoint_key(job_id, r.number)
        for r in rows
        if best is None or r.number != best.number
    ]


def collect(
    store: Store, artifacts: Any, tenant_id: int, job_id: int, job: Row, deleted: set[str]
) -> int:
    """Delete the releasable checkpoints not deleted before (``deleted`` remembers them)."""
    try:
        doomed = [k for k in releasable(store, tenant_id, job_id, job) if k not in deleted]
        if doomed:
            keys.delete(artifacts, tenant_id, doomed)
            deleted.update(doomed)
        return len(doomed)
    except Exception:  # the next pass tries again
        log.exception("job %d: checkpoint collection failed", job_id)
        return 0
