"""Server settings, read once from ``ASKTELL_*`` environment variables."""

from __future__ import annotations

import ipaddress
import os
from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Requests per second per API key on a server that requires keys, unless ``rate_limit`` says.
DEFAULT_RATE_LIMIT = 50.0


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ASKTELL_")

    #: SQLAlchemy URL. The default is an embedded SQLite file in the working directory.
    #: ``postgresql://...`` URLs are rewritten to the psycopg 3 driver.
    database_url: str = "sqlite:///./asktell.db"
    #: Seconds between passes of the lease reaper.
    reaper_interval: float = 5.0
    #: Largest request body accepted, in bytes.
    max_body_bytes: int = 1024 * 1024
    #: Connection pool size per process (PostgreSQL).
    pool_size: int = 10
    #: Memory for the per-process cache of studies' completed-trial arrays, in bytes; least
    #: recently asked studies are evicted first. 0 turns it off (every ask reads all trials).
    history_cache_bytes: int = 512 * 1024 * 1024
    #: Largest dataset upload (``POST /v1/datasets``), in bytes and in data rows.
    max_dataset_bytes: int = 64 * 1024 * 1024
    max_dataset_rows: int = 1_000_000
    #: Largest artifact (``PUT /v1/artifacts/...``: a checkpoint, a model), in bytes.
    max_artifact_bytes: int = 1024 * 1024 * 1024
    #: The artifact store's folder. Default: beside an SQLite database file (``asktell.db`` ->
    #: ``asktell-artifacts/``), else ``./asktell-artifacts``. Replicas must share it.
    artifacts_dir: str | None = None
    #: Whether this process runs tuning jobs (takes job leases and starts their workers).
    run_jobs: bool = True
    #: The URL the job workers this process starts use to reach the API (``asktell serve``
    #: sets it from its host and port).
    self_url: str = "http://127.0.0.1:8000"
    #: Seconds a job's lease holds without a heartbeat of the process running it; after that
    #: another process (or this one, restarted) takes the job over.
    job_lease_seconds: float = 15.0
    #: Worker processes per job when the job does not say (``parallelism``): default one per core.
    job_workers: int | None = None
    #: Where a job's workers run when the job does not say: ``local`` processes, or ``ray``
    #: tasks (the ``asktell[ray]`` extra) on the cluster at ``ray_address``.
    executor: Literal["local", "ray"] = "local"
    #: The Ray cluster's address (``ray://host:10001`` or ``host:6379``); default: a local Ray
    #: instance this server starts with its first Ray job.
    ray_address: str | None = None
    #: Asks that may wait on one study while another ask of it runs; the next one is answered
    #: 503 ``study_busy`` with ``Retry-After``.
    ask_queue_per_study: int = 16
    #: Threads that run engine asks at once, apart from the pool that serves other requests.
    ask_threads: int = 8
    #: Engine processes of this server process: asks on studies whose engine reads
    #: observations (every engine but ``random``) compute there, so a long fit slows no other
    #: study. Default: one per two cores, at least one. 0 computes in the ask's thread (no time
    #: budget then).
    engine_processes: int = Field(default_factory=lambda: max(1, (os.cpu_count() or 1) // 2), ge=0)
    #: Seconds an engine call of one ask may take, waiting for a free engine process included;
    #: past it the call is abandoned (its process killed and replaced) and the ask is answered
    #: from quasi-random (Sobol) points, its trials' details saying ``"fallback":
    #: "time_budget"``. A study's ``ask_time_budget`` can lower it for that study.
    ask_time_budget: float = Field(default=60.0, gt=0)
    #: Whether this process keeps suggestion pools of model-based studies: refills them in
    #: the background after tells and asks, and serves asks from them (``max_staleness``).
    #: Off (every ask runs the engine, as a study with ``max_staleness`` 0) until the pool
    #: meets its targets: its p99 ask (an ask that finds the pool empty waits for the refill,
    #: then the engine) is worse than without it, and early pom batches cost quality.
    suggestion_pool: bool = False
    #: ``json``: every log line one JSON object (time, level, logger, message, request_id).
    log_format: Literal["text", "json"] = "text"
    #: Whether requests need an API key (``Authorization: Bearer``): ``auto`` requires one
    #: unless the server listens on loopback only (``host``), ``required`` always, ``off`` never.
    auth: Literal["auto", "required", "off"] = "auto"
    #: The address the server listens on (``asktell serve`` sets it from ``--host``); unknown
    #: (None, say under ``uvicorn service.main:app``) counts as beyond loopback.
    host: str | None = None
    #: Largest request line and headers, in bytes, and most header lines, of one request;
    #: over either, 431 ``headers_too_large``. ``asktell serve``'s HTTP protocol stops reading
    #: at the byte limit (``service.transport``); the app checks both (any server).
    max_header_bytes: int = Field(default=16 * 1024, gt=0)
    max_headers: int = Field(default=100, gt=0)
    #: Seconds a client has to send a request's line and headers, from the connection's open
    #: or the request's first byte; then 408 ``request_timeout`` and the connection is closed
    #: (``asktell serve``'s HTTP protocol).
    header_timeout: float = Field(default=10.0, gt=0)
    #: Seconds a request body may go without a byte arriving; then 408 ``request_timeout``.
    body_timeout: float = Field(default=20.0, gt=0)
    #: Seconds an idle keep-alive connection stays open between requests (``asktell serve``).
    keep_alive_timeout: int = Field(default=5, ge=1)
    #: Requests per second per API key (per client address when auth is off), through a token
    #: bucket holding ``rate_burst``; over it, 429 ``rate_limited`` with ``Retry-After``. Each
    #: server process counts its own. 0 turns the limit off. Unset: ``DEFAULT_RATE_LIMIT`` when
    #: keys are required, off when auth is off (a loopback-only server, whose one user's tight
    #: ask-tell loop would otherwise be slowed).
    rate_limit: float | None = Field(default=None, ge=0)
    rate_burst: int = Field(default=200, ge=1)
    #: Origins (comma-separated, e.g. ``https://a.example,https://b.example``) whose pages may
    #: call the API from a browser (CORS); empty (the default) allows none.
    cors_origins: str = ""

    @field_validator("database_url")
    @classmethod
    def _driver(cls, url: str) -> str:
        for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def effective_rate_limit(self) -> float:
        """Requests per second per caller, 0 for none (see ``rate_limit``)."""
        if self.rate_limit is not None:
            return self.rate_limit
        return DEFAULT_RATE_LIMIT if self.auth_required else 0.0

    @property
    def auth_required(self) -> bool:
        if self.auth == "auto":
            return not is_loopback(self.host)
        return self.auth == "required"

    @property
    def cors_origin_list(self) -> list[str]:
        return [origin.strip() for origin in self.cors_origins.split(",") if origin.strip()]


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@lru_cache
def get_settings() -> Settings:
    return Settings()
