"""Operations: a request id on every response and log record, JSON logs on request, and the
Prometheus metrics of ``/metrics``.

Metrics are per process: with several uvicorn workers, each answers ``/metrics`` with its own
counts (scrape each, or run one worker per container)."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import text
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from service.admission import AskAdmission
    from service.store import Store

REQUEST_ID_HEADER = "X-Request-ID"
#: An incoming request id is kept when it is this safe; otherwise the server makes one.
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

#: The registry of this process's metrics (not the global one: apps made in tests do not
#: collide).
REGISTRY = CollectorRegistry()
REQUESTS = Counter(
    "asktell_requests", "HTTP requests answered", ["method", "route", "status"], registry=REGISTRY
)
ASK_SECONDS = Histogram(
    "asktell_ask_seconds", "Seconds of an ask, queueing excluded", ["engine"], registry=REGISTRY
)
ENGINE_SECONDS = Histogram(
    "asktell_engine_seconds",
    "Seconds the engine computed for one ask",
    ["engine"],
    registry=REGISTRY,
)
ENGINE_FALLBACKS = Counter(
    "asktell_engine_fallbacks",
    "Engine calls abandoned (time_budget, engine_process_exited) and answered quasi-randomly",
    ["engine", "reason"],
    registry=REGISTRY,
)
ASKS_DROPPED = Counter(
    "asktell_asks_dropped", "Waiting asks dropped because their client left", registry=REGISTRY
)
ASKS_BUSY = Counter(
    "asktell_asks_busy",
    "Asks answered 503 study_busy (the study's queue was full)",
    registry=REGISTRY,
)


class ServerState(Collector):
    """Gauges read at scrape time: ``asktell_trials{state}`` (the stored trials of every
    study) and ``asktell_ask_queue_depth`` (asks of this process waiting for their study)."""

    def __init__(self, store: Store, admission: AskAdmission) -> None:
        self.store, self.admission = store, admission

    def collect(self) -> Iterator[GaugeMetricFamily]:
        trials = GaugeMetricFamily("asktell_trials", "Stored trials by state", labels=["state"])
        for state, count in self.store.db.read(lambda c: c.execute(_TRIALS_BY_STATE).all()):
            trials.add_metric([str(state)], int(count))
        yield trials
        yield GaugeMetricFamily(
            "asktell_ask_queue_depth",
            "Asks of this process waiting for their study",
            value=self.admission.total_waiting(),
        )


_TRIALS_BY_STATE = text("SELECT state, COUNT(*) FROM trials GROUP BY state ORDER BY state")


def metrics_text(state: CollectorRegistry) -> bytes:
    """The Prometheus text of this process's metrics and of ``state`` (its app's gauges)."""
    return generate_latest(REGISTRY) + generate_latest(state)


def state_registry(store: Store, admission: AskAdmission) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ServerState(store, admission))
    return registry


class RequestContext:
    """Give each request an id (its valid ``X-Request-ID``, else a new one), set it for the
    log records made while it runs, answer it in ``X-Request-ID``, and count the request by
    route template and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_id(scope) or uuid.uuid4().hex
        token = request_id.set(rid)
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER.lower().encode(), rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            REQUESTS.labels(scope.get("method", ""), template, str(status)).inc()
            request_id.reset(token)


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            candidate = value.decode("latin-1")
            return candidate if _SAFE_REQUEST_ID.fullmatch(candidate) else None
    return None


def configure_logging(log_format: str) -> None:
    """Request ids on every record; the ``asktell`` loggers' information on stderr beside
    uvicorn's (a job claimed, its workers started, its end); JSON lines when ``log_format`` is
    ``json``."""
    install_request_id_on_records()
    show_asktell_info()
    if log_format == "json":
        use_json_logs()


def show_asktell_info() -> None:
    """Records of the ``asktell`` loggers from INFO up on stderr, formatted as uvicorn's
    (``INFO:     asktell.jobs: job 3: claimed by ...``); once per process. They still reach
    the root logger's handlers, if any."""
    from uvicorn.logging import DefaultFormatter

    logger = logging.getLogger("asktell")
    if any(isinstance(h, _Stderr) for h in logger.handlers):
        return
    handler = _Stderr()
    line = "%(levelprefix)s %(name)s: %(message)s"
    handler.setFormatter(DefaultFormatter(line, use_colors=False))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record comes (a handler made
    once per process would otherwise keep the stream of the moment it was made)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def install_request_id_on_records() -> None:
    """Every log record carries ``request_id`` (``-`` outside a request)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "adds_request_id", False):
        return

    def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        rec = factory(*args, **kwargs)
        rec.request_id = request_id.get()
        return rec

    record.adds_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(record)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, request id (and the error)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
            "pid": record.process,
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line)


def use_json_logs() -> None:
    """Format the records of every handler of the root, ``asktell`` and uvicorn loggers as
    JSON (``ASKTELL_LOG_FORMAT=json``)."""
    formatter = JsonFormatter()
    for name in ("", "asktell", "uvicorn", "uvicorn.error", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            handler.setFormatter(formatter)
