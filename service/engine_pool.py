"""The engine processes of one server: model-based engines compute there, off the request path.

An ask on a study whose engine reads observations (``gp``, ``turbo-enn``, ``pom``, ...) sends
the engine call (engine, problem, history, state, seed, count) to one of this server process's
engine processes and waits for the proposal. So a 30 s fit on one study competes with the
server's requests for neither the interpreter nor its threads, and an engine call can be
abandoned: one that is not answered within the ask's time budget (counted from the moment the
ask hands it over, waiting for a free process included) is killed with its process, which is
replaced, and the ask is answered from the quasi-random fallback (``service.ask``).

The processes start on the first model-based ask (a server that never runs a model pays
nothing), or when a tuning job of a model-based engine starts (``EnginePool.start``), forked
from the server's fork server (``service.forkserver``), which has imported the engines once,
so a replacement starts in milliseconds. A process that dies, killed
from outside or by the engine, is replaced. Engines stay pure: the call and the proposal are
pickled, and the same ``run_call`` runs in the ask thread when the pool has no processes.
"""

from __future__ import annotations

import logging
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, cast

import numpy as np

from engines.base import JSON, Engine, History, ModelBasedEngine, Problem, Proposal
from engines.registry import engine_modules
from service import forkserver

log = logging.getLogger("asktell.engine_pool")

#: What a new process sends once it can take calls.
_READY = "ready"
#: Seconds before a process that died while starting is started again.
_RESTART_DELAY = 1.0


@dataclass(frozen=True)
class EngineCall:
    """One engine call: everything the engine reads, nothing of the server."""

    engine: Engine
    problem: Problem
    history: History
    count: int
    state: JSON
    #: The seed of the call's generator: the study's seed and its ask count.
    seed: tuple[int, int]
    #: Points for the suggestion pool (``suggest_ahead``), not for the ask waiting now.
    ahead: bool = False


class EngineAbandoned(Exception):
    """The engine call gave no proposal: ``reason`` is ``time_budget`` (not answered within
    the budget; the process was killed) or ``engine_process_exited`` (its process died)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def one_torch_thread() -> None:
    """Engines run torch with one intra-op thread: several engine calls run at once (in the
    pool's processes, or in ask threads without a pool), and each fit's own threads on top
    would oversubscribe the cores and starve the event loop. Set once torch is imported (by
    the first engine that needs it)."""
    torch = sys.modules.get("torch")
    # Another thread may be importing torch right now (the first gp ask of a process while a
    # random ask runs): a module still initializing may lack the functions, so leave it; its
    # importer's call sets the threads once the import is done.
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return
    if not hasattr(torch, "set_num_threads"):
        return
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def run_call(call: EngineCall) -> tuple[Proposal, float]:
    """The engine's proposal and the seconds it computed; engine errors propagate."""
    rng = np.random.default_rng(list(call.seed))
    start = time.perf_counter()
    one_torch_thread()
    try:
        suggest = call.engine.suggest
        if call.ahead:  # only model-based engines are pooled (``suggestion_pool.pools``)
            suggest = cast(ModelBasedEngine, call.engine).suggest_ahead
        proposal = suggest(call.problem, call.history, call.count, call.state, rng)
    finally:
        one_torch_thread()
    return proposal, round(time.perf_counter() - start, 6)


def _serve(conn: Connection) -> None:
    """An engine process: answer calls until the server closes the pipe."""
    # Ctrl-C reaches the whole process group; the server, not the signal, ends this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send(_READY)
    while True:
        try:
            call = conn.recv()
        except EOFError:
            return
        reply: tuple[str, Any]
        try:
            reply = ("ok", run_call(call))
        except BaseException as exc:
            reply = ("error", _portable(exc))
        conn.send(reply)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling both ways, else a RuntimeError with its traceback."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError("".join(traceback.format_exception(exc)))


forkserver.preload(__name__, *engine_modules())


class _Process:
    """One engine process and the server's end of its pipe."""

    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child,), name="asktell-engine", daemon=True)
        self.process.start()
        child.close()
        self._killed = False
        self._kill_lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def kill(self) -> None:
        """Kill the process and close the pipe, once: the pool's close and the thread that
        starts the process may both get here, and a second close of the pipe's descriptor
        fails (or closes a file opened since under the same number)."""
        with self._kill_lock:
            if self._killed:
                return
            self._killed = True
        self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class EnginePool:
    """The engine processes of one server process; ``processes == 0`` runs calls in the
    calling thread (no budget then: a thread cannot be abandoned)."""

    def __init__(self, processes: int, budget: float) -> None:
        self.processes = processes
        #: The server's time budget of one engine call, in seconds.
        self.budget = budget
        self._idle: queue.SimpleQueue[_Process] = queue.SimpleQueue()
        self._all: set[_Process] = set()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False

    def call(self, call: EngineCall, budget: float) -> tuple[Proposal, float]:
        """The proposal of ``call`` and the engine's seconds. Raises ``EngineAbandoned`` when
        no proposal came within ``budget`` seconds or the process died; the engine's own
        errors propagate."""
        if self.processes == 0:
            return run_call(call)
        # Pickled before a process is taken: a call that cannot be sent costs no process.
        payload = ForkingPickler.dumps(call)
        deadline = time.monotonic() + budget
        self.start()
        worker = self._take(deadline)
        try:
            worker.conn.send_bytes(payload)
            if not worker.conn.poll(max(0.0, deadline - time.monotonic())):
                log.warning(
                    "an engine call exceeded its %.3g s budget: killing its process", budget
                )
                self._replace(worker)
                raise EngineAbandoned("time_budget")
            status, value = worker.conn.recv()
        except (EOFError, OSError):
            log.warning("an engine process exited during a call: replacing it")
            self._replace(worker)
            raise EngineAbandoned("engine_process_exited") from None
        self._idle.put(worker)
        if status == "error":
            raise value
        return value

    def _take(self, deadline: float) -> _Process:
        """An idle live process; a dead one found idle is replaced."""
        while True:
            try:
                worker = self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise EngineAbandoned("time_budget") from None
            if worker.process.is_alive():
                return worker
            log.warning("engine process %s exited while idle: replacing it", worker.pid)
            self._replace(worker)

    def start(self) -> None:
        """Start the processes in the background, if not started yet: the first call does,
        and a caller that knows calls are coming (a tuning job about to start) can start them
        sooner, so that the first call does not wait for them."""
        with self._lock:
            if self._started or self._closed:
                return
            self._started = True
        for _ in range(self.processes):
            self._launch()

    def _launch(self) -> None:
        """Start a process in the background; it joins the idle ones once ready."""
        threading.Thread(target=self._bring_up, name="asktell-engine-start", daemon=True).start()

    def _bring_up(self) -> None:
        ctx = forkserver.context()
        while not self._closed:
            try:
                worker = _Process(ctx)
            except OSError:
                log.exception("an engine process could not be started; trying again")
                time.sleep(_RESTART_DELAY)
                continue
            with self._lock:
                if self._closed:
                    worker.kill()
                    return
                self._all.add(worker)
            try:
                ready = worker.conn.recv() == _READY
            except (EOFError, OSError):
                ready = False
            if ready and not self._closed:
                self._idle.put(worker)
                return
            self._forget(worker)
            if not self._closed:
                log.warning("an engine process failed to start; trying again")
                time.sleep(_RESTART_DELAY)

    def _replace(self, worker: _Process) -> None:
        self._forget(worker)
        if not self._closed:
            self._launch()

    def _forget(self, worker: _Process) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.kill()

    def pids(self) -> list[int]:
        """The process ids of the pool's processes, started or starting."""
        with self._lock:
            return sorted(p.pid for p in self._all if p.pid is not None)

    def idle(self) -> int:
        """How many processes are ready and waiting for a call."""
        return self._idle.qsize()

    def close(self) -> None:
        """Kill every process; calls after this run nowhere (the server is stopping)."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
        for worker in workers:
            worker.kill()
