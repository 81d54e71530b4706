"""A study's completed trials as engine arrays, read incrementally through a per-process cache.

History order is completion order: every transaction that finishes a trial bumps the study's
``revision`` under the study row lock and stores the new value in the trial's
``completed_seq``. Trials finished before migration 0003 have NULL there and come first, by
number. So rows are ordered by ``(coalesce(completed_seq, 0), number)``, and an engine may use a
row's index as its position in time.

``HistoryCache`` keeps, per study, ``X (n, d)``, ``Y (n, m)`` (already times ``parsed.signs``) and
``C (n, k)`` in buffers with spare rows, and the watermark: the largest ``completed_seq``
loaded. An ask then reads only ``state = 'completed' AND completed_seq > watermark``, appends
it, and hands the engine read-only views ``[:n]``. Appends write past ``n`` and growth copies to
new buffers, so a view once handed out never changes.

Why the delta query alone keeps every process exact, with several processes (uvicorn workers,
replicas) each holding its own cache, on SQLite or PostgreSQL: a trial's ``completed_seq`` is
the revision its transaction set with ``UPDATE studies SET revision = revision + 1 ...``
(or after ``SELECT ... FOR UPDATE`` of the study). That write locks the study row until the
transaction commits (PostgreSQL: the row lock; a second writer's UPDATE waits, then re-reads the
committed row; SQLite: one writer at a time, ``BEGIN IMMEDIATE``). So a writer gets its seq
only after the writer of the seq before it has committed or rolled back (a rollback also undoes
its bump, and the number is taken again). Seqs are therefore committed in increasing
order: any snapshot that shows a trial with seq ``s`` also shows every trial with a smaller
seq, and a trial committed later always has a larger seq than any a reader has seen. A reader
that saw up to ``w`` has everything ``<= w`` it will ever see, and the next
``completed_seq > w`` misses nothing. A finished trial never changes again, so appended rows
stay right. Nothing depends on the cache: evicting it costs one full load.

Not covered: a process still running code from before 0003 (a rolling upgrade) finishes trials
with NULL ``completed_seq``; caches of upgraded processes miss them until they reload.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any

import numpy as np
from sqlalchemy import Text, bindparam, cast, func, select
from sqlalchemy.engine import Connection, Result

from engines.base import History
from service.db.models import Trial
from service.problem import ParsedStudy

trials_t = Trial.__table__

#: Points of trials told failed or infeasible: the engine is told not to propose them again.
_FAILED_POINTS = select(trials_t.c.x).where(
    trials_t.c.study_id == bindparam("study_id"), trials_t.c.state.in_(("failed", "infeasible"))
)
_COLUMNS = (
    trials_t.c.x,
    # The JSON as text: one json.loads per chunk of rows parses them all (exactly as the
    # values were told; no database-side number parsing).
    cast(trials_t.c["values"], Text).label("values"),
    cast(trials_t.c.constraints, Text).label("constraints"),
    func.coalesce(trials_t.c.completed_seq, 0).label("seq"),
    trials_t.c.number,
)
# No ORDER BY: sorting 50,000 rows with their x blobs costs the database more (PostgreSQL
# spills it to disk) than sorting two integer columns here.
_FULL = select(*_COLUMNS).where(
    trials_t.c.study_id == bindparam("study_id"), trials_t.c.state == "completed"
)
_DELTA = (
    select(*_COLUMNS)
    .where(
        trials_t.c.study_id == bindparam("study_id"),
        trials_t.c.state == "completed",
        trials_t.c.completed_seq > bindparam("after"),
    )
    .order_by(trials_t.c.completed_seq, trials_t.c.number)
)

#: Rows turned into arrays at a time. Each row is two tracked objects (the driver's tuple and
#: the Row); a chunk of 256 stays below CPython's first garbage-collection threshold (700), so
#: reading 50,000 rows sets off no collections. With chunks of a few thousand, every other
#: full load paid for a full collection of the process's heap (100+ ms).
_CHUNK = 256
_MIN_ROWS = 64


@dataclass(frozen=True)
class _Batch:
    """Rows read from the database, in the order read.

    ``X (n, d)``, ``Y (n, m)`` times ``parsed.signs``, ``C (n, k)`` feasible when <= 0, and
    ``seq (n,)`` (``completed_seq``, NULL as 0) and ``number (n,)``.
    """

    X: np.ndarray
    Y: np.ndarray
    C: np.ndarray
    seq: np.ndarray
    number: np.ndarray

    def __len__(self) -> int:
        return len(self.seq)

    def completion_order(self) -> np.ndarray | None:
        """Indices that sort the rows by ``(seq, number)``; ``None`` when already sorted."""
        order = np.lexsort((self.number, self.seq))
        return None if bool(np.all(order[1:] > order[:-1])) else order


def full_history(
    conn: Connection, study_id: int, parsed: ParsedStudy, X_pending: np.ndarray
) -> History:
    """The completed trials of the study, read whole, in completion order."""
    batch = _read(conn.execute(_FULL, {"study_id": study_id}), parsed)
    order = batch.completion_order()
    if order is None:
        return History(batch.X, batch.Y, batch.C, X_pending)
    return History(batch.X[order], batch.Y[order], batch.C[order], X_pending)


def _read(result: Result[Any], parsed: ParsedStudy) -> _Batch:
    """The rows of ``_COLUMNS`` in ``result`` as arrays, a chunk at a time."""
    d, m, k = parsed.problem.d, parsed.problem.n_objectives, parsed.problem.n_constraints
    blobs: list[bytes] = []
    Ys: list[np.ndarray] = [np.zeros((0, m))]
    Cs: list[np.ndarray] = [np.zeros((0, k))]
    seqs: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    numbers: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    for rows in result.partitions(_CHUNK):
        x_col, values_col, constraints_col, seq_col, number_col = zip(*rows, strict=True)
        blobs.append(b"".join(x_col))
        Ys.append(_matrix(values_col, parsed.objective_names) * parsed.signs)
        if k:
            Cs.append(_slack(_matrix(constraints_col, parsed.constraint_names), parsed))
        seqs.append(np.array(seq_col, dtype=np.int64))
        numbers.append(np.array(number_col, dtype=np.int64))
    seq = np.concatenate(seqs)
    n = len(seq)
    X = np.frombuffer(b"".join(blobs), dtype=np.float64).reshape(n, d) if d else np.zeros((n, 0))
    C = np.concatenate(Cs) if k else np.zeros((n, 0))
    return _Batch(X, np.concatenate(Ys), C, seq, np.concatenate(numbers))


def _slack(values: np.ndarray, parsed: ParsedStudy) -> np.ndarray:
    """Constraint values ``(n, k)`` as ``C``: ``v - threshold`` for ``<=``, ``threshold - v``
    for ``>=`` (``ParsedStudy.constraint_slack``, exactly: ``a - b == -(b - a)`` in floats)."""
    thresholds = np.array([c.threshold for c in parsed.config.constraints])
    orient = np.array([1.0 if c.op == "<=" else -1.0 for c in parsed.config.constraints])
    return (values - thresholds) * orient


def _matrix(texts: Sequence[str], names: tuple[str, ...]) -> np.ndarray:
    """JSON objects as a ``(len(texts), len(names))`` float64 matrix of the named fields."""
    docs = json.loads("[" + ",".join(texts) + "]")
    get = itemgetter(*names)
    if len(names) == 1:
        return np.fromiter(map(get, docs), dtype=np.float64, count=len(docs)).reshape(-1, 1)
    return np.array(list(map(get, docs)), dtype=np.float64).reshape(len(docs), len(names))


class _Entry:
    """One study's arrays: rows ``[:n]`` are filled, the rest is spare capacity."""

    def __init__(self, parsed: ParsedStudy) -> None:
        self.parsed = parsed
        #: Whether the full load ran; later loads read only the delta.
        self.loaded = False
        self.n = 0
        self.watermark = 0
        self.X = np.zeros((0, parsed.problem.d))
        self.Y = np.zeros((0, parsed.problem.n_objectives))
        self.C = np.zeros((0, parsed.problem.n_constraints))
        #: Bytes counted for this entry in ``HistoryCache``.
        self.counted = 0
        #: Held while the entry reads and appends; asks of one study are serialized anyway.
        self.lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self.X.nbytes + self.Y.nbytes + self.C.nbytes

    def append(self, batch: _Batch, order: np.ndarray | None = None) -> None:
        """Add the batch's rows, in ``order`` when given."""
        n, k = self.n, len(batch)
        if k == 0:
            return
        if n + k > len(self.X):
            cap = max(_MIN_ROWS, len(self.X))
            while cap < n + k:
                cap *= 2
            # New buffers: views handed out earlier keep the old ones, unchanged.
            self.X, self.Y, self.C = (_grown(a, n, cap) for a in (self.X, self.Y, self.C))
        for src, dst in ((batch.X, self.X), (batch.Y, self.Y), (batch.C, self.C)):
            if order is None:
                dst[n : n + k] = src
            else:
                np.take(src, order, axis=0, out=dst[n : n + k])
        self.n = n + k
        self.watermark = max(self.watermark, int(batch.seq.max()))

    def history(self, X_pending: np.ndarray) -> History:
        n = self.n
        return History(_frozen(self.X[:n]), _frozen(self.Y[:n]), _frozen(self.C[:n]), X_pending)


def _grown(a: np.ndarray, n: int, rows: int) -> np.ndarray:
    out = np.empty((rows, a.shape[1]), dtype=np.float64)
    out[:n] = a[:n]
    return out


def _frozen(view: np.ndarray) -> np.ndarray:
    view.flags.writeable = False
    return view


class HistoryCache:
    """Completed-history arrays per study, in one process, for one database.

    Entries are rebuilt when the study's ``ParsedStudy`` object changes (compared by identity),
    dropped by ``forget`` (a deleted study), and evicted whole, least recently used first, so
    that their buffers take at most ``max_bytes`` (0 turns the cache off). Thread-safe: a
    lock guards the table, and each entry has its own lock for its reads and appends.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._bytes = 0
        self._guard = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached buffers."""
        return self._bytes

    def __contains__(self, study_id: int) -> bool:
        return study_id in self._entries

    def load(
        self, conn: Connection, study_id: int, parsed: ParsedStudy, X_pending: np.ndarray
    ) -> History:
        """The study's completed history as of ``conn``'s snapshot, with ``X_pending``.

        Reads the trials completed since the last call (all of them on the first) and keeps
        the arrays for the next."""
        if self.max_bytes <= 0:
            return full_history(conn, study_id, parsed, X_pending)
        with self._guard:
            entry = self._entries.get(study_id)
            if entry is not None and entry.parsed is not parsed:
                self._drop(study_id)
                entry = None
            if entry is None:
                entry = self._entries[study_id] = _Entry(parsed)
            self._entries.move_to_end(study_id)
        with entry.lock:
            if entry.loaded:
                params = {"study_id": study_id, "after": entry.watermark}
                entry.append(_read(conn.execute(_DELTA, params), parsed))
            else:
                batch = _read(conn.execute(_FULL, {"study_id": study_id}), parsed)
                entry.append(batch, batch.completion_order())
                entry.loaded = True
            history = entry.history(X_pending)
        self._count(study_id, entry)
        return history

    def forget(self, study_id: int) -> None:
        """Drop the study's arrays (the study was deleted)."""
        with self._guard:
            self._drop(study_id)

    def _count(self, study_id: int, entry: _Entry) -> None:
        """Account for the entry's buffers, then evict least recently used entries (and this
        one last) until the cache fits."""
        with self._guard:
            if self._entries.get(study_id) is not entry:
                return  # dropped or replaced meanwhile
            self._bytes += entry.nbytes - entry.counted
            entry.counted = entry.nbytes
            for other in list(self._entries):
                if self._bytes <= self.max_bytes:
                    break
                if other != study_id:
                    self._drop(other)
            if self._bytes > self.max_bytes:
                self._drop(study_id)

    def _drop(self, study_id: int) -> None:
        entry = self._entries.pop(study_id, None)
        if entry is not None:
            self._bytes -= entry.counted


def load_history(
    conn: Connection,
    study_id: int,
    parsed: ParsedStudy,
    X_pending: np.ndarray,
    cache: HistoryCache | None = None,
) -> History:
    """The completed trials as engine arrays in completion order, with ``X_pending`` as given
    and the points of failed and infeasible trials as ``X_failed``.

    With ``cache`` (the store's), only the trials completed since its last load are read."""
    if cache is None:
        history = full_history(conn, study_id, parsed, X_pending)
    else:
        history = cache.load(conn, study_id, parsed, X_pending)
    failed = conn.execute(_FAILED_POINTS, {"study_id": study_id}).scalars().all()
    return (
        replace(history, X_failed=stack_points(list(failed), parsed.problem.d))
        if failed
        else history
    )


def stack_points(blobs: list[bytes], d: int) -> np.ndarray:
    """Points stored as float64 bytes (a trial's ``x``), as rows of an ``(n, d)`` array."""
    if d == 0 or not blobs:
        return np.zeros((len(blobs), d))
    return np.frombuffer(b"".join(blobs), dtype=np.float64).reshape(len(blobs), d)


def pending_only(parsed: ParsedStudy, X_pending: np.ndarray) -> History:
    """What an engine that reads no observations is given: the pending points only."""
    problem = parsed.problem
    return History(
        np.zeros((0, problem.d)),
        np.zeros((0, problem.n_objectives)),
        np.zeros((0, problem.n_constraints)),
        X_pending,
    )
