"""deploy/envoy/front-proxy.yaml: Envoy's own validation accepts it, and its balancing, health-check, retry
and ejection settings are the documented ones (docs/deploy.md); tests/e2e/test_envoy_replicas.py runs it."""

from __future__ import annotations

import inspect
import re
import subprocess

import pytest
import uvicorn
import yaml

from tests.unit.deploy.cli_settings import DEPLOY

FRONT_PROXY = DEPLOY / "envoy" / "front-proxy.yaml"
# Conditions under which no replica started the request; never 5xx or a status that follows work.
_BEFORE_ANY_WORK = {"connect-failure", "reset-before-request", "refused-stream"}
# REST requests that store nothing, so that Envoy may replay them after a reset that followed the request:
# GET and HEAD, and the gateway's generation routes.
_STATELESS_METHODS = {"GET", "HEAD"}
_STATELESS_POST_PATHS = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/rerank",
                         "/v1/audio/transcriptions", "/v1/audio/speech"}
# Gateway routes with a lasting effect (app.py), and a path that only begins like a generation route's: never
# replayed once a replica may have acted on them.
_WRITES = [("POST", "/v1/files"), ("DELETE", "/v1/files/file-1"), ("POST", "/v1/batches"),
           ("POST", "/v1/batches/batch-1/cancel"), ("POST", "/v1/chat/completions/extra")]


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(FRONT_PROXY.read_text())


def _routes(config: dict) -> dict[str, list[dict]]:
    """Each listener's routes, in order, each with the retry policy it runs under (its own or its virtual
    host's: Envoy takes the route's whole, never merged)."""
    routes = {}
    for listener in config["static_resources"]["listeners"]:
        manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
        routes[listener["name"]] = [
            {**route, "retry_policy": route["route"].get("retry_policy", host.get("retry_policy"))}
            for host in manager["route_config"]["virtual_hosts"] for route in host["routes"]]
    return routes


def _matches(match: dict, method: str, path: str) -> bool:
    """Envoy's route match for the kinds this file uses: prefix or full-path regex, `:method` regex."""
    if "prefix" in match:
        matched = path.startswith(match["prefix"])
    else:
        matched = re.fullmatch(match["safe_regex"]["regex"], path) is not None
    for header in match.get("headers", []):
        assert header["name"] == ":method", header
        matched = matched and re.fullmatch(header["string_match"]["safe_regex"]["regex"], method) is not None
    return matched


def _retry_on(config: dict, method: str, path: str) -> set[str]:
    """The retry conditions of the REST route that Envoy picks for `method path` (the first that matches)."""
    route = next(route for route in _routes(config)["arbi_rest"] if _matches(route["match"], method, path))
    return set(route["retry_policy"]["retry_on"].split(","))


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


def test_health_verdicts_reach_the_workers_unmerged(config: dict) -> None:
    # Envoy's default merges health changes for 1 s: a replica marked healthy stays out of the rotation that long.
    for cluster in config["static_resources"]["clusters"]:
        assert cluster["common_lb_config"]["update_merge_window"] == "0s", cluster["name"]


def test_gateway_connections_idle_out_before_uvicorn_closes_them(config: dict) -> None:
    # The gateway leaves uvicorn's keep-alive timeout at its default.
    gateway = next(c for c in config["static_resources"]["clusters"] if c["name"] == "arbi_gateway")
    options = gateway["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    idle_s = float(options["common_http_protocol_options"]["idle_timeout"].removesuffix("s"))
    assert 0 < idle_s < inspect.signature(uvicorn.Config).parameters["timeout_keep_alive"].default


def test_grpc_retries_only_requests_no_replica_started(config: dict) -> None:
    for route in _routes(config)["arbi_grpc"]:
        conditions = set(route["retry_policy"]["retry_on"].split(","))
        allowed = _BEFORE_ANY_WORK | (
            {"unavailable"} if route["match"]["prefix"] == "/arbi.v1.GenerateService/" else set())
        assert conditions <= allowed, route["match"]
        assert _BEFORE_ANY_WORK & conditions


@pytest.mark.parametrize(("method", "path"), [
    *((method, "/v1/models") for method in sorted(_STATELESS_METHODS)),
    ("GET", "/v1/files/file-1/content"), *(("POST", path) for path in sorted(_STATELESS_POST_PATHS))])
def test_rest_replays_requests_that_store_nothing_on_a_reset(config: dict, method: str, path: str) -> None:
    assert _retry_on(config, method, path) == {"reset", "connect-failure"}


@pytest.mark.parametrize(("method", "path"), _WRITES)
def test_rest_writes_retry_only_where_no_replica_got_them(config: dict, method: str, path: str) -> None:
    conditions = _retry_on(config, method, path)
    assert conditions <= _BEFORE_ANY_WORK and conditions
