"""The CMA-ES distribution (engines/cma_region.py) and turbo-enn's CMA region."""

from __future__ import annotations

import numpy as np
import pytest

from engines import cma_region
from engines.base import History, Problem
from engines.enn import ENN, ENNParams
from engines.registry import make_engine
from engines.space import FloatParam, IntParam, SearchSpace


def _minimize(f, d: int, generations: int, seed: int = 0, mean: float = 0.5):
    """Plain CMA-ES with ``cma_region`` on ``f: (n, d) -> (n,)``: the last distribution and
    the best value."""
    rng = np.random.default_rng(seed)
    lam = cma_region.population_size(d)
    cma = cma_region.start(np.full(d, mean), 1 / 6, lam)
    best = np.inf
    for _ in range(generations):
        X = cma_region.sample(cma, lam, rng)
        y = f(X)
        order = np.argsort(y)
        cma = cma_region.update(cma, X[order], y[order])
        best = min(best, float(y.min()))
    return cma, best


def test_updates_equal_the_cmaes_packages_on_the_same_generations():
    """Four generations of 6 points in 3-d; the expected values are what the ``cmaes`` package
    (0.13.1, Optuna's CMA-ES) computed from the same points (not a CI dependency, so frozen)."""
    d, lam = 3, 6
    rng = np.random.default_rng(7)
    mean0 = np.array([0.5, 0.4, 0.6])
    cma = cma_region.start(mean0, 0.2, lam)
    weights = np.array([1.0, 10.0, 100.0])
    for generation in range(4):
        centre, step = (mean0, 0.1) if generation == 0 else (np.asarray(cma["mean"]), cma["sigma"])
        X = centre + step * rng.standard_normal((lam, d))
        y = (((X - 0.3) ** 2) * weights).sum(axis=1)
        order = np.argsort(y)
        cma = cma_region.update(cma, X[order], y[order])
    expected_cov = [
        [1.447965159302712, 0.28111025910201115, 0.6461742923362601],
        [0.2811102591020112, 0.6550181775752977, 0.2478163711574224],
        [0.6461742923362602, 0.24781637115742242, 0.964021428876354],
    ]
    np.testing.assert_allclose(
        cma["mean"], [0.04601024479271205, 0.234322269523673, 0.32782205225865]
    )
    assert cma["sigma"] == pytest.approx(0.21209303965045812, rel=1e-8)
    np.testing.assert_allclose(cma["cov"], expected_cov, atol=1e-7)
    np.testing.assert_allclose(
        cma["p_sigma"], [-1.27118291949956, -0.50174568249726, -0.39916319478641], atol=1e-7
    )
    np.testing.assert_allclose(
        cma["p_c"], [-0.98594908117332, -0.48018060670169, -0.30176025981685], atol=1e-7
    )


def test_a_trial_told_late_from_a_wide_distribution_cannot_blow_the_step_up():
    rng = np.random.default_rng(0)
    cma = cma_region.start(np.full(2, 0.5), 1 / 6, 4)
    early = cma_region.sample(cma, 1, rng)  # asked now, told much later
    for _ in range(60):  # converge on 0.5
        X = cma_region.sample(cma, 4, rng)
        y = ((X - 0.5) ** 2).sum(axis=1)
        order = np.argsort(y)
        cma = cma_region.update(cma, X[order], y[order])
    assert cma["sigma"] < 1e-3
    late = np.vstack([early, cma_region.sample(cma, 3, rng)])
    for _ in range(5):  # the early point ranks first every time: it stays in the population
        cma = cma_region.update(cma, late, np.arange(4.0))
        assert 0 < cma["sigma"] <= 1.0 and np.all(np.isfinite(cma["cov"]))
    assert cma_region.valid(cma, 2)


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
    cma = cma_region.start(np.full(3, 0.5), 0.01, 7)
    for _ in range(10):
        X = cma_region.sample(cma, 7, rng)
        y = X @ np.array([1.0, 2.0, 3.0])
        order = np.argsort(y)
        cma = cma_region.update(cma, X[order], y[order])
    assert cma["sigma"] > 0.02
    assert np.all(np.asarray(cma["mean"]) < 0.5)


def test_samples_stay_in_the_cube():
    cma = cma_region.start(np.array([0.01, 0.99, 0.5]), 0.5, 7)
    X = cma_region.sample(cma, 1000, np.random.default_rng(0))
    assert X.shape == (1000, 3) and X.min() >= 0.0 and X.max() <= 1.0


@pytest.mark.parametrize("extra", [0, 1, 5])
def test_a_flat_function_exhausts_the_region_and_a_slope_does_not(extra):
    """Generations of ``lambda + extra`` points (asks that do not divide lambda) count the
    same as generations of lambda."""
    d, lam = 3, cma_region.population_size(3)
    rng = np.random.default_rng(0)
    cma = cma_region.start(np.full(d, 0.5), 1 / 6, lam)
    generations = 0
    while not cma_region.exhausted(cma):
        X = cma_region.sample(cma, lam + extra, rng)
        cma = cma_region.update(cma, X, np.full(lam + extra, 7.0))
        generations += 1
        assert generations < 100
    assert generations == 10 + int(np.ceil(30 * d / lam))
    sloped, _ = _minimize(lambda X: X.sum(axis=1), d=d, generations=generations)
    assert not cma_region.exhausted(sloped)


def test_a_degenerate_covariance_exhausts_the_region():
    cma = cma_region.start(np.full(2, 0.5), 0.1, 6)
    assert not cma_region.exhausted(cma)
    assert cma_region.exhausted({**cma, "cov": [[1.0, 0.0], [0.0, 1e-15]]})


@pytest.mark.parametrize(
    "change",
    [
        {"mean": [0.5]},
        {"cov": [[1.0, 0.0]]},
        {"sigma": -1.0},
        {"sigma": float("nan")},
        {"updates": 1.5},
        {"updates": -1},
        {"recent": ["x"]},
        {"recent": "12"},
        {"recent_max": 0.5},
        {"p_c": None},
        {"p_sigma": [0.0, float("nan")]},
        {"sigma": True},
        {"sigma0": 0.0},
    ],
)
def test_a_malformed_distribution_is_not_valid(change):
    cma = cma_region.start(np.full(2, 0.5), 0.1, 6)
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


@pytest.mark.parametrize(
    ("options", "d", "cma"),
    [
        ({}, 50, True),
        ({}, 51, False),
        ({}, 1, False),
        ({"trust_region": "cma"}, 1, True),
        ({"trust_region": "cma"}, 100, True),
        ({"trust_region": "cma"}, 101, False),
        ({"trust_region": "box"}, 2, False),
    ],
)
def test_the_region_by_dimension_and_option(options, d, cma):
    X = np.random.default_rng(0).random((3 * d, d))
    proposal = _ask(make_engine("turbo-enn", options), _problem(d), X, X.sum(axis=1), None, {}, 2)
    assert (proposal.state["cma"] is not None) == cma


def test_a_corner_optimum_is_not_proposed_again_in_a_continuous_space():
    """Draws clipped in every coordinate land on a corner of the cube, where a told optimum
    on the bounds sits; ENN's mean there is its value, so without the check they win."""
    d = 3
    problem = _problem(d)
    engine = make_engine("turbo-enn")
    X, Y, state = np.zeros((0, d)), np.zeros(0), {}
    for step in range(120):
        proposal = _ask(engine, problem, X, Y, None, state, 4, seed=step)
        state = proposal.state
        told = {row.tobytes() for row in X}
        assert not any(row.tobytes() in told for row in proposal.X), step
        X = np.vstack([X, proposal.X])
        Y = np.concatenate([Y, proposal.X.sum(axis=1)])
    assert np.any(np.all(X == 0.0, axis=1))  # the corner optimum was found, once


def test_a_box_state_under_the_cma_region_is_rebuilt_around_the_incumbent():
    problem = _problem(2)
    rng = np.random.default_rng(0)
    X = rng.random((10, 2))
    y = X.sum(axis=1)
    box = make_engine("turbo-enn", {"trust_region": "box"})
    state = _ask(box, problem, X, y, None, {}, 2).state
    cma = _ask(make_engine("turbo-enn"), problem, X, y, None, state, 2).state
    assert cma["cma"]["mean"] == X[np.argmin(y)].tolist() and cma["n_updated"] == 10
    moved = {**cma, "cma": {**cma["cma"], "mean": [0.25, 0.75]}}
    kept = _ask(make_engine("turbo-enn"), problem, X, y, None, moved, 2).state
    assert kept["cma"]["mean"] == [0.25, 0.75]  # a valid state is used as it is
    broken = {**moved, "cma": {**moved["cma"], "cov": [[1.0]]}}
    again = _ask(make_engine("turbo-enn"), problem, X, y, None, broken, 2).state
    assert again["cma"]["mean"] == X[np.argmin(y)].tolist()


def test_told_pending_and_failed_points_are_never_proposed_on_a_grid():
    space = SearchSpace([IntParam("a", 0, 3), IntParam("b", 0, 3)])
    problem = Problem(space)
    engine = make_engine("turbo-enn", {"n_initial": 2})
    rng = np.random.default_rng(0)
    X, state = space.snap(rng.random((4, 2))), {}
    for step in range(8):
        pending = rng.random((1, 2))  # raw, as the service may hold it: compared snapped
        history = History(X, X.sum(axis=1, keepdims=True), np.zeros((len(X), 0)), pending)
        proposal = engine.suggest(problem, history, 1, state, np.random.default_rng(step))
        state = proposal.state
        keys = {row.tobytes() for row in space.snap(np.vstack([X, pending]))}
        assert space.snap(proposal.X)[0].tobytes() not in keys
        X = np.vstack([X, space.snap(proposal.X)])


def test_noisy_fits_the_enn_scales_that_the_preselection_uses():
    rng = np.random.default_rng(4)
    X = rng.random((300, 3))
    y = ((X - 0.5) ** 2).sum(axis=1) + 0.05 * rng.standard_normal(300)
    proposal = _ask(make_engine("turbo-enn", {"noisy": True}), _problem(3), X, y, None, {}, 5)
    assert proposal.state["a"] > 0 and proposal.state["b"] != 1.0
    assert {d["selection"] for d in proposal.details} == {"enn-mean-fitted"}
    plain = _ask(make_engine("turbo-enn"), _problem(3), X, y, None, {}, 5)
    assert (plain.state["a"], plain.state["b"]) == (0.0, 1.0)
