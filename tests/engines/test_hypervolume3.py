"""The three-objective hypervolume (``engines.metrics._hv3``, slices of two-objective sweeps)
against botorch's exact ``Hypervolume`` and the slicing recursion of four objectives."""

import numpy as np
import pytest
import torch
from botorch.utils.multi_objective.hypervolume import Hypervolume

from engines.metrics import hypervolume


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_three_objectives_match_botorch_with_dominated_and_outside_rows(seed):
    rng = np.random.default_rng(seed)
    Y = rng.uniform(0, 1.2, (80, 3))  # some rows beyond the reference, most dominated
    ref = np.ones(3)
    inside = Y[np.all(ref > Y, axis=1)]
    # botorch maximizes: negate both.
    expected = Hypervolume(torch.tensor(-ref)).compute(torch.tensor(-inside))
    assert hypervolume(Y, ref) == pytest.approx(expected, rel=1e-9)


def test_a_flat_fourth_objective_gives_the_three_objective_volume():
    rng = np.random.default_rng(3)
    Y = rng.uniform(0, 1, (40, 3))
    ref = np.ones(3)
    Y4 = np.c_[Y, np.zeros(len(Y))]
    assert hypervolume(Y, ref) == pytest.approx(hypervolume(Y4, np.ones(4)), rel=1e-12)
