"""API keys on a real server (``asktell serve``, two uvicorn processes): on loopback it needs no
key and says so; with ``ASKTELL_AUTH=required`` keys made by ``asktell keys create`` are needed,
tenants see only their own studies and jobs, and a job's workers reach the API with a key the
server makes for them (revoked when the job ends)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from client import Client, NotFound
from tests.conftest import study_body
from tests.integration.browser import WatchedPage
from tests.integration.conftest import Server, run_cli

pytestmark = pytest.mark.integration


def make_key(database_url: str, tenant: str, scope: str) -> str:
    argv = ("keys", "create", "--tenant", tenant, "--scope", scope)
    done = run_cli(*argv, database_url=database_url)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_serve_on_loopback_needs_no_key_and_says_so(
    start_server: Callable[..., Server], tmp_path: Path
) -> None:
    server = start_server(f"sqlite:///{tmp_path / 'a.db'}", cli=True)
    assert "auth off: listening on loopback only (127.0.0.1)" in server.log()
    assert httpx.get(f"{server.url}/v1/studies").status_code == 200


# It starts job workers: `make test` runs it with the other tests that do, one after another
# (one xdist group), so that no test counts or kills another test's workers.
@pytest.mark.job_processes
def test_a_server_that_needs_keys(start_server: Callable[..., Server], tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'auth.db'}"
    key_a, key_b = make_key(database_url, "a", "write"), make_key(database_url, "b", "admin")
    server = start_server(
        database_url, cli=True, ASKTELL_AUTH="required", ASKTELL_ARTIFACTS_DIR=str(tmp_path)
    )
    assert "auth required" in server.log()
    r = httpx.get(f"{server.url}/v1/studies")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{server.url}/readyz").status_code == 200
    with Client(server.url, api_key=key_a) as a, Client(server.url, api_key=key_b) as b:
        study = a.create_study("mine", study_body()["parameters"])
        job = a.submit_job(
            name="runs",
            dataset="digits",
            workload={"name": "mlp", "options": {"hidden": [8]}},
            optimizer="olion",
            engine="random",
            budget={"steps": 20, "trials": 2},
            parallelism=1,
            seed=1,
        )
        info = job.wait(progress=False, timeout=120)
        assert info.state == "succeeded", (info.error, server.log_tail())
        for read in (lambda: b.get_study(study.id), lambda: b.job(job.id).refresh()):
            with pytest.raises(NotFound):
                read()
        assert list(b.list_studies()) == []
    listed = run_cli("keys", "list", "--tenant", "a", database_url=database_url).stdout
    (worker_key,) = [line for line in listed.splitlines() if f"job {job.id} workers" in line]
    assert worker_key.endswith("revoked"), listed


def test_the_dashboard_asks_for_a_key_once(
    start_server: Callable[..., Server], tmp_path: Path, watched: WatchedPage
) -> None:
    """On a server that needs keys the study page asks for one at its first 401, then draws the
    study and follows it on the event stream (the key as ``?access_token=``)."""
    database_url = f"sqlite:///{tmp_path / 'dash.db'}"
    key = make_key(database_url, "a", "write")
    server = start_server(database_url, ASKTELL_AUTH="required")
    with Client(server.url, api_key=key) as client:
        study = client.create_study("dash", study_body()["parameters"])
        study.enqueue({"x": 1.0, "y": 2.0}, values={"value": 5.0})
    page = watched.page
    prompts: list[str] = []

    def answer(dialog: Any) -> None:
        prompts.append(dialog.message)
        dialog.accept(key)

    page.on("dialog", answer)  # type: ignore[attr-defined]
    page.goto(f"{server.url}/dashboard/studies/{study.id}")  # type: ignore[attr-defined]
    page.wait_for_selector("body[data-revision]")  # type: ignore[attr-defined]
    page.wait_for_selector("#history .main-svg")  # type: ignore[attr-defined]
    assert len(prompts) == 1 and "API key" in prompts[0]
    deadline = time.monotonic() + 20
    events = f"/v1/studies/{study.id}/events?access_token="
    while not any(
        path.startswith(events) and status == 200 for *_, path, status in server.access()
    ):
        assert time.monotonic() < deadline, "no event stream with the key\n" + server.log_tail()
        time.sleep(0.2)
    # The only problems the page saw are the first answers without a key.
    assert all("401" in problem for problem in watched.problems), watched.problems
