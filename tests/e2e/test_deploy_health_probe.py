"""deploy/docker/grpc_health_probe.py, the images' HEALTHCHECK, against the real server: exit 0 and SERVING
for the generate service, exit 1 for an unknown service and for an address where nothing listens."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.serve_process import free_port

PROBE = Path(__file__).resolve().parents[2] / "deploy" / "docker" / "grpc_health_probe.py"


def _probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_serving_server_passes(served_smollm2) -> None:
    result = _probe("--address", served_smollm2.target, "--service", "arbi.v1.GenerateService")
    assert (result.returncode, result.stdout.strip()) == (0, "SERVING"), result.stderr


def test_unknown_service_and_dead_address_fail(served_smollm2) -> None:
    unknown = _probe("--address", served_smollm2.target, "--service", "no.such.Service")
    assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr
    dead = _probe("--address", f"127.0.0.1:{free_port()}", "--timeout-s", "1")
    assert dead.returncode == 1 and "UNAVAILABLE" in dead.stderr
