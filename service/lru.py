"""A small thread-safe least-recently-used cache of computed answers, for chart reads keyed by
a study's revision: every change to a study's trials bumps its revision, so an entry never goes
stale, and entries of old revisions simply age out. Bounded by its entries, and optionally by
their bytes (a job worker's checkpoints)."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

#: Entries ``Store.charts`` keeps: a history answer is at most about 1 MB of JSON.
DEFAULT_ENTRIES = 64


class LruCache:
    """At most ``max_entries`` answers by key (0 turns the cache off); with ``max_bytes``, the
    answers are bytes and hold at most that many together (a larger one is not kept)."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES, max_bytes: int | None = None) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._bytes = 0
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
        self.put(key, value)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key`` (the most recently used), evicting the least recently
        used beyond the bounds."""
        limit = math.inf if self.max_bytes is None else self.max_bytes
        with self._lock:
            self._bytes -= self._size(self._entries.pop(key, None))
            if self.max_entries <= 0 or self._size(value) > limit:
                return  # not kept, and no older value under the key either
            self._bytes += self._size(value)
            self._entries[key] = value
            while len(self._entries) > self.max_entries or self._bytes > limit:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= self._size(evicted)

    def _size(self, value: Any) -> int:
        """The bytes ``value`` counts for: none without a byte bound (or without a value)."""
        return len(value) if self.max_bytes is not None and value is not None else 0
