"""A study's parameter importance for one objective (``engines.importance``, fANOVA of a
random forest), computed on the server and cached per study revision.

The forest is fitted on at most ``MAX_TRIALS`` completed trials that pass the filter, spread
evenly over trial numbers (not biased to the best ones: importance is about the whole space
searched), so a 50,000-trial study answers as fast as a 2,000-trial one. Results are kept in a
small LRU per store, keyed by ``(study, revision, objective, filter)``: a dashboard refreshing
every second recomputes only when a tell moved the revision.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from sqlalchemy.engine import Connection

from client.models import ParameterImportance, StudyImportance
from engines.importance import fanova_importances
from service.errors import ApiError, ProblemCode
from service.progress import evenly, objective_rows, trial_params
from service.store import Store, find_study
from service.trial_fields import filter_clauses

METHOD = "fanova"
#: Trials the forest is fitted on at most (about a second of work).
MAX_TRIALS = 2000
#: Fewer usable trials than this: an empty result.
MIN_TRIALS = 5
#: Results kept per store.
CACHE_SIZE = 64
SEED = 0

_Key = tuple[int, int, str, str | None]


@dataclass
class _Cache:
    entries: OrderedDict[_Key, StudyImportance]
    lock: threading.Lock


_caches: weakref.WeakKeyDictionary[Store, _Cache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


@dataclass(frozen=True)
class _Sample:
    """What the forest is fitted on, read in the transaction and fitted after it."""

    key: _Key
    names: list[str]
    X: np.ndarray
    y: np.ndarray
    matched: int


def study_importance(
    store: Store,
    tenant_id: int,
    study_id: int,
    objective: str | None = None,
    trial_filter: str | None = None,
) -> StudyImportance:
    """The importance of each parameter to ``objective`` (the first objective by default),
    from the completed trials that pass ``trial_filter`` (``service.trial_fields``).

    Raises: ApiError 422 ``validation_error`` for an objective the study does not have or a
    bad filter; 404 ``not_found`` for an unknown study."""
    cache = _cache(store)

    def fn(conn: Connection) -> StudyImportance | _Sample:
        revision = int(find_study(conn, tenant_id, study_id, columns=("revision",)).revision)
        parsed = store.parsed_study(conn, study_id)
        name = objective if objective is not None else parsed.objective_names[0]
        if name not in parsed.objective_names:
            message = f"objective: {name!r} is not one of {list(parsed.objective_names)}"
            raise ApiError(
                ProblemCode.VALIDATION_ERROR,
                message,
                errors=[{"field": "objective", "message": message}],
            )
        where = filter_clauses(parsed, trial_filter)
        key: _Key = (study_id, revision, name, trial_filter)
        with cache.lock:
            if key in cache.entries:
                cache.entries.move_to_end(key)
                return cache.entries[key]
        rows = objective_rows(conn, study_id, [name], ("completed",), where)
        told = [(r.number, r[-1]) for r in rows if r[-1] is not None and np.isfinite(r[-1])]
        numbers = [number for number, _ in told]
        values = [float(value) for _, value in told]
        n = len(told)
        kept = evenly(n, MAX_TRIALS).tolist() if n > MAX_TRIALS else list(range(n))
        used = [numbers[i] for i in kept]
        params = trial_params(conn, study_id, used)
        X = np.array([parsed.space.encode(params[n]) for n in used]).reshape(len(used), -1)
        names = [p.name for p in parsed.space.free]
        return _Sample(key, names, X, np.array([values[i] for i in kept]), len(numbers))

    found = store.db.read(fn)
    if isinstance(found, StudyImportance):
        return found
    result = _computed(found)
    with cache.lock:
        cache.entries[found.key] = result
        while len(cache.entries) > CACHE_SIZE:
            cache.entries.popitem(last=False)
    return result


def _computed(sample: _Sample) -> StudyImportance:
    _, revision, name, _ = sample.key
    importances: list[ParameterImportance] = []
    if len(sample.y) >= MIN_TRIALS:
        shares = fanova_importances(sample.X, sample.y, seed=SEED)
        importances = [
            ParameterImportance(name=sample.names[j], importance=float(shares[j]))
            for j in np.argsort(-shares, kind="stable").tolist()
        ]
    return StudyImportance(
        objective=name,
        method=METHOD,
        revision=revision,
        matched=sample.matched,
        used=len(sample.y),
        min_trials=MIN_TRIALS,
        importances=importances,
    )


def _cache(store: Store) -> _Cache:
    with _caches_lock:
        cache = _caches.get(store)
        if cache is None:
            cache = _caches[store] = _Cache(OrderedDict(), threading.Lock())
        return cache
