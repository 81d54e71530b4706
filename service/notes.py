"""Notes: free text on a study (``StudyUpdate.notes``, applied by ``service.studies``) and on
a trial (``set_trial_note``). Notes annotate; they never change a trial's results, so a
finished trial takes a note too."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.engine import Connection

from client.models import TrialNote, TrialPublic
from service.idempotency import IdemKey
from service.store import (
    Answer,
    Store,
    bump_revision,
    find_study,
    trial_not_found,
    trials_t,
    utcnow,
)
from service.wire import trial_public


def stored_note(text: str | None) -> str | None:
    """What the database keeps of a note: ``None`` for an empty or missing one (no note)."""
    return text or None


def set_trial_note(
    store: Store, tenant_id: int, study_id: int, number: int, body: TrialNote, idem: IdemKey | None
) -> Answer:
    """Replace the trial's note (an empty one removes it) and bump the study's revision, so
    that open dashboards show it.

    Raises:
        ApiError: 404 ``not_found`` for the study, ``trial_not_found`` for the trial.
    """

    def fn(conn: Connection) -> tuple[int, TrialPublic]:
        find_study(conn, tenant_id, study_id)
        # The study row is locked before the trial row, in the order ask and tell take them.
        bump_revision(conn, study_id, utcnow())
        row = conn.execute(
            update(trials_t)
            .where(trials_t.c.study_id == study_id, trials_t.c.number == number)
            .values(note=stored_note(body.note))
            .returning(*trials_t.c)
        ).first()
        if row is None:
            raise trial_not_found(study_id, number)
        return 200, trial_public(row)

    return store.write(tenant_id, idem, fn)
