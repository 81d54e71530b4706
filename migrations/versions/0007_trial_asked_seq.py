"""trials.asked_seq: when a trial was last handed to a worker, per study, for the event stream

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 07:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Trials asked before this revision keep NULL: the event stream has no asked event for them.
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.add_column(sa.Column("asked_seq", sa.BigInteger(), nullable=True))
        batch_op.create_index("ix_trials_study_asked_seq", ["study_id", "asked_seq"])


def downgrade() -> None:
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_index("ix_trials_study_asked_seq")
        batch_op.drop_column("asked_seq")
