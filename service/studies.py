"""Studies: get-or-create by name, read, list, update, soft delete, and the best trials.

Export and import are ``service.transfer``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.elements import ColumnElement

from client.models import (
    BestPublic,
    StudiesPage,
    StudyConfig,
    StudyCreate,
    StudyPublic,
    StudyUpdate,
    TrialPublic,
)
from engines.errors import EngineError
from engines.limits import check_problem
from engines.metrics import hypervolume, loo_emd, non_dominated
from service.errors import ApiError, ProblemCode, engine_error
from service.idempotency import IdemKey
from service.notes import stored_note
from service.problem import SETTINGS, ParsedStudy, definition, parse_study
from service.store import Answer, Store, find_study, studies_t, trials_t, utcnow
from service.wire import study_public, trial_public


def validate_config(config: StudyConfig) -> ParsedStudy:
    """Raises: ApiError 422 ``invalid_search_space``, ``invalid_engine``,
    ``engine_unsupported``, ``engine_work_too_large`` (more parameters than the engine takes,
    ``engines.limits``) or ``invalid_study``."""
    try:
        parsed = parse_study(config)
        check_problem(parsed.engine, parsed.problem)
        return parsed
    except EngineError as exc:
        raise engine_error(exc) from exc
    except ValueError as exc:
        raise ApiError(ProblemCode.INVALID_STUDY, str(exc)) from exc


def config_of(body: StudyCreate) -> dict[str, Any]:
    """The study's config column: its ``StudyConfig`` and its settings (``max_trials``,
    ``ask_time_budget``, ``max_staleness``) that are set."""
    config = StudyConfig.model_validate(
        body.model_dump(exclude={"name", "metadata", *SETTINGS})
    ).model_dump(mode="json")
    settings = {key: getattr(body, key) for key in SETTINGS if getattr(body, key) is not None}
    return {**config, **settings}


def find_live(conn: Connection, tenant_id: int, name: str) -> Row | None:
    return conn.execute(
        select(studies_t).where(
            studies_t.c.tenant_id == tenant_id,
            studies_t.c.name == name,
            studies_t.c.deleted_at.is_(None),
        )
    ).first()


def insert_study(conn: Connection, tenant_id: int, body: StudyCreate) -> int:
    config = config_of(body)
    seed = body.seed if body.seed is not None else secrets.randbits(62)
    config["seed"] = seed
    now = utcnow()
    return conn.execute(
        insert(studies_t)
        .values(
            tenant_id=tenant_id,
            name=body.name,
            config=config,
            state="active",
            metadata=body.metadata,
            seed=seed,
            engine_state={},
            ask_count=0,
            revision=0,
            next_trial_number=0,
            created_at=now,
            updated_at=now,
        )
        .returning(studies_t.c.id)
    ).scalar_one()


def create_study(store: Store, tenant_id: int, body: StudyCreate, idem: IdemKey | None) -> Answer:
    """Create a study, or return the live study of that name when its config is the same.

    Returns 201 for a new study, 200 for an existing one.

    Raises:
        ApiError: 422 for an invalid config; 409 ``study_exists`` when a live study of that
            name has another config.
    """
    validate_config(body)

    def fn(conn: Connection) -> tuple[int, StudyPublic]:
        existing = find_live(conn, tenant_id, body.name)
        if existing is not None:
            # Settings (the budget) are not compared: PATCH changes them.
            wanted = definition(config_of(body))
            stored = definition(existing.config)
            if body.seed is None:
                stored.pop("seed", None)
                wanted.pop("seed", None)
            if stored != wanted:
                raise ApiError(
                    ProblemCode.STUDY_EXISTS,
                    f"a study named {body.name!r} exists with a different configuration; "
                    "choose another name or delete that study",
                    study_id=existing.id,
                )
            return 200, study_with_stats(store, conn, existing)
        study_id = insert_study(conn, tenant_id, body)
        return 201, study_with_stats(store, conn, find_study(conn, tenant_id, study_id))

    return store.write(tenant_id, idem, fn)


def study_with_stats(store: Store, conn: Connection, row: Row) -> StudyPublic:
    """The study as answered: with its trial counts and, for one objective, best values."""
    parsed = store.parsed_study(conn, row.id)
    best, _ = _best_trials(conn, row.id, parsed)
    best_values = best[0].values if len(parsed.objective_names) == 1 and best else None
    return study_public(row, _trial_counts(conn, row.id), best_values)


def get_study(store: Store, tenant_id: int, study_id: int) -> StudyPublic:
    return store.db.read(lambda c: study_with_stats(store, c, find_study(c, tenant_id, study_id)))


#: Orders of the study list.
StudySort = Literal["id", "name", "created_at", "updated_at", "trials"]


@dataclass(frozen=True)
class StudiesQuery:
    """Which studies the list serves (every filter optional) and in which order.

    ``states``: any of these states; ``engine``: the engine's name; ``q``: a case-insensitive
    substring of the name; ``sort``: one of ``StudySort`` (``name`` ignores case; ``trials``:
    the number of trials, of any state); ties in id order. In id order the cursor is the last
    id served (a page stays right while studies are added); in any other order it is the offset
    of the next page, as for trials.
    """

    states: Sequence[str] = ()
    engine: str | None = None
    q: str | None = None
    sort: StudySort = "id"
    descending: bool = False
    cursor: int | None = None
    limit: int = 100


def _study_order(sort: str) -> ColumnElement[Any]:
    if sort == "trials":
        return (
            select(func.count())
            .where(trials_t.c.study_id == studies_t.c.id)
            .correlate(studies_t)
            .scalar_subquery()
        )
    if sort == "name":
        return func.lower(studies_t.c.name)  # the same order on every database
    return studies_t.c[sort]


def list_studies(store: Store, tenant_id: int, page: StudiesQuery) -> StudiesPage:
    def fn(conn: Connection) -> StudiesPage:
        query = select(studies_t).where(
            studies_t.c.tenant_id == tenant_id, studies_t.c.deleted_at.is_(None)
        )
        if page.states:
            query = query.where(studies_t.c.state.in_(page.states))
        if page.engine:
            query = query.where(studies_t.c.config["engine"]["name"].as_string() == page.engine)
        if page.q:
            query = query.where(studies_t.c.name.icontains(page.q, autoescape=True))
        offset = 0
        if page.sort == "id" and page.cursor is not None:
            ids = studies_t.c.id
            query = query.where(ids < page.cursor if page.descending else ids > page.cursor)
        elif page.cursor is not None:
            offset = page.cursor
        key = _study_order(page.sort)
        ordered = (key.desc(), studies_t.c.id.desc()) if page.descending else (key, studies_t.c.id)
        rows = conn.execute(query.order_by(*ordered).offset(offset).limit(page.limit + 1)).all()
        data = [study_with_stats(store, conn, r) for r in rows[: page.limit]]
        next_cursor = None
        if len(rows) > page.limit:
            next_cursor = str(data[-1].id if page.sort == "id" else offset + page.limit)
        return StudiesPage(data=data, next_cursor=next_cursor)

    return store.db.read(fn)


def update_study(
    store: Store, tenant_id: int, study_id: int, body: StudyUpdate, idem: IdemKey | None
) -> Answer:
    """Change the state, merge metadata (a key set to null is removed), set or, with null,
    remove the settings ``max_trials``, ``ask_time_budget`` and ``max_staleness`` (kept in the
    config column), replace the notes."""

    def fn(conn: Connection) -> tuple[int, StudyPublic]:
        row = find_study(conn, tenant_id, study_id, for_update=True)
        values: dict[str, Any] = {"revision": row.revision + 1, "updated_at": utcnow()}
        if body.state is not None:
            values["state"] = body.state
        if body.metadata is not None:
            merged = {**row.metadata, **body.metadata}
            values["metadata"] = {k: v for k, v in merged.items() if v is not None}
        changed = [key for key in SETTINGS if key in body.model_fields_set]
        if changed:
            config = dict(row.config)
            for key in changed:
                if getattr(body, key) is None:
                    config.pop(key, None)
                else:
                    config[key] = getattr(body, key)
            values["config"] = config
        if body.notes is not None:
            values["notes"] = stored_note(body.notes)
        conn.execute(update(studies_t).where(studies_t.c.id == study_id).values(**values))
        return 200, study_with_stats(store, conn, find_study(conn, tenant_id, study_id))

    return store.write(tenant_id, idem, fn)


def delete_study(store: Store, tenant_id: int, study_id: int) -> None:
    """Soft delete: the study and its trials stay in the database but are no longer served.

    Deleting a deleted study succeeds again (a client retrying a DELETE whose answer was lost
    sees success); a study that never existed is a 404.
    """

    def fn(conn: Connection) -> None:
        now = utcnow()
        deleted = conn.execute(
            update(studies_t)
            .where(
                studies_t.c.id == study_id,
                studies_t.c.tenant_id == tenant_id,
                studies_t.c.deleted_at.is_(None),
            )
            .values(deleted_at=now, updated_at=now)
        ).rowcount
        if not deleted:
            exists = conn.execute(
                select(studies_t.c.id).where(
                    studies_t.c.id == study_id, studies_t.c.tenant_id == tenant_id
                )
            ).first()
            if exists is None:
                raise ApiError(ProblemCode.NOT_FOUND, f"study {study_id} does not exist")

    store.db.write(fn)
    # This process frees the arrays now; others evict them in time (the study is never
    # asked again, so their entries are only unused memory).
    store.history.forget(study_id)
    store.units.forget(study_id)


# --- best ---------------------------------------------------------------------------------


def _best_trials(
    conn: Connection, study_id: int, parsed: ParsedStudy
) -> tuple[list[TrialPublic], np.ndarray]:
    """The best feasible trial or the feasible non-dominated set, and their unit-cube points
    ``(n, d)``."""
    # Rank on the values alone; only the winners are read whole.
    feasible = select(trials_t.c.id).where(
        trials_t.c.study_id == study_id,
        trials_t.c.state == "completed",
        trials_t.c.feasible.is_(True),
    )
    d = parsed.problem.d
    if len(parsed.objective_names) == 1:
        # In SQL, so that a study read (every second by the dashboard) does not decode every
        # trial's values: the best value, the first by number on a tie.
        value = trials_t.c["values"][parsed.objective_names[0]].as_float()
        best_first = value.asc() if parsed.signs[0] > 0 else value.desc()
        ids = list(conn.scalars(feasible.order_by(best_first, trials_t.c.number).limit(1)))
    else:
        scored = conn.execute(
            feasible.add_columns(trials_t.c["values"]).order_by(trials_t.c.number)
        ).all()
        Y = np.array([[r.values[n] for n in parsed.objective_names] for r in scored])
        keep = non_dominated(Y.reshape(len(scored), len(parsed.signs)) * parsed.signs)
        ids = [r.id for r, kept in zip(scored, keep, strict=True) if kept]
    if not ids:
        return [], np.zeros((0, d))
    rows = conn.execute(
        select(trials_t).where(trials_t.c.id.in_(ids)).order_by(trials_t.c.number)
    ).all()
    X = np.array([np.frombuffer(r.x, dtype=np.float64) for r in rows]).reshape(len(rows), d)
    return [trial_public(r) for r in rows], X


def _least_violating(
    conn: Connection, study_id: int, parsed: ParsedStudy
) -> tuple[TrialPublic | None, float | None]:
    """The completed (infeasible) trial of least total violation and that violation, or
    ``(None, None)`` when no trial is completed. The first by number wins a tie."""
    scored = conn.execute(
        select(trials_t.c.id, trials_t.c.constraints)
        .where(trials_t.c.study_id == study_id, trials_t.c.state == "completed")
        .order_by(trials_t.c.number)
    ).all()
    if not scored or not parsed.constraint_names:
        return None, None
    violations = [sum(max(v, 0.0) for v in parsed.constraint_slack(r.constraints)) for r in scored]
    i = int(np.argmin(violations))
    row = conn.execute(select(trials_t).where(trials_t.c.id == scored[i].id)).one()
    return trial_public(row), float(violations[i])


def best(store: Store, tenant_id: int, study_id: int) -> BestPublic:
    """One objective: the best feasible trial. Several: the feasible non-dominated set, with
    its hypervolume when every objective has a reference, and its leave-one-out EMD
    (``engines.metrics.loo_emd``; see ``BestPublic``). With constraints and no feasible trial
    yet: no trials, ``feasible_found`` false, and the trial of least total violation.

    The true Pareto set is unknown to the service, so the EMD is taken of the observed set
    against itself: cheap (one pass over the Pareto-optimal trials), in the search space's own
    unit-cube coordinates, and comparable across the studies of one space."""

    def fn(conn: Connection) -> BestPublic:
        find_study(conn, tenant_id, study_id)
        parsed = store.parsed_study(conn, study_id)
        trials, X = _best_trials(conn, study_id, parsed)
        if not trials:
            least, violation = _least_violating(conn, study_id, parsed)
            return BestPublic(trials=[], least_violating=least, total_violation=violation)
        if len(parsed.objective_names) == 1:
            return BestPublic(trials=trials, feasible_found=True)
        spread = loo_emd(X)
        ref = parsed.problem.reference_point
        if ref is None:
            return BestPublic(trials=trials, feasible_found=True, pareto_set_loo_emd=spread)
        # The best trials are completed, so every one has values; the filter is for the type.
        told = [t.values for t in trials if t.values is not None]
        Y = np.array([[values[n] for n in parsed.objective_names] for values in told])
        return BestPublic(
            trials=trials,
            feasible_found=True,
            hypervolume=hypervolume(Y.reshape(-1, len(ref)) * parsed.signs, ref),
            reference_point={
                o.name: o.reference for o in parsed.config.objectives if o.reference is not None
            },
            pareto_set_loo_emd=spread,
        )

    return store.db.read(fn)


def _trial_counts(conn: Connection, study_id: int) -> dict[str, int]:
    rows = conn.execute(
        select(trials_t.c.state, func.count())
        .where(trials_t.c.study_id == study_id)
        .group_by(trials_t.c.state)
    )
    return {state: count for state, count in rows}
