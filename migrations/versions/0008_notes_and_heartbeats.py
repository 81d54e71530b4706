"""studies.notes and trials.note (free text the dashboard edits), trials.heartbeat_at (the last
sign of life of a running trial's worker: its ask, heartbeat or report)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 09:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Every new column is nullable: existing studies and trials have no notes, and trials asked
    # before this revision have no heartbeat time until their next heartbeat.
    with op.batch_alter_table("studies", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notes", sa.Text(), nullable=True))
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.add_column(sa.Column("note", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
        batch_op.drop_column("note")
    with op.batch_alter_table("studies", schema=None) as batch_op:
        batch_op.drop_column("notes")
