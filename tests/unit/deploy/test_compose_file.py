"""deploy/compose.yaml: Debian's `docker-compose config` accepts it (the engine itself is not here), the server
reserves an NVIDIA GPU and keeps the model cache and the admin token on volumes, the arbi-serve services drop
every capability and run unprivileged, Docker's stop grace covers the drain, and the flags and ARBI_*
variables it passes exist in the real CLI."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.unit.deploy.cli_settings import DEPLOY, gateway_variables, parse_serve, serve_variables

COMPOSE = DEPLOY / "compose.yaml"


@pytest.fixture(scope="module")
def resolved() -> dict:
    """The file as docker-compose resolves it (anchors merged, paths made absolute)."""
    compose = shutil.which("docker-compose")
    assert compose, "tests/setup.sh installs docker-compose (apt)"
    result = subprocess.run([compose, "-f", str(COMPOSE), "config"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_the_four_services_are_there(resolved: dict) -> None:
    assert set(resolved["services"]) == {"server", "gateway", "prometheus", "grafana"}


def test_server_reserves_a_gpu_and_keeps_cache_and_token_on_volumes(resolved: dict) -> None:
    server = resolved["services"]["server"]
    devices = server["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    mounts = {target: source for source, target, _ in (volume.split(":") for volume in server["volumes"])}
    assert mounts["/var/cache/arbi"] in resolved["volumes"]
    assert mounts["/run/arbi"] in resolved["volumes"]
    assert server["build"]["target"] == "server"


@pytest.mark.parametrize("name", ["server", "gateway"])
def test_arbi_services_are_unprivileged(resolved: dict, name: str) -> None:
    service = resolved["services"][name]
    assert service["cap_drop"] == ["ALL"]
    assert service["user"] == "10001:10001"
    assert service["read_only"] is True
    assert "no-new-privileges:true" in service["security_opt"]


def test_stop_grace_covers_the_drain(resolved: dict) -> None:
    server = resolved["services"]["server"]
    drain_s = parse_serve(server["command"]).drain_timeout_ms / 1000
    grace = server["stop_grace_period"]
    assert grace.endswith("s") and drain_s < float(grace[:-1]) <= drain_s + 15


def test_settings_exist(resolved: dict) -> None:
    assert set(resolved["services"]["server"]["environment"]) <= serve_variables()
    assert set(resolved["services"]["gateway"]["environment"]) <= gateway_variables()


def test_prometheus_scrape_config_passes_promtool(resolved: dict) -> None:
    config = next(volume.split(":")[0] for volume in resolved["services"]["prometheus"]["volumes"]
                  if volume.split(":")[1] == "/etc/prometheus/prometheus.yml")
    result = subprocess.run(["promtool", "check", "config", config], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
