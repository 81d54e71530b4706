"""suggestions: the suggestion pool, points of model-based studies computed ahead of the asks

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 22:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations.tables import create_table, foreign_key

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    create_table(
        "suggestions",
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("x", sa.LargeBinary(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("history_size", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        foreign_key("suggestions", "study_id", "studies"),
    )
    op.create_index(op.f("ix_suggestions_study_id"), "suggestions", ["study_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_suggestions_study_id"), table_name="suggestions")
    op.drop_table("suggestions")
