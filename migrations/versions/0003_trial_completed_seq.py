"""trials.completed_seq: the order trials finished in, per study, for incremental history loads

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-09 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Trials finished before this revision keep NULL: history orders them first, by number.
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.add_column(sa.Column("completed_seq", sa.BigInteger(), nullable=True))
        batch_op.create_index("ix_trials_study_completed_seq", ["study_id", "completed_seq"])


def downgrade() -> None:
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_index("ix_trials_study_completed_seq")
        batch_op.drop_column("completed_seq")
