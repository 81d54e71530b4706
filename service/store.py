"""What every service function shares: the tables, the ``Store`` (database, parsed-config
cache, per-study locks, the idempotent write wrapper), and the lookups of a study and a trial.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from sqlalchemy import Select, bindparam, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from client.models import FINISHED_STATES
from service.db.models import Measurement, Study, Trial
from service.db.session import Database
from service.engine_pool import EnginePool
from service.errors import ApiError, ProblemCode
from service.history import HistoryCache
from service.idempotency import Answer, IdemKey, answered, replay
from service.lru import LruCache
from service.problem import ParsedStudy, ParsedStudyCache
from service.unit_rows import UnitCache
from service.write_groups import WriteGroups

if TYPE_CHECKING:
    from service.pool_refill import PoolRefiller

studies_t = Study.__table__
trials_t = Trial.__table__
measurements_t = Measurement.__table__


def utcnow() -> datetime:
    return datetime.now(UTC)


#: Default for ``Store(history_cache_bytes=...)``; the server takes it from its settings.
DEFAULT_HISTORY_CACHE_BYTES = 512 * 1024 * 1024


class Store:
    def __init__(
        self,
        db: Database,
        history_cache_bytes: int = DEFAULT_HISTORY_CACHE_BYTES,
        engine_pool: EnginePool | None = None,
    ) -> None:
        self.db = db
        #: Where model-based engines compute (``service.engine_pool``); default: in the ask.
        self.engine_pool = engine_pool or EnginePool(0, math.inf)
        self.parsed_studies = ParsedStudyCache()
        #: Completed-trial arrays per study, for model-based asks (``service.history``).
        self.history = HistoryCache(history_cache_bytes)
        #: Finished units per scheduler study, for asks (``service.unit_rows``).
        self.units = UnitCache()
        #: Chart answers by study revision (``service.progress.study_history``).
        self.charts = LruCache()
        #: Writes to one study made in one transaction while they queue (``tell_ask``).
        self.write_groups = WriteGroups(db, utcnow)
        self._study_locks: defaultdict[int, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()
        #: Asks a background refill of a study's suggestion pool, with ``(tenant_id,
        #: study_id)``, after a tell or an ask (``service.pool_refill``); ``None``: this process
        #: neither refills nor serves the pool (``ASKTELL_SUGGESTION_POOL=0``, tests).
        self.refill_pool: Callable[[int, int], None] | None = None
        #: Wakes this process's job runner (``service.jobs.runner``), if it has one, after a
        #: job is created or cancelled: it takes or stops the job now, not at its next pass.
        self.jobs_changed: Callable[[], None] = lambda: None
        #: This process's refills, which an ask that found a pool short waits for.
        self.pool_refills: PoolRefiller | None = None

    def study_lock(self, study_id: int) -> threading.Lock:
        """An in-process lock per study: asks on one study wait for each other, never for
        asks on another study."""
        with self._guard:
            return self._study_locks[study_id]

    def parsed_study(self, conn: Connection, study_id: int) -> ParsedStudy:
        return self.parsed_studies.get(study_id, lambda: _load_config(conn, study_id))

    def parsed_study_for(self, study_id: int) -> ParsedStudy:
        """The parsed config, from the cache or, on a miss, from a read transaction."""
        return self.parsed_studies.peek(study_id) or self.db.read(
            lambda c: self.parsed_study(c, study_id)
        )

    def write(
        self,
        tenant_id: int,
        idem: IdemKey | None,
        fn: Callable[[Connection], tuple[int, BaseModel]],
    ) -> Answer:
        """Run ``fn`` in a write transaction, honouring the idempotency key."""

        def run(conn: Connection) -> Answer:
            return answered(conn, tenant_id, idem, fn, utcnow())

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
            raise ApiError(
                ProblemCode.CONFLICT, "the request conflicts with a concurrent change"
            ) from exc
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
        raise ApiError(ProblemCode.NOT_FOUND, f"study {study_id} does not exist")
    return config


def row_or_404(conn: Connection, query: Select[Any], params: dict[str, Any], what: str) -> Row:
    """The first row of ``query``, or a 404 ``not_found`` naming ``what``."""
    row = conn.execute(query, params).first()
    if row is None:
        raise ApiError(ProblemCode.NOT_FOUND, f"{what} does not exist")
    return row


#: Settings of a study's config column that ``find_study`` can read as columns of its row.
STUDY_SETTINGS = {"max_trials": studies_t.c.config["max_trials"].as_integer().label("max_trials")}


@functools.cache
def _study_query(columns: tuple[str, ...] | None, for_update: bool) -> Select[Any]:
    """The statement of ``find_study``, built once per column set; SQLAlchemy then reuses its
    compiled form."""
    chosen = (
        studies_t.c
        if columns is None
        else [STUDY_SETTINGS[c] if c in STUDY_SETTINGS else studies_t.c[c] for c in columns]
    )
    query = select(*chosen).where(
        studies_t.c.id == bindparam("study_id"),
        studies_t.c.tenant_id == bindparam("tenant_id"),
        studies_t.c.deleted_at.is_(None),
    )
    return query.with_for_update() if for_update else query


def find_study(
    conn: Connection,
    tenant_id: int,
    study_id: int,
    *,
    for_update: bool = False,
    require_active: bool = False,
    columns: tuple[str, ...] | None = None,
) -> Row:
    """The tenant's live study row; locked until the transaction ends (PostgreSQL) when
    ``for_update``. With ``columns``, only those (a hot path keeps the row narrow; include
    ``state`` with ``require_active``), which may name ``STUDY_SETTINGS``.

    Raises:
        ApiError: 404 ``not_found`` when the study does not exist, belongs to another tenant,
            or was deleted; 409 ``study_not_active`` when ``require_active`` and the study is
            paused or completed.
    """
    query = _study_query(columns, for_update)
    params = {"study_id": study_id, "tenant_id": tenant_id}
    row = row_or_404(conn, query, params, f"study {study_id}")
    if require_active and row.state != "active":
        raise ApiError(
            ProblemCode.STUDY_NOT_ACTIVE,
            f"study {study_id} is {row.state}; set its state to active to ask for trials",
            state=row.state,
        )
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


_TRIAL_FOR_UPDATE = (
    select(trials_t)
    .join(studies_t, studies_t.c.id == trials_t.c.study_id)
    .where(
        studies_t.c.id == bindparam("study_id"),
        studies_t.c.tenant_id == bindparam("tenant_id"),
        studies_t.c.deleted_at.is_(None),
        trials_t.c.number == bindparam("number"),
    )
    .with_for_update(of=trials_t)
)


def trial_not_found(study_id: int, number: int) -> ApiError:
    return ApiError(ProblemCode.TRIAL_NOT_FOUND, f"study {study_id} has no trial {number}")


def unfinished_trial(
    conn: Connection, tenant_id: int, study_id: int, number: int, now: datetime
) -> tuple[Row, int]:
    """The unfinished trial, locked for update, of a live study of the tenant, and the study's
    new revision. The revision is bumped first, so that the study row is locked before the trial
    row, in the order ``ask`` takes them (no deadlock between a tell and an ask on
    PostgreSQL); a trial finished in this transaction takes it as ``completed_seq``.

    Raises:
        ApiError: 404 ``not_found`` for the study, ``trial_not_found`` for the trial; 409
            ``trial_finished`` when the trial is finished (a finished trial cannot change).
    """
    revision = bump_revision(conn, study_id, now)
    row = conn.execute(
        _TRIAL_FOR_UPDATE, {"study_id": study_id, "tenant_id": tenant_id, "number": number}
    ).first()
    if row is None:
        find_study(conn, tenant_id, study_id)
        raise trial_not_found(study_id, number)
    if row.state in FINISHED_STATES:
        raise ApiError(
            ProblemCode.TRIAL_FINISHED,
            f"trial {number} is already {row.state}; a finished trial cannot change",
            state=row.state,
        )
    return row, revision
