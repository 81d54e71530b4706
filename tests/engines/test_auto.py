"""The ``auto`` engine: its rules on a table of study shapes, the switch from ``gp`` at
``switch_at``, its state (JSON round trip, each delegate's state kept) and reproducibility.

The asks here stay inside ``gp``'s Sobol initial design (2 d + 1 points), so no GP is fitted."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engines.auto import AutoEngine
from engines.base import History, Problem, Proposal
from engines.errors import EngineOptionsError
from engines.registry import engine_names, make_engine
from engines.space import CategoricalParam, FixedParam, FloatParam, IntParam, SearchSpace


def _space(d: int, kind: str = "float") -> SearchSpace:
    if kind == "categorical":
        return SearchSpace([CategoricalParam(f"c{i}", ("a", "b", "c")) for i in range(d)])
    if kind == "int":
        return SearchSpace([IntParam(f"n{i}", 0, 9) for i in range(d)])
    params: list = [FloatParam(f"x{i}", 0.0, 1.0) for i in range(d)]
    if kind == "mixed":
        params[-1] = CategoricalParam("c", ("a", "b"))
    return SearchSpace(params)


# (d, kind, objectives, constraints, options, completed trials) -> (engine, rule)
SHAPES = [
    ((2, "float", 1, 0, {}, 0), ("gp", "small")),
    ((2, "float", 1, 0, {}, 299), ("gp", "small")),
    ((2, "float", 1, 0, {}, 300), ("turbo-enn", "large")),
    ((50, "float", 1, 0, {}, 5000), ("turbo-enn", "large")),
    ((3, "int", 1, 0, {}, 10), ("gp", "small")),
    ((3, "categorical", 1, 0, {}, 10), ("gp", "small")),
    ((3, "categorical", 1, 0, {}, 400), ("turbo-enn", "large")),
    ((3, "float", 1, 0, {"expected_trials": 7}, 0), ("random", "tiny-budget")),
    ((3, "float", 1, 0, {"expected_trials": 8}, 0), ("gp", "small")),
    ((3, "float", 2, 0, {"expected_trials": 5}, 0), ("random", "tiny-budget")),
    ((2, "float", 2, 0, {}, 0), ("pom", "objectives")),
    ((4, "float", 3, 1, {}, 1000), ("pom", "objectives")),
    ((3, "mixed", 2, 0, {}, 0), ("gp", "objectives-categorical")),
    ((4, "float", 1, 2, {}, 0), ("gp", "small")),
    ((4, "float", 1, 2, {}, 300), ("lcbo", "constraints-large")),
    ((10, "float", 1, 1, {}, 0), ("lcbo", "constraints-large")),
    ((9, "float", 1, 1, {}, 0), ("gp", "small")),
    ((30, "mixed", 1, 1, {}, 0), ("gp", "small")),
    ((30, "mixed", 1, 1, {}, 500), ("turbo-enn", "large")),
    ((2, "float", 1, 0, {"switch_at": 20}, 20), ("turbo-enn", "large")),
    ((2, "float", 1, 1, {"switch_at": 20}, 19), ("gp", "small")),
]


@pytest.mark.parametrize(("shape", "expected"), SHAPES, ids=[str(s[0]) for s in SHAPES])
def test_auto_chooses_by_the_study_shape(shape, expected):
    d, kind, m, k, options, n = shape
    problem = Problem(_space(d, kind), n_objectives=m, n_constraints=k)
    choice = AutoEngine(**options).choose(problem, n)
    assert (choice.name, choice.rule) == expected
    assert choice.reason and choice.name in engine_names()


def test_no_free_parameter_is_random():
    problem = Problem(SearchSpace([FixedParam("a", 1)]))
    assert AutoEngine().choose(problem, 1000).name == "random"


def test_bad_options_fail_at_creation():
    for options in ({"switch_at": 0}, {"expected_trials": 0}, {"noisy": "yes"}, {"foo": 1}):
        with pytest.raises(EngineOptionsError):
            make_engine("auto", options)


def _f(X: np.ndarray) -> np.ndarray:
    return ((X - 0.3) ** 2).sum(axis=1, keepdims=True)


def _run(engine: AutoEngine, problem: Problem, rounds: int, seed: int, via_json: bool = False):
    """Ask batches of 2 and tell them (constraint ``x0 - 0.5 <= 0`` when the problem has
    one); the proposals."""
    d, k = problem.d, problem.n_constraints
    X, Y, state = np.zeros((0, d)), np.zeros((0, 1)), {}
    proposals: list[Proposal] = []
    for r in range(rounds):
        C = np.repeat(X[:, :1] - 0.5, k, axis=1)
        history = History(X, Y, C, np.zeros((0, d)))
        proposal = engine.suggest(problem, history, 2, state, np.random.default_rng([seed, r]))
        proposals.append(proposal)
        state = json.loads(json.dumps(proposal.state)) if via_json else proposal.state
        X, Y = np.vstack([X, proposal.X]), np.vstack([Y, _f(proposal.X)])
    return proposals


PROBLEM = Problem(_space(3))  # gp's initial design: 7 Sobol points


def test_switches_from_gp_to_turbo_enn_at_switch_at():
    proposals = _run(AutoEngine(switch_at=6), PROBLEM, 5, seed=0)
    engines = [[d["auto"]["engine"] for d in p.details] for p in proposals]
    assert engines == [["gp"] * 2] * 3 + [["turbo-enn"] * 2] * 2
    assert proposals[2].details[0]["auto"]["reason"] == "4 trials < switch_at 6: exact GP BO"
    assert proposals[3].details[0]["auto"]["rule"] == "large"
    state = proposals[-1].state
    assert state["engine"] == "turbo-enn" and state["rule"] == "large"
    assert state["switches"] == [{"at": 6, "from": "gp", "to": "turbo-enn"}]
    # gp's state stays as it was at the switch; turbo-enn counted the 6 earlier trials as its
    # initial design (2 d = 6) and went straight to its trust region around the best one.
    assert state["engines"]["gp"] == proposals[2].state["engines"]["gp"]
    assert state["engines"]["turbo-enn"]["n_init_given"] == 6
    assert state["engines"]["turbo-enn"]["tr_start"] == 0
    assert [d["source"] for d in proposals[3].details] == ["turbo-enn"] * 2


def test_the_switch_happens_once_more_trials_are_completed_not_asked():
    problem = PROBLEM
    X = problem.space.snap(np.random.default_rng(0).random((5, 3)))
    history = History(X, _f(X), np.zeros((5, 0)), X[:1])  # 5 completed, 1 pending
    engine = AutoEngine(switch_at=6)
    assert (
        engine.suggest(problem, history, 1, {}, np.random.default_rng(0)).details[0]["auto"][
            "engine"
        ]
        == "gp"
    )


def test_the_state_survives_a_json_round_trip():
    direct = _run(AutoEngine(switch_at=6), PROBLEM, 5, seed=3)
    via_json = _run(AutoEngine(switch_at=6), PROBLEM, 5, seed=3, via_json=True)
    for a, b in zip(direct, via_json, strict=True):
        np.testing.assert_array_equal(a.X, b.X)
        assert a.details == b.details
    assert json.loads(json.dumps(direct[-1].state)) == via_json[-1].state


def test_same_seed_same_study_and_other_seed_other_points():
    a = _run(AutoEngine(switch_at=6), PROBLEM, 5, seed=7)
    b = _run(AutoEngine(switch_at=6), PROBLEM, 5, seed=7)
    c = _run(AutoEngine(switch_at=6), PROBLEM, 5, seed=8)
    assert all(np.array_equal(p.X, q.X) for p, q in zip(a, b, strict=True))
    assert a[-1].state == b[-1].state
    assert not np.array_equal(a[0].X, c[0].X)


def test_an_unusable_state_is_rebuilt():
    history = History.empty(PROBLEM)
    for state in ({"version": 99}, {"version": 1, "engine": 3}, {"engines": "x"}):
        proposal = AutoEngine().suggest(PROBLEM, history, 2, state, np.random.default_rng(0))
        assert proposal.state["engine"] == "gp" and proposal.state["switches"] == []
        assert set(proposal.state["engines"]) == {"gp"}


def test_noisy_is_passed_to_turbo_enn():
    proposals = _run(AutoEngine(switch_at=6, noisy=True), PROBLEM, 4, seed=1)
    assert proposals[3].details[0]["selection"] == "enn-mean-fitted"
    proposals = _run(AutoEngine(switch_at=6), PROBLEM, 4, seed=1)
    assert proposals[3].details[0]["selection"] == "enn-mean"


def test_a_tiny_budget_stays_random():
    proposals = _run(AutoEngine(expected_trials=5), PROBLEM, 3, seed=0)
    assert {d["auto"]["engine"] for p in proposals for d in p.details} == {"random"}
    assert proposals[-1].state["switches"] == []


def test_a_constrained_study_switches_from_gp_to_lcbo():
    problem = Problem(_space(3), n_constraints=1)
    proposals = _run(AutoEngine(switch_at=6), problem, 4, seed=2)
    engines = [p.details[0]["auto"]["engine"] for p in proposals]
    assert engines == ["gp", "gp", "gp", "lcbo"]
    state = proposals[-1].state
    assert state["switches"] == [{"at": 6, "from": "gp", "to": "lcbo"}]
    assert state["rule"] == "constraints-large" and "1 outcome constraint(s)" in state["reason"]
    # lcbo's initial design is 10 points: the 6 earlier trials count, 4 are left to hand out.
    assert [d["phase"] for d in proposals[-1].details] == ["initial"] * 2
    assert state["engines"]["lcbo"]["n_init_given"] == 8
