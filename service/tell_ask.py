"""Tell-and-ask: ``POST .../trials/{n}/tell`` with ``"ask"`` tells the trial, then asks for the
next trials, and answers both in one response (``client.models.TellResponse``).

The guarantees are those of a tell followed by an ask, each with its own idempotency key:

1. The tell commits first, in its own transaction (the engine of the ask then sees it). Its
   answer is stored under a key derived from the request's ``Idempotency-Key``.
2. The ask runs as ``POST .../ask`` does; its transaction stores the combined answer under the
   request's own key. If the ask cannot serve (study paused or completed, ``max_trials``
   reached, engine busy or failing), the tell stands: the combined answer carries the ask's
   problem in ``next.problem`` and is stored under the key in a transaction of its own.
3. A replay with the same key returns the stored combined answer and asks nothing. A retry
   after a crash between 1 and 2 finds the tell's answer under the derived key (the trial is
   finished, so the tell cannot run twice) and runs the ask once.

For an engine that reads no observations (random), nothing is computed outside a transaction:
the tell and the ask run in one (``_in_one``), one commit per pair. When the ask part cannot
serve, that transaction rolls back whole and the tell runs again alone, in a transaction that
also stores the combined answer (a savepoint around the ask part would cost two statements,
compiled anew each time, on every pair to spare one on the rare pair whose ask fails). In a
worker thread, such pairs queued on one study share one transaction (``service.write_groups``:
8 clients on one PostgreSQL study went from 150 to 193 pairs/s).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from http import HTTPStatus

from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool

from client.models import (
    AskResponse,
    NextTrials,
    ProblemCode,
    ProblemDetail,
    TellRequest,
    TellResponse,
)
from service import ask as asking
from service import trials
from service.errors import ApiError
from service.idempotency import IdemKey, replay
from service.store import Answer, Store

log = logging.getLogger("asktell")

#: The most trials a tell-and-ask on the event loop (``tell_soon``) asks for.
MAX_COUNT_ON_LOOP = 8
#: How long a tell for the event loop waits for other threads' writes in all.
LOCK_WAIT_SECONDS = 0.05


async def tell_soon(
    store: Store, tenant_id: int, study_id: int, number: int, req: TellRequest, idem: IdemKey | None
) -> Answer | TellResponse:
    """``tell``, on the event loop when it is one short transaction (``_short``) and the
    database lets it write there (``Database.writes_here``): handing it to a worker thread and
    back cost a tenth of its millisecond (tell-and-ask on one SQLite client +12 % pairs/s,
    bench/service_throughput.py). It waits for other threads' writes rather than going to a
    thread at once: one tell in a thread made the next ones find the lock taken too, and with 8
    clients nearly all went to threads. Otherwise in a worker thread, where waiting for a lock
    or the network holds up no other request."""
    if _short(store, study_id, req):
        async with store.db.writes_here(LOCK_WAIT_SECONDS) as held:
            if held:
                return tell(store, tenant_id, study_id, number, req, idem, grouped=False)
    return await run_in_threadpool(tell, store, tenant_id, study_id, number, req, idem)


def _short(store: Store, study_id: int, req: TellRequest) -> bool:
    """A tell, or a tell-and-ask of at most ``MAX_COUNT_ON_LOOP`` trials, on a study whose
    engine reads no observations (random)."""
    parsed = store.parsed_studies.peek(study_id)  # no read here: unknown means not short
    if parsed is None or parsed.engine.uses_observations:
        return False
    return req.ask is None or req.ask.count <= MAX_COUNT_ON_LOOP


def tell(
    store: Store,
    tenant_id: int,
    study_id: int,
    number: int,
    req: TellRequest,
    idem: IdemKey | None,
    grouped: bool = True,
) -> Answer | TellResponse:
    """A tell, and with ``req.ask`` the ask after it; see the module docstring. When the ask
    part needs the engine, the answer is the told trial: the caller runs ``ask_after`` with it
    in its turn of the study (``service.admission``). With ``grouped``, a tell-and-ask that is
    one transaction waits for its study's turn to write and may share a transaction with the
    writes queued behind it (``service.write_groups``); the event loop, which must not wait
    for a turn, writes it alone."""
    if req.ask is None:
        return trials.tell(store, tenant_id, study_id, number, req, idem)
    if not store.parsed_study_for(study_id).engine.uses_observations:
        if not grouped:
            return _in_one_alone(store, tenant_id, study_id, number, req, idem)
        return store.write_groups.write(
            study_id,
            tenant_id,
            idem,
            lambda c: _in_one(c, store, tenant_id, study_id, number, req),
            lambda: _in_one_alone(store, tenant_id, study_id, number, req, idem),
        )
    if idem is not None:
        stored = store.db.read(lambda c: replay(c, tenant_id, idem))
        if stored is not None:
            return stored
    told = trials.tell(store, tenant_id, study_id, number, req, _tell_key(idem))
    if told.status != 200:
        return told
    return TellResponse.model_validate_json(told.body)


def ask_after(
    store: Store,
    tenant_id: int,
    study_id: int,
    req: TellRequest,
    idem: IdemKey | None,
    trial: TellResponse,
) -> Answer:
    """The ask part of a tell-and-ask whose tell ``trial`` has committed."""
    assert req.ask is not None
    try:
        return asking.ask(store, tenant_id, study_id, req.ask, idem, _answer_with(trial))
    except ApiError as exc:
        return unserved(store, tenant_id, idem, trial, exc)
    except Exception:  # the tell stands; the worker learns why no trial came
        log.exception("the ask part of a tell-and-ask on study %s failed", study_id)
        problem = _problem(ProblemCode.INTERNAL_ERROR, "the ask failed; ask again", None)
    answer = trial.model_copy(update={"next": _unserved(problem)})
    return store.write(tenant_id, idem, lambda c: (200, answer))


def ask_after_from_pool(
    store: Store,
    tenant_id: int,
    study_id: int,
    req: TellRequest,
    idem: IdemKey | None,
    trial: TellResponse,
) -> Answer | None:
    """The ask part when the study's suggestion pool alone serves it (``asking.ask_from_pool``),
    tried before the ask waits for the study's turn; ``None`` when it does not."""
    assert req.ask is not None
    try:
        return asking.ask_from_pool(store, tenant_id, study_id, req.ask, idem, _answer_with(trial))
    except ApiError as exc:
        return unserved(store, tenant_id, idem, trial, exc)


def _answer_with(trial: TellResponse) -> Callable[[AskResponse], TellResponse]:
    """The combined answer: the told trial with the ask's answer as ``next``."""

    def wrap(response: AskResponse) -> TellResponse:
        return trial.model_copy(update={"next": NextTrials(**response.__dict__)})

    return wrap


def unserved(
    store: Store, tenant_id: int, idem: IdemKey | None, trial: TellResponse, exc: ApiError
) -> Answer:
    """The told trial with the problem of an ask that could not serve (``study_busy`` too),
    stored under the request's key."""
    problem = _problem(exc.code, exc.detail, exc.extra.get("retry_after"))
    answer = trial.model_copy(update={"next": _unserved(problem)})
    return store.write(tenant_id, idem, lambda c: (200, answer))


class _AskPartFailed(Exception):
    """The ask part of a one-transaction tell-and-ask could not serve: ``problem`` says why."""

    def __init__(self, problem: ProblemDetail) -> None:
        super().__init__(problem.detail)
        self.problem = problem


def _in_one_alone(
    store: Store, tenant_id: int, study_id: int, number: int, req: TellRequest, idem: IdemKey | None
) -> Answer:
    """``_in_one`` in a transaction of its own; when its ask part cannot serve, the tell alone
    with the ask's problem."""
    try:
        return store.write(
            tenant_id, idem, lambda c: _in_one(c, store, tenant_id, study_id, number, req)
        )
    except _AskPartFailed as failed:
        problem = failed.problem
        return store.write(
            tenant_id, idem, lambda c: _told(c, store, tenant_id, study_id, number, req, problem)
        )


def _in_one(
    conn: Connection, store: Store, tenant_id: int, study_id: int, number: int, req: TellRequest
) -> tuple[int, TellResponse]:
    """Tell and ask in one transaction, for an engine that reads no observations (random).
    A replay finds the trial finished or the key taken, and ``Store.write`` returns the stored
    answer.

    Raises: ``_AskPartFailed`` when the ask part cannot serve (the transaction rolls back)."""
    _, told = trials.finish(conn, store, tenant_id, study_id, number, req)
    assert req.ask is not None
    try:
        answer = asking.ask_inline(conn, store, tenant_id, study_id, req.ask)
    except ApiError as exc:
        raise _AskPartFailed(_problem(exc.code, exc.detail, exc.extra.get("retry_after"))) from exc
    except Exception as exc:  # the tell must stand all the same
        log.exception("the ask part of a tell-and-ask on study %s failed", study_id)
        raise _AskPartFailed(_problem(ProblemCode.INTERNAL_ERROR, "the ask failed", None)) from exc
    return 200, TellResponse(**told.__dict__, next=NextTrials(**answer.__dict__))


def _told(
    conn: Connection,
    store: Store,
    tenant_id: int,
    study_id: int,
    number: int,
    req: TellRequest,
    problem: ProblemDetail,
) -> tuple[int, TellResponse]:
    """The tell alone, answered with the ``problem`` of the ask part that could not serve."""
    _, told = trials.finish(conn, store, tenant_id, study_id, number, req)
    return 200, TellResponse(**told.__dict__, next=_unserved(problem))


def _unserved(problem: ProblemDetail) -> NextTrials:
    return NextTrials(
        trials=[], retry_after=(problem.model_extra or {}).get("retry_after"), problem=problem
    )


def _tell_key(idem: IdemKey | None) -> IdemKey | None:
    """The key the tell part's answer is stored under: derived from the request's, with a
    newline, which no header value holds, so no client key can equal it."""
    if idem is None:
        return None
    digest = hashlib.sha256(idem.key.encode()).hexdigest()
    return IdemKey(f"\ntell:{digest}", idem.request_hash)


def _problem(code: ProblemCode, detail: str, retry_after: float | None) -> ProblemDetail:
    body: dict[str, object] = {
        "title": HTTPStatus(code.status).phrase,
        "status": code.status,
        "detail": detail,
        "code": code,
    }
    if retry_after is not None:
        body["retry_after"] = retry_after
    return ProblemDetail.model_validate(body)
