"""Operations endpoints and the ask admission: request ids, /readyz, /metrics, JSON logs, the
per-study ask queue (503 ``study_busy``) and the dropping of a disconnected client's ask."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from service.admission import AskAdmission, ClientGone
from service.app import create_app
from service.errors import ApiError
from service.observability import JsonFormatter, request_id
from service.settings import Settings
from tests.api.test_auth import make_key
from tests.conftest import study_body


def test_a_request_id_is_made_or_kept_on_every_response(http):
    made = http.get("/healthz").headers["X-Request-ID"]
    assert len(made) == 32
    kept = http.get("/healthz", headers={"X-Request-ID": "abc-123.x:y_z"})
    assert kept.headers["X-Request-ID"] == "abc-123.x:y_z"
    unsafe = http.get("/healthz", headers={"X-Request-ID": "a b<script>"})
    assert unsafe.headers["X-Request-ID"] not in ("a b<script>", made)
    missing = http.get("/v1/studies/999", headers={"X-Request-ID": "r1"})
    assert missing.status_code == 404 and missing.headers["X-Request-ID"] == "r1"
    assert missing.headers["content-type"] == "application/problem+json"


def test_readyz_checks_the_database_revision(http):
    ready = http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    head = ready.json()["revision"]
    db = http.app.state.store.db
    db.write(lambda c: c.execute(text("UPDATE alembic_version SET version_num = 'old'")))
    behind = http.get("/readyz")
    assert behind.status_code == 503 and behind.json()["code"] == "unavailable"
    assert "old" in behind.json()["detail"] and "Retry-After" in behind.headers
    db.write(lambda c: c.execute(text("UPDATE alembic_version SET version_num = :h"), {"h": head}))
    assert http.get("/readyz").status_code == 200


def test_metrics_count_requests_asks_and_trials(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    assert http.post(f"/v1/studies/{sid}/ask", json={"count": 2}).status_code == 200
    answer = http.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    body = answer.text
    assert (
        'asktell_requests_total{method="POST",route="/v1/studies/{study_id}/ask",status="200"}'
        in body
    )
    assert 'asktell_ask_seconds_count{engine="random"}' in body
    assert 'asktell_trials{state="running"} 2.0' in body
    assert "asktell_ask_queue_depth 0.0" in body
    assert "asktell_engine_seconds" in body and "asktell_asks_dropped_total" in body


def test_json_log_lines_carry_the_request_id():
    token = request_id.set("rid-7")
    try:
        record = logging.getLogRecordFactory()(
            "asktell", logging.INFO, "f", 1, "hi %s", ("x",), None
        )
    finally:
        request_id.reset(token)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "hi x" and line["request_id"] == "rid-7"


class _Client:
    """A request whose client is connected until ``gone`` is set."""

    def __init__(self) -> None:
        self.gone = False

    async def is_disconnected(self) -> bool:
        return self.gone


def test_a_full_study_queue_answers_study_busy_and_a_gone_client_is_dropped():
    async def scenario() -> None:
        admission = AskAdmission(queue_per_study=2, engine_threads=2)
        release = asyncio.Event()
        loop = asyncio.get_running_loop()

        def slow() -> str:
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
            return "ran"

        running = asyncio.create_task(admission.run(1, _Client(), slow))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        leaving, staying = _Client(), _Client()
        waiters = [
            asyncio.create_task(admission.run(1, c, lambda: "ran"))  # type: ignore[arg-type]
            for c in (leaving, staying)
        ]
        await asyncio.sleep(0.05)
        assert admission.waiting(1) == 2
        with pytest.raises(ApiError) as busy:
            await admission.run(1, _Client(), lambda: "ran")  # type: ignore[arg-type]
        assert busy.value.code == "study_busy" and busy.value.headers["Retry-After"] == "1"
        # Another study is not held up by the busy one.
        assert await admission.run(2, _Client(), lambda: "other") == "other"  # type: ignore[arg-type]
        leaving.gone = True
        with pytest.raises(ClientGone):
            await waiters[0]
        assert admission.waiting(1) == 1
        release.set()
        assert await running == "ran" and await waiters[1] == "ran"
        assert admission.waiting(1) == 0 and not admission._queues

    asyncio.run(scenario())


def test_an_ask_whose_client_left_just_before_its_turn_is_dropped_not_run():
    """The client leaves and the ask before it finishes within one disconnect poll: the turn
    arrives before the next poll would have seen the client gone."""

    async def scenario() -> None:
        admission = AskAdmission(queue_per_study=2, engine_threads=2)
        release = asyncio.Event()
        loop = asyncio.get_running_loop()
        ran: list[str] = []

        def slow() -> str:
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
            return "ran"

        running = asyncio.create_task(admission.run(1, _Client(), slow))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        leaving = _Client()
        waiter = asyncio.create_task(admission.run(1, leaving, lambda: ran.append("late")))  # type: ignore[arg-type]
        await asyncio.sleep(0.25)  # past two polls, which saw the client still there
        leaving.gone = True
        release.set()
        assert await running == "ran"
        with pytest.raises(ClientGone):
            await waiter
        assert ran == [] and not admission._queues

    asyncio.run(scenario())


def test_metrics_need_an_admin_key_when_the_server_needs_keys(tmp_path):
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'asktell.db'}", auth="required", run_jobs=False
    )
    with TestClient(create_app(settings)) as http:
        assert http.get("/metrics").status_code == 401
        assert http.get("/metrics", headers=make_key(http, "acme", "write")).status_code == 403
        admin = http.get("/metrics", headers=make_key(http, "acme", "admin"))
        assert admin.status_code == 200 and "asktell_requests_total" in admin.text
