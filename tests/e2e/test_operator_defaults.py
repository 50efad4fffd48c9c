"""An operator's first hour with the default ports: `arbi-serve serve` (gRPC on 50051, metrics on 9464),
`arbi-serve chat` started before the server is ready, and `arbi-gateway --upstream HOST:PORT` as the README
shows (HTTP on 8000). The official `openai` SDK lists models, chats and streams with any API key, and
`http://127.0.0.1:8000/metrics` carries the engine's families beside the gateway's, equal to what was sent.

The ports are the documented defaults on purpose; the test fails with a clear message when one is taken.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from arbi_gateway.process import GatewayProcess
from tests.e2e.serve_process import CLI, ServeProcess, run_cli
from tests.unit.observability.promtool import check_metrics

GRPC_PORT, METRICS_PORT, HTTP_PORT = 50051, 9464, 8000
QUESTION = "What is the capital of France?"
METRICS_URL = f"http://127.0.0.1:{HTTP_PORT}/metrics"
SCRAPE_WAIT_S = 30


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def server_booting(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """`arbi-serve serve` with the default ports, just started (not yet ready)."""
    taken = [port for port in (GRPC_PORT, METRICS_PORT, HTTP_PORT) if not _port_is_free(port)]
    if taken:
        pytest.fail(f"this test uses the documented default ports; {taken} are taken on 127.0.0.1")
    log_path = tmp_path_factory.mktemp("defaults") / "serve.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen([*CLI, "serve", "--model", str(smollm2_dir), "--kv-cache-memory-mib", "64"],
                                   stdout=log_file, stderr=subprocess.STDOUT)
    served = ServeProcess(process, GRPC_PORT, log_path)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def chat_during_boot(server_booting: ServeProcess) -> subprocess.CompletedProcess:
    """`arbi-serve chat` run at once after `serve` started: it waits for readiness, then answers."""
    return run_cli("chat", "--url", server_booting.target, "--wait-s", "300", QUESTION, timeout=360)


@pytest.fixture(scope="module")
def gateway(server_booting: ServeProcess, chat_during_boot, tmp_path_factory) -> Iterator[GatewayProcess]:
    log_path = tmp_path_factory.mktemp("defaults-gateway") / "gateway.log"
    with GatewayProcess.spawn(["--upstream", server_booting.target], log_path) as process:
        yield process


@pytest.fixture(scope="module")
def sdk(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    assert gateway.url == f"http://127.0.0.1:{HTTP_PORT}"
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as client:
        yield client


def test_chat_waits_for_a_booting_server(server_booting: ServeProcess, chat_during_boot) -> None:
    assert chat_during_boot.returncode == 0, chat_during_boot.stderr + server_booting.log()
    assert "Paris" in chat_during_boot.stdout
    assert "waiting up to 300 s" in chat_during_boot.stderr


def test_chat_gives_up_after_its_wait() -> None:
    port = 1  # nothing listens on a privileged port here
    result = run_cli("chat", "--url", f"127.0.0.1:{port}", "--wait-s", "1", QUESTION)
    assert result.returncode == 1
    assert f"127.0.0.1:{port} did not become ready within 1 s" in result.stderr


def test_openai_sdk_lists_chats_and_streams_with_any_key(sdk: openai.OpenAI) -> None:
    models = [model.id for model in sdk.models.list()]
    assert len(models) == 1
    assert sdk.models.retrieve(models[0]).id == models[0]
    reply = sdk.chat.completions.create(model=models[0], messages=[{"role": "user", "content": QUESTION}],
                                        max_tokens=16, temperature=0)
    assert "Paris" in reply.choices[0].message.content
    pieces = [chunk.choices[0].delta.content or "" for chunk in sdk.chat.completions.create(
        model=models[0], messages=[{"role": "user", "content": QUESTION}], max_tokens=16, temperature=0,
        stream=True) if chunk.choices]
    assert "".join(pieces) == reply.choices[0].message.content


def _scrape() -> dict[str, float]:
    """The gateway's /metrics as {sample name with labels: value}, summed over the engine's `model` label;
    promtool must accept it."""
    with urllib.request.urlopen(METRICS_URL, timeout=10) as response:
        exposition = response.read()
    check_metrics(exposition)
    samples = {}
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "model")
            key = f"{sample.name}{{{labels}}}" if labels else sample.name
            samples[key] = samples.get(key, 0) + sample.value
    return samples


def test_gateway_metrics_carry_the_engine_families(sdk: openai.OpenAI) -> None:
    model = sdk.models.list().data[0].id
    before = _scrape()
    assert before["arbi_gateway_upstream_metrics_up"] == 1
    questions = ("Name a primary colour.", "Count to five.", QUESTION)
    usages = [sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                          max_tokens=limit, temperature=0).usage
              for question, limit in zip(questions, (5, 9, 13), strict=True)]
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while (after := _scrape())["arbi_request_latency_seconds_count"] - before["arbi_request_latency_seconds_count"] \
            < len(questions):
        assert time.monotonic() < deadline, "the engine's finished requests never reached the gateway's /metrics"
        time.sleep(0.2)

    def delta(name: str) -> float:
        return after[name] - before[name]

    assert delta("arbi_time_to_first_token_seconds_count") == len(questions)
    assert delta("arbi_time_to_first_token_seconds_sum") > 0
    assert delta("arbi_prompt_tokens_total") == sum(usage.prompt_tokens for usage in usages)
    assert delta("arbi_output_tokens_total") == sum(usage.completion_tokens for usage in usages)
    assert delta("arbi_request_output_tokens_sum") == sum(usage.completion_tokens for usage in usages)
    chat_route = "method=POST,route=/v1/chat/completions,status_code=200"
    assert delta(f"arbi_gateway_http_requests_total{{{chat_route}}}") == len(questions)
    assert after["arbi_requests_running"] == 0


def test_server_metrics_endpoint_is_on_by_default(server_booting: ServeProcess, gateway) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as response:
        exposition = response.read()
    assert b"# TYPE arbi_time_to_first_token_seconds histogram" in exposition
    assert b"arbi_gateway_" not in exposition
