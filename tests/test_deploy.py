"""docker-compose.yml read as Docker Compose would (no Docker here): the topology of the
README's `docker compose up` (PostgreSQL, a one-shot migration, two API replicas behind nginx, a
Ray head and a Ray worker) and the wiring between them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from service.events import KEEP_ALIVE_SECONDS
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_services_and_their_order():
    services = compose()["services"]
    assert set(services) == {"postgres", "migrate", "api1", "api2", "lb", "ray-head", "ray-worker"}
    for api in ("api1", "api2"):
        needs = services[api]["depends_on"]
        assert needs["migrate"]["condition"] == "service_completed_successfully"
        assert "ray-head" in needs
    assert "ray-head" in services["ray-worker"]["depends_on"]
    assert set(services["lb"]["depends_on"]) == {"api1", "api2"}


def test_the_replicas_run_jobs_on_the_ray_cluster_and_share_the_artifacts():
    spec = compose()
    services = spec["services"]
    head_port = next(
        a.split("=")[1] for a in services["ray-head"]["command"] if a.startswith("--port=")
    )
    for api in ("api1", "api2"):
        env = services[api]["environment"]
        assert env["ASKTELL_EXECUTOR"] == "ray"
        assert env["ASKTELL_RAY_ADDRESS"] == f"ray-head:{head_port}"
        assert env["ASKTELL_SELF_URL"] == "http://lb:8000"  # reachable from every Ray node
        assert f"artifacts:{env['ASKTELL_ARTIFACTS_DIR']}" in services[api]["volumes"]
    assert f"--address=ray-head:{head_port}" in services["ray-worker"]["command"]
    assert {"pgdata", "artifacts"} <= set(spec["volumes"])
    # The API and the Ray nodes run one image, built with Ray (same Ray and Python on both).
    images = {services[s]["image"] for s in ("api1", "api2", "ray-head", "ray-worker")}
    assert images == {"asktell:local"}
    assert services["api1"]["build"]["args"]["EXTRAS"] == "server,ray"
    assert "ARG EXTRAS=server" in (ROOT / "Dockerfile").read_text()


def _nginx_seconds(directive: str, block: str = "http {") -> list[float]:
    """The values of ``directive`` in deploy/nginx.conf, in seconds (``10s``, ``5m``, ``60``):
    in the whole ``http`` block, or in ``block`` up to its closing brace."""
    text = (ROOT / "deploy" / "nginx.conf").read_text()
    text = text[text.index(block) :]
    if block != "http {":
        text = text[: text.index("}")]
    units = {"": 1, "s": 1, "m": 60}
    return [
        float(number) * units[unit]
        for number, unit in re.findall(rf"^\s*{directive}\s+(\d+)(s|m|)\s*;", text, re.M)
    ]


def _default(setting: str) -> float:
    return Settings.model_fields[setting].default


def test_nginx_waits_for_the_longest_ask_and_cuts_off_slow_clients():
    read, send = _nginx_seconds("proxy_read_timeout"), _nginx_seconds("proxy_send_timeout")
    assert len(read) == len(send) == 1
    # The longest ask: one that waits for the ask running on its study, then runs its own, each
    # engine call within the server's time budget.
    longest_ask = 2 * _default("ask_time_budget")
    assert read[0] > longest_ask and send[0] > longest_ask
    # An event stream's keep-alive comment arrives well within the read timeout.
    assert read[0] > KEEP_ALIVE_SECONDS
    assert _nginx_seconds("client_header_timeout") == [_default("header_timeout")]
    assert _nginx_seconds("client_body_timeout") == [_default("body_timeout")]
    # nginx closes an idle upstream connection before the API does.
    upstream_idle = _nginx_seconds("keepalive_timeout", block="upstream asktell {")
    assert upstream_idle and upstream_idle[0] < _default("keep_alive_timeout")


def test_the_replicas_trust_the_proxy_for_client_addresses():
    services = compose()["services"]
    for api in ("api1", "api2"):
        assert services[api]["environment"]["FORWARDED_ALLOW_IPS"] == "*"
        assert "ports" not in services[api]  # only lb is reachable from outside
    assert services["lb"]["ports"] == ["8000:8000"]
