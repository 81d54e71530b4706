"""The server process's fork server (``multiprocessing``'s ``forkserver``): its engine processes
and its local job workers are forked from it, so each starts with torch and its own modules
already imported (2-3 s on a 2-core machine) instead of importing them, and the server's
threads are never forked.

A module whose processes are forked from it names what they import (``preload``) when it is
imported; the fork server imports them all once, when the first process is asked of it. A
module named after that is imported by each process itself: slower, never wrong.
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

_lock = threading.Lock()
_preload: set[str] = set()


def preload(*modules: str) -> None:
    """Have the fork server import ``modules`` (if it has not started yet)."""
    with _lock:
        _preload.update(modules)


def context() -> Any:
    """The ``forkserver`` multiprocessing context, its preload set."""
    with _lock:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(sorted(_preload))
        return ctx
