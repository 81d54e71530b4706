"""Export a study (its config, trials, measurements and engine state) as one JSON document or
as CSV, and import such a document as a new study."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from client.models import FINISHED_STATES, StudyCreate, StudyExport, StudyPublic, TrialExport
from engines.errors import SpaceError
from service.errors import ApiError, ProblemCode
from service.idempotency import IdemKey
from service.notes import stored_note
from service.problem import ParsedStudy
from service.store import Answer, Store, find_study, measurements_t, studies_t, trials_t, utcnow
from service.studies import find_live, insert_study, study_with_stats, validate_config
from service.trials import validate_results
from service.wire import study_export


def export_study(store: Store, tenant_id: int, study_id: int) -> StudyExport:
    """The study as a document that ``import_study`` turns into a new study."""

    def fn(conn: Connection) -> StudyExport:
        row = find_study(conn, tenant_id, study_id)
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
        return study_export(row, trials, measurements)

    return store.db.read(fn)


def export_csv(store: Store, tenant_id: int, study_id: int) -> str:
    """The study's trials as CSV, one row per trial: number, state, then params, objective
    values and constraints, the reason and the note; text that would start a spreadsheet
    formula is quoted (``csv_cell``)."""
    export = export_study(store, tenant_id, study_id)
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
            "note",
        ]
    )
    for t in export.trials:
        writer.writerow(
            [
                t.number,
                t.state,
                *(csv_cell(t.params.get(n)) for n in params),
                *((t.values or {}).get(n) for n in objectives),
                *((t.constraints or {}).get(n) for n in constraints),
                csv_cell(t.reason),
                csv_cell(t.note),
            ]
        )
    return out.getvalue()


#: How a spreadsheet recognizes a formula: a cell starting with one of these is computed.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A cell that a spreadsheet shows as written: text (a parameter's choice, a reason, a
    note) that would start a formula gets a leading apostrophe (OWASP's advice against CSV
    injection); numbers are written as they are, ``None`` as an empty cell."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return f"'{value}"
    return value


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
    parsed = validate_config(study)
    numbers = [t.number for t in body.trials]
    if len(set(numbers)) != len(numbers):
        raise ApiError(ProblemCode.INVALID_IMPORT, "trial numbers in the export are not unique")
    for t in body.trials:
        steps = [m.step for m in t.measurements]
        if len(set(steps)) != len(steps):
            raise ApiError(
                ProblemCode.INVALID_IMPORT, f"trial {t.number} repeats a measurement step"
            )

    def fn(conn: Connection) -> tuple[int, StudyPublic]:
        if find_live(conn, tenant_id, study.name) is not None:
            raise ApiError(
                ProblemCode.STUDY_EXISTS,
                f"a study named {study.name!r} exists; import under another name (?name=...)",
            )
        study_id = insert_study(conn, tenant_id, study)
        now = utcnow()
        seqs = _completion_seqs(body.trials)
        for t in body.trials:
            _insert_imported(conn, parsed, study_id, t, now, seqs.get(t.number))
        conn.execute(
            update(studies_t)
            .where(studies_t.c.id == study_id)
            .values(
                next_trial_number=max(numbers, default=-1) + 1,
                # At least every completed_seq given out, as if each trial finished in turn.
                revision=max(len(seqs), 1),
                engine_state=body.engine_state,
                ask_count=body.engine_state_version,
                notes=stored_note(body.notes),
            )
        )
        return 201, study_with_stats(store, conn, find_study(conn, tenant_id, study_id))

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
    parsed: ParsedStudy,
    study_id: int,
    t: TrialExport,
    now: Any,
    completed_seq: int | None,
) -> None:
    try:
        params = parsed.space.validate(t.params)
    except SpaceError as exc:
        raise ApiError(ProblemCode.INVALID_IMPORT, f"trial {t.number}: {exc}") from exc
    state = "stale" if t.state == "running" else t.state
    values = constraints = feasible = None
    if state == "completed":
        values, cons, feasible = validate_results(parsed, t.values, t.constraints or {})
        constraints = cons or None
    trial_id = conn.execute(
        insert(trials_t)
        .values(
            study_id=study_id,
            number=t.number,
            state=state,
            params=params,
            x=np.ascontiguousarray(parsed.space.encode(params)).tobytes(),
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
            note=stored_note(t.note),
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
