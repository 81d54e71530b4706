"""The background reaper: expires leases and forgets old idempotency keys, on every replica.

Each pass is one short write transaction; on several replicas the passes simply overlap, and
the row updates they make are idempotent.
"""

from __future__ import annotations

import logging
import threading

from service.idempotency import forget_old
from service.store import Store, utcnow
from service.trials import expire_leases

log = logging.getLogger("asktell.reaper")


def reap_once(store: Store) -> int:
    def fn(conn: object) -> int:
        now = utcnow()
        forget_old(conn, now)  # type: ignore[arg-type]
        return expire_leases(store, conn, now)  # type: ignore[arg-type]

    return store.db.write(fn)  # type: ignore[arg-type]


class Reaper:
    def __init__(self, store: Store, interval: float) -> None:
        self.store, self.interval = store, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="asktell-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                changed = reap_once(self.store)
                if changed:
                    log.info("expired %d trial lease(s)", changed)
            except Exception:  # keep reaping after a transient failure; it is logged
                log.exception("reaper pass failed")
