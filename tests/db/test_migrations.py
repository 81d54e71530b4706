"""The Alembic revisions build exactly the schema of service/db/models.py, on both backends."""

from datetime import datetime

import numpy as np
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import MetaData, Table, create_engine, insert, inspect, select, text

from client.models import StudyConfig
from service.db.migrate import (
    SchemaBehind,
    alembic_config,
    check_current,
    head_revision,
    upgrade,
)
from service.db.models import Base
from service.history import full_history
from service.problem import parse_study
from service.settings import Settings
from service.store import trials_t
from tests.conftest import FLOAT_X, scratch_database


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


def _alembic(engine, step, target):
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        step(config, target)


def _trial_columns_and_indexes(engine):
    found = inspect(engine)
    return (
        {c["name"] for c in found.get_columns("trials")},
        {i["name"] for i in found.get_indexes("trials")},
    )


def _insert_old_study(conn, name, config, **columns):
    """A study row of a database below the head revision: the table is read from the
    database, whose columns may not be the models' yet."""
    studies = Table("studies", MetaData(), autoload_with=conn)
    now = datetime(2026, 1, 1)
    row = {"tenant_id": 1, "name": name, "config": config, "state": "active", "metadata": {}}
    # The ask counter's column was renamed by 0006.
    counter = "ask_count" if "ask_count" in studies.c else "engine_state_version"
    row.update(seed=1, engine_state={}, revision=0, next_trial_number=0, **{counter: 0})
    row.update(created_at=now, updated_at=now, **columns)
    return conn.execute(insert(studies).values(**row).returning(studies.c.id)).scalar_one()


def test_0003_adds_completed_seq_and_keeps_older_trials_in_number_order(empty_url):
    engine = create_engine(empty_url)
    _alembic(engine, command.upgrade, "0002")
    config = StudyConfig.model_validate({"parameters": [FLOAT_X]}).model_dump(mode="json")
    now = datetime(2026, 1, 1)
    with engine.begin() as conn:
        sid = _insert_old_study(conn, "old", config, revision=3, next_trial_number=3)
        for number in (2, 0, 1):  # inserted out of order: history follows the numbers
            trial = {"study_id": sid, "number": number, "state": "completed", "params": {}}
            trial.update(x=np.array([number / 4]).tobytes(), values={"value": float(number)})
            trial.update(retries=0, details={}, metadata={}, created_at=now)
            conn.execute(insert(trials_t).values(**trial))
    columns, indexes = _trial_columns_and_indexes(engine)
    assert "completed_seq" not in columns

    _alembic(engine, command.upgrade, "0003")
    columns, indexes = _trial_columns_and_indexes(engine)
    assert "completed_seq" in columns and "ix_trials_study_completed_seq" in indexes
    parsed = parse_study(StudyConfig.model_validate(config))
    with engine.connect() as conn:
        seqs = conn.execute(select(trials_t.c.completed_seq)).scalars().all()
        history = full_history(conn, sid, parsed, np.zeros((0, 1)))
    assert seqs == [None, None, None]
    assert history.Y[:, 0].tolist() == [0.0, 1.0, 2.0]

    _alembic(engine, command.downgrade, "0002")
    columns, indexes = _trial_columns_and_indexes(engine)
    assert "completed_seq" not in columns and "ix_trials_study_completed_seq" not in indexes
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM trials")).scalar() == 3
    _alembic(engine, command.upgrade, "head")
    check_current(engine)
    engine.dispose()


def test_0006_renames_engine_state_version_to_ask_count_keeping_the_counts(empty_url):
    engine = create_engine(empty_url)
    _alembic(engine, command.upgrade, "0005")
    config = StudyConfig.model_validate({"parameters": [FLOAT_X]}).model_dump(mode="json")
    with engine.begin() as conn:
        for name, count in (("a", 0), ("b", 7)):
            _insert_old_study(conn, name, config, engine_state_version=count)
    by_name = "SELECT name, {} FROM studies ORDER BY name"

    _alembic(engine, command.upgrade, "0006")
    assert "engine_state_version" not in {c["name"] for c in inspect(engine).get_columns("studies")}
    with engine.connect() as conn:
        assert conn.execute(text(by_name.format("ask_count"))).all() == [("a", 0), ("b", 7)]

    _alembic(engine, command.downgrade, "0005")
    assert "ask_count" not in {c["name"] for c in inspect(engine).get_columns("studies")}
    with engine.connect() as conn:
        counts = conn.execute(text(by_name.format("engine_state_version"))).all()
    assert counts == [("a", 0), ("b", 7)]
    _alembic(engine, command.upgrade, "head")
    check_current(engine)
    engine.dispose()


def test_0008_adds_notes_and_heartbeat_at_keeping_the_rows(empty_url):
    engine = create_engine(empty_url)
    _alembic(engine, command.upgrade, "0007")
    config = StudyConfig.model_validate({"parameters": [FLOAT_X]}).model_dump(mode="json")
    now = datetime(2026, 1, 1)
    with engine.begin() as conn:
        sid = _insert_old_study(conn, "old", config, next_trial_number=1)
        trials = Table("trials", MetaData(), autoload_with=conn)
        trial = {"study_id": sid, "number": 0, "state": "running", "params": {"x": 0.0}}
        trial.update(x=np.array([0.5]).tobytes(), retries=1, details={}, metadata={})
        conn.execute(insert(trials).values(created_at=now, worker_id="w", **trial))
    assert "heartbeat_at" not in _trial_columns_and_indexes(engine)[0]

    _alembic(engine, command.upgrade, "0008")
    assert {"note", "heartbeat_at"} <= _trial_columns_and_indexes(engine)[0]
    assert "notes" in {c["name"] for c in inspect(engine).get_columns("studies")}
    with engine.connect() as conn:
        row = conn.execute(text("SELECT worker_id, retries, note, heartbeat_at FROM trials")).one()
        notes = conn.execute(text("SELECT notes FROM studies")).scalar_one()
    assert tuple(row) == ("w", 1, None, None) and notes is None

    _alembic(engine, command.downgrade, "0007")
    assert not {"note", "heartbeat_at"} & _trial_columns_and_indexes(engine)[0]
    assert "notes" not in {c["name"] for c in inspect(engine).get_columns("studies")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM trials")).scalar() == 1
    _alembic(engine, command.upgrade, "head")
    check_current(engine)
    engine.dispose()
