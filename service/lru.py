"""A small thread-safe least-recently-used cache of computed answers, for chart reads keyed by
a study's revision: every change to a study's trials bumps its revision, so an entry never goes
stale, and entries of old revisions simply age out."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

#: Entries ``Store.charts`` keeps: a history answer is at most about 1 MB of JSON.
DEFAULT_ENTRIES = 64


class LruCache:
    """At most ``max_entries`` answers by key (0 turns the cache off)."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The answer stored under ``key``, or ``compute()``'s, stored. Two threads missing
        the same key may both compute; the answers are equal, either is kept."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = compute()
        if self.max_entries > 0:
            with self._lock:
                self._entries[key] = value
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return value
