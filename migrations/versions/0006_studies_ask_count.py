"""studies.ask_count: engine_state_version renamed for what it is, the count of asks that ran
the engine (it guards concurrent asks and seeds their rng); the API keeps the old name

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 06:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # recreate="never": SQLite renames in place (RENAME COLUMN) instead of copying the table.
    with op.batch_alter_table("studies", recreate="never") as batch_op:
        batch_op.alter_column("engine_state_version", new_column_name="ask_count")


def downgrade() -> None:
    with op.batch_alter_table("studies", recreate="never") as batch_op:
        batch_op.alter_column("ask_count", new_column_name="engine_state_version")
