"""Samplers: multi-target particle sampling by A-MWGraD or MWGraD over ask/tell.

The targets live with the client: it asks for the particles' positions, evaluates the scores
``grad log pi_k`` there and tells them; the server turns them into Wasserstein gradients, the
min-norm weights and the (accelerated) step of ``engines.wasserstein_particles``, and keeps
the particles, their velocities and the history of every step in the database. A tell names
the iteration it answers, so two clients cannot apply a step twice or to positions they did
not see.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.engine import Connection, Row

from client.models import SamplerAsk, SamplerCreate, SamplerPublic, SamplerStep, SamplerTell
from engines import wasserstein_particles
from service.db.models import Sampler
from service.errors import ApiError, ProblemCode
from service.idempotency import IdemKey
from service.store import Answer, Store, row_or_404, utcnow
from service.wire import sampler_public

samplers_t = Sampler.__table__

#: The most numbers a tell carries (``n_targets x n_particles x dim``): a tell of this size is
#: about 2-5 MB of JSON, so the server's body limit may need raising before this one binds.
MAX_TELL_NUMBERS = 1_000_000
#: The most entries of a step's ``n_particles^2 x dim`` kernel arrays (160 MB of float64 each).
MAX_KERNEL_ENTRIES = 20_000_000


def create_sampler(
    store: Store, tenant_id: int, body: SamplerCreate, idem: IdemKey | None
) -> Answer:
    """Raises: ApiError 422 ``invalid_sampler`` (init or bounds that do not fit)."""
    seed = body.seed if body.seed is not None else secrets.randbits(62)
    X = _initial_positions(body, seed)

    def run(conn: Connection) -> tuple[int, SamplerPublic]:
        now = utcnow()
        values = {
            "tenant_id": tenant_id,
            "config": body.model_dump(mode="json", exclude={"seed"}),
            "seed": seed,
            "iteration": 0,
            "particles": _particles_json(wasserstein_particles.Particles.at(X)),
            "history": {"grad_norm": [], "mean_nll": [], "restarts": 0},
            "created_at": now,
            "updated_at": now,
        }
        sampler_id = conn.execute(
            insert(samplers_t).values(**values).returning(samplers_t.c.id)
        ).scalar_one()
        row = _row(conn, tenant_id, sampler_id)
        return 201, sampler_public(row)

    return store.write(tenant_id, idem, run)


def get_sampler(store: Store, tenant_id: int, sampler_id: int) -> SamplerPublic:
    return store.db.read(lambda conn: sampler_public(_row(conn, tenant_id, sampler_id)))


def ask_sampler(store: Store, tenant_id: int, sampler_id: int) -> SamplerAsk:
    """The positions where the next tell's scores are wanted; changes nothing."""
    row = store.db.read(lambda conn: _row(conn, tenant_id, sampler_id))
    return SamplerAsk(iteration=row.iteration, X=row.particles["X"])


def tell_sampler(
    store: Store, tenant_id: int, sampler_id: int, body: SamplerTell, idem: IdemKey | None
) -> Answer:
    """Apply one step with the told scores.

    Raises: ApiError 404; 409 ``stale_iteration`` (the tell answers another iteration than the
    sampler's); 422 ``shape_mismatch``, ``non_finite_gradient``, ``non_finite_log_prob``, or
    ``step_not_finite`` (the step overflowed: nothing is stored).
    """

    def run(conn: Connection) -> tuple[int, SamplerStep]:
        row = _row(conn, tenant_id, sampler_id, lock=True)
        if body.iteration != row.iteration:
            raise ApiError(
                ProblemCode.STALE_ITERATION,
                f"the tell answers iteration {body.iteration} but sampler {sampler_id} is at "
                f"iteration {row.iteration}; ask for the current positions",
                iteration=row.iteration,
            )
        particles, info, nll = _step(row, body)
        history = dict(row.history)
        history["grad_norm"] = [*history["grad_norm"], info.grad_norm]
        history["mean_nll"] = [*history["mean_nll"], None if nll is None else nll.tolist()]
        history["restarts"] = int(history["restarts"]) + int(info.restarted)
        iteration = row.iteration + 1
        conn.execute(
            update(samplers_t)
            .where(samplers_t.c.id == sampler_id)
            .values(
                iteration=iteration,
                particles=_particles_json(particles),
                history=history,
                updated_at=utcnow(),
            )
        )
        return 200, SamplerStep(
            iteration=iteration,
            weights=info.weights.tolist(),
            grad_norm=info.grad_norm,
            bandwidth=info.bandwidth,
            restarted=info.restarted,
        )

    return store.write(tenant_id, idem, run)


def _step(
    row: Row, body: SamplerTell
) -> tuple[wasserstein_particles.Particles, wasserstein_particles.StepInfo, np.ndarray | None]:
    """The sampler's step with the told scores: the new particles, what the step did, and the
    mean negative log density per target when ``log_prob`` was told.

    Raises: ApiError 422 (see ``tell_sampler``); nothing is stored then.
    """
    config = SamplerCreate.model_validate(row.config)
    grad, log_prob = _told_scores(body, (config.n_targets, config.n_particles, config.dim))
    with np.errstate(over="ignore", invalid="ignore"):  # checked below, nothing stored
        particles, info = wasserstein_particles.step(
            _particles(row.particles),
            -grad,  # f_k = -log pi_k
            config.eta,
            accelerated=config.algorithm == "a-mwgrad",
            kernel=config.kernel,
            schedule=config.schedule,
            beta=config.beta,
            restart=config.restart,
            bandwidth=None if config.bandwidth == "median" else float(config.bandwidth),
            weighting=config.weighting,
        )
    nll = None if log_prob is None else -log_prob.mean(axis=1)
    if nll is not None and not np.all(np.isfinite(nll)):
        raise ApiError(
            ProblemCode.NON_FINITE_LOG_PROB,
            "log_prob's mean over the particles overflows; rescale it",
        )
    numbers: list[Any] = [particles.X, particles.V, info.weights, info.grad_norm, info.bandwidth]
    if not all(np.all(np.isfinite(a)) for a in numbers):
        raise ApiError(
            ProblemCode.STEP_NOT_FINITE,
            "the step overflowed (scores too large for this eta); lower eta or check the "
            "scores; the sampler is unchanged",
        )
    if config.bounds is not None:
        particles = particles.clamped(*config.bounds)
    return particles, info, nll


def _told_scores(
    body: SamplerTell, shape: tuple[int, int, int]
) -> tuple[np.ndarray, np.ndarray | None]:
    """``grad_log_prob`` of ``shape`` and ``log_prob`` (when told) of ``shape[:2]``.

    Raises: ApiError 422 ``shape_mismatch``, ``non_finite_gradient``, ``non_finite_log_prob``.
    """
    mismatch = ProblemCode.SHAPE_MISMATCH
    grad = _array(
        body.grad_log_prob, shape, "grad_log_prob", mismatch, ProblemCode.NON_FINITE_GRADIENT
    )
    if body.log_prob is None:
        return grad, None
    nonfinite = ProblemCode.NON_FINITE_LOG_PROB
    return grad, _array(body.log_prob, shape[:2], "log_prob", mismatch, nonfinite)


def delete_sampler(store: Store, tenant_id: int, sampler_id: int) -> None:
    def run(conn: Connection) -> None:
        _row(conn, tenant_id, sampler_id)
        conn.execute(delete(samplers_t).where(samplers_t.c.id == sampler_id))

    store.db.write(run)


_SAMPLER = select(samplers_t).where(
    samplers_t.c.id == bindparam("sampler_id"), samplers_t.c.tenant_id == bindparam("tenant_id")
)
_SAMPLER_FOR_UPDATE = _SAMPLER.with_for_update()


def _row(conn: Connection, tenant_id: int, sampler_id: int, lock: bool = False) -> Row:
    """The tenant's sampler row, locked for update (PostgreSQL) when ``lock``.

    Raises: ApiError 404 ``not_found``."""
    query = _SAMPLER_FOR_UPDATE if lock else _SAMPLER
    params = {"sampler_id": sampler_id, "tenant_id": tenant_id}
    return row_or_404(conn, query, params, f"sampler {sampler_id}")


def _initial_positions(body: SamplerCreate, seed: int) -> np.ndarray:
    """``(n_particles, dim)``: the given points, or a draw of the Gaussian with ``seed``
    (clipped to the bounds). Raises: ApiError 422 ``invalid_sampler``."""
    m, d = body.n_particles, body.dim
    if body.n_targets * m * d > MAX_TELL_NUMBERS:
        raise ApiError(
            ProblemCode.INVALID_SAMPLER,
            f"n_targets x n_particles x dim = {body.n_targets * m * d} is over "
            f"{MAX_TELL_NUMBERS}, the most numbers a tell may carry",
        )
    if m * m * d > MAX_KERNEL_ENTRIES:
        raise ApiError(
            ProblemCode.INVALID_SAMPLER,
            f"n_particles^2 x dim = {m * m * d} is over {MAX_KERNEL_ENTRIES}, the kernel arrays "
            "a step may build; use fewer particles",
        )
    if body.bounds is not None and not body.bounds[0] < body.bounds[1]:
        raise ApiError(
            ProblemCode.INVALID_SAMPLER, f"bounds {list(body.bounds)}: low must be below high"
        )
    if body.init.kind == "points":
        X = _array(
            body.init.X, (m, d), "init.X", ProblemCode.INVALID_SAMPLER, ProblemCode.INVALID_SAMPLER
        )
        if body.bounds is not None and (X.min() < body.bounds[0] or X.max() > body.bounds[1]):
            raise ApiError(ProblemCode.INVALID_SAMPLER, "init.X has points outside the bounds")
        return X
    loc = np.asarray(body.init.loc, dtype=np.float64)
    if loc.ndim == 1 and loc.shape[0] not in (1, d):
        raise ApiError(
            ProblemCode.INVALID_SAMPLER, f"init.loc has {loc.shape[0]} numbers; give 1 or dim = {d}"
        )
    with np.errstate(over="ignore"):
        X = loc + body.init.scale * np.random.default_rng(seed).standard_normal((m, d))
    if not np.all(np.isfinite(X)):
        raise ApiError(
            ProblemCode.INVALID_SAMPLER, "init.loc and init.scale overflow the float range"
        )
    return X if body.bounds is None else np.clip(X, *body.bounds)


def _array(
    value: Any,
    shape: tuple[int, ...],
    name: str,
    shape_code: ProblemCode,
    non_finite_code: ProblemCode,
) -> np.ndarray:
    """``value`` as a float64 array of ``shape``.

    Raises: ApiError 422 ``shape_code`` for another shape or a ragged list, ``non_finite_code``
    naming the first NaN or infinite entry.
    """
    try:
        array = np.asarray(value, dtype=np.float64)
    except ValueError:  # ragged nested lists
        array = None
    if array is None or array.shape != shape:
        got = "a ragged list" if array is None else f"shape {list(array.shape)}"
        detail = f"{name} has {got}; expected shape {list(shape)}"
        raise ApiError(shape_code, detail, expected=list(shape))
    bad = np.argwhere(~np.isfinite(array))
    if len(bad):
        where = [int(i) for i in bad[0]]
        raise ApiError(
            non_finite_code,
            f"{name} has {len(bad)} NaN or infinite entries, the first at index {where}",
            index=where,
        )
    return array


def _particles(stored: dict[str, Any]) -> wasserstein_particles.Particles:
    w = stored.get("w")
    return wasserstein_particles.Particles(
        np.asarray(stored["X"], dtype=np.float64),
        np.asarray(stored["V"], dtype=np.float64),
        int(stored["n"]),
        None if w is None else np.asarray(w, dtype=np.float64),
    )


def _particles_json(p: wasserstein_particles.Particles) -> dict[str, Any]:
    return {
        "X": p.X.tolist(),
        "V": p.V.tolist(),
        "n": p.n,
        "w": None if p.w is None else p.w.tolist(),
    }
