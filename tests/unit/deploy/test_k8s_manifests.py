"""deploy/k8s: `kubectl kustomize` renders it offline (`kubectl apply --dry-run=client` needs a cluster's API
discovery, so it cannot run here), every object round-trips through the `kubernetes` client's typed models
(a misspelt or misplaced field is dropped by them and so fails), and the server's Deployment has gRPC health
probes, a GPU limit, the admin token from a Secret, a grace period matching its drain, and no privileges."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from kubernetes.client import ApiClient

from tests.unit.deploy.cli_settings import DEPLOY, gateway_variables, parse_serve, serve_variables

_MODELS = {("apps/v1", "Deployment"): "V1Deployment", ("v1", "Service"): "V1Service",
           ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget"}


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "tests/setup.sh installs kubectl (apt)"
    result = subprocess.run([kubectl, "kustomize", str(DEPLOY / "k8s")], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


def _find(objects: list[dict], kind: str, name: str) -> dict:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def _without_empty(value: object) -> object:
    if isinstance(value, dict):
        return {key: _without_empty(item) for key, item in value.items() if item not in (None, {}, [])}
    if isinstance(value, list):
        return [_without_empty(item) for item in value]
    return value


def test_every_object_round_trips_through_the_typed_models(objects: list[dict]) -> None:
    client = ApiClient()
    for manifest in objects:
        model = client._ApiClient__deserialize(manifest, _MODELS[(manifest["apiVersion"], manifest["kind"])])
        assert _without_empty(client.sanitize_for_serialization(model)) == _without_empty(manifest), manifest[
            "metadata"]["name"]


def test_server_probes_use_grpc_health(objects: list[dict]) -> None:
    container = _find(objects, "Deployment", "arbi-server")["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == 50051
    assert container["readinessProbe"]["grpc"]["service"] == "arbi.v1.GenerateService"
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 300


def test_server_has_gpu_limits_secret_token_and_drain_grace(objects: list[dict]) -> None:
    pod = _find(objects, "Deployment", "arbi-server")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    environment = {item["name"]: item for item in container["env"]}
    assert set(environment) <= serve_variables()
    assert environment["ARBI_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "arbi-admin-token"
    drain_s = parse_serve(container["args"]).drain_timeout_ms / 1000
    assert drain_s < pod["terminationGracePeriodSeconds"] <= drain_s + 15


@pytest.mark.parametrize("name", ["arbi-server", "arbi-gateway", "arbi-envoy"])
def test_pods_are_unprivileged_and_covered_by_a_disruption_budget(objects: list[dict], name: str) -> None:
    pod = _find(objects, "Deployment", name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in pod["containers"]:
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    budget = _find(objects, "PodDisruptionBudget", name)
    assert budget["spec"]["selector"]["matchLabels"] == _find(objects, "Deployment", name)["spec"]["selector"][
        "matchLabels"]


def test_gateway_settings_exist(objects: list[dict]) -> None:
    container = _find(objects, "Deployment", "arbi-gateway")["spec"]["template"]["spec"]["containers"][0]
    assert {item["name"] for item in container["env"]} <= gateway_variables()
