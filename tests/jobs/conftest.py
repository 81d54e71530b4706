"""Fixtures of the job tests: the app in process with no job runner (the API alone), and
real uvicorn servers in a thread, one that runs jobs and one that does not."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.integration.conftest import free_port


@pytest.fixture
def jobs_http(sqlite_url: str, tmp_path) -> Iterator[TestClient]:
    """The app on a fresh SQLite file; jobs stay queued (``run_jobs`` off)."""
    settings = Settings(
        database_url=sqlite_url, run_jobs=False, artifacts_dir=str(tmp_path / "artifacts")
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def job_body(name: str = "j", **fields: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": name,
        "dataset": "digits",
        "optimizer": "olion",
        "budget": {"steps": 100, "population": 4},
        "seed": 0,
    }
    body.update(fields)
    return body


def serve(settings_fields: dict[str, object], apps: list[FastAPI] | None = None) -> Iterator[str]:
    """A real uvicorn server of these settings in a thread: its URL, while it runs; its app is
    appended to ``apps`` when given (a test that reads the server's state)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings = Settings(self_url=url, **settings_fields)  # type: ignore[arg-type]
    app = create_app(settings)
    if apps is not None:
        apps.append(app)
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    yield url
    server.should_exit = True
    thread.join(30)


@pytest.fixture
def url(sqlite_url: str, tmp_path: Path) -> Iterator[str]:
    """A server that runs jobs (workers are processes that reach it over HTTP)."""
    yield from serve(
        {
            "database_url": sqlite_url,
            "artifacts_dir": str(tmp_path / "artifacts"),
            "job_lease_seconds": 5.0,
        }
    )


@pytest.fixture
def idle_url(sqlite_url: str, tmp_path: Path) -> Iterator[str]:
    """A server that runs no jobs: they stay queued."""
    yield from serve({"database_url": sqlite_url, "run_jobs": False})
