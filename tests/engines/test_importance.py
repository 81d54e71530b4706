"""``engines.importance.fanova_importances`` against Optuna's ``FanovaImportanceEvaluator``
(the same forest, the same seed: the same importances) and its edge cases."""

import numpy as np
import optuna
import pytest

from engines.importance import fanova_importances


def test_matches_optunas_fanova_evaluator():
    rng = np.random.default_rng(0)
    X = rng.random((80, 3))
    y = 3 * X[:, 0] ** 2 + np.sin(4 * X[:, 1]) + 0.1 * X[:, 2]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    dists = {f"x{j}": optuna.distributions.FloatDistribution(0, 1) for j in range(3)}
    for row, value in zip(X, y, strict=True):
        params = {f"x{j}": float(v) for j, v in enumerate(row)}
        study.add_trial(
            optuna.trial.create_trial(params=params, distributions=dists, value=float(value))
        )
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    expected = optuna.importance.get_param_importances(study, evaluator=evaluator)
    ours = fanova_importances(X, y, seed=0)
    assert ours.tolist() == pytest.approx([expected[f"x{j}"] for j in range(3)], abs=1e-6)
    assert ours.sum() == pytest.approx(1.0) and np.argmax(ours) == 0


def test_a_constant_objective_gives_zeros_and_a_seed_gives_the_same_result():
    X = np.random.default_rng(1).random((20, 2))
    assert fanova_importances(X, np.ones(20)).tolist() == [0.0, 0.0]
    y = X[:, 1] + 0.1 * X[:, 0]
    assert fanova_importances(X, y, seed=4).tolist() == fanova_importances(X, y, seed=4).tolist()


def test_fewer_than_two_rows_are_refused():
    with pytest.raises(ValueError, match="n >= 2"):
        fanova_importances(np.zeros((1, 2)), np.zeros(1))


def test_huge_and_tiny_values_give_finite_importances_of_the_scaled_values():
    X = np.random.default_rng(2).random((30, 3))
    y = np.where(X[:, 0] > 0.5, 1.0, -1.0) + 0.1 * X[:, 1]
    for scale in (1e300, 1e-300):
        got = fanova_importances(X, scale * y, seed=0)
        assert np.isfinite(got).all() and got.sum() == pytest.approx(1.0)
        expected = fanova_importances(X, scale * y / np.abs(scale * y).max(), seed=0)
        assert got.tolist() == expected.tolist() and np.argmax(got) == 0
