"""Every engine's work caps (engines/limits.py) and option caps: refused before any work."""

from __future__ import annotations

import dataclasses

import pytest

from engines.base import Problem
from engines.errors import EngineOptionsError, EngineWorkTooLarge
from engines.limits import WorkLimits, check_ask, check_problem, engine_limits, max_count
from engines.registry import engine_class, engine_names, make_engine
from engines.space import CategoricalParam, FloatParam, SearchSpace

#: Options the schedulers need to be built at all.
REQUIRED = {"pbt": {"t_max": 100}, "ipbt": {"t_max": 100}}

#: Every capped option, a value just over its cap and the cap the message names.
OVER_CAPS = [
    ("gp", "num_restarts", 17, "16"),
    ("gp", "raw_samples", 1025, "1024"),
    ("gp", "max_discrete_levels", 1001, "1000"),
    ("pom", "n_samples", 129, "128"),
    ("pom", "pool_size", 4097, "4096"),
    ("pom", "top_candidates", 1025, "1024"),
    ("pom", "num_features", 1025, "1024"),
    ("pom", "refine_points", 257, "256"),
    ("mwgd", "n_particles", 129, "128"),
    ("mwgd", "steps", 201, "200"),
    ("lcbo", "local_points", 501, "500"),
    ("lcbo", "n_candidates", 5001, "5000"),
    ("lcbo", "num_restarts", 17, "16"),
    ("turbo-enn", "k_neighbors", 101, "100"),
    ("turbo-enn", "n_candidates", 10_001, "10000"),
    ("turbo-enn", "fit_candidates", 101, "100"),
    ("turbo-enn", "fit_samples", 1001, "1000"),
    ("auto", "switch_at", 501, "500"),
    ("pbt", "population_size", 1001, "1000"),
    ("ipbt", "population_size", 1001, "1000"),
]


def _problem(d: int, **kwargs: int) -> Problem:
    return Problem(SearchSpace([FloatParam(f"x{i}", 0, 1) for i in range(d)]), **kwargs)


@pytest.mark.parametrize(("engine", "option", "value", "cap"), OVER_CAPS)
def test_an_option_over_its_cap_is_refused_naming_it_and_the_cap(engine, option, value, cap):
    with pytest.raises(EngineOptionsError) as caught:
        make_engine(engine, {**REQUIRED.get(engine, {}), option: value})
    assert option in str(caught.value) and cap in str(caught.value)


@pytest.mark.parametrize(("engine", "option", "value", "cap"), OVER_CAPS)
def test_an_option_at_its_cap_is_accepted(engine, option, value, cap):
    options = {**REQUIRED.get(engine, {}), option: int(cap)}
    if option == "raw_samples":
        options["num_restarts"] = 16
    assert getattr(make_engine(engine, options), option) == int(cap)


@pytest.mark.parametrize("name", engine_names())
def test_every_engine_states_caps_within_the_api_and_space_ranges(name):
    limits = engine_limits(make_engine(name, REQUIRED.get(name, {})), _problem(5))
    assert isinstance(limits, WorkLimits)
    assert 1 <= limits.max_count <= 1000 and 1 <= limits.max_dimension <= 1000
    assert limits.max_points >= limits.max_count


@pytest.mark.parametrize("name", engine_names())
def test_an_ask_over_the_count_cap_is_refused(name):
    engine = make_engine(name, REQUIRED.get(name, {}))
    problem = _problem(10)
    cap = max_count(engine_limits(engine, problem), problem.d)
    check_ask(engine, problem, cap)
    if cap == 1000:  # random: the API's own cap on count (AskRequest) is the engine's
        return
    with pytest.raises(EngineWorkTooLarge, match=f"at most {cap} trials per ask"):
        check_ask(engine, problem, cap + 1)


@pytest.mark.parametrize("name", engine_names())
def test_a_study_over_the_dimension_cap_is_refused(name):
    engine = make_engine(name, REQUIRED.get(name, {}))
    cap = engine_limits(engine, _problem(1)).max_dimension
    check_problem(engine, _problem(cap))
    if cap == 1000:  # the search space's own cap (engines.space.MAX_PARAMETERS)
        return
    with pytest.raises(EngineWorkTooLarge, match=f"at most {cap} free parameters"):
        check_problem(engine, _problem(cap + 1))


def test_count_times_dimension_is_capped():
    gp = make_engine("gp")
    limits = engine_class("gp").limits
    d = limits.max_dimension
    assert max_count(limits, d) == limits.max_points // d < limits.max_count
    with pytest.raises(EngineWorkTooLarge, match="count x d"):
        check_ask(gp, _problem(d), limits.max_points // d + 1)


def test_auto_takes_the_tightest_caps_of_the_engines_it_may_delegate_to():
    auto = make_engine("auto")
    # One objective, no constraint: gp first, turbo-enn from switch_at on.
    assert engine_limits(auto, _problem(5)).max_dimension == engine_class("gp").limits.max_dimension
    # Tiny budget: random throughout.
    tiny = make_engine("auto", {"expected_trials": 1})
    assert engine_limits(tiny, _problem(5)) == dataclasses.replace(
        engine_class("random").limits, observations=None
    )
    # Two objectives and a categorical: gp.
    mixed = Problem(SearchSpace([FloatParam("x", 0, 1), CategoricalParam("c", ("a", "b"))]), 2)
    assert engine_limits(auto, mixed).max_count == engine_class("gp").limits.max_count
