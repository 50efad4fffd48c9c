"""Scrape-time collectors: engine state (requests, KV blocks, preemptions, prefix cache) read from
`Engine.stats()`, the memory budget fixed at boot, the model's identity, and the resident models' registries
inside the server's (each sample labelled with its model).

They run on the exporter's thread when Prometheus scrapes and never touch the engine thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from arbi_grpc.memory.budget import MemoryBudget

if TYPE_CHECKING:
    from arbi_grpc.engine.engine import Engine


class EngineStateCollector(Collector):
    """Running and waiting requests, KV blocks, preemptions and, when it is on, the prefix cache."""

    def __init__(self, engine: Engine, prefix_cache_enabled: bool) -> None:
        self._engine = engine
        self._prefix_cache_enabled = prefix_cache_enabled

    def collect(self) -> Iterator[Metric]:
        stats = self._engine.stats()
        yield GaugeMetricFamily("arbi_requests_running", "Requests in the running batch", value=stats.num_running)
        yield GaugeMetricFamily("arbi_requests_waiting", "Requests waiting for admission",
                                value=stats.num_waiting)
        yield GaugeMetricFamily("arbi_kv_blocks_used", "KV cache blocks referenced by requests",
                                value=stats.num_total_blocks - stats.num_free_blocks)
        yield GaugeMetricFamily("arbi_kv_blocks_free", "KV cache blocks an allocation can take (free or "
                                "holding an evictable cached prefix)", value=stats.num_free_blocks)
        yield CounterMetricFamily("arbi_preemptions", "Running requests preempted to free KV blocks",
                                  value=stats.num_preemptions)
        if not self._prefix_cache_enabled:
            return  # no prefix cache, no prefix-cache series (absent rather than zero)
        yield GaugeMetricFamily("arbi_kv_blocks_cached", "KV cache blocks holding a prefix-cache entry",
                                value=stats.num_cached_blocks)
        yield CounterMetricFamily("arbi_kv_block_evictions", "Cached KV blocks evicted for new allocations",
                                  value=stats.num_evictions)
        yield CounterMetricFamily("arbi_prefix_cache_query_tokens", "Prompt tokens looked up in the prefix cache",
                                  value=stats.prefix_cache_query_tokens)
        yield CounterMetricFamily("arbi_prefix_cache_hit_tokens", "Prompt tokens served from the prefix cache",
                                  value=stats.prefix_cache_hit_tokens)

    def describe(self) -> list[Metric]:
        return []


class MemoryBudgetCollector(Collector):
    """The boot-time memory budget: one gauge sample per component, and the limit it was checked against."""

    def __init__(self, budget: MemoryBudget) -> None:
        self._budget = budget

    def collect(self) -> Iterator[Metric]:
        budget = self._budget
        components = GaugeMetricFamily(
            "arbi_memory_budget_bytes",
            f"Memory reserved at boot per component on {budget.device} (docs/memory.md says what each holds)",
            labels=["component"],
        )
        for component in budget.components:
            components.add_metric([component.name], float(component.num_bytes))
        yield components
        yield GaugeMetricFamily("arbi_memory_limit_bytes", "Memory the budget was checked against at boot",
                                value=float(budget.limit_bytes))

    def describe(self) -> list[Metric]:
        return []


class ResidentModelCollector(Collector):
    """Yields, at scrape time, the series of every resident model (nothing while none is): one family per
    metric name, each sample labelled `model` with the served name of the model it came from."""

    def __init__(self, resident_registries: Callable[[], list[tuple[str, CollectorRegistry]]]) -> None:
        self._resident_registries = resident_registries

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for model, registry in self._resident_registries():
            for family in registry.collect():
                merged = families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type, family.unit))
                merged.samples += [sample._replace(labels={**sample.labels, "model": model})
                                   for sample in family.samples]
        yield from families.values()

    def describe(self) -> list[Metric]:
        return []


class ModelInfoCollector(Collector):
    """`arbi_model_info{...} 1`: the resident model's name, architecture, dtype and device."""

    def __init__(self, info: dict[str, str]) -> None:
        self._family = InfoMetricFamily("arbi_model", "The resident model and how it is served", value=info)

    def collect(self) -> Iterator[Metric]:
        yield self._family

    def describe(self) -> list[Metric]:
        return []
