"""Where a job's workers run: ``local`` processes of the server, or ``ray`` tasks.

Either way a worker is ``service.jobs.worker``'s loop, reaching the server over HTTP only (the
API and the artifact store through it), so a Ray task may run on any node of the cluster. The
runner sees a ``WorkerProcess``: ``poll`` (the exit code once it ended), ``terminate``, ``kill``,
``wait`` and ``tail`` (the end of its log, quoted in a failed job's error).

- ``LocalWorker``: ``service.jobs.worker``'s loop in a process forked from the server's fork
  server (``service.forkserver``, which imports torch and the worker's modules once), its stderr
  in a log file.
- ``RayWorker``: one Ray task per worker, named ``asktell worker <worker id>`` (Ray's dashboard
  and its worker process's title show it), with the job's ``resources``
  (``num_cpus``, ``num_gpus``), ``max_retries=0``: when its Ray worker process dies (killed, its
  node lost) the task fails, the runner starts another worker and re-serves the dead one's unit
  from the same start. ``terminate`` cancels the task (a ``KeyboardInterrupt`` in it), ``kill``
  force-cancels it (its Ray worker process is killed).

Ray is an optional extra (``asktell[ray]``): it is imported only when a Ray job runs, and the
server connects (``ray.init``) with its first Ray job: to ``ASKTELL_RAY_ADDRESS``, or to a local
instance it starts (its worker processes inherit the server's environment, ``PYTHONPATH``
included).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import logging
import multiprocessing.connection
import multiprocessing.util
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from client.models import WorkerResources
from service import forkserver
from service.jobs.worker import EXIT_ERROR, EXIT_STOPPED
from service.settings import Settings

log = logging.getLogger("asktell.jobs")

forkserver.preload("service.jobs.worker", "service.jobs.mlp")

RAY_EXTRA = "asktell[ray]"
RAY_TASK_PREFIX = "asktell worker "
#: Lines of a worker's log kept for a failed job's error.
TAIL_LINES = 15


class WorkerProcess(Protocol):
    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float) -> int:
        """The exit code; raises ``subprocess.TimeoutExpired`` if still running after
        ``timeout`` seconds."""
        ...

    def tail(self) -> str: ...


def ray_installed() -> bool:
    """Whether ``import ray`` would find Ray (without importing it: that takes a second)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except ValueError:  # sys.modules["ray"] is None: its import is blocked
        return False


# --- local --------------------------------------------------------------------------------


class LocalWorker:
    """A worker as a child process of this server, forked from its fork server (so it starts
    with torch imported), its stdout and stderr in a log file; ``on_exit`` is called (from a
    thread of its own) when the process ends, so that the runner tends the job at once rather
    than at its next pass.

    The worker and this process share a socket pair. The worker ends when this server process
    does (kill -9 included): a thread of it waits for the pair's end of file, which only this
    process's end gives. And the worker writes its exit code there before it exits:
    multiprocessing hands a fork server child's exit code to whichever thread reads it first
    (starting any process polls every child) and 255 to the others."""

    def __init__(
        self, argv: list[str], env: dict[str, str], log_path: Path, on_exit: Callable[[], None]
    ) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        ctx = forkserver.context()
        self._link, worker_link = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=run_local_worker,
            args=(argv, env, str(log_path), worker_link),
            name="asktell-worker",
            # Not daemonic: a workload may start processes of its own (a torch DataLoader's
            # workers), which multiprocessing refuses a daemonic process.
            daemon=False,
        )
        self.process.start()
        worker_link.close()
        # At exit, multiprocessing joins the non-daemonic children: a worker the runner did
        # not stop (a forced exit) is killed first instead of waited for.
        self._at_exit = multiprocessing.util.Finalize(None, self.process.kill, exitpriority=10)
        self.code: int | None = None
        self._ended = threading.Event()
        threading.Thread(
            target=self._watch, args=(on_exit,), name="asktell-worker-exit", daemon=True
        ).start()

    def _watch(self, on_exit: Callable[[], None]) -> None:
        multiprocessing.connection.wait([self.process.sentinel])
        said = self._said_code()
        self.process.join()
        # Killed, or dead before it said: the fork server's code (negative for a signal).
        self.code = said if said is not None else self.process.exitcode
        self._at_exit.cancel()
        self._link.close()
        self._ended.set()
        on_exit()

    def _said_code(self) -> int | None:
        try:
            return int(self._link.recv()) if self._link.poll() else None
        except (EOFError, OSError, TypeError, ValueError):
            return None

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        if not self._ended.is_set():
            self.process.terminate()

    def kill(self) -> None:
        if not self._ended.is_set():
            self.process.kill()

    def wait(self, timeout: float) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired("job worker", timeout)
        assert self.code is not None
        return self.code

    def tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-TAIL_LINES:])


def run_local_worker(
    argv: list[str], env: dict[str, str], log_path: str, server_link: Connection
) -> None:
    """The body of a local worker's process: the server's environment for the job, its log as
    stdout and stderr, a thread that ends the process when the server process is gone, then the
    loop; its exit code goes to the server before it exits."""
    from service.jobs import worker

    os.environ.clear()
    os.environ.update(env)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    threading.Thread(
        target=_end_with_server, args=(server_link,), name="asktell-server-alive", daemon=True
    ).start()
    code = worker.main(argv)
    with contextlib.suppress(OSError):
        server_link.send(code)
    worker.exit_now(code)


def _end_with_server(server_link: Connection) -> None:
    with contextlib.suppress(EOFError, OSError):
        server_link.recv_bytes()  # the server sends nothing: this waits for the end of file
    os.kill(os.getpid(), signal.SIGTERM)


# --- ray ----------------------------------------------------------------------------------

_ray_lock = threading.Lock()


def _ray(settings: Settings) -> Any:
    """The ``ray`` module, connected: to ``settings.ray_address``, or to a local instance
    started now (once per process)."""
    import ray

    with _ray_lock:
        if not ray.is_initialized():
            started = time.monotonic()
            ray.init(
                address=settings.ray_address,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            where = settings.ray_address or "a local instance"
            log.info("connected to Ray (%s) in %.1f s", where, time.monotonic() - started)
    return ray


def run_worker(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """The body of a Ray task: one job worker's loop in this Ray worker process; its exit
    code and the end of its log."""
    from service.jobs import worker

    lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    class Tail(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    os.environ.update(env)
    handler = Tail()
    logging.getLogger().addHandler(handler)
    try:
        code = worker.main(argv)
    except Exception:
        logging.getLogger("asktell.worker").exception("the worker failed")
        code = EXIT_ERROR
    finally:
        logging.getLogger().removeHandler(handler)
    return code, "\n".join(lines)


class RayWorker:
    """A worker as a Ray task."""

    def __init__(
        self,
        settings: Settings,
        worker_id: str,
        argv: list[str],
        env: dict[str, str],
        resources: WorkerResources,
    ) -> None:
        self.ray = _ray(settings)
        task = self.ray.remote(
            name=f"{RAY_TASK_PREFIX}{worker_id}",
            num_cpus=resources.num_cpus,
            num_gpus=resources.num_gpus,
            max_retries=0,
        )(run_worker)
        self.ref = task.remote(argv, env)
        self.code: int | None = None
        self.log = ""

    def poll(self) -> int | None:
        if self.code is None:
            ready, _ = self.ray.wait([self.ref], timeout=0)
            if ready:
                self._collect()
        return self.code

    def _collect(self) -> None:
        try:
            self.code, self.log = self.ray.get(self.ref)
        except self.ray.exceptions.TaskCancelledError:
            self.code, self.log = EXIT_STOPPED, "cancelled"
        except self.ray.exceptions.RayError as exc:  # its process or node died
            self.code, self.log = 1, f"the Ray worker died: {exc}"

    def terminate(self) -> None:
        self.ray.cancel(self.ref, force=False)

    def kill(self) -> None:
        self.ray.cancel(self.ref, force=True)

    def wait(self, timeout: float) -> int:
        ready, _ = self.ray.wait([self.ref], timeout=timeout)
        if not ready:
            raise subprocess.TimeoutExpired("ray task", timeout)
        self._collect()
        assert self.code is not None
        return self.code

    def tail(self) -> str:
        return self.log
