import numpy as np
import pytest

from engines.metrics import (
    emd,
    front_lifetimes,
    hypervolume,
    igd,
    loo_emd,
    non_dominated,
    non_dominated_share,
)


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


def test_igd_by_hand():
    front = np.array([[0.0, 1.0], [1.0, 0.0]])
    Y = np.array([[0.0, 1.0], [0.5, 0.5]])
    # (0, 1) is in Y; (1, 0) is sqrt(0.5) from (0.5, 0.5).
    assert igd(Y, front) == pytest.approx(np.sqrt(0.5) / 2)
    assert igd(np.zeros((0, 2)), front) == np.inf


def test_emd_by_hand():
    pareto_set = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, 0.0]])
    X = np.array([[0.0, 0.0], [0.0, 1.0]])
    # Minimum distances 0, 1, 0.5; mean 0.5; divided by sqrt(2), the cube's diameter.
    assert emd(X, pareto_set) == pytest.approx(0.5 / np.sqrt(2))
    assert emd(pareto_set, pareto_set) == 0.0
    assert emd(np.zeros((0, 2)), pareto_set) == 1.0
    with pytest.raises(ValueError, match="columns"):
        emd(X, np.zeros((1, 3)))


def test_leave_one_out_emd_by_hand():
    X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    # Nearest other point: 1, 1, 0 (the duplicate), 0; mean 0.5.
    assert loo_emd(X) == pytest.approx(0.5 / np.sqrt(2))
    assert loo_emd(X[:1]) is None


def test_non_dominated_share_by_hand():
    observed = np.array([[1.0, 1.0]])
    batch = np.array([[0.0, 2.0], [2.0, 2.0], [0.5, 0.5]])
    # (2, 2) is dominated by (1, 1); (0, 2) and (0.5, 0.5) are not.
    assert non_dominated_share(batch, observed) == pytest.approx(2 / 3)
    assert non_dominated_share(batch[1:2], np.zeros((0, 2))) == 1.0
    with pytest.raises(ValueError, match="empty"):
        non_dominated_share(np.zeros((0, 2)), observed)


@pytest.mark.parametrize("m", [2, 3])
def test_hypervolume_matches_botorch(m):
    import torch
    from botorch.utils.multi_objective.box_decompositions.dominated import (
        DominatedPartitioning,
    )
    from botorch.utils.multi_objective.hypervolume import Hypervolume

    rng = np.random.default_rng(m)
    Y = rng.random((30, m))
    ref = np.full(m, 1.1)
    # BoTorch maximizes: negate the points and the reference.
    tY, tref = torch.as_tensor(-Y), torch.as_tensor(-ref)
    partitioning = DominatedPartitioning(ref_point=tref, Y=tY)
    ours = hypervolume(Y, ref)
    assert ours == pytest.approx(partitioning.compute_hypervolume().item(), rel=1e-9)
    assert ours == pytest.approx(Hypervolume(tref).compute(tY[torch.as_tensor(non_dominated(Y))]))


@pytest.mark.parametrize("m", [2, 3])
def test_front_lifetimes_give_the_front_of_every_prefix(m):
    rng = np.random.default_rng(m)
    # Rounded so that ties and duplicated vectors occur; more rows than one arrival block.
    Y = np.round(rng.random((2500, m)), 1)
    joined, left = front_lifetimes(Y)
    assert np.all(np.diff(joined) > 0) and np.all(left > joined)
    for k in [*range(40), *range(40, len(Y), 181), len(Y)]:
        front = joined[(joined < k) & (left >= k)]
        assert front.tolist() == np.flatnonzero(non_dominated(Y[:k])).tolist()


def test_front_lifetimes_of_no_rows():
    joined, left = front_lifetimes(np.zeros((0, 2)))
    assert len(joined) == 0 and len(left) == 0


def test_hypervolume_2d_with_dominated_and_repeated_rows_is_the_covered_area():
    rng = np.random.default_rng(7)
    Y = np.round(rng.random((200, 2)), 1)  # many ties, repeats and dominated rows
    ref = np.array([1.05, 1.05])
    # The exact covered area, cell by cell of the grid the points' coordinates draw.
    xs, ys = np.r_[np.unique(Y[:, 0]), ref[0]], np.r_[np.unique(Y[:, 1]), ref[1]]
    area = sum(
        (xs[i + 1] - xs[i]) * (ys[j + 1] - ys[j])
        for i in range(len(xs) - 1)
        for j in range(len(ys) - 1)
        if np.any((Y[:, 0] <= xs[i]) & (Y[:, 1] <= ys[j]))
    )
    assert hypervolume(Y, ref) == pytest.approx(area)
