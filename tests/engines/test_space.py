import math

import numpy as np
import pytest

from engines.errors import SpaceError
from engines.space import (
    MAX_PARAMETERS,
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    SearchSpace,
)

MIXED = [
    FloatParam("lr", 1e-5, 1e-1, log=True),
    FloatParam("x", -2.0, 3.0),
    FloatParam("s", 0.0, 1.0, step=0.25),
    IntParam("n", -3, 3),
    IntParam("width", 1, 1000, log=True),
    CategoricalParam("act", ("relu", 1, True, 2.5)),
    FixedParam("seed", 7),
]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ([FloatParam("x", 1.0, 0.0)], "must be below high"),
        ([FloatParam("x", 0.0, 0.0)], "must be below high"),
        ([FloatParam("x", 0.0, 1.0, log=True)], "log scale needs low > 0"),
        ([IntParam("n", -1, 4, log=True)], "log scale needs low > 0"),
        ([FloatParam("x", 1.0, 2.0, log=True, step=0.1)], "step cannot be combined"),
        ([FloatParam("x", 0.0, 1.0, step=0.0)], "step must be a positive"),
        ([FloatParam("x", 0.0, 1.0), IntParam("x", 0, 3)], "used twice"),
        ([FloatParam("", 0.0, 1.0)], "non-empty name"),
        ([FloatParam("  ", 0.0, 1.0)], "non-empty name"),
        ([CategoricalParam("c", ())], "at least one choice"),
        ([CategoricalParam("c", ("a", "a"))], "appears twice"),
        ([FloatParam("x", 0.0, math.inf)], "finite"),
    ],
)
def test_invalid_spaces_are_rejected_with_a_message(params, message):
    with pytest.raises(SpaceError, match=message):
        SearchSpace(params)


def test_more_than_the_parameter_limit_is_rejected():
    SearchSpace([FloatParam(f"p{i}", 0, 1) for i in range(MAX_PARAMETERS)])
    with pytest.raises(SpaceError, match="at most 1000"):
        SearchSpace([FloatParam(f"p{i}", 0, 1) for i in range(MAX_PARAMETERS + 1)])


def test_categorical_keeps_true_and_one_apart():
    space = SearchSpace([CategoricalParam("c", (1, True, "1"))])
    values = [space.decode(np.array([u]))["c"] for u in (0.1, 0.5, 0.9)]
    assert values[0] == 1 and type(values[0]) is int
    assert values[1] is True
    assert values[2] == "1"


def test_decode_gives_values_in_range_and_of_the_declared_types():
    space = SearchSpace(MIXED)
    assert space.d == 6
    for x in np.random.default_rng(0).random((500, space.d)):
        v = space.decode(x)
        assert 1e-5 <= v["lr"] <= 1e-1 and isinstance(v["lr"], float)
        assert -2.0 <= v["x"] <= 3.0
        assert v["s"] in (0.0, 0.25, 0.5, 0.75, 1.0)
        assert isinstance(v["n"], int) and -3 <= v["n"] <= 3
        assert isinstance(v["width"], int) and 1 <= v["width"] <= 1000
        assert v["act"] in ("relu", 1, True, 2.5)
        assert v["seed"] == 7


def test_bounds_are_reachable():
    space = SearchSpace(MIXED)
    low, high = space.decode(np.zeros(space.d)), space.decode(np.ones(space.d))
    assert (low["lr"], low["x"], low["s"], low["n"], low["width"]) == (1e-5, -2.0, 0.0, -3, 1)
    assert (high["x"], high["s"], high["n"], high["width"]) == (3.0, 1.0, 3, 1000)
    assert high["lr"] == pytest.approx(1e-1)


def test_snap_is_idempotent_and_preserves_decoded_values():
    space = SearchSpace(MIXED)
    X = np.random.default_rng(1).random((300, space.d))
    S = space.snap(X)
    np.testing.assert_array_equal(space.snap(S), S)
    for x, s in zip(X, S, strict=True):
        assert space.decode(x) == space.decode(s)
        np.testing.assert_allclose(space.encode(space.decode(s)), s, atol=1e-12)


def test_uniform_points_give_every_integer_the_same_share():
    space = SearchSpace([IntParam("n", 0, 4)])
    u = np.random.default_rng(2).random(50_000)
    counts = np.bincount([space.decode(np.array([x]))["n"] for x in u], minlength=5)
    # Each share is 0.2; 5 sigma of a binomial share at n = 50,000 is 0.009 (false failure ~1e-6).
    np.testing.assert_allclose(counts / counts.sum(), 0.2, atol=0.009)


def test_log_scale_is_uniform_in_log_space():
    space = SearchSpace([FloatParam("lr", 1e-4, 1.0, log=True)])
    assert space.decode(np.array([0.5]))["lr"] == pytest.approx(1e-2)
    assert space.encode({"lr": 1e-3})[0] == pytest.approx(0.25)


def test_validate_accepts_good_values_and_fills_fixed_ones():
    space = SearchSpace(MIXED)
    values = {"lr": 0.01, "x": 0, "s": 0.5, "n": 2.0, "width": 10, "act": True}
    out = space.validate(values)
    assert out["seed"] == 7 and out["n"] == 2 and isinstance(out["n"], int)
    assert isinstance(out["x"], float)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lr": 1.0}, "outside"),
        ({"x": "a"}, "takes a number"),
        ({"x": True}, "takes a number"),
        ({"n": 1.5}, "takes an integer"),
        ({"s": 0.3}, "not low \\+ k \\* step"),
        ({"act": "tanh"}, "is not one of"),
        ({"act": 1.0}, "is not one of"),
        ({"seed": 8}, "is fixed to"),
        ({"bogus": 1}, "unknown parameter"),
        ({"x": float("nan")}, "not a finite"),
    ],
)
def test_validate_rejects_bad_values(change, message):
    space = SearchSpace(MIXED)
    values = {"lr": 0.01, "x": 0.0, "s": 0.5, "n": 2, "width": 10, "act": "relu", **change}
    with pytest.raises(SpaceError, match=message):
        space.validate(values)


def test_validate_rejects_a_missing_parameter():
    with pytest.raises(SpaceError, match="missing"):
        SearchSpace(MIXED).validate({"lr": 0.01})
