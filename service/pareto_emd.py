"""The Pareto set's leave-one-out EMD over trial numbers, for the Pareto view next to the
hypervolume curve: after each feasible trial that changed the front (thinned to ``STEPS``),
``engines.metrics.loo_emd`` of the front's trials in the unit cube, the figure
``BestPublic.pareto_set_loo_emd`` gives for the whole study. It falls as the study covers its
Pareto set densely."""

from __future__ import annotations

import numpy as np
from sqlalchemy.engine import Connection

from engines.metrics import loo_emd
from service.problem import ParsedStudy
from service.progress import evenly, trial_params

#: Steps of the curve at most, as for the hypervolume.
STEPS = 100
#: Distance computations (front size squared times dimensions, summed over the steps) at most;
#: past it the curve gets fewer steps, down to the last front alone (about 0.1 s of numpy).
WORK = 20_000_000


def emd_steps(
    conn: Connection,
    study_id: int,
    parsed: ParsedStudy,
    numbers: np.ndarray,
    joined: np.ndarray,
    left: np.ndarray,
) -> list[tuple[int, float]]:
    """``[trial number, EMD]`` of the feasible front after the trials where it changed
    (``numbers``: the feasible trials' numbers in order; ``joined``, ``left``: their
    ``front_lifetimes``); steps whose front has fewer than two trials are left out, and so is
    the whole curve for a single objective or when even the last front is too long."""
    d = parsed.space.d
    if len(parsed.objective_names) < 2 or d == 0 or not len(joined):
        return []
    count = min(len(joined), STEPS)
    while True:
        steps = joined[evenly(len(joined), count)] if count < len(joined) else joined
        fronts = [joined[(joined <= k) & (left > k)] for k in steps.tolist()]
        if sum(len(f) ** 2 for f in fronts) * d <= WORK:
            break
        if count == 1:
            return []
        count = max(1, count // 2)
    members = np.unique(np.concatenate(fronts))
    params = trial_params(conn, study_id, numbers[members].tolist())
    X = np.zeros((len(numbers), d))
    for i in members.tolist():
        X[i] = parsed.space.encode(params[int(numbers[i])])
    out = []
    for k, front in zip(steps.tolist(), fronts, strict=True):
        value = loo_emd(X[front])
        if value is not None:
            out.append((int(numbers[k]), value))
    return out
