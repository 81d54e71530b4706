"""What the revisions' ``create_table`` calls spell alike: the integer primary key ``id`` and
foreign keys to a parent's ``id``, named as ``service.db.models.NAMING`` names them.

Released revisions build their tables with these, so editing one would change what those
revisions build: a new need gets a new helper.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def create_table(name: str, *items: sa.schema.SchemaItem) -> None:
    """``op.create_table`` with the integer primary key ``id`` as its first column."""
    op.create_table(
        name,
        sa.Column("id", sa.Integer(), nullable=False),
        *items,
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{name}")),
    )


def foreign_key(table: str, column: str, parent: str) -> sa.ForeignKeyConstraint:
    """``table.column`` refers to ``parent.id``."""
    return sa.ForeignKeyConstraint(
        [column], [f"{parent}.id"], name=op.f(f"fk_{table}_{column}_{parent}")
    )
