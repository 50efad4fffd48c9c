"""The server's exposition: promtool-clean, the resident model's series only while one is resident,
engine state and the memory budget as recorded, GPU series only where NVML works, served over HTTP."""

from __future__ import annotations

import urllib.request

from arbi_grpc.config import MIB
from arbi_grpc.engine.engine import EngineStats
from arbi_grpc.memory.budget import (
    MemoryBudget,
    MemoryLimit,
    activations_component,
    kv_cache_component,
    weights_component,
)
from arbi_grpc.observability.exporter import MetricsExporter
from arbi_grpc.observability.gpu import open_nvml
from arbi_grpc.observability.metrics import ModelMetrics, ServerMetrics
from tests.unit.observability.promtool import check_metrics

STATS = EngineStats(num_running=2, num_waiting=5, num_free_blocks=30, num_total_blocks=100, num_preemptions=4,
                    num_cached_blocks=12, num_evictions=1, prefix_cache_hit_tokens=64,
                    prefix_cache_query_tokens=256)
BUDGET = MemoryBudget(
    device="cpu", method="measured",
    components=(weights_component(500 * MIB, "w"), kv_cache_component(256 * MIB, "kv"),
                activations_component(100 * MIB, "a")),
    limit=MemoryLimit(8192 * MIB, "memory_limit_mib=8192"),
)


class _Engine:
    def stats(self) -> EngineStats:
        return STATS


def _model_metrics(prefix_cache: bool) -> ModelMetrics:
    metrics = ModelMetrics()
    metrics.watch(_Engine(), BUDGET, {"model": "m", "architecture": "LlamaForCausalLM", "dtype": "float32",
                                       "device": "cpu"}, prefix_cache)
    metrics.time_to_first_token.observe(0.2)
    metrics.output_tokens.inc(3)
    return metrics


def test_exposition_is_promtool_clean_and_carries_every_resident_model_by_label() -> None:
    resident: list[tuple[str, ModelMetrics]] = []
    server = ServerMetrics(lambda: resident)
    server.rpc_requests.labels(rpc="arbi.v1.GenerateService/Generate", code="OK").inc()
    idle = server.exposition().decode()
    assert "arbi_rpc_requests_total" in idle and "process_resident_memory_bytes" in idle
    assert "arbi_time_to_first_token_seconds" not in idle  # no model resident, no engine series

    resident.append(("chat", _model_metrics(prefix_cache=True)))
    other = _model_metrics(prefix_cache=False)
    other.output_tokens.inc(4)
    resident.append(("other", other))
    exposition = server.exposition()
    check_metrics(exposition)  # one family per name, however many models
    registry = server.registry
    chat = {"model": "chat"}
    assert registry.get_sample_value("arbi_time_to_first_token_seconds_count", chat) == 1
    assert registry.get_sample_value("arbi_output_tokens_total", chat) == 3
    assert registry.get_sample_value("arbi_output_tokens_total", {"model": "other"}) == 7
    assert registry.get_sample_value("arbi_requests_running", chat) == 2
    assert registry.get_sample_value("arbi_requests_waiting", chat) == 5
    assert registry.get_sample_value("arbi_kv_blocks_used", chat) == 70
    assert registry.get_sample_value("arbi_kv_blocks_free", chat) == 30
    assert registry.get_sample_value("arbi_preemptions_total", chat) == 4
    assert registry.get_sample_value("arbi_prefix_cache_hit_tokens_total", chat) == 64
    assert registry.get_sample_value("arbi_prefix_cache_query_tokens_total", chat) == 256
    assert registry.get_sample_value("arbi_prefix_cache_hit_tokens_total", {"model": "other"}) is None
    budget = {c.name: registry.get_sample_value("arbi_memory_budget_bytes", {"component": c.name, **chat})
              for c in BUDGET.components}
    assert budget == {"weights": 500 * MIB, "kv_cache": 256 * MIB, "activations": 100 * MIB}
    assert registry.get_sample_value("arbi_memory_limit_bytes", chat) == 8192 * MIB
    assert registry.get_sample_value("arbi_model_info", {"model": "chat", "architecture": "LlamaForCausalLM",
                                                         "dtype": "float32", "device": "cpu"}) == 1


def test_prefix_cache_series_are_absent_when_the_cache_is_off() -> None:
    metrics = _model_metrics(prefix_cache=False)
    assert metrics.registry.get_sample_value("arbi_prefix_cache_hit_tokens_total") is None
    assert metrics.registry.get_sample_value("arbi_kv_blocks_used") == 70


def test_gpu_series_exist_exactly_when_nvml_works() -> None:
    server = ServerMetrics(list)
    nvml_works = open_nvml() is not None
    assert server.gpu_memory_exported is nvml_works
    assert ("arbi_gpu_memory_used_bytes" in server.exposition().decode()) is nvml_works


def test_exporter_serves_the_registry_over_http() -> None:
    server = ServerMetrics(list)
    server.rpc_requests.labels(rpc="x/Y", code="OK").inc(2)
    exporter = MetricsExporter(server.registry, "127.0.0.1", 0)
    try:
        with urllib.request.urlopen(exporter.url, timeout=10) as response:
            body = response.read().decode()
            assert response.headers["Content-Type"].startswith("text/plain")
    finally:
        exporter.stop()
    assert 'arbi_rpc_requests_total{code="OK",rpc="x/Y"} 2.0' in body
