"""datasets (uploaded CSVs) and jobs (tuning jobs the server runs, leased to one process)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 15:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations.tables import create_table, foreign_key

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    create_table(
        "datasets",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("task", sa.String(16), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("columns", sa.JSON(), nullable=False),
        sa.Column("classes", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        foreign_key("datasets", "tenant_id", "tenants"),
        sa.UniqueConstraint("tenant_id", "name", name="uq_datasets_tenant_name"),
    )
    op.create_index(op.f("ix_datasets_tenant_id"), "datasets", ["tenant_id"], unique=False)
    create_table(
        "jobs",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("lease_owner", sa.String(256), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        sa.Column("takeovers", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        foreign_key("jobs", "tenant_id", "tenants"),
        foreign_key("jobs", "study_id", "studies"),
        foreign_key("jobs", "dataset_id", "datasets"),
        sa.UniqueConstraint("tenant_id", "name", name="uq_jobs_tenant_name"),
    )
    op.create_index(op.f("ix_jobs_tenant_id"), "jobs", ["tenant_id"], unique=False)
    op.create_index(op.f("ix_jobs_study_id"), "jobs", ["study_id"], unique=False)
    op.create_index("ix_jobs_state_lease", "jobs", ["state", "lease_expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_jobs_state_lease", table_name="jobs")
    op.drop_index(op.f("ix_jobs_study_id"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_tenant_id"), table_name="jobs")
    op.drop_table("jobs")
    op.drop_index(op.f("ix_datasets_tenant_id"), table_name="datasets")
    op.drop_table("datasets")
