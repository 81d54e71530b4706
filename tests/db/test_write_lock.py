"""The SQLite write lock of ``service.db.session.Database``: taken now or not at all
(``writes_now``), and a call when another thread's write ends (``when_writes_free``)."""

from __future__ import annotations

import functools
import sqlite3
import threading

from sqlalchemy import text
from sqlalchemy.engine import Engine

from service.db.session import Database
from tests.threads import at_once


def test_writes_now_takes_the_lock_only_when_no_other_thread_holds_it(tmp_path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'a.db'}")
    with db.writes_now() as held:
        assert held
        assert db.write(lambda conn: conn.execute(text("SELECT 1")).scalar()) == 1  # reentrant
    inside, leave = threading.Event(), threading.Event()

    def write(conn: object) -> None:
        inside.set()
        assert leave.wait(10)

    other = threading.Thread(target=db.write, args=(write,))
    other.start()
    assert inside.wait(10)
    with db.writes_now() as held:
        assert not held
    leave.set()
    other.join()
    with db.writes_now() as held:
        assert held
    db.dispose()


def test_when_writes_free_calls_back_once_after_another_threads_write(tmp_path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'a.db'}")
    calls: list[str] = []
    inside, leave = threading.Event(), threading.Event()

    def write(conn: object) -> None:
        inside.set()
        assert leave.wait(10)
        calls.append("write")

    other = threading.Thread(target=db.write, args=(write,))
    other.start()
    assert inside.wait(10)
    db.when_writes_free(lambda: calls.append("freed"))
    assert calls == []
    leave.set()
    other.join()
    assert calls == ["write", "freed"]
    db.write(lambda conn: None)
    assert calls == ["write", "freed"]  # once
    db.dispose()


def test_postgresql_has_no_write_lock(pg_url) -> None:
    db = Database(pg_url)
    with db.writes_now() as held:
        assert not held
    db.dispose()


def _connect_together(url: str) -> list[BaseException]:
    """Two engines of one file each open their first connection at the same moment; what
    they raised."""

    def connect(engine: Engine) -> None:
        with engine.connect() as conn:
            conn.execute(text("SELECT count(*) FROM t")).all()

    engines = [Database(url).engine for _ in range(2)]
    return at_once([functools.partial(connect, e) for e in engines])


def test_servers_starting_together_on_a_new_file_both_connect(tmp_path) -> None:
    # Two connections switching a fresh file to WAL at once: SQLite answers one of them
    # "database is locked" without waiting (within 200 tries in each of 4 runs without the retry).
    for attempt in range(200):
        url = f"sqlite:///{tmp_path / f'new{attempt}.db'}"
        with sqlite3.connect(tmp_path / f"new{attempt}.db") as conn:
            conn.execute("CREATE TABLE t (x INTEGER)")  # a rollback-journal file, not WAL yet
        assert _connect_together(url) == [], attempt
