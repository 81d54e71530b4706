"""The CMA-ES distribution (engines/cma_region.py) and turbo-enn's CMA region."""

from __future__ import annotations

import numpy as np
import pytest

from engines import cma_region
from engines.base import History, Problem
from engines.enn import ENN, ENNParams
from engines.registry import make_engine
from engines.space import FloatParam, SearchSpace


def _minimize(f, d: int, generations: int, seed: int = 0, mean: float = 0.5):
    """Plain CMA-ES with ``cma_region`` on ``f: (n, d) -> (n,)``: the last distribution and
    the best value."""
    rng = np.random.default_rng(seed)
    lam = cma_region.population_size(d)
    cma = cma_region.start(np.full(d, mean), 1 / 6)
    best = np.inf
    for _ in range(generations):
        X = cma_region.sample(cma, lam, rng)
        y = f(X)
        order = np.argsort(y)
        cma = cma_region.update(cma, X[order], y[order])
        best = min(best, float(y.min()))
    return cma, best


def test_a_sphere_is_minimized_to_high_precision():
    cma, best = _minimize(lambda X: ((X - 0.3) ** 2).sum(axis=1), d=6, generations=250)
    assert best < 1e-12
    np.testing.assert_allclose(cma["mean"], 0.3, atol=1e-6)
    assert cma["updates"] == 250


def test_the_covariance_learns_a_rotated_ill_conditioned_ellipsoid():
    d = 4
    Q, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((d, d)))
    scales = 10.0 ** np.arange(d)  # the Hessian's condition number: 1e3

    def ellipsoid(X):
        Z = (X - 0.4) @ Q
        return (scales * Z**2).sum(axis=1)

    cma, best = _minimize(ellipsoid, d=d, generations=400)
    assert best < 1e-10
    # C approaches the inverse Hessian (up to scale): its long axis is the Hessian's flattest.
    eigenvalues, B = np.linalg.eigh(np.asarray(cma["cov"]))
    assert eigenvalues[-1] / eigenvalues[0] > 300
    assert abs(B[:, -1] @ Q[:, 0]) > 0.99


def test_the_step_grows_on_a_slope_and_the_mean_goes_down_it():
    rng = np.random.default_rng(1)
    cma = cma_region.start(np.full(3, 0.5), 0.01)
    for _ in range(10):
        X = cma_region.sample(cma, 7, rng)
        y = X @ np.array([1.0, 2.0, 3.0])
        order = np.argsort(y)
        cma = cma_region.update(cma, X[order], y[order])
    assert cma["sigma"] > 0.02
    assert np.all(np.asarray(cma["mean"]) < 0.5)


def test_samples_stay_in_the_cube():
    cma = cma_region.start(np.array([0.01, 0.99, 0.5]), 0.5)
    X = cma_region.sample(cma, 1000, np.random.default_rng(0))
    assert X.shape == (1000, 3) and X.min() >= 0.0 and X.max() <= 1.0


def test_a_flat_function_exhausts_the_region_and_a_slope_does_not():
    d, lam = 3, cma_region.population_size(3)
    rng = np.random.default_rng(0)
    cma = cma_region.start(np.full(d, 0.5), 1 / 6)
    generations = 0
    while not cma_region.exhausted(cma, lam):
        X = cma_region.sample(cma, lam, rng)
        cma = cma_region.update(cma, X, np.full(lam, 7.0))
        generations += 1
    assert generations == 10 + int(np.ceil(30 * d / lam))
    sloped, _ = _minimize(lambda X: X.sum(axis=1), d=d, generations=generations)
    assert not cma_region.exhausted(sloped, lam)


def test_a_degenerate_covariance_exhausts_the_region():
    cma = cma_region.start(np.full(2, 0.5), 0.1)
    assert not cma_region.exhausted(cma, 6)
    assert cma_region.exhausted({**cma, "cov": [[1.0, 0.0], [0.0, 1e-15]]}, 6)


@pytest.mark.parametrize(
    "change",
    [
        {"mean": [0.5]},
        {"cov": [[1.0, 0.0]]},
        {"sigma": -1.0},
        {"sigma": float("nan")},
        {"updates": 1.5},
        {"recent": ["x"]},
        {"p_c": None},
    ],
)
def test_a_malformed_distribution_is_not_valid(change):
    cma = cma_region.start(np.full(2, 0.5), 0.1)
    assert cma_region.valid(cma, 2)
    assert not cma_region.valid(cma, 3)
    assert not cma_region.valid({**cma, **change}, 2)


# --- turbo-enn's CMA region -----------------------------------------------------------------


def _problem(d: int, n_constraints: int = 0) -> Problem:
    space = SearchSpace([FloatParam(f"x{i}", 0.0, 1.0) for i in range(d)])
    return Problem(space, n_constraints=n_constraints)


def _ask(engine, problem, X, Y, C, state, count, seed=0):
    C = np.zeros((len(X), 0)) if C is None else C
    history = History(X, Y.reshape(-1, 1), C, np.zeros((0, X.shape[1])))
    return engine.suggest(problem, history, count, state, np.random.default_rng(seed))


def test_the_region_samples_then_preselects_by_the_enn_mean_and_learns_every_lambda_trials():
    d, lam = 3, 6
    problem = _problem(d)
    engine = make_engine("turbo-enn", {"n_initial": 6, "population": lam})
    f = lambda X: ((X - 0.2) ** 2).sum(axis=1)  # noqa: E731
    X, Y, C, state = np.zeros((0, d)), np.zeros(0), None, {}
    sigmas = []
    for step in range(8):
        proposal = _ask(engine, problem, X, Y, C, state, 3, seed=step)
        state = proposal.state
        assert state["n_updated"] == 6 * (len(X) // 6)  # learned from whole generations only
        selection = {det["selection"] for det in proposal.details}
        assert selection == ({"sample"} if len(X) < 6 else {"enn-mean"})
        sigmas.append(state["cma"]["sigma"])
        if selection == {"enn-mean"}:
            # The kept points have ENN means at most those of the points drawn beside them.
            enn = ENN(X, Y[:, None], k=10)
            kept, _ = enn.posterior(proposal.X, ENNParams())
            drawn = np.random.default_rng(99).random((200, d)) * 0.4  # a reference cloud
            assert kept.max() <= np.median(enn.posterior(drawn, ENNParams())[0])
        X = np.vstack([X, proposal.X])
        Y = np.concatenate([Y, f(proposal.X)])
    assert state["cma"]["updates"] == 3  # 21 told trials: three generations of 6
    assert state["cma"]["mean"] != [0.5] * d
    assert {det["region"] for det in proposal.details} == {"cma"}


def test_infeasible_trials_rank_after_feasible_ones_in_an_update():
    d = 2
    problem = _problem(d, n_constraints=1)
    engine = make_engine("turbo-enn", {"population": 4})
    first = _ask(engine, problem, np.zeros((0, d)), np.zeros(0), np.zeros((0, 1)), {}, 4)
    X = np.array([[0.1, 0.1], [0.2, 0.2], [0.8, 0.8], [0.9, 0.9]])
    Y = np.array([0.0, 1.0, 2.0, 3.0])  # the best values are infeasible
    C = np.array([[1.0], [1.0], [-1.0], [-1.0]])
    state = _ask(engine, problem, X, Y, C, first.state, 1).state
    assert np.all(np.asarray(state["cma"]["mean"]) > 0.5)  # moved to the feasible side


def test_an_exhausted_region_restarts_from_a_sobol_point_with_its_own_data():
    d, lam = 2, 4
    problem = _problem(d)
    engine = make_engine("turbo-enn", {"population": lam, "n_initial": 4})
    X, Y, C, state = np.zeros((0, d)), np.zeros(0), None, {}
    for step in range(200):
        proposal = _ask(engine, problem, X, Y, C, state, lam, seed=step)
        state = proposal.state
        if state["generation"] == 1:
            break
        X = np.vstack([X, proposal.X])
        Y = np.concatenate([Y, np.full(lam, 5.0)])  # flat: tolfun ends the region
    assert state["generation"] == 1
    assert state["tr_start"] == state["n_updated"] == len(X)
    assert state["cma"]["updates"] == 0 and state["cma"]["mean"] != [0.5] * d
    assert {det["selection"] for det in proposal.details} == {"sample"}


def test_the_same_seed_gives_the_same_cma_proposals_and_the_box_above_fifty_parameters():
    problem = _problem(4)
    engine = make_engine("turbo-enn")
    rng = np.random.default_rng(0)
    X = rng.random((30, 4))
    Y = X.sum(axis=1)
    a = _ask(engine, problem, X, Y, np.zeros((30, 0)), {}, 5, seed=3)
    b = _ask(engine, problem, X, Y, np.zeros((30, 0)), {}, 5, seed=3)
    np.testing.assert_array_equal(a.X, b.X)
    assert a.state["cma"] is not None
    wide = _problem(51)
    X = rng.random((120, 51))
    proposal = _ask(engine, wide, X, X.sum(axis=1), np.zeros((120, 0)), {}, 2)
    assert proposal.state["cma"] is None and "length" in proposal.details[0]


def test_a_box_state_under_the_cma_region_is_rebuilt():
    problem = _problem(2)
    rng = np.random.default_rng(0)
    X = rng.random((10, 2))
    box = make_engine("turbo-enn", {"trust_region": "box"})
    state = _ask(box, problem, X, X.sum(axis=1), np.zeros((10, 0)), {}, 2).state
    cma = _ask(make_engine("turbo-enn"), problem, X, X.sum(axis=1), np.zeros((10, 0)), state, 2)
    assert cma.state["cma"] is not None and cma.state["n_updated"] == 10
    broken = {**cma.state, "cma": {**cma.state["cma"], "cov": [[1.0]]}}
    again = _ask(make_engine("turbo-enn"), problem, X, X.sum(axis=1), np.zeros((10, 0)), broken, 2)
    assert again.state["cma"]["cov"] == np.eye(2).tolist()


def test_noisy_fits_the_enn_scales_that_the_preselection_uses():
    rng = np.random.default_rng(4)
    X = rng.random((300, 3))
    y = ((X - 0.5) ** 2).sum(axis=1) + 0.05 * rng.standard_normal(300)
    proposal = _ask(make_engine("turbo-enn", {"noisy": True}), _problem(3), X, y, None, {}, 5)
    assert proposal.state["a"] > 0 and proposal.state["b"] != 1.0
    assert {d["selection"] for d in proposal.details} == {"enn-mean-fitted"}
    plain = _ask(make_engine("turbo-enn"), _problem(3), X, y, None, {}, 5)
    assert (plain.state["a"], plain.state["b"]) == (0.0, 1.0)
