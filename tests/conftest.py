"""Shared fixtures: a fresh SQLite file per test, a fresh PostgreSQL database per session, the
app in process, and the real client on top of it.

PostgreSQL is required: when it is down, the tests that need it fail with the reason, never skip.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from client import Client
from service.app import create_app
from service.settings import Settings

PG_ADMIN_URL = os.environ.get("ASKTELL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

# The in-process apps of the tests need no API key (their Settings read this); a test of auth
# turns it on in its own Settings. Servers started in a subprocess get ``server_env``.
os.environ["ASKTELL_AUTH"] = "off"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'asktell.db'}"


@contextlib.contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A new, empty PostgreSQL database for the block, dropped afterwards; fails the test
    (never skips) when PostgreSQL is down."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is required at {PG_ADMIN_URL} (set ASKTELL_TEST_PG) and is down: {exc}",
            pytrace=False,
        )
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A URL for a new, empty PostgreSQL database, dropped at the end of the session."""
    with scratch_database("asktell_test") as url:
        yield url


@pytest.fixture
def pg_url(pg_server_url: str) -> str:
    """A migrated PostgreSQL database with no studies (tables emptied before each test)."""
    from sqlalchemy import create_engine, text

    from service.db.migrate import upgrade

    engine = create_engine(Settings(database_url=pg_server_url).database_url)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(
            text(
                "TRUNCATE measurements, trials, jobs, datasets, studies, samplers,"
                " idempotency_keys CASCADE"
            )
        )
    engine.dispose()
    return pg_server_url


def make_test_client(url: str) -> TestClient:
    return TestClient(create_app(Settings(database_url=url, reaper_interval=0.2)))


@pytest.fixture
def http(sqlite_url: str) -> Iterator[TestClient]:
    """The app in process on a fresh SQLite file, driven with raw HTTP."""
    with make_test_client(sqlite_url) as test_client:
        yield test_client


@pytest.fixture
def client(http: TestClient) -> Iterator[Client]:
    """The real sync client, talking to the in-process app."""
    with Client("http://testserver", transport=http._transport, retries=0) as c:
        yield c


FLOAT_X = {"type": "float", "name": "x", "low": -5.0, "high": 5.0}
FLOAT_Y = {"type": "float", "name": "y", "low": -5.0, "high": 5.0}


#: Two objectives on (x, y) in FLOAT_X x FLOAT_Y (``segment_values``) whose Pareto set is the
#: segment y = 0, 0 <= x <= 2; with references, so a study reports its hypervolume.
SEGMENT_OBJECTIVES = [
    {"name": "f1", "goal": "minimize", "reference": 60.0},
    {"name": "f2", "goal": "minimize", "reference": 60.0},
]


def segment_values(params: dict[str, float]) -> dict[str, float]:
    x, y = params["x"], params["y"]
    return {"f1": x**2 + y**2, "f2": (x - 2) ** 2 + y**2}


def study_body(name: str = "demo", **fields: object) -> dict[str, object]:
    body: dict[str, object] = {"name": name, "parameters": [FLOAT_X, FLOAT_Y]}
    body.update(fields)
    return body


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start job workers or Ray tasks, or find them in /proc (marker
    ``job_processes``), share one xdist group: under ``--dist loadgroup`` they run one after
    another in one test process while the other process runs the rest, so that no test counts
    or kills another test's workers."""
    for item in items:
        if item.get_closest_marker("job_processes") is not None:
            item.add_marker(pytest.mark.xdist_group("job_processes"))
