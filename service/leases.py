"""Leases: how long a handed-out trial is held, the heartbeat that extends it, and what happens
when it expires (the study's policy), applied by asks and by the background reaper.

The reaper runs on every replica: each pass is one short write transaction that expires leases
and forgets old idempotency keys; on several replicas the passes simply overlap, and the row
updates they make are idempotent.
"""

from __future__ import annotations

import itertools
import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Row

from client.models import AskRequest, HeartbeatRequest, TrialPublic
from service.errors import ApiError, ProblemCode
from service.idempotency import IdemKey, forget_old
from service.problem import ParsedStudy
from service.store import Answer, Store, bump_revision, trials_t, unfinished_trial, utcnow
from service.wire import trial_public

log = logging.getLogger("asktell.reaper")


def lease_until(parsed: ParsedStudy, req: AskRequest | HeartbeatRequest, now: datetime) -> datetime:
    return now + timedelta(seconds=req.lease_seconds or parsed.config.lease_seconds)


def extended_lease(
    trial: Row, parsed: ParsedStudy, req: HeartbeatRequest, now: datetime
) -> datetime:
    """An explicit ``lease_seconds`` sets the lease; otherwise it is extended by the study's
    default and never shortened (a trial asked with a long lease keeps it)."""
    new = lease_until(parsed, req, now)
    if req.lease_seconds is None and trial.lease_expires_at is not None:
        return max(new, trial.lease_expires_at)
    return new


def expire_leases(
    store: Store, conn: Connection, now: datetime, study_id: int | None = None
) -> int:
    """Apply each study's lease policy to running trials whose lease has expired.

    ``requeue``: the trial becomes ``stale`` and its parameters go to the next asker, until it
    has been re-served ``max_retries`` times; then, or with ``fail``, it becomes ``failed``.
    Returns how many studies had trials changed.
    """
    query = select(trials_t.c.id, trials_t.c.study_id, trials_t.c.retries).where(
        trials_t.c.state == "running", trials_t.c.lease_expires_at < now
    )
    if study_id is not None:
        query = query.where(trials_t.c.study_id == study_id)
    expired = conn.execute(query.order_by(trials_t.c.study_id, trials_t.c.number)).all()
    return sum(
        _expire_study(store, conn, sid, list(group), now)
        for sid, group in itertools.groupby(expired, key=lambda r: r.study_id)
    )


def _expire_study(
    store: Store, conn: Connection, study_id: int, trials: list[Row], now: datetime
) -> bool:
    """Apply the study's lease policy to its ``trials``; whether any of them changed."""
    config = store.parsed_study(conn, study_id).config
    requeue = [
        config.on_lease_expiry == "requeue" and t.retries < config.max_retries for t in trials
    ]
    n_failed = requeue.count(False)
    # Lock the study row before the trial rows (the order of tell and ask; studies in id
    # order across replicas), and take one completed_seq per trial that fails. A trial
    # that a concurrent tell finished first leaves a harmless gap in the seqs.
    revision = bump_revision(conn, study_id, now, by=max(n_failed, 1))
    seqs = iter(range(revision - n_failed + 1, revision + 1))
    changed = False
    for trial, stale in zip(trials, requeue, strict=True):
        change: dict[str, Any] = {"state": "stale", "worker_id": None, "lease_expires_at": None}
        if not stale:
            change = {
                "state": "failed",
                "reason": "lease expired without a tell or heartbeat",
                "lease_expires_at": None,
                "completed_at": now,
                "completed_seq": next(seqs),
            }
        # The condition is checked again by the UPDATE itself: a tell, heartbeat or re-serve
        # that committed since the SELECT wins (PostgreSQL does not lock the selected rows).
        result = conn.execute(
            update(trials_t)
            .where(
                trials_t.c.id == trial.id,
                trials_t.c.state == "running",
                trials_t.c.lease_expires_at < now,
            )
            .values(**change)
        )
        changed = changed or bool(result.rowcount)
    return changed


def heartbeat(
    store: Store,
    tenant_id: int,
    study_id: int,
    number: int,
    req: HeartbeatRequest,
    idem: IdemKey | None,
) -> Answer:
    """Extend a running trial's lease. A ``stale`` trial not yet re-served is taken back.

    With ``worker_id``, a trial that was re-served to another worker is a 409
    ``trial_reassigned``: the caller should stop working on it."""

    def fn(conn: Connection) -> tuple[int, TrialPublic]:
        now = utcnow()
        trial, _ = unfinished_trial(conn, tenant_id, study_id, number, now)
        parsed = store.parsed_study(conn, study_id)
        _check_held(trial, req)
        worker_id = req.worker_id if trial.state == "stale" else trial.worker_id
        updated = conn.execute(
            update(trials_t)
            .where(trials_t.c.id == trial.id)
            .values(
                state="running",
                worker_id=worker_id,
                lease_expires_at=extended_lease(trial, parsed, req, now),
                heartbeat_at=now,
            )
            .returning(*trials_t.c)
        ).one()
        return 200, trial_public(updated)

    return store.write(tenant_id, idem, fn)


def _check_held(trial: Row, req: HeartbeatRequest) -> None:
    """Raises: ApiError 409 ``trial_not_running`` for a waiting trial, ``trial_reassigned``
    for a trial running for another worker than ``req.worker_id``."""
    if trial.state == "waiting":
        raise ApiError(
            ProblemCode.TRIAL_NOT_RUNNING,
            f"trial {trial.number} is waiting to be asked for; ask before sending heartbeats",
            state=trial.state,
        )
    if (
        req.worker_id is not None
        and trial.state == "running"
        and trial.worker_id not in (None, req.worker_id)
    ):
        raise ApiError(
            ProblemCode.TRIAL_REASSIGNED,
            f"trial {trial.number} was served to another worker after its lease expired",
            state=trial.state,
        )


def reap_once(store: Store) -> int:
    """One pass of the reaper: forget old idempotency keys and expire leases."""

    def fn(conn: Connection) -> int:
        now = utcnow()
        forget_old(conn, now)
        return expire_leases(store, conn, now)

    return store.db.write(fn)


class Reaper:
    """A daemon thread that calls ``reap_once`` every ``interval`` seconds."""

    def __init__(self, store: Store, interval: float) -> None:
        self.store, self.interval = store, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="asktell-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                changed = reap_once(self.store)
                if changed:
                    log.info("expired %d trial lease(s)", changed)
            except Exception:  # keep reaping after a transient failure; it is logged
                log.exception("reaper pass failed")
