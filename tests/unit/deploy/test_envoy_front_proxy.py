"""deploy/envoy/front-proxy.yaml: Envoy's own validation accepts it, and its balancing, health-check, retry
and ejection settings are the documented ones (docs/deploy.md); tests/e2e/test_envoy_replicas.py runs it."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.unit.deploy.cli_settings import DEPLOY

FRONT_PROXY = DEPLOY / "envoy" / "front-proxy.yaml"
# Conditions under which no replica started the request; never 5xx or a status that follows work.
_BEFORE_ANY_WORK = {"connect-failure", "reset-before-request", "refused-stream"}


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(FRONT_PROXY.read_text())


def _routes(config: dict) -> dict[str, list[dict]]:
    routes = {}
    for listener in config["static_resources"]["listeners"]:
        manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
        routes[listener["name"]] = [route for host in manager["route_config"]["virtual_hosts"]
                                    for route in host["routes"]]
    return routes


def test_envoy_validates_the_file() -> None:
    result = subprocess.run(["envoy", "--mode", "validate", "-c", str(FRONT_PROXY), "--use-dynamic-base-id",
                             "--log-level", "error"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_clusters_balance_per_request_with_health_checks_and_ejection(config: dict) -> None:
    clusters = {cluster["name"]: cluster for cluster in config["static_resources"]["clusters"]}
    assert set(clusters) == {"arbi_server", "arbi_gateway"}
    for cluster in clusters.values():
        assert cluster["lb_policy"] == "LEAST_REQUEST"
        assert cluster["outlier_detection"]["max_ejection_percent"] <= 50
    protocols = {name: cluster["typed_extension_protocol_options"][
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"]
        for name, cluster in clusters.items()}
    assert "http2_protocol_options" in protocols["arbi_server"]
    assert "http_protocol_options" in protocols["arbi_gateway"]
    assert clusters["arbi_server"]["health_checks"][0]["grpc_health_check"]["service_name"] == \
        "arbi.v1.GenerateService"
    assert clusters["arbi_gateway"]["health_checks"][0]["http_health_check"]["path"] == "/health/ready"


def test_retries_only_requests_no_replica_started(config: dict) -> None:
    for listener, routes in _routes(config).items():
        for route in routes:
            conditions = set(route["route"]["retry_policy"]["retry_on"].split(","))
            allowed = _BEFORE_ANY_WORK | (
                {"unavailable"} if route["match"]["prefix"] == "/arbi.v1.GenerateService/" else set())
            assert conditions <= allowed, (listener, route["match"])
            assert _BEFORE_ANY_WORK & conditions
