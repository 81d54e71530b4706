"""The pom bench's metrics per run, their summary over seeds, the targets, the tables and the
JSON line (``bench/pom.py`` defines every figure)."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bench.harness import fmt, markdown_table, print_notes, print_target_table, round4
from bench.pom_peers import ACQF_OPTIONS, MC_SAMPLES, NUM_RESTARTS, RAW_SAMPLES, Q
from bench.pom_reference import SPECS, Evaluator, normalize_front, reference
from engines.metrics import emd, hypervolume, igd, non_dominated

if TYPE_CHECKING:
    from bench.pom import Settings

LABELS = {
    "pom": "POM (engine)",
    "mwgd": "mwgd (engine)",
    "qlognehvi": "qLogNEHVI",
    "qlognparego": "qLogNParEGO",
    "sobol": "Sobol",
    "nsga2": "NSGA-II (Optuna)",
}
# Targets.
HV_WINS_SHARE = 0.75  # >= 3 of 4 problems
EMD_RATIO_MAX = 0.8
TIME_RATIO_MAX = 2.0
SUMMARY_KEYS = [
    "hv_share",
    "log10_hv_gap",
    "emd",
    "emd_all",
    "igd",
    "nd_share",
    "s_per_batch",
    "fit_s_per_batch",
    "n_pareto",
]


@dataclass
class Run:
    """One (problem, seed, method) run: the evaluated points and the cost of each batch."""

    X: np.ndarray
    Y: np.ndarray
    batch_s: list[float] = field(default_factory=list)
    fit_s: list[float] = field(default_factory=list)
    nd_shares: list[float] = field(default_factory=list)
    hv_trace: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Reference:
    pareto_set: np.ndarray
    front: np.ndarray
    front_hv_share: float
    seconds: float


def build_reference(key: str, f: Evaluator) -> Reference:
    t0 = time.perf_counter()
    pareto_set, front = reference(key)
    share = hypervolume(front, f.ref_point) / f.max_hv if f.spec.m == 2 else float("nan")
    if f.spec.m > 2:
        from bench.pom_reference import hv_share_torch

        share = hv_share_torch(front, f.ref_point, f.max_hv)
    return Reference(pareto_set, front, share, time.perf_counter() - t0)


def run_metrics(run: Run, f: Evaluator, ref: Reference) -> dict[str, Any]:
    nd = non_dominated(run.Y)
    hv = hypervolume(run.Y, f.ref_point)
    gap = f.max_hv - hv
    return {
        "hv": hv,
        "hv_share": hv / f.max_hv,
        "log10_hv_gap": math.log10(gap) if gap > 0 else None,
        "emd": float(emd(run.X[nd], ref.pareto_set)),
        "emd_all": float(emd(run.X, ref.pareto_set)),
        "igd": float(
            igd(normalize_front(run.Y[nd], ref.front), normalize_front(ref.front, ref.front))
        ),
        "nd_share": statistics.fmean(run.nd_shares) if run.nd_shares else None,
        "s_per_batch": statistics.fmean(run.batch_s) if run.batch_s else None,
        "fit_s_per_batch": statistics.fmean(run.fit_s) if run.fit_s else None,
        "n_pareto": int(nd.sum()),
        "n": len(run.Y),
        "hv_trace": run.hv_trace,
        "notes": run.notes,
    }


def summarize(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": len(per_seed)}
    for k in SUMMARY_KEYS:
        vals = [r[k] for r in per_seed if r[k] is not None]
        out[k] = statistics.median(vals) if vals else None
        out[f"{k}_min"] = min(vals) if vals else None
        out[f"{k}_max"] = max(vals) if vals else None
        out[f"{k}_per_seed"] = [r[k] for r in per_seed]
    traces = [r["hv_trace"] for r in per_seed]
    n = min(len(t) for t in traces)
    out["hv_share_trace_median"] = [statistics.median(t[i] for t in traces) for i in range(n)]
    out["notes"] = sorted({note for r in per_seed for note in r["notes"]})
    return out


def fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}"


def check(value: float | None, target: float, below: bool = True) -> dict[str, Any]:
    if value is None:
        return {"value": None, "target": target, "met": None}
    met = value <= target if below else value >= target
    return {"value": value, "target": target, "met": bool(met)}


@dataclass
class Comparison:
    """pom against qLogNEHVI on the problems where both ran: the targets."""

    both: list[str]
    hv_wins: list[str]
    emd_ratio: dict[str, float]
    emd_wins: list[str]
    time_ratio: dict[str, float]
    targets: dict[str, dict[str, Any]]
    goals: dict[str, str]


def compare(s: Settings, results: dict[str, dict[str, dict[str, Any]]]) -> Comparison:
    def get(p: str, m: str, k: str) -> Any:
        return results.get(p, {}).get(m, {}).get(k)

    both = [p for p in s.problems if get(p, "pom", "hv_share") is not None]
    both = [p for p in both if get(p, "qlognehvi", "hv_share") is not None]
    need = math.ceil(HV_WINS_SHARE * len(both)) if both else None
    hv_wins = [p for p in both if get(p, "pom", "hv_share") >= get(p, "qlognehvi", "hv_share")]
    emd_ratio = {p: get(p, "pom", "emd") / get(p, "qlognehvi", "emd") for p in both}
    emd_wins = [p for p in both if emd_ratio[p] <= EMD_RATIO_MAX]
    time_ratio = {
        p: get(p, "pom", "s_per_batch") / get(p, "qlognehvi", "s_per_batch") for p in both
    }
    targets = {
        "pom_hv_ge_qlognehvi": check(len(hv_wins) if both else None, need or 0, below=False),
        "pom_emd_le_0.8x_qlognehvi": check(len(emd_wins) if both else None, need or 0, below=False),
        "pom_time_le_2x_qlognehvi": check(
            max(time_ratio.values()) if time_ratio else None, TIME_RATIO_MAX
        ),
    }
    goals = {
        "pom_hv_ge_qlognehvi": f">= {need} of {len(both)} problems",
        "pom_emd_le_0.8x_qlognehvi": f">= {need} of {len(both)} problems",
        "pom_time_le_2x_qlognehvi": f"<= {TIME_RATIO_MAX} (worst problem)",
    }
    return Comparison(both, hv_wins, emd_ratio, emd_wins, time_ratio, targets, goals)


def print_problems(s: Settings, refs: dict[str, Reference], evals: dict[str, Evaluator]) -> None:
    print("\n## Problems and references\n")
    rows = []
    for p in s.problems:
        spec, f, r = SPECS[p], evals[p], refs.get(p)
        rows.append(
            [
                spec.label,
                spec.d,
                spec.m,
                f"{s.batches[p]} x {Q}",
                "[" + ", ".join(f"{v:.5g}" for v in f.ref_point) + "]",
                f"{f.max_hv:.6g}",
                spec.max_hv_source,
                f"{len(r.pareto_set) if r else '-'} / {len(r.front) if r else '-'}",
                fmt(r.front_hv_share, 5) if r else "-",
            ]
        )
    header = ["problem", "d", "m", "batches x q", "ref point (min.)", "max HV", "max HV from"]
    header += ["reference set / front points", "front HV share"]
    markdown_table(header, rows, "lrrrlrlrr")
    print(
        "(front HV share: the hypervolume of the 2,000-point reference front over max HV, a check "
        "of the reference; initial design 2 (d + 1) Sobol points)"
    )


def print_results(s: Settings, results: dict[str, dict[str, dict[str, Any]]]) -> None:
    print("\n## Results: median over the seeds that ran (their count in each row; min - max)\n")
    rows = [
        [
            SPECS[p].label,
            LABELS[m],
            r["seeds"],
            f"{fmt(r['hv_share'])} ({fmt(r['hv_share_min'], 3)} - {fmt(r['hv_share_max'], 3)})",
            fmt(r["log10_hv_gap"], 3),
            f"{fmt(r['emd'], 3)} ({fmt(r['emd_min'], 2)} - {fmt(r['emd_max'], 2)})",
            fmt(r["emd_all"], 3),
            fmt(r["igd"], 3),
            fmt(r["nd_share"], 2),
            fmt_s(r["s_per_batch"]),
            fmt_s(r["fit_s_per_batch"]),
            fmt(r["n_pareto"], 3),
        ]
        for p in s.problems
        for m in s.methods
        if (r := results.get(p, {}).get(m)) is not None
    ]
    header = ["problem", "method", "seeds", "HV share", "log10 HV gap", "EMD (Pareto pts)"]
    header += ["EMD (all pts)", "IGD", "batch non-dominated share", "s / batch"]
    header += ["fit s / batch", "Pareto pts"]
    markdown_table(header, rows, "llrrrrrrrrrr")
    print(
        "(EMD: unit cube / sqrt(d), lower is better; IGD on objectives scaled by the reference "
        "front's ideal and nadir; s / batch: fit + acquisition)"
    )
    print_notes(
        "Notes (per run; any seed)",
        results,
        s.problems,
        s.methods,
        lambda p, m: f"{SPECS[p].label} {LABELS[m]}",
    )


def print_targets(results: dict[str, dict[str, dict[str, Any]]], c: Comparison) -> None:
    print("\n## Targets (pom vs qLogNEHVI, medians over seeds)\n")
    markdown_table(
        ["problem", "HV share pom / qLogNEHVI", "EMD ratio", "time ratio"],
        (
            [
                SPECS[p].label,
                f"{fmt(results[p]['pom']['hv_share'])} / "
                f"{fmt(results[p]['qlognehvi']['hv_share'])}",
                f"{c.emd_ratio[p]:.3f}",
                f"{c.time_ratio[p]:.2f}",
            ]
            for p in c.both
        ),
        "llrr",
    )
    print()
    print_target_table((name, t["value"], c.goals[name], t["met"]) for name, t in c.targets.items())


def problem_figures(
    results: dict[str, dict[str, dict[str, Any]]],
    c: Comparison,
    refs: dict[str, Reference],
    evals: dict[str, Evaluator],
) -> dict[str, Any]:
    """The JSON line's ``problems``: every summary figure per problem and method."""
    problems_out: dict[str, Any] = {}
    for p, methods in results.items():
        entry: dict[str, Any] = {}
        for m, r in methods.items():
            for k in SUMMARY_KEYS:
                entry[f"{m}_{k}"] = round4(r[k])
                entry[f"{m}_{k}_per_seed"] = [round4(v) for v in r[f"{k}_per_seed"]]
            entry[f"{m}_hv_share_trace"] = [round4(v) for v in r["hv_share_trace_median"]]
            if r["notes"]:
                entry[f"{m}_notes"] = r["notes"]
        if p in c.both:
            entry["pom_vs_qlognehvi_emd_ratio"] = round4(c.emd_ratio[p])
            entry["pom_vs_qlognehvi_time_ratio"] = round4(c.time_ratio[p])
        entry["max_hv"] = round4(evals[p].max_hv)
        entry["reference_front_hv_share"] = round4(refs[p].front_hv_share) if p in refs else None
        problems_out[p] = entry
    return problems_out


def json_figures(
    s: Settings,
    problems_out: dict[str, Any],
    c: Comparison,
) -> dict[str, Any]:
    """The JSON line's headline figures, targets, problems and configuration."""
    out: dict[str, Any] = {}
    for p, entry in problems_out.items():
        for k in (
            "pom_hv_share",
            "qlognehvi_hv_share",
            "pom_emd",
            "qlognehvi_emd",
            "pom_s_per_batch",
            "qlognehvi_s_per_batch",
        ):
            if k in entry:
                out[f"{p}_{k}"] = entry[k]
    out["pom_hv_wins"] = c.hv_wins
    out["pom_emd_wins"] = c.emd_wins
    out["problems_compared"] = c.both
    out["pom_vs_qlognehvi_time_ratio_max"] = round4(
        max(c.time_ratio.values()) if c.time_ratio else None
    )
    for name, t in c.targets.items():
        out[f"target_{name}"] = round4(t["value"])
        out[f"target_{name}_goal"] = c.goals[name]
        out[f"target_{name}_met"] = t["met"]
    out["problems"] = problems_out
    out["config"] = {
        "problems": s.problems,
        "methods": s.methods,
        "seeds": s.seeds,
        "seeds_per_method": {m: s.n_seeds(m) for m in s.methods},
        "budget_min": s.budget_min,
        "batches": s.batches,
        "q": Q,
        "initial_design": "2 (d + 1) scrambled Sobol, per seed, shared by all methods",
        "botorch": {
            "num_restarts": NUM_RESTARTS,
            "raw_samples": RAW_SAMPLES,
            "mc_samples": MC_SAMPLES,
            "options": ACQF_OPTIONS,
        },
        "nsga2_population": {p: 2 * (SPECS[p].d + 1) for p in s.problems},
        "torch_threads": torch.get_num_threads(),
    }
    return out
