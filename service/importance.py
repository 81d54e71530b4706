"""A study's parameter importance for one objective (``engines.importance``, fANOVA of a
random forest), computed on the server and cached per study revision.

The forest is fitted on at most ``MAX_TRIALS`` completed trials that pass the filter, spread
evenly over trial numbers (not biased to the best ones: importance is about the whole space
searched), so a 50,000-trial study answers as fast as a 2,000-trial one. Results are kept in
the store's chart cache (``Store.charts``), keyed by ``(study, revision, objective, filter)``:
a dashboard refreshing every second recomputes only when a tell moved the revision.
"""

from __future__ import annotations

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
SEED = 0


@dataclass(frozen=True)
class _Sample:
    """What the forest is fitted on: the free parameters' names, the trials in the unit cube
    and their values."""

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
    from the completed trials that pass ``trial_filter`` (``service.trial_fields``), kept in
    ``Store.charts`` per study revision. The forest is fitted outside the transaction that
    read the revision; a tell in between makes that entry one tell newer, which the next
    revision's replaces.

    Raises: ApiError 422 ``validation_error`` for an objective the study does not have or a
    bad filter; 404 ``not_found`` for an unknown study."""

    def revision_of(conn: Connection) -> tuple[int, str]:
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
        filter_clauses(parsed, trial_filter)  # a bad filter is a 422 even when cached
        return revision, name

    revision, name = store.db.read(revision_of)
    return store.charts.get(
        ("importance", study_id, revision, name, trial_filter),
        lambda: _computed(
            name,
            revision,
            store.db.read(lambda conn: _sample(store, conn, study_id, name, trial_filter)),
        ),
    )


def _sample(
    store: Store, conn: Connection, study_id: int, name: str, trial_filter: str | None
) -> _Sample:
    """At most ``MAX_TRIALS`` completed trials with a finite ``name``, spread evenly."""
    parsed = store.parsed_study(conn, study_id)
    where = filter_clauses(parsed, trial_filter)
    rows = objective_rows(conn, study_id, [name], ("completed",), where)
    told = [(r.number, r[-1]) for r in rows if r[-1] is not None and np.isfinite(r[-1])]
    n = len(told)
    kept = evenly(n, MAX_TRIALS).tolist() if n > MAX_TRIALS else list(range(n))
    used = [told[i][0] for i in kept]
    params = trial_params(conn, study_id, used)
    X = np.array([parsed.space.encode(params[number]) for number in used], dtype=np.float64)
    return _Sample(
        names=[p.name for p in parsed.space.free],
        X=X.reshape(len(used), -1) if used else X.reshape(0, 0),
        y=np.array([float(told[i][1]) for i in kept]),
        matched=n,
    )


def _computed(name: str, revision: int, sample: _Sample) -> StudyImportance:
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
