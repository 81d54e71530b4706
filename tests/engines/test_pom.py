"""The pom engine: sample Pareto sets, the greedy batch, the POM score, and the engine itself."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engines import bo, pom
from engines.base import History, Problem
from engines.bo import fit_gp
from engines.errors import EngineOptionsError
from engines.metrics import non_dominated
from engines.pareto_matching import (
    batch_score,
    greedy_batch,
    non_dominated_per_sample,
    pareto_sample_masks,
)
from engines.registry import make_engine
from engines.sample_paths import SamplePaths
from engines.space import FloatParam, SearchSpace

#: Small settings: every engine test runs in well under a second of fitting and sampling.
SMALL = {
    "n_samples": 16,
    "pool_size": 256,
    "num_features": 128,
    "top_candidates": 64,
    "refine_points": 32,
}


# --- sample Pareto sets ---------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_non_dominated_per_sample_matches_the_pairwise_definition(m):
    rng = np.random.default_rng(m)
    F = rng.random((5, 200, m))
    F[:, 7] = F[:, 3]  # an exact duplicate
    eligible = rng.random((5, 200)) < 0.8
    eligible[4] = False  # a sample with nothing eligible
    got = non_dominated_per_sample(F, eligible)
    for s in range(5):
        rows = np.flatnonzero(eligible[s])
        expected = np.zeros(200, dtype=bool)
        expected[rows[non_dominated(F[s, rows])]] = True
        if eligible[s, 3] and eligible[s, 7] and expected[3]:
            # Of exact duplicates, one or both may be kept.
            assert got[s, 3] or got[s, 7]
            expected[[3, 7]] = got[s, [3, 7]]
        np.testing.assert_array_equal(got[s], expected, err_msg=f"sample {s}")


def test_observed_points_dominate_but_are_never_in_the_pareto_set():
    # One sample, two objectives: pool rows 0-2, then one observed row.
    F = np.array([[[0.0, 3.0], [2.0, 2.0], [3.0, 0.0], [1.0, 1.0]]])
    P = pareto_sample_masks(F, np.zeros((1, 4)), None, n_pool=3)
    np.testing.assert_array_equal(P, [[True, False, True]])  # (2, 2) is dominated by (1, 1)


def test_sampled_constraints_and_the_reference_point_decide_eligibility():
    F = np.array([[[0.0, 3.0], [2.0, 2.0], [3.0, 0.0]]])
    V = np.array([[1.0, 0.0, 0.0]])  # row 0 violates its sampled constraint
    np.testing.assert_array_equal(pareto_sample_masks(F, V, None, 3), [[False, True, True]])
    ref = np.array([2.5, 2.5])  # row 2 is beyond the reference in f0
    np.testing.assert_array_equal(pareto_sample_masks(F, V, ref, 3), [[False, True, False]])
    # Nothing feasible: the least sampled violation stands in.
    V = np.array([[3.0, 1.0, 2.0]])
    np.testing.assert_array_equal(pareto_sample_masks(F, V, ref, 3), [[False, True, False]])


# --- the greedy batch and the POM score -------------------------------------------------


def _two_pieces() -> tuple[np.ndarray, np.ndarray]:
    """A pool with two disjoint Pareto pieces (rows 0-4 near x = 0.1, rows 5-9 near x = 0.9)
    and two points in between that are never Pareto-optimal (rows 10-11)."""
    a = np.column_stack([np.linspace(0.0, 0.2, 5), np.full(5, 0.1)])
    b = np.column_stack([np.linspace(0.8, 1.0, 5), np.full(5, 0.9)])
    middle = np.array([[0.5, 0.5], [0.45, 0.55]])
    pool = np.vstack([a, b, middle])
    P = np.zeros((8, 12), dtype=bool)
    P[:, :10] = True
    return pool, P


def test_a_batch_on_both_pieces_beats_one_on_a_single_piece_twice():
    pool, P = _two_pieces()
    both = batch_score(pool, P, [2, 7], lam=1.0)
    one_piece = batch_score(pool, P, [0, 1], lam=1.0)
    assert both["log_p_po"] == one_piece["log_p_po"] == 0.0  # all of them are Pareto-optimal
    assert both["log_p_cov"] == pytest.approx(0.0)  # two cells of mass 1/2: a perfect match
    assert both["log_score"] > one_piece["log_score"]
    assert both["expected_emd"] < one_piece["expected_emd"]
    # The greedy batch takes one point on each piece.
    chosen = greedy_batch(pool, P, np.zeros((0, 2)), 2, lam=1.0, top=512)
    assert sorted(i // 5 for i in chosen) == [0, 1]


def test_points_with_pareto_probability_zero_are_not_picked():
    pool, P = _two_pieces()
    P[:, 1:5] = False  # one Pareto point left per piece, plus the middle ones at PPO 0
    P[:, 6:10] = False
    chosen = greedy_batch(pool, P, np.zeros((0, 2)), 2, lam=100.0, top=512)
    assert sorted(chosen) == [0, 5]
    # Asked for more than the Pareto candidates, the rest comes after them.
    chosen = greedy_batch(pool, P, np.zeros((0, 2)), 4, lam=1.0, top=512)
    assert sorted(chosen[:2]) == [0, 5] and len(set(chosen)) == 4


def test_higher_pareto_probability_wins_at_equal_coverage():
    pool, P = _two_pieces()
    P[:4, 7] = False  # row 7 is Pareto-optimal in half the samples
    (first,) = greedy_batch(pool, P, np.zeros((0, 2)), 1, lam=0.0, top=512)
    assert first != 7 and first < 10


def test_pending_points_count_as_already_chosen():
    pool, P = _two_pieces()
    pending = pool[[2]] + 0.01  # a pending trial on piece A
    chosen = greedy_batch(pool, P, pending, 1, lam=1.0, top=512)
    assert chosen[0] >= 5  # the new point goes to piece B


# --- refinement on the sample paths -------------------------------------------------------


def test_refined_points_reach_a_pareto_set_on_the_boundary_that_the_pool_misses():
    # f0 = a, f1 = 1 - a + 4 b: the Pareto set is the edge b = 0, which no random point is on.
    import torch

    rng = np.random.default_rng(0)
    X = rng.random((20, 2))
    targets = -np.column_stack([X[:, 0], 1 - X[:, 0] + 4 * X[:, 1]])  # the models maximize
    tX = torch.as_tensor(X)
    torch.manual_seed(0)
    paths = SamplePaths([fit_gp(tX, targets[:, i], []) for i in range(2)], 8, 1024)
    with torch.no_grad():
        starts = torch.as_tensor(rng.random((64, 2)) * [1.0, 0.8] + [0.0, 0.2])  # b >= 0.2
        values = paths(starts)
    scale = torch.as_tensor(targets.std(axis=0))
    refined = pom.refine_on_paths(paths, starts, values, scale, 2, 32, rng)
    assert refined.shape == (8 * (2 + 4), 2)  # per path: 2 minimizers, 4 scalarizations
    assert np.all((refined >= 0) & (refined <= 1))
    assert np.max(refined[:, 1]) < 0.02  # on the edge, far from every start
    assert np.ptp(refined[:, 0]) > 0.3  # random weights spread them along it


def test_refinement_can_be_switched_off_and_adds_candidates_when_on():
    problem = Problem(SPACE, n_objectives=2)
    off = _suggest(problem, _history(2), 2, refine_points=0, pool_size=64)
    on = _suggest(problem, _history(2), 2, refine_points=32, pool_size=64)
    assert [d["source"] for d in off.details] == [d["source"] for d in on.details] == ["pom"] * 2
    assert not np.array_equal(off.X, on.X)


# --- the engine ---------------------------------------------------------------------------

SPACE = SearchSpace([FloatParam("a", 0, 1), FloatParam("b", 0, 1)])


def _history(m: int, n: int = 10, pending: int = 0, seed: int = 0) -> History:
    rng = np.random.default_rng(seed)
    X = rng.random((n, 2))
    centres = [(0.2, 0.2), (0.8, 0.8), (0.2, 0.8)][:m]
    Y = np.column_stack([((X - c) ** 2).sum(axis=1) for c in centres])
    return History(X, Y, np.zeros((n, 0)), rng.random((pending, 2)))


def _suggest(problem, history, count, seed=0, state=None, **options):
    engine = make_engine("pom", {**SMALL, **options})
    return engine.suggest(problem, history, count, state or {}, np.random.default_rng(seed))


@pytest.mark.parametrize("m", [2, 3])
def test_a_batch_is_distinct_model_points_with_the_pom_score(m):
    problem = Problem(SPACE, n_objectives=m)
    proposal = _suggest(problem, _history(m), 4, n_initial=4)
    assert proposal.X.shape == (4, 2) and len({tuple(x) for x in proposal.X}) == 4
    assert [d["source"] for d in proposal.details] == ["pom"] * 4
    summary = proposal.state["last"]
    assert summary == proposal.details[0]["pom"]
    assert summary["n_samples"] == 16 and summary["n_observations"] == 10
    assert summary["log_score"] == pytest.approx(
        summary["log_p_po"] + summary["log_p_cov"]  # lambda_coverage = 1
    )
    assert all(np.isfinite(summary[k]) for k in ("log_score", "log_p_po", "log_p_cov"))
    assert 0 <= summary["expected_emd"] <= 1
    assert all(0 < d["ppo"] <= 1 for d in proposal.details)
    json.dumps(proposal.state, allow_nan=False)


def test_the_initial_design_counts_pending_trials():
    problem = Problem(SPACE, n_objectives=2)  # 2 (d + 1) = 6 initial points
    proposal = _suggest(problem, _history(2, n=3, pending=2), 3)
    assert [d["source"] for d in proposal.details] == ["sobol", "pom", "pom"]
    assert proposal.state["last"]["n_observations"] == 3


def test_same_seed_same_batch_and_state():
    problem = Problem(SPACE, n_objectives=2, reference_point=np.array([1.0, 1.0]))
    history = _history(2, pending=1)
    a = _suggest(problem, history, 3, seed=7)
    b = _suggest(problem, history, 3, seed=7)
    np.testing.assert_array_equal(a.X, b.X)
    assert a.state == b.state and a.details == b.details
    c = _suggest(problem, history, 3, seed=8)
    assert not np.array_equal(a.X, c.X)


def test_pending_points_are_never_proposed_again():
    problem = Problem(SPACE, n_objectives=2)
    base = _history(2, n=10)
    pending = _suggest(problem, base, 4).X
    history = History(base.X, base.Y, base.C, pending)
    proposal = _suggest(problem, history, 4)
    taken = {tuple(x) for x in np.vstack([base.X, pending])}
    assert not taken & {tuple(x) for x in proposal.X}


def test_a_numerical_failure_falls_back_to_sobol_with_the_reason(monkeypatch):
    from botorch.exceptions.errors import ModelFittingError

    def fail(*args, **kwargs):
        raise ModelFittingError("no luck")

    monkeypatch.setattr(bo, "fit_gp", fail)
    proposal = _suggest(Problem(SPACE, n_objectives=2), _history(2), 2)
    assert [d["source"] for d in proposal.details] == ["sobol", "sobol"]
    assert "ModelFittingError: no luck" in proposal.details[0]["fallback"]
    assert proposal.state["last"] is None


@pytest.mark.parametrize(
    "options",
    [
        {"n_samples": 1},
        {"pool_size": 3},
        {"lambda_coverage": -1.0},
        {"num_features": 0},
        {"refine_points": -1},
    ],
)
def test_bad_options_are_refused(options):
    with pytest.raises(EngineOptionsError):
        make_engine("pom", options)
