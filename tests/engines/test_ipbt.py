"""The ipbt engine: the stagnation detector, restarts (bookkeeping in the state), the budget."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from engines.base import History, Problem, Unit
from engines.errors import EngineOptionsError
from engines.registry import make_engine
from engines.space import FloatParam, SearchSpace
from engines.time_varying_gp import too_slow
from tests.engines.test_pbt import handed_out, run, trained

LR = Problem(SearchSpace([FloatParam("lr", 1e-3, 1.0, log=True)]))


def curve_train(progress: np.ndarray, params: dict, steps: int) -> np.ndarray:
    """A synthetic learning curve: progress grows fastest at lr = 0.1."""
    rate = math.exp(-((math.log10(float(params["lr"])) + 1.0) ** 2))
    return progress + steps * rate


def accuracy(progress: np.ndarray) -> float:
    return float(1.0 - math.exp(-float(progress[0]) / 50.0))


def test_too_slow_needs_fifteen_points_and_one_standard_deviation_of_gain():
    flat = [-0.5] * 15
    assert not too_slow(flat[:-1])
    assert too_slow(flat)
    improving = [-0.01 * i for i in range(15)]  # lower is better: every step gains
    assert not too_slow(improving)
    # Progress, then a plateau longer than the window: too slow, whatever came before.
    plateau = list(-np.linspace(0.1, 0.9, 16)) + [-0.9] * 14
    assert too_slow(plateau)
    assert not too_slow([*plateau[:-1], -1.5])  # a large gain inside the window


def _schedule(options: dict, seed: int = 0):
    engine = make_engine("ipbt", options)
    return run(engine, LR, curve_train, accuracy, np.zeros(1), asynchronous=False, seed=seed)


def test_an_iteration_starts_with_2p_candidates_and_keeps_the_best_p():
    units, _, _ = _schedule({"t_max": 400, "population_size": 4, "initial_step_share": 0.05})
    first = [u for u in units if u.spec["generation"] == 0]
    assert len(first) == 8
    assert all(u.spec["eval_before"] and u.spec["start"] == {"kind": "fresh"} for u in first)
    second = [u for u in units if u.spec["generation"] == 1]
    assert len(second) == 4
    best4 = sorted(first, key=lambda u: u.y)[:4]
    starts = {u.spec["start"]["trial"] for u in second}
    top, bottom = best4[:1], best4[-1:]
    # The top member continues; the bottom one copies a top member's exact checkpoint.
    assert top[0].number in starts
    exploit = [u for u in second if u.spec["reason"] == "exploit"]
    assert len(exploit) == 1 and exploit[0].spec["start"]["trial"] == top[0].number
    assert bottom[0].number not in starts


def test_stagnation_restarts_with_the_step_doubled_and_shrink_perturb():
    units, _, proposals = _schedule(
        {"t_max": 1000, "population_size": 4, "initial_step_share": 0.02}
    )
    restarts = [u for u in units if u.spec["reason"] == "restart"]
    assert restarts, "the plateau of the curve should trigger at least one restart"
    iteration1 = [u for u in restarts if u.spec["iteration"] == 1]
    assert len(iteration1) == 8
    assert all(u.spec["eval_before"] for u in iteration1)
    lengths = {u.spec["to_step"] - u.spec["from_step"] for u in iteration1}
    assert lengths == {40}  # 2 % of t_max, doubled
    pairs = sorted(
        (u.spec["transform"]["shrink"], u.spec["transform"]["perturb"]) for u in iteration1
    )
    assert pairs == [(0.0, 1.0)] * 4 + [(0.2, 0.1)] * 4
    sources = sorted(u.spec["source"] for u in iteration1)
    assert sources == ["meta_bo"] * 4 + ["random"] * 4
    # State bookkeeping at the restart: the ask that planned it.
    restart_plan = next(p for p in proposals if p.units and p.units[0]["reason"] == "restart")
    state = restart_plan.state
    assert state["iteration"] == 1 and state["t_step"] == 40 and state["n_fail"] == 0
    assert state["best"] == [] and state["tr_length"] == 0.4
    assert len(state["pinned_bests"]) == 1
    assert state["pinned_bests"][0] in state["pinned"]


def test_the_budget_is_p_times_t_max_and_restarts_stop_near_the_end():
    t_max, P = 1000, 4
    units, _, proposals = _schedule(
        {"t_max": t_max, "population_size": P, "initial_step_share": 0.02}, seed=1
    )
    spent = sum(u.spec["to_step"] - u.spec["from_step"] for u in units)
    assert P * t_max - P < spent <= P * t_max
    final = proposals[-1].state
    assert final["finished"] and final["spent"] == spent
    # A restart is planned only if its 2P step and one more step of the doubled size fit.
    for u in units:
        if u.spec["reason"] == "restart":
            before = sum(
                v.spec["to_step"] - v.spec["from_step"]
                for v in units
                if v.spec["generation"] < u.spec["generation"]
            )
            old_step = (u.spec["to_step"] - u.spec["from_step"]) // 2
            assert before / P + old_step + 4 * old_step <= t_max
    assert all(u.state == "completed" for u in units)


def test_ipbt_beats_its_own_start_and_is_reproducible():
    options = {"t_max": 400, "population_size": 4, "initial_step_share": 0.05}
    a, _, _ = _schedule(options, seed=3)
    b, _, _ = _schedule(options, seed=3)
    assert [u.spec for u in a] == [u.spec for u in b]
    best = min(u.y for u in a)
    first = min(u.y for u in a if u.spec["generation"] == 0)
    assert best < first - 0.3


@dataclasses.dataclass
class LaterAsksReseeded:
    """The ipbt engine, with every ask after the first given a generator of ``other``: as if
    a different number of asks had found a generation still training."""

    engine: object
    other: int

    def suggest(self, problem, history, count, state, rng):
        if state:
            rng = np.random.default_rng([self.other, len(history.units)])
        return self.engine.suggest(problem, history, count, state, rng)


def test_the_generations_do_not_depend_on_how_many_asks_waited():
    options = {"t_max": 400, "population_size": 4, "initial_step_share": 0.05}
    runs = [
        run(
            LaterAsksReseeded(make_engine("ipbt", options), other),
            LR,
            curve_train,
            accuracy,
            np.zeros(1),
            asynchronous=False,
            seed=3,
        )[0]
        for other in (1, 2)
    ]
    assert len({u.spec["generation"] for u in runs[0]}) > 3
    assert [u.spec for u in runs[0]] == [u.spec for u in runs[1]]


@pytest.mark.parametrize(
    "options, match",
    [({}, "t_max"), ({"t_max": 100, "initial_step_share": 0.0}, "initial_step_share")],
)
def test_bad_options_are_refused(options, match):
    with pytest.raises(EngineOptionsError, match=match):
        make_engine("ipbt", options)


def test_a_call_is_light_exactly_when_it_closes_no_generation():
    """Workers take 3 units per ask and tell one or two of their units between asks, so asks
    hand out part of a plan, find a generation training, or close it (restarts included);
    ``light_call`` must say beforehand which asks closed none."""
    engine = make_engine("ipbt", {"t_max": 1000, "population_size": 4, "initial_step_share": 0.02})
    rng = np.random.default_rng(0)
    units: list[Unit] = []
    store: dict[str, np.ndarray] = {}
    state: dict = {}
    seen = {"light": 0, "closing": 0, "waiting": 0}
    for version in range(2000):
        history = dataclasses.replace(History.empty(LR), units=tuple(units))
        light = engine.light_call(history, state)
        proposal = engine.suggest(LR, history, 3, state, np.random.default_rng(version))
        closed = bool(state) and (
            proposal.state["generation"] != state["generation"]
            or proposal.state["finished"] != state["finished"]
        )
        assert light == (not closed), (version, state.get("generation"))
        seen["light" if light else "closing"] += 1
        seen["waiting"] += proposal.retry_after is not None
        state = proposal.state
        units += handed_out(proposal, len(units))
        pending = [u for u in units if u.state == "pending"]
        if not pending and not len(proposal.X) and proposal.retry_after is None:
            break
        for u in pending[: int(rng.integers(1, 3))]:
            units[u.number] = trained(u, LR, curve_train, accuracy, np.zeros(1), store)
    assert state["finished"] and state["iteration"] >= 1
    assert seen["closing"] > 10 and seen["waiting"] > 10 and seen["light"] > seen["closing"]
