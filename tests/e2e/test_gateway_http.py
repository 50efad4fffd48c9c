"""The REST gateway as a real subprocess (with torch made unimportable) in front of the session's gRPC
server: curl for the OpenAI routes, refusals with precise 4xx messages, a disconnect that cancels the
upstream stream, health, metrics and the OpenAPI document. After each test the engine's KV pool is free.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from arbi_gateway.process import GatewayProcess

from tests.conftest import wait_for_idle_pool

MODEL = "resident"  # stands for the served model's name in request bodies; `_curl` fills it in
QUESTION = "What is the capital of France?"
_BLOCK_TORCH = "raise ImportError('torch is blocked in the gateway process')\n"


def _env_without_torch(scratch: Path) -> dict[str, str]:
    import os

    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "torch.py").write_text(_BLOCK_TORCH)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(scratch), env.get("PYTHONPATH", "")]))
    return env


@pytest.fixture(scope="module")
def gateway(served_smollm2, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    scratch = tmp_path_factory.mktemp("gateway-http")
    process = GatewayProcess.spawn(
        ["--upstream", served_smollm2.target, "--http-port", "0", "--upstream-metrics-url", ""],
        scratch / "gateway.log", env=_env_without_torch(scratch / "no-torch"),
    )
    yield process
    process.stop()


@pytest.fixture(scope="module")
def model_name(served_smollm2) -> str:
    return served_smollm2.served.name


@pytest.fixture(autouse=True)
def _pool_is_free_afterwards(served_smollm2) -> Iterator[None]:
    yield
    wait_for_idle_pool(served_smollm2.served.engine)


def _curl(url: str, *args: str, body: object | None = None, model: str = "") -> tuple[int, str]:
    """(HTTP status, body) of one curl call; a body's model "resident" becomes `model`."""
    command = ["curl", "-sS", "-N", "--max-time", "120", "-w", "\n%{http_code}", *args, url]
    if body is not None:
        if isinstance(body, dict) and body.get("model") == MODEL:
            body = {**body, "model": model}
        payload = body if isinstance(body, str) else json.dumps(body)
        command += ["-H", "content-type: application/json", "--data-binary", payload]
    result = subprocess.run(command, capture_output=True, text=True, timeout=150, check=True)
    text, _, status = result.stdout.rpartition("\n")
    return int(status), text


def _chat(**extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "temperature": 0,
            "max_tokens": 16, **extra}


def test_the_gateway_process_never_imports_torch(tmp_path: Path) -> None:
    code = ("import sys\n"
            "from arbi_gateway.app import build_app\n"
            "from arbi_gateway.config import GatewayConfig\n"
            "build_app(GatewayConfig())\n"
            "sys.exit(1 if 'torch' in sys.modules else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], env=_env_without_torch(tmp_path),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def test_curl_chat_completion(gateway: GatewayProcess, model_name: str) -> None:
    status, text = _curl(gateway.url + "/v1/chat/completions", body=_chat(), model=model_name)
    assert status == 200, text
    reply = json.loads(text)
    assert reply["object"] == "chat.completion"
    assert "Paris" in reply["choices"][0]["message"]["content"]
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["completion_tokens"] > 0


def test_curl_streams_sse_ending_with_done(gateway: GatewayProcess, model_name: str) -> None:
    status, text = _curl(gateway.url + "/v1/chat/completions",
                         body=_chat(stream=True, stream_options={"include_usage": True}), model=model_name)
    assert status == 200, text
    events = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "Paris" in "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize(("route", "body", "status", "param", "message"), [
    ("/v1/chat/completions", "{not json", 400, "body", "could not parse the JSON body"),
    ("/v1/chat/completions", "[1, 2]", 400, "body", "must be a JSON object"),
    ("/v1/chat/completions", _chat(temperature="hot"), 400, "temperature", "expected a number"),
    ("/v1/chat/completions", _chat(messages="hi"), 400, "messages", "expected an array"),
    ("/v1/chat/completions", _chat(model="no-such-model"), 404, "model", "'no-such-model' is not served"),
    ("/v1/chat/completions", _chat(n=1000), 400, "n", "must be <= 8"),
    ("/v1/chat/completions", _chat(functions=[]), 400, "functions", "'functions' is not supported"),
    ("/v1/chat/completions", _chat(colour="blue"), 400, "colour", "Unrecognized request argument"),
    ("/v1/chat/completions", _chat(top_logprobs=2), 400, "top_logprobs", "requires 'logprobs'"),
    ("/v1/completions", {"model": MODEL, "prompt": "hello " * 9000}, 400, "prompt", "fit the context"),
    ("/v1/completions", {"model": MODEL, "prompt": [10**6]}, 400, "prompt", "outside the vocabulary"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens", "only with 'echo'"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "stop": [""]}, 400, "stop[0]", "at least 1"),
])
def test_bad_requests_get_a_precise_4xx(gateway: GatewayProcess, model_name: str, route: str, body: object,
                                         status: int, param: str, message: str) -> None:
    got_status, text = _curl(gateway.url + route, body=body, model=model_name)
    error = json.loads(text)["error"]
    assert (got_status, error["param"]) == (status, param), text
    assert message in error["message"]
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


def test_unknown_route_and_method_answer_openai_errors(gateway: GatewayProcess) -> None:
    status, text = _curl(gateway.url + "/v1/moderations", body={"model": MODEL, "input": "x"})
    assert status == 404 and "Not Found" in json.loads(text)["error"]["message"]
    status, text = _curl(gateway.url + "/v1/completions")
    assert status == 405 and "Method Not Allowed" in json.loads(text)["error"]["message"]


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_disconnects_cancels_its_generation(gateway: GatewayProcess, served_smollm2,
                                                          stream: bool) -> None:
    engine = served_smollm2.served.engine
    body = json.dumps({"model": served_smollm2.served.name, "prompt": "Once upon a time", "max_tokens": 4000,
                       "ignore_eos": True, "stream": stream}).encode()
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
                           b"content-length: %d\r\n\r\n%s" % (len(body), body))
        if stream:
            received = b""
            while b"data: " not in received:
                received += connection.recv(65536)
        else:
            wait_for_running(engine)
        assert engine.stats().num_running == 1  # 4000 tokens take minutes here: it is still generating
    # The fixture's wait_for_idle_pool fails unless the engine dropped the request and freed its blocks.


def wait_for_running(engine, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while engine.stats().num_running == 0:
        if time.monotonic() > deadline:
            pytest.fail("the request never started running")
        time.sleep(0.02)


def test_health_readiness_and_models(gateway: GatewayProcess, served_smollm2, model_name: str) -> None:
    assert _curl(gateway.url + "/health")[0] == 200
    status, text = _curl(gateway.url + "/health/ready")
    assert status == 200 and json.loads(text)["upstream"] == served_smollm2.target
    status, text = _curl(gateway.url + "/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == [model_name]
    assert _curl(gateway.url + f"/v1/models/{model_name}")[0] == 200
    assert _curl(gateway.url + "/v1/models/other")[0] == 404


def test_metrics_count_requests_by_route(gateway: GatewayProcess, model_name: str) -> None:
    _curl(gateway.url + "/v1/chat/completions", body=_chat(max_tokens=2), model=model_name)
    status, text = _curl(gateway.url + "/metrics")
    assert status == 200
    counted = [line for line in text.splitlines() if line.startswith("arbi_gateway_http_requests_total{")]
    assert any('route="/v1/chat/completions"' in line and 'status_code="200"' in line for line in counted)
    assert "arbi_gateway_http_request_duration_seconds_bucket" in text


def test_openapi_document_describes_every_route(gateway: GatewayProcess) -> None:
    status, text = _curl(gateway.url + "/openapi.json")
    document = json.loads(text)
    assert status == 200 and document["openapi"].startswith("3.1")
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/health/ready"):
        assert path in document["paths"]
    chat = document["components"]["schemas"]["ChatCompletionRequest"]
    assert chat["properties"]["n"]["maximum"] == 8 and chat["additionalProperties"] is False
