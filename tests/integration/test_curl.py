"""A whole study driven with the ``curl`` binary alone: JSON bodies in, parsed JSON out.

This is what a user without the Python client does; no Python HTTP client is used here.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Server

pytestmark = pytest.mark.integration

CURL = shutil.which("curl")

STUDY = {
    "name": "curl-demo",
    "parameters": [
        {"type": "float", "name": "x", "low": -5.0, "high": 5.0},
        {"type": "int", "name": "n", "low": 0, "high": 10},
        {"type": "categorical", "name": "kind", "choices": ["a", "b", "c"]},
    ],
    "objectives": [{"name": "loss", "goal": "minimize"}],
    "engine": {"name": "random"},
    "seed": 11,
}


def loss(params: dict[str, Any]) -> float:
    """Zero at x=1, n=3, kind="b" and positive everywhere else."""
    return (params["x"] - 1.0) ** 2 + (params["n"] - 3) ** 2 + (params["kind"] != "b") * 0.5


@dataclass
class Answer:
    status: int
    content_type: str
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


class Curl:
    def __init__(self, server: Server, tmp_path: Path) -> None:
        assert CURL is not None, "the curl binary is required for these tests"
        self.server, self.out = server, tmp_path / "curl-body"

    def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        argv = [CURL, "-sS", "-X", method, "-o", str(self.out), "-w", "%{json}"]
        for name, value in (headers or {}).items():
            argv += ["-H", f"{name}: {value}"]
        data = raw if raw is not None else None if body is None else json.dumps(body)
        if data is not None:
            argv += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
        argv.append(self.server.url + path)
        done = subprocess.run(argv, input=data, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, (
            f"curl {method} {path} failed ({done.returncode}): {done.stderr}\n"
            + self.server.log_tail()
        )
        meta = json.loads(done.stdout)
        return Answer(meta["response_code"], meta["content_type"] or "", self.out.read_text())

    def ok(self, method: str, path: str, body: Any = None, status: int = 200, **kw: Any) -> Any:
        answer = self(method, path, body, **kw)
        assert answer.status == status, (
            f"{method} {path}: {answer.status} {answer.text}\n" + self.server.log_tail()
        )
        assert answer.content_type.startswith("application/json"), answer.content_type
        return answer.json()

    def problem(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, dict]:
        answer = self(method, path, body, **kw)
        assert answer.status >= 400, f"{method} {path} succeeded: {answer.text}"
        assert answer.content_type.startswith("application/problem+json"), (
            f"{method} {path}: {answer.status} with Content-Type {answer.content_type!r}"
        )
        problem = answer.json()
        assert problem["status"] == answer.status
        assert isinstance(problem["code"], str) and problem["code"]
        assert isinstance(problem["detail"], str) and problem["detail"]
        assert problem["title"]
        return answer.status, problem


def test_a_whole_study_with_curl(server: Server, tmp_path: Path) -> None:
    curl = Curl(server, tmp_path)
    assert curl.ok("GET", "/healthz") == {"status": "ok"}
    ready = curl.ok("GET", "/readyz")
    assert ready["status"] == "ready" and ready["revision"]

    study = curl.ok("POST", "/v1/studies", STUDY, status=201)
    sid = study["id"]
    assert study["name"] == "curl-demo" and study["trial_counts"] == {}
    # Creating it again with the same config returns the same study (200, not 201).
    assert curl.ok("POST", "/v1/studies", STUDY)["id"] == sid

    asked = curl.ok("POST", f"/v1/studies/{sid}/ask", {"count": 3})
    asked = asked["trials"]
    asked += curl.ok("POST", f"/v1/studies/{sid}/ask", {"lease_seconds": 120})["trials"]
    assert [t["number"] for t in asked] == [0, 1, 2, 3]
    for t in asked:
        assert t["state"] == "running" and t["study_id"] == sid
        assert -5 <= t["params"]["x"] <= 5
        assert isinstance(t["params"]["n"], int) and 0 <= t["params"]["n"] <= 10
        assert t["params"]["kind"] in ("a", "b", "c")

    told = {}
    for t in asked:
        value = loss(t["params"])
        trial = curl.ok(
            "POST", f"/v1/studies/{sid}/trials/{t['number']}/tell", {"values": {"loss": value}}
        )
        assert trial["state"] == "completed" and trial["values"] == {"loss": value}
        assert trial["params"] == t["params"]
        told[t["number"]] = value

    # A point of our own: enqueued, then served by the next ask before any engine point.
    best_point = {"x": 1.0, "n": 3, "kind": "b"}
    queued = curl.ok("POST", f"/v1/studies/{sid}/trials", {"params": best_point}, status=201)
    assert (queued["number"], queued["state"], queued["params"]) == (4, "waiting", best_point)
    (served,) = curl.ok("POST", f"/v1/studies/{sid}/ask", {})["trials"]
    assert (served["number"], served["params"]) == (4, best_point)
    curl.ok("POST", f"/v1/studies/{sid}/trials/4/tell", {"values": {"loss": loss(best_point)}})
    told[4] = loss(best_point)
    # And a finished one (a warm start) with its value.
    warm = {"x": -4.0, "n": 0, "kind": "a"}
    done = curl.ok(
        "POST",
        f"/v1/studies/{sid}/trials",
        {"params": warm, "values": {"loss": loss(warm)}},
        status=201,
    )
    assert (done["number"], done["state"]) == (5, "completed")
    told[5] = loss(warm)

    best = curl.ok("GET", f"/v1/studies/{sid}/best")
    assert [(t["number"], t["params"], t["values"]) for t in best["trials"]] == [
        (4, best_point, {"loss": 0.0})
    ]
    info = curl.ok("GET", f"/v1/studies/{sid}")
    assert info["trial_counts"] == {"completed": 6}
    assert info["best_values"] == {"loss": 0.0}
    page = curl.ok("GET", f"/v1/studies/{sid}/trials?state=completed&limit=4")
    assert [t["number"] for t in page["data"]] == [0, 1, 2, 3] and page["next_cursor"] == "3"
    rest = curl.ok("GET", f"/v1/studies/{sid}/trials?state=completed&cursor=3")
    assert [t["number"] for t in rest["data"]] == [4, 5] and rest["next_cursor"] is None

    export = curl("GET", f"/v1/studies/{sid}/export?format=csv")
    assert export.status == 200 and export.content_type.startswith("text/csv"), export
    rows = list(csv.reader(io.StringIO(export.text)))
    assert rows[0] == [
        "number",
        "state",
        "params.x",
        "params.n",
        "params.kind",
        "values.loss",
        "reason",
        "note",
    ]
    assert [int(r[0]) for r in rows[1:]] == [0, 1, 2, 3, 4, 5]
    assert {int(r[0]): float(r[5]) for r in rows[1:]} == told
    assert all(r[1] == "completed" for r in rows[1:])
    by_number = {t["number"]: t["params"] for t in asked}
    for r in rows[1:4]:
        p = by_number[int(r[0])]
        assert (float(r[2]), int(r[3]), r[4]) == (p["x"], p["n"], p["kind"])
    exported = curl.ok("GET", f"/v1/studies/{sid}/export")
    assert exported["format"] == "asktell.study/v1" and len(exported["trials"]) == 6

    # The same POST with the same Idempotency-Key is answered once.
    key = {"Idempotency-Key": uuid.uuid4().hex}
    once = curl("POST", f"/v1/studies/{sid}/ask", {"count": 2}, headers=key)
    twice = curl("POST", f"/v1/studies/{sid}/ask", {"count": 2}, headers=key)
    assert once.status == twice.status == 200 and once.text == twice.text
    assert [t["number"] for t in once.json()["trials"]] == [6, 7]

    # Mistakes come back as problem+json with a stable code.
    def mistake(status: int, code: str, method: str, path: str, body: Any = None, **kw: Any):
        got, problem = curl.problem(method, f"/v1/studies{path}", body, **kw)
        assert (got, problem["code"]) == (status, code), (method, path, problem)

    mistake(400, "malformed_json", "POST", f"/{sid}/ask", raw="{not json")
    mistake(422, "validation_error", "POST", f"/{sid}/ask", {"count": 0})
    mistake(422, "validation_error", "POST", f"/{sid}/ask", {"colour": "red"})
    mistake(409, "trial_finished", "POST", f"/{sid}/trials/0/tell", {"values": {"loss": 1.0}})
    mistake(422, "unknown_objective", "POST", f"/{sid}/trials/6/tell", {"values": {"acc": 1}})
    mistake(422, "missing_objective", "POST", f"/{sid}/trials/6/tell", {"values": {}})
    mistake(404, "trial_not_found", "POST", f"/{sid}/trials/99/tell", {"values": {"loss": 1}})
    off_grid = {"params": {"x": 9.0, "n": 3, "kind": "b"}}
    mistake(422, "invalid_params", "POST", f"/{sid}/trials", off_grid)
    mistake(404, "not_found", "GET", "/999999")
    mistake(404, "not_found", "GET", f"/{sid}/nowhere")
    mistake(409, "study_exists", "POST", "", {**STUDY, "seed": 12})
    mistake(409, "idempotency_key_reused", "POST", f"/{sid}/ask", {"count": 3}, headers=key)
    # None of them changed the study.
    assert curl.ok("GET", f"/v1/studies/{sid}")["trial_counts"] == {"completed": 6, "running": 2}
