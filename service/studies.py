"""Studies: get-or-create by name, read, list, update, soft delete; best, export, import."""

from __future__ import annotations

import csv
import io
import secrets
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection, Row

from client.models import (
    FINISHED_STATES,
    BestPublic,
    StudiesPage,
    StudyConfig,
    StudyCreate,
    StudyExport,
    StudyPublic,
    StudyUpdate,
    TrialExport,
    TrialPublic,
)
from engines.errors import EngineOptionsError, EngineUnsupported, SpaceError
from engines.metrics import hypervolume, loo_emd, non_dominated
from service.errors import conflict, invalid, not_found
from service.idempotency import IdemKey
from service.problem import StudySpec, build_spec
from service.store import (
    Answer,
    Store,
    get_study_row,
    measurements_t,
    studies_t,
    study_public,
    trial_counts,
    trial_public,
    trials_t,
    utcnow,
)
from service.trials import validate_results


def validate_config(config: StudyConfig) -> StudySpec:
    """Raises: ApiError 422 ``invalid_search_space``, ``invalid_engine``,
    ``engine_unsupported`` or ``invalid_study``."""
    try:
        return build_spec(config)
    except SpaceError as exc:
        raise invalid("invalid_search_space", str(exc)) from exc
    except EngineOptionsError as exc:
        raise invalid("invalid_engine", str(exc)) from exc
    except EngineUnsupported as exc:
        raise invalid("engine_unsupported", str(exc)) from exc
    except ValueError as exc:
        raise invalid("invalid_study", str(exc)) from exc


def _config_of(body: StudyCreate) -> dict[str, Any]:
    return StudyConfig.model_validate(body.model_dump(exclude={"name", "metadata"})).model_dump(
        mode="json"
    )


def _find_live(conn: Connection, tenant_id: int, name: str) -> Row | None:
    return conn.execute(
        select(studies_t).where(
            studies_t.c.tenant_id == tenant_id,
            studies_t.c.name == name,
            studies_t.c.deleted_at.is_(None),
        )
    ).first()


def _insert_study(conn: Connection, tenant_id: int, body: StudyCreate) -> int:
    config = _config_of(body)
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
            engine_state_version=0,
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
        existing = _find_live(conn, tenant_id, body.name)
        if existing is not None:
            wanted = _config_of(body)
            stored = dict(existing.config)
            if body.seed is None:
                stored.pop("seed", None)
                wanted.pop("seed", None)
            if stored != wanted:
                raise conflict(
                    "study_exists",
                    f"a study named {body.name!r} exists with a different configuration; "
                    "choose another name or delete that study",
                    study_id=existing.id,
                )
            return 200, _public(store, conn, existing)
        study_id = _insert_study(conn, tenant_id, body)
        return 201, _public(store, conn, get_study_row(conn, tenant_id, study_id))

    return store.write(tenant_id, idem, fn)


def _public(store: Store, conn: Connection, row: Row) -> StudyPublic:
    spec = store.spec(conn, row.id)
    best, _ = _best_trials(conn, row.id, spec)
    best_values = best[0].values if len(spec.objective_names) == 1 and best else None
    return study_public(row, trial_counts(conn, row.id), best_values)


def get_study(store: Store, tenant_id: int, study_id: int) -> StudyPublic:
    return store.db.read(lambda c: _public(store, c, get_study_row(c, tenant_id, study_id)))


def list_studies(store: Store, tenant_id: int, after: int | None, limit: int) -> StudiesPage:
    def fn(conn: Connection) -> StudiesPage:
        query = select(studies_t).where(
            studies_t.c.tenant_id == tenant_id, studies_t.c.deleted_at.is_(None)
        )
        if after is not None:
            query = query.where(studies_t.c.id > after)
        rows = conn.execute(query.order_by(studies_t.c.id).limit(limit + 1)).all()
        data = [_public(store, conn, r) for r in rows[:limit]]
        return StudiesPage(data=data, next_cursor=str(data[-1].id) if len(rows) > limit else None)

    return store.db.read(fn)


def update_study(
    store: Store, tenant_id: int, study_id: int, body: StudyUpdate, idem: IdemKey | None
) -> Answer:
    """Change the state and merge metadata (a key set to null is removed)."""

    def fn(conn: Connection) -> tuple[int, StudyPublic]:
        row = get_study_row(conn, tenant_id, study_id, lock=True)
        values: dict[str, Any] = {"revision": row.revision + 1, "updated_at": utcnow()}
        if body.state is not None:
            values["state"] = body.state
        if body.metadata is not None:
            merged = {**row.metadata, **body.metadata}
            values["metadata"] = {k: v for k, v in merged.items() if v is not None}
        conn.execute(update(studies_t).where(studies_t.c.id == study_id).values(**values))
        return 200, _public(store, conn, get_study_row(conn, tenant_id, study_id))

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
                raise not_found(f"study {study_id}")

    store.db.write(fn)
    # This process frees the arrays now; others evict them in time (the study is never
    # asked again, so their entries are only unused memory).
    store.history.forget(study_id)


# --- best ---------------------------------------------------------------------------------


def _best_trials(
    conn: Connection, study_id: int, spec: StudySpec
) -> tuple[list[TrialPublic], np.ndarray]:
    """The best feasible trial or the feasible non-dominated set, and their unit-cube points
    ``(n, d)``."""
    # Rank on the values alone; only the winners are read whole.
    scored = conn.execute(
        select(trials_t.c.id, trials_t.c["values"])
        .where(
            trials_t.c.study_id == study_id,
            trials_t.c.state == "completed",
            trials_t.c.feasible.is_(True),
        )
        .order_by(trials_t.c.number)
    ).all()
    d = spec.problem.d
    if not scored:
        return [], np.zeros((0, d))
    Y = np.array([[r.values[n] for n in spec.objective_names] for r in scored]) * spec.signs
    if len(spec.objective_names) == 1:
        ids = [scored[int(np.argmin(Y[:, 0]))].id]
    else:
        ids = [r.id for r, keep in zip(scored, non_dominated(Y), strict=True) if keep]
    rows = conn.execute(
        select(trials_t).where(trials_t.c.id.in_(ids)).order_by(trials_t.c.number)
    ).all()
    X = np.array([np.frombuffer(r.x, dtype=np.float64) for r in rows]).reshape(len(rows), d)
    return [trial_public(r) for r in rows], X


def _least_violating(
    conn: Connection, study_id: int, spec: StudySpec
) -> tuple[TrialPublic | None, float | None]:
    """The completed (infeasible) trial of least total violation and that violation, or
    ``(None, None)`` when no trial is completed. The first by number wins a tie."""
    scored = conn.execute(
        select(trials_t.c.id, trials_t.c.constraints)
        .where(trials_t.c.study_id == study_id, trials_t.c.state == "completed")
        .order_by(trials_t.c.number)
    ).all()
    if not scored or not spec.constraint_names:
        return None, None
    violations = [sum(max(v, 0.0) for v in spec.constraint_slack(r.constraints)) for r in scored]
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
        get_study_row(conn, tenant_id, study_id)
        spec = store.spec(conn, study_id)
        trials, X = _best_trials(conn, study_id, spec)
        if not trials:
            least, violation = _least_violating(conn, study_id, spec)
            return BestPublic(trials=[], least_violating=least, total_violation=violation)
        if len(spec.objective_names) == 1:
            return BestPublic(trials=trials, feasible_found=True)
        spread = loo_emd(X)
        ref = spec.problem.reference_point
        if ref is None:
            return BestPublic(trials=trials, feasible_found=True, pareto_set_loo_emd=spread)
        assert all(t.values is not None for t in trials)
        Y = np.array([[t.values[n] for n in spec.objective_names] for t in trials])  # type: ignore[index]
        return BestPublic(
            trials=trials,
            feasible_found=True,
            hypervolume=hypervolume(Y.reshape(-1, len(ref)) * spec.signs, ref),
            reference_point={o.name: o.reference for o in spec.config.objectives},  # type: ignore[misc]
            pareto_set_loo_emd=spread,
        )

    return store.db.read(fn)


# --- export and import --------------------------------------------------------------------


def export_study(store: Store, tenant_id: int, study_id: int) -> StudyExport:
    def fn(conn: Connection) -> StudyExport:
        row = get_study_row(conn, tenant_id, study_id)
        trials = conn.execute(
            select(trials_t).where(trials_t.c.study_id == study_id).order_by(trials_t.c.number)
        ).all()
        measurements: dict[int, list[dict[str, Any]]] = {}
        for m in conn.execute(
            select(measurements_t)
            .join(trials_t, trials_t.c.id == measurements_t.c.trial_id)
            .where(trials_t.c.study_id == study_id)
            .order_by(measurements_t.c.step)
        ):
            measurements.setdefault(m.trial_id, []).append(
                {"step": m.step, "values": m.values, "checkpoint": m.checkpoint}
            )
        study = StudyCreate.model_validate(
            {**row.config, "name": row.name, "metadata": row.metadata}
        )
        return StudyExport(
            study=study,
            engine_state=row.engine_state,
            engine_state_version=row.engine_state_version,
            trials=[
                TrialExport(
                    number=t.number,
                    state=t.state,
                    params=t.params,
                    values=t.values,
                    constraints=t.constraints,
                    reason=t.reason,
                    retries=t.retries,
                    details=t.details,
                    unit=t.unit,
                    metadata=t.metadata,
                    measurements=measurements.get(t.id, []),
                    created_at=t.created_at,
                    started_at=t.started_at,
                    completed_at=t.completed_at,
                )
                for t in trials
            ],
        )

    return store.db.read(fn)


def export_csv(export: StudyExport) -> str:
    """One row per trial: number, state, then params, objective values and constraints."""
    study = export.study
    params = [p.name for p in study.parameters]
    objectives = [o.name for o in study.objectives]
    constraints = [c.name for c in study.constraints]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        [
            "number",
            "state",
            *(f"params.{n}" for n in params),
            *(f"values.{n}" for n in objectives),
            *(f"constraints.{n}" for n in constraints),
            "reason",
        ]
    )
    for t in export.trials:
        writer.writerow(
            [
                t.number,
                t.state,
                *(t.params.get(n) for n in params),
                *((t.values or {}).get(n) for n in objectives),
                *((t.constraints or {}).get(n) for n in constraints),
                t.reason or "",
            ]
        )
    return out.getvalue()


def import_study(
    store: Store, tenant_id: int, body: StudyExport, name: str | None, idem: IdemKey | None
) -> Answer:
    """Create a new study from an export, with the same trial numbers, states and results.

    Trials that were running when exported come back as ``stale`` (no worker holds them here).

    Raises:
        ApiError: 409 ``study_exists`` when a live study has the name; 422 when a trial does
            not fit the study (bad parameters or results, repeated numbers).
    """
    study = (
        StudyCreate.model_validate({**body.study.model_dump(), "name": name})
        if name
        else body.study
    )
    spec = validate_config(study)
    numbers = [t.number for t in body.trials]
    if len(set(numbers)) != len(numbers):
        raise invalid("invalid_import", "trial numbers in the export are not unique")
    for t in body.trials:
        steps = [m.step for m in t.measurements]
        if len(set(steps)) != len(steps):
            raise invalid("invalid_import", f"trial {t.number} repeats a measurement step")

    def fn(conn: Connection) -> tuple[int, StudyPublic]:
        if _find_live(conn, tenant_id, study.name) is not None:
            raise conflict(
                "study_exists",
                f"a study named {study.name!r} exists; import under another name (?name=...)",
            )
        study_id = _insert_study(conn, tenant_id, study)
        now = utcnow()
        seqs = _completion_seqs(body.trials)
        for t in body.trials:
            _insert_imported(conn, spec, study_id, t, now, seqs.get(t.number))
        conn.execute(
            update(studies_t)
            .where(studies_t.c.id == study_id)
            .values(
                next_trial_number=max(numbers, default=-1) + 1,
                # At least every completed_seq given out, as if each trial finished in turn.
                revision=max(len(seqs), 1),
                engine_state=body.engine_state,
                engine_state_version=body.engine_state_version,
            )
        )
        return 201, _public(store, conn, get_study_row(conn, tenant_id, study_id))

    return store.write(tenant_id, idem, fn)


def _completion_seqs(trials: list[TrialExport]) -> dict[int, int]:
    """``completed_seq`` (1, 2, ...) by trial number for the finished trials, in the order they
    finished: by ``completed_at`` (naive times taken as UTC), then number; trials without a
    time first."""

    def key(t: TrialExport) -> tuple[bool, datetime, int]:
        at = t.completed_at
        if at is None:
            return False, _EPOCH, t.number
        return True, at if at.tzinfo is not None else at.replace(tzinfo=UTC), t.number

    finished = sorted((t for t in trials if t.state in FINISHED_STATES), key=key)
    return {t.number: seq for seq, t in enumerate(finished, start=1)}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _insert_imported(
    conn: Connection,
    spec: StudySpec,
    study_id: int,
    t: TrialExport,
    now: Any,
    completed_seq: int | None,
) -> None:
    try:
        params = spec.space.validate(t.params)
    except SpaceError as exc:
        raise invalid("invalid_import", f"trial {t.number}: {exc}") from exc
    state = "stale" if t.state == "running" else t.state
    values = constraints = feasible = None
    if state == "completed":
        values, cons, feasible = validate_results(spec, t.values, t.constraints or {})
        constraints = cons or None
    trial_id = conn.execute(
        insert(trials_t)
        .values(
            study_id=study_id,
            number=t.number,
            state=state,
            params=params,
            x=np.ascontiguousarray(spec.space.encode(params)).tobytes(),
            values=values,
            constraints=constraints,
            feasible=feasible,
            reason=t.reason,
            retries=t.retries,
            details=t.details,
            unit=t.unit.model_dump() if t.unit is not None else None,
            metadata=t.metadata,
            created_at=t.created_at or now,
            started_at=t.started_at,
            completed_at=t.completed_at,
            completed_seq=completed_seq,
        )
        .returning(trials_t.c.id)
    ).scalar_one()
    for m in t.measurements:
        conn.execute(
            insert(measurements_t).values(
                trial_id=trial_id,
                step=m.step,
                values=m.values,
                checkpoint=m.checkpoint,
                created_at=now,
            )
        )
