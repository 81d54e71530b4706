"""``optimize`` and ``train``: the loops of ask, the user's function, tell, written once as
operations (``client._operations``) that the sync and the async client both run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from client._base import Budget, split_results, worker_name
from client._operations import (
    Evaluate,
    Lease,
    Op,
    Parallel,
    Sleep,
    StudyHandle,
    ask,
    ask_units,
    fail,
    tell,
    tell_and_ask,
)
from client.errors import MaxTrialsReached
from client.models import AskResponse, ProblemCode, TrialPublic

Result = float | Mapping[str, float] | Sequence[float]
#: What ``optimize`` evaluates: parameters to a result (the async client also awaits a coroutine).
Objective = Callable[[dict[str, Any]], Result | Awaitable[Result]]
#: What ``train`` calls: a unit to its result and the reference of the checkpoint it saved.
Trainer = Callable[[TrialPublic], tuple[Result, str] | Awaitable[tuple[Result, str]]]


def optimize(
    study: StudyHandle,
    fn: Objective,
    n_trials: int,
    n_workers: int = 1,
    *,
    catch: tuple[type[BaseException], ...] = (),
    progress: bool = True,
    lease_seconds: float | None = None,
) -> Op[None]:
    """Run ask, ``fn(params)``, tell, until ``n_trials`` trials are told, on ``n_workers``
    threads (tasks with the async client, where ``fn`` may be a coroutine function). A heartbeat
    keeps each running trial's lease alive while ``fn`` works.

    ``fn`` returns a number (one objective), a list of objective values, or a dict naming
    objectives and constraint metrics. If ``fn`` raises, the trial is told as failed, and
    the error propagates unless its type is in ``catch``. It stops early, without error, when
    the study's ``max_trials`` is reached.
    """
    lease = lease_seconds or study.info.lease_seconds
    objectives = study.info.objectives
    goal = objectives[0].goal if len(objectives) == 1 else None
    run = Optimization(study, fn, Budget(n_trials, progress, goal), catch, lease)
    try:
        yield Parallel([run.worker(index) for index in range(n_workers)])
    finally:
        run.budget.finish()


class Optimization:
    """What the workers of one ``optimize`` call share: the function, the budget of trials, and
    whether a worker failed (the others then stop before their next trial)."""

    def __init__(
        self,
        study: StudyHandle,
        fn: Objective,
        budget: Budget,
        catch: tuple[type[BaseException], ...],
        lease: float,
    ) -> None:
        self.study, self.fn, self.budget, self.catch, self.lease = study, fn, budget, catch, lease
        self.objectives = [o.name for o in study.info.objectives]
        self.constraints = [c.name for c in study.info.constraints]
        self.stopped = False
        self.broken = False  # a worker raised: the others drop their pending trials

    def worker(self, index: int) -> Op[None]:
        worker_id = worker_name(index)
        # The trial handed out with the worker's last tell (tell-and-ask), its slot taken.
        pending: TrialPublic | None = None
        while (pending is not None and not self.broken) or (
            not self.stopped and self.budget.take()
        ):
            try:
                pending = yield from self.trial(worker_id, pending)
            except BaseException:
                self.stopped = self.broken = True
                raise

    def trial(self, worker_id: str, pending: TrialPublic | None = None) -> Op[TrialPublic | None]:
        """Evaluate ``pending`` (or a trial asked for now) and tell it; returns the next trial
        when the tell asked for one."""
        if pending is None:
            pending = yield from self.ask_one(worker_id)
            if pending is None:
                return None
        trial = pending
        lease = Lease(self.study.id, trial.number, self.lease, worker_id)
        try:
            result = yield from evaluate(self.study, self.fn, dict(trial.params), lease)
        except GeneratorExit:
            raise
        except BaseException as exc:
            self.budget.done(ok=False)
            if not isinstance(exc, self.catch):
                raise
            return None
        values, cons, problem = split_results(result, self.objectives, self.constraints)
        if problem is not None:
            yield from fail(self.study, trial.number, reason=problem)
            self.budget.done(ok=False)
            return None
        told, following = yield from self.tell_next(worker_id, trial.number, values, cons)
        value = None
        if told.values and len(self.objectives) == 1 and told.feasible is not False:
            value = told.values[self.objectives[0]]
        self.budget.done(ok=True, value=value)
        return following

    def ask_one(self, worker_id: str) -> Op[TrialPublic | None]:
        """A plain ask for one trial (its slot is taken); ``None`` when none came."""
        try:
            trials = yield from ask(self.study, 1, worker_id=worker_id, lease_seconds=self.lease)
        except MaxTrialsReached:  # the study's own budget is spent: every worker stops
            self.stopped = True
            self.budget.release()
            return None
        if not trials:  # a scheduler waiting for its generation: come back later
            self.budget.release()
            yield Sleep(1.0)
            return None
        return trials[0]

    def tell_next(
        self, worker_id: str, number: int, values: dict[str, float], cons: dict[str, float]
    ) -> Op[tuple[TrialPublic, TrialPublic | None]]:
        """Tell, and when the budget has room for another trial, ask for it in the same
        request (tell-and-ask); the next trial, or ``None`` (the next iteration then asks)."""
        if self.stopped or not self.budget.take():
            return (yield from tell(self.study, number, values, cons)), None
        told = yield from tell_and_ask(
            self.study, number, values, cons, worker_id=worker_id, lease_seconds=self.lease
        )
        following = told.next
        if following is not None and following.trials:
            return told, following.trials[0]
        self.budget.release()
        problem = following.problem if following is not None else None
        if problem is not None and problem.code == ProblemCode.MAX_TRIALS_REACHED:
            self.stopped = True
        return told, None


def train(
    study: StudyHandle,
    fn: Trainer,
    *,
    worker_id: str | None = None,
    lease_seconds: float | None = None,
    max_units: int | None = None,
) -> Op[int]:
    """Work a scheduler study's (``pbt``, ``ipbt``) units until it is finished.

    ``fn(trial)`` trains one unit: it loads ``trial.unit.start`` (applying
    ``trial.unit.transform``), sets ``trial.params``, reports the objective at
    ``trial.unit.from_step`` first when ``trial.unit.eval_before`` is set, trains to
    ``trial.unit.to_step``, saves a new checkpoint and returns ``(result, checkpoint
    reference)``; with the async client it may be a coroutine function. While a generation is
    still training, this waits the server's ``retry_after``. If ``fn`` raises, the unit is told
    as failed and the error propagates. Returns the number of units trained (at most
    ``max_units``).
    """
    objectives = [o.name for o in study.info.objectives]
    lease = lease_seconds or study.info.lease_seconds
    worker_id = worker_id or worker_name(0)
    done = 0
    answer: AskResponse | None = None  # the units handed out with the last tell, if any
    while max_units is None or done < max_units:
        if answer is None:
            answer = yield from ask_units(study, 1, worker_id=worker_id, lease_seconds=lease)
        if answer.finished:
            return done
        if not answer.trials:
            yield Sleep(answer.retry_after or 1.0)
            answer = None
            continue
        (trial,) = answer.trials
        answer = None
        unit_lease = Lease(study.id, trial.number, lease, worker_id)
        result, checkpoint = yield from evaluate(study, fn, trial, unit_lease, _unit_result)
        values, _, problem = split_results(result, objectives, [])
        if problem is not None:
            yield from fail(study, trial.number, reason=problem)
        elif max_units is not None and done + 1 >= max_units:
            yield from tell(study, trial.number, values, checkpoint=checkpoint)
        else:
            told = yield from tell_and_ask(
                study,
                trial.number,
                values,
                checkpoint=checkpoint,
                worker_id=worker_id,
                lease_seconds=lease,
            )
            # Without a problem, the next units (or the wait, or the end) came with the tell;
            # with one, a plain ask next time answers it as it would have.
            if told.next is not None and told.next.problem is None:
                answer = told.next
        done += 1
    return done


def evaluate(
    study: StudyHandle,
    fn: Callable[[Any], Any],
    arg: Any,
    lease: Lease,
    then: Callable[[Any], Any] = lambda answer: answer,
) -> Op[Any]:
    """``then(fn(arg))`` while heartbeats keep ``lease`` alive; if it raises, the trial is told
    as failed and the error propagates."""
    try:
        return then((yield Evaluate(fn, arg, lease)))
    except GeneratorExit:  # closed while waiting (its task was cancelled): nothing to tell
        raise
    except BaseException as exc:
        yield from fail(study, lease.number, reason=repr(exc))
        raise


def _unit_result(answer: Any) -> tuple[Result, str]:
    result, checkpoint = answer
    return result, checkpoint
