"""Schema migrations: apply Alembic revisions and check that a database is current.

The revisions ship inside the ``migrations`` package and are found relative to it, not to the
working directory, so an installed server can upgrade its database.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

import migrations

UPGRADE_COMMAND = "asktell db upgrade"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(engine: Engine) -> None:
    """Apply every revision up to head."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


def head_revision(url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(url)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


class SchemaBehind(RuntimeError):
    """The database is not at the head revision; the message names the command to run."""


def check_current(engine: Engine) -> None:
    """Raise ``SchemaBehind`` unless the database is at the head revision."""
    url = engine.url.render_as_string(hide_password=False)
    current, head = current_revision(engine), head_revision(url)
    if current != head:
        raise SchemaBehind(
            f"the database {engine.url.render_as_string(hide_password=True)} is at revision "
            f"{current or 'none (empty)'} but this server needs {head}; "
            f"run `{UPGRADE_COMMAND}` with the same ASKTELL_DATABASE_URL first"
        )
