"""Part 3 of the turbo_enn bench: the service's ask on a study of 50,000 trials beside the raw
engine (``bench/turbo_enn.py`` describes it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from bench._ennbo_run import HIGH, LOW, objective, timing_data
from bench.harness import EngineMethod, history_of, log
from bench.servers import free_port, server_process, wait_healthy
from bench.turbo_enn_runs import ENGINE, make_problem

if TYPE_CHECKING:
    from bench.turbo_enn import Settings

SERVICE_N = 50_000
SERVICE_Q = 4
SERVICE_ROUNDS = 5


@contextlib.contextmanager
def uvicorn_server(tmp: Path, db_url: str) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKTELL_")}
    env.update(PYTHONUNBUFFERED="1", ASKTELL_DATABASE_URL=db_url)
    env.update(ASKTELL_HOST="127.0.0.1")  # what `asktell serve` tells the app: auth off
    argv = [sys.executable, "-m", "uvicorn", "service.main:app", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--log-level", "warning"]
    log_path = tmp / f"server-{port}.log"
    with server_process(argv, env, log_path) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base, log_path)
        yield base


def fill_study(db_url: str, study_id: int, U: np.ndarray, y: np.ndarray) -> None:
    """Insert ``len(U)`` completed trials as ``n`` tells would leave them, in number order:
    each tell bumps the study's revision and (since migration 0003) stores the new revision in
    the trial's ``completed_seq``, the history order of ``service.history``."""
    from sqlalchemy import create_engine, select, update

    from service.db.models import Study, Trial

    trials_t, studies_t = Trial.__table__, Study.__table__
    has_seq = "completed_seq" in trials_t.c
    n, d = U.shape
    names = [f"x{i}" for i in range(d)]
    Z = LOW + (HIGH - LOW) * U
    now = datetime.now(UTC)
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            revision = int(
                conn.execute(
                    select(studies_t.c.revision).where(studies_t.c.id == study_id)
                ).scalar_one()
            )
            for start in range(0, n, 5000):
                rows = []
                for i in range(start, min(n, start + 5000)):
                    row = {
                        "study_id": study_id,
                        "number": i,
                        "state": "completed",
                        "params": dict(zip(names, Z[i].tolist(), strict=True)),
                        "x": np.ascontiguousarray(U[i], dtype=np.float64).tobytes(),
                        "values": {"value": float(y[i])},
                        "constraints": None,
                        "feasible": True,
                        "reason": None,
                        "worker_id": None,
                        "lease_expires_at": None,
                        "retries": 0,
                        "details": {},
                        "metadata": {},
                        "created_at": now,
                        "started_at": now,
                        "completed_at": now,
                    }
                    if has_seq:
                        row["completed_seq"] = revision + 1 + i
                    rows.append(row)
                conn.execute(trials_t.insert(), rows)
            conn.execute(
                update(studies_t)
                .where(studies_t.c.id == study_id)
                .values(next_trial_number=n, revision=revision + n, updated_at=now)
            )
    finally:
        engine.dispose()


def service_one(tmp: Path, d: int, n: int) -> dict[str, Any]:
    db_url = f"sqlite:///{tmp / f'asktell-d{d}.db'}"
    U, y = timing_data(n, d, seed=7)
    out: dict[str, Any] = {"d": d, "n": n, "q": SERVICE_Q}
    with uvicorn_server(tmp, db_url) as base, httpx.Client(base_url=base, timeout=600) as http:
        params = [{"type": "float", "name": f"x{i}", "low": LOW, "high": HIGH} for i in range(d)]
        body = {
            "name": f"bench-turbo-enn-d{d}",
            "parameters": params,
            "engine": {"name": ENGINE, "options": {}},
            "seed": 0,
        }
        r = http.post("/v1/studies", json=body)
        r.raise_for_status()
        study_id = int(r.json()["id"])
        t0 = time.perf_counter()
        fill_study(db_url, study_id, U, y)
        out["fill_s"] = time.perf_counter() - t0
        counts = http.get(f"/v1/studies/{study_id}").raise_for_status().json()["trial_counts"]
        if counts.get("completed") != n:
            raise RuntimeError(f"the service sees {counts}, expected {n} completed")

        def ask() -> tuple[float, list[dict[str, Any]]]:
            t = time.perf_counter()
            resp = http.post(
                f"/v1/studies/{study_id}/ask", json={"count": SERVICE_Q, "worker_id": "bench"}
            )
            elapsed = time.perf_counter() - t
            resp.raise_for_status()
            trials = resp.json()["trials"]
            if len(trials) != SERVICE_Q:
                raise RuntimeError(f"ask returned {len(trials)} trials")
            return elapsed, trials

        def tell(trials: list[dict[str, Any]]) -> None:
            for t in trials:
                z = np.array([[t["params"][f"x{i}"] for i in range(d)]])
                value = float(objective("ackley", (z - LOW) / (HIGH - LOW))[0])
                http.post(
                    f"/v1/studies/{study_id}/trials/{t['number']}/tell",
                    json={"values": {"value": value}},
                ).raise_for_status()

        cold, trials = ask()
        warm = []
        sources = {str(t.get("details", {}).get("source")) for t in trials}
        for _ in range(SERVICE_ROUNDS):
            tell(trials)
            elapsed, trials = ask()
            warm.append(elapsed)
            sources |= {str(t.get("details", {}).get("source")) for t in trials}
    out.update(service_cold_s=cold, service_warm_s=statistics.median(warm), service_all_s=warm)
    out["sources"] = sorted(sources)

    # The raw engine, same data, same q, same sequence.
    engine = EngineMethod(ENGINE, {}, make_problem(d), np.random.default_rng(0))
    X, Y = U, y
    t0 = time.perf_counter()
    proposal = engine.suggest(history_of(X, Y), SERVICE_Q)
    raw_cold = time.perf_counter() - t0
    raw_warm = []
    for _ in range(SERVICE_ROUNDS):
        X = np.vstack([X, proposal.X])
        Y = np.concatenate([Y, objective("ackley", proposal.X)])
        t0 = time.perf_counter()
        proposal = engine.suggest(history_of(X, Y), SERVICE_Q)
        raw_warm.append(time.perf_counter() - t0)
    out.update(raw_cold_s=raw_cold, raw_warm_s=statistics.median(raw_warm), raw_all_s=raw_warm)
    out["ratio_warm"] = out["service_warm_s"] / out["raw_warm_s"]
    out["ratio_cold"] = out["service_cold_s"] / out["raw_cold_s"]
    return out


def service(s: Settings) -> dict[int, dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="asktell-bench-enn-"))
    try:
        out = {}
        for d in s.service_dims:
            out[d] = service_one(tmp, d, s.service_n)
            r = out[d]
            log(
                f"  service d={d} N={s.service_n}: fill {r['fill_s']:.1f} s, cold ask "
                f"{r['service_cold_s']:.3f} s, warm {r['service_warm_s']:.3f} s; raw "
                f"{r['raw_cold_s']:.3f} / {r['raw_warm_s']:.3f} s"
            )
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
