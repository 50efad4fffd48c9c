"""The CUDA memory budget of real shapes (Llama-3-8B, Qwen3-0.6B) with random bfloat16 weights built on the GPU:
`plan`'s estimate is within 10% of the measured total (weights and KV cache exactly), and the measured
components, as exported by the budget gauges, add up to what torch's caching allocator reserved.

Run this file in its own process (other tests' live tensors would land in `allocator_overhead`); `-s` prints
each case's components, estimated against measured.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import torch
from prometheus_client import CollectorRegistry

from arbi_grpc.attention.selection import build_kv_cache, select_attention_backend
from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.engine.cuda_graphs import DecodeGraphs
from arbi_grpc.memory.budget import MemoryBudget
from arbi_grpc.memory.estimate import estimate_budget
from arbi_grpc.memory.kv_pool import plan_kv_pool
from arbi_grpc.memory.limits import memory_limit
from arbi_grpc.memory.measure import measure_budget, reserved_growth
from arbi_grpc.models.random_weights import model_config_for_shape, random_causal_lm
from arbi_grpc.observability.collectors import MemoryBudgetCollector
from arbi_grpc.observability.cuda_allocator_metrics import CudaAllocatorCollector, cuda_allocator_reader

DEFAULT_STEP: dict[str, int] = {}  # 512 step tokens, 64 running
THROUGHPUT_STEP = {"max_step_tokens": 2048, "max_running_requests": 256}
CASES = [
    pytest.param(shape, graphs, step, id=f"{shape}-{'graphs' if graphs else 'eager'}-{name}")
    for shape in ("llama3-8b", "qwen3-0.6b")
    for graphs, step, name in ((True, DEFAULT_STEP, "default"), (True, THROUGHPUT_STEP, "throughput"),
                               (False, DEFAULT_STEP, "default"))
]


@pytest.fixture
def clean_device() -> Iterator[None]:
    gc.collect()
    torch.cuda.empty_cache()
    yield
    gc.collect()
    torch.cuda.empty_cache()


@pytest.mark.parametrize(("shape", "graphs", "step"), CASES)
def test_plan_matches_the_measured_budget(shape: str, graphs: bool, step: dict[str, int], clean_device) -> None:
    config = EngineConfig(model=shape, device="cuda", max_model_len=8192, kv_cache_memory_mib=4096,
                          cuda_graph_max_batch=256 if graphs else 0, **step)
    estimated, measured, reserved, gauges = _boot(shape, config)
    print(_comparison(shape, estimated, measured))

    assert sum(gauges[c.name] for c in measured.components) == reserved == gauges["reserved"]
    assert measured.component("allocator_overhead").num_bytes >= 0
    assert (measured.component("cuda_graphs").num_bytes > 0) is graphs
    for exact in ("weights", "kv_cache"):
        assert estimated.component(exact).num_bytes == measured.component(exact).num_bytes, exact
    # Issue 7's bar is 10% for the 8B shape. Qwen3-0.6B's 1-10 MiB projections share the allocator's 20 MiB
    # segments with the down projections, so the parts the fusion frees stay stranded in them (about 575 MiB
    # measured on the H200), which the estimate does not model: 15% there.
    tolerance = 0.10 if shape == "llama3-8b" else 0.15
    assert abs(estimated.total_bytes - measured.total_bytes) <= tolerance * measured.total_bytes
    measured.check_fits()


def _boot(shape: str, config: EngineConfig) -> tuple[MemoryBudget, MemoryBudget, int, dict[str, float]]:
    """What a boot of `config` on the shape does to memory, with random weights: the estimate, the measured
    budget, the allocator's reserved bytes and the gauges. Model, pool and graphs are gone when it returns."""
    model_config = model_config_for_shape(shape)
    limit = memory_limit(config)
    kv_pool = plan_kv_pool(config, model_config)
    estimated = estimate_budget(config, model_config, kv_pool, limit)
    estimated.check_fits()
    model = random_causal_lm(model_config, torch.bfloat16, "cuda", seed=0,
                             attention_backend=select_attention_backend(config))
    kv_cache = build_kv_cache(config, model_config, kv_pool.num_blocks)
    graph_bytes = 0
    if config.cuda_graph_max_batch:  # captured before the profile: a capture empties the allocator's cache
        decode_graphs = DecodeGraphs(model, kv_cache, max_batch=config.cuda_graph_batch,
                                     max_model_len=kv_pool.max_model_len)
        graph_bytes = reserved_growth(decode_graphs.capture, kv_cache.device)
    measured = measure_budget(model, kv_cache, config, kv_pool, limit, cuda_graph_bytes=graph_bytes)
    return estimated, measured, torch.cuda.memory_reserved(), _gauges(measured)


def _gauges(budget: MemoryBudget) -> dict[str, float]:
    """The budget gauges per component and the allocator's reserved gauge, read through a registry."""
    registry = CollectorRegistry()
    registry.register(MemoryBudgetCollector(budget))
    registry.register(CudaAllocatorCollector(cuda_allocator_reader(budget.device)))
    values = {c.name: registry.get_sample_value("arbi_memory_budget_bytes", {"component": c.name})
              for c in budget.components}
    values["reserved"] = registry.get_sample_value("arbi_cuda_allocator_reserved_bytes")
    return values


def _comparison(shape: str, estimated: MemoryBudget, measured: MemoryBudget) -> str:
    lines = [f"\n{shape}: component, estimated MiB, measured MiB, estimate/measured"]
    for component in measured.components:
        planned = estimated.component(component.name).num_bytes
        ratio = f"{planned / component.num_bytes:.3f}" if component.num_bytes else "-"
        lines.append(f"  {component.name:<19}{planned / MIB:>12,.1f}{component.num_bytes / MIB:>12,.1f}  {ratio}")
    lines.append(f"  {'total':<19}{estimated.total_bytes / MIB:>12,.1f}{measured.total_bytes / MIB:>12,.1f}  "
                 f"{estimated.total_bytes / measured.total_bytes:.3f}")
    return "\n".join(lines)
