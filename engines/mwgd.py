"""The ``mwgd`` engine: batch multi-objective BO by accelerated multiple Wasserstein gradient
descent on the surrogates' posteriors.

Method. A-MWGraD [Nguyen2026] moves a set of particles so that their distribution decreases
``K`` objectives over distributions at once, ``F_k(rho) = KL(rho || pi_k)``
(``engines.wasserstein_particles`` has the dynamics and their equations). The paper has no
black-box engine; this one is our design. After a Sobol initial design (``n_initial``, default
``2 (d + 1)``, ``engines.bo``), each objective and outcome constraint gets an exact GP
(``engines.bo.fit_gp``). With ``mu_k``, ``s_k`` the posterior mean and deviation of objective
``k`` (minimized) and ``c_k``, ``sd_k`` the mean and spread of its observations, the targets
on the unit cube are::

    log pi_k(x) = -(mu_k(x) - c_k - kappa s_k(x)) / (sd_k T) + sum_j log Phi(-mu_j(x) / s_j(x))

(``kappa`` optimism, default 1; ``T`` temperature, default 0.005; the sum over the outcome
constraints is the log probability of feasibility). The particles live in ``z = logit(x)``,
which adds the log-Jacobian ``sum_i log x_i (1 - x_i)`` to every target; gradients by autograd.
``steps`` A-MWGraD steps (default 150, ``eta`` 0.01, SVGD kernel, median bandwidth, convex
momentum with adaptive restart) with per-particle objective weights. The batch: the final
particles (snapped) whose optimistic values ``mu_k - kappa s_k`` no other particle dominates,
picked greedily by the hypervolume improvement over the observed feasible front plus the
pending and picked points (one objective: the improvement of the best value).

Our design (reasons in docs/engines/mwgd.md): one target per objective from its posterior;
per-particle weights (after MOO-SVGD) so the particles spread along the Pareto set; particles
seeded from the last ask's (up to half), the jittered observed front (up to a quarter) and
Sobol points; pending trials count as already chosen (no fantasy model); a particle leaving
``|z| <= 8`` is put back on the bound with zero velocity; when no candidate improves, the
particles of largest posterior deviation, far from what is chosen; categoricals ordinal.

References:
    [Nguyen2026] H. Nguyen et al. Accelerated Multiple Wasserstein Gradient Flows for
        Multi-objective Distributional Optimization. ICML 2026 (arXiv:2601.19220).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
from botorch.exceptions.errors import BotorchError
from botorch.models import SingleTaskGP

from engines import bo, wasserstein_particles
from engines.base import JSON, History, ModelBasedEngine, Problem, Proposal
from engines.limits import WorkLimits
from engines.metrics import hypervolume, non_dominated
from engines.options import check_int_options, int_option
from engines.quasirandom import SobolStream

_STATE_VERSION = 1
#: Particles in z = logit(x) stay within this bound (x within 3.4e-4 of a face).
_Z_BOUND = 8.0
#: Standard deviation of the jitter of observed non-dominated points that seed particles.
_JITTER = 0.02
#: The default particle count is ``max(64, 4 q)`` up to this (kernels cost ``O(n^2 d)``).
_MAX_DEFAULT_PARTICLES = 256
#: Least distance (unit cube) of a batch point to an observed, pending or picked point.
_MIN_DISTANCE = 1e-3


@dataclass
class MWGDEngine(ModelBasedEngine):
    """Batch multi-objective BO by A-MWGraD on the GP posteriors; see the module docstring.

    Options:
        n_initial: Sobol points (completed plus pending trials) before the model is used;
            ``None`` means ``2 (d + 1)``.
        n_particles: particles per ask; ``None`` means ``max(64, 4 q)``.
        steps: particle steps per ask.
        eta: the step size (in ``z = logit(x)``).
        kernel: ``svgd`` or ``blob`` estimates of the Wasserstein gradients.
        accelerated: A-MWGraD (momentum with adaptive restart), or MWGraD when false.
        weighting: ``per_particle`` min-norm weights, or one ``shared`` weight vector.
        kappa: optimism, the posterior deviations subtracted from the means.
        temperature: ``T``, on the standardized scale of each objective.
    """

    name: ClassVar[str] = "mwgd"
    limits: ClassVar[WorkLimits] = WorkLimits(
        max_dimension=50, max_count=32, max_points=640, observations=300
    )

    n_initial: int | None = int_option(None, 1, 10_000)
    n_particles: int | None = int_option(None, 2, 128)
    steps: int = int_option(150, 0, 200)
    eta: float = 0.01
    kernel: Literal["svgd", "blob"] = "svgd"
    accelerated: bool = True
    weighting: Literal["per_particle", "shared"] = "per_particle"
    kappa: float = 1.0
    temperature: float = 0.005

    def __post_init__(self) -> None:
        check_int_options(self)
        for label, value, low, high in [
            ("eta", self.eta, 1e-8, 10.0),
            ("kappa", self.kappa, 0.0, 10.0),
            ("temperature", self.temperature, 1e-4, 100.0),
        ]:
            if not (math.isfinite(value) and low <= value <= high):
                raise ValueError(f"{label} must be between {low} and {high}, got {value}")

    def suggest(
        self, problem: Problem, history: History, count: int, state: JSON, rng: np.random.Generator
    ) -> Proposal:
        stream = SobolStream.resume(problem.d, state, rng)
        last = dict(state["last"]) if isinstance(state.get("last"), dict) else None
        particles = _stored_particles(state, problem.d)
        n_init = self.n_initial if self.n_initial is not None else 2 * (problem.d + 1)
        model = functools.partial(
            self._model_points, problem, history, previous=particles, stream=stream, rng=rng
        )
        X, details, run = bo.sobol_then_model(problem, history, count, n_init, stream, rng, model)
        if run is not None:  # the model was asked: its summary and final particles
            summary, moved = run
            last = summary or last
            particles = moved if moved is not None else particles
        new_state = {
            "version": _STATE_VERSION,
            **stream.state(),
            "particles": particles.tolist(),
            "last": last,
        }
        return Proposal(X=X, state=new_state, details=details)

    def _model_points(
        self,
        problem: Problem,
        history: History,
        X_pending: np.ndarray,
        count: int,
        previous: np.ndarray,
        stream: SobolStream,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, list[JSON], tuple[JSON | None, np.ndarray | None]]:
        """``count`` snapped points ``(count, d)``, their details, and the ask's summary with the
        final particles ``(n, d)``; NaN rows (with a ``fallback`` reason) where the model gives
        no point."""
        m, d = problem.n_objectives, problem.d
        data = bo.training_data(problem, history)
        if isinstance(data, str):
            return (*bo.unfilled(d, count, data), (None, None))
        X_train, targets = data
        rows = np.flatnonzero(np.all(targets[:, m:] <= 0.0, axis=1))  # the feasible trials
        rows = rows[non_dominated(-targets[rows, :m])]
        Y_front, front = -targets[rows, :m], X_train[rows]
        n_particles = self.n_particles or min(max(64, 4 * count), _MAX_DEFAULT_PARTICLES)
        X0 = _initial_particles(previous, front, n_particles, stream, rng)
        try:
            with bo.seeded(int(rng.integers(2**31)), False):
                models = [bo.fit_gp(torch.as_tensor(X_train), targets[:, i], []) for i in range(m)]
                constraints = [
                    bo.fit_gp(torch.as_tensor(X_train), targets[:, m + j], [])
                    for j in range(problem.n_constraints)
                ]
                posterior = Posterior(models, constraints, -targets[:, :m], self.kappa)
                X_final, infos = self._move(posterior, X0)
                candidates = problem.space.snap(X_final)
                optimistic, deviation, log_pof = posterior.values(candidates)
                believed = posterior.values(X_pending)[0] if len(X_pending) else X_pending[:, :0]
        except bo.NUMERICAL_ERRORS as exc:
            return (*bo.unfilled(d, count, bo.failure(exc)), (None, None))

        ref = -bo.reference_point(problem, targets).numpy() if m > 1 else None
        chosen, gains = select_batch(
            candidates,
            optimistic,
            deviation,
            log_pof,
            np.vstack([Y_front, believed.reshape(-1, m)]),
            ref,
            np.vstack([X_train, X_pending]),
            count,
        )
        X_new = np.full((count, d), np.nan)
        X_new[: len(chosen)] = candidates[chosen]
        summary = _summary(infos, len(X_train), n_particles)
        details: list[JSON] = [
            {"source": "mwgd", "hvi": gain, "mwgd": dict(summary)} for gain in gains
        ]
        reason = "fewer distinct particles than asked"
        details += [{"source": "sobol", "fallback": reason} for _ in range(count - len(chosen))]
        return X_new, details, (summary, X_final)

    def _move(
        self, posterior: Posterior, X0: np.ndarray
    ) -> tuple[np.ndarray, list[wasserstein_particles.StepInfo]]:
        """Run the particle dynamics from ``X0: (n, d)`` in the cube; the final positions and
        the information of every step."""
        particles = wasserstein_particles.Particles.at(_logit(X0))
        infos = []
        for _ in range(self.steps):
            grad = posterior.potential_gradients(particles.X, self.temperature)
            if not np.all(np.isfinite(grad)):
                raise BotorchError("the posterior gradients are not finite")
            particles, info = wasserstein_particles.step(
                particles,
                grad,
                self.eta,
                accelerated=self.accelerated,
                kernel=self.kernel,
                weighting=self.weighting,
            )
            if not np.all(np.isfinite(particles.X)):
                raise BotorchError("the particles left the finite numbers")
            particles = particles.clamped(-_Z_BOUND, _Z_BOUND)
            infos.append(info)
        return _sigmoid(particles.X), infos


class Posterior:
    """The GP posteriors as the particles' targets (minimization), with the outcome
    constraints' probability of feasibility.

    ``models``: one per objective, fitted on ``-Y``; ``constraints``: one per constraint;
    ``Y: (n, m)`` the observed objectives (minimization) for the centres and spreads.
    """

    def __init__(
        self,
        models: list[SingleTaskGP],
        constraints: list[SingleTaskGP],
        Y: np.ndarray,
        kappa: float,
    ) -> None:
        self.models, self.constraints, self.kappa = models, constraints, kappa
        self.centre = Y.mean(axis=0)
        self.spread = np.maximum(Y.std(axis=0), 1e-9)

    def _moments(self, model: SingleTaskGP, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        post = model.posterior(X.unsqueeze(-2))
        return post.mean[..., 0, 0], post.variance[..., 0, 0].clamp_min(1e-12).sqrt()

    def _log_feasibility(self, X: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(X.shape[0], dtype=X.dtype)
        for model in self.constraints:
            mean, sd = self._moments(model, X)
            total = total + torch.special.log_ndtr(-mean / sd)
        return total

    def potential_gradients(self, Z: np.ndarray, temperature: float) -> np.ndarray:
        """``grad_z f_k`` at ``Z: (n, d)`` (z = logit(x)), ``f_k = -log pi_k`` in z
        (including the log-Jacobian); ``(K, n, d)``."""
        Zt = torch.as_tensor(Z, dtype=torch.float64).requires_grad_(True)
        X = torch.sigmoid(Zt)
        shared = -self._log_feasibility(X) - torch.log(X * (1.0 - X)).sum(dim=-1)
        grads = []
        for k, model in enumerate(self.models):
            mean, sd = self._moments(model, X)
            standardized = (-mean - self.centre[k] - self.kappa * sd) / self.spread[k]
            f = standardized / temperature + shared
            (g,) = torch.autograd.grad(f.sum(), Zt, retain_graph=k < len(self.models) - 1)
            grads.append(g.numpy())
        return np.stack(grads)

    def values(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """At ``X: (n, d)`` in the cube: the optimistic values ``mu - kappa s`` ``(n, K)``
        (minimization), the total standardized deviation ``(n,)`` and the log probability of
        feasibility ``(n,)``."""
        Xt = torch.as_tensor(X, dtype=torch.float64)
        with torch.no_grad():
            moments = [self._moments(model, Xt) for model in self.models]
            log_pof = self._log_feasibility(Xt).numpy()
        optimistic = np.stack([(-mu - self.kappa * sd).numpy() for mu, sd in moments], axis=1)
        deviation = np.sum(
            [sd.numpy() / s for (_, sd), s in zip(moments, self.spread, strict=True)], axis=0
        )
        return optimistic, deviation, log_pof


def select_batch(
    candidates: np.ndarray,
    optimistic: np.ndarray,
    deviation: np.ndarray,
    log_pof: np.ndarray,
    front: np.ndarray,
    ref: np.ndarray | None,
    blocked: np.ndarray,
    count: int,
) -> tuple[list[int], list[float]]:
    """Greedy batch of at most ``count`` distinct candidate indices and their hypervolume
    improvements.

    ``candidates: (n, d)`` snapped; ``optimistic: (n, m)`` their optimistic values
    (minimization); ``deviation``, ``log_pof`` (log probability of feasibility): ``(n,)``;
    ``front: (f, m)`` the values the batch adds to (observed front and pending trials);
    ``ref``: the reference point ``(m,)``, or ``None`` for one objective, where the
    improvement is over the best of ``front``; ``blocked: (b, d)`` points a batch point keeps
    ``_MIN_DISTANCE`` from.
    """
    likely = log_pof >= math.log(0.5)
    eligible = likely if likely.any() else log_pof >= log_pof.max()
    pool = np.flatnonzero(eligible)
    pool = pool[non_dominated(optimistic[pool])]
    chosen: list[int] = []
    gains: list[float] = []
    # One objective and nothing to improve on yet: improvements count from the worst candidate.
    values = front if len(front) or ref is not None else optimistic[pool].max(axis=0)[None]
    near = blocked.copy()
    for _ in range(count):
        open_ = [int(i) for i in pool if i not in chosen and _far(candidates[i], near)]
        base = _quality(values, ref)
        gain = np.array([_quality(np.vstack([values, optimistic[i]]), ref) - base for i in open_])
        if len(open_) and gain.max() > 0.0:
            pick, best = open_[int(np.argmax(gain))], float(gain.max())
        else:  # nothing improves: explore where the models know least, likely feasible first
            rest = [
                int(i)
                for i in np.flatnonzero(eligible)
                if i not in chosen and _far(candidates[i], near)
            ]
            rest = rest or [
                i for i in range(len(candidates)) if i not in chosen and _far(candidates[i], near)
            ]
            if not rest:
                break
            pick, best = max(rest, key=lambda i: (deviation[i], _nearest(candidates[i], near))), 0.0
        chosen.append(pick)
        gains.append(best)
        values = np.vstack([values, optimistic[pick]])
        near = np.vstack([near, candidates[pick]])
    return chosen, gains


def _quality(Y: np.ndarray, ref: np.ndarray | None) -> float:
    """Hypervolume of ``Y: (n, m)`` (n >= 1 for one objective) against ``ref``; for one
    objective, minus the best value."""
    if ref is None:
        return -float(Y.min())
    return hypervolume(Y, ref) if len(Y) else 0.0


def _nearest(x: np.ndarray, others: np.ndarray) -> float:
    return float(np.min(np.linalg.norm(others - x, axis=1))) if len(others) else math.inf


def _far(x: np.ndarray, others: np.ndarray) -> bool:
    return _nearest(x, others) >= _MIN_DISTANCE


def _summary(infos: list[wasserstein_particles.StepInfo], n_observations: int, n: int) -> JSON:
    """What an ask's particle run did, for the details and the state; ``n`` particles."""
    # The objectives' weights, averaged over the particles and the last 10 steps.
    weights = (
        np.mean([np.atleast_2d(info.weights).mean(axis=0) for info in infos[-10:]], axis=0)
        if infos
        else None
    )
    return {
        "n_observations": n_observations,
        "n_particles": n,
        "steps": len(infos),
        "grad_norm_first": infos[0].grad_norm if infos else None,
        "grad_norm_last": infos[-1].grad_norm if infos else None,
        "restarts": sum(info.restarted for info in infos),
        "mean_weights": None if weights is None else [float(w) for w in weights],
    }


def _initial_particles(
    previous: np.ndarray,
    front: np.ndarray,
    n: int,
    stream: SobolStream,
    rng: np.random.Generator,
) -> np.ndarray:
    """``(n, d)`` starting positions: up to ``n/2`` of the last ask's particles, up to ``n/4``
    jittered observed non-dominated points, Sobol points for the rest."""
    kept = previous[rng.permutation(len(previous))[: n // 2]]
    n_front = min(n // 4, n - len(kept), len(front))
    centres = front[rng.integers(len(front), size=n_front)] if len(front) else front
    jittered = np.clip(centres + _JITTER * rng.standard_normal(centres.shape), 0.0, 1.0)
    rest = stream.draw(n - len(kept) - len(jittered))
    return np.vstack([kept, jittered, rest])


def _stored_particles(state: JSON, d: int) -> np.ndarray:
    """The particles the state kept, ``(n, d)``; none when the state has no valid set."""
    try:
        X = np.asarray(state.get("particles", []), dtype=np.float64).reshape(-1, d)
    except (TypeError, ValueError):
        return np.zeros((0, d))
    if d == 0 or not np.all(np.isfinite(X)) or X.min(initial=0.0) < 0 or X.max(initial=0.0) > 1:
        return np.zeros((0, d))
    return X


def _logit(X: np.ndarray) -> np.ndarray:
    P = np.clip(X, 1e-4, 1.0 - 1e-4)
    return np.log(P) - np.log1p(-P)


def _sigmoid(Z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-Z))
