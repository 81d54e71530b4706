"""The pbt engine: Jaderberg's toy, exploit/explore rules, synchronous generations, failures."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from engines.base import History, Problem, Proposal, Unit
from engines.errors import EngineOptionsError
from engines.pbt import Member, explore, quantiles
from engines.registry import make_engine
from engines.space import CategoricalParam, FloatParam, IntParam, SearchSpace

# Jaderberg et al. 2017, Fig. 2: maximize Q(theta) = 1.2 - theta_0^2 - theta_1^2 while each
# member ascends the surrogate Q_hat(theta | h) = 1.2 - h_0 theta_0^2 - h_1 theta_1^2, with
# h = [1, 0] or [0, 1]: alone, a member only ever shrinks one coordinate.
TOY = Problem(SearchSpace([CategoricalParam("h", ("first", "second"))]))
THETA0 = np.array([0.9, 0.9])
LR = 0.01
T_MAX = 200


def q(theta: np.ndarray) -> float:
    return float(1.2 - np.sum(theta**2))


def toy_train(theta: np.ndarray, h: str, steps: int) -> np.ndarray:
    mask = np.array([1.0, 0.0]) if h == "first" else np.array([0.0, 1.0])
    for _ in range(steps):
        theta = theta - LR * 2.0 * mask * theta  # gradient ascent on Q_hat
    return theta


def grid_best() -> float:
    """The best Q a fixed h reaches in T_MAX steps: both settings leave one coordinate at 0.9."""
    return max(q(toy_train(THETA0, h, T_MAX)) for h in ("first", "second"))


def run(
    engine,
    problem: Problem,
    train: Callable[[np.ndarray, dict, int], np.ndarray],
    score: Callable[[np.ndarray], float],
    start: np.ndarray,
    asynchronous: bool,
    seed: int = 0,
    fail: Callable[[Unit], bool] = lambda u: False,
) -> tuple[list[Unit], dict[str, np.ndarray], list[Proposal]]:
    """Drive a scheduler with simulated workers. Asynchronous: one worker tells the oldest
    pending unit between asks. Synchronous: the population's pending units are all told when
    the engine asks to wait. Checkpoints are kept in a dict by reference; shrink-perturb mixes
    the loaded weights with ``start`` (the fresh weights); ``eval_before`` scores the weights
    before training."""
    units: list[Unit] = []
    store: dict[str, np.ndarray] = {}
    proposals: list[Proposal] = []
    state: dict = {}
    for version in range(10_000):
        history = dataclasses.replace(History.empty(problem), units=tuple(units))
        proposal = engine.suggest(
            problem,
            history,
            1 if asynchronous else 8,
            state,
            np.random.default_rng([seed, version]),
        )
        proposals.append(proposal)
        state = proposal.state
        units += handed_out(proposal, len(units))
        pending = [u for u in units if u.state == "pending"]
        if not len(proposal.X) and proposal.retry_after is None:
            assert not pending
            return units, store, proposals
        if asynchronous and len(proposal.X) and len(pending) < 2:
            continue  # two workers: ask again before telling
        for u in pending[:1] if asynchronous else pending:
            if fail(u):
                units[u.number] = dataclasses.replace(u, state="failed")
                continue
            units[u.number] = trained(u, problem, train, score, start, store)
    raise AssertionError("the schedule did not finish")


def handed_out(proposal: Proposal, first: int) -> list[Unit]:
    """The proposal's units as pending trials numbered from ``first``."""
    return [
        Unit(number=first + i, x=x, spec=doc, state="pending")
        for i, (x, doc) in enumerate(zip(proposal.X, proposal.units, strict=True))
    ]


def trained(
    u: Unit,
    problem: Problem,
    train: Callable[[np.ndarray, dict, int], np.ndarray],
    score: Callable[[np.ndarray], float],
    start: np.ndarray,
    store: dict[str, np.ndarray],
) -> Unit:
    """``u`` trained and told by a simulated worker, its checkpoint saved in ``store``: the
    start loaded (shrink-perturb mixes in ``start``, the fresh weights), scored before
    training when asked (``eval_before``)."""
    doc = u.spec
    theta = start if doc["start"]["kind"] == "fresh" else store[doc["start"]["checkpoint"]]
    transform = doc.get("transform", {"kind": "none"})
    if transform["kind"] == "shrink_perturb":
        theta = transform["shrink"] * theta + transform["perturb"] * start
    before = -score(theta) if doc.get("eval_before") else None
    theta = train(theta, problem.space.decode(u.x), doc["to_step"] - doc["from_step"])
    ref = f"ckpt-{u.number}"
    store[ref] = theta
    return dataclasses.replace(
        u, state="completed", y=-score(theta), y_before=before, checkpoint=ref
    )


@pytest.mark.parametrize("synchronous", [True, False])
def test_jaderberg_toy_reaches_a_score_no_grid_point_reaches(synchronous):
    engine = make_engine(
        "pbt",
        {"t_max": T_MAX, "population_size": 2, "interval": 10, "synchronous": synchronous},
    )
    units, _, _ = run(
        engine,
        TOY,
        lambda theta, params, steps: toy_train(theta, str(params["h"]), steps),
        q,
        THETA0,
        asynchronous=not synchronous,
    )
    first = [u for u in units if u.spec["reason"] == "initial"]
    assert {TOY.space.decode(u.x)["h"] for u in first} == {"first", "second"}
    best = max(-u.y for u in units if u.y is not None)
    assert grid_best() < 0.4
    assert best > 1.1 > grid_best() + 0.7
    assert any(u.spec["reason"] == "exploit" for u in units)
    # Every member trained exactly to t_max, in steps of the interval.
    for m in (0, 1):
        last = [u for u in units if u.spec["member"] == m][-1]
        assert last.spec["to_step"] == T_MAX


def test_a_synchronous_generation_waits_for_every_member_then_ranks_them():
    problem = Problem(SearchSpace([FloatParam("lr", 1e-4, 1.0, log=True)]))
    engine = make_engine(
        "pbt", {"t_max": 30, "population_size": 4, "interval": 10, "synchronous": True}
    )
    first = engine.suggest(problem, History.empty(problem), 3, {}, np.random.default_rng(0))
    assert len(first.X) == 3 and first.retry_after is None
    units = [
        Unit(number=i, x=x, spec=doc, state="pending")
        for i, (x, doc) in enumerate(zip(first.X, first.units, strict=True))
    ]
    history = dataclasses.replace(History.empty(problem), units=tuple(units))
    second = engine.suggest(problem, history, 3, first.state, np.random.default_rng(1))
    # The plan's fourth member, then nothing until the generation is told.
    assert [d["member"] for d in second.units] == [3]
    assert second.units[0]["generation"] == 0
    units.append(Unit(number=3, x=second.X[0], spec=second.units[0], state="pending"))
    history = dataclasses.replace(History.empty(problem), units=tuple(units))
    wait = engine.suggest(problem, history, 2, second.state, np.random.default_rng(2))
    assert len(wait.X) == 0 and wait.retry_after == engine.poll_seconds
    # Three told, one still training: still waiting.
    scores = [0.1, 0.4, 0.2, 0.9]  # member 0 best, member 3 worst
    told = [
        dataclasses.replace(u, state="completed", y=scores[u.number], checkpoint=f"c{u.number}")
        for u in units
    ]
    history = dataclasses.replace(History.empty(problem), units=tuple(told[:3] + units[3:]))
    assert len(engine.suggest(problem, history, 2, wait.state, np.random.default_rng(3)).X) == 0
    history = dataclasses.replace(History.empty(problem), units=tuple(told))
    nxt = engine.suggest(problem, history, 4, wait.state, np.random.default_rng(4))
    by_member = {d["member"]: d for d in nxt.units}
    assert {d["generation"] for d in nxt.units} == {1}
    # n = min(ceil(0.25 * 4), 2) = 1: member 3 copies member 0; the others continue.
    assert by_member[3]["reason"] == "exploit"
    assert by_member[3]["start"] == {"kind": "checkpoint", "trial": 0, "checkpoint": "c0"}
    for m in (0, 1, 2):
        assert by_member[m]["reason"] == "continue"
        assert by_member[m]["start"]["trial"] == m
        assert (by_member[m]["from_step"], by_member[m]["to_step"]) == (10, 20)
    exploited = nxt.X[[d["member"] for d in nxt.units].index(3)]
    ratio = problem.space.decode(exploited)["lr"] / problem.space.decode(told[0].x)["lr"]
    assert ratio != pytest.approx(1.0)  # perturbed by 0.8 or 1.2, or resampled
    # Every member's last checkpoint stays pinned (3's too: were its unit to fail with nobody
    # to copy, it would continue from it).
    assert sorted(nxt.state["pinned"]) == [0, 1, 2, 3]


def test_quantiles_follow_ray_tune_rule_and_skip_failed_and_finished_members():
    def member(i: int, y: float | None, state: str = "completed", to_step: int = 10) -> Member:
        spec = {"member": i, "to_step": to_step, "from_step": 0}
        x = np.zeros(1)
        unit = Unit(i, x, spec, state, y, None, "c" if y is not None else None)  # type: ignore[arg-type]
        return Member(i, [unit])

    ranked = [member(i, float(i)) for i in range(5)]
    top, bottom = quantiles(ranked, 0.25, t_max=100)
    assert [m.index for m in top] == [0, 1] and [m.index for m in bottom] == [3, 4]
    top, bottom = quantiles(ranked[:2], 0.25, t_max=100)
    assert [m.index for m in top] == [0] and [m.index for m in bottom] == [1]
    others = [member(5, None, "failed"), member(6, -1.0, to_step=100)]
    top, bottom = quantiles(ranked[:2] + others, 0.25, t_max=100)
    assert [m.index for m in top] == [0] and [m.index for m in bottom] == [1]


def test_explore_perturbs_by_the_factors_moves_categoricals_and_ints_by_one():
    space = SearchSpace(
        [
            FloatParam("lr", 0.001, 1.0, log=True),
            IntParam("batch", 1, 4),
            CategoricalParam("opt", ("sgd", "adam", "lion")),
        ]
    )
    x = space.encode({"lr": 0.1, "batch": 2, "opt": "adam"})
    seen: dict[str, set] = {"lr": set(), "batch": set(), "opt": set()}
    rng = np.random.default_rng(0)
    for _ in range(200):
        values = space.decode(explore(space, x, rng, 0.0, (0.8, 1.2)))
        for k, v in values.items():
            seen[k].add(round(v, 9) if isinstance(v, float) else v)
    assert seen == {"lr": {0.08, 0.12}, "batch": {1, 3}, "opt": {"sgd", "lion"}}
    resampled = {space.decode(explore(space, x, rng, 1.0, (0.8, 1.2)))["batch"] for _ in range(200)}
    assert resampled == {1, 2, 3, 4}


def test_a_failed_unit_makes_its_member_exploit_and_the_schedule_still_finishes():
    engine = make_engine("pbt", {"t_max": 60, "population_size": 4, "interval": 10})
    problem = Problem(SearchSpace([FloatParam("a", 0.0, 1.0)]))
    fails = {5, 9}
    units, _, _ = run(
        engine,
        problem,
        lambda theta, params, steps: theta + steps * float(params["a"]),
        lambda theta: float(theta[0]),
        np.zeros(1),
        asynchronous=True,
        fail=lambda u: u.number in fails,
    )
    for n in fails:
        member = units[n].spec["member"]
        after = [u for u in units if u.spec["member"] == member and u.number > n]
        assert after[0].spec["reason"] in ("exploit", "initial")
        if after[0].spec["reason"] == "exploit":
            assert after[0].spec["start"]["trial"] != n
    assert all(
        [u for u in units if u.spec["member"] == m][-1].spec["to_step"] == 60 for m in range(4)
    )


def test_a_member_whose_units_keep_failing_is_dropped():
    engine = make_engine("pbt", {"t_max": 30, "population_size": 2, "interval": 10})
    problem = Problem(SearchSpace([FloatParam("a", 0.0, 1.0)]))
    units, _, _ = run(
        engine,
        problem,
        lambda theta, params, steps: theta + steps,
        lambda theta: float(theta[0]),
        np.zeros(1),
        asynchronous=True,
        fail=lambda u: u.spec["member"] == 1,
    )
    assert [u.state for u in units if u.spec["member"] == 1] == ["failed"] * 3


@pytest.mark.parametrize(
    "options, match",
    [
        ({}, "t_max"),
        ({"t_max": 10, "interval": 11}, "interval"),
        ({"t_max": 10, "population_size": 1}, "population_size"),
        ({"t_max": 10, "quantile": 0.6}, "quantile"),
        ({"t_max": 10, "perturb_up": 0.9}, "perturb"),
    ],
)
def test_bad_options_are_refused(options, match):
    with pytest.raises(EngineOptionsError, match=match):
        make_engine("pbt", options)
