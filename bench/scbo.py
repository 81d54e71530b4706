"""SCBO: scalable constrained BO (TuRBO with one GP per constraint), for the lcbo bench.

An ask/tell baseline (``SCBO``) on the unit cube, minimizing ``f`` subject to ``c_j <= 0``. It
follows the BoTorch tutorial "Scalable Constrained Bayesian Optimization"
(``tutorials/scalable_constrained_bo``; Eriksson & Poloczek, AISTATS 2021) rule for rule:

- Initial design: scrambled Sobol, ``n_init`` points (the tutorial's 10 at d = 10; the bench
  passes its shared design). After a restart, a new design.
- Models: one GP for ``-f`` and one per constraint, each the tutorial's (Matern-5/2 ARD in a
  ScaleKernel, lengthscales in [0.005, 4], noise in [1e-8, 1e-3], standardized outcomes, exact
  marginal likelihood by ``fit_gpytorch_mll``, Cholesky always): ``gp_turbo.fit_gp``, on all
  the data of the current run.
- Trust region: the box of side ``L`` centred on the best point, clipped to the cube (SCBO's
  tutorial does not scale it by the lengthscales, unlike TuRBO's): the best feasible point, or
  while none is feasible the one of least total violation ``sum_j max(c_j, 0)``. ``L`` starts
  at 0.8, min 0.5^7, max 1.6.
- Candidates: 2000 (the tutorial's number; the paper uses min(5000, max(2000, 200 d))) RAASP
  points: the centre, each coordinate replaced with probability ``min(20 / d, 1)`` by a
  scrambled Sobol point of the box, at least one per row (drawn from all ``d``; the tutorial's
  ``randint(0, d - 1)`` never picks the last, an off-by-one we do not copy).
- Selection: ``ConstrainedMaxPosteriorSampling(model, constraint_model=ModelListGP(...),
  replacement=False)``: Thompson samples of ``f`` and every constraint on the candidates;
  candidates whose sampled constraints are violated are dropped, and if all are, the one of
  least sampled violation is taken. ``q`` points.
- Trust-region update after each batch, the tutorial's ``update_state``: the batch's best
  point (best feasible, else least violation) is a success when it is feasible and beats the
  best value by ``1e-3 |best|`` (or the best so far is infeasible), or, both infeasible, when
  its total violation is lower. 10 successes in a row double ``L``, ``ceil(max(4 / q, d / q))``
  failures in a row halve it; below ``0.5^7`` the run restarts (the tutorial stops there; we
  start a new run, as TuRBO-1 does, and the caller keeps the global best).

One deliberate deviation, on in the bench (``warm_start=True``): each fit starts from the
hyperparameters of the same model's previous fit in the run (the tutorial fits from the GPyTorch
defaults every time), which keeps the d = 100 runs affordable on 2 cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from bench.gp_turbo import DTYPE, TrustRegion, TrustRegionRuns, fit_gp

N_CANDIDATES = 2000


def best_index(Y: np.ndarray, C: np.ndarray) -> int:
    """The tutorial's ``get_best_index_for_batch`` for ``Y: (n,)`` maximized and ``C: (n, k)``."""
    feasible = np.all(C <= 0, axis=1)
    if feasible.any():
        return int(np.argmax(np.where(feasible, Y, -np.inf)))
    return int(np.argmin(np.maximum(C, 0).sum(axis=1)))


@dataclass
class ScboState(TrustRegion):
    """SCBO's state, maximizing ``-f`` under ``k`` constraints."""

    k: int = 0
    best_constraints: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        super().__post_init__()
        self.best_constraints = np.full(self.k, np.inf)

    def update(self, Y_next: np.ndarray, C_next: np.ndarray) -> None:
        i = best_index(Y_next, C_next)
        y, c = float(Y_next[i]), C_next[i]
        if np.all(c <= 0):
            threshold = self.best_value + 1e-3 * math.fabs(self.best_value)
            success = y > threshold or bool(np.any(self.best_constraints > 0))
        else:
            success = np.maximum(c, 0).sum() < np.maximum(self.best_constraints, 0).sum()
        if success:
            self.best_value, self.best_constraints = y, c.copy()
        self.record(bool(success))


@dataclass
class SCBO(TrustRegionRuns):
    """SCBO ask/tell on [0, 1]^d, minimizing ``f`` with ``k`` constraints ``c <= 0``.

    ``ask()`` returns ``(q, d)`` points (the rest of the initial design first, unless ``start``
    told one); ``tell(X, f, C)``
    takes the objective ``(q,)`` and constraint values ``(q, k)``. ``restarts`` counts the
    trust-region restarts; ``fit_failures`` the GP fits whose every attempt failed.
    """

    d: int
    q: int
    k: int
    seed: int = 0
    n_init: int = 10
    warm_start: bool = True
    restarts: int = 0

    def __post_init__(self) -> None:
        torch.manual_seed(self.seed)
        self._generator = torch.Generator().manual_seed(self.seed)
        self._new_run()

    def _new_run(self) -> None:
        from torch.quasirandom import SobolEngine

        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self._generator))
        design = SobolEngine(self.d, scramble=True, seed=seed).draw(self.n_init)
        self._init = design.to(DTYPE).numpy()
        self._sobol = SobolEngine(self.d, scramble=True, seed=seed + 1)
        self._X = np.zeros((0, self.d))
        self._Y = np.zeros(0)  # -f, maximized
        self._C = np.zeros((0, self.k))
        self._state = ScboState(self.d, self.q, k=self.k)
        self._warm: list[dict[str, torch.Tensor] | None] = [None] * (1 + self.k)
        self._model_batch = False

    def start(self, X: np.ndarray, f: np.ndarray, C: np.ndarray) -> None:
        """Tell a given initial design instead of the run's own (the bench's shared one)."""
        self._init = np.zeros((0, self.d))
        self.tell(X, f, C)

    def ask(self) -> np.ndarray:
        if len(self._init):
            batch, self._init = self._init[: self.q], self._init[self.q :]
            return batch.copy()
        import gpytorch
        from botorch.generation.sampling import ConstrainedMaxPosteriorSampling
        from botorch.models import ModelListGP

        X = torch.as_tensor(self._X, dtype=DTYPE)
        columns = [self._Y, *self._C.T]
        with gpytorch.settings.max_cholesky_size(float("inf")):
            models = []
            for i, y in enumerate(columns):
                warm = self._warm[i] if self.warm_start else None
                model = fit_gp(X, torch.as_tensor(y, dtype=DTYPE), warm)
                self._warm[i] = {n: p.detach().clone() for n, p in model.named_parameters()}
                models.append(model)
            X_cand = self._candidates()
            sampler = ConstrainedMaxPosteriorSampling(
                model=models[0], constraint_model=ModelListGP(*models[1:]), replacement=False
            )
            with torch.no_grad():
                X_next = sampler(X_cand, num_samples=self.q)
        self._model_batch = True
        return X_next.numpy().copy()

    def _candidates(self) -> torch.Tensor:
        centre = torch.as_tensor(self._X[best_index(self._Y, self._C)], dtype=DTYPE)
        lb = torch.clamp(centre - self._state.length / 2.0, 0.0, 1.0)
        ub = torch.clamp(centre + self._state.length / 2.0, 0.0, 1.0)
        pert = lb + (ub - lb) * self._sobol.draw(N_CANDIDATES).to(dtype=DTYPE)
        mask = torch.rand(N_CANDIDATES, self.d, dtype=DTYPE, generator=self._generator)
        mask = mask <= min(20.0 / self.d, 1.0)
        empty = torch.where(mask.sum(dim=1) == 0)[0]
        mask[empty, torch.randint(0, self.d, (len(empty),), generator=self._generator)] = True
        X_cand = centre.expand(N_CANDIDATES, self.d).clone()
        X_cand[mask] = pert[mask]
        return X_cand

    def tell(self, X: np.ndarray, f: np.ndarray, C: np.ndarray) -> None:
        y = -np.asarray(f, dtype=np.float64).reshape(-1)
        C = np.asarray(C, dtype=np.float64).reshape(len(X), self.k)
        self._X, self._Y, self._C = (
            np.vstack([self._X, X]),
            np.concatenate([self._Y, y]),
            np.vstack([self._C, C]),
        )
        if not self._model_batch:
            return  # the initial design: the tutorial's state starts after it
        self._model_batch = False
        self._update_region(y, C)
