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
)
from client.errors import MaxTrialsReached
from client.models import TrialPublic

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

    def worker(self, index: int) -> Op[None]:
        worker_id = worker_name(index)
        while not self.stopped and self.budget.take():
            try:
                yield from self.trial(worker_id)
            except BaseException:
                self.stopped = True
                raise

    def trial(self, worker_id: str) -> Op[None]:
        try:
            trials = yield from ask(self.study, 1, worker_id=worker_id, lease_seconds=self.lease)
        except MaxTrialsReached:  # the study's own budget is spent: every worker stops
            self.stopped = True
            self.budget.release()
            return
        if not trials:  # a scheduler waiting for its generation: come back later
            self.budget.release()
            yield Sleep(1.0)
            return
        (trial,) = trials
        lease = Lease(self.study.id, trial.number, self.lease, worker_id)
        try:
            result = yield from evaluate(self.study, self.fn, dict(trial.params), lease)
        except GeneratorExit:
            raise
        except BaseException as exc:
            self.budget.done(ok=False)
            if not isinstance(exc, self.catch):
                raise
            return
        values, cons, problem = split_results(result, self.objectives, self.constraints)
        if problem is not None:
            yield from fail(self.study, trial.number, reason=problem)
            self.budget.done(ok=False)
            return
        told = yield from tell(self.study, trial.number, values, cons)
        value = None
        if told.values and len(self.objectives) == 1 and told.feasible is not False:
            value = told.values[self.objectives[0]]
        self.budget.done(ok=True, value=value)


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
    while max_units is None or done < max_units:
        answer = yield from ask_units(study, 1, worker_id=worker_id, lease_seconds=lease)
        if answer.finished:
            return done
        if not answer.trials:
            yield Sleep(answer.retry_after or 1.0)
            continue
        (trial,) = answer.trials
        unit_lease = Lease(study.id, trial.number, lease, worker_id)
        result, checkpoint = yield from evaluate(study, fn, trial, unit_lease, _unit_result)
        values, _, problem = split_results(result, objectives, [])
        if problem is not None:
            yield from fail(study, trial.number, reason=problem)
        else:
            yield from tell(study, trial.number, values, checkpoint=checkpoint)
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
