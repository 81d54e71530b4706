"""The ``gp`` engine: classic Gaussian-process Bayesian optimization for small budgets.

Method. Until ``n_initial`` trials (default ``2 d + 1``, completed and pending together) exist,
points come from the study's scrambled Sobol stream (``engines.quasirandom``); a batch that
crosses that boundary is part Sobol, part model-based. After that, each objective and each
outcome constraint gets its own exact GP [Rasmussen2006gpml] on the completed trials (constant
mean, squared-exponential kernel with per-dimension lengthscales under a dimension-scaled
log-normal prior [Hvarfner2024vanilla], inferred noise, standardized outcomes). With data
``(X, y)``, kernel ``k`` and noise ``s2``, the posterior is::

    mu(x)      = m + k(x, X) (K + s2 I)^-1 (y - m)
    sigma^2(x) = k(x, x) - k(x, X) (K + s2 I)^-1 k(X, x),     K = k(X, X)

``History.Y`` is minimized and BoTorch maximizes, so the GPs model ``-Y``.

- One objective: q-log noisy expected improvement, qLogNEI [Ament2023logei]. Expected improvement
  ``EI(x) = E[max(f(x) - f*, 0)]`` becomes ``log E[softplus_tau(f(x) - max_j f(x_j))]``, estimated
  with quasi-Monte-Carlo joint samples of ``f`` at ``x`` and at the observed ``x_j`` (a noisy
  incumbent [Letham2019noisyei]); unlike EI it stays informative where EI underflows to zero.
- Several objectives: q-log noisy expected hypervolume improvement, qLogNEHVI
  [Daulton2021nehvi]: the expected gain in hypervolume, above a reference point ``r``, over the
  sampled Pareto front of the observed points, computed in log space.
- Outcome constraints ``c_i(x) <= 0``: each sample's improvement is weighted by the smoothed
  feasibility ``prod_i sigmoid(-c_i(x) / eta)`` of the sampled constraint values [Gardner2014cbo].

A batch is built greedily: each point is optimized with the pending trials and the points already
chosen as ``X_pending``, whose outcomes are sampled jointly.

Our choices. Categorical coordinates get a Hamming-distance kernel, summed with and multiplied by
the continuous one (``MixedSingleTaskGP``, after [Ru2020cocabo]), and are optimized over their
choices, never as rounded floats; linear integer and stepped coordinates with at most
``max_discrete_levels`` levels are optimized over their levels, alternating discrete local search
with L-BFGS (BoTorch's ``optimize_acqf_mixed_alternating``). Level ``k`` of ``L`` sits at
``(k + 0.5) / L`` (``engines.space``), so models train on snapped points and the optimizer gets
the cell centres. Other coordinates are optimized continuously, then snapped. The
marginal-likelihood fit stops after 200 L-BFGS iterations, which bounds the ask latency. Without
a given reference point, ``r`` is the nadir of the feasible observed Pareto front moved back by
10 % of its range. Non-finite objective values count as the worst finite one, non-finite
constraint values as violated. A point equal (after snapping) to an observed, pending or earlier
point is replaced by a fresh Sobol point. A numerical failure of the fit or the optimizer falls
back to Sobol points, said so in their details, rather than failing the ask.

References:
    [Rasmussen2006gpml] C. E. Rasmussen, C. K. I. Williams. Gaussian Processes for Machine
        Learning. MIT Press, 2006.
    [Hvarfner2024vanilla] C. Hvarfner et al. Vanilla Bayesian optimization performs great in
        high dimensions. ICML 2024.
    [Letham2019noisyei] B. Letham et al. Constrained Bayesian optimization with noisy
        experiments. Bayesian Analysis 14(2), 2019.
    [Ament2023logei] S. Ament et al. Unexpected improvements to expected improvement for
        Bayesian optimization. NeurIPS 2023.
    [Daulton2021nehvi] S. Daulton, M. Balandat, E. Bakshy. Parallel Bayesian optimization of
        multiple noisy objectives with expected hypervolume improvement. NeurIPS 2021.
    [Gardner2014cbo] J. R. Gardner et al. Bayesian optimization with inequality constraints.
        ICML 2014.
    [Ru2020cocabo] B. Ru, A. S. Alvi, V. Nguyen, M. A. Osborne, S. J. Roberts. Bayesian
        optimisation over multiple continuous and categorical inputs. ICML 2020.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.multi_objective.objective import IdentityMCMultiOutputObjective
from botorch.acquisition.objective import GenericMCObjective
from botorch.exceptions.errors import BotorchError, ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import MixedSingleTaskGP, ModelListGP, SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms.outcome import Standardize
from botorch.optim import optimize_acqf
from botorch.optim.optimize_mixed import optimize_acqf_mixed_alternating
from botorch.utils.multi_objective.hypervolume import infer_reference_point
from botorch.utils.multi_objective.pareto import is_non_dominated
from gpytorch.mlls import ExactMarginalLogLikelihood

from engines.base import JSON, History, Problem, Proposal
from engines.quasirandom import SobolStream, sobol_points
from engines.space import SearchSpace

#: Failures that mean "the numerics did not work out on this data": fall back to Sobol.
_NUMERICAL_ERRORS = (BotorchError, ModelFittingError, RuntimeError)
#: A fully discrete space with at most this many cells is enumerated to replace duplicates.
_MAX_ENUMERATED_CELLS = 100_000
#: Seeding torch (and, for large categoricals, Python's ``random`` that BoTorch's mixed optimizer
#: draws from) is process-global; asks in threads of one process take turns.
_SEEDED_LOCK = threading.Lock()
#: L-BFGS iterations of the marginal-likelihood fit: a flat likelihood (few points, many
#: kernel hyperparameters) can take thousands for a negligible gain.
_FIT_MAXITER = 200
_STATE_VERSION = 1
_REPLACED = "duplicate of an observed, pending or earlier point"


@dataclass
class GPEngine:
    """GP Bayesian optimization with qLogNEI / qLogNEHVI; see the module docstring.

    Options:
        n_initial: Sobol points (completed plus pending trials) before the model is used;
            ``None`` means ``2 d + 1``.
        num_restarts: starting points of the acquisition optimizer, per batch point.
        raw_samples: random points scored to choose those starting points.
        max_discrete_levels: integer coordinates with at most this many levels are optimized
            over their levels; coarser ones continuously, then snapped.
    """

    name: ClassVar[str] = "gp"
    uses_observations: ClassVar[bool] = True
    max_objectives: ClassVar[int | None] = None
    schedules_units: ClassVar[bool] = False

    n_initial: int | None = None
    num_restarts: int = 8
    raw_samples: int = 256
    max_discrete_levels: int = 128

    def __post_init__(self) -> None:
        if self.n_initial is not None and not 1 <= self.n_initial <= 10_000:
            raise ValueError(f"n_initial must be between 1 and 10000 or null, got {self.n_initial}")
        if not 1 <= self.num_restarts <= 256:
            raise ValueError(f"num_restarts must be between 1 and 256, got {self.num_restarts}")
        if not self.num_restarts <= self.raw_samples <= 65_536:
            raise ValueError(
                f"raw_samples must be between num_restarts ({self.num_restarts}) and 65536, "
                f"got {self.raw_samples}"
            )
        if not 2 <= self.max_discrete_levels <= 10_000:
            raise ValueError(
                f"max_discrete_levels must be between 2 and 10000, got {self.max_discrete_levels}"
            )

    def suggest(
        self,
        problem: Problem,
        history: History,
        count: int,
        state: JSON,
        rng: np.random.Generator,
    ) -> Proposal:
        stream = SobolStream.resume(problem.d, state, rng)
        n_initial = self.n_initial if self.n_initial is not None else 2 * problem.d + 1
        X, details, _ = sobol_then_model(
            problem,
            history,
            count,
            n_initial,
            stream,
            rng,
            lambda X_pending, k: (*self._model_points(problem, history, X_pending, k, rng), None),
        )
        new_state = {"version": _STATE_VERSION, "seed": stream.seed, "index": stream.index}
        return Proposal(X=X, state=new_state, details=details)

    def _model_points(
        self,
        problem: Problem,
        history: History,
        X_pending: np.ndarray,
        count: int,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, list[JSON]]:
        """``count`` points from the acquisition optimizer, ``(count, d)`` snapped, with details;
        points marked with NaN rows (and a ``fallback`` reason) when the model cannot be used.

        ``X_pending: (p, d)`` in [0, 1] are the pending trials plus the batch so far.
        """
        torch_seed = int(rng.integers(2**31))
        data = _training_data(problem, history)
        if isinstance(data, str):
            return _unfilled(problem.d, count, data)
        X_train, targets = data
        try:
            with _seeded(torch_seed, _needs_python_random(problem.space)):
                X_new = self._optimize(problem, X_train, targets, X_pending, count)
        except _NUMERICAL_ERRORS as exc:
            return _unfilled(problem.d, count, f"{type(exc).__name__}: {str(exc)[:120]}")
        acquisition = "qLogNEI" if problem.n_objectives == 1 else "qLogNEHVI"
        detail = {"source": "gp", "acquisition": acquisition, "n_observations": len(X_train)}
        return problem.space.snap(X_new), [dict(detail) for _ in range(count)]

    def _optimize(
        self,
        problem: Problem,
        X_train: np.ndarray,
        targets: np.ndarray,
        X_pending: np.ndarray,
        count: int,
    ) -> np.ndarray:
        """Fit the GPs and optimize the acquisition; returns ``(count, d)`` in [0, 1].

        ``X_train: (n, d)`` snapped, ``targets: (n, m + k)``: ``-Y`` then ``C``,
        ``X_pending: (p, d)``.
        """
        m, k = problem.n_objectives, problem.n_constraints
        bounds, discrete_dims, cat_dims, fixed = _domain(problem.space, self.max_discrete_levels)
        model_cat_dims = [
            j for j, dim in enumerate(problem.space.dimensions) if dim.kind == "categorical"
        ]
        tX = torch.as_tensor(X_train, dtype=torch.float64)
        models = [_fit_gp(tX, targets[:, i], model_cat_dims) for i in range(m + k)]
        model: Model = models[0] if len(models) == 1 else ModelListGP(*models)
        pending = torch.as_tensor(X_pending, dtype=torch.float64) if len(X_pending) else None
        common: dict[str, Any] = {
            "X_baseline": tX,
            "constraints": [_column(m + i) for i in range(k)] or None,
            "X_pending": pending,
            "prune_baseline": True,
        }
        acq: Any
        if m == 1:
            first = GenericMCObjective(_objective0) if k else None
            acq = qLogNoisyExpectedImprovement(model, objective=first, **common)
        else:
            ref_point = _reference_point(problem, targets)
            firsts = IdentityMCMultiOutputObjective(outcomes=list(range(m))) if k else None
            acq = qLogNoisyExpectedHypervolumeImprovement(
                model, ref_point=ref_point, objective=firsts, **common
            )
        tbounds = torch.as_tensor(bounds, dtype=torch.float64)
        opt: dict[str, Any] = {
            "q": count,
            "num_restarts": self.num_restarts,
            "raw_samples": self.raw_samples,
            "fixed_features": fixed or None,
        }
        if discrete_dims or cat_dims:
            options = {"max_discrete_values": self.max_discrete_levels}
            candidates, _ = optimize_acqf_mixed_alternating(
                acq, tbounds, discrete_dims=discrete_dims, cat_dims=cat_dims, options=options, **opt
            )
        else:
            candidates, _ = optimize_acqf(acq, tbounds, sequential=True, **opt)
        X_new = candidates.detach().numpy().reshape(count, problem.d)
        if not np.all(np.isfinite(X_new)):
            raise BotorchError("the acquisition optimizer returned non-finite points")
        return np.clip(X_new, 0.0, 1.0)


Extra = TypeVar("Extra")


def sobol_then_model(
    problem: Problem,
    history: History,
    count: int,
    n_initial: int,
    stream: SobolStream,
    rng: np.random.Generator,
    model_points: Callable[[np.ndarray, int], tuple[np.ndarray, list[JSON], Extra]],
) -> tuple[np.ndarray, list[JSON], Extra | None]:
    """The skeleton of a model-based ask: until ``n_initial`` trials (completed plus pending)
    exist, points come from the study's Sobol ``stream``; the rest from ``model_points(X_pending,
    k) -> (X: (k, d) snapped, details, extra)``, where ``X_pending`` holds the pending trials
    plus this batch's Sobol points and NaN rows ask for a fallback. Rows equal (after snapping) to
    an observed, pending, failed or earlier point are replaced by Sobol points.

    Returns ``X: (count, d)``, the details, and the model's ``extra`` (``None`` when the model
    was not asked).
    """
    space, d = problem.space, problem.d
    n_sobol = min(count, max(0, n_initial - history.n - len(history.X_pending)))
    if d == 0:  # only fixed parameters: every point is the same empty point
        n_sobol = count
    taken = np.vstack([history.X, history.X_pending])
    X = space.snap(sobol_points(problem, taken, n_sobol, stream))
    details: list[JSON] = [{"source": "sobol"} for _ in range(n_sobol)]
    extra = None
    if count > n_sobol:
        X_model, model_details, extra = model_points(
            np.vstack([history.X_pending, X]), count - n_sobol
        )
        X = np.vstack([X, X_model])
        details += model_details
    if d:
        X = _replace_duplicates(problem, history, X, details, stream, rng)
    return X.reshape(count, d), details, extra


def _training_data(problem: Problem, history: History) -> tuple[np.ndarray, np.ndarray] | str:
    """``(X: (n, d) snapped, targets: (n, m + k))`` with ``targets = [-Y, C]`` made finite,
    or the reason the model cannot be fitted."""
    if history.n < 2:
        return "fewer than 2 completed trials"
    columns = []
    for j in range(problem.n_objectives):
        y = history.Y[:, j]
        finite = np.isfinite(y)
        if finite.sum() < 2:
            return f"objective {j} has fewer than 2 finite values"
        columns.append(-np.where(finite, y, y[finite].max()))
    for i in range(problem.n_constraints):
        c = history.C[:, i]
        finite = np.isfinite(c)
        if finite.any():
            worst = max(c[finite].max(), 0.0) + max(float(np.ptp(c[finite])), 1.0)
        else:
            worst = 1.0
        columns.append(np.where(finite, c, worst))
    return problem.space.snap(history.X), np.stack(columns, axis=1)


def _fit_gp(
    X: torch.Tensor,
    y: np.ndarray,
    cat_dims: list[int],
    maxiter: int = _FIT_MAXITER,
    start: Callable[[SingleTaskGP], None] | None = None,
) -> SingleTaskGP:
    """A GP on ``X: (n, d)`` and ``y: (n,)``, hyperparameters by maximum marginal likelihood
    (at most ``maxiter`` L-BFGS iterations, from the hyperparameters ``start`` sets on the new
    model, when given)."""
    Y = torch.as_tensor(y, dtype=torch.float64).unsqueeze(-1)
    model: SingleTaskGP
    if cat_dims:
        model = MixedSingleTaskGP(X, Y, cat_dims=cat_dims, outcome_transform=Standardize(m=1))
    else:
        model = SingleTaskGP(X, Y, outcome_transform=Standardize(m=1))
    if start is not None:
        start(model)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": maxiter}})
    return model


def _objective0(samples: torch.Tensor, X: torch.Tensor | None = None) -> torch.Tensor:
    """The objective output of ``samples: (..., q, 1 + k)``."""
    return samples[..., 0]


def _column(i: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The constraint callable for output ``i``: feasible when ``samples[..., i] <= 0``."""
    return lambda samples: samples[..., i]


def _reference_point(problem: Problem, targets: np.ndarray) -> torch.Tensor:
    """The reference point ``(m,)`` in the maximization orientation of the models.

    ``targets: (n, m + k)``, the first ``m`` columns are ``-Y``.
    """
    if problem.reference_point is not None:
        return torch.as_tensor(-problem.reference_point, dtype=torch.float64)
    m = problem.n_objectives
    feasible = np.all(targets[:, m:] <= 0.0, axis=1)
    Y = torch.as_tensor(targets[feasible if feasible.any() else slice(None), :m])
    return infer_reference_point(Y[is_non_dominated(Y)])


def _domain(
    space: SearchSpace, max_levels: int
) -> tuple[np.ndarray, dict[int, list[float]], dict[int, list[float]], dict[int, float]]:
    """``(bounds: (2, d), discrete_dims, cat_dims, fixed_features)`` for the optimizer.

    Discrete coordinates carry their cell centres ``(k + 0.5) / L`` and are bounded by the first
    and last; a coordinate with a single level is fixed at 0.5.
    """
    bounds = np.array([[0.0] * space.d, [1.0] * space.d])
    discrete: dict[int, list[float]] = {}
    cats: dict[int, list[float]] = {}
    fixed: dict[int, float] = {}
    for j, dim in enumerate(space.dimensions):
        levels = dim.levels
        if levels is None or (dim.kind == "integer" and levels > max_levels):
            continue
        if levels == 1:
            fixed[j] = 0.5
            continue
        values = [(i + 0.5) / levels for i in range(levels)]
        bounds[:, j] = values[0], values[-1]
        (cats if dim.kind == "categorical" else discrete)[j] = values
    return bounds, discrete, cats, fixed


def _needs_python_random(space: SearchSpace) -> bool:
    # BoTorch's mixed optimizer samples the neighbours of categoricals with more than 20 choices
    # with Python's global ``random``.
    return any(dim.kind == "categorical" and (dim.levels or 0) > 20 for dim in space.dimensions)


@contextmanager
def _seeded(seed: int, python_random: bool) -> Iterator[None]:
    """Run with torch (and optionally Python's ``random``) seeded, restoring both afterwards."""
    with _SEEDED_LOCK, torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"botorch|gpytorch|linear_operator")
        torch.manual_seed(seed)
        saved = random.getstate() if python_random else None
        if python_random:
            random.seed(seed)
        try:
            yield
        finally:
            if saved is not None:
                random.setstate(saved)


def _unfilled(d: int, count: int, reason: str) -> tuple[np.ndarray, list[JSON]]:
    """``count`` NaN rows, ``(count, d)``, to be filled with Sobol points, and their details."""
    details: list[JSON] = [{"source": "sobol", "fallback": reason} for _ in range(count)]
    return np.full((count, d), np.nan), details


def _replace_duplicates(
    problem: Problem,
    history: History,
    X: np.ndarray,
    details: list[JSON],
    stream: SobolStream,
    rng: np.random.Generator,
) -> np.ndarray:
    """Fill NaN rows of ``X: (count, d)`` and replace rows equal (after snapping) to an observed,
    pending, failed or earlier row by fresh Sobol points; updates ``details`` and returns the new
    X.

    In a fully discrete space that Sobol fails to cover, a free cell is drawn uniformly; when
    every cell is taken, duplicates remain.
    """
    space = problem.space
    X = X.copy()
    rows = list(space.snap(np.vstack([history.X, history.X_pending, history.X_failed])))
    taken = {_key(row) for row in rows}
    for i in range(len(X)):
        fill = bool(np.isnan(X[i]).any())
        if fill or _key(X[i]) in taken:
            X[i] = space.snap(
                sobol_points(problem, np.array(rows).reshape(-1, space.d), 1, stream)
            )[0]
            if not fill:
                details[i] = {"source": "sobol", "replaced": _REPLACED}
        if _key(X[i]) in taken:
            free = _free_cell(space, taken, rng)
            if free is None:
                details[i] = {**details[i], "duplicate": "no free value left in the space"}
            else:
                X[i], details[i] = free, {**details[i], "source": "uniform"}
        rows.append(X[i])
        taken.add(_key(X[i]))
    return X


def _key(x: np.ndarray) -> bytes:
    """A hashable key of a snapped point ``x: (d,)`` (``+ 0.0`` turns -0.0 into 0.0)."""
    return (np.asarray(x, dtype=np.float64) + 0.0).tobytes()


def _free_cell(
    space: SearchSpace, taken: set[bytes], rng: np.random.Generator
) -> np.ndarray | None:
    """A uniformly drawn cell centre ``(d,)`` not in ``taken``, if the space is fully discrete and
    small enough to enumerate; otherwise or when all cells are taken, ``None``."""
    levels = [dim.levels for dim in space.dimensions]
    if any(n is None for n in levels) or math.prod(n or 1 for n in levels) > _MAX_ENUMERATED_CELLS:
        return None
    axes = [[(i + 0.5) / (n or 1) for i in range(n or 1)] for n in levels]
    cells = space.snap(np.array(list(itertools.product(*axes)), dtype=np.float64))
    free = [cell for cell in cells if _key(cell) not in taken]
    return free[int(rng.integers(len(free)))] if free else None
