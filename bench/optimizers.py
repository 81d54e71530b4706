"""Benchmark of the gradient optimizers of ``engines.optim`` on scikit-learn's digits (issue 6).

One run, two experiments, then tables and one JSON line:

1. Clean: every optimizer of the registry (``engines.optim.registry.OPTIMIZERS``, which includes
   torch's AdamW and SGD-momentum as references) at its defaults and over a 5-point sweep of its
   learning-rate knob, plus a fixed-learning-rate SAM baseline implemented here (``FixedLrSAM``).
2. Heavy-tailed noise: every gradient gets Student-t noise, g <- g + s * xi, xi ~ t(nu = 1.5)
   elementwise, s = NOISE_SCALE * RMS(g) with the RMS taken per parameter tensor (the scale is
   fixed before looking at any result: s = RMS(g)). Run
   for plain SGD (no momentum), SGD-momentum, ClippedSGD, NormalizedSGD, AdaGrad-Norm, Lion,
   Lion+, Muon and Muon+, each over the same sweep as in 1 (AdaGrad-Norm and Muon/Muon+ are
   reported for information, outside the claims).

Setup. Data: ``sklearn.datasets.load_digits`` (1797 8x8 images, bundled, no download); per seed
a stratified 80/20 train/validation split (``random_state=seed``), features standardized with
the training statistics. Model: MLP 64-256-256-10 with ReLU, float32, cross-entropy (mean
reduction, so f* = 0 is a valid lower bound for SAM-SPS). Training: a fixed number of steps of
minibatches of 64 (reshuffled every epoch, last partial batch dropped); the model
initialization and the batch order depend only on the seed, so every optimizer sees the same
batches and, under noise, the same noise draws (paired comparison). No learning-rate
schedule. Metric: validation accuracy after the last step. Each (optimizer, learning rate) is
summarised by the median over seeds (mean and standard deviation shown beside it); "best" is
the grid point with the highest median (ties: higher mean). There is no separate test split,
so the best of a sweep is selected and reported on the same validation data (optimistic for
tuned entries; the defaults carry no such bias).

Sweeps. Five points log-spaced over [max(low, d/10), min(high, 10 d)], d the registry default of
the knob and (low, high) its registry bounds; the default is run too when it is not a grid point
(Muon, Muon+). The knob is ``lr`` except for SAM-SPS and USAM-SPS, whose knob is the step cap
``lr_max`` (SAM-SPS is meant to need no lr tuning: its default is the headline). The bench-only
baselines have no registry entry and use fixed grids: plain SGD (no momentum) over 0.001..0.1,
the very grid of ClippedSGD and NormalizedSGD (all three default to lr 0.01); SAM (no momentum)
over 0.01..1 (0.01-0.3, extended to 1; centred on 0.1, the
no-momentum equivalent of the registry SGD default 0.01 with momentum 0.9); SAM with momentum
0.9 over 0.001..0.1. A best value on the edge of its grid is flagged (it may be under-tuned).

Claims checked (medians over seeds):

- ``samsps_vs_tuned_sam``: SAM-SPS at its defaults >= (best SAM of the lr sweep) - 1 point. The
  primary SAM baseline is ``FixedLrSAM`` with exactly SAM-SPS's other settings (rho 0.1, ascent
  rho g/||g||, coupled weight decay 5e-4, plain SGD step, no momentum), so only the step-size
  rule differs; SAM with momentum 0.9 is checked as a secondary baseline.
- ``heavy_tail_clip_vs_sgd``: under the noise, ClippedSGD and NormalizedSGD, each at its best lr,
  beat plain SGD (no momentum) at its best lr (strictly higher median accuracy); the comparison
  with SGD-momentum is reported beside it.
- ``lionplus_vs_lion``: under the noise, Lion+ at its best lr beats Lion at its best lr.

Threads: ``torch.set_num_threads(2)`` at start (the benchmark machine has 2 cores); times per
step are wall-clock training-loop times (forward, backward, optimizer step; two passes for the
SAM family) of the clean runs, median over all runs of an optimizer, and depend on the load of
the machine.

    .venv/bin/python -m bench.optimizers            # full: 3 seeds, 3000 steps
    .venv/bin/python -m bench.optimizers --quick    # 1 seed, 300 steps, 3-point sweeps: < 5 min
    .venv/bin/python -m bench.optimizers --seeds 5 --steps 2000

Budget: measured on the 2-core machine, one step of every configuration of one seed (both
experiments) costs about 0.3 s in total (Muon, Muon+, OLion and Shampoo ~3 ms per step, the
SAM family ~1.3 ms, the rest 0.5-1 ms, plus ~2.4 ms of Student-t noise per noisy step), so
FULL_STEPS = 3000 (about 136 epochs) x 3 seeds takes about 45 minutes when the machine is
otherwise idle, inside the 90-minute budget with room for a shared machine.

Progress goes to stderr; tables and the final JSON line to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from bench.harness import log
from bench.optimizers_training import (
    BATCH,
    HIDDEN,
    NOISE_OPTIMIZERS,
    NOISE_SCALE,
    NU,
    SAM,
    SAM_MOMENTUM,
    SGD_PLAIN,
    VAL_FRACTION,
    RunResult,
    configs_of,
    knob_of,
    load_split,
    needs_closure,
    train_one,
)
from engines.optim.registry import OPTIMIZERS

FULL_STEPS = 3000
QUICK_STEPS = 300
CLAIM_MARGIN = 0.01  # one accuracy point
SWEEP_POINTS = 5
QUICK_SWEEP_POINTS = 3


# --- aggregation and tables ----------------------------------------------------------------------


@dataclass
class Config:
    experiment: str  # "clean" or "noise"
    name: str
    knob: str
    value: float
    is_default: bool
    runs: list[RunResult] = field(default_factory=list)

    @property
    def accs(self) -> list[float]:
        return [r.val_acc for r in self.runs]

    @property
    def median(self) -> float:
        return statistics.median(self.accs)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.accs)

    @property
    def sd(self) -> float:
        return statistics.stdev(self.accs) if len(self.accs) > 1 else 0.0

    @property
    def ms_per_step(self) -> float:
        return 1000.0 * statistics.median(r.seconds_per_step for r in self.runs)

    @property
    def diverged(self) -> int:
        return sum(r.diverged for r in self.runs)

    @property
    def train_loss(self) -> float:
        return statistics.median(r.train_loss for r in self.runs)


def best_of(configs: list[Config]) -> Config:
    return max(configs, key=lambda c: (c.median, c.mean))


def pct(x: float) -> str:
    return f"{100.0 * x:6.2f}"


def print_grid(title: str, configs: list[Config]) -> None:
    print(f"\n## {title}")
    print(
        f"{'optimizer':<15} {'knob':<7} {'value':>9} {'med acc':>7} {'mean':>6} {'sd':>5} "
        f"{'min':>6} {'max':>6} {'div':>3} {'loss':>8} {'ms/step':>7}"
    )
    for c in configs:
        mark = "*" if c.is_default else " "
        gamma = [r.extra.get("mean_step_size_last10pct") for r in c.runs]
        note = ""
        if all(g is not None for g in gamma) and gamma:
            note = f"  gamma~{statistics.median(g for g in gamma if g is not None):.3g}"
        print(
            f"{c.name:<15} {c.knob:<7} {c.value:>8.3g}{mark} {pct(c.median):>7} {pct(c.mean)} "
            f"{100 * c.sd:5.2f} {pct(min(c.accs))} {pct(max(c.accs))} {c.diverged:>3} "
            f"{c.train_loss:8.2e} {c.ms_per_step:7.2f}{note}"
        )


def summarize(configs: list[Config]) -> dict[str, dict[str, Any]]:
    """Per optimizer: default and best grid point, with the grid edges flagged."""
    out: dict[str, dict[str, Any]] = {}
    names = list(dict.fromkeys(c.name for c in configs))
    for name in names:
        own = [c for c in configs if c.name == name]
        best = best_of(own)
        default = next((c for c in own if c.is_default), None)
        values = sorted(c.value for c in own)
        out[name] = {
            "knob": best.knob,
            "best_value": best.value,
            "best_median": best.median,
            "best_mean": best.mean,
            "best_per_seed": best.accs,
            "best_at_grid_edge": best.value in (values[0], values[-1]),
            "default_value": default.value if default else None,
            "default_median": default.median if default else None,
            "default_per_seed": default.accs if default else None,
            "ms_per_step": 1000.0
            * statistics.median(r.seconds_per_step for c in own for r in c.runs),
            "diverged_runs": sum(c.diverged for c in own),
        }
    return out


def print_summary(title: str, summary: dict[str, dict[str, Any]]) -> None:
    print(f"\n## {title}")
    print(
        f"{'optimizer':<15} {'default acc':>11} {'best acc':>8} {'best knob':>16} "
        f"{'edge':>4} {'div':>3} {'ms/step':>7}"
    )
    for name, s in summary.items():
        default = pct(s["default_median"]) if s["default_median"] is not None else "     -"
        knob = f"{s['knob']}={s['best_value']:.3g}"
        edge = "yes" if s["best_at_grid_edge"] else "no"
        print(
            f"{name:<15} {default:>11} {pct(s['best_median']):>8} {knob:>16} {edge:>4} "
            f"{s['diverged_runs']:>3} {s['ms_per_step']:7.2f}"
        )


def make_plan(points: int) -> list[Config]:
    """Every (experiment, optimizer, knob value) configuration, in run order."""
    clean_names = [*OPTIMIZERS, SAM, SAM_MOMENTUM]
    plan: list[Config] = []
    for experiment, names in (("clean", clean_names), ("noise", NOISE_OPTIMIZERS)):
        for name in names:
            for value, is_default in configs_of(name, points):
                plan.append(Config(experiment, name, knob_of(name), value, is_default))
    return plan


def run_plan(plan: list[Config], seeds: list[int], steps: int, wall_start: float) -> None:
    """Every configuration on every seed, one after the other, in this process."""
    passes = sum(2 if needs_closure(c.name) else 1 for c in plan) * len(seeds) * steps
    log(
        f"plan: {len(plan)} configurations x {len(seeds)} seeds x {steps} steps "
        f"({passes} forward/backward passes), batch {BATCH}, threads {torch.get_num_threads()}"
    )
    splits = {seed: load_split(seed) for seed in seeds}
    for i, config in enumerate(plan, 1):
        t0 = time.perf_counter()
        for seed in seeds:
            config.runs.append(
                train_one(
                    config.name,
                    config.knob,
                    config.value,
                    seed,
                    steps,
                    splits[seed],
                    noise_scale=NOISE_SCALE if config.experiment == "noise" else 0.0,
                )
            )
        log(
            f"[{i}/{len(plan)}] {config.experiment} {config.name} {config.knob}={config.value:.3g}"
            f" acc median {pct(config.median)} ({time.perf_counter() - t0:.1f} s, "
            f"{time.perf_counter() - wall_start:.0f} s total)"
        )


@dataclass
class Claims:
    samsps: dict[str, Any]
    clip: dict[str, Any]
    lion: dict[str, Any]
    muon: dict[str, Any]


def claims(
    clean_summary: dict[str, dict[str, Any]], noise_summary: dict[str, dict[str, Any]]
) -> Claims:
    # Claim 1: SAM-SPS at defaults vs SAM with the best lr of the sweep.
    samsps = clean_summary["sam-sps"]
    claim1: dict[str, Any] = {
        "samsps_default_median": samsps["default_median"],
        "samsps_default_per_seed": samsps["default_per_seed"],
        "margin": CLAIM_MARGIN,
    }
    for key, base in (("sam", SAM), ("sam_momentum", SAM_MOMENTUM)):
        s = clean_summary[base]
        claim1[f"tuned_{key}_median"] = s["best_median"]
        claim1[f"tuned_{key}_lr"] = s["best_value"]
        claim1[f"tuned_{key}_at_grid_edge"] = s["best_at_grid_edge"]
        claim1[f"held_vs_{key}"] = samsps["default_median"] >= s["best_median"] - CLAIM_MARGIN
    claim1["held"] = claim1["held_vs_sam"]
    claim1["usam_sps_default_median"] = clean_summary["usam-sps"]["default_median"]

    # Claim 2: under heavy-tailed noise, clipped/normalized beat plain SGD; Lion+ beats Lion.
    claim2: dict[str, Any] = {}
    for key, name in (
        ("sgd_plain", SGD_PLAIN),
        ("sgd_momentum", "sgd"),
        ("clipped_sgd", "clipped-sgd"),
        ("normalized_sgd", "normalized-sgd"),
        ("adagrad_norm", "adagrad-norm"),
    ):
        claim2[f"{key}_best"] = noise_summary[name]["best_median"]
        claim2[f"{key}_best_per_seed"] = noise_summary[name]["best_per_seed"]
        claim2[f"{key}_best_lr"] = noise_summary[name]["best_value"]
        claim2[f"{key}_best_at_grid_edge"] = noise_summary[name]["best_at_grid_edge"]
    plain, momentum = claim2["sgd_plain_best"], claim2["sgd_momentum_best"]
    claim2["held_clipped"] = claim2["clipped_sgd_best"] > plain
    claim2["held_normalized"] = claim2["normalized_sgd_best"] > plain
    claim2["held"] = claim2["held_clipped"] and claim2["held_normalized"]
    claim2["held_vs_sgd_momentum"] = (
        claim2["clipped_sgd_best"] > momentum and claim2["normalized_sgd_best"] > momentum
    )
    claim3 = {
        "lion_best": noise_summary["lion"]["best_median"],
        "lion_best_lr": noise_summary["lion"]["best_value"],
        "lion_best_per_seed": noise_summary["lion"]["best_per_seed"],
        "lionplus_best_per_seed": noise_summary["lion+"]["best_per_seed"],
        "lionplus_best": noise_summary["lion+"]["best_median"],
        "lionplus_best_lr": noise_summary["lion+"]["best_value"],
        "lion_best_at_grid_edge": noise_summary["lion"]["best_at_grid_edge"],
        "lionplus_best_at_grid_edge": noise_summary["lion+"]["best_at_grid_edge"],
        "lion_clean_best": clean_summary["lion"]["best_median"],
        "lionplus_clean_best": clean_summary["lion+"]["best_median"],
    }
    claim3["held"] = claim3["lionplus_best"] > claim3["lion_best"]
    muon_info = {
        "muon_best": noise_summary["muon"]["best_median"],
        "muonplus_best": noise_summary["muon+"]["best_median"],
        "muon_clean_best": clean_summary["muon"]["best_median"],
        "muonplus_clean_best": clean_summary["muon+"]["best_median"],
    }

    return Claims(claim1, claim2, claim3, muon_info)


def print_claims(c: Claims, summaries: dict[str, dict[str, dict[str, Any]]]) -> None:
    claim1, claim2, claim3, muon_info = c.samsps, c.clip, c.lion, c.muon
    plain, momentum = claim2["sgd_plain_best"], claim2["sgd_momentum_best"]
    print("\n## Claims")
    print(
        f"(1) SAM-SPS default {pct(claim1['samsps_default_median'])} vs tuned SAM "
        f"{pct(claim1['tuned_sam_median'])} (lr {claim1['tuned_sam_lr']:.3g}) - 1 point: "
        f"{'HELD' if claim1['held'] else 'FAILED'}; vs tuned SAM-momentum "
        f"{pct(claim1['tuned_sam_momentum_median'])} (lr {claim1['tuned_sam_momentum_lr']:.3g}): "
        f"{'held' if claim1['held_vs_sam_momentum'] else 'failed'}"
    )
    print(
        f"(2a) noise: clipped-sgd {pct(claim2['clipped_sgd_best'])}, normalized-sgd "
        f"{pct(claim2['normalized_sgd_best'])} vs plain SGD {pct(plain)}: "
        f"{'HELD' if claim2['held'] else 'FAILED'} (vs SGD-momentum {pct(momentum)}: "
        f"{'held' if claim2['held_vs_sgd_momentum'] else 'failed'})"
    )
    print(
        f"(2b) noise: Lion+ {pct(claim3['lionplus_best'])} vs Lion {pct(claim3['lion_best'])}: "
        f"{'HELD' if claim3['held'] else 'FAILED'}"
    )
    print(
        f"(info) noise: Muon+ {pct(muon_info['muonplus_best'])} vs Muon "
        f"{pct(muon_info['muon_best'])}; AdaGrad-Norm {pct(claim2['adagrad_norm_best'])}"
    )
    for label, summary in summaries.items():
        edges = [
            f"{n} ({s['knob']}={s['best_value']:.3g})"
            for n, s in summary.items()
            if s["best_at_grid_edge"]
        ]
        print(f"best on a grid edge ({label}): {', '.join(edges) or 'none'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, few steps, 3-point sweeps")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (3; quick 1)")
    parser.add_argument("--steps", type=int, default=None, help=f"steps per run ({FULL_STEPS})")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)  # the benchmark machine has 2 (shared) cores
    seeds = list(range(args.seeds if args.seeds is not None else (1 if args.quick else 3)))
    steps = args.steps if args.steps is not None else (QUICK_STEPS if args.quick else FULL_STEPS)
    points = QUICK_SWEEP_POINTS if args.quick else SWEEP_POINTS
    wall_start = time.perf_counter()
    plan = make_plan(points)
    run_plan(plan, seeds, steps, wall_start)
    clean = [c for c in plan if c.experiment == "clean"]
    noisy = [c for c in plan if c.experiment == "noise"]
    print(
        f"# bench/optimizers.py: digits, MLP 64-{HIDDEN}-{HIDDEN}-10, {steps} steps of batch "
        f"{BATCH}, seeds {seeds}, {points}-point sweeps, torch threads {torch.get_num_threads()}"
    )
    print("# accuracies in %, median over seeds; * = registry default; loss = final train loss")
    print_grid("Clean: every configuration", clean)
    clean_summary = summarize(clean)
    print_summary("Clean: defaults and best of sweep (median over seeds)", clean_summary)
    print_grid(f"Student-t noise (nu={NU}, s={NOISE_SCALE} x RMS(g) per tensor)", noisy)
    noise_summary = summarize(noisy)
    print_summary("Student-t noise: defaults and best of sweep", noise_summary)
    c = claims(clean_summary, noise_summary)
    summaries = {"clean": clean_summary, "noise": noise_summary}
    print_claims(c, summaries)
    wall = time.perf_counter() - wall_start
    print(f"\nwall time: {wall:.1f} s ({wall / 60:.1f} min)")
    print(
        json.dumps(
            json_line(args.quick, seeds, steps, points, plan, summaries, c, wall), default=float
        )
    )


def json_line(
    quick: bool,
    seeds: list[int],
    steps: int,
    points: int,
    plan: list[Config],
    summaries: dict[str, dict[str, dict[str, Any]]],
    c: Claims,
    wall: float,
) -> dict[str, Any]:
    clean_summary, noise_summary = summaries["clean"], summaries["noise"]
    return {
        "bench": "optimizers",
        "config": {
            "dataset": "sklearn digits",
            "model": f"MLP 64-{HIDDEN}-{HIDDEN}-10",
            "steps": steps,
            "batch": BATCH,
            "seeds": seeds,
            "sweep_points": points,
            "val_fraction": VAL_FRACTION,
            "noise": {"dist": "student-t", "nu": NU, "scale_x_rms_per_tensor": NOISE_SCALE},
            "torch_threads": torch.get_num_threads(),
            "quick": quick,
        },
        "best_val_acc": {n: s["best_median"] for n, s in clean_summary.items()},
        "best_knob": {n: {s["knob"]: s["best_value"]} for n, s in clean_summary.items()},
        "default_val_acc": {
            n: s["default_median"]
            for n, s in clean_summary.items()
            if s["default_median"] is not None
        },
        "noise_best_val_acc": {n: s["best_median"] for n, s in noise_summary.items()},
        "noise_best_knob": {n: {s["knob"]: s["best_value"]} for n, s in noise_summary.items()},
        "time_per_step_ms": {n: s["ms_per_step"] for n, s in clean_summary.items()},
        "samsps_vs_tuned_sam": c.samsps,
        "heavy_tail_clip_vs_sgd": c.clip,
        "lionplus_vs_lion": c.lion,
        "muonplus_vs_muon_info": c.muon,
        "sweeps": {
            f"{x.experiment}/{x.name}/{x.knob}={x.value:.4g}": round(x.median, 4) for x in plan
        },
        "wall_time_s": round(wall, 1),
    }


if __name__ == "__main__":
    main()
