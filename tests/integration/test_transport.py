"""The transport limits of the real server (``asktell serve``: uvicorn with httptools and
``service.transport``), driven through raw sockets: oversized headers get 431, slow clients 408
and a closed connection, silent and idle kept-alive connections are closed; and the
dashboard's and the docs' pages in a real Chromium that enforces their Content-Security-Policy.

Every socket read waits at most ``WAIT`` seconds: a server that holds a connection longer than
that fails the test with a timeout."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.browser import WatchedPage
from tests.integration.conftest import ASKTELL, WORKERS, Server, free_port, server_env

pytestmark = pytest.mark.integration

WAIT = 10.0
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
#: The limits the slow-client test runs with: 1 s instead of the defaults' 10 s and 20 s.
FAST_TIMEOUTS = {
    "ASKTELL_HEADER_TIMEOUT": "1",
    "ASKTELL_BODY_TIMEOUT": "1",
    "ASKTELL_KEEP_ALIVE_TIMEOUT": "1",
}


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One ``asktell serve`` (two workers, SQLite) for the socket tests, with 1 s timeouts."""
    tmp = tmp_path_factory.mktemp("transport")
    port = free_port()
    argv = [ASKTELL, "serve", "--workers", str(WORKERS), "--port", str(port)]
    env = server_env(f"sqlite:///{tmp / 'asktell.db'}", **FAST_TIMEOUTS)
    server = Server(argv, env, port, tmp / "server.log").start()
    yield server
    server.stop()


def _connect(server: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
    sock.settimeout(WAIT)
    return sock


def _send(sock: socket.socket, data: bytes) -> None:
    """Send what the server takes; it may refuse and close before all of ``data`` is sent."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)


def _read_to_close(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closed)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def _problem(raw: bytes, status: int, code: str) -> dict[str, str]:
    """The response's headers, once ``raw`` is shown to be a problem+json ``status``/``code``
    that closes the connection."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith(f"HTTP/1.1 {status} "), raw[:300]
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    assert headers["x-content-type-options"] == "nosniff" and headers["x-request-id"]
    assert json.loads(body)["code"] == code
    return headers


def _get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: test", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_headers_over_the_size_or_count_limit_get_431(serve: Server):
    server = serve
    # 8 MiB in one header: reading stops at 16 KiB; the client sees a 431 or a reset, never
    # an answer of the route.
    with _connect(server) as sock:
        _send(sock, _get("/healthz", "X-Big: " + "a" * (8 * 1024 * 1024)))
        raw = _read_to_close(sock)
    assert raw == b"" or _problem(raw, 431, "headers_too_large")
    # 20 KiB sent in small pieces, so that it is read before the headers end.
    with _connect(server) as sock:
        request = _get("/healthz", "X-Big: " + "a" * 20_000)
        for start in range(0, len(request), 1024):
            _send(sock, request[start : start + 1024])
            time.sleep(0.005)
        _problem(_read_to_close(sock), 431, "headers_too_large")
    # The count: 102 header lines are too many, 100 are the limit.
    many = [f"X-H{i}: v" for i in range(100)]
    with _connect(server) as sock:
        _send(sock, _get("/healthz", *many, "Connection: close"))
        _problem(_read_to_close(sock), 431, "headers_too_large")
    with _connect(server) as sock:
        _send(sock, _get("/healthz", *many[:98], "Connection: close"))
        assert _read_to_close(sock).startswith(b"HTTP/1.1 200 ")
    assert httpx.get(f"{server.url}/healthz").status_code == 200


def test_slow_and_silent_clients_are_cut_off(serve: Server):
    def silent() -> bytes:
        with _connect(serve) as sock:
            return _read_to_close(sock)

    def half_headers() -> bytes:
        with _connect(serve) as sock:
            _send(sock, b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
            return _read_to_close(sock)

    trickled: list[bytes] = []

    def trickled_headers() -> bytes:
        # A line every 0.2 s: each byte restarts no clock.
        with _connect(serve) as sock:
            lines = [b"GET /healthz HTTP/1.1\r\n"] + [b"X-Slow: 1\r\n"] * 50
            sent = _trickle(sock, lines, 0.2)
            raw = _read_to_close(sock)
            trickled.extend(sent)
            return raw

    def half_body() -> bytes:
        with _connect(serve) as sock:
            head = "POST /v1/studies HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            _send(sock, f"{head}Content-Length: 100\r\n\r\n".encode() + b'{"name": ')
            return _read_to_close(sock)

    def idle_after_an_answer() -> bytes:
        with _connect(serve) as sock:
            _send(sock, _get("/healthz"))
            return _read_to_close(sock)

    cases = [silent, half_headers, trickled_headers, half_body, idle_after_an_answer]
    with ThreadPoolExecutor(len(cases)) as pool:
        answers = dict(zip(cases, pool.map(lambda case: case(), cases), strict=True))
    for case in (half_headers, trickled_headers, half_body):
        _problem(answers[case], 408, "request_timeout")
    # Closed without an answer: a client that sends its first request just then on a pooled
    # connection must not take a 408 for that request's answer.
    assert answers[silent] == b""
    assert len(trickled) < 51  # cut off long before the 51 lines were sent
    # A kept-alive connection is answered, then closed once idle.
    idle = answers[idle_after_an_answer]
    assert idle.startswith(b"HTTP/1.1 200 ") and idle.endswith(b'{"status":"ok"}')
    assert httpx.get(f"{serve.url}/healthz").status_code == 200


def _trickle(sock: socket.socket, lines: list[bytes], pause: float) -> list[bytes]:
    """Send ``lines`` one by one, ``pause`` apart, from a thread that stops when the server
    closes the connection; the list of the lines sent so far."""
    sent: list[bytes] = []

    def run() -> None:
        for line in lines:
            try:
                sock.sendall(line)
            except OSError:
                return
            sent.append(line)
            time.sleep(pause)

    threading.Thread(target=run, daemon=True).start()
    return sent


def test_the_dashboard_and_the_docs_satisfy_their_content_security_policy(
    sqlite_url, start_server, csp_watched: WatchedPage
):
    server: Server = start_server(sqlite_url)
    sid = _pareto_study(server.url)
    page = csp_watched.page
    visits: list[tuple[str, Callable[[], object]]] = [
        ("/docs", lambda: page.wait_for_selector(".opblock")),
        ("/redoc", lambda: page.wait_for_selector("[data-section-id]")),
        ("/dashboard", lambda: page.wait_for_selector(f"tr[data-study='{sid}']")),
        # Last: leaving it would abort its event stream, a failed request.
        (
            f"/dashboard/studies/{sid}",
            lambda: [
                page.wait_for_selector(selector)
                for selector in (
                    "#history .main-svg",
                    "#pareto[data-non-dominated] .main-svg",
                    "#parcoords .main-svg",
                )
            ],
        ),
    ]
    for path, drawn in visits:
        response = page.goto(f"{server.url}{path}")
        assert response is not None
        assert "'unsafe-eval'" not in response.headers["content-security-policy"]
        drawn()
        csp_watched.screenshot("csp" + path.replace("/", "-"))
    # ReDoc's bundle always shows its maker's logo from a CDN (hidden when it fails to load):
    # the policy blocks it, so the page loads nothing from outside.
    csp_watched.problems = [p for p in csp_watched.problems if REDOC_LOGO not in p]
    csp_watched.assert_clean()


def _pareto_study(url: str) -> int:
    """A two-objective study with a constraint and a dozen trials: the study page draws its
    history, its Pareto front and its parallel coordinates."""
    with httpx.Client(base_url=url, timeout=30) as api:
        r = api.post(
            "/v1/studies",
            json={
                "name": "csp",
                "parameters": [
                    {"type": "float", "name": "x", "low": 0.0, "high": 1.0},
                    {"type": "categorical", "name": "act", "choices": ["relu", "tanh"]},
                ],
                "objectives": [
                    {"name": "loss", "goal": "minimize", "reference": 10.0},
                    {"name": "acc", "goal": "maximize", "reference": -1.0},
                ],
                "constraints": [{"name": "c", "op": "<=", "threshold": 0.0}],
            },
        )
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        for i in range(12):
            body = {
                "params": {"x": i / 12, "act": ("relu", "tanh")[i % 2]},
                "values": {"loss": float(i % 5), "acc": float(i % 7)},
                "constraints": {"c": -1.0 if i != 3 else 1.0},
            }
            assert api.post(f"/v1/studies/{sid}/trials", json=body).status_code == 201
        return sid
