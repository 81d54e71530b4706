"""The dashboard's study page in a real browser, beside optuna-dashboard.

For studies of 1,000, 10,000 and 50,000 finished trials (4 float parameters, the sphere plus
noise, one trial in a hundred failed), the same trials in both dashboards:

- asktell: ``asktell serve`` (one uvicorn worker, SQLite), the study imported through
  ``POST /v1/studies/import``; its page /dashboard/studies/{id};
- optuna-dashboard (the PyPI package, its own server, ``optuna-dashboard sqlite:///...``) on an
  Optuna study in RDB SQLite made with Optuna's storage API (``study.add_trials``), grown from
  one size to the next; its page /dashboard/studies/{id}.

Each (dashboard, size) gets a fresh server process; its study page is opened 1 + ``--reps``
times in Debian's Chromium (Playwright, a fresh browser context each time: nothing cached).
The first visit finds the server cold and is reported apart; the figures are the medians of
the others. bench/dashboard_browser.py says what paint, load and response size mean. The
databases live in /dev/shm when it exists (Optuna's storage API takes 4-6 ms a trial).

    .venv/bin/python -m bench.dashboard            # 1k, 10k and 50k trials
    .venv/bin/python -m bench.dashboard --quick    # 1k and 10k
    .venv/bin/python -m bench.dashboard --optuna-max 10000   # optuna-dashboard to 10k only

A size at which optuna-dashboard's page never settles (its requests still running after the
browser helper's wait) is logged and ends its runs; the sizes done are reported.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from bench.dashboard_browser import ASKTELL_READY_JS, Visits, launch, visits
from bench.dashboard_studies import (
    Trials,
    add_optuna_trials,
    asktell_server,
    import_asktell,
    make_trials,
    optuna_dashboard_server,
)
from bench.harness import Bench, interrupt_on_sigterm, log, markdown_table, print_target_table

CODE_PATHS = ("service", "client")
SIZES = (1_000, 10_000, 50_000)
QUICK_SIZES = (1_000, 10_000)
PAINT_TARGET_S = 2.0
MAX_RESPONSE_BYTES = 2_000_000
DASHBOARDS = {"asktell": "dashboard", "optuna-dashboard": "optuna_dashboard"}


def size_label(n: int) -> str:
    return f"{n // 1000}k"


def asktell_runs(
    bench: Bench, browser: Any, tmp: Path, trials: Trials, sizes: tuple[int, ...], reps: int
) -> dict[int, Visits]:
    out: dict[int, Visits] = {}
    for n in sizes:
        folder = tmp / f"asktell-{n}"
        folder.mkdir()
        with asktell_server(folder) as base:
            t0 = time.perf_counter()
            study_id = import_asktell(base, f"bench-{n}", trials.part(0, n))
            bench.progress(f"asktell: {n} trials imported in {time.perf_counter() - t0:.1f} s")
            url = f"{base}/dashboard/studies/{study_id}"
            out[n] = visits(browser, url, "history", ASKTELL_READY_JS, reps)
        bench.progress(f"asktell {n}: paint {out[n].paint_s:.2f} s, load {out[n].load_s:.2f} s")
    return out


def optuna_runs(
    bench: Bench,
    browser: Any,
    tmp: Path,
    trials: Trials,
    sizes: tuple[int, ...],
    reps: int,
    out: dict[int, Visits],
) -> None:
    """Fills ``out`` size by size; a size whose page never settles ends the runs (logged)."""
    storage = f"sqlite:///{tmp / 'optuna.db'}"
    have = 0
    for n in sizes:
        t0 = time.perf_counter()
        study_id = add_optuna_trials(storage, trials.part(have, n), have)
        bench.progress(f"optuna: {n - have} trials added in {time.perf_counter() - t0:.1f} s")
        have = n
        with optuna_dashboard_server(tmp, storage) as base:
            url = f"{base}/dashboard/studies/{study_id}"
            try:
                out[n] = visits(browser, url, "plot-history", None, reps)
            except TimeoutError as exc:
                bench.progress(f"optuna-dashboard {n}: gave up, {str(exc)[:120]}")
                return
        bench.progress(
            f"optuna-dashboard {n}: paint {out[n].paint_s:.2f} s, load {out[n].load_s:.2f} s"
        )


def print_table(runs: dict[str, dict[int, Visits]]) -> None:
    rows = []
    for name, by_size in runs.items():
        for n, v in by_size.items():
            size, url = v.largest()
            rows.append(
                [
                    name,
                    f"{n:,}",
                    f"{v.paint_s:.2f}",
                    f"{v.load_s:.2f}",
                    f"{v.first.paint_s:.2f} / {v.first.load_s:.2f}",
                    f"{size:,}",
                    url.split("/", 3)[-1] if url else "-",
                    len(v.external()),
                    len(v.problems()),
                ]
            )
    markdown_table(
        [
            "dashboard",
            "trials",
            "paint s",
            "load s",
            "cold server paint / load s",
            "largest response B",
            "its path",
            "external requests",
            "page errors",
        ],
        rows,
        "lrrrrrlrr",
    )
    print("(medians of the visits after the first; bytes as sent, e.g. gzipped)")
    for name, by_size in runs.items():
        for n, v in by_size.items():
            for problem in v.problems() + [f"external request: {u}" for u in v.external()]:
                print(f"- {name} {n:,}: {problem}")


def figures(runs: dict[str, dict[int, Visits]]) -> dict[str, Any]:
    """The JSON keys of every (dashboard, size): ``{prefix}_{paint,load}_s_{size}``, the cold
    server's in ``..._first``, and the largest response."""
    out: dict[str, Any] = {}
    for name, by_size in runs.items():
        prefix = DASHBOARDS[name]
        for n, v in by_size.items():
            k = size_label(n)
            out[f"{prefix}_paint_s_{k}"] = round(v.paint_s, 3)
            out[f"{prefix}_load_s_{k}"] = round(v.load_s, 3)
            out[f"{prefix}_paint_s_{k}_first"] = round(v.first.paint_s, 3)
            out[f"{prefix}_load_s_{k}_first"] = round(v.first.load_s, 3)
            out[f"{prefix}_max_response_bytes_{k}"] = v.largest()[0]
        if by_size:
            every = list(by_size.values())
            out[f"{prefix}_max_response_bytes"] = max(v.largest()[0] for v in every)
            out[f"{prefix}_max_response_path"] = max(v.largest() for v in every)[1].split("/", 3)[
                -1
            ]
            out[f"{prefix}_external_requests"] = sorted({u for v in every for u in v.external()})
    asktell = list(runs.get("asktell", {}).values())
    if asktell:
        out["dashboard_max_api_response_bytes"] = max(v.largest("/v1/")[0] for v in asktell)
    return out


def targets(out: dict[str, Any]) -> dict[str, tuple[str, float | None, str, bool | None]]:
    """The issue's targets by JSON key: (what, value, goal, met)."""

    def ratio(what: str) -> float | None:
        ours, theirs = out.get(f"dashboard_{what}_s_10k"), out.get(f"optuna_dashboard_{what}_s_10k")
        return round(ours / theirs, 3) if ours is not None and theirs else None

    def check(value: float | None, ok: bool) -> bool | None:
        return None if value is None else ok

    paint50 = out.get("dashboard_paint_s_50k")
    largest = out.get("dashboard_max_response_bytes")
    paint_ratio, load_ratio = ratio("paint"), ratio("load")
    return {
        "paint_50k": (
            "paint at 50,000 trials, s",
            paint50,
            f"<= {PAINT_TARGET_S:g}",
            check(paint50, paint50 is not None and paint50 <= PAINT_TARGET_S),
        ),
        "max_response": (
            "largest dashboard response, bytes",
            largest,
            f"<= {MAX_RESPONSE_BYTES:,}",
            check(largest, largest is not None and largest <= MAX_RESPONSE_BYTES),
        ),
        "paint_10k_vs_optuna_dashboard": (
            "paint at 10,000: asktell / optuna-dashboard",
            paint_ratio,
            "< 1",
            check(paint_ratio, paint_ratio is not None and paint_ratio < 1),
        ),
        "load_10k_vs_optuna_dashboard": (
            "load at 10,000: asktell / optuna-dashboard",
            load_ratio,
            "< 1",
            check(load_ratio, load_ratio is not None and load_ratio < 1),
        ),
    }


def run(args: argparse.Namespace, bench: Bench, runs: dict[str, dict[int, Visits]]) -> None:
    """Fills ``runs`` as it goes, so an interrupted run reports what it finished."""
    from playwright.sync_api import sync_playwright

    sizes = QUICK_SIZES if args.quick else SIZES
    trials = make_trials(max(sizes))
    shm = Path("/dev/shm")
    tmp = Path(
        tempfile.mkdtemp(prefix="asktell-bench-dashboard-", dir=shm if shm.is_dir() else None)
    )
    try:
        with sync_playwright() as playwright:
            browser = launch(playwright)
            log(f"Chromium {browser.version}")
            runs["asktell"] = {}
            runs["asktell"].update(asktell_runs(bench, browser, tmp, trials, sizes, args.reps))
            if not args.skip_optuna:
                runs["optuna-dashboard"] = {}
                peer_sizes = tuple(n for n in sizes if n <= args.optuna_max)
                optuna_runs(
                    bench, browser, tmp, trials, peer_sizes, args.reps, runs["optuna-dashboard"]
                )
            browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 trials only")
    parser.add_argument("--reps", type=int, default=3, help="timed visits after the first")
    parser.add_argument("--skip-optuna", action="store_true", help="asktell only")
    parser.add_argument(
        "--optuna-max",
        type=int,
        default=max(SIZES),
        help="optuna-dashboard up to this many trials (adding 50,000 to Optuna takes minutes)",
    )
    args = parser.parse_args(argv)
    bench = Bench("dashboard", args.quick, CODE_PATHS)
    bench.header(f"Chromium (Playwright), optuna-dashboard {package_version('optuna-dashboard')}")
    interrupt_on_sigterm()
    runs: dict[str, dict[int, Visits]] = {}
    try:
        run(args, bench, runs)
    except KeyboardInterrupt:
        log("interrupted; reporting what finished")
    print()
    print_table(runs)
    out: dict[str, Any] = {"code_version": bench.version, "reps": args.reps, **figures(runs)}
    print()
    goals = targets(out)
    print_target_table(goals.values())
    out.update({f"target_{key}_met": goal[3] for key, goal in goals.items()})
    bench.report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
