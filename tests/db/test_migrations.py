"""The Alembic revisions build exactly the schema of service/db/models.py, on both backends."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from service.db.migrate import SchemaBehind, check_current, head_revision, upgrade
from service.db.models import Base
from service.settings import Settings
from tests.conftest import scratch_database


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    with scratch_database("asktell_mig") as url:
        yield Settings(database_url=url).database_url


def test_upgrade_builds_the_models_schema(empty_url):
    engine = create_engine(empty_url)
    with pytest.raises(SchemaBehind, match="asktell db upgrade"):
        check_current(engine)
    upgrade(engine)
    check_current(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    assert head_revision(empty_url) is not None
    engine.dispose()
