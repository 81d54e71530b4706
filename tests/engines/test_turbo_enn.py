"""The turbo-enn engine (engines/turbo_enn.py) with TuRBO's box region: trust-region state
machine, selection, seeds. The CMA region: tests/engines/test_cma_region.py."""

from __future__ import annotations

import numpy as np
import pytest

from engines.base import History, Problem
from engines.enn import ENN, ENNParams, first_front, pareto_select, prefilter
from engines.errors import EngineUnsupported
from engines.registry import make_engine
from engines.space import FloatParam, IntParam, SearchSpace

BOX = {"trust_region": "box"}


def _problem(d: int, n_constraints: int = 0) -> Problem:
    space = SearchSpace([FloatParam(f"x{i}", 0.0, 1.0) for i in range(d)])
    return Problem(space, n_constraints=n_constraints)


def _history(X: np.ndarray, Y: np.ndarray, C: np.ndarray | None = None) -> History:
    C = np.zeros((len(X), 0)) if C is None else C
    return History(X, Y.reshape(-1, 1), C, np.zeros((0, X.shape[1])))


class Driver:
    """Runs ask/tell rounds against the engine with a scripted objective."""

    def __init__(self, d: int = 2, **options):
        self.problem = _problem(d)
        self.engine = make_engine("turbo-enn", {"n_initial": 4, **BOX, **options})
        self.X = np.zeros((0, d))
        self.Y = np.zeros(0)
        self.state: dict = {}
        self.rng = np.random.default_rng(0)
        self.details: list[dict] = []

    def round(self, q: int, values) -> np.ndarray:
        proposal = self.engine.suggest(
            self.problem, _history(self.X, self.Y), q, self.state, self.rng
        )
        self.state = proposal.state
        self.details = proposal.details
        self.X = np.vstack([self.X, proposal.X])
        self.Y = np.concatenate([self.Y, values(proposal.X)])
        return proposal.X


def test_initial_design_then_trust_region_points():
    run = Driver()
    run.round(4, lambda X: X.sum(axis=1))
    assert [d["source"] for d in run.details] == ["sobol"] * 4
    X = run.round(3, lambda X: X.sum(axis=1))
    assert [d["source"] for d in run.details] == ["turbo-enn"] * 3
    centre = run.X[np.argmin(run.Y[:4])]
    assert np.all(np.abs(X - centre) <= 0.4 + 1e-12)  # inside the box of side 0.8


def test_successes_in_a_row_double_the_region_up_to_its_cap():
    run = Driver()
    run.round(4, lambda X: np.full(len(X), 100.0))
    falling = iter(range(99, 0, -1))
    lengths = []
    for _ in range(7):
        run.round(2, lambda X: np.array([float(next(falling)) for _ in X]))
        lengths.append(run.state["length"])
    # The first TR batch is counted at the next ask; three successes double the side.
    assert lengths[:4] == [0.8, 0.8, 0.8, 1.6]
    assert max(lengths) == 1.6


def test_failures_in_a_row_halve_the_region_and_a_restart_forgets_the_local_data():
    run = Driver(d=2)
    run.round(4, lambda X: X.sum(axis=1))
    flat = lambda X: np.full(len(X), 50.0)  # noqa: E731
    lengths = []
    # failure_tolerance = ceil(max(4 / q, d / q)) = 4 for q = 1, d = 2.
    for _ in range(28):
        run.round(1, flat)
        lengths.append(run.state["length"])
    assert lengths[4] == 0.4 and lengths[3] == 0.8
    assert lengths[-1] == pytest.approx(0.8 * 0.5**6)
    n_before = len(run.X)
    run.round(1, flat)  # the 7th halving: below 0.5^7, so this ask restarts
    assert run.state["generation"] == 1
    assert run.state["tr_start"] == n_before
    assert run.state["length"] == 0.8
    assert [d["source"] for d in run.details] == ["sobol"]
    # The study's history is untouched: all rows are still there for the service.
    assert len(run.X) == n_before + 1
    # The new TR centres on its own data only, not on the old incumbent.
    for _ in range(3):
        run.round(1, flat)
    X = run.round(1, flat)
    assert [d["source"] for d in run.details] == ["turbo-enn"]
    new_rows = run.X[n_before:-1]
    assert np.min(np.abs(new_rows - X).max(axis=1)) <= 0.4 + 1e-12


def test_the_same_seed_gives_the_same_proposals():
    def run(seed: int) -> np.ndarray:
        driver = Driver(d=5)
        driver.rng = np.random.default_rng(seed)
        for _ in range(6):
            driver.round(3, lambda X: ((X - 0.3) ** 2).sum(axis=1))
        return driver.X

    np.testing.assert_array_equal(run(1), run(1))
    assert not np.array_equal(run(1), run(2))


def test_noisy_mode_fits_the_scales_and_keeps_them_in_the_state():
    rng = np.random.default_rng(4)
    X = rng.random((300, 3))
    y = ((X - 0.5) ** 2).sum(axis=1) + 0.05 * rng.standard_normal(300)
    engine = make_engine("turbo-enn", {"noisy": True, **BOX})
    proposal = engine.suggest(_problem(3), _history(X, y), 5, {}, rng)
    assert proposal.X.shape == (5, 3)
    assert proposal.state["a"] > 0 and proposal.state["b"] != 1.0
    assert {d["selection"] for d in proposal.details} == {"lcb"}
    # The LCB picks are the lowest mu - sigma among candidates: all near the good region.
    assert np.all(((proposal.X - 0.5) ** 2).sum(axis=1) < 0.5)


def test_constraints_choose_the_incumbent():
    X = np.array([[0.1, 0.1], [0.9, 0.9], [0.5, 0.5], [0.2, 0.8]])
    y = np.array([0.0, 1.0, 2.0, 3.0])
    C = np.array([[1.0], [-1.0], [-1.0], [0.5]])  # the best value is infeasible
    engine = make_engine("turbo-enn", {"n_initial": 4, **BOX})
    proposal = engine.suggest(_problem(2, 1), _history(X, y, C), 4, {}, np.random.default_rng(0))
    # Centred on [0.9, 0.9], the best feasible point.
    assert np.all(np.abs(proposal.X - 0.9) <= 0.4 + 1e-12)
    assert proposal.state["best"] == [0.0, 1.0]


def test_pending_points_and_repeats_are_never_proposed_on_a_grid():
    space = SearchSpace([IntParam("a", 0, 3), IntParam("b", 0, 3)])
    problem = Problem(space)
    rng = np.random.default_rng(0)
    X = space.snap(rng.random((6, 2)))
    pending = space.snap(rng.random((3, 2)))
    history = History(X, X.sum(axis=1, keepdims=True), np.zeros((6, 0)), pending)
    engine = make_engine("turbo-enn", {"n_initial": 2, **BOX})
    proposal = engine.suggest(problem, history, 5, {}, rng)
    keys = [row.tobytes() for row in space.snap(proposal.X)]
    assert len(set(keys)) == 5
    assert not set(keys) & {row.tobytes() for row in pending}


def test_several_objectives_are_refused():
    problem = Problem(_problem(2).space, n_objectives=2)
    history = History(np.zeros((0, 2)), np.zeros((0, 2)), np.zeros((0, 0)), np.zeros((0, 2)))
    with pytest.raises(EngineUnsupported):
        make_engine("turbo-enn").suggest(problem, history, 1, {}, np.random.default_rng(0))


def test_a_corrupt_state_is_rebuilt_from_the_history():
    rng = np.random.default_rng(0)
    X = rng.random((20, 2))
    engine = make_engine("turbo-enn", BOX)
    for state in ({"length": "big"}, {"version": 99}, {"tr_start": 50}):
        proposal = engine.suggest(_problem(2), _history(X, X.sum(axis=1)), 2, state, rng)
        assert proposal.state["tr_start"] == 0 and proposal.state["n_seen"] == 20


def test_first_front_and_pareto_selection_by_hand():
    mu = np.array([1.0, 2.0, 3.0, 2.0, 4.0, 1.0])
    sigma = np.array([1.0, 2.0, 3.0, 1.5, 0.5, 0.5])
    # (1,1), (2,2), (3,3) trade off; (2,1.5) loses to (2,2); (4,.5) and (1,.5) lose to (1,1).
    assert list(first_front(mu, sigma)) == [0, 1, 2]
    # Three fit whole; the second front is {3, 5}, one of which is sampled. Sorted by mu.
    picked = pareto_select(mu, sigma, 4, np.random.default_rng(0))
    assert set(picked[:4]) >= {0, 1, 2}
    assert set(picked) - {0, 1, 2} <= {3, 5}
    assert list(mu[picked]) == sorted(mu[picked])


def test_prefilter_keeps_every_neighbour_of_the_box():
    rng = np.random.default_rng(5)
    X = rng.random((5000, 3))
    enn = ENN(X, X.sum(axis=1, keepdims=True))
    centre = np.array([0.3, 0.6, 0.5])
    lower, upper = centre - 0.05, centre + 0.05
    small = prefilter(enn, centre, lower, upper)
    assert small.n < enn.n / 5  # a small box needs few observations
    Q = lower + (upper - lower) * rng.random((500, 3))
    for params in (ENNParams(), ENNParams(b=3.0, a=0.2)):
        np.testing.assert_array_equal(small.posterior(Q, params)[0], enn.posterior(Q, params)[0])
        np.testing.assert_array_equal(small.posterior(Q, params)[1], enn.posterior(Q, params)[1])


def test_a_restart_that_keeps_the_data_only_resets_the_length():
    run = Driver(d=2, restart_keeps_data=True)
    run.round(4, lambda X: X.sum(axis=1))
    flat = lambda X: np.full(len(X), 50.0)  # noqa: E731
    for _ in range(29):
        run.round(1, flat)
    assert run.state["generation"] == 1
    assert run.state["tr_start"] == 0 and run.state["length"] == 0.8
    assert [d["source"] for d in run.details] == ["turbo-enn"]
    best = run.X[np.argmin(run.Y)]
    assert np.all(np.abs(run.X[-1] - best) <= 0.4 + 1e-12)  # still centred on the best


def test_trust_region_points_carry_the_length_and_counters_of_the_region():
    run = Driver()
    run.round(4, lambda X: X.sum(axis=1))
    for _ in range(6):
        run.round(1, lambda X: np.full(len(X), 50.0))
    (detail,) = run.details
    state = run.state
    assert detail["source"] == "turbo-enn" and detail["length"] == state["length"] == 0.4
    assert (detail["successes"], detail["failures"]) == (state["successes"], state["failures"])
    assert detail["generation"] == state["generation"] == 0
