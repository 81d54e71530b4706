"""The methods of the pom bench (``bench/pom.py`` describes each): the engines through the
engine contract, qLogNEHVI and qLogNParEGO as in BoTorch's multi-objective tutorial, Sobol and
Optuna's NSGA-II. Each proposes ``Q`` points in the unit cube per batch."""

from __future__ import annotations

import time
import warnings
import zlib
from typing import Any

import numpy as np
import optuna
import torch
from botorch.acquisition.multi_objective.logei import (
    qLogNoisyExpectedHypervolumeImprovement,
)
from botorch.acquisition.multi_objective.parego import qLogNParEGO
from botorch.exceptions.errors import ModelFittingError
from botorch.exceptions.warnings import BotorchWarning
from botorch.fit import fit_gpytorch_mll
from botorch.models import ModelListGP, SingleTaskGP
from botorch.models.transforms.outcome import Standardize
from botorch.optim.optimize import optimize_acqf, optimize_acqf_list
from botorch.sampling.normal import SobolQMCNormalSampler
from botorch.utils.sampling import sample_simplex
from gpytorch.mlls.sum_marginal_log_likelihood import SumMarginalLogLikelihood
from gpytorch.utils.warnings import GPInputWarning, NumericalWarning
from scipy.stats import qmc

from bench.harness import EngineMethod, Method, seed_int
from bench.pom_reference import SPECS, Evaluator, Spec
from engines.base import History, Problem
from engines.space import FloatParam, SearchSpace

Q = 4
#: Methods run through the engine contract (``pom`` as ``--engine``, default pom): ``mwgd`` is
#: not part of this bench's default run; bench/mwgd.py runs it here with ``--methods``.
ENGINE_METHODS = ("pom", "mwgd")
OPTUNA_METHODS = ("nsga2", "tpe", "optuna-gp")
# BoTorch tutorial settings.
NUM_RESTARTS = 10
RAW_SAMPLES = 512
MC_SAMPLES = 128
ACQF_OPTIONS = {"batch_limit": 5, "maxiter": 200}


def problem_index(spec: Spec) -> int:
    """The problem's part of a run's seed: its place in this bench's problems, or, for another
    bench's problem (``bench/pom_pymoo.py``), a number drawn from its key."""
    keys = list(SPECS)
    return keys.index(spec.key) if spec.key in keys else len(keys) + zlib.crc32(spec.key.encode())


def quiet_warnings() -> None:
    """As the tutorial (BadInitialCandidatesWarning, RuntimeWarning), plus the other numerical
    notices of BoTorch and GPyTorch (fits that stop at their iteration limit, jitter added)."""
    for category in (BotorchWarning, NumericalWarning, GPInputWarning, RuntimeWarning):
        warnings.filterwarnings("ignore", category=category)


def worker_setup() -> None:
    """A worker process: one torch thread, the numerical warnings off."""
    torch.set_num_threads(1)
    quiet_warnings()


def initial_design(spec: Spec, seed: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "balance properties" for n not a power of 2
        return qmc.Sobol(spec.d, scramble=True, seed=seed).random(2 * (spec.d + 1))


def engine_problem(spec: Spec, f: Evaluator) -> Problem:
    space = SearchSpace(
        [FloatParam(f"x{i}", float(f.low[i]), float(f.high[i])) for i in range(spec.d)]
    )
    return Problem(space, n_objectives=spec.m, reference_point=f.ref_point.copy())


class PomMethod(Method):
    """The common state of this bench's methods: the notes each run reports."""

    def __init__(self) -> None:
        #: Seconds of the last model fit (the BoTorch methods), else ``None``.
        self.fit_s: float | None = None
        self.fit_failures = 0
        self.fallbacks: dict[str, int] = {}  # engines: Sobol fallback points, by reason
        self.relaxed = 0  # pom: asks whose sample Pareto sets ignored observed dominators


class EnginePeer(PomMethod):
    """``pom`` (or ``--engine``) and ``mwgd`` through the engine contract."""

    def __init__(self, engine: str, options: dict[str, Any], spec: Spec, f: Evaluator, seed: int):
        super().__init__()
        rng = np.random.default_rng(seed_int(seed, problem_index(spec), 1))
        self.engine = EngineMethod(engine, options, engine_problem(spec, f), rng)
        self.fallbacks = self.engine.notes

    def propose(self, history: History, count: int) -> np.ndarray:
        proposal = self.engine.suggest(history, Q)
        if any(det.get("pom", {}).get("relaxed") for det in proposal.details):
            self.relaxed += 1
        U = np.asarray(proposal.X, dtype=np.float64)
        if U.shape != (Q, history.X.shape[1]) or not np.all(np.isfinite(U)):
            raise RuntimeError(f"engine {self.engine.name} returned {U.shape}")
        return np.clip(U, 0.0, 1.0)


class SobolPeer(PomMethod):
    """The continuation of the initial design's scrambled Sobol sequence."""

    def __init__(self, spec: Spec, seed: int) -> None:
        super().__init__()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.sobol = qmc.Sobol(spec.d, scramble=True, seed=seed)
            self.sobol.random(2 * (spec.d + 1))  # the initial design comes first

    def propose(self, history: History, count: int) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.sobol.random(Q)


class OptunaPeer(PomMethod):
    """An Optuna 5 sampler through ask/tell, the initial design enqueued as its first trials:
    ``nsga2`` (``NSGAIISampler``, the design as its generation 0), ``tpe`` (``TPESampler``) or
    ``optuna-gp`` (``GPSampler``, qLogEHVI with the running trials pending), each at its
    defaults otherwise; asked ``Q`` trials at a time."""

    def __init__(self, kind: str, spec: Spec, seed: int) -> None:
        super().__init__()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        self.kind = kind
        seed = seed_int(seed, problem_index(spec))
        self.sampler = {
            "nsga2": lambda: optuna.samplers.NSGAIISampler(
                population_size=2 * (spec.d + 1), seed=seed
            ),
            "tpe": lambda: optuna.samplers.TPESampler(seed=seed % 2**31),
            "optuna-gp": lambda: optuna.samplers.GPSampler(seed=seed % 2**31),
        }[kind]()
        self.study = optuna.create_study(directions=["minimize"] * spec.m, sampler=self.sampler)
        self.names = [f"x{i}" for i in range(spec.d)]

    def start(self, U0: np.ndarray, Y0: np.ndarray, C0: np.ndarray) -> None:
        for u in U0:
            self.study.enqueue_trial({n: float(v) for n, v in zip(self.names, u, strict=True)})
        trials = [self.study.ask() for _ in U0]
        for t in trials:
            # Enqueued (fixed) parameters bypass the sampler, which then never assigns the
            # trial an NSGA-II generation; asking for the relative parameters assigns generation 0
            # (no trial is complete yet) and samples nothing (generation 0 has no parents).
            _ = t.relative_params
        for t, u, y in zip(trials, U0, Y0, strict=True):
            got = [t.suggest_float(n, 0.0, 1.0) for n in self.names]
            if not np.allclose(got, u):
                raise RuntimeError(f"{self.kind} did not take the enqueued initial design")
            self.study.tell(t, [float(v) for v in y])
        if self.kind == "nsga2" and len(self.sampler.get_population(self.study, 0)) != len(U0):
            raise RuntimeError("NSGA-II generation 0 is not the initial design")

    def propose(self, history: History, count: int) -> np.ndarray:
        self.trials = [self.study.ask() for _ in range(Q)]
        return np.array([[t.suggest_float(n, 0.0, 1.0) for n in self.names] for t in self.trials])

    def tell(self, U: np.ndarray, Y: np.ndarray, C: np.ndarray) -> None:
        for t, y in zip(self.trials, Y, strict=True):
            self.study.tell(t, [float(v) for v in y])


class BoTorchPeer(PomMethod):
    """One batch of qLogNEHVI or qLogNParEGO per ``propose``, as in BoTorch's multi-objective
    tutorial: fresh GPs every batch, torch seeded by (seed, problem, batch)."""

    def __init__(self, method: str, spec: Spec, f: Evaluator, seed: int) -> None:
        super().__init__()
        self.method, self.spec, self.f, self.seed = method, spec, f, seed
        self.batch = 0

    def propose(self, history: History, count: int) -> np.ndarray:
        X, Y = history.X, history.Y
        torch.manual_seed(seed_int(self.seed, problem_index(self.spec), 2, self.batch))
        self.batch += 1
        t0 = time.perf_counter()
        train_x = torch.as_tensor(X, dtype=torch.double)
        train_obj = -torch.as_tensor(Y, dtype=torch.double)  # BoTorch maximizes
        models = [
            SingleTaskGP(train_x, train_obj[:, i : i + 1], outcome_transform=Standardize(m=1))
            for i in range(train_obj.shape[1])
        ]
        model = ModelListGP(*models)
        mll = SumMarginalLogLikelihood(model.likelihood, model)
        try:
            fit_gpytorch_mll(mll)
        except ModelFittingError:  # keep the prior hyperparameters; counted in the JSON
            self.fit_failures += 1
        self.fit_s = time.perf_counter() - t0
        bounds = torch.stack([torch.zeros(X.shape[1]), torch.ones(X.shape[1])]).double()
        sampler = SobolQMCNormalSampler(sample_shape=torch.Size([MC_SAMPLES]))
        if self.method == "qlognehvi":
            acq = qLogNoisyExpectedHypervolumeImprovement(
                model=model,
                ref_point=(-self.f.ref_point).tolist(),
                X_baseline=train_x,
                prune_baseline=True,
                sampler=sampler,
            )
            cand, _ = optimize_acqf(
                acq_function=acq,
                bounds=bounds,
                q=Q,
                num_restarts=NUM_RESTARTS,
                raw_samples=RAW_SAMPLES,
                options=dict(ACQF_OPTIONS),
                sequential=True,
            )
        else:
            acqs = [
                qLogNParEGO(
                    model=model,
                    X_baseline=train_x,
                    scalarization_weights=sample_simplex(
                        train_obj.shape[1], dtype=torch.double
                    ).squeeze(),
                    sampler=sampler,
                    prune_baseline=True,
                )
                for _ in range(Q)
            ]
            cand, _ = optimize_acqf_list(
                acq_function_list=acqs,
                bounds=bounds,
                num_restarts=NUM_RESTARTS,
                raw_samples=RAW_SAMPLES,
                options=dict(ACQF_OPTIONS),
            )
        return cand.detach().numpy().astype(np.float64)


def make_method(
    method: str, spec: Spec, f: Evaluator, seed: int, engines: dict[str, tuple[str, dict[str, Any]]]
) -> PomMethod:
    """``engines``: the engine name and options each of ``ENGINE_METHODS`` runs."""
    if method in ENGINE_METHODS:
        return EnginePeer(*engines[method], spec, f, seed)
    if method == "sobol":
        return SobolPeer(spec, seed)
    if method in OPTUNA_METHODS:
        return OptunaPeer(method, spec, seed)
    return BoTorchPeer(method, spec, f, seed)
