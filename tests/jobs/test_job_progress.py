"""A job's progress (``GET /v1/jobs/{id}``) as the database sums it, on SQLite and PostgreSQL:
units and steps done, the best score and the training time, counted from the completed units
of its study only."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.jobs.conftest import job_body


@pytest.fixture(params=["sqlite", "postgresql"])
def http(request, tmp_path):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    settings = Settings(database_url=url, run_jobs=False, artifacts_dir=str(tmp_path / "a"))
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_progress_counts_the_completed_units_of_the_job(http):
    job = http.post("/v1/jobs", json=job_body("progress")).json()
    sid = job["study_id"]
    units = http.post(f"/v1/studies/{sid}/ask", json={"count": 6, "worker_id": "w"}).json()
    numbers = [t["number"] for t in units["trials"]]
    assert len(numbers) == 6
    told = {}
    for i, number in enumerate(numbers[:4]):
        score = 0.25 + 0.1 * i
        metadata = {"train_seconds": 1.5 * i} if i != 2 else {"note": "no timing"}
        body = {"values": {"score": score}, "checkpoint": f"c{number}", "metadata": metadata}
        r = http.post(f"/v1/studies/{sid}/trials/{number}/tell", json=body)
        assert r.status_code == 200, r.text
        told[number] = score
    r = http.post(f"/v1/studies/{sid}/trials/{numbers[4]}/tell", json={"state": "failed"})
    assert r.status_code == 200, r.text

    info = http.get(f"/v1/jobs/{job['id']}").json()
    trials = {t["number"]: t for t in http.get(f"/v1/studies/{sid}/trials").json()["data"]}
    steps = sum(trials[n]["unit"]["to_step"] - trials[n]["unit"]["from_step"] for n in told)
    assert info["units_done"] == 4
    assert info["steps_done"] == steps > 0
    assert math.isclose(info["best_score"], max(told.values()))
    assert math.isclose(info["train_seconds"], 1.5 * (0 + 1 + 3))
