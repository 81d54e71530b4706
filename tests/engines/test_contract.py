"""The engine contract (engines/base.py), checked for every registered engine.

Registering an engine in ``engines.registry`` enrolls it here.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from client.models import Unit as UnitModel
from engines.base import Engine, History, Problem, Unit
from engines.errors import EngineUnsupported
from engines.registry import engine_class, engine_names, make_engine
from engines.space import CategoricalParam, FloatParam, IntParam, SearchSpace

SPACE = SearchSpace(
    [FloatParam("x", -1, 1), IntParam("n", 0, 5), CategoricalParam("c", ("a", "b", "c"))]
)


def _objective(X: np.ndarray) -> np.ndarray:
    return ((X - 0.3) ** 2).sum(axis=1, keepdims=True)


def _history(problem: Problem, n: int, pending: int, seed: int = 0) -> History:
    rng = np.random.default_rng(seed)
    X = problem.space.snap(rng.random((n, problem.d)))
    Y = np.hstack([_objective(X) + i for i in range(problem.n_objectives)])
    if problem.n_objectives > 1:
        Y[:, 1] = ((X - 0.7) ** 2).sum(axis=1)
    C = X[:, :1] - 0.8 if problem.n_constraints else np.zeros((n, 0))
    P = problem.space.snap(rng.random((pending, problem.d)))
    return History(X, Y, C, P)


PROBLEMS = {
    "single": Problem(SPACE),
    "two-objectives": Problem(SPACE, n_objectives=2),
    "constrained": Problem(SPACE, n_constraints=1),
}


#: Engines that propose points; schedulers (pbt, ipbt) hand out units and have their own
#: contract, at the end of this file.
POINT_ENGINES = [n for n in engine_names() if not engine_class(n).schedules_units]
SCHEDULERS = [n for n in engine_names() if engine_class(n).schedules_units]
T_MAX = 40
#: Units of 10 steps for both schedulers.
SCHEDULER_OPTIONS = {
    "pbt": {"t_max": T_MAX, "population_size": 4, "interval": 10},
    "ipbt": {"t_max": T_MAX, "population_size": 4, "initial_step_share": 0.25},
}


#: ``auto`` delegates to ``gp`` on these problems, and gp's contract is checked already: here it
#: delegates to ``random`` (a tiny expected budget), which checks auto's own wrapping (state,
#: seeds, shapes) at a small cost; tests/engines/test_auto.py covers its choices.
CONTRACT_OPTIONS: dict[str, dict[str, object]] = {"auto": {"expected_trials": 1}}


def contract_engine(name: str) -> Engine:
    return make_engine(name, CONTRACT_OPTIONS.get(name, {}))


@pytest.fixture(params=POINT_ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.parametrize("n_observations", [0, 1, 2, 12])
@pytest.mark.parametrize("problem_name", sorted(PROBLEMS))
def test_returns_exactly_count_points_in_the_cube(engine_name, problem_name, n_observations):
    problem = PROBLEMS[problem_name]
    history = _history(problem, n_observations, pending=2)
    limit = engine_class(engine_name).max_objectives
    if limit is not None and problem.n_objectives > limit:
        with pytest.raises(EngineUnsupported):
            contract_engine(engine_name).suggest(problem, history, 1, {}, np.random.default_rng(0))
        return
    before = copy.deepcopy(history)
    state: dict = {}
    for count in (1, 3):
        proposal = contract_engine(engine_name).suggest(
            problem, history, count, state, np.random.default_rng(0)
        )
        assert proposal.X.shape == (count, problem.d)
        assert np.all((proposal.X >= 0) & (proposal.X <= 1))
        assert len(proposal.details) in (0, count)
        json.dumps(proposal.details, allow_nan=False)  # stored as JSON: no NaN or infinity
        assert json.loads(json.dumps(proposal.state, allow_nan=False)) == proposal.state
        state = proposal.state
    for field in ("X", "Y", "C", "X_pending"):
        np.testing.assert_array_equal(getattr(history, field), getattr(before, field))


def test_a_constrained_study_with_nothing_feasible_yet_gets_json_details(engine_name):
    problem = PROBLEMS["constrained"]
    history = _history(problem, 12, pending=0)
    infeasible = History(history.X, history.Y, np.ones_like(history.C), history.X_pending)
    proposal = contract_engine(engine_name).suggest(
        problem, infeasible, 2, {}, np.random.default_rng(0)
    )
    assert proposal.X.shape == (2, problem.d)
    json.dumps(proposal.details, allow_nan=False)
    json.dumps(proposal.state, allow_nan=False)


def test_does_not_change_the_state_it_was_given(engine_name):
    problem = PROBLEMS["single"]
    history = _history(problem, 12, pending=1)
    first = contract_engine(engine_name).suggest(problem, history, 2, {}, np.random.default_rng(0))
    state = copy.deepcopy(first.state)
    contract_engine(engine_name).suggest(problem, history, 2, first.state, np.random.default_rng(1))
    assert first.state == state


def test_same_seed_same_proposal(engine_name):
    problem = PROBLEMS["single"]
    history = _history(problem, 12, pending=1)
    a = contract_engine(engine_name).suggest(problem, history, 2, {}, np.random.default_rng(5))
    b = contract_engine(engine_name).suggest(problem, history, 2, {}, np.random.default_rng(5))
    np.testing.assert_array_equal(a.X, b.X)
    assert a.state == b.state


_FRESH_PROCESS = """
import json, sys
import numpy as np
sys.path.insert(0, ".")
from tests.engines.test_contract import PROBLEMS, _history
from tests.engines.test_contract import contract_engine
problem = PROBLEMS["single"]
history = _history(problem, 12, 1)
p = contract_engine(sys.argv[1]).suggest(problem, history, 2, {}, np.random.default_rng(5))
print(json.dumps(p.X.tolist()))
"""


def test_same_seed_same_proposal_in_a_fresh_process(engine_name):
    runs = [
        subprocess.run(
            [sys.executable, "-c", _FRESH_PROCESS, engine_name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    assert len(json.loads(runs[0])) == 2


def test_a_one_parameter_space_gives_finite_points(engine_name):
    problem = Problem(SearchSpace([FloatParam("x", 0, 1)]))
    history = _history(problem, 5, pending=0)
    proposal = contract_engine(engine_name).suggest(
        problem, history, 2, {}, np.random.default_rng(0)
    )
    assert np.all(np.isfinite(proposal.X))


@pytest.mark.parametrize("name", engine_names())
def test_unknown_options_are_rejected(name):
    from engines.errors import EngineOptionsError

    with pytest.raises(EngineOptionsError, match="no option"):
        make_engine(name, {"no_such_option": 1})


@pytest.mark.parametrize("n_observations", [2, 6])
@pytest.mark.parametrize(
    "name", [n for n in POINT_ENGINES if engine_class(n).uses_observations]
)  # ``random`` reads no observations, and the service gives it no failed points either
def test_a_failed_point_is_never_proposed_again(name, n_observations):
    # Eight cells, most of them failed: an engine that ignored X_failed would land on one.
    problem = Problem(SearchSpace([IntParam("n", 0, 7)]))
    cells = problem.space.snap(np.linspace(0, 1, 8)[:, None])
    order = np.random.default_rng(n_observations).permutation(8)
    X, X_failed = cells[order[:n_observations]], cells[order[n_observations + 1 :]]
    history = History(X, _objective(X), np.zeros((n_observations, 0)), X[:0], X_failed)
    for seed in range(3):
        proposal = make_engine(name).suggest(problem, history, 1, {}, np.random.default_rng(seed))
        assert not set(problem.space.snap(proposal.X).ravel()) & set(X_failed.ravel())


# --- schedulers ---------------------------------------------------------------------------


def _complete(units: list[Unit], score) -> list[Unit]:
    """Every pending unit told: score ``score(unit)``, checkpoint ``ckpt-<number>``."""
    return [
        dataclasses.replace(u, state="completed", y=score(u), checkpoint=f"ckpt-{u.number}")
        if u.state == "pending"
        else u
        for u in units
    ]


def _asked(units: list[Unit], proposal) -> list[Unit]:
    return units + [
        Unit(number=len(units) + i, x=x, spec=doc, state="pending")
        for i, (x, doc) in enumerate(zip(proposal.X, proposal.units, strict=True))
    ]


@pytest.mark.parametrize("name", SCHEDULERS)
def test_a_scheduler_hands_out_valid_units_until_it_is_finished(name):
    problem = PROBLEMS["single"]
    engine = make_engine(name, SCHEDULER_OPTIONS[name])
    units: list[Unit] = []
    state: dict = {}
    for version in range(200):
        history = dataclasses.replace(History.empty(problem), units=tuple(units))
        before = copy.deepcopy(state)
        proposal = engine.suggest(problem, history, 3, state, np.random.default_rng([1, version]))
        assert state == before
        assert json.loads(json.dumps(proposal.state)) == proposal.state
        assert all(isinstance(n, int) for n in proposal.state["pinned"])
        assert proposal.X.shape[0] <= 3 and proposal.X.shape[1] == problem.d
        assert np.all((proposal.X >= 0) & (proposal.X <= 1))
        by_number = {u.number: u for u in units}
        for doc in proposal.units:
            unit = UnitModel.model_validate(doc)
            assert 0 <= unit.from_step < unit.to_step <= T_MAX
            if unit.start.kind == "checkpoint":
                parent = by_number[unit.start.trial]
                assert parent.state == "completed"
                assert unit.start.checkpoint == parent.checkpoint
                assert unit.from_step == parent.spec["to_step"]
        state = proposal.state
        units = _asked(units, proposal)
        if not len(proposal.X):
            if proposal.retry_after is None:
                break
            units = _complete(units, lambda u: float(np.sum(u.x**2)) - u.spec["to_step"])
    else:
        raise AssertionError("the scheduler never finished")
    assert all(u.state == "completed" for u in units)
    final = [u.spec["to_step"] for u in units]
    assert (
        max(final) <= T_MAX
        and sum(u.spec["to_step"] - u.spec["from_step"] for u in units) <= 4 * T_MAX
    )


@pytest.mark.parametrize("name", SCHEDULERS)
def test_a_scheduler_with_the_same_seed_gives_the_same_units(name):
    problem = PROBLEMS["single"]
    history = History.empty(problem)
    a, b = (
        make_engine(name, SCHEDULER_OPTIONS[name]).suggest(
            problem, history, 4, {}, np.random.default_rng(3)
        )
        for _ in range(2)
    )
    np.testing.assert_array_equal(a.X, b.X)
    assert a.units == b.units and a.state == b.state
