"""The turbo_enn bench's tables, targets and JSON line (``bench/turbo_enn.py`` defines every
figure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from bench.gp_turbo import FIT_FAILURES
from bench.harness import markdown_table, print_target_table
from bench.turbo_enn_runs import (
    DIMS,
    ENNBO_LABEL,
    GP_LABEL,
    GP_Q,
    MODE_LABELS,
    MODES,
    QS,
    QUALITY_D,
    QUALITY_Q,
    REPS,
    cfg_key,
)
from bench.turbo_enn_service import SERVICE_N, SERVICE_Q

if TYPE_CHECKING:
    from bench.turbo_enn import Settings

# Target thresholds.
GP_SPEEDUP_MIN = 100.0
SMALL_N_MAX_S = 0.05
BIG_N_MAX_S = 0.5
SERVICE_RATIO_MAX = 1.5
ACKLEY_BEST_MAX = 0.5


def fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4f}" if v < 1 else f"{v:.2f}"


def r4(v: Any) -> Any:
    return None if v is None else round(float(v), 4)


@dataclass
class Parts:
    """What the three parts measured (empty when a part did not run)."""

    enn: dict[str, dict[str, Any]] = field(default_factory=dict)
    ennbo: dict[str, dict[str, Any]] = field(default_factory=dict)
    gp: dict[str, dict[str, Any]] = field(default_factory=dict)
    qual: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    svc: dict[int, dict[str, Any]] = field(default_factory=dict)

    def ours(self, d: int, n: int, q: int, mode: str = "nds") -> float | None:
        return self.enn.get(mode, {}).get(cfg_key(d, n, q), {}).get("median_s")

    def ennbo_s(self, d: int, n: int, q: int, acq: str = "pareto") -> float | None:
        return self.ennbo.get(acq, {}).get(cfg_key(d, n, q), {}).get("proposal_s")

    def qmed(self, problem: str, method: str, key: str = "median_best") -> float | None:
        return self.qual.get(problem, {}).get(method, {}).get(key)


def check(value: float | None, target: float, below: bool = True) -> dict[str, Any]:
    met = None if value is None else (value <= target if below else value >= target)
    return {"value": value, "target": f"{'<=' if below else '>='} {target:g}", "met": met}


def print_timing(
    s: Settings,
    enn: dict[str, dict[str, Any]],
    ennbo: dict[str, dict[str, Any]],
    gp: dict[str, dict[str, Any]],
) -> None:
    print("\n## 1. Proposal time (fit + acquisition), seconds")
    print(
        "turbo-enn: median of 3 cold `suggest` calls; ennbo: median of 3 steady tell(1)+ask(q) "
        "after a cold tell of N; GP-TuRBO: one cold fit + Thompson sampling (q = 4 only)."
    )
    ns = sorted({*s.enn_n, *(s.gp_n if gp else [])})
    for q in QS:
        print(f"\n### q = {q}\n")
        head = "| d | N | turbo-enn noisy=false | turbo-enn noisy=true | ennbo PARETO | ennbo UCB "
        head += "| ennbo cold tell | GP-TuRBO | GP / turbo-enn | ennbo / turbo-enn |"
        print(head)
        print("|" + "---:|" * 10)
        for d in DIMS:
            for n in ns:
                k = cfg_key(d, n, q)
                ours = enn["nds"].get(k, {}).get("median_s") if enn else None
                noisy = enn["noisy"].get(k, {}).get("median_s") if enn else None
                pareto = ennbo.get("pareto", {}).get(k, {})
                ucb = ennbo.get("ucb", {}).get(k, {})
                g = gp.get(k)
                if ours is None and g is None and not pareto:
                    continue
                if g is None:
                    gp_txt, ratio = "-", "-"
                elif g.get("capped"):
                    gp_txt = f"> {g['cap_s']:.0f}"
                    ratio = f"> {g['cap_s'] / ours:.0f}" if ours else "-"
                else:
                    gp_txt = fmt_s(g["proposal_s"])
                    ratio = f"{g['proposal_s'] / ours:.0f}" if ours else "-"
                vs_ennbo = (
                    f"{pareto['proposal_s'] / ours:.2f}"
                    if ours and pareto.get("proposal_s")
                    else "-"
                )
                print(
                    f"| {d} | {n:,} | {fmt_s(ours)} | {fmt_s(noisy)} | "
                    f"{fmt_s(pareto.get('proposal_s'))} | {fmt_s(ucb.get('proposal_s'))} | "
                    f"{fmt_s(pareto.get('cold_tell_s'))} | {gp_txt} | {ratio} | {vs_ennbo} |"
                )
    if gp:
        print(
            "\nGP-TuRBO split (s): "
            + "; ".join(
                f"{k}: fit {v['fit_s']:.2f} + TS {v['ts_s']:.2f}"
                for k, v in gp.items()
                if not v.get("capped")
            )
        )


def print_quality(s: Settings, q: dict[str, dict[str, dict[str, Any]]]) -> None:
    print(f"\n## 2. Quality, d = {QUALITY_D}, q = {QUALITY_Q}, best value found (f* = 0)\n")
    header = ["problem", "method", "evals", "seeds", "median best", "min", "max", "@200"]
    header += ["@500", "@1000", "wall s/run", "propose s/run"]
    markdown_table(
        header,
        (
            [
                f"{problem}-{QUALITY_D}",
                method,
                evals_txt(m),
                len(m["seeds"]),
                fmt_best(m["median_best"]),
                fmt_best(m["min_best"]),
                fmt_best(m["max_best"]),
                *(fmt_best(m.get(f"median_best_at_{c}")) for c in (200, 500, 1000)),
                f"{m['wall_s_median']:.1f}",
                f"{m['propose_s_median']:.1f}",
            ]
            for problem, methods in q.items()
            for method, m in methods.items()
        ),
        "ll" + "r" * 10,
    )
    print(
        "(@E = median over seeds of the best after E evaluations; GP-TuRBO fits are warm-started)"
    )


def evals_txt(m: dict[str, Any]) -> str:
    if m["evals"] == m["evals_max"]:
        return str(m["evals"])
    return f"{m['evals']}-{m['evals_max']} (capped)"


def fmt_best(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def print_service(svc: dict[int, dict[str, Any]]) -> None:
    print(f"\n## 3. Service: ask(q = {SERVICE_Q}) on a study with N completed trials, seconds\n")
    header = ["d", "N", "fill s", "service first ask", "service warm (median of 5)"]
    header += ["raw first", "raw warm", "warm ratio", "first ratio"]
    times = ("service_cold_s", "service_warm_s", "raw_cold_s", "raw_warm_s")

    def row(d: int, r: dict[str, Any]) -> list[object]:
        ratios = (f"{r[k]:.2f}" for k in ("ratio_warm", "ratio_cold"))
        return [d, f"{r['n']:,}", f"{r['fill_s']:.1f}", *(fmt_s(r[k]) for k in times), *ratios]

    markdown_table(header, (row(d, r) for d, r in svc.items()), "r" * 9)
    print("(first = cold: the study's config, the history and the engine load in the server)")


def print_targets(s: Settings, targets: dict[str, dict[str, Any]], speedup_lb: bool | None) -> None:
    print("\n## Targets\n")
    print_target_table((name, t["value"], t["target"], t["met"]) for name, t in targets.items())
    print(
        "(no_slower: turbo-enn / ennbo PARETO time ratio; no_worse: turbo-enn median best minus "
        "ennbo's; proposal_n_le_2000: the slowest default-mode config with N <= 2,000)"
    )
    if speedup_lb:
        print("(GP-TuRBO hit the cap at N = 2,000, d = 20: the speedup is a lower bound)")
    if s.quick:
        print("(--quick: reduced grids and budgets; the targets are indicative only)")


@dataclass
class Headline:
    """The headline figures that the targets and the JSON line read."""

    speedup: float | None
    speedup_lb: bool | None
    g2000: dict[str, Any] | None
    e2000: float | None
    small: dict[str, float]
    small_noisy: dict[str, float]
    big: float | None
    ennbo_big: float | None
    svc20: dict[str, Any] | None
    svc_50k: bool
    ackley: float | None
    ennbo_ack: float | None
    ours_ros: float | None
    ennbo_ros: float | None
    vs_ennbo: dict[str, float]

    @property
    def worst_small(self) -> float | None:
        return max(self.small.values()) if self.small else None

    @classmethod
    def of(cls, s: Settings, p: Parts) -> Headline:
        g2000 = p.gp.get(cfg_key(20, 2000, GP_Q))
        e2000 = p.ours(20, 2000, GP_Q)
        speedup = speedup_lb = None
        if g2000 and e2000:
            if g2000.get("capped"):
                speedup, speedup_lb = g2000["cap_s"] / e2000, True
            else:
                speedup, speedup_lb = g2000["proposal_s"] / e2000, False

        def up_to_2000(mode: str) -> dict[str, float]:
            return {
                k: v["median_s"]
                for k, v in p.enn.get(mode, {}).items()
                if int(k.split("_n")[1].split("_")[0]) <= 2000
            }

        svc20 = p.svc.get(20)
        return cls(
            speedup=speedup,
            speedup_lb=speedup_lb,
            g2000=g2000,
            e2000=e2000,
            small=up_to_2000("nds"),
            small_noisy=up_to_2000("noisy"),
            big=p.ours(100, 50_000, 50),
            ennbo_big=p.ennbo_s(100, 50_000, 50),
            svc20=svc20,
            svc_50k=svc20 is not None and s.service_n == SERVICE_N,
            ackley=p.qmed("ackley", MODE_LABELS["nds"]),
            ennbo_ack=p.qmed("ackley", ENNBO_LABEL),
            ours_ros=p.qmed("rosenbrock", MODE_LABELS["nds"]),
            ennbo_ros=p.qmed("rosenbrock", ENNBO_LABEL),
            vs_ennbo={
                k: round(v["median_s"] / p.ennbo["pareto"][k]["proposal_s"], 3)
                for k, v in p.enn.get("nds", {}).items()
                if k in p.ennbo.get("pareto", {})
            },
        )

    def targets(self) -> dict[str, dict[str, Any]]:
        big, ennbo_big = self.big, self.ennbo_big
        ackley, ennbo_ack, ours_ros, ennbo_ros = (
            self.ackley,
            self.ennbo_ack,
            self.ours_ros,
            self.ennbo_ros,
        )
        return {
            "speedup_vs_gp_n2000_d20": check(self.speedup, GP_SPEEDUP_MIN, below=False),
            "proposal_n_le_2000": check(self.worst_small, SMALL_N_MAX_S),
            "proposal_n50000_d100_q50": check(big, BIG_N_MAX_S),
            "service_vs_raw": check(
                self.svc20["ratio_warm"] if self.svc20 else None, SERVICE_RATIO_MAX
            ),
            "ackley20_median_best": check(ackley, ACKLEY_BEST_MAX),
            "no_slower_than_ennbo_n50000_d100_q50": check(
                big / ennbo_big if big and ennbo_big else None, 1.0
            ),
            "no_slower_than_ennbo_all_configs": check(
                max(self.vs_ennbo.values()) if self.vs_ennbo else None, 1.0
            ),
            "no_worse_than_ennbo_ackley20": check(
                ackley - ennbo_ack if ackley is not None and ennbo_ack is not None else None, 0.0
            ),
            "no_worse_than_ennbo_rosenbrock20": check(
                ours_ros - ennbo_ros if ours_ros is not None and ennbo_ros is not None else None,
                0.0,
            ),
        }


def json_line(
    s: Settings,
    p: Parts,
    h: Headline,
    version: str,
    est: dict[str, float],
    part_s: dict[str, float],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "bench": "turbo_enn",
        "quick": s.quick,
        "code_version": version,
        "enn_vs_gp_speedup_n2000_d20": None if h.speedup is None else round(h.speedup, 1),
        "enn_vs_gp_speedup_is_lower_bound": h.speedup_lb,
        "enn_proposal_s_n2000_d20_q4": r4(h.e2000),
        "gp_turbo_proposal_s_n2000_d20_q4": r4(h.g2000.get("proposal_s")) if h.g2000 else None,
        "enn_proposal_s_n50000_d100_q50": r4(h.big),
        "enn_noisy_proposal_s_n50000_d100_q50": r4(p.ours(100, 50_000, 50, "noisy")),
        "ennbo_proposal_s_n50000_d100_q50": r4(h.ennbo_big),
        "ennbo_ucb_proposal_s_n50000_d100_q50": r4(p.ennbo_s(100, 50_000, 50, "ucb")),
        "enn_max_proposal_s_n_le_2000": r4(h.worst_small),
        "enn_noisy_max_proposal_s_n_le_2000": r4(
            max(h.small_noisy.values()) if h.small_noisy else None
        ),
        "enn_max_proposal_s_n_le_2000_d20": r4(
            max((v for k, v in h.small.items() if k.startswith("d20_")), default=None)
        ),
        "service_ask_s_n50000": r4(h.svc20["service_warm_s"]) if h.svc_50k else None,
        "service_ask_s": r4(h.svc20["service_warm_s"]) if h.svc20 else None,
        "service_first_ask_s": r4(h.svc20["service_cold_s"]) if h.svc20 else None,
        "raw_suggest_s": r4(h.svc20["raw_warm_s"]) if h.svc20 else None,
        "raw_first_suggest_s": r4(h.svc20["raw_cold_s"]) if h.svc20 else None,
        "service_vs_raw_ratio": r4(h.svc20["ratio_warm"]) if h.svc20 else None,
        "service_n": s.service_n,
        "service_d100_ask_s": r4(p.svc[100]["service_warm_s"]) if 100 in p.svc else None,
        "service_d100_vs_raw_ratio": r4(p.svc[100]["ratio_warm"]) if 100 in p.svc else None,
        "ackley20_median_best": r4(h.ackley),
        "ackley20_noisy_median_best": r4(p.qmed("ackley", MODE_LABELS["noisy"])),
        "rosenbrock20_median_best": r4(h.ours_ros),
        "rosenbrock20_noisy_median_best": r4(p.qmed("rosenbrock", MODE_LABELS["noisy"])),
        "ackley20_box_median_best": r4(p.qmed("ackley", MODE_LABELS["box"])),
        "rosenbrock20_box_median_best": r4(p.qmed("rosenbrock", MODE_LABELS["box"])),
        "ackley20_box_keepdata_median_best": r4(p.qmed("ackley", MODE_LABELS["box-keep"])),
        "rosenbrock20_box_keepdata_median_best": r4(p.qmed("rosenbrock", MODE_LABELS["box-keep"])),
        "ennbo_ackley20_median_best": r4(h.ennbo_ack),
        "ennbo_rosenbrock20_median_best": r4(h.ennbo_ros),
        "sobol_ackley20_median_best": r4(p.qmed("ackley", "Sobol")),
        "sobol_rosenbrock20_median_best": r4(p.qmed("rosenbrock", "Sobol")),
        # Only when every run reached 1,000 evaluations (not stopped by --gp-run-cap).
        "gp_turbo_ackley20_median_best_1000": (
            r4(p.qmed("ackley", GP_LABEL)) if p.qmed("ackley", GP_LABEL, "evals") == 1000 else None
        ),
        "gp_turbo_rosenbrock20_median_best_1000": (
            r4(p.qmed("rosenbrock", GP_LABEL))
            if p.qmed("rosenbrock", GP_LABEL, "evals") == 1000
            else None
        ),
        "gp_turbo_evals_min": p.qmed("ackley", GP_LABEL, "evals"),
        "gp_turbo_evals": s.gp_budget,
        "gp_turbo_ackley20_median_best": r4(p.qmed("ackley", GP_LABEL)),
        "gp_turbo_rosenbrock20_median_best": r4(p.qmed("rosenbrock", GP_LABEL)),
        "ackley20_median_best_at_1000": r4(
            p.qmed("ackley", MODE_LABELS["nds"], "median_best_at_1000")
        ),
        "rosenbrock20_median_best_at_1000": r4(
            p.qmed("rosenbrock", MODE_LABELS["nds"], "median_best_at_1000")
        ),
        "ennbo_ackley20_median_best_at_1000": r4(
            p.qmed("ackley", ENNBO_LABEL, "median_best_at_1000")
        ),
        "proposal_s": {
            **{
                f"turbo-enn-{m}": {k: r4(v["median_s"]) for k, v in p.enn.get(m, {}).items()}
                for m in MODES
            },
            **{
                f"ennbo-{a}": {k: r4(v["proposal_s"]) for k, v in p.ennbo.get(a, {}).items()}
                for a in ("pareto", "ucb")
            },
            "gp-turbo": {
                k: (f"> {v['cap_s']:.0f}" if v.get("capped") else r4(v["proposal_s"]))
                for k, v in p.gp.items()
            },
        },
        "enn_vs_ennbo_time_ratio": h.vs_ennbo,
        "quality": {
            p: {
                m: {
                    k: (r4(v) if isinstance(v, float) else v)
                    for k, v in summary.items()
                    if k not in ("per_seed",)
                }
                | {"per_seed": [r4(v) for v in summary["per_seed"]]}
                for m, summary in methods.items()
            }
            for p, methods in p.qual.items()
        },
        "service": {
            str(d): {k: (r4(v) if isinstance(v, float) else v) for k, v in r.items()}
            for d, r in p.svc.items()
        },
        "config": {
            "enn_n": s.enn_n,
            "dims": DIMS,
            "qs": QS,
            "reps": REPS,
            "gp_n": s.gp_n,
            "gp_dims": s.gp_dims,
            "gp_cap_s": s.gp_cap,
            "gp_quality_warm_start": True,
            "gp_run_cap_s": s.gp_run_cap,
            "budget": s.budget,
            "seeds": s.seeds,
            "gp_budget": s.gp_budget,
            "gp_seeds": s.gp_seeds,
            "gp_problems": s.gp_problems,
            "service_dims": s.service_dims,
            "torch_threads": torch.get_num_threads(),
        },
        "gp_turbo_failed_fits": FIT_FAILURES[0],
        "plan_estimate_s": {k: round(v) for k, v in est.items()},
        "part_s": {k: round(v, 1) for k, v in part_s.items()},
    }
    for name, t in h.targets().items():
        out[f"target_{name}"] = r4(t["value"])
        out[f"target_{name}_met"] = t["met"]
    return out
