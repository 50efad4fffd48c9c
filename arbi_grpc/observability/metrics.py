"""The server's Prometheus metrics, in two registries (never prometheus_client's global one):

- `ServerMetrics`, one per server process: RPCs by method and status, process memory and CPU, GPU memory
  (NVML, where present), and whatever the resident models' registries hold at scrape time, each series with
  a `model` label (the served name).
- `ModelMetrics`, one per loaded model: the engine's latencies, token counts and steps (pushed by its
  EngineObserver), its state (read from `Engine.stats()` at scrape time) and its memory budget. A model
  switch swaps the registry, so the engine series restart from zero like after a process restart.

Names follow Prometheus conventions: an `arbi_` prefix, base units in the name, `_total` on counters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest

from arbi_grpc.memory.budget import MemoryBudget
from arbi_grpc.observability.collectors import (
    EngineStateCollector,
    MemoryBudgetCollector,
    ModelInfoCollector,
    ResidentModelCollector,
)
from arbi_grpc.observability.gpu import register_gpu_collector

if TYPE_CHECKING:
    from arbi_grpc.engine.engine import Engine

LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
INTER_TOKEN_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
TOKEN_COUNT_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
STEP_TOKEN_BUCKETS = (1, 8, 32, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
STEP_DURATION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The tenants with a series of their own in `arbi_tenant_tokens`; later ones share OTHER_TENANTS, so a client
# sending arbitrary tenant ids cannot grow the series without bound.
MAX_TENANT_LABELS = 1000
OTHER_TENANTS = "(other)"


class ServerMetrics:
    """The process's registry; `exposition()` renders it in the Prometheus text format (GET /metrics)."""

    def __init__(self, resident_models: Callable[[], list[tuple[str, ModelMetrics]]]) -> None:
        self.registry = CollectorRegistry()
        self.rpc_requests = Counter(
            "arbi_rpc_requests", "RPCs handled, by full method name and final gRPC status code",
            ["rpc", "code"], registry=self.registry,
        )
        ProcessCollector(registry=self.registry)
        self.gpu_memory_exported = register_gpu_collector(self.registry)

        def resident_registries() -> list[tuple[str, CollectorRegistry]]:
            return [(name, metrics.registry) for name, metrics in resident_models()]

        self.registry.register(ResidentModelCollector(resident_registries))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class ModelMetrics:
    """The metrics of one loaded model and its engine."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.queue_time = Histogram(
            "arbi_request_queue_time_seconds", "From submission to the engine until the first scheduled step",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )
        self.time_to_first_token = Histogram(
            "arbi_time_to_first_token_seconds", "From submission to the engine until the first output token",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )
        self.inter_token_latency = Histogram(
            "arbi_inter_token_latency_seconds", "Between two consecutive output tokens of one request",
            buckets=INTER_TOKEN_BUCKETS_S, registry=registry,
        )
        self.request_latency = Histogram(
            "arbi_request_latency_seconds", "End to end, from submission to the engine until the last output",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )
        self.prompt_tokens = Counter(
            "arbi_prompt_tokens", "Prompt tokens of the requests the engine took", registry=registry,
        )
        self.output_tokens = Counter(
            "arbi_output_tokens", "Output tokens generated (sampled and appended to a request)",
            registry=registry,
        )
        self.tenant_tokens = Counter(
            "arbi_tenant_tokens",
            "Prompt and output tokens by kind and tenant (the prefix-cache namespace: the API key's tenant, else the "
            f"request's tenant_id; the first {MAX_TENANT_LABELS} tenants, the rest as '{OTHER_TENANTS}')",
            ["tenant", "kind"], registry=registry,
        )
        self.request_prompt_tokens = Histogram(
            "arbi_request_prompt_tokens", "Prompt tokens per finished request",
            buckets=TOKEN_COUNT_BUCKETS, registry=registry,
        )
        self.request_output_tokens = Histogram(
            "arbi_request_output_tokens", "Output tokens per finished request",
            buckets=TOKEN_COUNT_BUCKETS, registry=registry,
        )
        self.requests_finished = Counter(
            "arbi_requests_finished", "Requests that left the engine, by finish reason ('error' for failures)",
            ["reason"], registry=registry,
        )
        self.step_batch_size = Histogram(
            "arbi_step_batch_size", "Sequences in one engine step", buckets=BATCH_SIZE_BUCKETS, registry=registry,
        )
        self.step_tokens = Histogram(
            "arbi_step_tokens", "Tokens computed in one engine step (prefill chunks plus decodes)",
            buckets=STEP_TOKEN_BUCKETS, registry=registry,
        )
        self.step_duration = Histogram(
            "arbi_step_duration_seconds", "One engine step, from scheduling until its outputs are delivered",
            buckets=STEP_DURATION_BUCKETS_S, registry=registry,
        )

        self.grammar_compile_time = Histogram(
            "arbi_grammar_compile_seconds", "Compiling one output constraint's grammar (cache misses only)",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )
        self.grammar_cache_hits = Counter(
            "arbi_grammar_cache_hits", "Output constraints served from the compile cache, by where it held them",
            ["source"], registry=registry,
        )

    def watch(self, engine: Engine, budget: MemoryBudget, info: dict[str, str], prefix_cache_enabled: bool) -> None:
        """Adds the scrape-time series: the engine's state, the memory budget, `arbi_model_info` and, for a
        model served on CUDA, the caching allocator's gauges."""
        self.registry.register(EngineStateCollector(engine, prefix_cache_enabled))
        self.registry.register(MemoryBudgetCollector(budget))
        self.registry.register(ModelInfoCollector(info))
        if budget.device.startswith("cuda"):
            from arbi_grpc.observability.cuda_allocator_metrics import CudaAllocatorCollector, cuda_allocator_reader

            self.registry.register(CudaAllocatorCollector(cuda_allocator_reader(budget.device)))

