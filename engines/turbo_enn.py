"""The ``turbo-enn`` engine: trust-region BO with an Epistemic Nearest Neighbors surrogate.

Method [Sweet2025enn]. TuRBO-1 [Eriksson2019turbo] with its Gaussian process replaced by ENN
(``engines.enn``), whose fit and query cost O(N), so that proposals stay fast at tens of
thousands of observations. One trust region (TR) at a time. The paper's TR, the box
(``trust_region: "box"``; by default only above 50 parameters, the CMA region below):

- Initial design: ``n_initial`` (default ``2 d``) scrambled Sobol points per TR.
- The TR is the box of side ``L`` centred on the incumbent ``x_c``, clipped to the unit cube
  (isotropic: ENN has no lengthscales). ``L`` starts at 0.8.
- Candidates (RAASP): ``M = min(5000, 100 d)`` points equal to ``x_c`` except in the
  coordinates of a random mask (each perturbed with probability ``min(20 / d, 1)``, at least
  one), where they take scrambled Sobol values inside the box.
- Selection of ``q`` points among the candidates, by the ENN posterior ``(mu, sigma)``:
  - ``noisy = false`` (default): non-dominated sorting of (low ``mu``, high ``sigma``) with
    ``a = 0, b = 1`` and no fit: the Pareto set of that pair is the same for every ``b``.
    Whole fronts in rank order; the front that does not fit is sampled without replacement.
  - ``noisy = true``: ``(a, b)`` fitted by leave-one-out likelihood (warm-started from the
    last fit), then the ``q`` best lower confidence bounds ``mu - sigma`` (the paper's
    ``mu + sigma`` for maximization); the centre is the point of lowest posterior mean among
    the ``k`` best observations rather than the single best observation.
- After each batch, with ``y*`` the best value of the TR so far and ``R`` the range of its
  values: a success when the batch's best is below ``y* - 1e-3 R``, a failure otherwise.
  ``success_tolerance`` (3) successes in a row double ``L`` (at most 1.6);
  ``failure_tolerance`` (``ceil(max(4 / q, d / q))``) failures in a row halve it. Below
  ``0.5^7`` the TR restarts: it forgets its local data and begins a new initial design.

Our design (reasons in docs/engines/turbo-enn.md): the state holds only the TR's bookkeeping,
its data are the ``History`` rows from ``tr_start`` on (``engines.local_search``); no success
or failure until the initial design is told; constraints pick the incumbent and the success
test (ENN models the objective only); an exact prefilter of the observations that can be a
neighbour of a candidate; snapped candidates without duplicates or pending points, no
fantasies; single objective only; ``restart_keeps_data`` restarts as the ``ennbo`` package.

The CMA region (the default from 2 to ``_CMA_DEFAULT_DIMENSION`` parameters, "cma" up to 100;
our design, after CMA-BO [Ngo2024cmabo], which puts a BO method inside CMA-ES's search
distribution): instead of the box, the region is a CMA-ES distribution ``N(m, sigma^2 C)``
(``engines.cma_region``: equations there), starting at ``m`` = the incumbent (the cube's centre
in an empty study; at a restart, the next Sobol point), ``sigma = 1/6``, ``C = I``. Until the
region holds ``n_initial`` told trials, a batch is drawn from it; then ``preselect x q`` points
are drawn and ENN keeps the ``q`` of lowest posterior mean (pre-selection, as in
metamodel-assisted evolution strategies [Emmerich2002maes]); snapped draws equal to a pending
or failed point, or on a grid a told one (unless ``noisy``), are dropped. Every ``lambda`` (default
``4 + floor(3 ln d)``) told trials of the region update ``m``, ``sigma``, ``C``; the region
restarts by CMA-ES's stopping rules. ENN's data are the region's trials, as in the box;
``noisy`` fits ENN's scales, which smooth the mean. Why: on the tuning half of
``bench/turbo_enn_peers.py`` (bbob, d = 20, 2,000 evaluations) the box trailed Optuna's CMA-ES
on all five functions, the CMA region beat the box on all five and CMA-ES on four
(docs/engines/turbo-enn.md). ``C`` is ``d x d`` numbers in the state: at most 100 parameters.

References:
    [Sweet2025enn] D. Sweet, S. A. Jadhav. Taking the GP out of the loop. arXiv 2506.12818,
        2025.
    [Eriksson2019turbo] D. Eriksson, M. Pearce, J. Gardner, R. D. Turner, M. Poloczek.
        Scalable global optimization via local Bayesian optimization. NeurIPS 2019.
    [Ngo2024cmabo] L. Ngo, H. Ha, J. Chan, V. Nguyen, H. Zhang. High-dimensional Bayesian
        optimization via covariance matrix adaptation strategy. TMLR 2024.
    [Emmerich2002maes] M. Emmerich, A. Giotis, M. Oezdemir, T. Baeck, K. Giannakoglou.
        Metamodel-assisted evolution strategies. PPSN VII, 2002.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
from scipy.stats import qmc

from engines import cma_region
from engines.base import JSON, History, ModelBasedEngine, Problem, Proposal
from engines.enn import ENN, ENNParams, lowest, pareto_select, prefilter
from engines.errors import EngineUnsupported
from engines.limits import WorkLimits
from engines.local_search import (
    SearchState,
    initial_design,
    parse_state,
    perturbation_mask,
)
from engines.options import check_int_options, int_option
from engines.quasirandom import SobolStream, sobol_points
from engines.space import distinct_rows

_STATE_VERSION = 2
#: Relative improvement (of the TR's value range) that counts as a success.
_IMPROVEMENT = 1e-3
#: The CMA region's ``d x d`` covariance is in the state: chosen by default up to the first,
#: on request up to the second (100: 10,000 numbers, 0.2 MB of JSON an ask).
_CMA_DEFAULT_DIMENSION, _CMA_MAX_DIMENSION = 50, 100
#: The CMA region's initial step: a sixth of the cube's side (CMA-ES's usual range / 6).
_CMA_SIGMA_INIT = 1 / 6
#: Points drawn per ask at most (beyond the batch itself), whatever ``preselect`` asks.
_CMA_MAX_DRAWN = 10_000


@dataclass(frozen=True)
class TrustRegion(SearchState):
    """The engine's JSON state; see the module docstring."""

    tr_start: int  # first History row of the current TR
    n_seen: int  # History rows already counted
    n_init_given: int  # initial points handed out in this TR
    length: float
    successes: int
    failures: int
    best: list[float] | None  # incumbent key: [violation, value]
    last_q: int
    b: float
    a: float
    n_updated: int  # History rows the CMA region has learned from (unused in a box)
    cma: JSON | None  # the CMA region's distribution (``engines.cma_region``), None in a box

    @classmethod
    def parse(cls, state: JSON, history: History, cma: bool) -> TrustRegion | None:
        """The state, or ``None`` when it does not fit this history and region kind."""
        tr = parse_state(cls, state, history, _STATE_VERSION)
        if tr is None or (tr.cma is not None) != cma:
            return None
        if cma and not (
            tr.tr_start <= tr.n_updated <= tr.n_seen
            and cma_region.valid(tr.cma, history.X.shape[1])
        ):
            return None
        floats = (tr.length, tr.b, tr.a)
        if not all(isinstance(v, float | int) and math.isfinite(v) and v >= 0 for v in floats):
            return None
        if tr.best is not None and not (
            isinstance(tr.best, list)
            and len(tr.best) == 2
            and all(isinstance(v, float | int) and math.isfinite(v) for v in tr.best)
        ):
            return None
        return tr


@dataclass
class TurboENNEngine(ModelBasedEngine):
    """TuRBO-1 with an ENN surrogate; see the module docstring.

    Options:
        noisy: the objective is noisy: fit ENN and select by lower confidence bound; when
            false (the default, for deterministic objectives), select by non-dominated sorting
            without a fit, the paper's fastest variant.
        n_initial: Sobol points that start each trust region; ``None`` means ``2 d``.
        k_neighbors: ``K``, neighbours per ENN prediction.
        n_candidates: RAASP candidates per ask; ``None`` means ``min(5000, 100 d)``.
        success_tolerance: successes in a row that double the TR.
        failure_tolerance: failures in a row that halve it; ``None`` means
            ``ceil(max(4 / q, d / q))`` with ``q`` the last batch size.
        length_init, length_min, length_max: the TR side at a start, the restart threshold and
            the cap.
        fit_candidates, fit_samples: random-search size and leave-one-out rows of the fit
            (``noisy`` only).
        restart_keeps_data: a restart only resets the length and the counters; the region
            keeps its data and its centre (the ``ennbo`` package's behaviour) instead of
            starting over with a new initial design (TuRBO-1, the default). Box only.
        trust_region: ``"cma"`` (up to 100 parameters, the box above), ``"box"`` (TuRBO's),
            or ``None`` (the default): the CMA region from 2 to 50 parameters, else the box.
        preselect: CMA region: points drawn per point asked, of which ENN keeps the best.
        population: CMA region: told trials per update, ``lambda``; ``None`` means
            ``4 + floor(3 ln d)``.
    """

    name: ClassVar[str] = "turbo-enn"
    limits: ClassVar[WorkLimits] = WorkLimits(
        max_dimension=1000, max_count=1000, max_points=100_000
    )
    max_objectives: ClassVar[int | None] = 1

    noisy: bool = False
    n_initial: int | None = int_option(None, 1, 10_000)
    k_neighbors: int = int_option(10, 1, 100)
    n_candidates: int | None = int_option(None, 1, 10_000)
    success_tolerance: int = int_option(3, 1, 1_000)
    failure_tolerance: int | None = int_option(None, 1, 1_000)
    length_init: float = 0.8
    length_min: float = 0.5**7
    length_max: float = 1.6
    fit_candidates: int = int_option(30, 1, 100)
    fit_samples: int = int_option(100, 2, 1000)
    restart_keeps_data: bool = False
    trust_region: str | None = None
    preselect: int = int_option(10, 1, 1_000)
    population: int | None = int_option(None, 4, 10_000)

    def __post_init__(self) -> None:
        check_int_options(self)
        if self.trust_region not in ("cma", "box", None):
            raise ValueError(
                f"trust_region must be 'cma', 'box' or null, not {self.trust_region!r}"
            )
        if not 0 < self.length_min <= self.length_init <= self.length_max <= 2:
            raise ValueError(
                "need 0 < length_min <= length_init <= length_max <= 2, got "
                f"{self.length_min}, {self.length_init}, {self.length_max}"
            )

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        if problem.n_objectives > 1:
            raise EngineUnsupported(
                "turbo-enn optimizes one objective; use 'pom' or 'gp' for several"
            )
        d = problem.d
        region = self.trust_region or ("cma" if 2 <= d <= _CMA_DEFAULT_DIMENSION else "box")
        cma = region == "cma" and 0 < d <= _CMA_MAX_DIMENSION
        tr = TrustRegion.parse(state, history, cma) or self._fresh(history, rng, d, cma)
        if cma:
            return self._suggest_cma(problem, history, tr, count, rng)
        tr = self._absorb(tr, history, d)
        if tr.length < self.length_min:
            tr = self._restart(tr, history)
        stream = SobolStream(d, tr.seed, tr.index)

        n_left = self._n_initial(d) - tr.n_init_given
        centred = history.n > tr.tr_start  # something told in this TR: a centre exists
        X_sobol, details = initial_design(
            problem, history, count, n_left, centred, stream, tr.generation
        )
        n_sobol = len(X_sobol)
        X = X_sobol
        a, b = tr.a, tr.b
        if count > n_sobol:
            taken = problem.space.snap(np.vstack([history.X_pending, history.X_failed, X_sobol]))
            X_tr, params = self._trust_region_points(
                problem, history, tr, taken, count - n_sobol, rng
            )
            a, b = params.a, params.b
            X = np.vstack([X, X_tr])
            detail = {
                "source": "turbo-enn",
                "generation": tr.generation,
                "length": tr.length,
                "successes": tr.successes,
                "failures": tr.failures,
                "selection": "lcb" if self.noisy else "pareto",
            }
            details += [dict(detail) for _ in range(len(X_tr))]
            if len(X) < count:  # the grid ran out of distinct candidates
                fill = sobol_points(problem, np.vstack([taken, X_tr]), count - len(X), stream)
                X = np.vstack([X, fill])
                details += [{"source": "sobol", "generation": tr.generation} for _ in fill]
        tr = replace(
            tr,
            index=stream.index,
            n_init_given=tr.n_init_given + n_sobol,
            last_q=count,
            a=float(a),
            b=float(b),
        )
        return Proposal(X=X.reshape(count, d), state=tr.as_json(), details=details)

    def _n_initial(self, d: int) -> int:
        return self.n_initial if self.n_initial is not None else max(1, 2 * d)

    def _fresh(self, history: History, rng: np.random.Generator, d: int, cma: bool) -> TrustRegion:
        """A TR over the whole history: a lost state is rebuilt, never a study lost. A CMA
        region starts at the incumbent (the cube's centre in an empty study) and learns from
        the trials told from now on."""
        region = None
        if cma:
            best = _best_row(_keys(history.Y[:, 0], history.C)) if history.n else None
            mean = history.X[best] if best is not None else np.full(d, 0.5)
            region = cma_region.start(mean, _CMA_SIGMA_INIT, self._population(d))
        return TrustRegion(
            **SearchState.first_fields(_STATE_VERSION, rng),
            tr_start=0,
            n_init_given=history.n + len(history.X_pending),
            last_q=1,
            n_updated=history.n,
            cma=region,
            **self._new_region(),
        )

    def _population(self, d: int) -> int:
        return self.population or cma_region.population_size(d)

    def _suggest_cma(
        self,
        problem: Problem,
        history: History,
        tr: TrustRegion,
        count: int,
        rng: np.random.Generator,
    ) -> Proposal:
        """A batch from the CMA region (module docstring): draw, and pre-select by ENN once the
        region has ``n_initial`` told trials."""
        d = problem.d
        tr = self._learn(tr, history, d)
        assert tr.cma is not None
        selected = history.n - tr.tr_start >= self._n_initial(d)
        n_drawn = min(count * self.preselect, max(count, _CMA_MAX_DRAWN)) if selected else count
        drawn = problem.space.snap(cma_region.sample(tr.cma, n_drawn, rng))
        repeats = self._told_to_avoid(problem, history, drawn)
        taken = problem.space.snap(np.vstack([history.X_pending, history.X_failed, repeats]))
        cands = distinct_rows(drawn, taken)
        params = ENNParams(b=tr.b, a=tr.a)
        if selected and len(cands) > count:
            enn = ENN(history.X[tr.tr_start :], history.Y[tr.tr_start :, :1], k=self.k_neighbors)
            if self.noisy:
                params = enn.fit(rng, self.fit_candidates, self.fit_samples, warm_start=params)
            mu, _ = enn.posterior(cands, params)
            cands = cands[lowest(mu[:, 0], count, rng)]
        X = cands[:count]
        detail = {
            "source": "turbo-enn",
            "region": "cma",
            "generation": tr.generation,
            "sigma": float(tr.cma["sigma"]),
            "selection": ("enn-mean-fitted" if self.noisy else "enn-mean")
            if selected
            else "sample",
        }
        details = [dict(detail) for _ in range(len(X))]
        stream = SobolStream(d, tr.seed, tr.index)
        if len(X) < count:  # every draw was a duplicate: a tiny space or a collapsed region
            fill = sobol_points(problem, np.vstack([taken, X]), count - len(X), stream)
            X = np.vstack([X, fill])
            details += [{"source": "sobol", "generation": tr.generation} for _ in fill]
        tr = replace(tr, index=stream.index, last_q=count, a=float(params.a), b=float(params.b))
        return Proposal(X=X.reshape(count, d), state=tr.as_json(), details=details)

    def _new_region(self) -> dict[str, Any]:
        """The fields a TR starts with, at the first ask and at every restart."""
        return {
            "length": self.length_init,
            "successes": 0,
            "failures": 0,
            "best": None,
            "b": 1.0,
            "a": 0.0,
        }

    def _told_to_avoid(self, problem: Problem, history: History, drawn: np.ndarray) -> np.ndarray:
        """The told points a draw may repeat, which then wins the pre-selection (ENN's mean there
        is its value): on a grid all of them; in a continuous space the cube's corners, which a
        draw clipped in every coordinate reaches, and only when a draw is one (hashing every
        told point cost 4.5x the proposal at N = 50,000). None when noisy: a repeat informs."""
        if self.noisy:
            return history.X[:0]
        if any(dim.kind != "continuous" for dim in problem.space.dimensions):
            return history.X
        if not np.any(np.all((drawn == 0.0) | (drawn == 1.0), axis=1)):
            return history.X[:0]
        return history.X[np.all((history.X == 0.0) | (history.X == 1.0), axis=1)]

    def _learn(self, tr: TrustRegion, history: History, d: int) -> TrustRegion:
        """The CMA region after the trials told since its last update, once they are at least
        ``lambda`` (ranked by incumbent key); a new region if that exhausts it."""
        lam = self._population(d)
        tr = replace(tr, n_seen=history.n)
        if history.n - tr.n_updated < lam or tr.cma is None:
            return tr
        rows = slice(tr.n_updated, history.n)
        keys = _keys(history.Y[rows, 0], history.C[rows])
        order = np.lexsort((keys[:, 1], keys[:, 0]))
        cma = cma_region.update(tr.cma, history.X[rows][order], keys[order, 1])
        tr = replace(tr, cma=cma, n_updated=history.n)
        if not cma_region.exhausted(cma):
            return tr
        stream = SobolStream(d, tr.seed, tr.index)
        mean = stream.draw(1)[0]
        start = cma_region.start(mean, _CMA_SIGMA_INIT, lam)
        return tr.restarted(history, index=stream.index, n_updated=history.n, cma=start)

    def _restart(self, tr: TrustRegion, history: History) -> TrustRegion:
        if self.restart_keeps_data:
            return replace(
                tr, generation=tr.generation + 1, length=self.length_init, successes=0, failures=0
            )
        return tr.restarted(history, **self._new_region())

    def _absorb(self, tr: TrustRegion, history: History, d: int) -> TrustRegion:
        """Count the rows told since the last ask as one batch: success, failure, resize."""
        if history.n == tr.n_seen:
            return tr
        keys = _keys(history.Y[tr.tr_start :, 0], history.C[tr.tr_start :])
        new = keys[tr.n_seen - tr.tr_start :]
        batch_best = tuple(float(v) for v in new[_best_row(new)])
        tr = replace(tr, n_seen=history.n)
        if tr.best is None or history.n - tr.tr_start <= tr.n_init_given:
            best = batch_best if tr.best is None else min(tuple(tr.best), batch_best)
            return replace(tr, best=[float(v) for v in best])
        old = keys[: len(keys) - len(new)]
        values = old[:, 1][old[:, 0] == 0]
        spread = float(values.max() - values.min()) if len(values) else 0.0
        best_violation, best_value = tr.best
        if best_violation > 0:  # no feasible point yet: less violation is progress
            improved = batch_best[0] < best_violation * (1 - _IMPROVEMENT)
        else:
            improved = batch_best[0] == 0 and batch_best[1] < best_value - _IMPROVEMENT * spread
        successes = tr.successes + 1 if improved else 0
        failures = 0 if improved else tr.failures + 1
        length = tr.length
        fail_tol = self.failure_tolerance or math.ceil(max(4 / tr.last_q, d / tr.last_q))
        if successes >= self.success_tolerance:
            length, successes = min(2.0 * length, self.length_max), 0
        if failures >= fail_tol:
            length, failures = length / 2.0, 0
        new_best = [float(v) for v in min(tuple(tr.best), batch_best)]
        return replace(tr, successes=successes, failures=failures, length=length, best=new_best)

    def _trust_region_points(
        self,
        problem: Problem,
        history: History,
        tr: TrustRegion,
        taken: np.ndarray,
        count: int,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, ENNParams]:
        """Up to ``count`` points from the TR, ``(<= count, d)`` snapped, and the ENN scales."""
        d = problem.d
        X = history.X[tr.tr_start :]
        y = history.Y[tr.tr_start :, :1]
        enn = ENN(X, y, k=self.k_neighbors)
        params = ENNParams()
        if self.noisy:
            warm = ENNParams(b=tr.b, a=tr.a)
            params = enn.fit(rng, self.fit_candidates, self.fit_samples, warm_start=warm)
        centre = X[self._centre(enn, params, history.C[tr.tr_start :])]
        lower = np.clip(centre - tr.length / 2, 0.0, 1.0)
        upper = np.clip(centre + tr.length / 2, 0.0, 1.0)

        cands = self._candidates(centre, lower, upper, rng)
        cands = distinct_rows(problem.space.snap(cands), taken)
        if len(cands) == 0:
            return np.zeros((0, d)), params
        enn = prefilter(enn, centre, lower, upper)
        mu, sigma = enn.posterior(cands, params)
        pick = count if len(cands) >= count else len(cands)
        if self.noisy:
            chosen = lowest(mu[:, 0] - sigma[:, 0], pick, rng)
        else:
            chosen = pareto_select(mu[:, 0], sigma[:, 0], pick, rng)
        return cands[chosen], params

    def _centre(self, enn: ENN, params: ENNParams, C: np.ndarray) -> int:
        """Row of the TR's incumbent: the best key; when noisy, the lowest posterior mean
        among the ``k`` best keys."""
        keys = _keys(enn.Y[:, 0], C)
        if not self.noisy:
            return _best_row(keys)
        order = np.lexsort((keys[:, 1], keys[:, 0]))
        top = order[: min(self.k_neighbors, len(order))]
        mu, _ = enn.posterior(enn.X[top], params, observation_noise=True)
        return int(top[np.argmin(mu[:, 0])])

    def _candidates(
        self, centre: np.ndarray, lower: np.ndarray, upper: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """RAASP: ``(M, d)`` points equal to ``centre`` outside a random mask."""
        d = len(centre)
        M = self.n_candidates or min(5000, 100 * d)
        # Sobol points under a random shift modulo 1 (Cranley-Patterson): a randomized QMC
        # design at the cost of an addition, where scrambling costs milliseconds per ask.
        unit = _sobol(d, M) + rng.random(d)
        np.remainder(unit, 1.0, out=unit)
        mask = perturbation_mask(rng, M, d, np.float32)
        # centre + mask * (value - centre), in place: one pass per step over (M, d).
        unit *= upper - lower
        unit += lower - centre
        unit *= mask
        unit += centre
        return np.clip(unit, 0.0, 1.0, out=unit)  # rounding may step a hair outside


def _keys(values: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``(n, 2)`` incumbent keys ``[total violation, value]``: lexicographically smaller is
    better, so every feasible point beats every infeasible one."""
    violation = np.maximum(C, 0.0).sum(axis=1) if C.shape[1] else np.zeros(len(values))
    return np.column_stack([violation, values])


def _best_row(keys: np.ndarray) -> int:
    """The first row of the smallest key."""
    violation = keys[:, 0]
    rows = np.flatnonzero(violation == violation.min())
    return int(rows[np.argmin(keys[rows, 1])])


@functools.lru_cache(maxsize=32)
def _sobol(d: int, n: int) -> np.ndarray:
    """The first ``n`` points of the unscrambled Sobol sequence in ``d`` dimensions."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # n need not be a power of two
        points = qmc.Sobol(d, scramble=False).random(n)
    points.flags.writeable = False
    return points
