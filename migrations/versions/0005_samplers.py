"""samplers: multi-target particle samplers (A-MWGraD) driven by ask/tell

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 17:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations.tables import create_table, foreign_key

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    create_table(
        "samplers",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("particles", sa.JSON(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        foreign_key("samplers", "tenant_id", "tenants"),
    )
    op.create_index(op.f("ix_samplers_tenant_id"), "samplers", ["tenant_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_samplers_tenant_id"), table_name="samplers")
    op.drop_table("samplers")
