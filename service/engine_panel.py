"""A study's engine panel: what its optimizer did, ask after ask, for charts.

Each engine stores its diagnostics in the details of the trials it proposes (``service.ask``
adds the engine's wall time, ``ask_seconds``, to every engine): TuRBO-ENN its CMA region's step
size, or its box's length and success and failure counters, and restarts (``generation``); LCBO
its phase, penalty, KKT residual, gradient deviation and the iterate's violation; POM each
point's probability of Pareto-optimality and the batch's score; mwgd the particle run's gradient
norms and each point's hypervolume improvement; GP each model's lengthscales. Here those fields
are read as numbers in SQL (never whole details documents), downsampled per series, and grouped
into charts; the engine's state gives the facts, and mwgd's state its last particles. An
``auto`` study's panel charts the engine it chose at each ask, then the quantities of every
engine it delegated to, and its facts are the choice, the switches and the current engine's
state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.engine import Connection, Row

from client.models import (
    EngineChart,
    EngineFact,
    EngineParticles,
    EngineSeries,
    FactValue,
    StudyEngine,
)
from service.problem import ParsedStudy
from service.store import Store, find_study, trials_t

#: Points of all series together at most, so that a panel of many series (a GP's lengthscales
#: in many dimensions) stays a small response; but each series may keep ``_MIN_PER_SERIES``
#: (within the asked ``max_points``).
_TOTAL_POINTS = 20_000
_MIN_PER_SERIES = 100
#: Particles returned at most.
_MAX_PARTICLES = 1000
#: A list in the engine's state is shown whole up to this length, else as its length.
_SHORT_LIST = 8
#: State entries that are bookkeeping, not the optimizer's state.
_HIDDEN_STATE = frozenset({"version", "seed", "index", "particles", "hyperparameters"})


@dataclass(frozen=True)
class Quantity:
    """A field of the trials' details: its JSON ``path``, its label, its chart, and whether
    it holds words (``text``) rather than numbers."""

    name: str
    path: tuple[str | int, ...]
    label: str
    chart: str
    text: bool = False


@dataclass(frozen=True)
class Chart:
    title: str
    y_label: str
    log_y: bool = False


CHARTS = {
    "time": Chart("Engine time per ask", "seconds", log_y=True),
    "length": Chart("Trust-region length", "side in the unit cube", log_y=True),
    "sigma": Chart("CMA region's step size", "sigma in the unit cube", log_y=True),
    "counters": Chart("Successes and failures in a row", "count"),
    "restarts": Chart("Restarts", "restarts so far"),
    "phase": Chart("Phase", "phase"),
    "penalty": Chart("Penalty", "rho", log_y=True),
    "kkt": Chart("KKT residual and gradient deviation", "standardized units", log_y=True),
    "violation": Chart("Feasibility", "iterate's total violation"),
    "feasible": Chart("Feasible share of completed trials", "share"),
    "ppo": Chart("Probability of Pareto-optimality", "PPO of each point"),
    "score": Chart("Batch score", "log"),
    "emd": Chart("Expected EMD of the batch to the Pareto set", "unit-cube distance"),
    "gradnorm": Chart("GradNorm of the particle run", "gradient norm", log_y=True),
    "hvi": Chart("Improvement of each point", "hypervolume (or best value) improvement"),
    "momentum": Chart("Momentum restarts per run", "restarts"),
    "auto": Chart("Engine chosen by auto", "engine"),
}

_TIME = Quantity("ask_seconds", ("ask_seconds",), "engine time per ask", "time")
#: The engine an ``auto`` study delegated each ask to.
_AUTO = Quantity("auto_engine", ("auto", "engine"), "engine chosen", "auto", text=True)
_RESTARTS = Quantity("generation", ("generation",), "restarts", "restarts")
QUANTITIES: dict[str, tuple[Quantity, ...]] = {
    "turbo-enn": (
        Quantity("length", ("length",), "trust-region length", "length"),
        Quantity("sigma", ("sigma",), "CMA step size", "sigma"),
        Quantity("successes", ("successes",), "successes", "counters"),
        Quantity("failures", ("failures",), "failures", "counters"),
        _RESTARTS,
    ),
    "lcbo": (
        Quantity("phase", ("phase",), "phase", "phase", text=True),
        Quantity("penalty", ("penalty",), "penalty rho", "penalty"),
        Quantity("kkt_residual", ("kkt_residual",), "KKT residual", "kkt"),
        Quantity("gradient_std", ("gradient_std",), "gradient deviation", "kkt"),
        Quantity("iterate_violation", ("iterate_violation",), "iterate's violation", "violation"),
        _RESTARTS,
    ),
    "pom": (
        Quantity("ppo", ("ppo",), "PPO", "ppo"),
        Quantity("log_score", ("pom", "log_score"), "log POM score", "score"),
        Quantity("log_p_po", ("pom", "log_p_po"), "log P(all Pareto-optimal)", "score"),
        Quantity("log_p_cov", ("pom", "log_p_cov"), "log P(coverage)", "score"),
        Quantity("expected_emd", ("pom", "expected_emd"), "expected EMD", "emd"),
    ),
    "mwgd": (
        Quantity("grad_norm_first", ("mwgd", "grad_norm_first"), "first step", "gradnorm"),
        Quantity("grad_norm_last", ("mwgd", "grad_norm_last"), "last step", "gradnorm"),
        Quantity("hvi", ("hvi",), "improvement", "hvi"),
        Quantity("momentum_restarts", ("mwgd", "restarts"), "momentum restarts", "momentum"),
    ),
}

DESCRIPTIONS = {
    "turbo-enn": "The CMA region's step size sigma (the default from 2 to 50 parameters) or "
    "the box's side length (halved after failures, doubled after successes) and its success "
    "and failure counters (trust_region box), and the restarts.",
    "lcbo": "The local search's phase, the exact-penalty weight, the KKT residual and the "
    "gradient's posterior deviation at the iterate, and feasibility.",
    "pom": "Each proposed point's probability of Pareto-optimality and each batch's POM "
    "score (log P(Pareto-optimal) + lambda log P(coverage)) and expected EMD.",
    "mwgd": "The gradient norm of the particle run at its first and last step, each point's "
    "improvement, and the particles after the last ask.",
    "gp": "The lengthscale of each parameter in each GP (short: the output varies fast "
    "along it), fitted at every model ask.",
}


def study_engine(store: Store, tenant_id: int, study_id: int, max_points: int) -> StudyEngine:
    def fn(conn: Connection) -> StudyEngine:
        study = find_study(conn, tenant_id, study_id, columns=("id", "engine_state"))
        parsed = store.parsed_study(conn, study_id)
        state = study.engine_state or {}
        quantities = (*engine_quantities(parsed, state), _TIME)
        rows = detail_rows(conn, study_id, quantities)
        per_series = min(max_points, max(_MIN_PER_SERIES, _TOTAL_POINTS // len(quantities)))
        numbers = np.array([r.number for r in rows], dtype=np.int64)
        series = {
            q.name: _series(numbers, [r[3 + i] for r in rows], q, per_series)
            for i, q in enumerate(quantities)
        }
        downsampled = any(thinned for _, thinned in series.values())
        charts = _charts(quantities, {k: s for k, (s, _) in series.items()})
        if parsed.problem.n_constraints:
            feasible, thinned = _feasible_share(rows, per_series)
            charts.append(_chart("feasible", [feasible]))
            downsampled = downsampled or thinned
        return StudyEngine(
            engine=parsed.engine.name,
            description=_description(parsed.engine.name, state),
            proposed=int(sum(r[3 + len(quantities) - 1] is not None for r in rows)),
            downsampled=downsampled,
            charts=charts,
            facts=_time_facts(rows, len(quantities))
            + _state_facts(parsed, state)
            + _latest_scales(charts),
            particles=_particles(parsed, state),
        )

    return store.db.read(fn)


def engine_quantities(
    parsed: ParsedStudy, state: dict[str, Any] | None = None
) -> tuple[Quantity, ...]:
    """The detail fields the study's engine records; a GP's lengthscales are one per model
    (objectives, then constraints) and free parameter. An ``auto`` study records the engine it
    chose, and the fields of every engine it delegated to (the keys of its state's
    ``engines``)."""
    if parsed.engine.name != "auto":
        return _quantities_of(parsed, parsed.engine.name)
    used = (state or {}).get("engines")
    found: dict[str, Quantity] = {_AUTO.name: _AUTO}
    for name in used if isinstance(used, dict) else {}:
        found.update((q.name, q) for q in _quantities_of(parsed, name) if q.name not in found)
    return tuple(found.values())


def _quantities_of(parsed: ParsedStudy, name: str) -> tuple[Quantity, ...]:
    if name != "gp":
        return QUANTITIES.get(name, ())
    outputs = [*parsed.objective_names, *parsed.constraint_names]
    params = [dim.name for dim in parsed.space.dimensions]
    return tuple(
        Quantity(f"lengthscale.{out}.{param}", ("lengthscales", o, j), param, f"ls.{out}")
        for o, out in enumerate(outputs)
        for j, param in enumerate(params)
    )


def detail_rows(
    conn: Connection, study_id: int, quantities: Sequence[Quantity]
) -> Sequence[Row[Any]]:
    """``number, state, feasible`` and each quantity (``None`` where missing) of every trial
    of the study, by number; the fields are read in SQL, not the whole details."""
    details = trials_t.c.details
    fields = [
        details[q.path].as_string() if q.text else details[q.path].as_float() for q in quantities
    ]
    return conn.execute(
        select(trials_t.c.number, trials_t.c.state, trials_t.c.feasible, *fields)
        .where(trials_t.c.study_id == study_id)
        .order_by(trials_t.c.number)
    ).all()


def _series(
    numbers: np.ndarray, column: list[Any], q: Quantity, max_points: int
) -> tuple[EngineSeries, bool]:
    """The series of one quantity, thinned to ``max_points``, and whether it was thinned."""
    has = np.array([v is not None for v in column], dtype=bool)
    kept = numbers[has]
    values = [v for v in column if v is not None]
    if q.text:
        keep, thinned = _changes(values, max_points)
    else:
        keep = extremes(np.array(values, dtype=np.float64), max_points)
        thinned = len(keep) < len(values)
    points = [(int(kept[i]), values[i]) for i in keep.tolist()]
    return EngineSeries(name=q.name, label=q.label, points=points), thinned


def extremes(values: np.ndarray, max_points: int) -> np.ndarray:
    """Indices to draw of ``values: (n,)``: all when ``n <= max_points``; otherwise, of each
    of ``max_points / 2`` stretches of consecutive points, the lowest and the highest (spikes
    stay visible), and the last point."""
    n = len(values)
    if n <= max_points:
        return np.arange(n)
    stretches = np.array_split(np.arange(n), max(1, max_points // 2))
    keep = {n - 1}
    for stretch in stretches:
        keep.add(int(stretch[np.argmin(values[stretch])]))
        keep.add(int(stretch[np.argmax(values[stretch])]))
    return np.array(sorted(keep), dtype=np.int64)


def _changes(values: list[Any], max_points: int) -> tuple[np.ndarray, bool]:
    """Indices of the words to draw: where the word changes, and the last one; every so
    many of those (thinned) when they are more than ``max_points``."""
    if not values:
        return np.zeros(0, dtype=np.int64), False
    keep = [i for i in range(len(values)) if i == 0 or values[i] != values[i - 1]]
    keep = keep if keep[-1] == len(values) - 1 else [*keep, len(values) - 1]
    thinned = len(keep) > max_points
    if thinned:
        keep = [*keep[:: -(-len(keep) // max_points)][:-1], keep[-1]]
    return np.array(keep, dtype=np.int64), thinned


def _feasible_share(rows: Sequence[Row[Any]], max_points: int) -> tuple[EngineSeries, bool]:
    """The share of feasible trials among the completed ones so far, by trial number, and
    whether it was thinned."""
    done = [r for r in rows if r.state in ("completed", "infeasible")]
    numbers = np.array([r.number for r in done], dtype=np.int64)
    share = np.cumsum([r.feasible is True for r in done]) / np.arange(1, len(done) + 1)
    step = max(1, -(-len(done) // max_points))
    keep = sorted({*range(0, len(done), step), len(done) - 1}) if done else []
    points: list[tuple[int, float | str]] = [(int(numbers[i]), float(share[i])) for i in keep]
    series = EngineSeries(name="feasible_share", label="feasible share", points=points)
    return series, len(points) < len(done)


def _charts(quantities: Sequence[Quantity], series: dict[str, EngineSeries]) -> list[EngineChart]:
    """The charts in the order their quantities come, each with its non-empty series."""
    order: dict[str, list[EngineSeries]] = {}
    for q in quantities:
        order.setdefault(q.chart, [])
        if series[q.name].points:
            order[q.chart].append(series[q.name])
    return [_chart(key, drawn) for key, drawn in order.items() if drawn]


def _chart(key: str, series: list[EngineSeries]) -> EngineChart:
    if key.startswith("ls."):
        output = key[len("ls.") :]
        chart = Chart(f"GP lengthscales of {output}", "lengthscale (unit cube)", log_y=True)
    else:
        chart = CHARTS[key]
    return EngineChart(
        key=key, title=chart.title, y_label=chart.y_label, log_y=chart.log_y, series=series
    )


def _latest_scales(charts: list[EngineChart]) -> list[EngineFact]:
    """A GP's latest lengthscales (its state is only its Sobol stream)."""
    return [
        EngineFact(name=s.name, value=s.points[-1][1])
        for c in charts
        if c.key.startswith("ls.")
        for s in c.series
    ]


def _time_facts(rows: Sequence[Row[Any]], n_quantities: int) -> list[EngineFact]:
    """The engine time of the last ask, and the mean and largest over the asks."""
    seconds = np.array([r[2 + n_quantities] for r in rows if r[2 + n_quantities] is not None])
    if not len(seconds):
        return []
    return [
        EngineFact(name="last ask (s)", value=float(seconds[-1])),
        EngineFact(name="mean ask (s)", value=round(float(seconds.mean()), 6)),
        EngineFact(name="slowest ask (s)", value=float(seconds.max())),
    ]


def state_facts(state: dict[str, Any]) -> list[EngineFact]:
    """The entries of the engine's state, one level of nesting flattened (``last.steps``);
    long lists shown as their length."""
    facts = []
    for key, value in state.items():
        if key in _HIDDEN_STATE:
            continue
        entries = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, item in entries:
            name = key if sub is None else f"{key}.{sub}"
            facts.append(EngineFact(name=name, value=_fact_value(item)))
    return facts


def _description(name: str, state: dict[str, Any]) -> str:
    """The engine's description; an ``auto`` study's names the engine it chose and why, then
    describes that engine's quantities."""
    if name != "auto":
        return DESCRIPTIONS.get(name, "The engine's time per ask.")
    chosen = state.get("engine")
    if not isinstance(chosen, str):
        return "auto picks an engine from the study's shape at every ask; nothing asked yet."
    inner = DESCRIPTIONS.get(chosen, "The engine's time per ask.")
    return f"auto chose {chosen} ({state.get('reason', '')}). {inner}"


def _state_facts(parsed: ParsedStudy, state: dict[str, Any]) -> list[EngineFact]:
    """The state's facts; for ``auto`` its choice, reason and switches, then the state of the
    engine it delegates to (prefixed with its name)."""
    if parsed.engine.name != "auto":
        return state_facts(state)
    facts = [
        EngineFact(name=f"auto.{key}", value=_fact_value(state[key]))
        for key in ("engine", "rule", "reason")
        if key in state
    ]
    for switch in state.get("switches") or []:
        if isinstance(switch, dict):
            text = f"{switch.get('from')} -> {switch.get('to')}"
            facts.append(EngineFact(name=f"auto.switch at {switch.get('at')}", value=text))
    engines, chosen = state.get("engines"), state.get("engine")
    inner = engines.get(chosen) if isinstance(engines, dict) else None
    if isinstance(inner, dict):
        facts += [EngineFact(name=f"{chosen}.{f.name}", value=f.value) for f in state_facts(inner)]
    return facts


def _fact_value(value: Any) -> FactValue:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list) and len(value) <= _SHORT_LIST:
        return ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value)
    if isinstance(value, list | dict):
        return f"{len(value)} entries"
    return str(value)


def _particles(parsed: ParsedStudy, state: dict[str, Any]) -> EngineParticles | None:
    """mwgd's particles after its last ask, when the state holds a valid set."""
    stored = state.get("particles")
    d = parsed.problem.d
    if parsed.engine.name != "mwgd" or not isinstance(stored, list) or not stored or not d:
        return None
    try:
        X = np.asarray(stored, dtype=np.float64).reshape(-1, d)[:_MAX_PARTICLES]
    except (TypeError, ValueError):
        return None
    axes = [dim.name for dim in parsed.space.dimensions]
    return EngineParticles(axes=axes, points=X.round(5).tolist())
