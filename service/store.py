"""What every service function shares: the database, parsed-config cache, per-study locks,
the idempotent write wrapper, and the row-to-wire conversions.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import bindparam, func, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from client.models import MeasurementPublic, StudyConfig, StudyPublic, TrialPublic
from service.db.models import Measurement, Study, Trial
from service.db.session import Database
from service.errors import ApiError, conflict, not_found
from service.history import HistoryCache
from service.idempotency import Answer, IdemKey, remember, replay
from service.problem import SpecCache, StudySpec

studies_t = Study.__table__
trials_t = Trial.__table__
measurements_t = Measurement.__table__


def utcnow() -> datetime:
    return datetime.now(UTC)


#: Default for ``Store(history_cache_bytes=...)``; the server takes it from its settings.
DEFAULT_HISTORY_CACHE_BYTES = 512 * 1024 * 1024


class Store:
    def __init__(
        self, db: Database, history_cache_bytes: int = DEFAULT_HISTORY_CACHE_BYTES
    ) -> None:
        self.db = db
        self.specs = SpecCache()
        #: Completed-trial arrays per study, for model-based asks (``service.history``).
        self.history = HistoryCache(history_cache_bytes)
        self._study_locks: defaultdict[int, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()

    def study_lock(self, study_id: int) -> threading.Lock:
        """An in-process lock per study: asks on one study wait for each other, never for
        asks on another study."""
        with self._guard:
            return self._study_locks[study_id]

    def spec(self, conn: Connection, study_id: int) -> StudySpec:
        return self.specs.get(study_id, lambda: _load_config(conn, study_id))

    def spec_for(self, study_id: int) -> StudySpec:
        """The parsed config, from the cache or, on a miss, from a read transaction."""
        return self.specs.peek(study_id) or self.db.read(lambda c: self.spec(c, study_id))

    def write(
        self,
        tenant_id: int,
        idem: IdemKey | None,
        fn: Callable[[Connection], tuple[int, BaseModel]],
    ) -> Answer:
        """Run ``fn`` in a write transaction, honouring the idempotency key."""

        def run(conn: Connection) -> Answer:
            status, model = fn(conn)
            written = Answer(status, model.model_dump_json())
            if idem is not None:
                remember(conn, tenant_id, idem, written, utcnow())
            return written

        # The key is stored with the change, in one statement. A repeat of a committed request
        # either fails on the unique key when it stores its own answer (the whole transaction
        # rolls back), or fails earlier because the first one changed the state (a finished
        # trial); in both cases the stored answer of the first is replayed. Any other unique
        # violation comes from a concurrent insert (two creates of one study name): the
        # request runs once more and now sees what the other one committed.
        try:
            try:
                return self.db.write(run)
            except IntegrityError:
                stored = self._replay(tenant_id, idem)
                if stored is not None:
                    return stored
                return self.db.write(run)
        except IntegrityError as exc:
            raise conflict("conflict", "the request conflicts with a concurrent change") from exc
        except ApiError:
            stored = self._replay(tenant_id, idem)
            if stored is not None:
                return stored
            raise

    def _replay(self, tenant_id: int, idem: IdemKey | None) -> Answer | None:
        if idem is None:
            return None
        return self.db.read(lambda conn: replay(conn, tenant_id, idem))


def _load_config(conn: Connection, study_id: int) -> dict[str, Any]:
    config = conn.execute(select(studies_t.c.config).where(studies_t.c.id == study_id)).scalar()
    if config is None:
        raise not_found(f"study {study_id}")
    return config


def get_study_row(conn: Connection, tenant_id: int, study_id: int, lock: bool = False) -> Row:
    """The live study row, locked for update on PostgreSQL when ``lock``.

    Raises:
        ApiError: 404 when the study does not exist, belongs to another tenant, or was deleted.
    """
    query = select(studies_t).where(
        studies_t.c.id == study_id,
        studies_t.c.tenant_id == tenant_id,
        studies_t.c.deleted_at.is_(None),
    )
    if lock:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        raise not_found(f"study {study_id}")
    return row


_BUMP_REVISION = (
    update(studies_t)
    .where(studies_t.c.id == bindparam("study_id"))
    .values(revision=studies_t.c.revision + bindparam("by"), updated_at=bindparam("now"))
    .returning(studies_t.c.revision)
)


def bump_revision(conn: Connection, study_id: int, now: datetime, by: int = 1) -> int:
    """Add ``by`` to the study's revision, locking the study row (PostgreSQL) until the
    transaction ends, and return the new revision (0 when the study does not exist).

    The new revision is what a trial finished in this transaction takes as its
    ``completed_seq``: writers bump one after another under the row lock, so the numbers
    increase in commit order (see ``service.history``).
    """
    revision = conn.execute(_BUMP_REVISION, {"study_id": study_id, "now": now, "by": by}).scalar()
    return 0 if revision is None else int(revision)


_TRIAL_FIELDS = tuple(TrialPublic.model_fields)


def trial_public(trial: Row | Mapping[str, Any]) -> TrialPublic:
    """A trial's columns, from a row or from the values just inserted, as the wire model."""
    columns = trial._mapping if isinstance(trial, Row) else trial
    return TrialPublic.model_validate({name: columns[name] for name in _TRIAL_FIELDS})


def measurement_public(row: Row) -> MeasurementPublic:
    return MeasurementPublic(
        step=row.step, values=row.values, checkpoint=row.checkpoint, created_at=row.created_at
    )


def trial_counts(conn: Connection, study_id: int) -> dict[str, int]:
    rows = conn.execute(
        select(trials_t.c.state, func.count())
        .where(trials_t.c.study_id == study_id)
        .group_by(trials_t.c.state)
    )
    return {state: count for state, count in rows}


def study_public(
    row: Row, counts: dict[str, int], best_values: dict[str, float] | None
) -> StudyPublic:
    config = StudyConfig.model_validate(row.config)
    return StudyPublic(
        **config.model_dump(exclude={"seed"}),
        id=row.id,
        name=row.name,
        state=row.state,
        metadata=row.metadata,
        seed=row.seed,
        revision=row.revision,
        engine_state=row.engine_state,
        engine_state_version=row.engine_state_version,
        trial_counts=counts,
        best_values=best_values,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
