"""A real asktell server in a subprocess, for the benches that time the service."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx

from bench.version import ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(
    proc: subprocess.Popen[bytes], base: str, log_path: Path, path: str = "/healthz"
) -> None:
    """Until ``base`` + ``path`` answers 200; raises (with the server's log) when the process
    exits first or after 60 s."""
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log_path.read_text()}")
        with suppress(httpx.HTTPError):
            if httpx.get(f"{base}{path}", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"server not healthy after 60 s:\n{log_path.read_text()}")
        time.sleep(0.1)


def stop_server(proc: subprocess.Popen[bytes], sig: int = signal.SIGINT) -> None:
    """``sig`` (uvicorn shuts down cleanly, lifespan exit, on SIGINT and SIGTERM), then kill
    after 15 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@contextmanager
def server_process(
    argv: list[str], env: dict[str, str], log_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` run from the repository root in a session of its own, its output in
    ``log_path``; stopped with SIGTERM on exit."""
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        stop_server(proc, signal.SIGTERM)


@contextmanager
def asktell_serve(tmp: Path, **settings: str) -> Iterator[str]:
    """``asktell serve`` (one uvicorn worker) on a fresh SQLite file in ``tmp``, configured by
    ``settings`` (environment variables) and none of this process's ``ASKTELL_*``; yields its
    base URL once healthy. Its log is ``tmp / "asktell.log"``."""
    exe = Path(sys.executable).parent / "asktell"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKTELL_")}
    env.update(ASKTELL_DATABASE_URL=f"sqlite:///{tmp / 'asktell.db'}", **settings)
    port = free_port()
    argv = [str(exe) if exe.exists() else "asktell", "serve", "--port", str(port)]
    log_path = tmp / "asktell.log"
    with server_process(argv, env, log_path) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base, log_path)
        yield base
