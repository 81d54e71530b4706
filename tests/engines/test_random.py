import numpy as np

from engines.base import History, Problem
from engines.quasirandom import RandomEngine, SobolStream
from engines.space import CategoricalParam, FloatParam, IntParam, SearchSpace


def _problem(*params):
    return Problem(SearchSpace(list(params) or [FloatParam("x", 0, 1), FloatParam("y", 0, 1)]))


def test_the_sequence_continues_across_asks():
    problem = _problem()
    engine = RandomEngine()
    history = History.empty(problem)
    one = engine.suggest(problem, history, 8, {}, np.random.default_rng(0))
    first = engine.suggest(problem, history, 3, {}, np.random.default_rng(0))
    second = engine.suggest(problem, history, 5, first.state, np.random.default_rng(99))
    np.testing.assert_array_equal(np.vstack([first.X, second.X]), one.X)
    assert second.state == {"seed": one.state["seed"], "index": 8}


def test_a_stream_resumed_anywhere_draws_what_one_generator_draws():
    from scipy.stats import qmc

    reference = qmc.Sobol(3, scramble=True, seed=11).random(32)
    # Two streams at the same (d, seed, index), a state replayed, and a jump ahead: the
    # generators kept between draws must never hand one stream another's position.
    first, twin = SobolStream(3, 11), SobolStream(3, 11)
    np.testing.assert_array_equal(first.draw(5), reference[:5])
    np.testing.assert_array_equal(twin.draw(5), reference[:5])
    np.testing.assert_array_equal(first.draw(3), reference[5:8])
    np.testing.assert_array_equal(twin.draw(6), reference[5:11])
    np.testing.assert_array_equal(SobolStream(3, 11, 5).draw(2), reference[5:7])
    np.testing.assert_array_equal(SobolStream(3, 11, 20).draw(12), reference[20:])


def test_first_power_of_two_points_are_balanced():
    problem = _problem(FloatParam("x", 0, 1))
    X = RandomEngine().suggest(problem, History.empty(problem), 16, {}, np.random.default_rng(3)).X
    # A scrambled Sobol net puts exactly one point in each of 16 equal intervals.
    np.testing.assert_array_equal(np.bincount((X[:, 0] * 16).astype(int), minlength=16), 1)


def test_never_returns_a_point_equal_to_a_pending_one():
    problem = _problem(IntParam("n", 0, 3), CategoricalParam("c", ("a", "b")))
    space = problem.space
    engine = RandomEngine()
    pending = space.snap(np.array([[0.1, 0.1], [0.9, 0.9], [0.4, 0.6]]))
    history = History(np.zeros((0, 2)), np.zeros((0, 1)), np.zeros((0, 0)), pending)
    out = engine.suggest(problem, history, 5, {}, np.random.default_rng(0))
    taken = {tuple(r) for r in pending}
    chosen = [tuple(r) for r in space.snap(out.X)]
    assert not taken & set(chosen)
    assert len(set(chosen)) == 5  # 8 values, 3 pending: exactly the 5 free ones


def test_a_full_discrete_space_still_returns_count_points():
    problem = _problem(IntParam("n", 0, 1))
    history = History(np.zeros((0, 1)), np.zeros((0, 1)), np.zeros((0, 0)), np.array([[0.25]]))
    out = RandomEngine().suggest(problem, history, 4, {}, np.random.default_rng(0))
    assert out.X.shape == (4, 1)
