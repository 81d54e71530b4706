"""The mwgd engine: the particles' targets, the batch selection, and the engine itself."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engines.base import History, Problem
from engines.bo import fit_gp
from engines.errors import EngineOptionsError
from engines.mwgd import Posterior, select_batch
from engines.registry import make_engine
from engines.space import FloatParam, SearchSpace

#: Small settings: every engine test runs in about a second.
SMALL = {"n_particles": 32, "steps": 60}


def _segment_problem(d: int = 2, m: int = 2) -> Problem:
    return Problem(SearchSpace([FloatParam(f"x{i}", 0, 1) for i in range(d)]), n_objectives=m)


_CORNERS = np.array([[0.2, 0.2, 0.2], [0.8, 0.8, 0.2], [0.2, 0.8, 0.8]])


def _objectives(X: np.ndarray, m: int = 2) -> np.ndarray:
    """``f_k = |x - a_k|^2``: the Pareto set is the convex hull of the ``a_k`` (for m = 2 the
    segment from (0.2, 0.2) to (0.8, 0.8) in the first two coordinates)."""
    d = X.shape[1]
    return np.stack([np.sum((X - _CORNERS[k, :d]) ** 2, axis=1) for k in range(m)], axis=1)


def _history(problem: Problem, n: int, seed: int = 0, pending: np.ndarray | None = None) -> History:
    X = np.random.default_rng(seed).random((n, problem.d))
    Y = _objectives(X, problem.n_objectives)
    P = np.zeros((0, problem.d)) if pending is None else pending
    return History(X, Y, np.zeros((n, 0)), P)


def _distance_to_segment(X: np.ndarray) -> np.ndarray:
    a, b = np.array([0.2, 0.2]), np.array([0.8, 0.8])
    t = np.clip((X - a) @ (b - a) / ((b - a) @ (b - a)), 0.0, 1.0)
    return np.linalg.norm(X - (a + t[:, None] * (b - a)), axis=1)


# --- the targets ------------------------------------------------------------------------------


def test_the_potential_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    X = rng.random((10, 2))
    Y = _objectives(X)
    models = [fit_gp(torch.as_tensor(X), -Y[:, k], []) for k in range(2)]
    constraint = [fit_gp(torch.as_tensor(X), X[:, 0] - 0.5, [])]
    posterior = Posterior(models, constraint, Y, kappa=1.0)
    Z = rng.standard_normal((3, 2))
    grad = posterior.potential_gradients(Z, temperature=0.5)
    assert grad.shape == (2, 3, 2)

    def potential(z: np.ndarray, k: int) -> float:
        x = 1.0 / (1.0 + np.exp(-z))
        opt, _, log_pof = posterior.values(x[None])
        f = (opt[0, k] - posterior.centre[k]) / posterior.spread[k] / 0.5
        return float(f - log_pof[0] - np.sum(np.log(x * (1 - x))))

    eps = 1e-5
    for k in range(2):
        for i in range(3):
            fd = [
                (potential(Z[i] + eps * e, k) - potential(Z[i] - eps * e, k)) / (2 * eps)
                for e in np.eye(2)
            ]
            np.testing.assert_allclose(grad[k, i], fd, rtol=1e-4, atol=1e-6)


# --- the batch ------------------------------------------------------------------------------


def test_the_batch_covers_both_ends_of_a_front_before_repeating_one():
    # Candidates: three near each end of a front, values on the line y0 + y1 = 1.
    ends = np.array([0.1, 0.11, 0.12, 0.9, 0.91, 0.92])
    candidates = np.column_stack([ends, np.zeros(6)])
    optimistic = np.column_stack([ends, 1.0 - ends])
    chosen, gains = select_batch(
        candidates,
        optimistic,
        np.ones(6),
        np.zeros(6),
        np.zeros((0, 2)),
        np.array([1.0, 1.0]),
        np.zeros((0, 2)),
        2,
    )
    assert {int(i) < 3 for i in chosen} == {True, False}
    assert all(g > 0 for g in gains)


def test_pending_values_count_as_chosen_and_blocked_points_are_skipped():
    candidates = np.array([[0.1, 0.0], [0.9, 0.0], [0.5, 0.5]])
    optimistic = np.array([[0.1, 0.9], [0.9, 0.1], [0.5, 0.5]])
    pending_values = np.array([[0.1, 0.9]])  # the first candidate's value is already pending
    chosen, _ = select_batch(
        candidates,
        optimistic,
        np.ones(3),
        np.zeros(3),
        pending_values,
        np.array([1.0, 1.0]),
        np.array([[0.9, 0.0]]),
        1,
    )
    # Candidate 0 adds nothing over the pending value, candidate 1 sits on a blocked point.
    assert chosen == [2]


def test_when_nothing_improves_the_batch_explores_the_largest_deviation():
    candidates = np.array([[0.1, 0.1], [0.5, 0.5], [0.9, 0.9]])
    optimistic = np.full((3, 2), 2.0)  # beyond the reference point: no improvement anywhere
    chosen, gains = select_batch(
        candidates,
        optimistic,
        np.array([0.1, 3.0, 1.0]),
        np.zeros(3),
        np.zeros((0, 2)),
        np.array([1.0, 1.0]),
        np.zeros((0, 2)),
        2,
    )
    assert chosen == [1, 2] and gains == [0.0, 0.0]


# --- the engine -----------------------------------------------------------------------------


def test_a_batch_lies_near_the_pareto_set_and_spreads_along_it():
    problem = _segment_problem()
    history = _history(problem, 16)
    proposal = make_engine("mwgd", SMALL).suggest(problem, history, 4, {}, np.random.default_rng(1))
    assert [det["source"] for det in proposal.details] == ["mwgd"] * 4
    # Random points are 0.2 from the segment on average; the batch is much closer ...
    assert np.mean(_distance_to_segment(proposal.X)) < 0.05
    # ... and not bunched: its points span a good part of the segment's length (0.85).
    along = proposal.X @ np.array([1.0, 1.0]) / np.sqrt(2)
    assert np.ptp(along) > 0.3
    summary = proposal.state["last"]
    assert summary["steps"] == 60 and summary["grad_norm_last"] >= 0
    assert len(summary["mean_weights"]) == 2


def test_the_state_keeps_the_last_particles_and_the_next_ask_starts_from_them():
    problem = _segment_problem()
    history = _history(problem, 16)
    engine = make_engine("mwgd", SMALL)
    first = engine.suggest(problem, history, 2, {}, np.random.default_rng(1))
    particles = np.array(first.state["particles"])
    assert particles.shape == (32, 2) and np.all((particles >= 0) & (particles <= 1))
    # They moved towards the set (optimism keeps a few where the models are unsure).
    uniform = np.random.default_rng(0).random((1000, 2))
    assert np.median(_distance_to_segment(particles)) < 0.6 * np.median(
        _distance_to_segment(uniform)
    )
    # From the kept particles the next ask needs no steps to be near the set.
    warm = make_engine("mwgd", {**SMALL, "steps": 0})
    again = warm.suggest(problem, history, 4, first.state, np.random.default_rng(2))
    cold = warm.suggest(problem, history, 4, {}, np.random.default_rng(2))
    assert np.mean(_distance_to_segment(again.X)) < np.mean(_distance_to_segment(cold.X))
    assert json.loads(json.dumps(again.state)) == again.state


def test_pending_trials_are_not_asked_again():
    problem = _segment_problem()
    engine = make_engine("mwgd", SMALL)
    first = engine.suggest(problem, _history(problem, 16), 4, {}, np.random.default_rng(1))
    with_pending = _history(problem, 16, pending=first.X)
    second = engine.suggest(problem, with_pending, 4, {}, np.random.default_rng(1))
    gaps = np.linalg.norm(second.X[:, None, :] - first.X[None, :, :], axis=2)
    assert gaps.min() >= 1e-3


@pytest.mark.parametrize("q", [1, 16])
def test_three_objectives_and_large_batches(q):
    problem = _segment_problem(d=3, m=3)
    history = _history(problem, 20)
    proposal = make_engine("mwgd", SMALL).suggest(problem, history, q, {}, np.random.default_rng(0))
    assert proposal.X.shape == (q, 3)
    assert len({tuple(x) for x in proposal.X}) == q
    model = [det for det in proposal.details if det["source"] == "mwgd"]
    assert len(model) >= min(q, 8)
    assert len(proposal.state["last"]["mean_weights"]) == 3


def test_the_first_asks_are_sobol_then_the_model():
    problem = _segment_problem()
    engine = make_engine("mwgd", SMALL)
    first = engine.suggest(problem, History.empty(problem), 3, {}, np.random.default_rng(0))
    assert [det["source"] for det in first.details] == ["sobol"] * 3
    history = _history(problem, 5)  # 2 (d + 1) = 6 points are the initial design
    mixed = engine.suggest(problem, history, 3, first.state, np.random.default_rng(0))
    assert [det["source"] for det in mixed.details] == ["sobol", "mwgd", "mwgd"]


def test_a_constrained_study_asks_where_feasibility_is_likely():
    problem = Problem(_segment_problem().space, n_objectives=2, n_constraints=1)
    rng = np.random.default_rng(3)
    X = rng.random((20, 2))
    C = 0.5 - X[:, :1]  # feasible when x0 >= 0.5
    history = History(X, _objectives(X), C, np.zeros((0, 2)))
    proposal = make_engine("mwgd", SMALL).suggest(problem, history, 4, {}, np.random.default_rng(0))
    assert np.all(proposal.X[:, 0] >= 0.45)


@pytest.mark.parametrize(
    "options",
    [{"eta": 0.0}, {"temperature": -1.0}, {"kappa": float("nan")}, {"steps": -1}, {"kernel": "x"}],
)
def test_bad_options_are_rejected(options):
    with pytest.raises(EngineOptionsError):
        make_engine("mwgd", options)
