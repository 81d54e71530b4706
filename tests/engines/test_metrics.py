import numpy as np
import pytest

from engines.metrics import hypervolume, non_dominated


def test_non_dominated_mask():
    Y = np.array([[1.0, 4.0], [2.0, 2.0], [3.0, 3.0], [4.0, 1.0], [2.0, 2.0]])
    np.testing.assert_array_equal(non_dominated(Y), [True, True, False, True, True])


def test_hypervolume_2d_by_hand():
    Y = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]])
    # Staircase under ref (4, 4): 3*1 + 2*1 + 1*1 ... computed as union of boxes = 6.
    assert hypervolume(Y, np.array([4.0, 4.0])) == pytest.approx(6.0)


def test_hypervolume_ignores_points_beyond_the_reference():
    Y = np.array([[1.0, 1.0], [5.0, 0.0]])
    assert hypervolume(Y, np.array([2.0, 2.0])) == pytest.approx(1.0)
    assert hypervolume(np.zeros((0, 2)), np.array([1.0, 1.0])) == 0.0


def test_hypervolume_3d_of_two_boxes():
    Y = np.array([[0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    ref = np.array([2.0, 2.0, 2.0])
    # Box A: 2*2*1 = 4, box B: 1*1*2 = 2, overlap: 1*1*1 = 1.
    assert hypervolume(Y, ref) == pytest.approx(5.0)


def test_hypervolume_matches_monte_carlo_in_4d():
    rng = np.random.default_rng(0)
    Y = rng.random((15, 4))
    ref = np.ones(4)
    Z = rng.random((200_000, 4))
    covered = np.zeros(len(Z), dtype=bool)
    for y in Y:
        covered |= np.all(y <= Z, axis=1)
    # Monte Carlo standard error is at most 0.5 / sqrt(2e5) = 0.0011; 5 sigma tolerance.
    assert hypervolume(Y, ref) == pytest.approx(covered.mean(), abs=0.0056)
