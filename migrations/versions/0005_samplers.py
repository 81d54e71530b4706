"""samplers: multi-target particle samplers (A-MWGraD) driven by ask/tell

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 17:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "samplers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("particles", sa.JSON(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_samplers_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_samplers")),
    )
    op.create_index(op.f("ix_samplers_tenant_id"), "samplers", ["tenant_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_samplers_tenant_id"), table_name="samplers")
    op.drop_table("samplers")
