"""Ask/tell throughput of a real asktell server, with Optuna 5 as the peer.

Starts ``asktell serve`` (one uvicorn worker unless ``--workers``) on a fresh SQLite file and on
a fresh PostgreSQL database, and drives it with the real ``client.Client``: a random-engine study
over 10 float parameters, with 1 client and with 8 concurrent clients (threads, one ``Client``
each, all on one study). Each pair is one tell-and-ask request (the tell asks for the client's
next trial; a plain ``ask(1)`` only for a client's first trial), as the client's ``optimize``
loop does; one extra SQLite run with 1 client does ``ask(1)`` then ``tell`` (two round trips,
key ``asktell_sqlite_separate_*``) for comparison. Then runs Optuna's ask/tell loop with
``RandomSampler`` on RDBStorage (SQLite file, PostgreSQL) and JournalStorage (file), 1 client, at
the same trial count. Prints a table, then one line of JSON.

    .venv/bin/python -m bench.service_throughput            # full: 1000 pairs, 1600 with 8
    .venv/bin/python -m bench.service_throughput --quick    # small counts, under a minute

PostgreSQL: ``$ASKTELL_BENCH_PG`` (default postgresql://postgres@127.0.0.1:5432/test) is the
admin URL; scratch databases are created beside it and dropped at the end, even on error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg

from bench.harness import interrupt_on_sigterm, log
from bench.servers import free_port, stop_server, wait_healthy
from bench.throughput_loop import objective, work
from bench.version import code_version
from client import Client

#: The files whose changes make the reported code version "+dirty".
CODE_PATHS = ("service", "engines", "client")

PG_ADMIN_URL = os.environ.get("ASKTELL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
DIM = 10
PARAMS = [{"type": "float", "name": f"x{i}", "low": 0.0, "high": 1.0} for i in range(DIM)]

# Optuna's trials per second on this machine (SQLite and journal storages), for context.
OPTUNA_REFERENCE = {"sqlite": 22.0, "journal": 182.0}


# --- measurements -------------------------------------------------------------------------


@dataclass
class Run:
    """One configuration's result: pairs per second and per-request latencies (seconds)."""

    label: str
    pairs: int = 0
    seconds: float = 0.0
    ask: list[float] = field(default_factory=list)
    tell: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.pairs / self.seconds if self.seconds else 0.0

    def pct(self, which: str, q: float) -> float:
        data = self.ask if which == "ask" else self.tell
        return float(np.percentile(np.array(data) * 1000.0, q)) if data else float("nan")

    def summary(self, key: str, suffix: str = "") -> dict[str, Any]:
        """JSON fields named ``{key}_{metric}{suffix}``, e.g. asktell_pg_pairs_per_s_8clients."""
        return {
            f"{key}_pairs_per_s{suffix}": round(self.rate, 1),
            f"{key}_pairs{suffix}": self.pairs,
            f"{key}_seconds{suffix}": round(self.seconds, 3),
            f"{key}_ask_p50_ms{suffix}": round(self.pct("ask", 50), 2),
            f"{key}_ask_p99_ms{suffix}": round(self.pct("ask", 99), 2),
            f"{key}_tell_p50_ms{suffix}": round(self.pct("tell", 50), 2),
            f"{key}_tell_p99_ms{suffix}": round(self.pct("tell", 99), 2),
        }


class CountingTransport(httpx.HTTPTransport):
    """Counts every non-2xx response, including those the client retries (429/503)."""

    def __init__(self, statuses: Counter[int], lock: threading.Lock) -> None:
        super().__init__()
        self.statuses, self.lock = statuses, lock

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if response.status_code >= 300:
            with self.lock:
                self.statuses[response.status_code] += 1
        return response


# --- resources: temp dir, scratch PostgreSQL databases, servers ---------------------------


class Resources:
    """Everything to undo at the end: server processes, scratch databases, the temp dir."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="asktell-bench-"))
        self.databases: list[str] = []
        self.servers: list[subprocess.Popen[bytes]] = []

    def pg_database(self, tag: str) -> str:
        """Create a fresh database; return its URL (plain ``postgresql://``)."""
        name = f"asktell_bench_{tag}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"

    def close(self) -> None:
        for proc in self.servers:
            stop_server(proc)
        self.servers.clear()
        if self.databases:
            try:
                with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
                    for name in self.databases:
                        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.Error as exc:
                log(f"warning: could not drop {self.databases}: {exc}")
            self.databases.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)


def asktell_bin() -> str:
    exe = Path(sys.executable).parent / "asktell"
    return str(exe) if exe.exists() else "asktell"


@contextmanager
def server(res: Resources, db_url: str, tag: str, workers: int) -> Iterator[str]:
    """Run ``asktell serve`` on ``db_url``; yield its base URL once /healthz answers."""
    # The rate limit off: this measures what the server can answer, and 8 clients from one
    # address ask faster than the default limit per client address.
    # The suggestion pool is on for bench.latency's pool arm (random studies never pool).
    env = {
        **os.environ,
        "ASKTELL_DATABASE_URL": db_url,
        "ASKTELL_RATE_LIMIT": "0",
        "ASKTELL_SUGGESTION_POOL": "1",
    }
    if not db_url.startswith("sqlite"):
        subprocess.run(
            [asktell_bin(), "db", "upgrade"], env=env, check=True, capture_output=True, cwd=res.tmp
        )
    port = free_port()
    log_path = res.tmp / f"server-{tag}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [asktell_bin(), "serve", "--port", str(port), "--workers", str(workers)],
            env=env,
            cwd=res.tmp,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    res.servers.append(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, log_path)
        yield base
    finally:
        stop_server(proc)
        res.servers.remove(proc)


# --- asktell ------------------------------------------------------------------------------


def asktell_run(
    base: str, label: str, clients: int, pairs: int, warmup: int, tell_ask: bool = True
) -> Run:
    """``pairs`` pairs on one new study, shared by ``clients`` threads: with ``tell_ask``, each
    tell asks for the next trial in the same request (one round trip per pair, a plain ask only
    for a client's first trial); otherwise ask(1) then tell, two round trips."""
    run = Run(label)
    lock = threading.Lock()
    with Client(base) as setup:
        study_id = setup.create_study(f"bench-{uuid.uuid4().hex[:8]}", PARAMS, seed=0).id

    def new_client() -> Client:
        return Client(base, transport=CountingTransport(run.statuses, lock))

    # Warm-up on the same study (connections, caches, the engine import), not timed.
    with new_client() as c:
        study = c.get_study(study_id)
        for _ in range(warmup):
            (t,) = study.ask(1)
            study.tell(t.number, objective(t.params))
    run.statuses.clear()

    remaining = [pairs]
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)

    def take() -> bool:
        with lock:
            if remaining[0] == 0:
                return False
            remaining[0] -= 1
            return True

    def worker() -> None:
        ask_lat: list[float] = []
        tell_lat: list[float] = []
        try:
            with new_client() as c:
                study = c.get_study(study_id)
                start.wait()
                work(study, take, tell_ask, ask_lat, tell_lat, lambda: bool(errors))
        except BaseException as exc:
            errors.append(exc)
            start.abort()
        finally:
            with lock:
                run.ask += ask_lat
                run.tell += tell_lat

    # Daemon threads: an interrupted run must not wait for them to give up on a stopped server.
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for th in threads:
        th.start()
    with suppress(threading.BrokenBarrierError):  # a worker failed before the start
        start.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    run.seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    run.pairs = len(run.tell)
    with Client(base) as check:
        counts = check.get_study(study_id).info.trial_counts
    if counts.get("completed", 0) != pairs + warmup:
        raise RuntimeError(f"{label}: expected {pairs + warmup} completed trials, got {counts}")
    return run


# --- optuna -------------------------------------------------------------------------------


def optuna_run(label: str, make_storage: Callable[[], Any], pairs: int, warmup: int) -> Run:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = make_storage()
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))

    def one() -> tuple[float, float]:
        t0 = time.perf_counter()
        trial = study.ask()
        params = {p["name"]: trial.suggest_float(p["name"], 0.0, 1.0) for p in PARAMS}
        t1 = time.perf_counter()
        study.tell(trial, objective(params))
        return t1 - t0, time.perf_counter() - t1

    for _ in range(warmup):
        one()
    run = Run(label, pairs=pairs)
    t0 = time.perf_counter()
    for _ in range(pairs):
        a, t = one()
        run.ask.append(a)
        run.tell.append(t)
    run.seconds = time.perf_counter() - t0
    if hasattr(storage, "engine"):
        storage.engine.dispose()
    return run


def optuna_runs(res: Resources, pairs: int, warmup: int) -> dict[str, Run]:
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    pg = res.pg_database("optuna").replace("postgresql://", "postgresql+psycopg://", 1)
    runs = {}
    specs: list[tuple[str, str, Callable[[], Any]]] = [
        ("optuna_sqlite", "Optuna RDB SQLite", lambda: RDBStorage(f"sqlite:///{res.tmp}/o.db")),
        ("optuna_pg", "Optuna RDB PostgreSQL", lambda: RDBStorage(pg)),
        (
            "optuna_journal",
            "Optuna Journal file",
            lambda: JournalStorage(JournalFileBackend(str(res.tmp / "optuna.journal"))),
        ),
    ]
    for key, label, make in specs:
        log(f"  running {label} ...")
        runs[key] = optuna_run(label, make, pairs, warmup)
    return runs


# --- report -------------------------------------------------------------------------------


def ratio(a: Run | None, b: Run | None) -> float | None:
    return round(a.rate / b.rate, 2) if a and b and b.rate else None


def targets(runs: dict[str, Run]) -> dict[str, dict[str, Any]]:
    def check(value: float | None, target: float, below: bool = False) -> dict[str, Any]:
        met = None if value is None else (value < target if below else value >= target)
        return {"value": value, "target": f"{'<' if below else '>='} {target}", "met": met}

    s1, p1 = runs["asktell_sqlite"], runs["asktell_pg"]
    plain = runs.get("asktell_sqlite_separate", s1)  # where plain asks were measured
    s8, p8 = runs["asktell_sqlite_8clients"], runs["asktell_pg_8clients"]
    return {
        "sqlite_vs_optuna_rdb_sqlite": check(ratio(s1, runs.get("optuna_sqlite")), 10.0),
        "sqlite_vs_optuna_journal": check(ratio(s1, runs.get("optuna_journal")), 1.5),
        "pg_vs_optuna_rdb_pg": check(ratio(p1, runs.get("optuna_pg")), 5.0),
        "ask_p99_ms_sqlite_1client": check(round(plain.pct("ask", 99), 2), 25.0, below=True),
        "sqlite_8clients_vs_1client": check(ratio(s8, s1), 1.0),
        "pg_8clients_vs_1client": check(ratio(p8, p1), 1.0),
    }


def print_table(runs: dict[str, Run], goals: dict[str, dict[str, Any]]) -> None:
    head = (
        f"{'configuration':<34} {'pairs':>6} {'secs':>7} {'pairs/s':>8} "
        f"{'ask p50':>8} {'ask p99':>8} {'tell p50':>8} {'tell p99':>8}  non-2xx"
    )
    print(head)
    print("-" * len(head))
    for run in runs.values():
        print(
            f"{run.label:<34} {run.pairs:>6} {run.seconds:>7.2f} {run.rate:>8.1f} "
            f"{run.pct('ask', 50):>8.2f} {run.pct('ask', 99):>8.2f} "
            f"{run.pct('tell', 50):>8.2f} {run.pct('tell', 99):>8.2f}  "
            f"{dict(run.statuses) or '-'}"
        )
    print(
        "(latencies in ms, measured at the client; Optuna: ask = ask + 10 suggest_float; "
        "asktell with tell-and-ask: ask = a client's first plain ask only, tell = tell-and-ask)"
    )
    print()
    print(f"{'target':<32} {'value':>8} {'goal':>8}  result")
    for name, g in goals.items():
        value = "n/a" if g["value"] is None else f"{g['value']:.2f}"
        result = {True: "MET", False: "MISSED", None: "not measured"}[g["met"]]
        print(f"{name:<32} {value:>8} {g['target']:>8}  {result}")


ORDER = [
    "asktell_sqlite_separate",
    "asktell_sqlite",
    "asktell_sqlite_8clients",
    "asktell_pg",
    "asktell_pg_8clients",
    "optuna_sqlite",
    "optuna_journal",
    "optuna_pg",
]


@dataclass(frozen=True)
class Counts:
    """Pairs with 1 client, pairs with ``clients`` clients, warm-up pairs, server workers."""

    pairs: int
    pairs_n: int
    clients: int
    warmup: int
    workers: int


def run_all(res: Resources, n: Counts, skip_optuna: bool) -> dict[str, Run]:
    """asktell on SQLite and PostgreSQL, 1 and ``n.clients`` clients, then Optuna's storages."""
    runs: dict[str, Run] = {}
    backends = [
        ("sqlite", "SQLite", lambda: f"sqlite:///{res.tmp / 'asktell.db'}"),
        ("pg", "PostgreSQL", lambda: res.pg_database("asktell")),
    ]
    for key, name, make_url in backends:
        with server(res, make_url(), key, n.workers) as base:
            log(f"  running asktell {name} ...")
            if key == "sqlite":  # the two-round-trip pair, for comparison
                runs["asktell_sqlite_separate"] = asktell_run(
                    base, f"asktell {name}, 1 client, ask+tell", 1, n.pairs, n.warmup, False
                )
            one = asktell_run(base, f"asktell {name}, 1 client", 1, n.pairs, n.warmup)
            runs[f"asktell_{key}"] = one
            runs[f"asktell_{key}_8clients"] = asktell_run(
                base, f"asktell {name}, {n.clients} clients", n.clients, n.pairs_n, n.warmup
            )
    if not skip_optuna:
        runs.update(optuna_runs(res, n.pairs, n.warmup))
    return {k: runs[k] for k in ORDER if k in runs}


def json_line(
    version: str, n: Counts, runs: dict[str, Run], goals: dict[str, dict[str, Any]], wall: float
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "code_version": version,
        "uvicorn_workers": n.workers,
        "clients_concurrent": n.clients,
        "warmup_pairs": n.warmup,
        "pairs_1client": n.pairs,
        "pairs_concurrent": n.pairs_n,
        "mode": "tell_and_ask",
        "asktell_ask_p99_ms": round(
            runs.get("asktell_sqlite_separate", runs["asktell_sqlite"]).pct("ask", 99), 2
        ),
    }
    for key in ORDER:
        base, _, many = key.partition("_8")
        suffix = f"_8{many}" if many else ""
        if key in runs:
            out.update(runs[key].summary(base, suffix))
            out[f"{base}_non_2xx{suffix}"] = dict(runs[key].statuses)
        else:
            out[f"{base}_pairs_per_s{suffix}"] = None
    for name, g in goals.items():
        out[f"ratio_{name}"] = g["value"]
        out[f"target_{name}_met"] = g["met"]
    out["optuna_reference_pairs_per_s"] = OPTUNA_REFERENCE
    out["wall_s"] = round(wall, 1)
    out["load_average_end"] = round(os.getloadavg()[0], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, help="pairs with 1 client (default 1000)")
    parser.add_argument("--pairs-concurrent", type=int, help="pairs with N clients (default 1600)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--warmup", type=int, help="untimed pairs first (default 20)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers (default 1)")
    parser.add_argument("--quick", action="store_true", help="small counts, under a minute")
    parser.add_argument("--skip-optuna", action="store_true", help="asktell only")
    args = parser.parse_args(argv)
    n = Counts(
        pairs=args.pairs or (100 if args.quick else 1000),
        pairs_n=args.pairs_concurrent or (160 if args.quick else 1600),
        clients=args.clients,
        warmup=args.warmup if args.warmup is not None else (5 if args.quick else 20),
        workers=args.workers,
    )
    wall = time.perf_counter()
    # SIGTERM unwinds like Ctrl-C, so the finally below stops servers and drops databases.
    interrupt_on_sigterm()
    res = Resources()
    version = code_version(*CODE_PATHS)
    print(
        f"asktell {version}; server: `asktell serve --workers {n.workers}` (uvicorn, "
        f"{n.workers} worker process{'es' if n.workers > 1 else ''}); random engine, "
        f"{DIM} float params; {n.pairs} pairs with 1 client, {n.pairs_n} with {n.clients} "
        f"clients, {n.warmup} warm-up pairs each; Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    try:
        runs = run_all(res, n, args.skip_optuna)
    except KeyboardInterrupt:
        log("interrupted; cleaning up servers, temp files, scratch databases")
        return 130
    finally:
        res.close()
    goals = targets(runs)
    wall = time.perf_counter() - wall
    print()
    print_table(runs, goals)
    print(f"\nwall time {wall:.1f} s; load average at the end {os.getloadavg()[0]:.2f}")
    print(json.dumps(json_line(version, n, runs, goals, wall)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
