"""initial schema: tenants, studies, trials, measurements, idempotency keys

Revision ID: 0001
Revises:
Create Date: 2026-12-02 11:22:18.189499
"""

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

from migrations.tables import create_table, foreign_key

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    _create_tenants()
    _create_idempotency_keys()
    _create_studies()
    _create_trials()
    _create_measurements()


def _create_tenants() -> None:
    create_table(
        "tenants",
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("name", name=op.f("uq_tenants_name")),
    )
    tenants = sa.table("tenants", sa.column("id"), sa.column("name"), sa.column("created_at"))
    op.bulk_insert(tenants, [{"id": 1, "name": "default", "created_at": datetime(2026, 1, 1)}])
    if op.get_bind().dialect.name == "postgresql":
        # An explicit id does not advance the serial sequence; the next tenant must get id 2.
        op.execute("SELECT setval(pg_get_serial_sequence('tenants', 'id'), 1)")


def _create_idempotency_keys() -> None:
    create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        foreign_key("idempotency_keys", "tenant_id", "tenants"),
        sa.UniqueConstraint("tenant_id", "key", name="uq_idempotency_keys_tenant_key"),
    )
    op.create_index(
        op.f("ix_idempotency_keys_created_at"), "idempotency_keys", ["created_at"], unique=False
    )


def _create_studies() -> None:
    create_table(
        "studies",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("engine_state", sa.JSON(), nullable=False),
        sa.Column("engine_state_version", sa.Integer(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("next_trial_number", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        foreign_key("studies", "tenant_id", "tenants"),
    )
    op.create_index(op.f("ix_studies_tenant_id"), "studies", ["tenant_id"], unique=False)
    op.create_index(
        "uq_studies_tenant_name_live",
        "studies",
        ["tenant_id", "name"],
        unique=True,
        sqlite_where=sa.text("deleted_at IS NULL"),
        postgresql_where=sa.text("deleted_at IS NULL"),
    )


def _create_trials() -> None:
    create_table(
        "trials",
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("x", sa.LargeBinary(), nullable=False),
        sa.Column("values", sa.JSON(), nullable=True),
        sa.Column("constraints", sa.JSON(), nullable=True),
        sa.Column("feasible", sa.Boolean(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("worker_id", sa.String(length=256), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        foreign_key("trials", "study_id", "studies"),
        sa.UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
    )
    op.create_index("ix_trials_study_state", "trials", ["study_id", "state"], unique=False)


def _create_measurements() -> None:
    create_table(
        "measurements",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        foreign_key("measurements", "trial_id", "trials"),
        sa.UniqueConstraint("trial_id", "step", name="uq_measurements_trial_step"),
    )


def downgrade() -> None:
    # Children first; a table's indexes go with it.
    for table in ("measurements", "trials", "studies", "idempotency_keys", "tenants"):
        op.drop_table(table)
