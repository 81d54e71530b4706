"""The studies bench/dashboard.py opens: the same finished trials as an asktell export (imported
through ``POST /v1/studies/import``) and as an Optuna study in RDB SQLite (through Optuna's
storage API), and the two servers that show them, each in a subprocess."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.servers import asktell_serve, free_port, server_process, wait_healthy

DIM = 4
LOW, HIGH = -5.0, 5.0
#: One trial in a hundred fails, so the history marks failures as it would in a real study.
FAILED_SHARE = 0.01
#: The trials start a second apart from here; each takes half a second.
START = datetime(2026, 1, 1, tzinfo=UTC)
#: A 50,000-trial export is about 12 MB; the server's default body limit is 1 MB.
IMPORT_BODY_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Trials:
    """``n`` finished trials: parameters ``X`` (n x DIM), the sphere's value ``y`` plus noise,
    and which of them ``failed`` (no value)."""

    X: np.ndarray
    y: np.ndarray
    failed: np.ndarray

    @property
    def n(self) -> int:
        return len(self.y)

    def part(self, start: int, stop: int) -> Trials:
        """Trials ``start`` to ``stop`` (the first ``stop`` of them when ``start`` is 0)."""
        return Trials(self.X[start:stop], self.y[start:stop], self.failed[start:stop])

    def times(self, i: int) -> tuple[datetime, datetime]:
        started = START + timedelta(seconds=i)
        return started, started + timedelta(seconds=0.5)


def make_trials(n: int, seed: int = 0) -> Trials:
    rng = np.random.default_rng(seed)
    X = rng.uniform(LOW, HIGH, (n, DIM))
    y = (X**2).sum(axis=1) + rng.normal(0.0, 0.5, n)
    return Trials(X, y, rng.random(n) < FAILED_SHARE)


def param_names() -> list[str]:
    return [f"x{j}" for j in range(DIM)]


# --- asktell ------------------------------------------------------------------------------


def asktell_export(name: str, trials: Trials, first: int = 0) -> dict[str, Any]:
    """A StudyExport (``asktell.study/v1``) of ``trials`` numbered from ``first``."""
    names = param_names()
    rows = []
    for i in range(trials.n):
        started, completed = trials.times(first + i)
        row: dict[str, Any] = {
            "number": first + i,
            "params": dict(zip(names, trials.X[i].tolist(), strict=True)),
            "created_at": started.isoformat(),
            "started_at": started.isoformat(),
            "completed_at": completed.isoformat(),
        }
        if trials.failed[i]:
            row.update(state="failed", reason="bench: a failed trial")
        else:
            row.update(state="completed", values={"value": float(trials.y[i])})
        rows.append(row)
    study = {
        "name": name,
        "parameters": [{"type": "float", "name": p, "low": LOW, "high": HIGH} for p in names],
        "objectives": [{"name": "value", "goal": "minimize"}],
    }
    return {"format": "asktell.study/v1", "study": study, "trials": rows}


def import_asktell(base: str, name: str, trials: Trials) -> int:
    """Import ``trials`` as a new study; its id."""
    with httpx.Client(base_url=base, timeout=1800) as http:
        r = http.post("/v1/studies/import", json=asktell_export(name, trials))
        r.raise_for_status()
        study = r.json()
    counts = study["trial_counts"]
    if sum(counts.values()) != trials.n:
        raise RuntimeError(f"imported {counts}, expected {trials.n} trials")
    return int(study["id"])


@contextmanager
def asktell_server(tmp: Path) -> Iterator[str]:
    """``asktell serve`` (one uvicorn worker) on a fresh SQLite file in ``tmp``."""
    with asktell_serve(tmp, ASKTELL_MAX_BODY_BYTES=str(IMPORT_BODY_BYTES)) as base:
        yield base


# --- optuna -------------------------------------------------------------------------------


def add_optuna_trials(storage_url: str, trials: Trials, first: int) -> int:
    """Add ``trials`` (numbered from ``first``) to the study ``bench`` of ``storage_url``,
    creating it when ``first`` is 0; the study's id."""
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import FrozenTrial, TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=storage_url, study_name="bench", direction="minimize", load_if_exists=first > 0
    )
    dist = {p: FloatDistribution(LOW, HIGH) for p in param_names()}
    frozen = []
    for i in range(trials.n):
        started, completed = trials.times(first + i)
        failed = bool(trials.failed[i])
        frozen.append(
            FrozenTrial(
                number=first + i,
                trial_id=first + i,
                state=TrialState.FAIL if failed else TrialState.COMPLETE,
                value=None if failed else float(trials.y[i]),
                datetime_start=started.replace(tzinfo=None),
                datetime_complete=completed.replace(tzinfo=None),
                params=dict(zip(param_names(), trials.X[i].tolist(), strict=True)),
                distributions=dist,
                user_attrs={},
                system_attrs={},
                intermediate_values={},
            )
        )
    study.add_trials(frozen)
    if len(study.get_trials(deepcopy=False)) != first + trials.n:
        raise RuntimeError("optuna: the study does not hold the trials added")
    return int(study._study_id)


@contextmanager
def optuna_dashboard_server(tmp: Path, storage_url: str) -> Iterator[str]:
    """``optuna-dashboard STORAGE`` (its default server) on ``storage_url``."""
    exe = Path(sys.executable).parent / "optuna-dashboard"
    port = free_port()
    argv = [str(exe), storage_url, "--host", "127.0.0.1", "--port", str(port)]
    with server_process(argv, dict(os.environ), tmp / "optuna-dashboard.log") as proc:
        base = f"http://127.0.0.1:{port}"
        # optuna-dashboard has no /healthz
        wait_healthy(proc, base, tmp / "optuna-dashboard.log", "/api/meta")
        yield base
