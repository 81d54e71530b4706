"""``asktell jobs``, in process against a real uvicorn in a thread that runs its jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service import cli
from tests.jobs.conftest import job_body

# Tests that start job workers or Ray tasks, or find them in /proc: `make test` runs them one
# after another (one xdist group), so that no test counts or kills another test's workers.
pytestmark = pytest.mark.job_processes


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_list_show_cancel(idle_url, capsys, tmp_path: Path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job_body("cli-job")))
    code, out, _ = run(capsys, "--url", idle_url, "jobs", "submit", str(path))
    assert code == 0 and json.loads(out)["state"] == "queued"
    code, out, _ = run(capsys, "jobs", "list", "--url", idle_url)
    header, row = out.splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "STEPS", "BEST", "STUDY"]
    assert row.split() == ["1", "cli-job", "queued", "0/400", "-", "1"]
    code, out, _ = run(capsys, "--url", idle_url, "jobs", "show", "1")
    assert code == 0 and json.loads(out)["name"] == "cli-job"
    code, out, _ = run(capsys, "--url", idle_url, "jobs", "cancel", "1")
    assert code == 0 and json.loads(out)["state"] == "cancelled"
    code, _, err = run(capsys, "--url", idle_url, "jobs", "cancel", "1")
    assert code == 1 and err.startswith("error 409 job_finished:")
    code, _, err = run(capsys, "--url", idle_url, "jobs", "show", "7")
    assert code == 1 and err.startswith("error 404 job_not_found:")


def test_submit_refuses_a_bad_file(idle_url, capsys, tmp_path: Path):
    path = tmp_path / "job.json"
    path.write_text("{nope")
    code, _, err = run(capsys, "--url", idle_url, "jobs", "submit", str(path))
    assert code == 1 and "cannot read" in err
    path.write_text(json.dumps({**job_body(), "budget": {"steps": "x"}}))
    code, _, err = run(capsys, "--url", idle_url, "jobs", "submit", str(path))
    assert code == 1 and "budget.steps" in err
    path.write_text(json.dumps(job_body(optimizer="nope")))
    code, _, err = run(capsys, "--url", idle_url, "jobs", "submit", str(path))
    assert code == 1 and err.startswith("error 422 unknown_optimizer:")


def test_submit_watch_follows_the_job_to_its_end(url, capsys, tmp_path: Path):
    path = tmp_path / "job.json"
    body = job_body(
        "watched",
        engine="random",
        budget={"steps": 20, "trials": 2},
        parallelism=1,
        workload={"name": "mlp", "options": {"hidden": [8]}},
    )
    path.write_text(json.dumps(body))
    code, out, err = run(capsys, "--url", url, "jobs", "submit", str(path), "--watch")
    job = json.loads(out)
    assert code == 0, (job, err)
    assert job["state"] == "succeeded" and job["units_done"] == 2
    assert job["result"]["model_artifact"] == "jobs/1/model.pt"
    # Not a terminal: one progress line per poll, the last one complete.
    last = err.strip().splitlines()[-1]
    assert last.startswith("job watched [" + "#" * 30 + "]") and "succeeded" in last
