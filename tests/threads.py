"""Run callables in threads that start together (a barrier), for tests of races."""

from __future__ import annotations

import threading
from collections.abc import Callable


def at_once(calls: list[Callable[[], object]]) -> list[BaseException]:
    """Run each call in a thread of its own, all released at the same moment; what they
    raised, once every one is done."""
    together = threading.Barrier(len(calls))
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        together.wait()
        try:
            call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
