"""A real Prometheus on 127.0.0.1 scrapes a real `arbi-serve serve` under a few requests; the test reads the
counters and TTFT back through Prometheus's query API and checks them against what it sent and received.
Also: `promtool check metrics` on the exposition, the boot log record, and the deploy/ recipes (the scrape
config passes `promtool check config`; every dashboard query runs and names exported series)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.e2e.helpers import chat_request, generate, stub_for
from tests.e2e.serve_process import ServeProcess, free_port, start_serve
from tests.unit.observability.promtool import check_metrics

REPO = Path(__file__).resolve().parents[2]
GENERATE_RPC = "arbi.v1.GenerateService/Generate"
QUESTIONS = (("What is the capital of France?", 6), ("Name a primary colour.", 10), ("Count to five.", 14))
SCRAPE_WAIT_S = 90


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run `bash tests/setup.sh` (apt-get install prometheus)")
    return path


@pytest.fixture(scope="module")
def server(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, int]]:
    metrics_port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    served = start_serve(smollm2_dir, log, "--kv-cache-memory-mib", "64", "--metrics-port", str(metrics_port),
                         "--log-format", "json")
    yield served, metrics_port
    served.stop()


@pytest.fixture(scope="module")
def prometheus(server: tuple[ServeProcess, int], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = _tool("prometheus")
    directory = tmp_path_factory.mktemp("prometheus")
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: arbi-serve\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{server[1]}']\n"
    )
    web = f"127.0.0.1:{free_port()}"
    with open(directory / "prometheus.log", "wb") as log:
        process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address={web}"],
            stdout=log, stderr=subprocess.STDOUT,
        )
    url = f"http://{web}"
    deadline = time.monotonic() + 60
    while not _ready(url):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"prometheus did not start:\n{(directory / 'prometheus.log').read_text()}")
        time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _query(prometheus: str, expression: str) -> dict:
    query = urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query?{query}", timeout=10) as response:
        document = json.load(response)
    assert document["status"] == "success", document
    return document["data"]


def _scalar(prometheus: str, expression: str) -> float | None:
    """The single sample of an instant query, or None when it has none (yet)."""
    result = _query(prometheus, expression)["result"]
    return float(result[0]["value"][1]) if len(result) == 1 else None


def _exposition(metrics_port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        return response.read()


def test_prometheus_reads_back_what_the_server_did(server: tuple[ServeProcess, int], prometheus: str) -> None:
    served, _ = server
    channel, stub = stub_for(served.target)
    with channel:
        completions = [generate(stub, chat_request(question, max_output_tokens=limit))
                       for question, limit in QUESTIONS]
        with pytest.raises(grpc.RpcError) as refused:
            generate(stub, chat_request("too short", max_output_tokens=0))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    prompt_tokens = sum(c.last.usage.prompt_token_count for c in completions)
    output_tokens = sum(len(c.token_ids) for c in completions)
    assert output_tokens == sum(c.last.usage.output_token_count for c in completions) > 0

    # Wait for a scrape that saw every request finish.
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while _scalar(prometheus, "arbi_request_latency_seconds_count") != len(QUESTIONS):
        assert time.monotonic() < deadline, "Prometheus never scraped the finished requests"
        time.sleep(0.5)

    assert _scalar(prometheus, 'up{job="arbi-serve"}') == 1
    assert _scalar(prometheus, "arbi_prompt_tokens_total") == prompt_tokens
    assert _scalar(prometheus, "arbi_output_tokens_total") == output_tokens
    assert _scalar(prometheus, "arbi_request_output_tokens_sum") == output_tokens
    assert _scalar(prometheus, "arbi_request_prompt_tokens_sum") == prompt_tokens
    assert _scalar(prometheus, f'arbi_rpc_requests_total{{rpc="{GENERATE_RPC}",code="OK"}}') == len(QUESTIONS)
    assert _scalar(prometheus, f'arbi_rpc_requests_total{{rpc="{GENERATE_RPC}",code="INVALID_ARGUMENT"}}') == 1
    assert _scalar(prometheus, "sum(arbi_requests_finished_total)") == len(QUESTIONS)
    assert _scalar(prometheus, "arbi_time_to_first_token_seconds_count") == len(QUESTIONS)
    assert _scalar(prometheus, "arbi_inter_token_latency_seconds_count") == output_tokens - len(QUESTIONS)
    assert _scalar(prometheus, "arbi_time_to_first_token_seconds_sum") > 0
    median_ttft = _scalar(prometheus, "histogram_quantile(0.5, arbi_time_to_first_token_seconds_bucket)")
    assert median_ttft is not None and 0 < median_ttft < math.inf
    assert _scalar(prometheus, "arbi_requests_running") == 0
    assert _scalar(prometheus, "arbi_kv_blocks_used") == 0


def test_exposition_passes_promtool(server: tuple[ServeProcess, int]) -> None:
    check_metrics(_exposition(server[1]))


def test_boot_log_record_carries_the_config_and_the_budget(server: tuple[ServeProcess, int]) -> None:
    served, metrics_port = server
    records = [json.loads(line) for line in served.log().splitlines() if line.startswith("{")]
    boots = [record for record in records if record.get("event") == "boot"]
    assert len(boots) == 1
    boot = boots[0]
    assert boot["config"]["kv_cache_memory_mib"] == 64 and boot["memory_budget"]["method"] == "measured"
    samples = re.findall(rb'^arbi_memory_budget_bytes\{component="(\w+)",model="[^"]+"\} (\S+)$', _exposition(metrics_port), re.MULTILINE)
    assert {name.decode(): int(float(value)) for name, value in samples} == {
        name: part["bytes"] for name, part in boot["memory_budget"]["components"].items()
    }


def test_deploy_recipes_match_the_exported_series(server: tuple[ServeProcess, int], prometheus: str) -> None:
    checked = subprocess.run([_tool("promtool"), "check", "config", str(REPO / "deploy/prometheus/prometheus.yml")],
                             check=False, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    exported = set(re.findall(r"^([a-z_:]+)(?:\{| )", _exposition(server[1]).decode(), re.MULTILINE))
    dashboard = json.loads((REPO / "deploy/grafana/arbi-serve.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert expressions
    for expression in expressions:
        _query(prometheus, expression)  # valid PromQL
        for name in re.findall(r"\b((?:arbi|process)_[a-z_]+)\b", expression):
            assert name in exported or name.startswith("arbi_gpu_"), (name, expression)
