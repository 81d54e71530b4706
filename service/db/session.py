"""The database handle: one engine per process and one way to run a transaction.

``Database.write(fn)`` runs ``fn(conn)`` in a write transaction and commits once; ``read`` does
the same without taking write locks. Both retry a few times, with jitter, on the transient
failures of each backend (SQLite ``database is locked``, PostgreSQL deadlocks and serialization
failures), so those never reach a user.

SQLite: WAL journal, ``synchronous=NORMAL``, a 30 s busy timeout, writes begun with
``BEGIN IMMEDIATE`` and serialized within the process by a lock (across processes, SQLite's own
lock and the busy timeout serialize them). PostgreSQL: READ COMMITTED; callers lock the rows
they change (``SELECT ... FOR UPDATE`` on the study row).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import multiprocessing
import random
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.errors import unavailable

T = TypeVar("T")

_RETRIES = 8
#: The longest ``writes_here`` waits between two looks at the write lock (a wake-up may come
#: before the waiter registered).
_RECHECK_SECONDS = 0.005
_PG_RETRYABLE = {"40001", "40P01", "55P03"}  # serialization failure, deadlock, lock not available


class Database:
    def __init__(self, url: str, pool_size: int = 10) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        # Reentrant: a caller holding it (``writes_now``) runs writes that take it again.
        self._write_lock = threading.RLock() if self.is_sqlite else None
        self._when_free: list[Callable[[], None]] = []
        self._when_free_lock = threading.Lock()
        if self.is_sqlite:
            self.engine: Engine = create_engine(
                url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=pool_size
            )
            _configure_sqlite(self.engine)
        else:
            self.engine = create_engine(url, pool_size=pool_size, max_overflow=pool_size)

    def write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in one write transaction, retried on transient lock failures."""
        return self._run(fn, write=True)

    def read(self, fn: Callable[[Connection], T]) -> T:
        return self._run(fn, write=False)

    def _run(self, fn: Callable[[Connection], T], write: bool) -> T:
        for attempt in range(_RETRIES):
            try:
                if write and self._write_lock is not None:
                    try:
                        with self._write_lock:
                            return self._once(fn, write)
                    finally:
                        self._freed()
                return self._once(fn, write)
            except PoolTimeout as exc:
                raise unavailable("all database connections are busy; retry the request") from exc
            except DBAPIError as exc:
                if not _transient(exc) or attempt == _RETRIES - 1:
                    if _transient(exc):
                        raise unavailable("the database is busy; retry the request") from exc
                    raise
                time.sleep(random.uniform(0.005, 0.05) * (2**attempt))
        raise AssertionError("unreachable")

    def _once(self, fn: Callable[[Connection], T], write: bool) -> T:
        options: dict[str, Any] = {"asktell_write": write}
        with self.engine.connect().execution_options(**options) as conn, conn.begin():
            return fn(conn)

    @contextmanager
    def writes_now(self) -> Iterator[bool]:
        """Whether this thread holds the process's SQLite write lock for the block: taken only
        if no other thread holds it now, so a short write can run where it is, without waiting
        (the block's writes take it again). Always False on PostgreSQL, whose statements wait
        on the network, and in one of several server processes (uvicorn --workers N, a
        multiprocessing child), where another process's write, however long, would hold the
        caller up. (A separate server or command writing to the same file still can.)"""
        lock = self._lock_for_writes_here()
        if lock is None or not lock.acquire(blocking=False):
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    @asynccontextmanager
    async def writes_here(self, wait: float) -> AsyncIterator[bool]:
        """``writes_now`` for the event loop's thread, waiting, holding nothing, for other
        threads' writes to end (``when_writes_free``), at most ``wait`` seconds in all. The
        block must not await: the lock is the thread's, which other coroutines share."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            with self.writes_now() as held:
                if held:
                    yield True
                    return
            remaining = deadline - loop.time()
            if self._lock_for_writes_here() is None or remaining <= 0:
                yield False
                return
            freed = loop.create_future()
            self.when_writes_free(functools.partial(_wake, loop, freed))
            await asyncio.wait({freed}, timeout=min(remaining, _RECHECK_SECONDS))

    def _lock_for_writes_here(self) -> threading.RLock | None:
        """The write lock, when the caller may write without another process's write in the
        way: SQLite, in a process that is not one of several (see ``writes_now``)."""
        return self._write_lock if multiprocessing.parent_process() is None else None

    def when_writes_free(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, from the thread that ends it, after the next write of
        another thread (SQLite): a caller that found the lock taken (``writes_now``) learns
        when to look again without polling. It may come late or early: look again, and bound
        the wait."""
        with self._when_free_lock:
            self._when_free.append(callback)

    def _freed(self) -> None:
        with self._when_free_lock:
            callbacks, self._when_free = self._when_free, []
        for callback in callbacks:
            callback()

    @contextmanager
    def advisory_lock(self, kind: int, key: int) -> Iterator[None]:
        """Hold a PostgreSQL session advisory lock on ``(kind, key)`` for the block, on a
        connection of its own; other replicas taking the same lock wait. A no-op on SQLite,
        whose writers are serialized anyway."""
        if self.is_sqlite:
            yield
            return
        with self.engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:kind, :key)"), {"kind": kind, "key": key})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(
                    text("SELECT pg_advisory_unlock(:kind, :key)"), {"kind": kind, "key": key}
                )
                conn.commit()

    def dispose(self) -> None:
        self.engine.dispose()


def _wake(loop: asyncio.AbstractEventLoop, freed: asyncio.Future[None]) -> None:
    """Settle ``freed`` on its loop, from any thread."""

    def settle() -> None:
        if not freed.done():
            freed.set_result(None)

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(settle)


def _transient(exc: DBAPIError) -> bool:
    if isinstance(exc, OperationalError) and "locked" in str(exc.orig).lower():
        return True
    code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    return code in _PG_RETRYABLE


#: How long a new connection retries switching a fresh file to WAL (the connection's timeout).
_WAL_SECONDS = 30.0


def _set_wal(cursor: sqlite3.Cursor) -> None:
    """``PRAGMA journal_mode=WAL``, again while another connection switches the same fresh
    file at the same moment: SQLite answers one of the two "database is locked" at once,
    without its busy timeout (two uvicorn workers starting on a new database file did)."""
    deadline = time.monotonic() + _WAL_SECONDS
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.005, 0.02))


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's own is deferred-only).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        _set_wal(cursor)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("asktell_write", True)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
