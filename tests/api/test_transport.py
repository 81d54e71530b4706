"""What the app itself does at the transport level, in process: security headers and the pages'
Content-Security-Policies, the request id on a 500, the header limits (431), a stalled body
(408), per-key rate limits (429) and CORS. The server's own limits (uvicorn's protocol) are in
tests/integration/test_transport.py."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.responses import JSONResponse

from client import Client
from client.models import ProblemCode
from service import api_keys
from service.app import create_app, problem
from service.dashboard import PAGE_CSP
from service.http_guards import API_CSP, BodyTimeout
from service.rate_limit import RateLimiter
from service.settings import DEFAULT_RATE_LIMIT, Settings
from tests.conftest import study_body


def _app(tmp_path: Path, **settings: Any) -> TestClient:
    url = f"sqlite:///{tmp_path / 'asktell.db'}"
    return TestClient(create_app(Settings(database_url=url, run_jobs=False, **settings)))


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[TestClient]:
    """Three requests at once, then one a second (auth off: per client address)."""
    with _app(tmp_path, rate_limit=1, rate_burst=3) as http:
        yield http


def _is_problem(response: Any, status: int, code: ProblemCode) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code


# --- security headers -------------------------------------------------------------------


def test_every_response_carries_the_security_headers(http):
    for path in ("/healthz", "/v1/studies", "/v1/studies/999", "/openapi.json", "/dashboard"):
        r = http.get(path)
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["x-frame-options"] == "DENY", path
        assert r.headers["referrer-policy"] == "no-referrer", path
    assert http.get("/v1/studies").headers["content-security-policy"] == API_CSP
    assert http.get("/dashboard").headers["content-security-policy"] == PAGE_CSP
    assert http.get("/dashboard/studies/1").headers["content-security-policy"] == PAGE_CSP


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_allow_their_inline_scripts_by_a_fresh_nonce(http, page):
    first, second = http.get(page), http.get(page)
    policy = first.headers["content-security-policy"]
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";")[0]
    (nonce,) = re.findall(r"'nonce-([^']+)'", policy)
    assert nonce not in second.headers["content-security-policy"]
    scripts = re.findall(r"<script([^>]*)>", first.text)
    assert scripts and all(f'nonce="{nonce}"' in attrs or "src=" in attrs for attrs in scripts)


def test_a_500_carries_the_request_id_and_the_security_headers(tmp_path, caplog):
    with _app(tmp_path) as http:

        @http.app.get("/boom")
        def boom() -> None:
            raise RuntimeError("a bug")

        plain = TestClient(http.app, raise_server_exceptions=False)
        with caplog.at_level(logging.ERROR, logger="asktell"):
            r = plain.get("/boom", headers={"X-Request-ID": "boom-1"})
    _is_problem(r, 500, ProblemCode.INTERNAL_ERROR)
    assert r.headers["x-request-id"] == "boom-1"
    assert r.headers["x-content-type-options"] == "nosniff"
    logged = [rec for rec in caplog.records if rec.getMessage().startswith("unhandled error")]
    assert [rec.request_id for rec in logged] == ["boom-1"]  # type: ignore[attr-defined]


# --- header limits, body pace -------------------------------------------------------------


def test_too_many_or_too_large_headers_get_431(http, tmp_path):
    many = {f"x-h{i}": "v" for i in range(100)}
    r = http.get("/v1/studies", headers=many)
    _is_problem(r, 431, ProblemCode.HEADERS_TOO_LARGE)
    assert r.headers["x-request-id"] and r.headers["connection"] == "close"
    _is_problem(http.get("/healthz", headers={"x-big": "a" * 17_000}), 431, "headers_too_large")
    assert http.get("/healthz", headers={"x-big": "a" * 15_000}).status_code == 200
    with _app(tmp_path, max_headers=8, max_header_bytes=600) as small:
        few = {f"x-h{i}": "v" for i in range(3)}
        assert small.get("/healthz", headers=few).status_code == 200
        more = {f"x-h{i}": "v" for i in range(6)}
        _is_problem(small.get("/healthz", headers=more), 431, "headers_too_large")
        _is_problem(small.get("/healthz?q=" + "a" * 600), 431, "headers_too_large")


async def _echo_body(scope: Any, receive: Any, send: Any) -> None:
    """An app that reads the whole body, then waits for the client to leave (as a stream
    does), then answers how many bytes it read and what ended the wait."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        body += message.get("body", b"")
        if not message.get("more_body", False):
            message = await receive()
            break
    response = JSONResponse({"bytes": len(body), "then": message["type"]})
    await response(scope, receive, send)


def _run(app: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Call ``app`` with a POST whose ``receive`` gives ``messages`` then never returns, or, for
    a message of type ``sleep``, waits its seconds first; the messages it sent."""

    async def scenario() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            while queue:
                message = queue.pop(0)
                if message["type"] != "sleep":
                    return message
                await asyncio.sleep(message["seconds"])
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/", "headers": []}
        await asyncio.wait_for(app(scope, receive, send), 5)
        return sent

    return asyncio.run(scenario())


def test_a_stalled_body_gets_408_and_the_app_sees_the_client_leave():
    guarded = BodyTimeout(_echo_body, seconds=0.2, problem=problem)
    sent = _run(guarded, [{"type": "http.request", "body": b"half", "more_body": True}])
    assert sent[0]["status"] == 408 and len(sent) == 2  # the app's own answer is dropped
    assert b'"code":"request_timeout"' in sent[1]["body"]
    assert (b"connection", b"close") in sent[0]["headers"]


def test_once_the_body_is_whole_a_receive_waits_untimed():
    guarded = BodyTimeout(_echo_body, seconds=0.2, problem=problem)
    sent = _run(
        guarded,
        [
            {"type": "http.request", "body": b"ab", "more_body": True},
            {"type": "sleep", "seconds": 0.1},
            {"type": "http.request", "body": b"cd", "more_body": False},
            {"type": "sleep", "seconds": 0.5},
            {"type": "http.disconnect"},
        ],
    )
    assert sent[0]["status"] == 200
    assert sent[1]["body"] == b'{"bytes":4,"then":"http.disconnect"}'


# --- rate limits ----------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_token_bucket_per_caller():
    clock = _Clock()
    limiter = RateLimiter(rate=2.0, burst=3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") is None  # another caller, another bucket
    clock.now += 0.5
    assert limiter.take("a") is None and limiter.take("a") == pytest.approx(0.5)
    clock.now += 10  # refilled, up to the burst only
    assert [limiter.take("a") for _ in range(4)][-1] == pytest.approx(0.5)


def test_the_buckets_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(RateLimiter, "MAX_BUCKETS", 3)
    clock = _Clock()
    limiter = RateLimiter(rate=1.0, burst=2, clock=clock)
    limiter.take("a")
    limiter.take("b")
    clock.now += 5  # a and b are full again: idle callers
    limiter.take("busy")
    limiter.take("busy")
    limiter.take("new")
    assert set(limiter._buckets) == {"busy", "new"}
    assert limiter.take("busy") is not None  # a bucket in use is kept, still empty


def test_over_the_rate_limit_is_429_with_retry_after(limited):
    for _ in range(3):
        assert limited.get("/v1/studies").status_code == 200
    r = limited.post("/v1/studies", json=study_body())
    _is_problem(r, 429, ProblemCode.RATE_LIMITED)
    assert r.headers["retry-after"] == "1" and 0 < r.json()["retry_after"] <= 1
    # Health, readiness, metrics and the dashboard's files are not limited.
    for path in ("/healthz", "/readyz", "/metrics", "/dashboard", "/openapi.json") * 3:
        assert limited.get(path).status_code == 200, path


def test_each_key_has_its_own_limit(tmp_path):
    with _app(tmp_path, auth="required", rate_limit=1, rate_burst=2) as http:
        db = http.app.state.store.db  # type: ignore[attr-defined]
        first, second = (
            {"Authorization": f"Bearer {api_keys.create_key(db, 'acme', n, 'read').key}"}
            for n in ("first", "second")
        )
        assert [http.get("/v1/studies", headers=first).status_code for _ in range(3)] == [
            200,
            200,
            429,
        ]
        assert http.get("/v1/studies", headers=second).status_code == 200


def test_the_client_retries_a_429_after_retry_after(limited):
    with Client("http://testserver", transport=limited._transport, retries=2) as client:
        for _ in range(4):  # the fourth waits Retry-After (1 s), then passes
            assert list(client.list_studies()) == []


def test_the_openapi_document_declares_429_431_and_408(limited):
    paths = limited.get("/openapi.json").json()["paths"]
    unlimited = {"/healthz", "/readyz", "/metrics"}
    for path, operations in paths.items():
        for method, operation in operations.items():
            declared = "429" in operation["responses"]
            assert declared is (path not in unlimited), (method, path)
            if declared:
                assert operation.get("security"), (method, path)
            # Every request may meet the header limits, every body the body timeout.
            assert "headers_too_large" in operation["responses"]["431"]["description"]
            if "requestBody" in operation:
                assert "request_timeout" in operation["responses"]["408"]["description"]


# --- CORS -----------------------------------------------------------------------------------

PREFLIGHT = {
    "Origin": "https://a.example",
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


def test_cors_is_off_by_default(http):
    r = http.options("/v1/studies", headers=PREFLIGHT)
    assert "access-control-allow-origin" not in r.headers
    r = http.get("/v1/studies", headers={"Origin": "https://a.example"})
    assert "access-control-allow-origin" not in r.headers


def test_cors_origins_may_call_the_api_with_a_key(tmp_path):
    origins = "https://a.example, https://b.example"
    with _app(tmp_path, cors_origins=origins) as http:
        r = http.options("/v1/studies", headers=PREFLIGHT)
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://a.example"
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        r = http.get("/v1/studies", headers={"Origin": "https://b.example"})
        assert r.headers["access-control-allow-origin"] == "https://b.example"
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
        r = http.get("/v1/studies", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
        r = http.options("/v1/studies", headers={**PREFLIGHT, "Origin": "https://evil.example"})
        assert r.status_code == 400


def test_the_default_rate_limit_holds_with_keys_and_not_on_a_key_free_loopback_server():
    assert Settings(auth="required").effective_rate_limit == DEFAULT_RATE_LIMIT
    assert Settings(auth="off").effective_rate_limit == 0
    assert Settings(auth="off", rate_limit=5).effective_rate_limit == 5
    assert Settings(auth="required", rate_limit=0).effective_rate_limit == 0
