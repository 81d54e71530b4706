"""The ``lcbo`` engine: local constrained Bayesian optimization for high dimensions.

Problem: minimize ``f(x)`` subject to ``c_j(x) <= 0`` over ``[0, 1]^d``, all black boxes.
Method, after [Jing2026lcbo] (no code is public; the design is ours, built on GIBO
[Muller2021gibo] and SCBO [Eriksson2021scbo]): one local search at a time around an observed
*iterate* ``x_t``. Independent GPs for ``f`` and each ``c_j`` on the ``local_points``
observations nearest to ``x_t`` (``engines.local_gp``), with pessimistic scaled constraints
``u_j = (mu_cj + beta sigma_cj) / s_j`` and the merit::

    Phi(x) = mu_f(x) + rho sum_j softplus_tau(u_j(x))       (while x_t is infeasible:
    Phi_0(x) = sum_j softplus_tau(u_j(x)))

- Descent point ``x+ = argmin Phi`` over the box ``[x_t - delta, x_t + delta]`` (L-BFGS-B).
- Exploration points maximize, greedily, the gradient information at ``x+``, summed over the
  GPs with the squared weights of the merit's linearization::

      tr Sigma_grad(x+ | A) - tr Sigma_grad(x+ | A + z) = ||G M k(A, z) - g(z)||^2 / v(z)

- Accept the best new observation when it beats ``x_t`` in the order "less total violation,
  then lower ``f``". ``rho >= 2 max_j lambda_j`` (exact penalty), tenfold after three batches
  that improved ``f`` only at infeasible points. Restart with a fresh Sobol design after
  ``restart_patience`` evaluations without improvement, or when the KKT residual
  ``||grad mu_f + J^T lambda + bounds|| + sum_j |lambda_j c_j| + sum_j max(c_j, 0)`` and the
  gradient's posterior deviation are both below ``kkt_tol``.

Our design (reasons in docs/engines/lcbo.md): exploration anchored at ``x+``, not ``x_t``;
the iterate by feasibility-first order, not by observed merit; constraints pessimistic, ``f`` by
its mean; ``q = 1`` alternates descent and exploration asks; the GP hyperparameters kept in the
state to warm-start the next fit (30 iterations instead of 100), all GPs fitted as one batch;
failed trials count as stalls.
Single objective only (``EngineUnsupported`` otherwise); numerical failures fall back to Sobol.

References:
    [Jing2026lcbo] J. Jing, Z. Fan, S. H. Ng, Q. Hu. Local constrained Bayesian optimization.
        arXiv 2603.07965, 2026.
    [Muller2021gibo] S. Muller, A. von Rohr, S. Trimpe. Local policy search with Bayesian
        optimization. NeurIPS 2021.
    [Eriksson2021scbo] D. Eriksson, M. Poloczek. Scalable constrained Bayesian optimization.
        AISTATS 2021.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.optimize import minimize

from engines import bo
from engines.base import JSON, History, ModelBasedEngine, Problem, Proposal
from engines.errors import EngineUnsupported
from engines.limits import WorkLimits
from engines.local_gp import (
    LocalGP,
    Merit,
    kkt_at,
    merit_gradient_std,
    most_informative,
    warm_start,
)
from engines.local_search import (
    SearchState,
    initial_design,
    parse_state,
    perturbation_mask,
)
from engines.options import check_int_options, int_option
from engines.quasirandom import SobolStream

_STATE_VERSION = 1
_PHASES = ("initial", "feasibility", "optimize")
#: L-BFGS iterations of a GP fit from the default hyperparameters and from the last ones.
_FIT_MAXITER_COLD, _FIT_MAXITER_WARM = 100, 30
#: Batches in a row that improve ``f`` only at infeasible points before ``rho`` grows tenfold.
_OVERSHOOTS = 3


@dataclass(frozen=True)
class LCBOState(SearchState):
    """The engine's JSON state; see the module docstring."""

    region_start: int  # first History row of the current local search
    n_seen: int  # History rows already absorbed
    n_failed_seen: int  # failed or infeasible trials already counted as stalls
    n_init_given: int  # initial points handed out in this local search
    model_asks: int  # asks answered by the models in this local search
    phase: str  # initial, feasibility (iterate infeasible) or optimize
    iterate_row: int | None  # History row of x_t
    iterate_value: float | None
    iterate_violation: float | None
    penalty: float  # rho
    kkt_residual: float | None
    gradient_std: float | None  # sqrt(tr Sigma_grad Phi(x_t)), standardized units
    stall: int  # evaluations since the iterate last improved
    overshoots: int
    hyperparameters: list[list[float]] | None  # per GP: log lengthscales, then log noise

    @classmethod
    def parse(cls, state: JSON, history: History) -> LCBOState | None:
        st = parse_state(cls, state, history, _STATE_VERSION)
        if st is None or st.phase not in _PHASES:
            return None
        row = st.iterate_row
        if row is not None and not (type(row) is int and st.region_start <= row < st.n_seen):
            return None
        if not (_number(st.penalty) and st.penalty > 0):
            return None
        optional = (st.iterate_value, st.iterate_violation, st.kkt_residual, st.gradient_std)
        if not all(v is None or _number(v) for v in optional):
            return None
        hp = st.hyperparameters
        if hp is not None and not (
            isinstance(hp, list)
            and all(isinstance(h, list) and all(_number(v) for v in h) for h in hp)
        ):
            return None
        return st


def _number(v: Any) -> bool:
    return isinstance(v, float | int) and not isinstance(v, bool) and math.isfinite(v)


@dataclass
class LCBOEngine(ModelBasedEngine):
    """Local constrained BO: descent on a penalized surrogate plus gradient-information
    exploration; see the module docstring.

    Options:
        n_initial: Sobol points that start each local search; ``None`` means
            ``min(max(10, d), 100)``.
        local_points: observations the local GPs are fitted on, the nearest to the iterate;
            ``None`` means ``max(100, 2 d)``.
        step: ``delta``, the half-width of the descent and exploration boxes (unit cube).
        penalty: ``rho_0``, the starting penalty weight; ``max_penalty`` caps it.
        temperature: ``tau`` of the softplus penalty (standardized constraint units).
        beta: the constraint's pessimism, ``u = (mu + beta sigma) / s``.
        n_candidates: candidate points per box; ``None`` means ``min(2000, max(500, 50 d))``.
        num_restarts: L-BFGS-B starts of the descent.
        restart_patience: evaluations without improvement before a restart; ``None`` means
            ``max(40, 4 d)``.
        kkt_tol: a local search has converged when the KKT residual and the gradient's
            standard deviation are both below it.
    """

    name: ClassVar[str] = "lcbo"
    limits: ClassVar[WorkLimits] = WorkLimits(max_dimension=200, max_count=20, max_points=2000)
    max_objectives: ClassVar[int | None] = 1

    n_initial: int | None = int_option(None, 1, 10_000)
    local_points: int | None = int_option(None, 2, 500)
    step: float = 0.1
    penalty: float = 10.0
    max_penalty: float = 1e4
    temperature: float = 0.01
    beta: float = 1.0
    n_candidates: int | None = int_option(None, 1, 5000)
    num_restarts: int = int_option(5, 1, 16)
    restart_patience: int | None = int_option(None, 1, 1_000_000)
    kkt_tol: float = 1e-3

    def __post_init__(self) -> None:
        check_int_options(self)
        if not 0 < self.step <= 1:
            raise ValueError(f"step must be in (0, 1], got {self.step}")
        if not 0 < self.penalty <= self.max_penalty <= 1e12:
            raise ValueError(
                f"need 0 < penalty <= max_penalty <= 1e12, got {self.penalty}, {self.max_penalty}"
            )
        if not 0 < self.temperature <= 10 or not 0 <= self.beta <= 10 or not self.kkt_tol >= 0:
            raise ValueError("need 0 < temperature <= 10, 0 <= beta <= 10 and kkt_tol >= 0")

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        if problem.n_objectives > 1:
            raise EngineUnsupported("lcbo optimizes one objective; use 'pom' or 'gp' for several")
        d = problem.d
        st = LCBOState.parse(state, history) or self._fresh(history, rng)
        st = self._absorb(st, history)
        if self._should_restart(st, d):
            st = self._restart(st, history)
        stream = SobolStream(d, st.seed, st.index)

        # Without an iterate (nothing told in this local search yet) the batch is all Sobol.
        n_left = self._n_initial(d) - st.n_init_given
        started = st.iterate_row is not None
        X, details = initial_design(problem, history, count, n_left, started, stream, st.generation)
        details = [{**detail, "phase": "initial"} for detail in details]
        n_sobol = len(X)
        if count > n_sobol:
            X_model, model_details, st = self._model_points(
                problem, history, st, np.vstack([history.X_pending, X]), count - n_sobol, rng
            )
            X, details = np.vstack([X, X_model]), details + model_details
        if d:
            X = bo.replace_duplicates(problem, history, problem.space.snap(X), details, stream, rng)
        st = replace(st, index=stream.index, n_init_given=st.n_init_given + n_sobol)
        return Proposal(X=X.reshape(count, d), state=asdict(st), details=details)

    def _n_initial(self, d: int) -> int:
        return self.n_initial if self.n_initial is not None else min(max(10, d), 100)

    def _fresh(self, history: History, rng: np.random.Generator) -> LCBOState:
        """A local search over the whole history: a lost state is rebuilt, never a study."""
        return LCBOState(
            **SearchState.first_fields(_STATE_VERSION, rng),
            region_start=0,
            n_failed_seen=len(history.X_failed),
            n_init_given=history.n + len(history.X_pending),
            hyperparameters=None,
            **self._new_search(),
        )

    def _new_search(self) -> dict[str, Any]:
        """The fields a local search starts with, at the first ask and at every restart."""
        return {
            "model_asks": 0,
            "phase": "initial",
            "iterate_row": None,
            "iterate_value": None,
            "iterate_violation": None,
            "penalty": self.penalty,
            "kkt_residual": None,
            "gradient_std": None,
            "stall": 0,
            "overshoots": 0,
        }

    def _should_restart(self, st: LCBOState, d: int) -> bool:
        patience = self.restart_patience or max(40, 4 * d)
        converged = (
            st.kkt_residual is not None
            and st.gradient_std is not None
            and st.kkt_residual <= self.kkt_tol
            and st.gradient_std <= self.kkt_tol
        )
        return st.iterate_row is not None and (st.stall >= patience or converged)

    def _restart(self, st: LCBOState, history: History) -> LCBOState:
        return st.restarted(history, **self._new_search())

    def _absorb(self, st: LCBOState, history: History) -> LCBOState:
        """Accept the best row told since the last ask if it beats the iterate; count stalls
        (a failed or infeasible trial is one too) and overshoots (``f`` improved only at
        infeasible points), which raise the penalty."""
        failures = max(len(history.X_failed) - st.n_failed_seen, 0)
        st = replace(st, n_failed_seen=len(history.X_failed))
        if history.n == st.n_seen:
            return replace(st, stall=st.stall + failures) if st.iterate_row is not None else st
        value, violation = _order_keys(history)
        rows = np.arange(max(st.n_seen, st.region_start), history.n)
        best = int(rows[np.lexsort((value[rows], violation[rows]))[0]])
        row = st.iterate_row
        improved = row is None or (violation[best], value[best]) < (violation[row], value[row])
        overshoots, penalty = 0, st.penalty
        if not improved and row is not None and violation[row] == 0:
            lower = value[rows] < value[row]
            overshoots = st.overshoots + 1 if bool(np.any(lower)) else 0
            if overshoots >= _OVERSHOOTS:
                overshoots, penalty = 0, min(10.0 * penalty, self.max_penalty)
        new_row = best if improved else row
        assert new_row is not None
        return replace(
            st,
            n_seen=history.n,
            iterate_row=new_row,
            iterate_value=_finite_or_none(value[new_row]),
            iterate_violation=_finite_or_none(violation[new_row]),
            stall=0 if improved else st.stall + len(rows) + failures,
            overshoots=overshoots,
            penalty=penalty,
        )

    def _model_points(
        self,
        problem: Problem,
        history: History,
        st: LCBOState,
        X_pending: np.ndarray,
        count: int,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, list[JSON], LCBOState]:
        """``count`` points from the local models, ``(count, d)``, their details and the new
        state; NaN rows (filled with Sobol points later) when the models cannot be used.

        ``X_pending: (p, d)`` are the pending trials plus the Sobol points of this batch.
        """
        data = bo.training_data(problem, history)
        if isinstance(data, str):
            return (*bo.unfilled(problem.d, count, data), st)
        X_all, targets = data
        assert st.iterate_row is not None
        x_t = X_all[st.iterate_row]
        n_local = self.local_points or max(100, 2 * problem.d)
        local = np.argsort(np.sum((X_all - x_t) ** 2, axis=1), kind="stable")[:n_local]
        # The GPs model f (minimized) and the constraint values.
        columns = np.column_stack([-targets[local, 0], targets[local, 1:]])
        feasibility = problem.n_constraints > 0 and (st.iterate_violation or 0.0) > 0.0
        try:
            with bo.seeded(int(rng.integers(2**31)), False):
                models = self._fit(X_all[local], columns, st.hyperparameters)
                result = self._propose(
                    models,
                    x_t,
                    X_pending,
                    history.X_failed,
                    count,
                    st,
                    feasibility,
                    problem.space.snap,
                    rng,
                )
        except bo.NUMERICAL_ERRORS as exc:
            return (*bo.unfilled(problem.d, count, bo.failure(exc)), st)
        X, roles, penalty, kkt, gradient_std = result
        st = replace(
            st,
            model_asks=st.model_asks + 1,
            phase="feasibility" if feasibility else "optimize",
            penalty=penalty,
            kkt_residual=kkt,
            gradient_std=gradient_std,
            hyperparameters=[m.hyperparameters() for m in models],
        )
        return X, _model_details(st, roles), st

    def _fit(
        self, X: np.ndarray, columns: np.ndarray, warm: list[list[float]] | None
    ) -> list[LocalGP]:
        """One GP per column of ``columns: (n, 1 + k)`` on ``X: (n, d)``, started from the
        hyperparameters in ``warm`` when they fit this problem. The GPs are independent but
        fitted as one batch (``bo.fit_gp`` with several columns): each L-BFGS step evaluates
        every GP's likelihood and gradient in one closed-form call (``engines.gp_likelihood``),
        whose per-call overhead dominates at these sizes, where separate fits pay it once per
        GP."""
        n_models, d = columns.shape[1], X.shape[1]
        usable = warm is not None and len(warm) == n_models and all(len(h) == d + 1 for h in warm)
        start = warm_start(warm) if usable and warm is not None else None
        maxiter = _FIT_MAXITER_WARM if start else _FIT_MAXITER_COLD
        model = bo.fit_gp(torch.as_tensor(X, dtype=torch.float64), columns, [], maxiter, start)
        return [LocalGP(model, i) for i in range(n_models)]

    def _propose(
        self,
        models: list[LocalGP],
        x_t: np.ndarray,
        X_pending: np.ndarray,
        X_failed: np.ndarray,
        count: int,
        st: LCBOState,
        feasibility: bool,
        snap: Any,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, list[str], float, float, float]:
        """The batch ``(count, d)``, each point's role, the new penalty, the KKT residual and
        the gradient's standard deviation at ``x_t``. A descent point equal to a pending,
        observed or failed point (``X_failed: (r, d)``) is left out; its slot explores."""
        d = len(x_t)
        kkt, multipliers = kkt_at(models, x_t)
        penalty = st.penalty
        if not feasibility and len(multipliers):
            penalty = min(max(penalty, 2.0 * float(multipliers.max())), self.max_penalty)
        merit = Merit(models, penalty, feasibility, self.beta, self.temperature)
        tx_t = torch.as_tensor(x_t, dtype=torch.float64)
        weights = merit.weights(tx_t)
        conditioning = torch.cat([models[0].X, _nearest(X_pending, x_t, len(models[0].X))])
        gradient_std = merit_gradient_std(models, weights, tx_t, conditioning)

        x_plus = self._descend(merit, x_t, rng)
        taken = np.vstack([snap(X_pending), snap(models[0].X.numpy()), snap(X_failed)])
        descend = not (count == 1 and st.model_asks % 2 == 1)
        descend = descend and not bool(np.any(np.all(taken == snap(x_plus[None, :]), axis=1)))
        chosen = [x_plus] if descend else []
        roles = ["descent"] if descend else []
        t_plus = torch.as_tensor(x_plus, dtype=torch.float64)
        weights = merit.weights(t_plus)
        cands = torch.as_tensor(self._candidates(x_plus, rng), dtype=torch.float64)
        A = torch.cat([conditioning, torch.as_tensor(np.array(chosen).reshape(-1, d))])
        explored = most_informative(models, weights, t_plus, A, cands, count - len(chosen))
        chosen += explored
        roles += ["exploration"] * len(explored)
        return np.array(chosen), roles, penalty, kkt, gradient_std

    def _descend(self, merit: Merit, x_t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``argmin Phi`` over ``B(x_t)``: L-BFGS-B from ``x_t`` and the best candidates."""
        d = len(x_t)
        lower, upper = np.clip(x_t - self.step, 0, 1), np.clip(x_t + self.step, 0, 1)
        pool = self._candidates(x_t, rng)
        with torch.no_grad():
            scores = merit(torch.as_tensor(pool)).numpy()
        starts = np.vstack([x_t, pool[np.argsort(scores)[: self.num_restarts - 1]]])

        def total(flat: np.ndarray) -> tuple[float, np.ndarray]:
            Z = torch.as_tensor(flat.reshape(-1, d)).requires_grad_(True)
            value = merit(Z).sum()
            (grad,) = torch.autograd.grad(value, Z)
            return float(value.detach()), grad.numpy().ravel()

        bounds = list(zip(np.tile(lower, len(starts)), np.tile(upper, len(starts)), strict=True))
        result = minimize(
            total,
            starts.ravel(),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": 200},
        )
        ends = np.clip(result.x.reshape(-1, d), lower, upper)
        with torch.no_grad():
            final = merit(torch.as_tensor(ends)).numpy()
        return ends[int(np.argmin(final))]

    def _candidates(self, centre: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``(M, d)`` points of ``B(centre)`` equal to ``centre`` outside a random mask."""
        d = len(centre)
        M = self.n_candidates or min(2000, max(500, 50 * d))
        lower, upper = np.clip(centre - self.step, 0, 1), np.clip(centre + self.step, 0, 1)
        values = lower + (upper - lower) * rng.random((M, d))
        return np.where(perturbation_mask(rng, M, d), values, centre)


def _order_keys(history: History) -> tuple[np.ndarray, np.ndarray]:
    """``(value, violation)``, each ``(n,)``: ``f`` and ``sum_j max(c_j, 0)``, non-finite
    numbers as infinitely bad; the iterate is the lexicographically smallest."""
    value = np.where(np.isfinite(history.Y[:, 0]), history.Y[:, 0], np.inf)
    C = np.where(np.isfinite(history.C), history.C, np.inf)
    violation = np.maximum(C, 0.0).sum(axis=1) if C.shape[1] else np.zeros(history.n)
    return value, violation


def _model_details(st: LCBOState, roles: list[str]) -> list[JSON]:
    """The details of the model's points, one per role: the ask's phase, penalty, KKT
    residual, gradient deviation and the iterate's violation (the engine panel's series)."""
    detail = {
        "source": "lcbo",
        "phase": st.phase,
        "generation": st.generation,
        "penalty": st.penalty,
        "kkt_residual": None if st.kkt_residual is None else _finite_or_none(st.kkt_residual),
        "gradient_std": None if st.gradient_std is None else _finite_or_none(st.gradient_std),
        "iterate_violation": st.iterate_violation,
    }
    return [{**detail, "role": role} for role in roles]


def _finite_or_none(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _nearest(X: np.ndarray, x: np.ndarray, n: int) -> torch.Tensor:
    """The up to ``n`` rows of ``X: (p, d)`` nearest to ``x``, as a tensor."""
    order = np.argsort(np.sum((X - x) ** 2, axis=1), kind="stable")[:n]
    return torch.as_tensor(X[order], dtype=torch.float64).reshape(-1, len(x))
