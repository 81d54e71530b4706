"""Test problems of ``bench/pom.py`` and their reference Pareto sets and fronts.

Problems (``botorch.test_functions.multi_objective``, minimization form, ``negate=False``):
BraninCurrin (d = 2, m = 2), DTLZ2 (d = 6, m = 2), ZDT3 (d = 6, m = 2; a front in five
disconnected parts) and VehicleSafety (d = 5, m = 3, bounds [1, 3]^5). Engines and metrics work
in the unit cube ``u``; a problem is evaluated at ``x = low + (high - low) u``.

Reference Pareto sets (design space, unit cube) and fronts (objective space), from which
``bench/pom.py`` draws ``N_REF`` = 2,000 points for EMD and for IGD:

- DTLZ2: ``u_0`` on a uniform grid of 2,000 points of [0, 1], ``u_1..u_5 = 0.5`` (exact;
  ``g = 0``; the front is then uniform in angle).
- ZDT3 (``ZDT3Standard``: the original definition, ``f_1 = g h``; BoTorch's ``ZDT3`` drops the
  factor ``g``, which makes the face ``u_0 = 0`` Pareto-optimal too): ``u_0`` on a uniform grid
  of 2,000 points of BoTorch's ``ZDT3._parts`` (the five intervals of the front), ``u_1..u_5 =
  0`` (exact; ``g = 1``).
- BraninCurrin: the non-dominated points of a 1,000 x 1,000 grid of [0, 1]^2, corners
  included (815 points, computed on the fly in about a second).
- VehicleSafety: no closed form. ``python -m bench.pom_reference`` writes an approximation to
  ``bench/data/pom_vehiclesafety_reference.csv``: the non-dominated points of 2^17 scrambled
  Sobol points, refined by ``ROUNDS`` rounds of an evolutionary step (Gaussian moves of the
  current non-dominated set at four scales, coordinates snapped to a bound with probability
  0.15, since much of this Pareto set lies on faces of the box), thinned to at most 4,000 rows
  (2,000 spread in design space plus 2,000 spread over the normalized front, by farthest-point
  sampling). The script prints the hypervolume of what it wrote as a share of BoTorch's
  ``max_hv`` (246.8161, from the approximate front of Tanabe and Ishibuchi 2020): 1.0005 for the
  3,091 rows written (1.0011 before thinning), so it is at least as good as the front behind
  ``max_hv``. Seed 0, about 110 s on one core.

Thinning (``spread``) is farthest-point sampling: start at the point nearest the centroid, then
repeatedly add the point farthest from those already chosen. It spreads the reference points
evenly over the set, so a mean over them approximates a mean over the uniform distribution on
the Pareto set (the dense samples behind them are not uniform).

    .venv/bin/python -m bench.pom_reference        # (re)write the VehicleSafety data file
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from botorch.test_functions.base import MultiObjectiveTestProblem
from botorch.test_functions.multi_objective import DTLZ2, ZDT3, BraninCurrin, VehicleSafety
from scipy.stats import qmc

DATA = Path(__file__).resolve().parent / "data"
VS_FILE = DATA / "pom_vehiclesafety_reference.csv"
N_REF = 2000
ROUNDS = 12
#: Largest non-dominated archive kept between refinement rounds.
ARCHIVE = 5000
SEED = 0


class ZDT3Standard(ZDT3):
    """ZDT3 as Zitzler, Deb and Thiele (2000) define it: ``f_1 = g(x) h(f_0, g)``.

    BoTorch's ``ZDT3`` returns ``f_1 = h`` without the factor ``g``. The front (``g = 1``) and the
    maximum hypervolume are the same, but the Pareto set is not: at ``x_0 = 0`` BoTorch's
    ``f = (0, 1)`` whatever ``x_1..x_5``, so the whole face ``x_0 = 0`` (five-dimensional) is
    Pareto-optimal there, which the reference set below (``x_1..x_5 = 0``) leaves out. With the
    factor ``g`` the Pareto set is exactly ``x_0`` in the five parts, ``x_1..x_5 = 0``.
    """

    def _evaluate_true(self, X: torch.Tensor) -> torch.Tensor:
        f = super()._evaluate_true(X)
        return torch.stack([f[..., 0], self._g(X) * f[..., 1]], dim=-1)


@dataclass(frozen=True)
class Spec:
    """One benchmark problem."""

    key: str
    label: str
    d: int
    m: int
    #: BO batches of q points after the initial design (full run).
    batches: int
    #: How the maximum hypervolume is obtained (printed under the tables).
    max_hv_source: str

    def problem(self) -> MultiObjectiveTestProblem:
        if self.key == "branincurrin":
            return BraninCurrin()
        if self.key == "dtlz2":
            return DTLZ2(dim=self.d, num_objectives=self.m)
        if self.key == "zdt3":
            return ZDT3Standard(dim=self.d)
        if self.key == "vehiclesafety":
            return VehicleSafety()
        raise KeyError(self.key)


SPECS: dict[str, Spec] = {
    s.key: s
    for s in [
        Spec("branincurrin", "BraninCurrin", 2, 2, 20, "BoTorch BraninCurrin._max_hv"),
        Spec("dtlz2", "DTLZ2", 6, 2, 20, "exact: 1.1^2 - pi/4 (BoTorch DTLZ2._max_hv)"),
        Spec("zdt3", "ZDT3", 6, 2, 20, "BoTorch ZDT3._max_hv"),
        Spec("vehiclesafety", "VehicleSafety", 5, 3, 10, "BoTorch VehicleSafety._max_hv"),
    ]
}


class Evaluator:
    """A BoTorch problem evaluated on the unit cube, minimization form."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.problem = spec.problem()
        bounds = self.problem.bounds.detach().numpy().astype(np.float64)
        self.low, self.high = bounds[0], bounds[1]
        self.ref_point = self.problem.ref_point.detach().numpy().astype(np.float64)
        self.max_hv = float(self.problem.max_hv)

    def __call__(self, U: np.ndarray) -> np.ndarray:
        X = self.low + (self.high - self.low) * np.asarray(U, dtype=np.float64)
        with torch.no_grad():
            Y = self.problem.evaluate_true(torch.as_tensor(X, dtype=torch.double))
        return Y.numpy().astype(np.float64)


# --- helpers --------------------------------------------------------------------------------


def nd_mask(Y: np.ndarray, block: int = 512) -> np.ndarray:
    """Non-dominated rows of ``Y: (n, m)`` (minimization) for large ``n``; duplicates: one kept.

    A dominating point has a strictly smaller sum of min-max normalized objectives, so rows are
    streamed in that order against the non-dominated rows found so far; a final pass of the
    survivors against each other covers ties of the sums.
    """
    Y = np.asarray(Y, dtype=np.float64)
    n = len(Y)
    if n == 0:
        return np.zeros(0, dtype=bool)
    lo, hi = Y.min(axis=0), Y.max(axis=0)
    Z = (Y - lo) / np.where(hi > lo, hi - lo, 1.0)
    order = np.argsort(Z.sum(axis=1), kind="stable")
    kept: list[int] = []
    for start in range(0, n, block):
        idx = order[start : start + block]
        B = Y[idx]
        alive = ~_dominated_by(B, Y[kept]) if kept else np.ones(len(idx), dtype=bool)
        # within the block (full pairwise); exact duplicates: keep the first
        dom = _dominates(B, B)
        dup = np.all(B[:, None, :] == B[None, :, :], axis=2) & np.tri(len(idx), k=-1, dtype=bool)
        alive &= ~dom.any(axis=0) & ~dup.any(axis=1)
        kept.extend(idx[alive].tolist())
    keep = np.array(kept)
    final = np.ones(len(keep), dtype=bool)
    for start in range(0, len(keep), block):
        final[start : start + block] = ~_dominated_by(Y[keep[start : start + block]], Y[keep])
    mask = np.zeros(n, dtype=bool)
    mask[keep[final]] = True
    return mask


def _dominates(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``(len(A), len(B))``: row ``a`` of ``A`` dominates row ``b`` of ``B``."""
    le = np.all(A[:, None, :] <= B[None, :, :], axis=2)
    lt = np.any(A[:, None, :] < B[None, :, :], axis=2)
    return le & lt


def _dominated_by(B: np.ndarray, A: np.ndarray) -> np.ndarray:
    """``(len(B),)``: row of ``B`` dominated by some row of ``A``."""
    if len(A) == 0:
        return np.zeros(len(B), dtype=bool)
    out = np.zeros(len(B), dtype=bool)
    step = max(1, 4_000_000 // max(1, len(A) * B.shape[1]))
    for s in range(0, len(B), step):
        out[s : s + step] = _dominates(A, B[s : s + step]).any(axis=0)
    return out


def spread(P: np.ndarray, k: int) -> np.ndarray:
    """Indices of ``k`` rows of ``P`` chosen by farthest-point sampling (all rows if fewer)."""
    n = len(P)
    if n <= k:
        return np.arange(n)
    first = int(np.argmin(((P - P.mean(axis=0)) ** 2).sum(axis=1)))
    chosen = [first]
    dist = ((P - P[first]) ** 2).sum(axis=1)
    for _ in range(k - 1):
        j = int(np.argmax(dist))
        chosen.append(j)
        dist = np.minimum(dist, ((P - P[j]) ** 2).sum(axis=1))
    return np.array(chosen)


def normalize_front(Y: np.ndarray, front: np.ndarray) -> np.ndarray:
    """``Y`` scaled by the ideal and nadir point of the reference ``front``."""
    lo, hi = front.min(axis=0), front.max(axis=0)
    return (Y - lo) / np.where(hi > lo, hi - lo, 1.0)


# --- reference sets -------------------------------------------------------------------------


def dense_reference(key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(U, Y)``: dense non-dominated points of problem ``key`` (unit cube, objectives)."""
    spec = SPECS[key]
    f = Evaluator(spec)
    if key == "dtlz2":  # exact, uniform in u_0 (and in the angle along the front)
        U = np.full((N_REF, spec.d), 0.5)
        U[:, 0] = np.linspace(0.0, 1.0, len(U))
        return U, f(U)
    if key == "zdt3":  # exact, uniform in u_0 = f_0 over the five parts
        parts = np.array(ZDT3._parts)
        lengths = parts[:, 1] - parts[:, 0]
        grid = np.linspace(0.0, lengths.sum(), N_REF)
        edges = np.concatenate([[0.0], np.cumsum(lengths)])
        part = np.clip(np.searchsorted(edges, grid, side="right") - 1, 0, len(parts) - 1)
        U = np.zeros((len(grid), spec.d))
        U[:, 0] = parts[part, 0] + (grid - edges[part])
        return U, f(U)
    if key == "branincurrin":
        g = np.linspace(0.0, 1.0, 1000)
        U = np.stack(np.meshgrid(g, g, indexing="ij"), axis=-1).reshape(-1, 2)
        Y = f(U)
        order = np.lexsort((Y[:, 1], Y[:, 0]))
        y1 = Y[order, 1]
        best = np.minimum.accumulate(np.concatenate([[np.inf], y1[:-1]]))
        keep = order[y1 < best]
        return U[keep], Y[keep]
    if key == "vehiclesafety":
        return load_vehiclesafety()
    raise KeyError(key)


def reference(key: str, n: int = N_REF) -> tuple[np.ndarray, np.ndarray]:
    """``(pareto_set, front)``: ``n`` points spread over the Pareto set (unit cube) for EMD and
    ``n`` points spread over the normalized front (objectives, minimization) for IGD."""
    U, Y = dense_reference(key)
    pareto_set = U[spread(U, n)]
    front = Y[spread(normalize_front(Y, Y), n)]
    return pareto_set, front


def load_vehiclesafety() -> tuple[np.ndarray, np.ndarray]:
    if not VS_FILE.exists():
        raise FileNotFoundError(
            f"{VS_FILE} is missing: run `.venv/bin/python -m bench.pom_reference` (about 30 s)"
        )
    data = np.loadtxt(VS_FILE, delimiter=",", comments="#", skiprows=0, ndmin=2)
    return data[:, :5], data[:, 5:]


def make_vehiclesafety(seed: int = SEED, rounds: int = ROUNDS) -> tuple[np.ndarray, np.ndarray]:
    """A dense non-dominated approximation of VehicleSafety (see the module docstring)."""
    spec = SPECS["vehiclesafety"]
    f = Evaluator(spec)
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        U = qmc.Sobol(spec.d, scramble=True, seed=seed).random(2**17)
    Y = f(U)
    keep = nd_mask(Y)
    U, Y = U[keep], Y[keep]
    scales = [0.1, 0.03, 0.01, 0.003]
    for r in range(rounds):
        parents = U if len(U) <= 3000 else U[rng.choice(len(U), 3000, replace=False)]
        children = np.repeat(parents, 6, axis=0)
        children += rng.normal(0.0, scales[r % len(scales)], children.shape)
        snap = rng.random(children.shape) < 0.15
        children[snap] = np.round(children[snap])
        children = np.clip(children, 0.0, 1.0)
        U = np.concatenate([U, children])
        Y = np.concatenate([Y, f(children)])
        keep = nd_mask(Y)
        U, Y = U[keep], Y[keep]
        if len(U) > ARCHIVE:  # keep the archive bounded, evenly spread over the front
            idx = spread(normalize_front(Y, Y), ARCHIVE)
            U, Y = U[idx], Y[idx]
        print(f"  round {r + 1}/{rounds}: {len(U)} non-dominated points", file=sys.stderr)
    return U, Y


def hv_share_torch(Y: np.ndarray, ref: np.ndarray, max_hv: float) -> float:
    """Exact hypervolume (BoTorch box decomposition) of ``Y`` as a share of ``max_hv``."""
    from botorch.utils.multi_objective.box_decompositions.dominated import (
        DominatedPartitioning,
    )

    Yt = -torch.as_tensor(Y, dtype=torch.double)
    part = DominatedPartitioning(ref_point=-torch.as_tensor(ref, dtype=torch.double), Y=Yt)
    return float(part.compute_hypervolume()) / max_hv


def main() -> int:
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    U, Y = make_vehiclesafety()
    f = Evaluator(SPECS["vehiclesafety"])
    share_all = hv_share_torch(Y, f.ref_point, f.max_hv)
    rows = np.union1d(spread(U, N_REF), spread(normalize_front(Y, Y), N_REF))
    U, Y = U[rows], Y[rows]
    share = hv_share_torch(Y, f.ref_point, f.max_hv)
    DATA.mkdir(exist_ok=True)
    header = (
        "VehicleSafety (botorch) reference Pareto set, written by bench/pom_reference.py "
        f"(seed {SEED}, 2^17 Sobol + {ROUNDS} refinement rounds).\n"
        "Columns: u0..u4 in the unit cube (x = 1 + 2 u), then f1..f3 (minimized).\n"
        f"{len(U)} rows; hypervolume share of max_hv 246.8161: {share:.5f} "
        f"(dense archive before thinning: {share_all:.5f})."
    )
    np.savetxt(VS_FILE, np.hstack([U, Y]), delimiter=",", fmt="%.8g", header=header)
    print(header)
    print(f"wrote {VS_FILE} in {time.perf_counter() - t0:.1f} s")
    if not math.isfinite(share):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
