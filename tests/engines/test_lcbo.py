"""Tests of the ``lcbo`` engine (``engines/lcbo.py``): merit, KKT residual, gradient
information, the local search, seeds.

Every run is deterministic (seeded ``rng`` and torch, float64), so the margins below are not
statistical tolerances: a run meets them or the engine changed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import qmc

from engines import bo, local_gp
from engines.base import History, Problem
from engines.bo import fit_gp, seeded
from engines.errors import EngineOptionsError, EngineUnsupported
from engines.local_gp import LocalGP, Merit, kkt_at, kkt_residual
from engines.registry import make_engine
from engines.space import FloatParam, IntParam, SearchSpace


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _problem(d: int, k: int) -> Problem:
    return Problem(SearchSpace([FloatParam(f"x{i}", 0.0, 1.0) for i in range(d)]), n_constraints=k)


def _sobol(d: int, n: int, seed: int = 0) -> np.ndarray:
    return qmc.Sobol(d, scramble=True, seed=seed).random(n)


def _local_gps(X: np.ndarray, columns: np.ndarray) -> list[LocalGP]:
    tX = torch.as_tensor(X)
    with seeded(0, False):
        return [LocalGP(fit_gp(tX, columns[:, i], [])) for i in range(columns.shape[1])]


def _convex(X: np.ndarray) -> np.ndarray:
    """``f = ||x - (0.8, 0.8)||^2`` and ``c = x_0 + x_1 - 1``: the constrained minimum is
    (0.5, 0.5), where ``grad f = -lambda grad c`` with ``lambda = 0.6``."""
    f = ((X - 0.8) ** 2).sum(axis=1)
    return np.column_stack([f, X.sum(axis=1) - 1.0])


@pytest.mark.parametrize("n_outputs", [1, 3])
def test_local_gp_posterior_is_botorchs_in_standardized_units(n_outputs):
    X = _sobol(3, 24)
    Y = np.column_stack([np.sin((3 + i) * X).sum(1) * (i + 1) + i for i in range(n_outputs)])
    with seeded(0, False):
        model = fit_gp(torch.as_tensor(X), Y[:, 0] if n_outputs == 1 else Y, [])
    Z = torch.as_tensor(_sobol(3, 7, seed=1))
    with torch.no_grad():
        posterior = model.posterior(Z)
    for i in range(n_outputs):
        local = LocalGP(model, i)
        with torch.no_grad():
            mean = (posterior.mean[:, i] - local.offset) / local.scale
            std = posterior.variance[:, i].sqrt() / local.scale
            np.testing.assert_allclose(local.mean(Z).numpy(), mean.numpy(), rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(local.std(Z).numpy(), std.numpy(), rtol=1e-5, atol=1e-8)
    # A batch's GPs are fitted each to its own column: their hyperparameters differ.
    if n_outputs > 1:
        assert LocalGP(model, 0).hyperparameters() != LocalGP(model, 1).hyperparameters()


def test_merit_gradient_matches_finite_differences():
    X = _sobol(3, 24)
    columns = np.column_stack([np.sin(3 * X).sum(1), X[:, 0] - X[:, 1] ** 2, (X**2).sum(1) - 0.5])
    models = _local_gps(X, columns)
    points = torch.as_tensor(_sobol(3, 4, seed=1))
    for feasibility in (False, True):
        merit = Merit(models, penalty=10.0, feasibility=feasibility, beta=1.0, temperature=0.05)
        Z = points.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(merit(Z).sum(), Z)
        h = 1e-6
        for i in range(3):
            step = torch.zeros_like(points)
            step[:, i] = h
            with torch.no_grad():
                fd = (merit(points + step) - merit(points - step)) / (2 * h)
            np.testing.assert_allclose(grad[:, i].numpy(), fd.numpy(), rtol=1e-5, atol=1e-6)
    # The penalty term is active: the merit with constraints differs from the objective's mean.
    merit = Merit(models, penalty=10.0, feasibility=False, beta=1.0, temperature=0.05)
    with torch.no_grad():
        assert not torch.allclose(merit(points), models[0].mean(points))


def test_kkt_residual_of_exact_gradients_is_zero_at_the_optimum_and_not_elsewhere():
    # At (0.5, 0.5): grad f = (-0.6, -0.6), grad c = (1, 1), c = 0.
    r, lam = kkt_residual(
        np.array([-0.6, -0.6]), np.array([[1.0, 1.0]]), np.zeros(1), np.full(2, 0.5)
    )
    assert r == pytest.approx(0.0, abs=1e-12) and lam == pytest.approx([0.6])
    # Infeasible point: the violation counts. Interior point far from the constraint: the
    # gradient counts. A corner whose gradient points out of the cube: the bounds absorb it.
    r_out, _ = kkt_residual(np.zeros(2), np.array([[1.0, 1.0]]), np.array([0.4]), np.full(2, 0.7))
    assert r_out == pytest.approx(0.4)
    r_in, lam_in = kkt_residual(
        np.array([0.3, -0.4]), np.array([[1.0, 1.0]]), np.array([-0.5]), np.full(2, 0.2)
    )
    assert r_in == pytest.approx(0.5) and lam_in == pytest.approx([0.0])
    r_corner, _ = kkt_residual(
        np.array([1.0, -1.0]), np.zeros((0, 2)), np.zeros(0), np.array([0.0, 1.0])
    )
    assert r_corner == pytest.approx(0.0, abs=1e-12)


def test_kkt_residual_of_the_surrogates_is_near_zero_at_a_constrained_optimum():
    X = _sobol(2, 32)
    models = _local_gps(X, _convex(X))
    at_optimum, lam = kkt_at(models, np.array([0.5, 0.5]))
    away, _ = kkt_at(models, np.array([0.2, 0.3]))
    infeasible, _ = kkt_at(models, np.array([0.9, 0.6]))
    assert at_optimum < 0.05
    assert away > 20 * at_optimum and infeasible > 20 * at_optimum
    assert lam[0] > 0  # the constraint is active with a positive multiplier


def test_gradient_information_is_the_drop_of_the_gradient_variance():
    X = _sobol(3, 16)
    (model,) = _local_gps(X, np.sin(4 * X).sum(1, keepdims=True))
    anchor = torch.as_tensor([0.4, 0.5, 0.6], dtype=torch.float64)
    Z = torch.as_tensor(_sobol(3, 5, seed=2))
    A = model.X
    gains = model.gradient_information(anchor, A, Z)
    before = model.gradient_trace(anchor, A)
    for z, gain in zip(Z, gains, strict=True):
        after = model.gradient_trace(anchor, torch.cat([A, z[None, :]]))
        assert float(gain) == pytest.approx(before - after, rel=1e-6, abs=1e-9)
    assert before > 0 and float(gains.max()) > 0


class Driver:
    """Ask/tell rounds against the engine with a scripted problem ``(n, d) -> (f, C)``."""

    def __init__(self, d, k, fn, seed=0, **options):
        self.problem, self.fn = _problem(d, k), fn
        self.engine = make_engine("lcbo", {"n_initial": 6, **options})
        self.X, self.Y, self.C = np.zeros((0, d)), np.zeros((0, 1)), np.zeros((0, k))
        self.X_failed = np.zeros((0, d))
        self.state: dict = {}
        self.rng = np.random.default_rng(seed)
        self.details: list[dict] = []

    def round(self, q: int, fail: bool = False) -> np.ndarray:
        """Ask for ``q`` points and tell them, as failed trials when ``fail``."""
        d = self.problem.d
        history = History(self.X, self.Y, self.C, np.zeros((0, d)), self.X_failed)
        proposal = self.engine.suggest(self.problem, history, q, self.state, self.rng)
        self.state, self.details = proposal.state, proposal.details
        if fail:
            self.X_failed = np.vstack([self.X_failed, proposal.X])
            return proposal.X
        f, C = self.fn(proposal.X)
        self.X = np.vstack([self.X, proposal.X])
        self.Y = np.vstack([self.Y, f.reshape(-1, 1)])
        self.C = np.vstack([self.C, C])
        return proposal.X

    def feasible(self) -> np.ndarray:
        return np.all(self.C <= 0, axis=1)


def _small_disk(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimize ``x_0 + x_1`` over a disk of radius 0.05 at (0.7, 0.2): 0.8 % of the square."""
    c = np.linalg.norm(X - np.array([0.7, 0.2]), axis=1) - 0.05
    return X.sum(axis=1), c[:, None]


def test_finds_a_point_of_a_small_feasible_set_then_improves_inside_it():
    run = Driver(2, 1, _small_disk)
    phases = []
    for _ in range(20):
        run.round(2)
        phases.append(run.state["phase"])
    assert run.feasible().any()
    first = int(np.argmax(run.feasible()))
    assert first < 30  # Sobol alone would need about 125 points for one hit on average
    assert phases[phases.index("optimize") - 1] == "feasibility"
    best = run.Y[run.feasible(), 0].min()
    assert best < run.Y[first, 0] and best < 0.9 - 0.05 * np.sqrt(2) + 0.02


def test_a_batch_is_one_descent_point_and_exploration_points_near_it():
    run = Driver(3, 1, lambda X: (((X - 0.3) ** 2).sum(1), X[:, :1] - 0.9))
    run.round(6)
    X = run.round(4)
    assert [d["role"] for d in run.details] == ["descent"] + ["exploration"] * 3
    assert {d["phase"] for d in run.details} == {"optimize"}
    assert np.all(np.abs(X[1:] - X[0]) <= 0.1 + 1e-12)  # inside B(x+), step 0.1
    state = run.state
    assert state["iterate_row"] is not None and state["kkt_residual"] is not None
    assert len(state["hyperparameters"]) == 2 and len(state["hyperparameters"][0]) == 4


def test_q1_alternates_descent_and_exploration():
    run = Driver(2, 0, lambda X: (((X - 0.3) ** 2).sum(1), np.zeros((len(X), 0))))
    run.round(6)
    roles = []
    for _ in range(4):
        run.round(1)
        roles.append(run.details[0]["role"])
    assert roles == ["descent", "exploration", "descent", "exploration"]


def test_a_stalled_search_restarts_with_a_fresh_design():
    run = Driver(2, 0, lambda X: (np.ones(len(X)), np.zeros((len(X), 0))), restart_patience=8)
    for _ in range(6):
        run.round(2)
    assert run.state["generation"] >= 1
    assert any(d["source"] == "sobol" for d in run.details) or run.state["n_init_given"] > 0


def test_a_failed_descent_point_is_not_proposed_again_and_failures_count_as_stalls():
    run = Driver(3, 1, lambda X: (((X - 0.3) ** 2).sum(1), X[:, :1] - 0.9))
    # Integers 0..20: the descent of the next ask snaps onto the same cell as the failed one.
    space = SearchSpace([IntParam(f"x{i}", 0, 20) for i in range(3)])
    run.problem = Problem(space, n_constraints=1)
    run.round(6)
    run.round(4)
    run.round(4)
    failed = space.snap(run.round(4, fail=True))  # the whole batch crashed
    assert run.details[0]["role"] == "descent"
    stall = run.state["stall"]
    X = space.snap(run.round(4))
    # Nothing new was observed, so the descent lands on the failed cell again: it is left
    # out and its slot explores.
    assert [d["role"] for d in run.details] == ["exploration"] * 4
    assert not any(np.array_equal(x, f) for x in X for f in failed)
    assert run.state["stall"] == stall + 4 and run.state["n_failed_seen"] == 4


def test_a_search_whose_trials_keep_failing_restarts():
    fn = lambda X: (((X - 0.3) ** 2).sum(1), np.zeros((len(X), 0)))  # noqa: E731
    run = Driver(2, 0, fn, restart_patience=10)
    run.round(6)
    for _ in range(3):
        run.round(4, fail=True)
    run.round(4)
    assert run.state["generation"] == 1
    assert all(d["source"] == "sobol" for d in run.details)


def test_same_seed_same_proposals_and_state():
    runs = [Driver(3, 1, lambda X: (X.sum(1), X[:, :1] - 0.5), seed=7) for _ in range(2)]
    for _ in range(4):
        a, b = (r.round(3) for r in runs)
        np.testing.assert_array_equal(a, b)
    assert runs[0].state == runs[1].state


def test_a_numerical_failure_falls_back_to_sobol_with_the_reason(monkeypatch):
    run = Driver(2, 0, lambda X: (X.sum(1), np.zeros((len(X), 0))))
    run.round(6)

    def broken(*args, **kwargs):
        raise RuntimeError("cholesky failed")

    monkeypatch.setattr(bo, "fit_gp", broken)
    run.round(2)
    assert [d["source"] for d in run.details] == ["sobol", "sobol"]
    assert "cholesky failed" in run.details[0]["fallback"]


def test_several_objectives_are_unsupported():
    problem = Problem(SearchSpace([FloatParam("x", 0, 1)]), n_objectives=2)
    history = History.empty(problem)
    with pytest.raises(EngineUnsupported):
        make_engine("lcbo").suggest(problem, history, 1, {}, np.random.default_rng(0))


@pytest.mark.parametrize(
    "options",
    [{"step": 0.0}, {"penalty": 0}, {"penalty": 10, "max_penalty": 1}, {"local_points": 1}],
)
def test_bad_options_are_refused(options):
    with pytest.raises(EngineOptionsError):
        make_engine("lcbo", options)


def test_model_points_carry_the_penalty_kkt_residual_and_feasibility_of_the_ask():
    run = Driver(2, 1, lambda X: (((X - 0.3) ** 2).sum(1), X[:, :1] - 0.9))
    run.round(6)
    assert [d["phase"] for d in run.details] == ["initial"] * 6  # the Sobol design
    run.round(3)
    state = run.state
    assert [d["source"] for d in run.details] == ["lcbo"] * 3
    for detail in run.details:
        assert detail["penalty"] == state["penalty"] >= 10.0
        assert detail["kkt_residual"] == state["kkt_residual"] is not None
        assert detail["gradient_std"] == state["gradient_std"] is not None
        assert detail["iterate_violation"] == state["iterate_violation"] == 0.0


def test_the_kernel_of_large_arrays_from_the_norms_equals_the_differences():
    X = _sobol(40, 30)
    (gp,) = _local_gps(X, _convex(X)[:, None])
    A, B = torch.rand(300, 40, dtype=torch.float64), torch.rand(400, 40, dtype=torch.float64)
    assert A.shape[0] * B.shape[0] * A.shape[1] > local_gp._DIFFERENCES_MAX
    scaled = (A[:, None, :] - B[None, :, :]) / gp.lengthscale
    np.testing.assert_allclose(gp.k(A, B), torch.exp(-0.5 * (scaled * scaled).sum(-1)), atol=1e-12)
