"""SQLAlchemy 2 tables. The schema changes only through Alembic revisions in ``migrations/``.

Times are stored as naive UTC and read back as aware UTC (``UTCDateTime``), the same on SQLite
and PostgreSQL. A trial's point in the unit cube is stored as float64 bytes (``x``) beside its
human-readable ``params``, so that building an engine's history is a byte concatenation.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

DEFAULT_TENANT_ID = 1

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    # Every model here is mapped to a plain table; the service builds Core statements on it.
    __table__: ClassVar[Table]


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(256), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Study(Base):
    __tablename__ = "studies"
    __table_args__ = (
        # Names are unique among live studies of a tenant; a deleted study frees its name.
        Index(
            "uq_studies_tenant_name_live",
            "tenant_id",
            "name",
            unique=True,
            sqlite_where=text("deleted_at IS NULL"),
            postgresql_where=text("deleted_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    #: The ``client.models.StudyConfig`` as JSON; it does not change after creation.
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    seed: Mapped[int] = mapped_column(BigInteger)
    engine_state: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: Asks that ran the engine so far: an ask commits only if it is still the value its
    #: snapshot read (asks from several processes), and it seeds the ask's rng. The API calls
    #: it ``engine_state_version`` (``StudyPublic``, ``StudyExport``).
    ask_count: Mapped[int] = mapped_column(Integer)
    #: Bumped by every change to the study or its trials.
    revision: Mapped[int] = mapped_column(BigInteger)
    #: The next trial number: O(1) allocation under the study row lock.
    next_trial_number: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Free text about the study (``StudyUpdate.notes``); NULL when none was written.
    notes: Mapped[str | None] = mapped_column(Text, nullable=True)


class Trial(Base):
    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
        Index("ix_trials_study_state", "study_id", "state"),
        # History in completion order, and the delta since a watermark (service/history.py).
        Index("ix_trials_study_completed_seq", "study_id", "completed_seq"),
        # The event stream's delta since a position (service/events.py).
        Index("ix_trials_study_asked_seq", "study_id", "asked_seq"),
        # The reaper's scan: running trials by lease expiry, across studies.
        Index(
            "ix_trials_running_lease",
            "lease_expires_at",
            sqlite_where=text("state = 'running'"),
            postgresql_where=text("state = 'running'"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"))
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: The point in the unit cube, ``(d,)`` float64 bytes.
    x: Mapped[bytes] = mapped_column(LargeBinary)
    values: Mapped[dict[str, float] | None] = mapped_column(JSON, nullable=True)
    constraints: Mapped[dict[str, float] | None] = mapped_column(JSON, nullable=True)
    feasible: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    worker_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    retries: Mapped[int] = mapped_column(Integer)
    details: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: Schedulers' trials only: the unit document (``client.models.Unit``); SQL NULL otherwise.
    unit: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: When the trial finished, per study: the study's ``revision`` right after the finishing
    #: transaction bumped it under the study row lock, so it increases in commit order. NULL
    #: for trials not finished, or finished before revision 0003.
    completed_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: When the trial was last handed to a worker by an ask, per study: the study's revision
    #: read under the ask's row lock, plus one, which is at most the revision the ask commits,
    #: so it increases in commit order too. NULL for trials never asked (or before 0007).
    asked_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: Free text about the trial (``PUT .../trials/{n}/note``); NULL when none was written.
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: The last sign of life of the worker running the trial: the ask that handed it out, its
    #: last heartbeat or report. NULL for trials never asked (or not since revision 0008).
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class Suggestion(Base):
    """A pooled suggestion (``service.suggestion_pool``): a point a background refill of a
    model-based study computed ahead of the asks, served to one worker and deleted then."""

    __tablename__ = "suggestions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    #: The point in the unit cube, ``(d,)`` float64 bytes, as a trial's ``x``.
    x: Mapped[bytes] = mapped_column(LargeBinary)
    #: The engine's details of the point, copied into the trial that takes it.
    details: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: The study's revision the refill read its history at: the trials with a larger
    #: ``completed_seq`` finished since.
    revision: Mapped[int] = mapped_column(BigInteger)
    #: How many points the refill computed together, and how many finished trials its history
    #: held: the default ``max_staleness`` is the batch's size, at most that history's (at
    #: least 1), so a batch from a short history is not served while the history doubles.
    batch_size: Mapped[int] = mapped_column(Integer)
    history_size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Measurement(Base):
    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("trial_id", "step", name="uq_measurements_trial_step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id"))
    step: Mapped[int] = mapped_column(BigInteger)
    values: Mapped[dict[str, float]] = mapped_column(JSON)
    checkpoint: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Sampler(Base):
    """A multi-target particle sampler (``client.models.SamplerCreate``), driven by ask/tell."""

    __tablename__ = "samplers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    #: The ``SamplerCreate`` body as JSON.
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(BigInteger)
    #: Steps told so far; a tell names the iteration it answers.
    iteration: Mapped[int] = mapped_column(Integer)
    #: ``{"X", "V": m x d lists, "n": momentum counter, "w": last weights or null}``.
    particles: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: ``{"grad_norm": [...], "mean_nll": [...], "restarts": int}``, one entry per step.
    history: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class IdempotencyKey(Base):
    """The stored response of a POST sent with an ``Idempotency-Key`` header."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("tenant_id", "key", name="uq_idempotency_keys_tenant_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    key: Mapped[str] = mapped_column(String(256))
    #: sha256 of method, path and body: the same key with another request is a conflict.
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class Dataset(Base):
    """An uploaded CSV a tuning job trains on (``POST /v1/datasets``); the bundled scikit-learn
    datasets are not stored."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_datasets_tenant_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    target: Mapped[str] = mapped_column(String(256))
    #: ``classification`` or ``regression``.
    task: Mapped[str] = mapped_column(String(16))
    #: The CSV as uploaded (UTF-8 text, header first).
    content: Mapped[bytes] = mapped_column(LargeBinary)
    n_rows: Mapped[int] = mapped_column(Integer)
    #: ``[{"name", "kind": "numeric" | "categorical", ...}]``: the feature columns, target excluded.
    columns: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    #: Classification: the class labels in order; NULL for regression.
    classes: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Job(Base):
    """A tuning job the server runs itself (``POST /v1/jobs``): its study's trials are trained
    by worker processes of whichever server process holds the job's lease."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("tenant_id", "name", name="uq_jobs_tenant_name"),
        # The runners' scan: jobs not ended, by lease expiry.
        Index("ix_jobs_state_lease", "state", "lease_expires_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    #: The ``JobCreate`` body as JSON, defaults filled in.
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    #: An uploaded dataset's id; NULL for a bundled scikit-learn dataset (named in ``config``).
    dataset_id: Mapped[int | None] = mapped_column(ForeignKey("datasets.id"), nullable=True)
    #: ``queued``, ``running``, ``succeeded``, ``failed`` or ``cancelled``.
    state: Mapped[str] = mapped_column(String(16))
    cancel_requested: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: What the job produced when it ended (best schedule, test score, model artifact key).
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    #: The server process running the job, and until when its lease holds (heartbeats renew it).
    lease_owner: Mapped[str | None] = mapped_column(String(256), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Times the job was taken over after its runner stopped renewing the lease.
    takeovers: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ApiKey(Base):
    """An API key of a tenant (``service.api_keys``): only the sha256 of its secret is kept."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    #: The key's first characters (``at_<prefix>``), shown in lists so a user can tell keys apart.
    prefix: Mapped[str] = mapped_column(String(32))
    #: sha256 (hex) of the whole key, the lookup of a request's key.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    #: ``read``, ``write`` or ``admin``; each includes the ones before it.
    scope: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
