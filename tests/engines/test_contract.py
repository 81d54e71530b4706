"""The engine contract (engines/base.py), checked for every registered engine.

Registering an engine in ``engines.registry`` enrolls it here.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest

from engines.base import History, Problem
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


@pytest.fixture(params=engine_names())
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
            make_engine(engine_name).suggest(problem, history, 1, {}, np.random.default_rng(0))
        return
    before = copy.deepcopy(history)
    state: dict = {}
    for count in (1, 3):
        proposal = make_engine(engine_name).suggest(
            problem, history, count, state, np.random.default_rng(0)
        )
        assert proposal.X.shape == (count, problem.d)
        assert np.all((proposal.X >= 0) & (proposal.X <= 1))
        assert len(proposal.details) in (0, count)
        assert json.loads(json.dumps(proposal.state)) == proposal.state
        state = proposal.state
    for field in ("X", "Y", "C", "X_pending"):
        np.testing.assert_array_equal(getattr(history, field), getattr(before, field))


def test_does_not_change_the_state_it_was_given(engine_name):
    problem = PROBLEMS["single"]
    history = _history(problem, 12, pending=1)
    first = make_engine(engine_name).suggest(problem, history, 2, {}, np.random.default_rng(0))
    state = copy.deepcopy(first.state)
    make_engine(engine_name).suggest(problem, history, 2, first.state, np.random.default_rng(1))
    assert first.state == state


def test_same_seed_same_proposal(engine_name):
    problem = PROBLEMS["single"]
    history = _history(problem, 12, pending=1)
    a = make_engine(engine_name).suggest(problem, history, 2, {}, np.random.default_rng(5))
    b = make_engine(engine_name).suggest(problem, history, 2, {}, np.random.default_rng(5))
    np.testing.assert_array_equal(a.X, b.X)
    assert a.state == b.state


_FRESH_PROCESS = """
import json, sys
import numpy as np
sys.path.insert(0, ".")
from tests.engines.test_contract import PROBLEMS, _history
from engines.registry import make_engine
problem = PROBLEMS["single"]
history = _history(problem, 12, 1)
p = make_engine(sys.argv[1]).suggest(problem, history, 2, {}, np.random.default_rng(5))
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
    proposal = make_engine(engine_name).suggest(problem, history, 2, {}, np.random.default_rng(0))
    assert np.all(np.isfinite(proposal.X))


def test_unknown_options_are_rejected(engine_name):
    from engines.errors import EngineOptionsError

    with pytest.raises(EngineOptionsError, match="no option"):
        make_engine(engine_name, {"no_such_option": 1})


@pytest.mark.parametrize("n_observations", [2, 6])
@pytest.mark.parametrize(
    "name", [n for n in engine_names() if engine_class(n).uses_observations]
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
