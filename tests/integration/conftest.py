"""A real server for the integration tests: uvicorn with two worker processes in a subprocess,
on a fresh SQLite file or on a PostgreSQL database migrated with ``asktell db upgrade``.

``server`` is parametrized over both backends. Every server a test starts is terminated when the
test ends, and its log (each line carries the pid of the process that wrote it) is attached to
the report of a failing test; ``Server.log_tail()`` puts it in assertion messages too.

PostgreSQL is required: when it is down, the PostgreSQL tests fail (``pg_server_url`` calls
``pytest.fail``), they never skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from service.transport import PROTOCOL
from tests.conftest import scratch_database

# The dashboard's browser fixtures, registered here once: two test modules importing them
# would start Playwright twice in one session.
from tests.integration.browser import browser as browser
from tests.integration.browser import csp_watched as csp_watched
from tests.integration.browser import watched as watched

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PYTHON = sys.executable
ASKTELL = str(BIN / "asktell")
WORKERS = 2
START_TIMEOUT = 45.0
STOP_TIMEOUT = 15.0

#: uvicorn's logging with the pid on every line, so a test can tell which worker answered.
LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "default": {
            "()": "uvicorn.logging.DefaultFormatter",
            "fmt": "%(asctime)s pid=%(process)d %(levelprefix)s %(name)s: %(message)s",
            "use_colors": False,
        },
        "access": {
            "()": "uvicorn.logging.AccessFormatter",
            "fmt": '%(asctime)s pid=%(process)d ACCESS %(client_addr)s - "%(request_line)s" '
            "%(status_code)s",
            "use_colors": False,
        },
    },
    "handlers": {
        "default": {
            "class": "logging.StreamHandler",
            "formatter": "default",
            "stream": "ext://sys.stderr",
        },
        "access": {
            "class": "logging.StreamHandler",
            "formatter": "access",
            "stream": "ext://sys.stdout",
        },
    },
    "loggers": {
        "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
        "uvicorn.error": {"level": "INFO"},
        "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        "asktell": {"handlers": ["default"], "level": "INFO", "propagate": False},
    },
    "root": {"handlers": ["default"], "level": "WARNING"},
}

_ACCESS = re.compile(r'pid=(\d+) ACCESS ([\d.]+):(\d+) - "(\S+) (\S+) [^"]*" (\d+)')
_STARTED = re.compile(r"Started server process \[(\d+)\]")

SERVERS = pytest.StashKey[list["Server"]]()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a server process: ours without any ``ASKTELL_*``, plus the given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKTELL_")}
    env.update(PYTHONUNBUFFERED="1", ASKTELL_DATABASE_URL=database_url)
    env.update(extra)
    return env


class Server:
    """One server subprocess (its own session, so its workers die with it)."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, log_path: Path) -> None:
        self.argv, self.env, self.port, self.log_path = argv, env, port, log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{port}"

    def __repr__(self) -> str:
        return f"Server({self.url}, log={self.log_path})"

    # --- lifecycle ---

    def spawn(self) -> Server:
        """Start the process without waiting for it."""
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.log_path.parent,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def start(self, timeout: float = START_TIMEOUT) -> Server:
        """Start and wait until /healthz answers and every worker finished its start-up."""
        return self.spawn().wait_ready(timeout)

    def wait_ready(self, timeout: float = START_TIMEOUT) -> Server:
        """Wait until the spawned server's /healthz answers and every worker finished its
        start-up."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        healthy = False
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the server exited with {self.proc.returncode} before it was ready\n"
                    + self.log_tail()
                )
            if not healthy:
                with contextlib.suppress(httpx.HTTPError):
                    healthy = httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
            if healthy and self.log().count("Application startup complete") >= WORKERS:
                return self
            time.sleep(0.1)
        self.stop()
        raise AssertionError(
            f"the server was not ready within {timeout} s (healthz ok: {healthy})\n"
            + self.log_tail()
        )

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, then SIGKILL to the whole process group when it does not exit in time.

        Returns the exit code of the main process (``None`` if it had to be killed)."""
        if self.proc is None:
            return None
        proc, code = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        # Workers left behind (or everything, after a timeout) go with the process group,
        # which this server's main process leads: start_new_session=True.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if code is None:
            proc.wait(5)
        return code

    # --- the log ---

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 150) -> str:
        """The log's last lines but the access lines, which would push an error's traceback
        out of a failed test's report."""
        tail = [line for line in self.log().splitlines() if " ACCESS " not in line][-lines:]
        return (
            f"----- log of {self.url} ({self.log_path}), last {len(tail)} lines but the "
            "access log -----\n" + "\n".join(tail)
        )

    def worker_pids(self) -> set[int]:
        return {int(p) for p in _STARTED.findall(self.log())}

    def access(self) -> list[tuple[int, int, str, str, int]]:
        """Access log entries: (pid, client port, method, path, status)."""
        return [
            (int(pid), int(port), method, path, int(status))
            for pid, _host, port, method, path, status in _ACCESS.findall(self.log())
        ]


@pytest.fixture
def start_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``start_server(database_url, cli=False, wait=True, **env)``: start a two-worker server
    and wait until it is ready (or only spawn it, ``wait=False``).

    ``cli=False`` runs ``python -m uvicorn service.main:app --workers 2`` (the pid-logging
    config, ``asktell serve``'s HTTP protocol); ``cli=True`` runs ``asktell serve --workers 2``.
    Every server is stopped at the end of the test."""
    started: list[Server] = []
    request.node.stash[SERVERS] = started
    log_config = tmp_path / "log-config.json"
    log_config.write_text(json.dumps(LOG_CONFIG))

    def start(database_url: str, cli: bool = False, wait: bool = True, **env: str) -> Server:
        port = free_port()
        if cli:
            argv = [ASKTELL, "serve", "--workers", str(WORKERS), "--port", str(port)]
        else:
            argv = [
                PYTHON,
                "-m",
                "uvicorn",
                "service.main:app",
                "--workers",
                str(WORKERS),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                # What ``asktell serve`` runs: httptools with the header limits.
                "--http",
                PROTOCOL,
                "--log-config",
                str(log_config),
            ]
        log_path = tmp_path / f"server-{len(started)}-{port}.log"
        if not cli:
            # What ``asktell serve`` tells the app itself: it listens on loopback (auth off).
            env = {"ASKTELL_HOST": "127.0.0.1", **env}
        server = Server(argv, server_env(database_url, **env), port, log_path)
        started.append(server)
        return server.start() if wait else server.spawn()

    yield start
    for server in started:
        server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for server in item.stash.get(SERVERS, []):
            report.sections.append((f"server log {server.url}", server.log_tail(400)))


# --- databases ----------------------------------------------------------------------------


def run_cli(*args: str, database_url: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ASKTELL, *args],
        env=server_env(database_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def pg_migrated_url(pg_server_url: str) -> str:
    """The session's scratch PostgreSQL database, migrated with ``asktell db upgrade``."""
    done = run_cli("db", "upgrade", database_url=pg_server_url)
    assert done.returncode == 0, f"asktell db upgrade failed:\n{done.stdout}\n{done.stderr}"
    return pg_server_url


def truncate_pg(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE measurements, trials, jobs, datasets, studies, samplers,"
            " idempotency_keys CASCADE"
        )


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh SQLite file (the server upgrades it) or the migrated PostgreSQL database,
    emptied."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'asktell.db'}"
    url = request.getfixturevalue("pg_migrated_url")
    truncate_pg(url)
    return url


#: The browser tests' mark: their server runs on PostgreSQL only, the backend of replicas whose
#: live updates cross processes. The dashboard is a client of the API, whose answers on SQLite
#: the API and curl tests check; running each browser test twice cost the suite minutes.
ON_POSTGRESQL = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@pytest.fixture
def server(database_url: str, start_server: Callable[..., Server]) -> Server:
    """A running two-worker server on each backend."""
    return start_server(database_url)


@pytest.fixture
def scratch_pg_url() -> Iterator[str]:
    """A new, empty (not migrated) PostgreSQL database, dropped afterwards."""
    with scratch_database("asktell_it") as url:
        yield url
